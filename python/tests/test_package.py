"""The package imports, the library loads and matches the header, and a
machine without a GPU gets a clear exception.  No torch, no GPU needed."""
import ctypes
import os
import re
import subprocess
import sys

import pytest

import ktune
from ktune import _lib

from conftest import REPO

C_TYPES = {
    "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64, "float": ctypes.c_float, "char": ctypes.c_char,
    "int": ctypes.c_int, "size_t": ctypes.c_size_t, "unsigned": ctypes.c_uint, "void": None,
    "ktune_status": ctypes.c_int, "ktune_dtype": ctypes.c_int, "ktune_gelu_approx": ctypes.c_int,
    "ktune_glu_act": ctypes.c_int, "ktune_ctx *": ctypes.c_void_p, "ktune_ctx **": ctypes.POINTER(ctypes.c_void_p),
    "void *": ctypes.c_void_p, "char *": ctypes.c_char_p, "float *": ctypes.POINTER(ctypes.c_float),
    "ktune_stats *": ctypes.POINTER(_lib.ktune_stats), "double": ctypes.c_double,
    "ktune_reduction": ctypes.c_int, "ktune_quant_mode": ctypes.c_int, "int64_t *": ctypes.POINTER(ctypes.c_int64),
    "uint32_t *": ctypes.POINTER(ctypes.c_uint32), "ktune_quant_format *": ctypes.POINTER(_lib.ktune_quant_format),
}


def _ctype(decl):
    """The ctypes type of a C declaration such as 'const void *a' or 'int64_t m'."""
    decl = re.sub(r"\bconst\b", "", decl).strip()
    m = re.match(r"^([A-Za-z_][\w ]*?)\s*(\**)\s*([A-Za-z_]\w*)?$", decl)
    base, stars = m.group(1).strip(), m.group(2)
    return C_TYPES[base + (" " + stars if stars else "")]


def header_prototypes():
    text = open(os.path.join(REPO, "include", "ktune.h")).read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    protos = {}
    for m in re.finditer(r"KTUNE_API\s+([\w\s\*]+?)\s*(ktune_\w+)\s*\(([^)]*)\)\s*;", text):
        ret, name, params = m.group(1), m.group(2), m.group(3).split(",")
        args = [] if params == ["void"] or params == [""] else [_ctype(p) for p in params]
        protos[name] = (_ctype(ret + " x"), args)
    return protos


def test_import_needs_no_library_and_no_torch():
    code = "import sys, ktune; assert 'torch' not in sys.modules; print(ktune.__version__)"
    env = dict(os.environ, KTUNE_LIBRARY="/nonexistent/libktune.so")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert re.match(r"\d+\.\d+\.\d+", out.stdout)


def test_missing_library_is_a_clear_error():
    code = "import ktune\ntry:\n ktune.library()\nexcept ktune.LibraryNotFoundError as e:\n print(e)"
    env = dict(os.environ, KTUNE_LIBRARY="/nonexistent/libktune.so")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "KTUNE_LIBRARY" in out.stdout and "/nonexistent/libktune.so" in out.stdout


def test_library_loads_with_the_package_version():
    lib = ktune.library()
    assert os.path.exists(lib.path) or lib.path.startswith("libktune")
    assert lib.version_text == ktune.__version__


def test_signatures_match_the_header():
    protos = header_prototypes()
    assert len(protos) >= 20  # the parse found the API, not nothing
    assert set(protos) == set(_lib.SIGNATURES), "include/ktune.h and _lib.SIGNATURES list different functions"
    for name, (ret, args) in protos.items():
        assert _lib.SIGNATURES[name] == (ret, args), name


def header_struct(name):
    """The fields of `typedef struct { ... } name;` in include/ktune.h: [(field, ctypes type)]."""
    text = open(os.path.join(REPO, "include", "ktune.h")).read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    body = re.search(r"typedef struct\s*\{([^}]*)\}\s*" + name + r"\s*;", text).group(1)
    return [(m.group(2), C_TYPES[m.group(1)]) for m in re.finditer(r"(\w+)\s+(\w+)\s*;", body)]


