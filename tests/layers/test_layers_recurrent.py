"""Recurrent layers: masking, states, direction, and the single-step cell API,
checked against a plain NumPy loop and against the layers themselves on unpadded data."""

import numpy as np
import pytest

import tapeflow as tp

L = tp.layers


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _numpy_lstm(x, kernel, recurrent, bias):
    """Keras' LSTM equations, step by step (gates i, f, c, o)."""
    units = recurrent.shape[0]
    h = np.zeros((x.shape[0], units))
    c = np.zeros_like(h)
    outputs = []
    for t in range(x.shape[1]):
        z = x[:, t] @ kernel + h @ recurrent + bias
        i, f, g, o = np.split(z, 4, axis=-1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs, axis=1), h, c


def test_lstm_matches_numpy_reference_and_forget_bias_starts_at_one(rng):
    layer = L.LSTM(3, return_sequences=True, return_state=True, dtype="float64")
    x = rng.normal(size=(2, 4, 5))
    seq, h, c = layer(x)
    kernel, recurrent, bias = layer.get_weights()
    np.testing.assert_array_equal(bias, np.r_[np.zeros(3), np.ones(3), np.zeros(6)])
    ref_seq, ref_h, ref_c = _numpy_lstm(x, kernel, recurrent, bias)
    np.testing.assert_allclose(seq.numpy(), ref_seq, rtol=1e-12)
    np.testing.assert_allclose(h.numpy(), ref_h, rtol=1e-12)
    np.testing.assert_allclose(c.numpy(), ref_c, rtol=1e-12)


def test_recurrent_kernel_is_orthogonal_by_default():
    layer = L.SimpleRNN(4)
    layer(tp.ones((1, 2, 3)))
    u = layer.cell.recurrent_kernel.numpy()
    np.testing.assert_allclose(u @ u.T, np.eye(4), atol=1e-5)


@pytest.mark.parametrize("make", [lambda: L.LSTM(4, return_state=True), lambda: L.GRU(4, return_state=True)])
def test_padded_steps_do_not_change_the_final_state(rng, make):
    layer = make()
    lengths = [5, 3, 1]
    x = rng.normal(size=(3, 5, 2)).astype("float32")
    mask = np.arange(5)[None, :] < np.array(lengths)[:, None]
    padded = np.where(mask[..., None], x, 7.0).astype("float32")  # junk in the padding
    masked_out = layer(padded, mask=mask)
    for row, n in enumerate(lengths):
        alone = layer(x[row : row + 1, :n])
        for got, want in zip(masked_out, alone, strict=True):
            np.testing.assert_allclose(got.numpy()[row], want.numpy()[0], rtol=1e-5, atol=1e-6)


def test_leading_padding_keeps_the_zero_state(rng):
    layer = L.SimpleRNN(3, return_state=True)
    x = rng.normal(size=(1, 4, 2)).astype("float32")
    mask = np.array([[False, False, True, True]])
    out, h = layer(x, mask=mask)
    out_alone, h_alone = layer(x[:, 2:])
    np.testing.assert_allclose(h.numpy(), h_alone.numpy(), rtol=1e-6)


def test_masked_steps_repeat_the_previous_output_and_get_no_gradient(rng):
    layer = L.LSTM(3, return_sequences=True)
    x = tp.tensor(rng.normal(size=(2, 4, 2)).astype("float32"))
    mask = tp.tensor([[True, True, False, False], [True, False, True, False]])
    with tp.GradientTape() as tape:
        tape.watch(x)
        seq = layer(x, mask=mask)
        loss = tp.sum(seq)
    s = seq.numpy()
    np.testing.assert_array_equal(s[0, 2], s[0, 1])
    np.testing.assert_array_equal(s[0, 3], s[0, 1])
    np.testing.assert_array_equal(s[1, 1], s[1, 0])
    grad = tape.gradient(loss, x).numpy()
    assert np.all(grad[0, 2:] == 0) and np.all(grad[1, [1, 3]] == 0) and np.all(grad[0, :2] != 0)


