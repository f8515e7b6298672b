"""One layer built the same way in tapeflow and in Keras 3 (torch backend), given the same
weights and input in float64: outputs, gradients (input and weights), weight shapes and
get_weights order, and config keys and values must agree."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import tapeflow as tp  # noqa: E402

# keys of Keras's configs that tapeflow's layers do not take (constraints, activity regularizers)
UNSUPPORTED_KEYS = {
    "activity_regularizer",
    "kernel_constraint",
    "bias_constraint",
    "depthwise_constraint",
    "pointwise_constraint",
    "recurrent_constraint",
    "zero_output_for_mask",
}


def run_ours(name, kwargs, x, proj, weights):
    layer = getattr(tp.layers, name)(dtype="float64", **kwargs)
    xt = tp.tensor(x)
    layer(xt)
    layer.set_weights(weights)
    with tp.GradientTape() as tape:
        tape.watch(xt)
        out = layer(xt)
        loss = tp.sum(out * tp.tensor(proj))
    grads = tape.gradient(loss, [xt] + layer.trainable_weights)
    return layer, out.numpy(), [g.numpy() for g in grads]


def run_keras(name, kwargs, x, proj, weights):
    layer = getattr(keras.layers, name)(dtype="float64", **kwargs)
    layer.build(x.shape)
    assert [tuple(w.shape) for w in layer.get_weights()] == [w.shape for w in weights]
    layer.set_weights(weights)
    xt = torch.tensor(x, requires_grad=True)
    out = layer(xt)
    (out * torch.tensor(proj)).sum().backward()
    grads = [xt.grad] + [w.value.grad for w in layer.trainable_weights]
    return layer, out.detach().numpy(), [g.numpy() for g in grads]


def check_against_keras(rng, name, kwargs, shape):
    """Same weights and input in both; outputs, gradients and config keys agree."""
    x = rng.normal(size=shape)
    probe = getattr(tp.layers, name)(dtype="float64", **kwargs)
    proj = rng.normal(size=probe(tp.tensor(x)).shape)
    weights = [rng.normal(size=w.shape) for w in probe.get_weights()]
    ours, out, grads = run_ours(name, kwargs, x, proj, weights)
    theirs, ref, ref_grads = run_keras(name, kwargs, x, proj, weights)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6, err_msg="output")
    assert len(grads) == len(ref_grads)
    for i, (g, r) in enumerate(zip(grads, ref_grads, strict=True)):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6, err_msg=f"gradient {i}")
    our_keys, their_keys = set(ours.get_config()), set(theirs.get_config())
    assert their_keys - our_keys <= UNSUPPORTED_KEYS
    assert our_keys <= their_keys
    for key in our_keys - {"name", "dtype"}:  # initializers stay names here; Keras serializes them
        if not key.endswith(("_initializer", "_regularizer")):
            assert _plain(ours.get_config()[key]) == _plain(theirs.get_config()[key]), key


def _plain(value):
    """Tuples and lists compare equal across the two libraries' configs."""
    return [_plain(v) for v in value] if isinstance(value, tuple | list) else value
