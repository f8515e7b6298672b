"""Layers against PyTorch in float64: outputs and gradients (inputs and weights) to 1e-5.

Weight layouts differ, so each test copies weights across explicitly:
- Dense kernel [in, out] is torch's weight.T;
- Conv2D kernel HWIO is torch's OIHW weight transposed, and images NHWC vs NCHW;
  TensorFlow's 'same' padding puts any odd extra row/column at the bottom/right;
- LSTM gate order i, f, c, o is torch's i, f, g, o; torch has two biases (we put ours
  in bias_ih and zero bias_hh);
- GRU gate order is Keras z, r, h against torch r, z, n; both reset after the matmul.
"""

import numpy as np
import pytest

import tapeflow as tp

torch = pytest.importorskip("torch")
F = torch.nn.functional
L = tp.layers
RTOL = 1e-5


def _t(a, grad=True):
    return torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=grad)


def _tp_grads(layer, x, proj, **call_kwargs):
    """Output, d(sum(out * proj))/dx and /d(each trainable weight), from tapeflow."""
    x = tp.tensor(x)
    with tp.GradientTape() as tape:
        tape.watch(x)
        out = layer(x, **call_kwargs)
        loss = tp.sum(out * tp.tensor(proj))
    grads = tape.gradient(loss, [x] + layer.trainable_weights)
    return out.numpy(), [g.numpy() for g in grads]


def assert_close(ours, theirs, label=""):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else theirs
    np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=RTOL * max(1.0, np.abs(theirs).max()), err_msg=label)


def test_dense_matches_torch(rng):
    layer = L.Dense(5, activation="tanh", dtype="float64")
    x = rng.normal(size=(4, 3))
    layer(x)
    kernel, bias = layer.get_weights()
    proj = rng.normal(size=(4, 5))
    out, (gx, gk, gb) = _tp_grads(layer, x, proj)

    tx, tw, tb = _t(x), _t(kernel.T), _t(bias)
    ref = torch.tanh(F.linear(tx, tw, tb))
    (ref * _t(proj, False)).sum().backward()
    assert_close(out, ref, "output")
    assert_close(gx, tx.grad, "input grad")
    assert_close(gk, tw.grad.T, "kernel grad")
    assert_close(gb, tb.grad, "bias grad")


def _same_pads(size, k, s):
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


@pytest.mark.parametrize(
    "padding, strides, shape",
    [("valid", 1, (2, 7, 6, 3)), ("valid", 2, (2, 7, 6, 3)), ("same", 1, (2, 6, 5, 3)), ("same", 2, (2, 6, 5, 3))],
)
def test_conv2d_matches_torch(rng, padding, strides, shape):
    layer = L.Conv2D(4, (3, 2), strides=strides, padding=padding, dtype="float64")
    x = rng.normal(size=shape)
    layer.build(shape)
    layer.set_weights([rng.normal(size=w.shape) for w in layer.weights])
    kernel, bias = layer.get_weights()
    out_shape = layer.compute_output_shape(shape)
    proj = rng.normal(size=out_shape)
    out, (gx, gk, gb) = _tp_grads(layer, x, proj)

    tx, tw, tb = _t(x.transpose(0, 3, 1, 2)), _t(kernel.transpose(3, 2, 0, 1)), _t(bias)
    xin = tx
    if padding == "same":
        top, bottom = _same_pads(shape[1], 3, strides)
        left, right = _same_pads(shape[2], 2, strides)
        xin = F.pad(tx, (left, right, top, bottom))
    ref = F.conv2d(xin, tw, tb, stride=strides).permute(0, 2, 3, 1)
    assert tuple(ref.shape) == out.shape
    (ref * _t(proj, False)).sum().backward()
    assert_close(out, ref, "output")
    assert_close(gx, tx.grad.permute(0, 2, 3, 1), "input grad")
    assert_close(gk, tw.grad.permute(2, 3, 1, 0), "kernel grad")
    assert_close(gb, tb.grad, "bias grad")


def test_lstm_matches_torch(rng):
    batch, steps, features, units = 3, 5, 4, 6
    layer = L.LSTM(units, return_sequences=True, return_state=True, dtype="float64")
    x = rng.normal(size=(batch, steps, features))
    layer(x)
    layer.set_weights([rng.normal(size=w.shape) * 0.5 for w in layer.weights])
    kernel, recurrent, bias = layer.get_weights()
    projections = [rng.normal(size=s) for s in ((batch, steps, units), (batch, units), (batch, units))]

    tx = tp.tensor(x)
    with tp.GradientTape() as tape:
        tape.watch(tx)
        outs = layer(tx)
        loss = sum(tp.sum(o * tp.tensor(p)) for o, p in zip(outs, projections, strict=True))
    grads = tape.gradient(loss, [tx] + layer.trainable_weights)

    lstm = torch.nn.LSTM(features, units, batch_first=True).double()
    with torch.no_grad():  # torch gate order i, f, g, o == Keras i, f, c, o
        lstm.weight_ih_l0.copy_(torch.tensor(kernel.T))
        lstm.weight_hh_l0.copy_(torch.tensor(recurrent.T))
        lstm.bias_ih_l0.copy_(torch.tensor(bias))
        lstm.bias_hh_l0.zero_()
    xx = _t(x)
    seq, (h, c) = lstm(xx)
    refs = [seq, h[0], c[0]]
    sum((r * _t(p, False)).sum() for r, p in zip(refs, projections, strict=True)).backward()
    for ours, ref, label in zip(outs, refs, ("sequence", "h", "c"), strict=True):
        assert_close(ours.numpy(), ref, label)
    assert_close(grads[0].numpy(), xx.grad, "input grad")
    assert_close(grads[1].numpy(), lstm.weight_ih_l0.grad.T, "kernel grad")
    assert_close(grads[2].numpy(), lstm.weight_hh_l0.grad.T, "recurrent kernel grad")
    assert_close(grads[3].numpy(), lstm.bias_ih_l0.grad, "bias grad")


