"""MultiHeadAttention against Keras (torch backend) with the same weights, in float64:
outputs, attention scores and gradients (inputs and weights), with masks, causal masks,
dropout off, several heads and ranks; masks through a functional model; config keys."""

import numpy as np
import pytest

import tapeflow as tp

keras = pytest.importorskip("keras")
torch = pytest.importorskip("torch")
L = tp.layers
RTOL = 1e-5  # Keras rounds part of the attention through float32


def _pair(rng, call_kwargs=None, **kwargs):
    """A tapeflow layer and a Keras layer of the same arguments, given the same weights."""
    ours = L.MultiHeadAttention(dtype="float64", **kwargs)
    theirs = keras.layers.MultiHeadAttention(dtype="float64", **kwargs)
    return ours, theirs


def _run_ours(layer, arrays, proj, **call_kwargs):
    tensors = [tp.tensor(a) for a in arrays]
    with tp.GradientTape() as tape:
        for t in tensors:
            tape.watch(t)
        result = layer(*tensors, **call_kwargs)
        out = result[0] if isinstance(result, tuple) else result
        loss = tp.sum(out * tp.tensor(proj))
    grads = tape.gradient(loss, tensors + layer.trainable_weights)
    scores = result[1].numpy() if isinstance(result, tuple) else None
    return out.numpy(), scores, [g.numpy() for g in grads]


def _run_theirs(layer, arrays, proj, **call_kwargs):
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    kwargs = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in call_kwargs.items()}
    result = layer(*tensors, **kwargs)
    out = result[0] if isinstance(result, tuple) else result
    for w in layer.trainable_weights:
        w.value.grad = None
    (out * torch.tensor(proj)).sum().backward()
    grads = [t.grad for t in tensors] + [w.value.grad for w in layer.trainable_weights]
    scores = result[1].detach().numpy() if isinstance(result, tuple) else None
    return out.detach().numpy(), scores, [g.numpy() for g in grads]


def assert_close(a, b, label):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=RTOL * max(1.0, np.abs(b).max()), err_msg=label)


CASES = [
    ("self", dict(num_heads=2, key_dim=3), [(2, 4, 5)], {}),
    ("cross_key", dict(num_heads=3, key_dim=2, value_dim=4), [(2, 4, 5), (2, 6, 3), (2, 6, 7)], {}),
    (
        "no_bias_output_shape",
        dict(num_heads=2, key_dim=3, use_bias=False, output_shape=(2, 3)),
        [(2, 3, 4), (2, 5, 4)],
        {},
    ),
    ("causal", dict(num_heads=2, key_dim=4), [(2, 5, 6)], {"use_causal_mask": True}),
    ("scores", dict(num_heads=2, key_dim=3), [(2, 4, 5), (2, 3, 5)], {"return_attention_scores": True}),
    ("rank4", dict(num_heads=2, key_dim=2), [(2, 3, 4, 5), (2, 3, 2, 5)], {"return_attention_scores": True}),
    ("rank4_two_axes", dict(num_heads=2, key_dim=2, attention_axes=(1, 2)), [(2, 3, 4, 5)], {}),
    ("gate_window", dict(num_heads=2, key_dim=3, use_gate=True, sliding_window=2), [(2, 5, 4)], {}),
]


