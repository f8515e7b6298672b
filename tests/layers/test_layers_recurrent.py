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
