"""Bad input raises ValueError or TypeError, and the message names the op."""

import numpy as np
import pytest

import tapeflow as tp


def _img(shape=(1, 5, 5, 3), dtype="float32"):
    return tp.ones(shape, dtype=dtype)


CASES = [
    # mismatched shapes
    (lambda: tp.add(tp.ones((2, 3)), tp.ones((4, 3))), ValueError, "add"),
    (lambda: tp.ones((2, 3)) + tp.ones((3, 2)), ValueError, "add"),
    (lambda: tp.multiply(tp.ones((2,)), tp.ones((3,))), ValueError, "multiply"),
    (lambda: tp.matmul(tp.ones((2, 3)), tp.ones((4, 5))), ValueError, "matmul"),
    (lambda: tp.matmul(tp.ones((2, 2, 3)), tp.ones((3, 3, 4))), ValueError, "matmul"),
    (lambda: tp.concat([tp.ones((2, 3)), tp.ones((2, 4))], axis=0), ValueError, "concat"),
    (lambda: tp.concat([tp.ones((2, 3)), tp.ones((2, 3, 1))], axis=0), ValueError, "concat"),
    (lambda: tp.reshape(tp.ones((2, 3)), (4, 2)), ValueError, "reshape"),
    (lambda: tp.reshape(tp.ones((2, 3)), (-1, 4)), ValueError, "reshape"),
    (lambda: tp.reshape(tp.ones((2, 3)), (-1, -1)), ValueError, "reshape"),
    # bad axes
    (lambda: tp.sum(tp.ones((2, 3)), axis=2), ValueError, "sum"),
    (lambda: tp.sum(tp.ones((2, 3)), axis=-3), ValueError, "sum"),
    (lambda: tp.sum(tp.ones((2, 3)), axis=(0, 0)), ValueError, "sum"),
    (lambda: tp.sum(tp.ones((2, 3)), axis=[1.0]), TypeError, "sum"),
    (lambda: tp.argmax(tp.ones((2, 3)), axis=1.0), TypeError, "argmax"),
    (lambda: tp.concat([tp.ones((2, 3)), tp.ones((2, 3))], axis=2), ValueError, "concat"),
    (lambda: tp.argmax(tp.ones((2, 3)), axis=5), ValueError, "argmax"),
    (lambda: tp.transpose(tp.ones((2, 3, 4)), (0, 1)), ValueError, "transpose"),
    (lambda: tp.transpose(tp.ones((2, 3, 4)), (0, 1, 1)), ValueError, "transpose"),
    (lambda: tp.transpose(tp.ones((2, 3, 4)), (0, 1, 3)), ValueError, "transpose"),
    # wrong dtypes
    (lambda: tp.gather(tp.ones((4, 2)), [0.0, 1.0]), TypeError, "gather"),
    (lambda: tp.gather(tp.ones((4, 2)), tp.tensor([1.5])), TypeError, "gather"),
    (lambda: tp.ones((4, 2))[tp.tensor([0.0, 1.0])], TypeError, "getitem"),
    (lambda: tp.ones((4, 2))[np.array([0.5])], TypeError, "getitem"),
    (lambda: tp.ones((4, 2))[1.0], TypeError, "getitem"),
    (lambda: tp.ones((4, 2))[0.5:2], TypeError, "getitem"),
    (lambda: tp.exp(tp.tensor([1, 2])), TypeError, "exp"),
    (lambda: tp.log(tp.tensor([True])), TypeError, "log"),
    (lambda: tp.nn.conv2d(_img(), tp.ones((3, 3, 3, 2), dtype="float64")), TypeError, "conv2d"),
    (lambda: tp.nn.conv2d(_img(dtype="int32"), tp.ones((3, 3, 3, 2))), TypeError, "conv2d"),
    # conv2d geometry
    (lambda: tp.nn.conv2d(_img(), tp.ones((3, 3, 4, 2))), ValueError, "conv2d"),
    (lambda: tp.nn.conv2d(tp.ones((5, 5, 3)), tp.ones((3, 3, 3, 2))), ValueError, "conv2d"),
    (
        lambda: tp.nn.conv2d(_img(), tp.ones((7, 7, 3, 2)), padding="VALID"),
        ValueError,
        "conv2d",
    ),
    (lambda: tp.nn.conv2d(_img(), tp.ones((3, 3, 3, 2)), padding="FULL"), ValueError, "conv2d"),
    (
        lambda: tp.nn.conv2d(_img(), tp.ones((3, 3, 3, 2)), padding="same "),
        ValueError,
        "conv2d",
    ),
    (
        lambda: tp.nn.conv2d(_img(), tp.ones((3, 3, 3, 2)), padding=((1, -1), (0, 0))),
        ValueError,
        "conv2d",
    ),
    (lambda: tp.nn.max_pool2d(_img(), 2, padding="REFLECT"), ValueError, "max_pool2d"),
    (lambda: tp.nn.avg_pool2d(_img(), 2, padding=((1, 1), (1, 1))), ValueError, "avg_pool2d"),
    # strides: negative, zero, non-integer, non-finite
    (lambda: tp.nn.conv2d(_img(), tp.ones((3, 3, 3, 2)), strides=-1), ValueError, "conv2d"),
    (lambda: tp.nn.conv2d(_img(), tp.ones((3, 3, 3, 2)), strides=0), ValueError, "conv2d"),
    (
        lambda: tp.nn.conv2d(_img(), tp.ones((3, 3, 3, 2)), strides=(1, 1.5)),
        ValueError,
        "conv2d",
    ),
    (
        lambda: tp.nn.conv2d(_img(), tp.ones((3, 3, 3, 2)), strides=(np.inf, 1)),
        ValueError,
        "conv2d",
    ),
    (
        lambda: tp.nn.conv2d(_img(), tp.ones((3, 3, 3, 2)), strides=(np.nan, 1)),
        ValueError,
        "conv2d",
    ),
    (
        lambda: tp.nn.conv2d(_img(), tp.ones((3, 3, 3, 2)), dilations=(0, 1)),
        ValueError,
        "conv2d",
    ),
    (lambda: tp.nn.max_pool2d(_img(), 2, strides=(-2, 2)), ValueError, "max_pool2d"),
    # labels out of range
    (
        lambda: tp.nn.sparse_softmax_cross_entropy_with_logits(labels=[0, 3], logits=tp.ones((2, 3))),
        ValueError,
        "sparse_softmax_cross_entropy_with_logits",
    ),
    (
        lambda: tp.nn.sparse_softmax_cross_entropy_with_logits(labels=[-1, 0], logits=tp.ones((2, 3))),
        ValueError,
        "sparse_softmax_cross_entropy_with_logits",
    ),
    (
        lambda: tp.nn.sparse_softmax_cross_entropy_with_logits(labels=[[0, 5]], logits=tp.ones((1, 2, 3))),
        ValueError,
        "sparse_softmax_cross_entropy_with_logits",
    ),
    (
        lambda: tp.nn.sparse_softmax_cross_entropy_with_logits(labels=[0.0, 1.0], logits=tp.ones((2, 3))),
        TypeError,
        "sparse_softmax_cross_entropy_with_logits",
    ),
    # index ranges
    (lambda: tp.gather(tp.ones((4, 2)), [4]), ValueError, "gather"),
    (lambda: tp.ones((4, 2))[5], ValueError, "getitem"),
    (lambda: tp.scatter_add(tp.ones((3,)), [0, 3], tp.ones((2,))), ValueError, "scatter_add"),
    (lambda: tp.scatter_add(tp.ones((3,)), [0, 1], tp.ones((3,))), ValueError, "scatter_add"),
]


