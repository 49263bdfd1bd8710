"""Argument checks raise the documented errors (TypeError: dtype, ValueError:
shape, layout, value) before any GPU work, on arrays that speak
__cuda_array_interface__ with pointers nothing ever reads: no torch, no GPU."""
import math

import pytest

import ktune


class Arr:
    """A stand-in device array: __cuda_array_interface__ and nothing else."""
    _next = 0x7f0000000000

    def __init__(self, shape, typestr="<f2", strides=None, readonly=False):
        Arr._next += 1 << 24
        size = int(typestr[2:])  # strides are given in elements here, in bytes in the interface
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (Arr._next, readonly),
                                         "strides": strides and tuple(s * size for s in strides), "version": 3}


def A(*shape, **kw):
    return Arr(shape, **kw)


CASES = [
    # (call, exception, words in the message)
    (lambda: ktune.add(A(4), A(4, typestr="<f8")), TypeError, "typestr"),
    (lambda: ktune.add(A(4), A(4, typestr="<f4"), out=A(4)), TypeError, "differs"),
    (lambda: ktune.add(A(4), A(5), out=A(4)), ValueError, "shape"),
    (lambda: ktune.add(A(4, 4, strides=(4, 8)), A(4, 4), out=A(4, 4)), ValueError, "contiguous"),
    (lambda: ktune.add(A(4), A(4), out=A(4, readonly=True)), ValueError, "read-only"),
    (lambda: ktune.add([1.0], A(4)), TypeError, "list"),
    (lambda: ktune.gemm(A(3, 4), A(5, 2), out=A(3, 2)), ValueError, "inner"),
    (lambda: ktune.gemm(A(3, 4, typestr="<f4"), A(4, 2, typestr="<f4"), out=A(3, 2, typestr="<f4")), TypeError,
     "float32"),
    (lambda: ktune.gemm(A(3, 4, strides=(2, 12)), A(4, 2), out=A(3, 2)), ValueError, "neither row- nor column"),
    (lambda: ktune.gemm(A(3, 4), A(4, 2), out=A(2, 3)), ValueError, "shape"),
    (lambda: ktune.gemm(A(3), A(3, 2)), ValueError, "2-D"),
    (lambda: ktune.gelu(A(4), approximate="fast"), ValueError, "approximate"),
    (lambda: ktune.swiglu(A(4, 7), out=A(4, 3)), ValueError, "even"),
    (lambda: ktune.swiglu(A(4, 8), A(4, 6), out=A(4, 8)), ValueError, "rows of"),
    (lambda: ktune.softmax(A(4, 8), dim=0, out=A(4, 8)), ValueError, "last dimension"),
    (lambda: ktune.softmax(A(4, 8, strides=(8, 2)), out=A(4, 8)), ValueError, "stride 1"),
    (lambda: ktune.softmax(A(2, 3, 8, strides=(64, 16, 2)), out=A(2, 3, 8)), ValueError, "stride 1"),
    (lambda: ktune.softmax(A(2, 3, 8, strides=(100, 16, 1)), out=A(2, 3, 8)), ValueError, "evenly strided"),
    (lambda: ktune.softmax(A(4, 8, strides=(4, 1)), out=A(4, 8)), ValueError, "overlapping"),
    (lambda: ktune.softmax(A(4, 8), out=A(4, 8, strides=(16, 1), typestr="<f4")), TypeError, "dtype"),
    (lambda: ktune.dropout(A(8), 1.0, 0, out=A(8)), ValueError, "[0, 1)"),
    (lambda: ktune.dropout(A(8), -0.1, 0, out=A(8)), ValueError, "[0, 1)"),
    (lambda: ktune.dropout(A(8), 0.5, 1.5, out=A(8)), TypeError, "seed"),
    (lambda: ktune.rms_norm(A(4, 8), A(7), out=A(4, 8)), ValueError, "shape"),
    (lambda: ktune.rms_norm(A(4, 8), A(8, typestr="<f4"), out=A(4, 8)), TypeError, "differs"),
    (lambda: ktune.rms_norm(A(4, 8), A(8), eps=-1.0, out=A(4, 8)), ValueError, "eps"),
    (lambda: ktune.layer_norm(A(4, 8), None, A(9), out=A(4, 8)), ValueError, "bias"),  # no weight: bias checked
    (lambda: ktune.layer_norm(A(4, 8), A(8), A(8, typestr="<f4"), out=A(4, 8)), TypeError, "differs"),
]