def test_embedding_mask_feeds_a_recurrent_layer(rng):
    emb = L.Embedding(10, 4, mask_zero=True)
    lstm = L.LSTM(3)
    ids = np.array([[4, 2, 9, 0, 0], [1, 0, 0, 0, 0]])
    out = lstm(emb(ids), mask=emb.compute_mask(ids))
    np.testing.assert_allclose(out.numpy()[1], lstm(emb(ids[1:, :1])).numpy()[0], rtol=1e-6)
    assert L.LSTM(3, return_sequences=True).compute_mask(None, emb.compute_mask(ids)) is not None


def test_go_backwards_reads_the_sequence_reversed(rng):
    x = rng.normal(size=(2, 4, 3)).astype("float32")
    forward = L.GRU(2, return_sequences=True)
    backward = L.GRU(2, return_sequences=True, go_backwards=True)
    forward(x)
    backward(x)
    backward.set_weights(forward.get_weights())
    np.testing.assert_allclose(backward(x).numpy(), forward(x[:, ::-1]).numpy(), rtol=1e-6)


def test_initial_state_and_cell_step_agree(rng):
    x = rng.normal(size=(2, 3, 4))
    h0, c0 = rng.normal(size=(2, 5)), rng.normal(size=(2, 5))
    layer = L.LSTM(5, return_state=True, dtype="float64")
    out, h, c = layer(x, initial_state=[h0, c0])
    states = [tp.tensor(h0), tp.tensor(c0)]
    for t in range(3):  # the cell's one-step call, by hand
        step_out, states = layer.cell(x[:, t], states)
    np.testing.assert_allclose(out.numpy(), step_out.numpy(), rtol=1e-12)
    np.testing.assert_allclose(c.numpy(), states[1].numpy(), rtol=1e-12)
    assert not np.allclose(layer(x)[0].numpy(), out.numpy())


def test_rnn_runs_a_user_cell():
    class Accumulate(L.Layer):
        """A Keras-style cell without project/step: state += inputs."""

        state_size = 2

        def call(self, inputs, states):
            total = states[0] + inputs
            return total, [total]

    rnn = L.RNN(Accumulate(), return_sequences=True)
    seq = rnn(tp.ones((1, 3, 2)))
    assert seq.numpy()[0, :, 0].tolist() == [1.0, 2.0, 3.0]


def test_lstm_weights_and_config_are_keras_shaped():
    layer = L.LSTM(4, name="enc")
    layer(tp.ones((2, 3, 5)))
    assert [(w.name, w.shape) for w in layer.weights] == [
        ("enc/lstm_cell/kernel", (5, 16)),
        ("enc/lstm_cell/recurrent_kernel", (4, 16)),
        ("enc/lstm_cell/bias", (16,)),
    ]
    config = layer.get_config()
    assert config["units"] == 4 and config["recurrent_activation"] == "sigmoid" and "cell" not in config
    assert L.GRU(2).get_config()["reset_after"] is True


def _numpy_gru(x, kernel, recurrent, bias, input_mask, recurrent_mask):
    """Keras's GRU (reset_after) with one input mask and one recurrent mask per sequence."""
    u = recurrent.shape[0]
    h = np.zeros((x.shape[0], u))
    for t in range(x.shape[1]):
        xp = (x[:, t] * input_mask) @ kernel + bias[0]
        rec = (h * recurrent_mask) @ recurrent + bias[1]
        z = _sigmoid(xp[:, :u] + rec[:, :u])
        r = _sigmoid(xp[:, u : 2 * u] + rec[:, u : 2 * u])
        candidate = np.tanh(xp[:, 2 * u :] + r * rec[:, 2 * u :])
        h = z * h + (1 - z) * candidate
    return h


