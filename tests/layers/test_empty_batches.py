"""Empty batches through every layer of `test_layers_check.CASES`, eagerly and frozen, in
training and in inference: the outputs keep the batch of 0 rows with the shapes that
`compute_output_shape` promises, no variable changes (moving statistics, counters, random
streams' seeds), and the gradients of the weights are zeros, never NaN.

Zero-size feature dimensions either work or raise a ValueError that names the layer."""

from __future__ import annotations

import numpy as np
import pytest
from layer_check import _as_list, _is_multi, make_inputs
from test_layers_check import CASES

import tapeflow as tp

# Layers whose training call updates a variable whatever the batch holds, as in Keras: the
# update is a function of the weights alone, so an empty batch changes it like any other.
_UPDATED_PER_CALL = {"spectral_norm": "one power iteration on the kernel per training call"}


def _emptied(input_shape):
    if _is_multi(input_shape):
        return [(0, *s[1:]) for s in input_shape]
    return (0, *input_shape[1:])


def _state(layer) -> list[np.ndarray]:
    return [np.array(v.numpy(), copy=True) for v in layer.weights]


def _call(layer, x, training, call_kwargs):
    inputs = [tp.constant(a) for a in x] if isinstance(x, list) else tp.constant(x)
    return layer(inputs, training=training, **call_kwargs)


def _expected_shapes(layer, input_shape) -> list[tuple]:
    expected = layer.compute_output_shape(input_shape if _is_multi(input_shape) else tuple(input_shape))
    if isinstance(expected, tuple) and (not expected or not isinstance(expected[0], tuple | list)):
        expected = [expected]
    return [tuple(s) for s in expected]


def _cases():
    for name, factory, input_shape, kwargs in CASES:
        yield pytest.param(factory, input_shape, {**kwargs, "per_call": name in _UPDATED_PER_CALL}, id=name)


@pytest.mark.parametrize("factory, input_shape, kwargs", list(_cases()))
def test_an_empty_batch_changes_no_state_eagerly_or_frozen(factory, input_shape, kwargs):
    rng = np.random.default_rng(0)
    int_range = kwargs.get("int_range")
    call_kwargs = kwargs.get("call_kwargs") or {}
    per_call = kwargs["per_call"]
    layer = factory(dtype="float64")
    full = make_inputs(input_shape, rng, int_range)
    _call(layer, full, False, call_kwargs)  # built on real rows, as in a model
    empty = make_inputs(_emptied(input_shape), rng, int_range)
    expected = _expected_shapes(layer, _emptied(input_shape))
    before = _state(layer)

    for training in (False, True):
        frozen = tp.function(
            lambda *xs, mode=training: _as_list(_call(layer, list(xs) if len(xs) > 1 else xs[0], mode, call_kwargs))
        )
        eager = [o.numpy() for o in _as_list(_call(layer, empty, training, call_kwargs))]
        assert [o.shape for o in eager] == expected, f"{layer.name} eager (training={training})"
        args = empty if isinstance(empty, list) else [empty]
        graph = [np.asarray(o) for o in frozen(*[tp.constant(a) for a in args])]
        assert [o.shape for o in graph] == expected, f"{layer.name} frozen (training={training})"
        if per_call:
            before = _state(layer)
            continue
        for after_value, before_value, w in zip(_state(layer), before, layer.weights, strict=True):
            np.testing.assert_array_equal(after_value, before_value, err_msg=f"{w.name} changed (training={training})")

    trainable = layer.trainable_weights
    if trainable and int_range is None:
        with tp.GradientTape() as tape:
            outputs = _as_list(_call(layer, empty, True, call_kwargs))
            loss = sum(tp.sum(tp.cast(o, "float64")) for o in outputs)
        grads = tape.gradient(loss, trainable)
        for g, w in zip(grads, trainable, strict=True):
            if g is not None:
                g = np.asarray(tp.convert_to_tensor(g).numpy())
                assert np.all(g == 0), f"{w.name}: gradient of an empty batch is not zero"
        assert np.isfinite(loss.numpy())
    if per_call:
        return
    for after_value, before_value, w in zip(_state(layer), before, layer.weights, strict=True):
        np.testing.assert_array_equal(after_value, before_value, err_msg=f"{w.name} changed by the gradient pass")


def _zero_feature_shapes(input_shape):
    shapes = input_shape if _is_multi(input_shape) else [input_shape]
    for i, shape in enumerate(shapes):
        for axis in range(1, len(shape)):
            zeroed = [tuple(s) for s in shapes]
            zeroed[i] = (*shape[:axis], 0, *shape[axis + 1 :])
            yield (zeroed if _is_multi(input_shape) else zeroed[0]), f"input{i}_axis{axis}"


@pytest.mark.parametrize("factory, input_shape, kwargs", list(_cases()))
def test_a_zero_size_dimension_works_or_is_refused_naming_the_layer(factory, input_shape, kwargs):
    rng = np.random.default_rng(1)
    int_range = kwargs.get("int_range")
    call_kwargs = kwargs.get("call_kwargs") or {}
    for shape, label in _zero_feature_shapes(input_shape):
        layer = factory(dtype="float64")
        x = make_inputs(shape, rng, int_range)
        try:
            outputs = _as_list(_call(layer, x, False, call_kwargs))
        except ValueError as e:
            assert layer.name in str(e) or type(layer).__name__ in str(e), f"{label}: {e}"
            continue
        for o in outputs:
            values = np.asarray(o.numpy())
            assert not np.isnan(values).any(), f"{layer.name} {label}: NaN from a zero-size input"


@pytest.mark.parametrize("factory, input_shape, kwargs", list(_cases()))
def test_an_empty_batch_of_a_graph_with_an_unknown_batch_changes_no_state(factory, input_shape, kwargs):
    """The batch size is known only when the frozen graph runs: the state is kept all the same."""
    rng = np.random.default_rng(2)
    int_range = kwargs.get("int_range")
    call_kwargs = kwargs.get("call_kwargs") or {}
    layer = factory(dtype="float64")
    full = make_inputs(input_shape, rng, int_range)
    _call(layer, full, False, call_kwargs)
    shapes = input_shape if _is_multi(input_shape) else [input_shape]
    dtype = "int64" if int_range is not None else "float64"
    signature = [tp.TensorSpec((None, *s[1:]), dtype) for s in shapes]
    frozen = tp.function(
        lambda *xs: _as_list(_call(layer, list(xs) if len(xs) > 1 else xs[0], True, call_kwargs)),
        input_signature=signature,
    )
    try:
        frozen(*[tp.constant(a) for a in (full if isinstance(full, list) else [full])])
    except TypeError as err:
        if "must be an integer, got None" not in str(err):
            raise
        pytest.skip("random draws need the batch size when the graph is traced")
    before = _state(layer)
    empty = make_inputs(_emptied(input_shape), rng, int_range)
    outputs = frozen(*[tp.constant(a) for a in (empty if isinstance(empty, list) else [empty])])
    assert all(np.asarray(o).shape[0] == 0 for o in outputs)
    if kwargs["per_call"]:
        return
    for after_value, before_value, w in zip(_state(layer), before, layer.weights, strict=True):
        np.testing.assert_array_equal(after_value, before_value, err_msg=f"{w.name} changed by an empty batch")