@pytest.mark.parametrize("i", range(len(CASES)))
def test_bad_arguments_raise_documented_errors(i):
    call, exc, words = CASES[i]
    with pytest.raises(exc) as e:
        call()
    assert words in str(e.value)


def test_row_view_of_halves_is_accepted_until_the_gpu(no_gpu):
    """The halves of one [rows, 2c] array (the fused up-projection) pass the
    checks and reach the library, which says there is no GPU."""
    with pytest.raises(ktune.Error) as e:
        ktune.swiglu(A(4, 8), out=A(4, 4))
    assert e.value.name in ("ERR_NO_DRIVER", "ERR_NO_DEVICE")


def test_transposed_operands_are_accepted_until_the_gpu(no_gpu):
    """b = w.T (strides (1, K)): nn.Linear's layout is a valid gemm operand."""
    with pytest.raises(ktune.Error) as e:
        ktune.gemm(A(3, 4), A(4, 5, strides=(1, 4)), out=A(3, 5))
    assert e.value.name in ("ERR_NO_DRIVER", "ERR_NO_DEVICE")


def test_every_forward_op_without_a_gpu_raises_ktune_error(no_gpu):
    calls = [lambda: ktune.add(A(4), A(4), out=A(4)), lambda: ktune.gelu(A(4), out=A(4)),
             lambda: ktune.dropout(A(8), 0.1, 1, out=A(8)), lambda: ktune.softmax(A(2, 8), out=A(2, 8)),
             lambda: ktune.gemm(A(2, 8), A(8, 2), out=A(2, 2))]
    for c in calls:
        with pytest.raises(ktune.Error):
            c()


# --- the torch-only ops: their checks come before the library or a device is asked ------------------
# (CPU tensors here: with the real library, the checks must fire before its "no GPU" error would)

def _t(torch, *shape, dtype="bfloat16", grad=False):
    return torch.zeros(shape, dtype=getattr(torch, dtype), requires_grad=grad)


def _i(torch, *shape, dtype="int64"):
    return torch.zeros(shape, dtype=getattr(torch, dtype))


