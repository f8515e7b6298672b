"""Normalization, noise, wrapper and miscellaneous layers against Keras 3's (torch backend)
in float64: with the same weights, the same outputs, input and weight gradients, and config
keys; the random layers by their inference identity and the statistics of their noise
(the random streams themselves differ from Keras's)."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")


import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

torch = pytest.importorskip("torch")
L = tp.layers
UNSUPPORTED_KEYS = {"activity_regularizer", "quantization_config"}


def check_layer_against_keras(ours, theirs, x, rng, training=False, weights=None):
    """Outputs and gradients (inputs, trainable weights) of two built layers on x."""
    xt = tp.tensor(x)
    ours(xt, training=training)
    theirs.build(x.shape)
    if weights is None:
        weights = [rng.normal(size=w.shape) for w in ours.get_weights()]
    assert [tuple(w.shape) for w in theirs.get_weights()] == [w.shape for w in weights]
    ours.set_weights(weights)
    theirs.set_weights(weights)
    with tp.GradientTape() as tape:
        tape.watch(xt)
        out = ours(xt, training=training)
        proj = rng.normal(size=out.shape)
        loss = tp.sum(out * tp.tensor(proj))
    grads = tape.gradient(loss, [xt] + ours.trainable_weights)
    xk = torch.tensor(x, requires_grad=True)
    ref = theirs(xk, training=training)
    (ref * torch.tensor(proj)).sum().backward()
    ref_grads = [xk.grad] + [w.value.grad for w in theirs.trainable_weights]
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    for i, (g, r) in enumerate(zip(grads, ref_grads, strict=True)):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"gradient {i}")
    for a, b in zip(ours.get_weights(), theirs.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    keys, their_keys = set(ours.get_config()), set(theirs.get_config())
    assert their_keys - keys <= UNSUPPORTED_KEYS and keys - their_keys <= {"trainable"}, keys ^ their_keys


CASES = [
    ("group_norm", "GroupNormalization", {"groups": 2}, (2, 3, 4)),
    ("group_norm_axis1", "GroupNormalization", {"groups": 3, "axis": 1, "center": False}, (2, 6, 2, 2)),
    ("group_norm_per_channel", "GroupNormalization", {"groups": -1, "epsilon": 0.1}, (2, 5, 3)),
    ("rms_norm", "RMSNormalization", {}, (3, 4)),
    ("rms_norm_axes", "RMSNormalization", {"axis": [1, 2], "epsilon": 0.01}, (2, 3, 4)),
    ("unit_norm", "UnitNormalization", {}, (3, 4)),
    ("unit_norm_axes", "UnitNormalization", {"axis": [1, 2]}, (2, 3, 4)),
    ("identity", "Identity", {}, (2, 3)),
    ("gaussian_noise", "GaussianNoise", {"stddev": 0.5}, (2, 3)),
    ("gaussian_dropout", "GaussianDropout", {"rate": 0.3}, (2, 3)),
    ("alpha_dropout", "AlphaDropout", {"rate": 0.3}, (2, 3)),
    ("spatial_dropout1d", "SpatialDropout1D", {"rate": 0.3}, (2, 3, 4)),
    ("spatial_dropout2d", "SpatialDropout2D", {"rate": 0.3}, (2, 3, 3, 2)),
    ("spatial_dropout3d", "SpatialDropout3D", {"rate": 0.3, "data_format": "channels_first"}, (1, 2, 3, 3, 2)),
    ("activity_regularization", "ActivityRegularization", {"l1": 0.1, "l2": 0.2}, (2, 3)),
]


@pytest.mark.parametrize("name, kwargs, shape", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_matches_keras(rng, name, kwargs, shape):
    x = rng.normal(size=shape)
    check_layer_against_keras(
        getattr(L, name)(dtype="float64", **kwargs), getattr(keras.layers, name)(dtype="float64", **kwargs), x, rng
    )


def test_activity_regularization_loss_matches_keras(rng):
    x = rng.normal(size=(4, 3))
    ours, theirs = L.ActivityRegularization(0.1, 0.2), keras.layers.ActivityRegularization(0.1, 0.2)
    ours(tp.tensor(x))
    theirs(x.astype("float32"))
    np.testing.assert_allclose([float(v) for v in ours.losses], [float(v) for v in theirs.losses], rtol=1e-5)


@pytest.mark.parametrize("inner", ["Dense", "Conv1D"])
def test_time_distributed_matches_keras(rng, inner):
    args = (3,) if inner == "Dense" else (2, 2)
    ours = L.TimeDistributed(getattr(L, inner)(*args, dtype="float64"), dtype="float64")
    theirs = keras.layers.TimeDistributed(getattr(keras.layers, inner)(*args, dtype="float64"), dtype="float64")
    check_layer_against_keras(ours, theirs, rng.normal(size=(2, 4, 5, 3) if inner == "Conv1D" else (2, 4, 3)), rng)
    assert ours.compute_output_shape((None, 4, 3) if inner == "Dense" else (None, 4, 5, 3))[:2] == (None, 4)


@pytest.mark.parametrize("training", [False, True])
def test_spectral_normalization_matches_keras(rng, training):
    ours = L.SpectralNormalization(L.Dense(3, dtype="float64"), power_iterations=2, dtype="float64")
    theirs = keras.layers.SpectralNormalization(keras.layers.Dense(3, dtype="float64"), power_iterations=2)
    weights = [rng.normal(size=(4, 3)), rng.normal(size=(1, 3)), rng.normal(size=(3,))]
    check_layer_against_keras(ours, theirs, rng.normal(size=(2, 4)), rng, training=training, weights=weights)
    assert [w.name for w in ours.weights][1] == ours.name + "/vector_u"


def test_noise_layers_statistics():
    x = tp.ones((200, 100), dtype="float64")
    y = L.GaussianNoise(0.5, seed=1, dtype="float64")(x, training=True).numpy()
    assert abs(y.mean() - 1.0) < 0.01 and abs(y.std() - 0.5) < 0.01
    y = L.GaussianDropout(0.2, seed=1, dtype="float64")(x, training=True).numpy()
    assert abs(y.mean() - 1.0) < 0.01 and abs(y.std() - 0.5) < 0.01
    alpha = L.AlphaDropout(0.2, seed=1, dtype="float64")
    z = tp.tensor(np.random.default_rng(0).normal(size=(200, 100)))
    y = alpha(z, training=True).numpy()
    assert abs(y.mean()) < 0.02 and abs(y.std() - 1.0) < 0.02  # SELU's fixed point is kept
    y = L.SpatialDropout2D(0.5, seed=3, dtype="float64")(tp.ones((50, 3, 3, 8), dtype="float64"), training=True)
    y = y.numpy()
    assert (y == y[:, :1, :1, :]).all() and 0.4 < (y == 0).mean() < 0.6 and set(np.unique(y)) <= {0.0, 2.0}
    with pytest.raises(ValueError, match="rate"):
        L.GaussianDropout(1.0)


def _double(x):
    return 2.0 * x


def test_lambda_config_and_safe_loading():
    layer = L.Lambda(_double, output_shape=(3,), arguments={})
    assert layer(tp.ones((1, 3))).numpy().tolist() == [[2.0, 2.0, 2.0]]
    config = layer.get_config()
    assert set(config) == {"name", "trainable", "dtype", "function", "output_shape", "arguments"}
    assert config["function"]["config"] == "_double" and "code" not in str(config)
    with pytest.raises(ValueError, match="unknown function '_double'"):
        L.Lambda.from_config(config)
    clone = L.Lambda.from_config(config, custom_objects={"_double": _double})
    assert clone.function is _double and clone.compute_output_shape((None, 3)) == (None, 3)
    assert type(L.deserialize(L.serialize(layer), custom_objects={"_double": _double})) is L.Lambda

    anonymous = L.Lambda(lambda x, scale: scale * x, arguments={"scale": 3.0})
    assert anonymous(tp.ones((1, 2))).numpy().tolist() == [[3.0, 3.0]]
    config = anonymous.get_config()
    assert config["function"]["class_name"] == "__lambda__" and "code" not in str(config)
    with pytest.raises(ValueError, match="safe_mode=False"):
        L.Lambda.from_config(config)
    with pytest.raises(ValueError, match="safe_mode=False"):
        L.deserialize(L.serialize(anonymous))
    with pytest.raises(ValueError, match="never runs code"):
        L.Lambda.from_config(config, safe_mode=False)
    clone = L.Lambda.from_config(config, safe_mode=False, function=lambda x, scale: scale * x + 1)
    assert clone(tp.ones((1, 1))).numpy().tolist() == [[4.0]]
    keras_keys = set(keras.layers.Lambda(_double, output_shape=(3,)).get_config())
    assert set(layer.get_config()) == keras_keys


def test_lambda_in_functional_model():
    inputs = L.Input((3,))
    outputs = L.Lambda(lambda x, training: x * 2.0 if training else x)(inputs)
    model = tp.Model(inputs, outputs)
    assert model(np.ones((1, 3)), training=True).numpy().tolist() == [[2.0, 2.0, 2.0]]
    assert outputs.shape == (None, 3)


@pytest.mark.parametrize(
    "name",
    [
        "TextVectorization",
        "StringLookup",
        "Hashing",
        "HashedCrossing",
        "TFSMLayer",
        "JaxLayer",
        "FlaxLayer",
        "TorchModuleWrapper",
    ],
)
def test_left_out_layers_say_why(name):
    with pytest.raises(NotImplementedError, match=f"{name} is not available in tapeflow: "):
        getattr(L, name)()
    with pytest.raises(NotImplementedError):
        L.deserialize({"class_name": name, "config": {}})


DOT_CASES = [
    ("dot_2d", {"axes": 1}, [(3, 4), (3, 4)]),
    ("dot_normalize", {"axes": -1, "normalize": True}, [(3, 4), (3, 4)]),
    ("dot_3d_pair", {"axes": (2, 1)}, [(2, 4, 3), (2, 3, 5)]),
    ("dot_3d_2d", {"axes": (1, 1)}, [(2, 4, 3), (2, 4)]),
    ("dot_4d", {"axes": [3, 2], "normalize": True}, [(2, 2, 3, 4), (2, 5, 4)]),
]


@pytest.mark.parametrize("kwargs, shapes", [c[1:] for c in DOT_CASES], ids=[c[0] for c in DOT_CASES])
def test_dot_matches_keras(rng, kwargs, shapes):
    xs = [rng.normal(size=s) for s in shapes]
    ours, theirs = L.Dot(dtype="float64", **kwargs), keras.layers.Dot(dtype="float64", **kwargs)
    ts = [tp.tensor(x) for x in xs]
    with tp.GradientTape() as tape:
        for t in ts:
            tape.watch(t)
        out = ours(ts)
        proj = rng.normal(size=out.shape)
        loss = tp.sum(out * tp.tensor(proj))
    grads = tape.gradient(loss, ts)
    ks = [torch.tensor(x, requires_grad=True) for x in xs]
    ref = theirs(ks)
    (ref * torch.tensor(proj)).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    for g, k in zip(grads, ks, strict=True):
        np.testing.assert_allclose(g.numpy(), k.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert ours.compute_output_shape([tuple(s) for s in shapes]) == tuple(ref.shape)
    assert set(ours.get_config()) == set(theirs.get_config())
    np.testing.assert_allclose(L.dot(ts, dtype="float64", **kwargs).numpy(), out.numpy())


def test_dot_errors():
    with pytest.raises(ValueError, match="batch axis"):
        L.Dot(0)([tp.ones((2, 3)), tp.ones((2, 3))])
    with pytest.raises(ValueError, match="incompatible"):
        L.Dot(1)([tp.ones((2, 3)), tp.ones((2, 4))])


EINSUM_CASES = [
    ("ab_bc", "ab,bc->ac", 4, "c", (3, 5)),
    ("abc_cd", "abc,cd->abd", (None, 4), "d", (2, 3, 5)),
    ("abc_cde", "abc,cde->abde", (3, 2, 4), "de", (2, 3, 5)),
    ("ellipsis_left", "...b,bc->...c", 4, None, (2, 3, 5)),
    ("ellipsis_left_bias", "...bc,cd->...bd", (3, 4), "bd", (2, 7, 3, 5)),
    ("ellipsis_right", "ab...,bc->ac...", 4, "c", (2, 5, 6)),
    ("summed_axis", "abc,bcd->ad", 4, None, (2, 3, 5)),
    ("dropped_input_axis", "abc,cd->ad", 4, None, (2, 3, 5)),
]


@pytest.mark.parametrize(
    "equation, output_shape, bias_axes, shape", [c[1:] for c in EINSUM_CASES], ids=[c[0] for c in EINSUM_CASES]
)
def test_einsum_dense_matches_keras(rng, equation, output_shape, bias_axes, shape):
    kwargs = {"equation": equation, "output_shape": output_shape, "bias_axes": bias_axes, "activation": "tanh"}
    ours, theirs = L.EinsumDense(dtype="float64", **kwargs), keras.layers.EinsumDense(dtype="float64", **kwargs)
    check_layer_against_keras(ours, theirs, rng.normal(size=shape), rng)
    assert ours.compute_output_shape((None, *shape[1:]))[1:] == ours(tp.ones(shape, dtype="float64")).shape[1:]


def test_einsum_dense_errors():
    with pytest.raises(ValueError, match="invalid einsum equation"):
        L.EinsumDense("ab,bc,cd->ad", 3)
    with pytest.raises(ValueError, match="shared axis 'c'"):
        L.EinsumDense("abc,bcd->acd", (2, 4))(tp.ones((2, 3, 5)))
    with pytest.raises(NotImplementedError, match="LoRA"):
        L.EinsumDense("ab,bc->ac", 3, lora_rank=2)


@pytest.mark.parametrize("tie_weights, cap", [(True, None), (False, 2.0)])
def test_reversible_embedding_matches_keras(rng, tie_weights, cap):
    kwargs = {"input_dim": 7, "output_dim": 3, "tie_weights": tie_weights, "logit_soft_cap": cap}
    ours = L.ReversibleEmbedding(dtype="float64", **kwargs)
    theirs = keras.layers.ReversibleEmbedding(dtype="float64", **kwargs)
    ids = rng.integers(0, 7, size=(2, 4))
    ours(tp.tensor(ids))
    theirs.build(ids.shape)
    weights = [rng.normal(size=w.shape) for w in theirs.get_weights()]
    ours.set_weights(weights)
    theirs.set_weights(weights)
    np.testing.assert_allclose(ours(tp.tensor(ids)).numpy(), theirs(ids).detach().numpy(), rtol=1e-5)
    hidden = rng.normal(size=(2, 4, 3))
    h = tp.tensor(hidden)
    with tp.GradientTape() as tape:
        tape.watch(h)
        logits = ours(h, reverse=True)
        loss = tp.sum(logits * logits)
    grads = tape.gradient(loss, [h] + ours.trainable_weights)
    hk = torch.tensor(hidden, requires_grad=True)
    ref = theirs(hk, reverse=True)
    (ref * ref).sum().backward()
    np.testing.assert_allclose(logits.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    ref_grads = [hk.grad] + [w.value.grad for w in theirs.trainable_weights]
    for g, r, w in zip(grads, ref_grads, [hidden, *weights], strict=True):
        g = np.zeros(w.shape) if g is None else g.numpy()  # an unused weight: no gradient on either side
        np.testing.assert_allclose(g, np.zeros(w.shape) if r is None else r.numpy(), rtol=1e-5, atol=1e-6)
    assert set(theirs.get_config()) - set(ours.get_config()) <= UNSUPPORTED_KEYS
    symbolic = L.Input((5, 3))
    assert ours(symbolic, reverse=True).shape == (None, 5, 7)


@pytest.mark.parametrize(
    "kwargs, call_kwargs",
    [
        ({}, {}),
        ({"use_gate": True, "use_bias": False}, {"use_causal_mask": True}),
        ({"sliding_window": 2}, {"return_attention_scores": True}),
    ],
    ids=["plain", "gate_causal", "window_scores"],
)
def test_grouped_query_attention_matches_keras(rng, kwargs, call_kwargs):
    args = {"head_dim": 3, "num_query_heads": 4, "num_key_value_heads": 2, **kwargs}
    ours = L.GroupQueryAttention(dtype="float64", **args)
    theirs = keras.layers.GroupQueryAttention(dtype="float64", **args)
    q, v = rng.normal(size=(2, 4, 6)), rng.normal(size=(2, 4, 6))
    ours(tp.tensor(q), tp.tensor(v))
    theirs.build(q.shape, v.shape)
    weights = [rng.normal(size=w.shape) * 0.5 for w in theirs.get_weights()]
    assert [w.shape for w in ours.get_weights()] == [w.shape for w in weights]
    ours.set_weights(weights)
    theirs.set_weights(weights)
    qt, vt = tp.tensor(q), tp.tensor(v)
    with tp.GradientTape() as tape:
        tape.watch(qt)
        tape.watch(vt)
        out = ours(qt, vt, **call_kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        projs = [rng.normal(size=o.shape) for o in outs]
        loss = sum(tp.sum(o * tp.tensor(p)) for o, p in zip(outs, projs, strict=True))
    grads = tape.gradient(loss, [qt, vt] + ours.trainable_weights)
    qk, vk = torch.tensor(q, requires_grad=True), torch.tensor(v, requires_grad=True)
    ref = theirs(qk, vk, **call_kwargs)
    refs = ref if isinstance(ref, tuple) else (ref,)
    sum((r * torch.tensor(p)).sum() for r, p in zip(refs, projs, strict=True)).backward()
    for o, r in zip(outs, refs, strict=True):
        np.testing.assert_allclose(o.numpy(), r.detach().numpy(), rtol=1e-5, atol=1e-6)
    ref_grads = [qk.grad, vk.grad] + [w.value.grad for w in theirs.trainable_weights]
    for i, (g, r) in enumerate(zip(grads, ref_grads, strict=True)):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"gradient {i}")
    assert set(ours.get_config()) == set(theirs.get_config()) - {"flash_attention"}
    clone = L.deserialize(L.serialize(ours))
    assert type(clone) is L.GroupQueryAttention and clone.num_key_value_heads == 2
    with pytest.raises(ValueError, match="divisible"):
        L.GroupQueryAttention(2, 3, 2)