@pytest.mark.parametrize("name", ["LSTM", "GRU", "SimpleRNN"])
def test_recurrent_dropout_masks_hold_for_the_whole_sequence(name, rng):
    x = rng.normal(size=(3, 6, 5))
    layer = getattr(L, name)(4, dropout=0.4, recurrent_dropout=0.3, seed=7, dtype="float64")
    inference = layer(tp.tensor(x)).numpy()
    plain = getattr(L, name)(4, dtype="float64")
    plain(tp.tensor(x))
    plain.set_weights(layer.get_weights())
    np.testing.assert_allclose(inference, plain(tp.tensor(x)).numpy(), rtol=1e-12)  # no dropout at inference

    cell = layer.cell
    cell.begin_sequence(True)
    try:
        input_mask = cell._dropout_mask("inputs", tp.tensor(x[:, 0]), 0.4).numpy()
        recurrent_mask = cell._dropout_mask("recurrent", tp.zeros((3, 4), "float64"), 0.3).numpy()
        trained = layer._run(tp.tensor(x), None, layer._initial_states(3, None, tp.tensor(x))).numpy()
    finally:
        cell.end_sequence()
    assert set(np.unique(input_mask)) <= {0.0, 1 / 0.6} and set(np.unique(recurrent_mask)) <= {0.0, 1 / 0.7}
    assert 0 < (input_mask == 0).sum() < input_mask.size
    if name == "GRU":
        kernel, recurrent, bias = layer.get_weights()
        np.testing.assert_allclose(
            trained, _numpy_gru(x, kernel, recurrent, bias, input_mask, recurrent_mask), rtol=1e-10
        )
    # the same masks on a dropout-free copy, applied by hand to the inputs: equal when only input dropout acts
    if name == "SimpleRNN":
        kernel, recurrent, bias = layer.get_weights()
        h = np.zeros((3, 4))
        for t in range(6):
            h = np.tanh((x[:, t] * input_mask) @ kernel + (h * recurrent_mask) @ recurrent + bias)
        np.testing.assert_allclose(trained, h, rtol=1e-10)

    training = layer(tp.tensor(x), training=True).numpy()
    assert not np.allclose(training, inference)


def test_recurrent_dropout_trains_frozen_and_eagerly_and_configs_follow_keras():
    keras = pytest.importorskip("keras")
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(16, 5, 3)).astype("float32"), rng.normal(size=(16, 2)).astype("float32")
    for jit in (True, False):
        model = tp.Sequential([tp.Input((5, 3)), L.LSTM(4, dropout=0.2, recurrent_dropout=0.2, seed=1), L.Dense(2)])
        model.compile("sgd", "mse", jit=jit)
        history = model.fit(x, y, batch_size=8, epochs=2, verbose=0).history["loss"]
        assert np.isfinite(history).all()
    for name in ("LSTM", "GRU", "SimpleRNN"):
        kwargs = {"units": 3, "dropout": 0.25, "recurrent_dropout": 0.5, "seed": 4, "zero_output_for_mask": True}
        ours = getattr(L, name)(**kwargs).get_config()
        theirs = getattr(keras.layers, name)(**kwargs).get_config()
        for key in ("dropout", "recurrent_dropout", "seed", "zero_output_for_mask", "unroll", "stateful"):
            assert ours[key] == theirs.get(key, ours[key]), (name, key)  # Keras's SimpleRNN config has no seed
    with pytest.raises(ValueError, match="dropout must be a number in"):
        L.LSTM(2, dropout=1.5)


def test_zero_output_for_mask_outputs_zeros_at_masked_steps():
    x = np.ones((2, 4, 3), "float32")
    mask = np.array([[True, True, False, False], [True, False, True, True]])
    for zero in (False, True):
        layer = L.SimpleRNN(2, return_sequences=True, zero_output_for_mask=zero)
        out = layer(tp.tensor(x), mask=tp.tensor(mask)).numpy()
        masked = out[~mask]
        assert (np.abs(masked).sum(axis=-1) == 0).all() == zero
