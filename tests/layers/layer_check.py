"""`check_layer`: one helper that puts any layer through the checks every layer must pass.

1. The output shape equals `compute_output_shape` (also with an unknown batch size,
   and through a symbolic `Input`).
2. In float64, the gradient of a random projection of the output with respect to the
   inputs and every trainable weight matches central finite differences.
3. `get_config` -> `from_config` (and `serialize` -> `deserialize`) gives a layer that,
   given the same weights, computes the same output; the config is JSON-serializable.
4. `get_weights` -> a fresh layer's `set_weights` gives the same output.
5. An HDF5 weights file written from the layer loads into a clone with the same output.
6. The layer frozen into a graph (batch dimension dynamic, with and without the
   optimizing passes) computes the eager output.
"""

from __future__ import annotations

import json
import math
import os
import tempfile

import numpy as np

import tapeflow as tp


def _is_multi(input_shape) -> bool:
    return isinstance(input_shape, list)


def _as_list(value) -> list:
    return list(value) if isinstance(value, list | tuple) else [value]


def _shape_list(shape_or_shapes) -> list:
    """compute_output_shape's answer as a list of shapes (a list means several outputs)."""
    if isinstance(shape_or_shapes, list):
        return [tuple(s) for s in shape_or_shapes]
    return [tuple(shape_or_shapes)]


def make_inputs(input_shape, rng, int_range=None):
    """Random float64 arrays (or integer ids in [low, high)) of the given shape(s)."""

    def one(shape):
        if int_range is not None:
            return rng.integers(int_range[0], int_range[1], size=shape).astype(np.int64)
        return rng.normal(size=shape)

    return [one(s) for s in input_shape] if _is_multi(input_shape) else one(input_shape)


def _generators(layer) -> list:
    """Every random stream a layer (or a layer it holds) owns."""
    return [
        value
        for sub in layer._flatten_layers()
        for value in vars(sub).values()
        if isinstance(value, tp.random.Generator)
    ]


class _Forward:
    """Calls the layer with its random streams rewound, so repeated calls draw the same noise."""

    def __init__(self, layer, training: bool, call_kwargs: dict):
        self.layer = layer
        self.training = training
        self.call_kwargs = call_kwargs
        self.states = [(g, g.get_state()) for g in _generators(layer)]

    def __call__(self, inputs):
        for g, state in self.states:
            g.set_state(state)
        return _as_list(self.layer(inputs, training=self.training, **self.call_kwargs))


def _to_tensors(x):
    return [tp.tensor(a) for a in x] if isinstance(x, list) else tp.tensor(x)


def _projected_loss(outputs, projections):
    return sum(tp.sum(o * p) for o, p in zip(outputs, projections, strict=True))


def check_gradients(layer, x, *, training=False, call_kwargs=None, rng=None, samples=10, eps=1e-5, rtol=1e-5):
    """Compare tape gradients with central differences at up to `samples` random entries
    of each float input and each trainable weight."""
    rng = rng or np.random.default_rng(0)
    forward = _Forward(layer, training, call_kwargs or {})
    inputs = _to_tensors(x)
    input_list = _as_list(inputs)
    float_inputs = [i for i, t in enumerate(input_list) if t.dtype.kind == "f"]
    projections = [rng.normal(size=o.shape) for o in forward(inputs)]
    weights = layer.trainable_weights
    with tp.GradientTape() as tape:
        for i in float_inputs:
            tape.watch(input_list[i])
        loss = _projected_loss(forward(inputs), projections)
    sources = [input_list[i] for i in float_inputs] + weights
    grads = tape.gradient(loss, sources)

    def loss_at(new_inputs):
        return float(_projected_loss(forward(new_inputs), projections))

    arrays = [np.array(input_list[i].numpy()) for i in float_inputs]
    for k, (source, grad) in enumerate(zip(sources, grads, strict=True)):
        analytic = np.zeros(source.shape) if grad is None else np.asarray(grad.numpy())
        is_weight = k >= len(float_inputs)
        base = np.array(source.numpy())
        picks = rng.choice(base.size, size=min(samples, base.size), replace=False)
        numeric = []
        for flat in picks:
            values = []
            for sign in (1.0, -1.0):
                moved = base.copy()
                moved.flat[flat] += sign * eps
                if is_weight:
                    source.assign(moved)
                    values.append(loss_at(inputs))
                else:
                    new = [tp.tensor(a) for a in arrays]
                    new[float_inputs[k]] = tp.tensor(moved)
                    values.append(loss_at(new if isinstance(inputs, list) else new[0]))
            if is_weight:
                source.assign(base)
            numeric.append((values[0] - values[1]) / (2 * eps))
        label = source.name if is_weight else f"input {float_inputs[k]}"
        scale = max(1.0, float(np.abs(analytic).max(initial=0.0)))
        np.testing.assert_allclose(
            analytic.flat[picks], numeric, rtol=rtol, atol=rtol * scale, err_msg=f"{layer.name}: gradient of {label}"
        )


