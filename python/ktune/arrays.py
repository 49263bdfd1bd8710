"""What libktune needs to know of an array: its device pointer, shape,
strides (in elements), element type and device; taken from a torch tensor or
from any object with __cuda_array_interface__ (CuPy, Numba, ...), without
importing either library.  The checks every op shares live here too."""
import sys


class View:
    """An array as libktune sees it.  A plain class with slots: one is made
    for every tensor of every call, and a frozen dataclass's __init__ costs
    several times as much."""
    __slots__ = ("ptr", "shape", "strides", "dtype", "device", "readonly")

    def __init__(self, ptr, shape, strides, dtype, device, readonly=False):
        self.ptr = ptr  # int
        self.shape = shape  # tuple
        self.strides = strides  # tuple, in elements
        self.dtype = dtype  # "f16", "bf16" or "f32"; "i64", "i32" for index and packed-word tensors
        self.device = device  # ("cuda", ordinal) or ("cpu", None)
        self.readonly = readonly

    @property
    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __repr__(self):
        return (f"View(ptr={self.ptr:#x}, shape={self.shape}, strides={self.strides}, dtype={self.dtype!r}, "
                f"device={self.device!r}, readonly={self.readonly})")


_TORCH = {}  # torch dtype -> "f16", "bf16", "f32" (filled on first use: torch is not imported here)
# __cuda_array_interface__ typestr: little-endian float16/float32; bfloat16 has no typestr of its own
# (ml_dtypes' is "<V2", a void type, which says nothing), so it comes through torch only.
_TYPESTR = {"<f2": "f16", "<f4": "f32"}


def of_torch(t, name):
    """The View of a torch tensor (TypeError for a dtype libktune lacks)."""
    dt = _TORCH.get(t.dtype)
    if dt is None:
        torch = sys.modules["torch"]
        _TORCH.update({torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"})
        dt = _TORCH.get(t.dtype)
        if dt is None:
            raise TypeError(f"{name}: dtype {t.dtype} is not supported (float32, float16, bfloat16)")
    # t.device makes a new object each time; a CUDA tensor's ordinal comes cheaper
    dev = ("cuda", t.get_device()) if t.is_cuda else (t.device.type, t.device.index)
    return View(t.data_ptr(), tuple(t.shape), t.stride(), dt, dev)


_TORCH_INDEX = {}  # torch integer dtype -> "i64", "i32": class targets, packed quantized words


def of_torch_index(t, name):
    """The View of an int64 or int32 torch tensor (TypeError for another dtype)."""
    dt = _TORCH_INDEX.get(t.dtype)
    if dt is None:
        torch = sys.modules["torch"]
        _TORCH_INDEX.update({torch.int64: "i64", torch.int32: "i32"})
        dt = _TORCH_INDEX.get(t.dtype)
        if dt is None:
            raise TypeError(f"{name}: dtype {t.dtype} is not supported (int64, int32)")
    dev = ("cuda", t.get_device()) if t.is_cuda else (t.device.type, t.device.index)
    return View(t.data_ptr(), tuple(t.shape), t.stride(), dt, dev)


def of_cai(obj, name, device):
    """The View of an object with __cuda_array_interface__ (version 2 or 3) on
    CUDA device `device`; the interface does not tell the device."""
    cai = obj.__cuda_array_interface__
    shape = tuple(int(s) for s in cai["shape"])
    dt = _TYPESTR.get(cai["typestr"])
    if dt is None:
        raise TypeError(f"{name}: typestr {cai['typestr']!r} is not supported ('<f2' float16, '<f4' float32)")
    size = 2 if dt == "f16" else 4
    ptr, readonly = cai["data"]
    if cai.get("mask") is not None:
        raise ValueError(f"{name}: masked arrays are not supported")
    if cai.get("strides") is None:
        strides, acc = [], 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        strides = tuple(reversed(strides))
    else:
        if any(s % size for s in cai["strides"]):
            raise ValueError(f"{name}: strides {cai['strides']} are not multiples of the element size {size}")
        strides = tuple(s // size for s in cai["strides"])
    return View(int(ptr or 0), shape, strides, dt, ("cuda", device), bool(readonly))


def is_contiguous(v):
    acc = 1
    for size, stride in zip(reversed(v.shape), reversed(v.strides)):
        if size != 1 and stride != acc:
            return False
        acc *= size
    return True


def rows_of(v, name):
    """(rows, cols, ld) of an array seen as a matrix over its last dimension:
    its last stride 1 and the leading dimensions one uniform row stride ld
    >= cols.  ValueError otherwise."""
    if not v.shape:
        raise ValueError(f"{name}: a 0-d array has no rows")
    cols = v.shape[-1]
    rows = v.numel // cols if cols else 0
    if cols > 1 and v.strides[-1] != 1:
        raise ValueError(f"{name}: the last dimension must be contiguous (stride 1), not stride {v.strides[-1]}")
    lead = [(s, st) for s, st in zip(v.shape[:-1], v.strides[:-1]) if s != 1]
    if not lead:
        return rows, cols, max(cols, 1)
    ld = lead[-1][1]
    acc = ld
    for size, stride in reversed(lead):
        if stride != acc:
            raise ValueError(f"{name}: its rows are not evenly strided (shape {v.shape}, strides {v.strides})")
        acc *= size
    if ld < cols:
        raise ValueError(f"{name}: row stride {ld} is less than the row length {cols} (overlapping rows)")
    return rows, cols, ld


def matrix_of(v, name):
    """('n', ld) for a row-major 2-D array, ('t', ld) for a column-major one
    (a transposed view): the two layouts ktune_gemm reads.  ValueError
    otherwise."""
    if len(v.shape) != 2:
        raise ValueError(f"{name}: gemm takes 2-D arrays, not {len(v.shape)}-D")
    r, c = v.shape
    s0, s1 = v.strides
    if (c <= 1 or s1 == 1) and (r <= 1 or s0 >= c):
        return "n", (s0 if r > 1 else max(c, 1))
    if (r <= 1 or s0 == 1) and (c <= 1 or s1 >= r):
        return "t", (s1 if c > 1 else max(r, 1))
    raise ValueError(f"{name}: neither row- nor column-major (shape {v.shape}, strides {v.strides})")


def same(views, names, what="dtype"):
    """TypeError unless every view has the first one's dtype; ValueError unless
    the same device."""
    first = views[0]
    for v, n in zip(views[1:], names[1:]):
        if v.dtype != first.dtype:
            raise TypeError(f"{n}: dtype {v.dtype} differs from {names[0]}'s {first.dtype}")
        if v.device != first.device:
            raise ValueError(f"{n}: on {v.device}, {names[0]} on {first.device}")


def shape_is(v, shape, name):
    if tuple(v.shape) != tuple(shape):
        raise ValueError(f"{name}: shape {tuple(v.shape)} where {tuple(shape)} is needed")


def writable(v, name):
    if v.readonly:
        raise ValueError(f"{name}: is read-only")
