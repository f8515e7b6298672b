"""The 1-D convolution and pooling layers and the activation layers against Keras 3's (torch
backend) in float64: with the same weights, the same outputs, gradients (inputs and weights),
weight shapes and get_weights order, and the same config keys."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

torch = pytest.importorskip("torch")
L = tp.layers
# keys of Keras's configs that tapeflow's layers do not take (constraints, activity regularizers)
UNSUPPORTED_KEYS = {"activity_regularizer", "kernel_constraint", "bias_constraint"}

# (id, class name, kwargs, input shape)
CASES = [
    ("conv1d_valid", "Conv1D", {"filters": 3, "kernel_size": 3, "activation": "relu"}, (2, 9, 2)),
    ("conv1d_same_stride2", "Conv1D", {"filters": 4, "kernel_size": 4, "strides": 2, "padding": "same"}, (2, 9, 3)),
    (
        "conv1d_causal_dilated",
        "Conv1D",
        {"filters": 2, "kernel_size": 3, "padding": "causal", "dilation_rate": 2},
        (2, 8, 3),
    ),
    ("conv1d_groups", "Conv1D", {"filters": 4, "kernel_size": 2, "groups": 2, "use_bias": False}, (2, 6, 4)),
    ("conv1d_transpose_valid", "Conv1DTranspose", {"filters": 2, "kernel_size": 3, "strides": 2}, (2, 5, 3)),
    (
        "conv1d_transpose_same",
        "Conv1DTranspose",
        {"filters": 3, "kernel_size": 7, "strides": 2, "padding": "same"},
        (2, 6, 2),
    ),
    (
        "conv1d_transpose_output_padding",
        "Conv1DTranspose",
        {"filters": 2, "kernel_size": 3, "strides": 2, "output_padding": 1},
        (1, 4, 2),
    ),
    ("max_pooling1d", "MaxPooling1D", {}, (2, 7, 3)),
    ("max_pooling1d_same", "MaxPooling1D", {"pool_size": 3, "strides": 2, "padding": "same"}, (2, 8, 3)),
    ("average_pooling1d", "AveragePooling1D", {"pool_size": 3, "strides": 1}, (2, 7, 2)),
    ("average_pooling1d_same", "AveragePooling1D", {"pool_size": 2, "padding": "same"}, (2, 7, 2)),
    ("global_average_pooling1d", "GlobalAveragePooling1D", {}, (2, 5, 3)),
    (
        "global_average_pooling1d_first",
        "GlobalAveragePooling1D",
        {"data_format": "channels_first", "keepdims": True},
        (2, 5, 3),
    ),
    ("global_max_pooling1d", "GlobalMaxPooling1D", {"keepdims": True}, (2, 5, 3)),
    ("global_average_pooling2d", "GlobalAveragePooling2D", {}, (2, 3, 4, 2)),
    ("global_max_pooling2d", "GlobalMaxPooling2D", {"keepdims": True}, (2, 3, 4, 2)),
    ("global_average_pooling2d_first", "GlobalAveragePooling2D", {"data_format": "channels_first"}, (2, 3, 4, 2)),
    ("relu", "ReLU", {}, (3, 4)),
    ("relu_options", "ReLU", {"max_value": 0.8, "negative_slope": 0.2, "threshold": 0.3}, (3, 5)),
    ("relu_max_only", "ReLU", {"max_value": 6.0}, (3, 5)),
    ("leaky_relu", "LeakyReLU", {}, (3, 4)),
    ("leaky_relu_slope", "LeakyReLU", {"negative_slope": 0.2}, (3, 4)),
    ("elu", "ELU", {"alpha": 0.7}, (3, 4)),
    ("prelu", "PReLU", {"alpha_initializer": "random_normal"}, (2, 3, 4)),
    ("prelu_shared", "PReLU", {"alpha_initializer": "random_normal", "shared_axes": [1]}, (2, 3, 4)),
    ("softmax", "Softmax", {}, (3, 4)),
    ("softmax_axes", "Softmax", {"axis": [1, 2]}, (2, 3, 4)),
]


def _ours(name, kwargs, x, proj, weights=None, **call_kwargs):
    layer = getattr(L, name)(dtype="float64", **kwargs)
    xt = tp.tensor(x)
    layer(xt, **call_kwargs)
    if weights is not None:
        layer.set_weights(weights)
    with tp.GradientTape() as tape:
        tape.watch(xt)
        out = layer(xt, **call_kwargs)
        loss = tp.sum(out * tp.tensor(proj))
    grads = tape.gradient(loss, [xt] + layer.trainable_weights)
    return layer, out.numpy(), [g.numpy() for g in grads]


def _theirs(name, kwargs, x, proj, weights, **call_kwargs):
    layer = getattr(keras.layers, name)(dtype="float64", **kwargs)
    layer.build(x.shape)
    assert [tuple(w.shape) for w in layer.get_weights()] == [w.shape for w in weights]
    layer.set_weights(weights)
    xt = torch.tensor(x, requires_grad=True)
    out = layer(xt, **call_kwargs)
    (out * torch.tensor(proj)).sum().backward()
    grads = [xt.grad] + [w.value.grad for w in layer.trainable_weights]
    return layer, out.detach().numpy(), [g.numpy() for g in grads]


def assert_close(ours, theirs, label):
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6, err_msg=label)


@pytest.mark.parametrize("name, kwargs, shape", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_matches_keras(rng, name, kwargs, shape):
    x = rng.normal(size=shape)
    probe = getattr(L, name)(dtype="float64", **kwargs)
    out_shape = probe(tp.tensor(x)).shape
    proj = rng.normal(size=out_shape)
    weights = [rng.normal(size=w.shape) for w in probe.get_weights()]
    ours, out, grads = _ours(name, kwargs, x, proj, weights)
    theirs, ref, ref_grads = _theirs(name, kwargs, x, proj, weights)
    assert out.shape == ref.shape
    assert_close(out, ref, "output")
    assert len(grads) == len(ref_grads)
    for i, (g, r) in enumerate(zip(grads, ref_grads, strict=True)):
        assert_close(g, r, f"gradient {i}")
    our_keys, their_keys = set(ours.get_config()), set(theirs.get_config())
    assert their_keys - our_keys <= UNSUPPORTED_KEYS
    assert our_keys - their_keys <= ({"alpha"} if name == "ELU" else set())  # Keras's ELU forgets alpha


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_global_average_pooling1d_mask_matches_keras(rng, data_format):
    shape = (3, 5, 2) if data_format == "channels_last" else (3, 2, 5)
    x = rng.normal(size=shape)
    mask = np.array([[1, 1, 0, 1, 0], [1, 1, 1, 1, 1], [0, 1, 0, 0, 0]], dtype=bool)
    kwargs = {"data_format": data_format}
    proj = rng.normal(size=(3, 2))
    _, out, grads = _ours("GlobalAveragePooling1D", kwargs, x, proj, mask=tp.tensor(mask))
    _, ref, ref_grads = _theirs("GlobalAveragePooling1D", kwargs, x, proj, [], mask=torch.tensor(mask))
    assert_close(out, ref, "output")
    assert_close(grads[0], ref_grads[0], "gradient")


def test_softmax_mask_matches_keras(rng):
    x = rng.normal(size=(2, 3, 4))
    mask = rng.uniform(size=(2, 1, 4)) > 0.4
    proj = rng.normal(size=x.shape)
    _, out, grads = _ours("Softmax", {}, x, proj, mask=tp.tensor(mask))
    _, ref, ref_grads = _theirs("Softmax", {}, x, proj, [], mask=torch.tensor(mask))
    assert_close(out, ref, "output")
    assert_close(grads[0], ref_grads[0], "gradient")


def test_masked_mean_in_a_functional_model():
    ids = tp.Input((4,), dtype="int64")
    pooled = L.GlobalAveragePooling1D()(L.Embedding(5, 2, mask_zero=True, embeddings_initializer="ones")(ids))
    model = tp.Model(ids, pooled)
    out = model(np.array([[1, 2, 0, 0], [3, 0, 0, 0]])).numpy()
    np.testing.assert_allclose(out, np.ones((2, 2)))


def test_leaky_relu_accepts_keras_old_alpha():
    assert L.LeakyReLU(alpha=0.1).negative_slope == 0.1


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: L.Conv1D(2, 3, padding="full", name="c"), r"^c: padding must be 'valid' or 'same' or 'causal'"),
        (lambda: L.Conv1DTranspose(2, 3, padding="causal", name="c"), r"^c: padding must be 'valid' or 'same'"),
        (lambda: L.Conv1D(2, (3, 3), name="c"), r"^c: kernel_size must be a positive int or a tuple of 1"),
        (lambda: L.Conv1D(2, 3, data_format="channels_first", name="c"), r"^c: data_format must be 'channels_last'"),
        (lambda: L.Conv1D(3, 3, groups=2, name="c"), r"^c: groups must be a positive divisor of filters=3"),
        (lambda: L.Conv1DTranspose(2, 3, strides=2, output_padding=2, name="c"), r"^c: output_padding must be"),
        (lambda: L.MaxPooling1D(0, name="p"), r"^p: pool_size"),
        (lambda: L.GlobalAveragePooling1D(data_format="nhwc", name="p"), r"^p: data_format must be"),
        (lambda: L.ReLU(max_value=-1.0, name="r"), r"^r: max_value must be a non-negative number, got -1.0"),
        (lambda: L.ReLU(negative_slope=None, name="r"), r"^r: negative_slope must be a non-negative number"),
        (lambda: L.LeakyReLU(negative_slope=-0.1, name="r"), r"^r: negative_slope must be a non-negative number"),
        (lambda: L.PReLU(shared_axes=[0], name="r"), r"^r: shared_axes must be positive axes"),
        (lambda: L.Softmax(axis="last", name="s"), r"^s: axis must be an int or a list of ints, got 'last'"),
    ],
)
def test_bad_arguments_are_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_conv1d_window_longer_than_the_sequence():
    with pytest.raises(ValueError, match=r"^c: input size 2 is smaller than the window 3"):
        L.Conv1D(1, 3, name="c")(tp.ones((1, 2, 1)))