def test_stats_structure_matches_the_header():
    fields = header_struct("ktune_stats")
    assert len(fields) >= 13  # the parse found the fields
    assert [(n, t) for n, t in _lib.ktune_stats._fields_] == fields


def test_quant_format_structure_matches_the_header():
    assert [(n, t) for n, t in _lib.ktune_quant_format._fields_] == header_struct("ktune_quant_format")


def test_enum_values_match_the_header():
    """The reduction and quantisation-mode names the ops take, by their C values."""
    text = open(os.path.join(REPO, "include", "ktune.h")).read()
    for prefix, table in (("KTUNE_REDUCTION_", _lib.REDUCTIONS), ("KTUNE_QUANT_", _lib.QUANT_MODES),
                          ("KTUNE_", _lib.DTYPES)):
        for name, value in table.items():
            assert re.search(rf"\b{prefix}{name.upper()} = {value},", text), (prefix, name)


def test_stats_structure_has_the_c_layout():
    """Offsets and size as the C compiler lays the struct out (the host double
    was built against include/ktune.h and tells them)."""
    lib = ktune.library()
    if not lib.host:
        pytest.skip("only the host double reports the C layout")
    n = len(_lib.ktune_stats._fields_)
    offsets = (ctypes.c_size_t * n)()
    f = lib.cdll.ktune_test_stats_layout
    f.restype, f.argtypes = ctypes.c_size_t, [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
    size = f(offsets, n)
    assert size == ctypes.sizeof(_lib.ktune_stats)
    assert list(offsets) == [getattr(_lib.ktune_stats, name).offset for name, _ in _lib.ktune_stats._fields_]


def test_quant_sizes_through_ctypes():
    """A host function of the library (no GPU): the packed sizes of a weight
    and a bad format's reason, through the bindings."""
    lib = ktune.library()
    fmt = _lib.ktune_quant_format(bits=4, group_size=128, mode=_lib.QUANT_MODES["scale_shift"], zero_scalar=0)
    words, scales, zeros = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
    err = ctypes.create_string_buffer(256)
    args = [ctypes.addressof(x) for x in (words, scales, zeros)]
    assert lib.quant_sizes(ctypes.byref(fmt), 8, 256, *args, err, 256) == 0
    assert (words.value, scales.value, zeros.value) == (8 * 256 // 8, 8 * 2, 8 * 2)
    fmt.group_size = 48
    assert lib.name_of(lib.quant_sizes(ctypes.byref(fmt), 8, 256, *args, err, 256)) == "ERR_INVALID"
    assert b"group" in err.value


def test_status_names_come_from_the_library():
    lib = ktune.library()
    assert lib.name_of(-1) == "ERR_INVALID"
    assert lib.name_of(-3) == "ERR_NO_DRIVER"


def test_error_carries_status_name_and_message():
    e = ktune.Error(-1, "ERR_INVALID", "gemm: lda=3 is less than the row length 4")
    assert (e.status, e.name) == (-1, "ERR_INVALID")
    assert str(e) == "ERR_INVALID: gemm: lda=3 is less than the row length 4"


def test_no_gpu_is_a_clear_exception(no_gpu):
    with pytest.raises(ktune.Error) as e:
        ktune.context(0)
    assert e.value.name in ("ERR_NO_DRIVER", "ERR_NO_DEVICE")
    assert e.value.message  # ktune_open's reason, e.g. "cannot load 'libcuda.so.1'"


def test_bad_device_ordinal_is_a_value_error():
    for bad in (-1, True, "0", 1.0):
        with pytest.raises(ValueError):
            ktune.context(bad)


def test_db_path_setting(tmp_path):
    old = ktune.db_path()
    try:
        ktune.set_db_path(tmp_path / "k.db")
        assert ktune.db_path() == str(tmp_path / "k.db")
        ktune.set_db_path("")
        assert ktune.db_path() == ""
    finally:
        ktune.set_db_path(old)