TORCH_CASES = [
    # cross_entropy
    (lambda T: ktune.cross_entropy(_t(T, 4, 8, dtype="int32"), _i(T, 4)), TypeError, "dtype"),
    (lambda T: ktune.cross_entropy(_t(T, 2, 4, 8), _i(T, 2, 4)), ValueError, "2-D"),
    (lambda T: ktune.cross_entropy(_t(T, 4, 8), _i(T, 4, dtype="int32")), TypeError, "int64"),
    (lambda T: ktune.cross_entropy(_t(T, 4, 8), _i(T, 5)), ValueError, "shape"),
    (lambda T: ktune.cross_entropy(_t(T, 4, 8), [0, 1, 2, 3]), TypeError, "list"),
    (lambda T: ktune.cross_entropy(_t(T, 4, 8), _i(T, 4), reduction="avg"), ValueError, "reduction"),
    (lambda T: ktune.cross_entropy(_t(T, 4, 8), _i(T, 4), label_smoothing=1.5), ValueError, "label_smoothing"),
    (lambda T: ktune.cross_entropy(_t(T, 4, 8), _i(T, 4), softcap=0.0), ValueError, "softcap"),
    (lambda T: ktune.cross_entropy(_t(T, 4, 8), _i(T, 4), softcap=float("inf")), ValueError, "softcap"),
    (lambda T: ktune.cross_entropy(_t(T, 4, 8), _i(T, 4), ignore_index=1.5), TypeError, "ignore_index"),
    (lambda T: ktune.cross_entropy(_t(T, 4, 0), _i(T, 4)), ValueError, "vocab"),
    (lambda T: ktune.cross_entropy(_t(T, 4, 262145), _i(T, 4)), ValueError, "vocab"),
    (lambda T: ktune.cross_entropy(_t(T, 4, 8), _i(T, 4).to("meta")), ValueError, "meta"),
    (lambda T: ktune.cross_entropy_fused(_t(T, 4, 8), _i(T, 4), dloss=float("nan")), ValueError, "dloss"),
    # linear_cross_entropy
    (lambda T: ktune.linear_cross_entropy(_t(T, 4, 8, dtype="float32"), _t(T, 6, 8, dtype="float32"), _i(T, 4)),
     TypeError, "float32"),
    (lambda T: ktune.linear_cross_entropy(_t(T, 4, 8), _t(T, 6, 8, dtype="float16"), _i(T, 4)), TypeError,
     "differs"),
    (lambda T: ktune.linear_cross_entropy(_t(T, 4, 8), _t(T, 6, 9), _i(T, 4)), ValueError, "weight"),
    (lambda T: ktune.linear_cross_entropy(_t(T, 4, 8), _t(T, 6, 8), _i(T, 4), reduction="none"), ValueError,
     "reduction"),
    (lambda T: ktune.linear_cross_entropy(_t(T, 2, 3, 8), _t(T, 6, 8), _i(T, 6)), ValueError, "shape"),
    # attention
    (lambda T: ktune.attention(*[_t(T, 1, 2, 4, 64, dtype="float32")] * 3), TypeError, "float32"),
    (lambda T: ktune.attention(*[_t(T, 2, 4, 64)] * 3), ValueError, "4-D"),
    (lambda T: ktune.attention(*[_t(T, 1, 2, 4, 32)] * 3), ValueError, "head_dim 32"),
    (lambda T: ktune.attention(_t(T, 1, 3, 4, 64), _t(T, 1, 2, 4, 64), _t(T, 1, 2, 4, 64)), ValueError,
     "multiple"),
    (lambda T: ktune.attention(_t(T, 1, 2, 4, 64), _t(T, 1, 2, 4, 64), _t(T, 1, 2, 5, 64)), ValueError, "shape"),
    (lambda T: ktune.attention(_t(T, 2, 2, 4, 64), _t(T, 1, 2, 4, 64), _t(T, 1, 2, 4, 64)), ValueError, "batch"),
    (lambda T: ktune.attention(_t(T, 1, 2, 4, 64), _t(T, 1, 2, 0, 64), _t(T, 1, 2, 0, 64)), ValueError, "no keys"),
    (lambda T: ktune.attention(*[_t(T, 1, 2, 4, 64)] * 3, scale=0.0), ValueError, "scale"),
    (lambda T: ktune.attention(*[_t(T, 1, 2, 4, 256, grad=True)] * 3), ValueError, "no backward"),
    # the quantized GEMM and its format
    (lambda T: ktune.quant_pack(_t(T, 8, 40), ktune.QuantFormat(4, 0)), ValueError, "multiple of 32"),
    (lambda T: ktune.quant_pack(_t(T, 8, 64), ktune.QuantFormat(4, 128)), ValueError, "group size"),
    (lambda T: ktune.quant_pack(_t(T, 8, 64, dtype="float32")), TypeError, "float32"),
    (lambda T: ktune.quant_pack(_t(T, 64)), ValueError, "2-D"),
    (lambda T: ktune.quant_pack(_t(T, 8, 64), "4-bit"), TypeError, "QuantFormat"),
    (lambda T: ktune.quant_pack(_t(T, 8, 64).fill_(float("nan")), ktune.QuantFormat(4, 32)), ValueError, "NaN"),
    (lambda T: ktune.gemm_quant(_t(T, 3, 64), _i(T, 8, 8, dtype="int32"), _t(T, 8, 2), _t(T, 8, 2), "fmt"),
     TypeError, "QuantFormat"),
    (lambda T: ktune.gemm_quant(_t(T, 3, 64, dtype="float32"), _i(T, 8, 8, dtype="int32"), _t(T, 8, 2),
                                _t(T, 8, 2), ktune.QuantFormat(4, 32)), TypeError, "float32"),
    (lambda T: ktune.gemm_quant(_t(T, 3, 64), _i(T, 8, 8), _t(T, 8, 2), _t(T, 8, 2), ktune.QuantFormat(4, 32)),
     TypeError, "int32"),
    (lambda T: ktune.gemm_quant(_t(T, 3, 64), _i(T, 8, 4, dtype="int32"), _t(T, 8, 2), _t(T, 8, 2),
                                ktune.QuantFormat(4, 32)), ValueError, "wq: shape"),
    (lambda T: ktune.gemm_quant(_t(T, 3, 64), _i(T, 8, 8, dtype="int32"), None, _t(T, 8, 2),
                                ktune.QuantFormat(4, 32)), ValueError, "needs them"),
    (lambda T: ktune.gemm_quant(_t(T, 3, 64), _i(T, 8, 8, dtype="int32"), _t(T, 8, 2), _t(T, 8, 2),
                                ktune.QuantFormat(4, 32, "scale")), ValueError, "has none"),
    (lambda T: ktune.gemm_quant(_t(T, 3, 64), _i(T, 8, 8, dtype="int32"), _t(T, 8, 2, dtype="float16"),
                                _t(T, 8, 2), ktune.QuantFormat(4, 32)), TypeError, "differs"),
    (lambda T: ktune.gemm_quant(_t(T, 3, 64), _i(T, 8, 8, dtype="int32"), _t(T, 8, 2), _t(T, 8, 2),
                                ktune.QuantFormat(4, 32), bias=_t(T, 9)), ValueError, "bias"),
]