@pytest.mark.parametrize("kwargs, shapes, call_kwargs", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_matches_keras(kwargs, shapes, call_kwargs, rng):
    arrays = [rng.normal(size=s) for s in shapes]
    if len(arrays) == 1:
        arrays = arrays * 2
    ours = L.MultiHeadAttention(dtype="float64", **kwargs)
    theirs = keras.layers.MultiHeadAttention(dtype="float64", **kwargs)
    ours(*[tp.tensor(a) for a in arrays])
    theirs(*[torch.tensor(a) for a in arrays])
    assert [tuple(w.shape) for w in ours.weights] == [tuple(w.shape) for w in theirs.weights]
    assert [w.name for w in ours.weights] == [f"{ours.name}/{w.path.split('/', 1)[1]}" for w in theirs.weights]
    theirs.set_weights(ours.get_weights())
    out_shape = ours(*[tp.tensor(a) for a in arrays]).shape
    proj = rng.normal(size=out_shape)
    out, scores, grads = _run_ours(ours, arrays, proj, **call_kwargs)
    ref, ref_scores, ref_grads = _run_theirs(theirs, arrays, proj, **call_kwargs)
    assert_close(out, ref, "output")
    if scores is not None:
        assert_close(scores, ref_scores, "scores")
    names = [f"input {i}" for i in range(len(arrays))] + [w.name for w in ours.trainable_weights]
    for g, r, name in zip(grads, ref_grads, names, strict=True):
        assert_close(g, r, name)


def test_masks_match_keras(rng):
    q, v = rng.normal(size=(2, 4, 5)), rng.normal(size=(2, 6, 5))
    q_mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool)
    v_mask = np.array([[1, 1, 1, 1, 0, 0], [1, 0, 1, 1, 1, 1]], bool)
    attention = rng.uniform(size=(2, 4, 6)) > 0.3
    attention[:, :, 0] = True  # every query keeps a key (Keras's fused path does not zero empty rows)
    ours = L.MultiHeadAttention(2, 3, dtype="float64")
    theirs = keras.layers.MultiHeadAttention(2, 3, dtype="float64")
    ours(tp.tensor(q), tp.tensor(v))
    theirs(torch.tensor(q), torch.tensor(v))
    theirs.set_weights(ours.get_weights())
    masks = dict(value_mask=v_mask, attention_mask=attention, use_causal_mask=True)
    proj = rng.normal(size=(2, 4, 5))
    out, _, grads = _run_ours(ours, [q, v], proj, **masks)
    ref, _, ref_grads = _run_theirs(theirs, [q, v], proj, **masks)
    assert_close(out, ref, "output")
    for g, r in zip(grads, ref_grads, strict=True):
        assert_close(g, r, "gradient")
    # the query's mask (Keras reads it from the query tensor itself)
    ours_out = ours(tp.tensor(q), tp.tensor(v), query_mask=q_mask, value_mask=v_mask).numpy()
    tq = torch.tensor(q)
    tq._keras_mask = torch.tensor(q_mask)
    ref = theirs(tq, torch.tensor(v), value_mask=torch.tensor(v_mask)).detach().numpy()
    assert_close(ours_out, ref, "output with query_mask")


def _text_model(lib):
    ids = lib.Input((6,), dtype="int64")
    x = lib.layers.Embedding(20, 8, mask_zero=True)(ids)
    x = lib.layers.MultiHeadAttention(2, 4)(x, x)
    x = lib.layers.LayerNormalization(epsilon=1e-6)(x)
    return lib.Model(ids, lib.layers.Dense(3)(x))


def test_embedding_masks_reach_attention_in_a_functional_model(rng):
    ids = np.array([[3, 5, 7, 0, 0, 0], [1, 2, 3, 4, 5, 0]])
    ours, theirs = _text_model(tp), _text_model(keras)
    theirs.set_weights(ours.get_weights())
    real = ids != 0  # padded queries attend to no key: Keras's value there is its kernel's choice
    assert_close(ours.predict(ids, verbose=0)[real], theirs.predict(ids, verbose=0)[real], "masked model")
    unmasked = _text_model(tp)
    unmasked.set_weights(ours.get_weights())
    unmasked.layers[1].mask_zero = False
    assert not np.allclose(unmasked.predict(ids, verbose=0)[real], ours.predict(ids, verbose=0)[real])


def test_frozen_matches_eager_and_training_dropout_changes_output(rng):
    layer = L.MultiHeadAttention(2, 3, dropout=0.5, seed=1)
    q = tp.tensor(rng.normal(size=(2, 4, 5)).astype("float32"))
    eager = layer(q, q, use_causal_mask=True)
    graph = tp.freeze(lambda x: layer(x, x, use_causal_mask=True), tp.TensorSpec((None, 4, 5), "float32"))
    np.testing.assert_allclose(graph(q.numpy()).numpy(), eager.numpy(), rtol=1e-6)
    assert not np.allclose(layer(q, q, training=True).numpy(), eager.numpy())


