"""The specialization rules (tilefuse._C.specialize) as the full path (jit._specialize)
and the C++ launch fast path (FastPath.key) apply them, without a GPU: what each
argument becomes, and that the two paths tell the same arguments apart."""

import enum
import itertools

import numpy as np
import pytest
import tilefuse as tf
import tilefuse.language as tl
from tilefuse.defaults import NUM_STAGES, NUM_WARPS


@tf.jit
def one_arg(x):  # only specialized, never compiled
    pass


@tf.jit(do_not_specialize=("x",))
def one_arg_ns(x):
    pass


@tf.jit
def with_options(x, BLOCK: tl.constexpr = 16):
    pass


class _Dtype:
    """Stands in for a torch dtype: a singleton whose str() names it."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


F32, F16 = _Dtype("torch.float32"), _Dtype("torch.float16")


class _Tensor:
    """Stands in for a torch tensor (what both paths read of one)."""

    def __init__(self, offset, dtype=F32):
        self._ptr, self.dtype = 0x7F0000000000 + offset, dtype

    def data_ptr(self):
        return self._ptr

    def get_device(self):
        return 0


_Tensor.__module__ = "torch.fake"


class _Offset(_Tensor):
    """Overrides data_ptr: the fast path calls the methods of the argument's type."""

    def data_ptr(self):
        return self._ptr + 4


class _IntTensor(int):
    """An address whose data_ptr and get_device are C methods (as torch's are) and whose
    dtype is a data descriptor of the type (as torch's is)."""

    __slots__ = ()
    data_ptr = int.conjugate
    get_device = int.bit_length
    dtype = property(lambda self: F16)


_Offset.__module__ = _IntTensor.__module__ = "torch.fake"


class _Color(enum.IntEnum):
    RED = 16


def python_key(fn, v):
    return fn._specialize({"x": v})[0]


def fast_key(fn, v, **kwargs):
    fast = fn._fast_path()
    fast.add_tensor_types([_Tensor])
    return fast.key((1,), (v,), kwargs)


def spec_text(fn, v):
    """What the full path makes of argument x: '1' (a constant) or its type, ' %16' when hinted."""
    p = fn._specialize({"x": v})[1][0]
    if p.spec is None:
        return repr(p.value)
    return str(p.spec.type) + (" %16" if p.spec.divisible else "")


SCALARS = [1, 16, 17, -16, -17, 0, 2**31, 2**31 - 1, -(2**31), -(2**31) - 1, 2**63 - 1, -(2**63), True, False]
SCALARS += [1.0, 0.5, -0.0, np.float64(2.0), _Color.RED, 2**63, 2**64 - 16]
SCALARS += [np.int32(5), np.int32(16), np.uint32(5), np.int64(5), np.uint8(5), np.float32(0.5), np.bool_(True)]


@pytest.mark.parametrize(
    "value,want",
    [
        (1, "1"),
        (16, "i32 %16"),
        (17, "i32"),
        (-16, "i32 %16"),
        (0, "i32 %16"),
        (2**31, "i64 %16"),
        (2**31 - 1, "i32"),
        (-(2**31), "i32 %16"),
        (-(2**31) - 1, "i64"),
        (True, "i1"),
        (1.0, "f32"),
        (_Color.RED, "i32 %16"),
        # Ints from 2^63 on are u64 (Triton's rule); numpy scalars keep their dtype.
        (2**63, "u64 %16"),
        (2**64 - 1, "u64"),
        (np.int32(1), "i32"),
        (np.int32(16), "i32 %16"),
        (np.int16(-3), "i16"),
        (np.int64(5), "i64"),
        (np.uint8(200), "u8"),
        (np.uint32(4000000000), "u32 %16"),
        (np.uint64(2**64 - 1), "u64"),
        (np.float32(0.5), "f32"),
        (np.float64(2.0), "f64"),
        (np.bool_(True), "i1"),
    ],
)
def test_each_scalar_specializes_by_the_rules(value, want):
    assert spec_text(one_arg, value) == want


