"""Argument checks raise the documented errors (TypeError: dtype, ValueError:
shape, layout, value) before any GPU work, on arrays that speak
__cuda_array_interface__ with pointers nothing ever reads: no torch, no GPU."""
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