@pytest.mark.parametrize("call, error, name", CASES, ids=[f"{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_names_the_op(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_sum_float_axis_names_the_op():
    with pytest.raises(TypeError, match="sum"):
        tp.sum(tp.ones((2, 3)), axis=1.0)


@pytest.mark.parametrize("stride", [2.0, float("inf"), float("nan")])
def test_conv2d_scalar_float_stride_names_the_op(stride):
    with pytest.raises((ValueError, TypeError), match="conv2d"):
        tp.nn.conv2d(_img(), tp.ones((3, 3, 3, 2)), strides=stride)


def test_gradient_twice_on_a_non_persistent_tape():
    x = tp.tensor([1.0, 2.0])
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = tp.sum(x * x)
    tape.gradient(y, x)
    with pytest.raises(tp.TapeError, match="gradient"):
        tape.gradient(y, x)
    assert issubclass(tp.TapeError, ValueError)


def test_gradient_bad_output_gradients_and_mode():
    x = tp.tensor([1.0, 2.0])
    with tp.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * 3.0
    with pytest.raises(ValueError, match="gradient"):
        tape.gradient(y, x, output_gradients=tp.ones((3,)))
    with pytest.raises(ValueError, match="gradient"):
        tape.gradient(y, x, unconnected_gradients="ones")


@pytest.mark.parametrize("method", ["assign", "assign_add", "assign_sub"])
def test_variable_update_with_wrong_shape(method):
    v = tp.Variable(tp.zeros((2, 3)), name="w")
    with pytest.raises(ValueError, match=f"Variable.{method}"):
        getattr(v, method)(tp.ones((3, 2)))
    np.testing.assert_array_equal(v.numpy(), np.zeros((2, 3)))  # left as it was


def test_variable_assign_with_wrong_dtype_tensor():
    v = tp.Variable(tp.zeros((2,)), name="w")
    with pytest.raises(TypeError, match="Variable.assign"):
        v.assign(tp.ones((2,), dtype="float64"))
    np.testing.assert_array_equal(v.numpy(), np.zeros(2))


def test_bad_device_names_device():
    with pytest.raises(ValueError, match="device"):
        with tp.device("tpu:0"):
            pass
    with pytest.raises(TypeError, match="device"):
        with tp.device(3):
            pass


def test_uint64_values_beyond_int64_are_refused_not_wrapped():
    """2**64 - 1 used to become -1, so gather returned the last row."""
    with pytest.raises(ValueError, match=r"tensor: uint64 value 18446744073709551615 does not fit int64"):
        tp.tensor(np.array([2**64 - 1], np.uint64))
    assert tp.tensor(np.array([7], np.uint64)).numpy().tolist() == [7]


@pytest.mark.parametrize(
    "depth, error, message",
    [
        (2**63, ValueError, r"one_hot: depth must be an integer in \[0, 2147483647\], got 9223372036854775808"),
        (-1, ValueError, r"one_hot: depth must be an integer in \[0, 2147483647\], got -1"),
        (2.7, TypeError, r"one_hot: depth must be an integer, got 2.7"),
        (True, TypeError, r"one_hot: depth must be an integer, got True"),
    ],
)
def test_one_hot_depth_is_a_sensible_integer(depth, error, message):
    """A depth of 2**63 used to give shape (1, 0), and 2.7 silently meant 2."""
    with pytest.raises(error, match=message):
        tp.one_hot([1], depth)
    assert tp.one_hot([1], np.int64(3)).numpy().tolist() == [[0.0, 1.0, 0.0]]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x, w: tp.nn.conv2d(x, w, strides=2**31, padding="SAME"), r"conv2d: strides must be integers in \[1, "),
        (lambda x, w: tp.nn.conv2d(x, w, 1, "VALID", dilations=2**40), r"conv2d: dilations must be integers in \[1, "),
        (
            lambda x, w: tp.nn.conv2d(x, w, 1, ((0, 2**31), (0, 0))),
            r"conv2d: padding must be an integer in \[0, 2147483647\]",
        ),
        (lambda x, w: tp.nn.max_pool2d(x, 2**31, 1, "SAME"), r"max_pool2d: window must be integers in \[1, "),
    ],
)
def test_window_sizes_beyond_the_kernels_int_range_name_the_op(call, message):
    """Values of 2**31 or more used to leak Cython's 'value too large to convert to int'."""
    x, w = tp.ones((1, 4, 4, 1)), tp.ones((2, 2, 1, 1))
    with pytest.raises(ValueError, match=message):
        call(x, w)
