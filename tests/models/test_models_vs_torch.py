"""An MLP, the Deep-MNIST CNN and an LSTM, trained 3 steps with SGD and 3 with Adam from
the same weights on the same batch, match PyTorch's parameters (float64)."""

import numpy as np
import pytest
import torch

import tapeflow as tp

RNG = np.random.default_rng(5)
F = torch.nn.functional


def _copy_dense(dense, linear):
    kernel, bias = dense.get_weights()
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(kernel.T))
        linear.bias.copy_(torch.from_numpy(bias))


def _copy_conv(conv, torch_conv):
    kernel, bias = conv.get_weights()
    with torch.no_grad():
        torch_conv.weight.copy_(torch.from_numpy(kernel.transpose(3, 2, 0, 1)))
        torch_conv.bias.copy_(torch.from_numpy(bias))


def _train_both(model, torch_model, torch_forward, x, y, optimizer):
    torch_params = list(torch_model.parameters())
    if optimizer == "sgd":
        ours, theirs = tp.optimizers.SGD(0.05), torch.optim.SGD(torch_params, lr=0.05)
    else:
        ours = tp.optimizers.Adam(1e-3, epsilon=1e-7)
        theirs = torch.optim.Adam(torch_params, lr=1e-3)
    model.compile(ours, tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    for step in range(1, 4):
        model.train_on_batch(x, y)
        if optimizer == "adam":
            # Keras adds epsilon to sqrt(v) before bias correction, torch after: this is
            # the torch epsilon that gives Keras's update at this step.
            theirs.param_groups[0]["eps"] = 1e-7 / np.sqrt(1 - 0.999**step)
        theirs.zero_grad()
        F.cross_entropy(torch_forward(tx), ty).backward()
        theirs.step()


def assert_close(ours, theirs, atol=1e-9):
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-5, atol=atol)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_mlp_matches_pytorch(optimizer):
    x, y = RNG.standard_normal((16, 20)), RNG.integers(0, 5, 16)
    model = tp.Sequential(
        [
            tp.layers.Dense(12, activation="relu", dtype="float64"),
            tp.layers.Dense(12, activation="relu", dtype="float64"),
            tp.layers.Dense(5, dtype="float64"),
        ]
    )
    model(tp.tensor(x))
    net = torch.nn.Sequential(
        torch.nn.Linear(20, 12), torch.nn.ReLU(), torch.nn.Linear(12, 12), torch.nn.ReLU(), torch.nn.Linear(12, 5)
    ).double()
    for dense, linear in zip(model.layers, [net[0], net[2], net[4]], strict=True):
        _copy_dense(dense, linear)
    _train_both(model, net, net, x, y, optimizer)
    for dense, linear in zip(model.layers, [net[0], net[2], net[4]], strict=True):
        kernel, bias = dense.get_weights()
        assert_close(kernel, linear.weight.T)
        assert_close(bias, linear.bias)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_deep_mnist_cnn_matches_pytorch(optimizer):
    """conv5x5x32, pool, conv5x5x64, pool, dense 1024, dense 10 (dropout left out: its masks differ)."""
    x, y = RNG.random((4, 28, 28, 1)), RNG.integers(0, 10, 4)
    layers = [
        tp.layers.Conv2D(32, 5, padding="same", activation="relu", dtype="float64"),
        tp.layers.MaxPooling2D(2, dtype="float64"),
        tp.layers.Conv2D(64, 5, padding="same", activation="relu", dtype="float64"),
        tp.layers.MaxPooling2D(2, dtype="float64"),
        tp.layers.Flatten(dtype="float64"),
        tp.layers.Dense(1024, activation="relu", dtype="float64"),
        tp.layers.Dense(10, dtype="float64"),
    ]
    model = tp.Sequential(layers)
    model(tp.tensor(x))
    conv1, conv2 = torch.nn.Conv2d(1, 32, 5, padding=2).double(), torch.nn.Conv2d(32, 64, 5, padding=2).double()
    fc1, fc2 = torch.nn.Linear(7 * 7 * 64, 1024).double(), torch.nn.Linear(1024, 10).double()
    net = torch.nn.ModuleList([conv1, conv2, fc1, fc2])
    _copy_conv(layers[0], conv1)
    _copy_conv(layers[2], conv2)
    _copy_dense(layers[5], fc1)
    _copy_dense(layers[6], fc2)

    def forward(tx):
        h = F.max_pool2d(F.relu(conv1(tx.permute(0, 3, 1, 2))), 2)
        h = F.max_pool2d(F.relu(conv2(h)), 2)
        h = h.permute(0, 2, 3, 1).reshape(len(tx), -1)  # NHWC flatten order, as tapeflow's
        return fc2(F.relu(fc1(h)))

    _train_both(model, net, forward, x, y, optimizer)
    for ours, theirs in ((layers[0], conv1), (layers[2], conv2)):
        kernel, bias = ours.get_weights()
        assert_close(kernel, theirs.weight.permute(2, 3, 1, 0))
        assert_close(bias, theirs.bias)
    # A handful of fc1 weights get gradients at rounding-noise level (~1e-20), which Adam
    # normalizes to full steps whose sign is noise: they are held to 1e-6 absolute, a
    # thousandth of one Adam step, instead of 1e-5 relative.
    atol = 1e-6 if optimizer == "adam" else 1e-9
    for ours, theirs in ((layers[5], fc1), (layers[6], fc2)):
        kernel, bias = ours.get_weights()
        assert_close(kernel, theirs.weight.T, atol)
        assert_close(bias, theirs.bias, atol)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_lstm_matches_pytorch(optimizer):
    x, y = RNG.standard_normal((6, 7, 3)), RNG.integers(0, 4, 6)
    lstm = tp.layers.LSTM(5, dtype="float64")
    dense = tp.layers.Dense(4, dtype="float64")
    model = tp.Sequential([lstm, dense])
    model(tp.tensor(x))
    torch_lstm = torch.nn.LSTM(3, 5, batch_first=True).double()
    head = torch.nn.Linear(5, 4).double()
    kernel, recurrent, bias = lstm.get_weights()
    with torch.no_grad():  # Keras gates i, f, c, o are torch's i, f, g, o
        torch_lstm.weight_ih_l0.copy_(torch.from_numpy(kernel.T))
        torch_lstm.weight_hh_l0.copy_(torch.from_numpy(recurrent.T))
        torch_lstm.bias_ih_l0.copy_(torch.from_numpy(bias))
        torch_lstm.bias_hh_l0.zero_()
    torch_lstm.bias_hh_l0.requires_grad_(False)  # Keras has one bias; torch's two would move twice
    _copy_dense(dense, head)
    net = torch.nn.ModuleList([torch_lstm, head])

    def forward(tx):
        return head(torch_lstm(tx)[0][:, -1])

    _train_both(model, net, forward, x, y, optimizer)
    kernel, recurrent, bias = lstm.get_weights()
    assert_close(kernel, torch_lstm.weight_ih_l0.T)
    assert_close(recurrent, torch_lstm.weight_hh_l0.T)
    assert_close(bias, torch_lstm.bias_ih_l0 + torch_lstm.bias_hh_l0)
    assert_close(dense.get_weights()[0], head.weight.T)