def _keras_to_torch_gru(matrix, units):
    """Keras columns [z | r | h] -> torch rows [r | z | n] (transposed)."""
    z, r, h = np.split(matrix, 3, axis=-1)
    return np.concatenate([r, z, h], axis=-1).T


def test_gru_matches_torch(rng):
    batch, steps, features, units = 3, 5, 4, 6
    layer = L.GRU(units, return_sequences=True, dtype="float64")
    x = rng.normal(size=(batch, steps, features))
    layer(x)
    layer.set_weights([rng.normal(size=w.shape) * 0.5 for w in layer.weights])
    kernel, recurrent, bias = layer.get_weights()
    assert bias.shape == (2, 3 * units)  # reset_after: input bias, recurrent bias
    proj = rng.normal(size=(batch, steps, units))
    out, (gx, gk, gr, gb) = _tp_grads(layer, x, proj)

    gru = torch.nn.GRU(features, units, batch_first=True).double()
    with torch.no_grad():
        gru.weight_ih_l0.copy_(torch.tensor(_keras_to_torch_gru(kernel, units)))
        gru.weight_hh_l0.copy_(torch.tensor(_keras_to_torch_gru(recurrent, units)))
        gru.bias_ih_l0.copy_(torch.tensor(_keras_to_torch_gru(bias[0], units)))
        gru.bias_hh_l0.copy_(torch.tensor(_keras_to_torch_gru(bias[1], units)))
    xx = _t(x)
    seq, _ = gru(xx)
    (seq * _t(proj, False)).sum().backward()
    assert_close(out, seq, "sequence")
    assert_close(gx, xx.grad, "input grad")
    assert_close(_keras_to_torch_gru(gk, units), gru.weight_ih_l0.grad, "kernel grad")
    assert_close(_keras_to_torch_gru(gr, units), gru.weight_hh_l0.grad, "recurrent kernel grad")
    assert_close(_keras_to_torch_gru(gb[0], units), gru.bias_ih_l0.grad, "input bias grad")
    assert_close(_keras_to_torch_gru(gb[1], units), gru.bias_hh_l0.grad, "recurrent bias grad")


def test_batch_normalization_training_step_matches_torch(rng):
    n, h, w, c = 4, 3, 2, 5
    layer = L.BatchNormalization(dtype="float64")  # momentum 0.99 == torch momentum 0.01
    x = rng.normal(loc=2.0, scale=3.0, size=(n, h, w, c))
    layer.build(x.shape)
    gamma, beta = rng.normal(size=c), rng.normal(size=c)
    layer.set_weights([gamma, beta, np.zeros(c), np.ones(c)])
    proj = rng.normal(size=x.shape)
    out, (gx, ggamma, gbeta) = _tp_grads(layer, x, proj, training=True)

    tx, tg, tb = _t(x.transpose(0, 3, 1, 2)), _t(gamma), _t(beta)
    running_mean, running_var = torch.zeros(c, dtype=torch.float64), torch.ones(c, dtype=torch.float64)
    ref = F.batch_norm(tx, running_mean, running_var, tg, tb, training=True, momentum=0.01, eps=1e-3)
    (ref.permute(0, 2, 3, 1) * _t(proj, False)).sum().backward()
    assert_close(out, ref.permute(0, 2, 3, 1), "output")
    assert_close(gx, tx.grad.permute(0, 2, 3, 1), "input grad")
    assert_close(ggamma, tg.grad, "gamma grad")
    assert_close(gbeta, tb.grad, "beta grad")
    assert_close(layer.moving_mean.numpy(), running_mean, "moving mean")
    # torch's running variance uses the unbiased batch variance; Keras (and we) the population one
    count = n * h * w
    batch_var_unbiased = (running_var - 0.99) / 0.01
    assert_close(
        layer.moving_variance.numpy(), 0.99 + 0.01 * batch_var_unbiased * (count - 1) / count, "moving variance"
    )

    # inference uses the moving statistics, as torch's eval mode
    x2 = rng.normal(size=(2, h, w, c))
    stats = (torch.tensor(layer.moving_mean.numpy()), torch.tensor(layer.moving_variance.numpy()))
    ref2 = F.batch_norm(_t(x2.transpose(0, 3, 1, 2), False), *stats, tg, tb, training=False, eps=1e-3)
    assert_close(layer(x2).numpy(), ref2.permute(0, 2, 3, 1), "inference output")


def test_layer_normalization_matches_torch(rng):
    layer = L.LayerNormalization(dtype="float64")
    x = rng.normal(loc=1.0, scale=2.0, size=(3, 4, 6))
    layer.build(x.shape)
    gamma, beta = rng.normal(size=6), rng.normal(size=6)
    layer.set_weights([gamma, beta])
    proj = rng.normal(size=x.shape)
    out, (gx, ggamma, gbeta) = _tp_grads(layer, x, proj)

    tx, tg, tb = _t(x), _t(gamma), _t(beta)
    ref = F.layer_norm(tx, (6,), tg, tb, eps=1e-3)
    (ref * _t(proj, False)).sum().backward()
    assert_close(out, ref, "output")
    assert_close(gx, tx.grad, "input grad")
    assert_close(ggamma, tg.grad, "gamma grad")
    assert_close(gbeta, tb.grad, "beta grad")
