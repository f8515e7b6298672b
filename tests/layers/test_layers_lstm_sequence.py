"""LSTM run as one `lstm_sequence` op (training, Keras's default activations, no dropout) against Keras 3
itself (torch backend) with the same weights: outputs and gradients of the inputs, the
initial states and the weights, in float64, with and without masks, forwards and backwards;
and the layer falls back to the step-by-step path where the op does not apply."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import tapeflow as tp  # noqa: E402

L = tp.layers
TOL = 1e-7
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

MASKS = {
    "none": None,
    # leading masked steps (the output is zeros there while the state is the initial one),
    # a fully masked row, and gaps
    "gaps": np.array([[False, False, True, True, False], [True, False, True, False, True], [False] * 5]),
}


def _flat(values) -> list:
    return list(values) if isinstance(values, list | tuple) else [values]


def _keras(layer, x, h0, c0, mask, projections):
    tx, th, tc = (torch.tensor(a, requires_grad=True) for a in (x, h0, c0))
    kwargs = {} if mask is None else {"mask": torch.tensor(mask)}
    outs = _flat(layer(tx, initial_state=[th, tc], **kwargs))
    sum((o * torch.tensor(p)).sum() for o, p in zip(outs, projections, strict=True)).backward()
    grads = [t.grad.numpy() for t in (tx, th, tc)] + [w.value.grad.numpy() for w in layer.trainable_weights]
    return [o.detach().numpy() for o in outs], grads


def _ours(layer, x, h0, c0, mask, projections):
    tx, th, tc = (tp.tensor(a) for a in (x, h0, c0))
    kwargs = {} if mask is None else {"mask": tp.tensor(mask)}
    with tp.GradientTape() as tape:
        tape.watch([tx, th, tc])
        outs = _flat(layer(tx, initial_state=[th, tc], training=True, **kwargs))
        loss = sum(tp.sum(o * tp.tensor(p)) for o, p in zip(outs, projections, strict=True))
    grads = tape.gradient(loss, [tx, th, tc] + layer.trainable_weights)
    return [o.numpy() for o in outs], [g.numpy() for g in grads]


@pytest.mark.parametrize("mask_name", sorted(MASKS))
@pytest.mark.parametrize("backwards", [False, True])
@pytest.mark.parametrize("sequences, state", [(False, False), (True, False), (True, True), (False, True)])
def test_lstm_as_one_op_matches_keras(rng, mask_name, backwards, sequences, state):
    args = {"return_sequences": sequences, "return_state": state, "go_backwards": backwards, "dtype": "float64"}
    ours, theirs = L.LSTM(4, **args), keras.layers.LSTM(4, **args)
    x, h0, c0 = rng.normal(size=(3, 5, 6)), rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    mask = MASKS[mask_name]
    ours.build(x.shape)
    theirs.build(x.shape)
    theirs.set_weights([rng.normal(size=w.shape) * 0.5 for w in theirs.get_weights()])
    ours.set_weights(theirs.get_weights())
    k_outs = _flat(theirs(torch.tensor(x), initial_state=[torch.tensor(h0), torch.tensor(c0)]))
    projections = [rng.normal(size=tuple(o.shape)) for o in k_outs]
    k_outs, k_grads = _keras(theirs, x, h0, c0, mask, projections)
    o_outs, o_grads = _ours(ours, x, h0, c0, mask, projections)
    for a, b in zip(o_outs + o_grads, k_outs + k_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL)


def test_lstm_freezes_to_one_sequence_op_with_a_dynamic_batch(rng):
    layer = L.LSTM(3, return_sequences=True)
    x = rng.normal(size=(2, 7, 4)).astype("float32")
    eager = layer(tp.tensor(x)).numpy()
    graph = tp.freeze(lambda t: layer(t, training=True), tp.TensorSpec((None, 7, 4), "float32"))
    assert "lstm_sequence" in str(graph)
    assert "lstm_sequence" in str(tp.freeze(lambda t: layer(t), tp.TensorSpec((None, 7, 4), "float32")))
    np.testing.assert_allclose(graph(x).numpy(), eager, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs",
    [{"activation": "relu"}, {"recurrent_activation": "hard_sigmoid"}, {"dropout": 0.3}, {"recurrent_dropout": 0.3}],
)
def test_lstm_falls_back_to_steps_where_the_op_does_not_apply(rng, kwargs):
    layer = L.LSTM(3, seed=1, **kwargs)
    x = tp.tensor(rng.normal(size=(2, 4, 3)).astype("float32"))
    layer(x)
    layer.cell.begin_sequence(training=True)
    try:
        assert not layer._runs_as_one_op(None)
    finally:
        layer.cell.end_sequence()
    masked = L.LSTM(3, zero_output_for_mask=True)
    masked(x)
    masked.cell.begin_sequence(training=True)
    try:
        assert masked._runs_as_one_op(None) and not masked._runs_as_one_op(tp.ones((2, 4), "bool"))
    finally:
        masked.cell.end_sequence()