def _outputs_close(a, b, label):
    for u, v in zip(_as_list(a), _as_list(b), strict=True):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-12, atol=1e-12, err_msg=label)


def check_layer(
    layer_factory,
    input_shape,
    *,
    int_range=None,
    training: bool = False,
    call_kwargs=None,
    grad: bool = True,
    seed: int = 0,
):
    """Run checks 1-4 on `layer_factory(dtype="float64")` with inputs of `input_shape`
    (a list of shapes for a layer taking several inputs; integer ids in `int_range`)."""
    rng = np.random.default_rng(seed)
    call_kwargs = call_kwargs or {}
    x = make_inputs(input_shape, rng, int_range)
    layer = layer_factory(dtype="float64")
    out = layer(_to_tensors(x), training=training, **call_kwargs)
    assert layer.built
    shapes = [tuple(o.shape) for o in _as_list(out)]

    # 1. shapes: concrete, unknown batch, symbolic
    shapes_in = input_shape if _is_multi(input_shape) else [tuple(input_shape)]
    expected = layer.compute_output_shape(input_shape if _is_multi(input_shape) else tuple(input_shape))
    assert _shape_list(expected) == shapes, f"{layer.name}: outputs {shapes}, compute_output_shape {expected}"
    unknown = [(None, *s[1:]) for s in shapes_in]
    no_batch = [(None, *s[1:]) for s in shapes]
    expected = layer.compute_output_shape(unknown if _is_multi(input_shape) else unknown[0])
    assert _shape_list(expected) == no_batch, f"{layer.name}: with batch None, compute_output_shape {expected}"
    dtype = "int64" if int_range is not None else "float64"
    symbols = [tp.layers.Input(shape=s[1:], dtype=dtype) for s in shapes_in]
    symbolic = layer(symbols if _is_multi(input_shape) else symbols[0])
    assert [s.shape for s in _as_list(symbolic)] == no_batch

    # bookkeeping
    weights = layer.weights
    assert layer.count_params() == sum(math.prod(w.shape) for w in weights)
    assert len({w.name for w in weights}) == len(weights), [w.name for w in weights]
    for owner in layer._flatten_layers():
        owned = owner._trainable_variables + owner._non_trainable_variables
        assert all(w.name.startswith(owner.name + "/") for w in owned), [w.name for w in owned]
    assert all(w.dtype == "float64" for w in weights)

    # 2. gradients in float64
    if grad:
        check_gradients(layer, x, training=training, call_kwargs=call_kwargs, rng=rng)

    # 3. config round trips (compared at inference, where outputs are deterministic)
    reference = layer(_to_tensors(x), **call_kwargs)
    config = layer.get_config()
    json.dumps(config)
    for clone in (type(layer).from_config(config), tp.layers.deserialize(tp.layers.serialize(layer))):
        assert type(clone) is type(layer) and clone.get_config() == config
        clone(_to_tensors(x), **call_kwargs)
        clone.set_weights(layer.get_weights())
        _outputs_close(clone(_to_tensors(x), **call_kwargs), reference, f"{layer.name}: from_config clone")

    # 4. weights round trip into a fresh layer
    fresh = layer_factory(dtype="float64")
    fresh(_to_tensors(x), **call_kwargs)
    fresh.set_weights(layer.get_weights())
    _outputs_close(fresh(_to_tensors(x), **call_kwargs), reference, f"{layer.name}: set_weights copy")
    for a, b in zip(fresh.get_weights(), layer.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)

    # 5. save/load through an HDF5 weights file into a clone built from the config
    if weights:
        clone = type(layer).from_config(config)
        clone(_to_tensors(x), **call_kwargs)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "weights.h5")
            tp.io.save_weights(layer, path)
            report = tp.io.load_weights(clone, path)
        assert report.ok and len(report.matched) == len(weights), report
        _outputs_close(clone(_to_tensors(x), **call_kwargs), reference, f"{layer.name}: HDF5 round trip")

    # 6. frozen graph == eager
    check_frozen(layer, x, shapes_in, dtype, call_kwargs, reference)
    return layer


def check_frozen(layer, x, shapes_in, dtype, call_kwargs, reference):
    """The layer frozen at inference gives the eager `reference` outputs."""
    multi = isinstance(x, list)
    dynamic = not call_kwargs  # extra tensor arguments (masks) are fixed to this batch
    specs = [tp.TensorSpec(((None if dynamic else s[0]), *s[1:]), dtype) for s in shapes_in]

    def forward(*inputs):
        return layer(list(inputs) if multi else inputs[0], **call_kwargs)

    for optimize in (False, True):
        graph = tp.freeze(forward, *specs, optimize=optimize)
        graph.lint()
        frozen = graph(*(_as_list(x)))
        _outputs_close(frozen, reference, f"{layer.name}: frozen graph (optimize={optimize})")
