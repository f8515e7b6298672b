"""DLPack both ways: tapeflow tensors exported to torch and NumPy as private copies, and torch and
NumPy arrays read by `tp.from_dlpack`, with the values, dtypes, strides and sharing checked."""

import numpy as np
import pytest
import torch
import torch.utils.dlpack

import tapeflow as tp

DTYPES = ["float32", "float64", "float16", "int32", "int64", "bool"]


def _values(dtype, shape=(3, 4)):
    values = np.random.default_rng(0).standard_normal(shape) * 5
    return (values > 0) if dtype == "bool" else values.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_reads_a_copy_of_a_tapeflow_tensor(dtype):
    t = tp.tensor(_values(dtype))
    exported = torch.from_dlpack(t)
    np.testing.assert_array_equal(exported.numpy(), t.numpy())
    assert str(exported.dtype) == f"torch.{dtype}"
    assert exported.data_ptr() != t.numpy().ctypes.data


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_reads_a_copy_of_a_tapeflow_tensor(dtype):
    t = tp.tensor(_values(dtype))
    array = np.from_dlpack(t)
    np.testing.assert_array_equal(array, t.numpy())
    assert not np.shares_memory(array, t.numpy())


def test_nothing_a_consumer_does_changes_a_tensor_or_a_variable():
    t, v = tp.tensor([1.0, 2.0]), tp.Variable([3.0, 4.0])
    for source, want in ((t, [1.0, 2.0]), (v, [3.0, 4.0])):
        torch.from_dlpack(source).add_(10.0)
        torch.from_dlpack(source).zero_()
        np.from_dlpack(source)[...] = 7.0
        torch.utils.dlpack.from_dlpack(source.__dlpack__()).mul_(3.0)
        assert source.numpy().tolist() == want


def test_strided_tensors_keep_their_layout():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = tp.tensor(base[::2, 1::2])
    np.testing.assert_array_equal(torch.from_dlpack(t).numpy(), base[::2, 1::2])
    np.testing.assert_array_equal(np.from_dlpack(tp.transpose(tp.tensor(base), [1, 0])), base.T)


def test_a_consumer_of_old_dlpack_gets_a_copy():
    t = tp.tensor([1.0, 2.0, 3.0])
    copied = torch.utils.dlpack.from_dlpack(t.__dlpack__())  # a bare capsule: DLPack < 1.0
    copied += 1  # its own memory: the tensor is unchanged
    assert copied.tolist() == [2.0, 3.0, 4.0] and t.numpy().tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(BufferError, match="copy=False"):
        t.__dlpack__(copy=False)
    assert t.__dlpack_device__() == (1, 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_from_dlpack_shares_torch_memory(dtype):
    source = torch.from_numpy(np.ascontiguousarray(_values(dtype)))
    t = tp.from_dlpack(source)
    assert t.dtype == tp.as_dtype(dtype) and t.shape == tuple(source.shape)
    np.testing.assert_array_equal(t.numpy(), source.numpy())
    if dtype != "bool":
        source.add_(1)  # an in-place change by the owner shows through
        np.testing.assert_array_equal(t.numpy(), source.numpy())


def test_from_dlpack_copy_and_numpy_sources():
    source = torch.arange(6.0).reshape(2, 3)
    private = tp.from_dlpack(source, copy=True)
    source.mul_(0)
    assert private.numpy().tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    array = np.arange(6.0).reshape(3, 2)[:, ::-1]
    t = tp.from_dlpack(array)
    assert np.shares_memory(t.numpy(), array) and not t.numpy().flags.writeable
    np.testing.assert_allclose(tp.matmul(t, tp.from_dlpack(np.eye(2))).numpy(), array)


def test_round_trip_through_torch_and_back():
    t = tp.random.normal((5, 2))
    exported = torch.from_dlpack(t)
    back = tp.from_dlpack(exported)
    assert back.numpy().ctypes.data == exported.data_ptr()  # the import shares, the export copies
    np.testing.assert_array_equal(back.numpy(), t.numpy())


def test_from_dlpack_errors_name_the_problem():
    with pytest.raises(TypeError, match="from_dlpack: expected an object with __dlpack__"):
        tp.from_dlpack([1.0, 2.0])
    with pytest.raises(ValueError, match="from_dlpack: Tensor could not be exported.*detach"):
        tp.from_dlpack(torch.ones(2, requires_grad=True))

    class OnTheGpu:
        def __dlpack__(self, **kwargs):
            raise AssertionError("never asked for")

        def __dlpack_device__(self):
            return (2, 1)

    with pytest.raises(ValueError, match="CUDA:1.*host memory"):
        tp.from_dlpack(OnTheGpu())


def test_a_traced_tensor_cannot_be_exported():
    def escape(x):
        return tp.tensor(np.from_dlpack(x))

    with pytest.raises(tp.FreezeError):
        tp.freeze(escape, tp.TensorSpec((2,), "float32"))


def test_a_variable_exports_its_current_value():
    v = tp.Variable([1.0, 2.0])
    exported = torch.from_dlpack(v)
    v.assign([5.0, 6.0])
    assert exported.tolist() == [1.0, 2.0] and torch.from_dlpack(v).tolist() == [5.0, 6.0]