@pytest.mark.parametrize("i", range(len(TORCH_CASES)))
def test_torch_ops_bad_arguments_raise_documented_errors(torch, i):
    call, exc, words = TORCH_CASES[i]
    with pytest.raises(exc) as e:
        call(torch)
    assert words in str(e.value)


@pytest.mark.parametrize("kw,exc,words", [
    (dict(bits=3), ValueError, "bits"), (dict(bits=True), ValueError, "bits"),
    (dict(group_size=16), ValueError, "group_size"), (dict(mode="int4"), ValueError, "mode"),
    (dict(zero_scalar=1), TypeError, "zero_scalar"),
])
def test_quant_format_checks_its_fields(kw, exc, words):
    with pytest.raises(exc) as e:
        ktune.QuantFormat(**kw)
    assert words in str(e.value)


def test_quant_sizes_need_no_gpu():
    """ktune_quant_sizes runs on any machine: the packed sizes, and libktune's own
    refusal (ktune.Error, its reason) of what the Python checks let through."""
    from ktune import calls
    assert ktune.QuantFormat(4, 128).sizes(4096, 4096) == (4096 * 512, 4096 * 32, 4096 * 32)
    assert ktune.QuantFormat(1, 0, "shift", True).sizes(3, 32) == (3 * 4, 0, 1)  # rows of 4 words (16 bytes)
    assert ktune.QuantFormat(8, 32, "scale").shapes(2, 64) == ((2, 16), (2, 2), None)
    for fmt in (ktune.QuantFormat(b, g, m, z) for b in (8, 4, 2, 1) for g in (32, 64, 128, 0)
                for m in ("scale_shift", "scale", "shift", "fma") for z in (False, True)):
        for n, k in ((1, 128), (3, 384), (5, 1024)):
            sizes = [0 if s is None else math.prod(s) for s in fmt.shapes(n, k)]
            assert tuple(sizes) == fmt.sizes(n, k), (fmt, n, k)  # Python's layout arithmetic, libktune's
    with pytest.raises(ktune.Error) as e:
        calls.quant_sizes(calls.quant_format(3, 128, 0, 0), 4, 128)
    assert e.value.name == "ERR_INVALID" and "bits 3" in e.value.message
