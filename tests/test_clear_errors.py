"""Bad values that NumPy or Python would reject in their own words (an empty max, a ragged
list, an integer to a negative power, an integer scalar too wide for its tensor, a callback
that is not a list) are reported in tapeflow's: the op or argument and the offending value,
eagerly and in frozen graphs (where the graph's NodeError carries the op's own error)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import ops
from tapeflow.graph.executor import NodeError


def _frozen_error(fn, spec, value):
    """The error of the op that fails when the frozen graph of `fn` runs on `value`."""
    graph = tp.freeze(fn, spec)
    with pytest.raises(NodeError) as info:
        graph(value)
    return info.value.__cause__, str(info.value)


# ------------------------------------------------------------------ empty max, min, argmax
@pytest.mark.parametrize("name", ["max", "min", "argmax", "argmin"])
@pytest.mark.parametrize("shape, axis", [((0,), None), ((0, 3), 0), ((2, 0), None), ((2, 0), 1)])
def test_extremes_of_nothing_name_the_op_and_shape(name, shape, axis):
    x = tp.zeros(shape)
    for fn in (getattr(tp, name), getattr(ops, name)):
        with pytest.raises(ValueError, match=rf"{name}: .*shape {re.escape(str(shape))}"):
            fn(x, axis=axis)
    if hasattr(x, name):
        with pytest.raises(ValueError, match=rf"{name}: .*empty"):
            getattr(x, name)(axis=axis)
    spec = tp.TensorSpec((None,) * len(shape))
    cause, message = _frozen_error(lambda a: getattr(tp, name)(a, axis=axis), spec, x)
    assert isinstance(cause, ValueError), message
    assert f"{name}: zero-size reduction" in str(cause) and str(shape) in str(cause), message


def test_extremes_over_a_non_empty_axis_of_an_empty_tensor_are_empty():
    """Only the reduced axes must be non-empty (as in NumPy)."""
    x = tp.zeros((0, 3))
    assert tp.max(x, axis=1).shape == (0,)
    assert tp.argmin(x, axis=1).shape == (0,)
    graph = tp.freeze(lambda a: tp.min(a, axis=1), tp.TensorSpec((None, 3)))
    assert graph(x).shape == (0,)


# ------------------------------------------------------------------------------ ragged lists
@pytest.mark.parametrize(
    "value, depth, lengths",
    [
        ([[1, 2], [3]], 1, "[2, 1]"),
        ([[1.0], 2.0], 1, "[1, None]"),
        ([[[1, 2], [3, 4]], [[1, 2], [3]]], 2, "[2, 2, 2, 1]"),
    ],
)
def test_ragged_lists_name_the_lengths(value, depth, lengths):
    for make in (tp.constant, tp.tensor, lambda v: tp.tensor(v, dtype="float32"), ops.convert_to_tensor):
        with pytest.raises(ValueError, match=rf"ragged .* depth {depth} have lengths {re.escape(lengths)}"):
            make(value)
    with pytest.raises(ValueError, match="ragged"):  # a ragged constant in a function being frozen
        tp.freeze(lambda a: a + tp.constant(value), tp.TensorSpec((None,)))


def test_a_long_ragged_list_shows_a_few_lengths():
    with pytest.raises(ValueError, match=r"lengths \[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, \.\.\.\]"):
        tp.constant([[0]] * 30 + [[0, 1]])


def test_rectangular_and_empty_lists_still_convert():
    assert tp.constant([[1, 2], [3, 4]]).shape == (2, 2)
    assert tp.constant([]).shape == (0,)
    assert tp.constant([[], []]).shape == (2, 0)


def test_a_value_too_wide_for_the_requested_dtype_names_the_dtype():
    with pytest.raises(OverflowError, match=r"tensor: .*int32.*1099511627776"):
        tp.constant([1, 2**40], dtype="int32")


# ------------------------------------------------------------- integer negative powers
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_to_a_negative_integer_power_names_pow(dtype):
    x = tp.constant([1, 2, 3], dtype=dtype)
    pattern = rf"pow: integers to negative integer powers are not allowed \(exponent -1 for an {dtype} base\)"
    with pytest.raises(ValueError, match=pattern):
        x**-1
    with pytest.raises(ValueError, match=pattern):
        tp.pow(x, tp.constant([2, -1, 0], dtype=dtype))
    with pytest.raises(ValueError, match=pattern):
        ops.power(x, -1)
    cause, message = _frozen_error(lambda a: a**-1, tp.TensorSpec((None,), dtype), x)
    assert isinstance(cause, ValueError) and "pow: integers to negative" in str(cause), message


def test_the_powers_that_are_defined_still_work():
    x = tp.constant([1, 2, 3], dtype="int32")
    assert (x**2).numpy().tolist() == [1, 4, 9]
    assert (x**0).numpy().tolist() == [1, 1, 1]
    assert np.allclose((x**-1.0).numpy(), [1.0, 0.5, 1 / 3])
    assert np.allclose((tp.cast(x, "float32") ** -1).numpy(), [1.0, 0.5, 1 / 3])
    assert tp.pow(tp.zeros((0,), dtype="int32"), tp.zeros((0,), dtype="int32")).shape == (0,)


# ----------------------------------------------------------- integer scalars too wide
@pytest.mark.parametrize(
    "name, fn",
    [
        ("add", lambda x, v: x + v),
        ("add", lambda x, v: v + x),
        ("subtract", lambda x, v: x - v),
        ("multiply", lambda x, v: x * v),
        ("maximum", lambda x, v: tp.maximum(x, v)),
    ],
)
def test_an_integer_scalar_too_wide_for_an_int32_tensor_names_the_op_and_value(name, fn):
    x = tp.constant([1, 2], dtype="int32")
    pattern = rf"{name}: the Python integer {2**40} does not fit the int32"
    with pytest.raises(OverflowError, match=pattern):
        fn(x, 2**40)
    with pytest.raises(OverflowError, match=pattern):  # while freezing
        tp.freeze(lambda a: fn(a, 2**40), tp.TensorSpec((None,), "int32"))
    assert fn(x, 2**30).dtype == tp.int32  # a scalar that fits stays weak


def test_an_integer_scalar_too_wide_for_int64_says_so():
    with pytest.raises(OverflowError, match=rf"add: the Python integer {2**70} does not fit the int64.*widest"):
        tp.constant([1], dtype="int64") + 2**70


# ------------------------------------------------------------------------------ callbacks
class _Count(tp.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs = self.test_ends = 0

    def on_epoch_end(self, epoch, logs=None):
        self.epochs += 1

    def on_test_end(self, logs=None):
        self.test_ends += 1


def _model():
    model = tp.Sequential([tp.Input((2,)), tp.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_a_single_callback_is_taken_as_a_list_of_one_as_keras_does():
    """Keras 3 flattens `callbacks`, so one Callback instance works like [callback]."""
    x, y = np.ones((4, 2), "float32"), np.ones((4, 1), "float32")
    model = _model()
    single, nested = _Count(), _Count()
    model.fit(x, y, epochs=2, verbose=0, callbacks=single)
    model.fit(x, y, epochs=2, verbose=0, callbacks=[[nested], ()])
    assert single.epochs == nested.epochs == 2
    model.evaluate(x, y, verbose=0, callbacks=single)
    assert single.test_ends == 1
    assert model.predict(x, batch_size=2, verbose=0, callbacks=single).shape == (4, 1)


def test_keras_also_takes_a_single_callback():
    keras = pytest.importorskip("keras")

    class Count(keras.callbacks.Callback):
        epochs = 0

        def on_epoch_end(self, epoch, logs=None):
            Count.epochs += 1

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.ones((4, 2), "float32"), np.ones((4, 1), "float32"), epochs=2, verbose=0, callbacks=Count())
    assert Count.epochs == 2


@pytest.mark.parametrize("bad", ["early_stopping", 3, ["x"], [_Count(), None]])
def test_something_that_is_not_a_callback_names_the_argument_and_value(bad):
    x, y = np.ones((4, 2), "float32"), np.ones((4, 1), "float32")
    model = _model()
    with pytest.raises(TypeError, match=r"callbacks: expected a Callback or a list of Callbacks, got"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=bad)
    with pytest.raises(TypeError, match=r"callbacks: .* got"):
        model.evaluate(x, y, verbose=0, callbacks=bad)
    with pytest.raises(TypeError, match=r"callbacks: .* got"):
        model.predict(x, verbose=0, callbacks=bad)