def test_do_not_specialize_keeps_one_and_drops_the_hint():
    assert spec_text(one_arg_ns, 1) == "i32" and spec_text(one_arg_ns, 16) == "i32"
    assert python_key(one_arg_ns, 1) == python_key(one_arg_ns, 17)
    assert fast_key(one_arg_ns, 1) == fast_key(one_arg_ns, 17)
    assert fast_key(one_arg, 1) != fast_key(one_arg, 17)


@pytest.mark.parametrize("fn", [one_arg, one_arg_ns])
def test_both_paths_tell_the_same_scalars_apart(fn):
    py = [python_key(fn, v) for v in SCALARS]
    fast = [fast_key(fn, v) for v in SCALARS]
    assert None not in fast
    for i, j in itertools.combinations(range(len(SCALARS)), 2):
        assert (py[i] == py[j]) == (fast[i] == fast[j]), (SCALARS[i], SCALARS[j])


def test_tensors_by_dtype_and_16_byte_alignment():
    tensors = [_Tensor(0), _Tensor(16), _Tensor(4), _Tensor(8), _Tensor(0, F16)]
    assert [spec_text(one_arg, t) for t in tensors] == ["ptr<f32> %16"] * 2 + ["ptr<f32>"] * 2 + ["ptr<f16> %16"]
    py = [python_key(one_arg, t) for t in tensors]
    fast = [fast_key(one_arg, t) for t in tensors]
    for i, j in itertools.combinations(range(len(tensors)), 2):
        if fast[i] == fast[j]:  # the fast path may tell more apart (the full path's alignment checks), never less
            assert py[i] == py[j]
        if py[i] != py[j]:
            assert fast[i] != fast[j]
    assert fast[0] == fast[1] and fast[2] != fast[3]


def test_tensor_reads_use_the_methods_and_descriptors_of_the_type():
    fast = one_arg._fast_path()
    fast.add_tensor_types([_Tensor, _Offset, _IntTensor])
    [(_, a0, _, d0)] = fast.key((1,), (_Tensor(0),), {})[1:]
    [(_, a4, _, _)] = fast.key((1,), (_Offset(0),), {})[1:]
    assert (a0, a4, d0) == (0, 4, F32)
    for address in (0x7F0000000010, 0x7F0000000004, 2**62 + 8):  # of several PyLong digits
        [(_, a, dev, d)] = fast.key((1,), (_IntTensor(address),), {})[1:]
        assert (a, dev, d) == (address % 16, address.bit_length(), F16)
        assert python_key(one_arg, _IntTensor(address)) == python_key(one_arg, _Tensor(address - 0x7F0000000000, F16))


def test_numpy_arrays_are_aligned_by_address_and_left_to_the_full_path():
    raw = np.zeros(64, np.uint8)
    base = (-raw.ctypes.data) % 16
    for offset, want in [(0, "ptr<f32> %16"), (4, "ptr<f32>"), (16, "ptr<f32> %16")]:
        a = raw[base + offset : base + offset + 32].view(np.float32)
        assert spec_text(one_arg, a) == want
        assert fast_key(one_arg, a) is None  # numpy runs on the interpreter


def test_the_fast_path_leaves_other_arguments_to_the_full_path():
    for v in (2**64, -(2**63) - 1):
        with pytest.raises(tf.LaunchError, match="does not fit in 64 bits"):
            python_key(one_arg, v)
    with pytest.raises(tf.LaunchError, match="cannot pass a complex"):
        python_key(one_arg, 1j)
    for v in (2**64, -(2**63) - 1, 1j, "text", None):
        assert fast_key(one_arg, v) is None


def test_the_fast_path_keys_the_launch_defaults():
    key = fast_key(with_options, 16)
    assert key == fast_key(with_options, 16, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    assert key == fast_key(with_options, 16, BLOCK=16)
    assert key != fast_key(with_options, 16, num_warps=NUM_WARPS * 2)
    assert key != fast_key(with_options, 16, num_stages=NUM_STAGES + 1)
    assert key != fast_key(with_options, 16, BLOCK=32)