def test_config_has_keras_keys_and_round_trips():
    layer = L.MultiHeadAttention(2, 3, value_dim=4, dropout=0.1, output_shape=5, kernel_initializer="he_normal")
    reference = keras.layers.MultiHeadAttention(2, 3, value_dim=4, dropout=0.1, output_shape=5)
    config = layer.get_config()
    assert set(config) == set(reference.get_config())
    assert config["output_shape"] == (5,) and config["value_dim"] == 4
    clone = L.MultiHeadAttention.from_config(config)
    assert clone.get_config() == config


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_heads=0, key_dim=2), "num_heads must be a positive integer, got 0"),
        (dict(num_heads=2, key_dim=2.5), "key_dim must be a positive integer, got 2.5"),
        (dict(num_heads=2, key_dim=2, dropout=1.5), "dropout must be in"),
        (dict(num_heads=2, key_dim=2, kernel_constraint="no_such_constraint"), "kernel_constraint"),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        L.MultiHeadAttention(name="att", **kwargs)


def test_bad_inputs_are_refused():
    layer = L.MultiHeadAttention(2, 3, name="att")
    with pytest.raises(ValueError, match="att: value and key must have the same shape"):
        layer(tp.ones((1, 2, 4)), tp.ones((1, 3, 4)), tp.ones((1, 2, 4)))
    with pytest.raises(ValueError, match="att: query must have rank >= 3"):
        L.MultiHeadAttention(2, 3, name="att")(tp.ones((2, 4)), tp.ones((2, 4)))


ATTENTION_CASES = [
    ("dot", "Attention", {}, False),
    ("dot_scaled_causal", "Attention", {"use_scale": True}, True),
    ("concat", "Attention", {"score_mode": "concat", "use_scale": True}, False),
    ("additive", "AdditiveAttention", {}, True),
    ("additive_unscaled", "AdditiveAttention", {"use_scale": False}, False),
]


@pytest.mark.parametrize("cls, kwargs, causal", [c[1:] for c in ATTENTION_CASES], ids=[c[0] for c in ATTENTION_CASES])
def test_attention_layers_match_keras(cls, kwargs, causal, rng):
    q, v, k = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 5, 3))
    q_mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool)
    v_mask = np.array([[1, 1, 1, 1, 0], [1, 0, 1, 1, 1]], bool)
    ours = getattr(L, cls)(dtype="float64", **kwargs)
    theirs = getattr(keras.layers, cls)(dtype="float64", **kwargs)
    ours([tp.tensor(q), tp.tensor(v), tp.tensor(k)])
    theirs([torch.tensor(q), torch.tensor(v), torch.tensor(k)])
    assert [w.name.split("/")[-1] for w in ours.weights] == [w.name for w in theirs.weights]
    ours.set_weights([rng.normal(size=w.shape) for w in ours.weights])
    theirs.set_weights(ours.get_weights())
    proj = rng.normal(size=(2, 4, 3))

    tensors = [tp.tensor(a) for a in (q, v, k)]
    with tp.GradientTape() as tape:
        for t in tensors:
            tape.watch(t)
        out, scores = ours(tensors, mask=[q_mask, v_mask], return_attention_scores=True, use_causal_mask=causal)
        loss = tp.sum(out * tp.tensor(proj))
    grads = tape.gradient(loss, tensors + ours.trainable_weights)

    ttensors = [torch.tensor(a, requires_grad=True) for a in (q, v, k)]
    ref, ref_scores = theirs(
        ttensors,
        mask=[torch.tensor(q_mask), torch.tensor(v_mask)],
        return_attention_scores=True,
        use_causal_mask=causal,
    )
    (ref * torch.tensor(proj)).sum().backward()
    ref_grads = [t.grad for t in ttensors] + [w.value.grad for w in theirs.trainable_weights]
    assert_close(out.numpy(), ref.detach().numpy(), "output")
    assert_close(scores.numpy(), ref_scores.detach().numpy(), "scores")
    for g, r in zip(grads, ref_grads, strict=True):
        assert_close(g.numpy(), r.numpy(), "gradient")
    assert set(ours.get_config()) == set(theirs.get_config())


def test_attention_mask_flows_in_a_functional_model(rng):
    def build(lib):
        ids = lib.Input((5,), dtype="int64")
        x = lib.layers.Embedding(10, 4, mask_zero=True)(ids)
        return lib.Model(ids, lib.layers.Attention()([x, x]))

    ids = np.array([[1, 2, 3, 0, 0], [4, 5, 6, 7, 0]])
    ours, theirs = build(tp), build(keras)
    theirs.set_weights(ours.get_weights())
    assert_close(ours.predict(ids, verbose=0), theirs.predict(ids, verbose=0), "masked attention model")
