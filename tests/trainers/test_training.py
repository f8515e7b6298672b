"""Models and the training loop: fit / evaluate / predict on real data, progress output,
agreement with PyTorch, and clear errors."""

import io

import numpy as np
import pytest
import torch

import tapeflow as tp
from tapeflow.callbacks import ProgbarLogger

FASHION = "/usr/share/datasets/fashion-mnist"


def _mlp(hidden=32, classes=10):
    return tp.Sequential([tp.layers.Dense(hidden, activation="relu"), tp.layers.Dense(classes)])


def test_fit_on_a_real_fashion_mnist_slice_reaches_80_percent():
    try:
        (x, y), (xt, yt) = tp.datasets.mnist.load_data("fashion")
    except FileNotFoundError:
        pytest.skip("Fashion-MNIST is not installed")
    x = x[:6000].reshape(-1, 784).astype("float32") / 255
    xt = xt[:2000].reshape(-1, 784).astype("float32") / 255
    tp.random.seed(0)
    model = _mlp(128)
    model.compile(tp.optimizers.Adam(1e-3), tp.losses.SparseCategoricalCrossentropy(from_logits=True), ["accuracy"])
    history = model.fit(x, y[:6000], batch_size=64, epochs=3, verbose=0, seed=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    result = model.evaluate(xt, yt[:2000], verbose=0, return_dict=True)
    assert result["accuracy"] >= 0.80, result
    predicted = model.predict(xt[:100]).argmax(axis=1)
    np.testing.assert_allclose((predicted == yt[:100]).mean(), result["accuracy"], atol=0.15)


def test_fit_matches_a_hand_written_pytorch_loop():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 6))
    y = rng.integers(0, 3, 64)
    model = tp.Sequential([tp.layers.Dense(5, activation="tanh", dtype="float64"), tp.layers.Dense(3, dtype="float64")])
    model(tp.tensor(x[:1]))
    torch_model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).double()
    with torch.no_grad():
        for layer, (kernel, bias) in zip(
            [torch_model[0], torch_model[2]], zip(*[iter(model.get_weights())] * 2, strict=True), strict=True
        ):
            layer.weight.copy_(torch.from_numpy(kernel.T))
            layer.bias.copy_(torch.from_numpy(bias))
    model.compile(tp.optimizers.SGD(0.1), tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    opt = torch.optim.SGD(torch_model.parameters(), lr=0.1)
    for _ in range(2):
        for start in range(0, 64, 16):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(
                torch_model(torch.from_numpy(x[start : start + 16])), torch.from_numpy(y[start : start + 16])
            )
            loss.backward()
            opt.step()
    np.testing.assert_allclose(model.get_weights()[0], torch_model[0].weight.detach().numpy().T, rtol=1e-6)
    np.testing.assert_allclose(model.get_weights()[3], torch_model[2].bias.detach().numpy(), rtol=1e-6)


def test_progress_is_one_plain_line_per_epoch_when_not_a_terminal():
    stream = io.StringIO()
    bar = ProgbarLogger("auto", stream=stream)
    model = _mlp(4, 2)
    model.compile("sgd", "sparse_categorical_crossentropy")
    x = np.random.default_rng(1).random((40, 3)).astype("float32")
    model.fit(x, np.zeros(40, dtype="int64"), batch_size=8, epochs=3, callbacks=[bar], verbose=0)
    lines = stream.getvalue().splitlines()
    assert [line.split(" - ")[0] for line in lines] == ["Epoch 1/3", "Epoch 2/3", "Epoch 3/3"]
    assert all("loss:" in line for line in lines) and "\r" not in stream.getvalue()


def test_progress_bar_on_a_terminal_shows_step_eta_and_loss():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    model = _mlp(4, 2)
    model.compile("sgd", "sparse_categorical_crossentropy")
    x = np.random.default_rng(1).random((40, 3)).astype("float32")
    model.fit(
        x,
        np.zeros(40, dtype="int64"),
        batch_size=8,
        epochs=1,
        callbacks=[ProgbarLogger("auto", stream=stream, interval=0.0)],
        verbose=0,
    )
    out = stream.getvalue()
    assert "\r" in out and "ETA" in out and "5/5" in out and "loss:" in out


def test_history_train_on_batch_and_datasets():
    rng = np.random.default_rng(2)
    x, y = rng.random((30, 4)).astype("float32"), rng.integers(0, 2, 30)
    model = _mlp(6, 2)
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    data = tp.data.Dataset.from_tensor_slices((x, y)).batch(10)
    history = model.fit(data, epochs=2, verbose=0, validation_data=(x, y))
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert len(history.history["loss"]) == 2 and history.epoch == [0, 1]
    logs = model.train_on_batch(x[:10], y[:10], return_dict=True)
    assert set(logs) == {"loss", "accuracy"} and np.isfinite(logs["loss"])
    assert model.predict(x, batch_size=7).shape == (30, 2)


def test_bad_input_gives_clear_errors():
    model = _mlp(4, 2)
    with pytest.raises(ValueError, match="compile"):
        model.fit(np.zeros((4, 3)), np.zeros(4))
    with pytest.raises(ValueError, match="optimizer|unknown"):
        model.compile("no-such-optimizer", "mse")
    with pytest.raises(ValueError, match="loss|unknown"):
        model.compile("sgd", "no-such-loss")
    model.compile("sgd", "sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match="x has 4 samples but y has 3"):
        model.fit(np.zeros((4, 3), "float32"), np.zeros(3, "int64"), verbose=0)
    with pytest.raises(ValueError, match="dense.*rank"):
        model.predict(np.zeros(4, "float32"))
    model.predict(np.zeros((4, 3), "float32"))
    with pytest.raises(ValueError, match="dense"):
        model.predict(np.zeros((4, 5), "float32"))
    with pytest.raises(ValueError, match="label|range"):
        model.fit(np.zeros((4, 3), "float32"), np.array([0, 1, 2, 7]), verbose=0)


def test_summary_lists_layers_shapes_and_params():
    model = _mlp(8, 3)
    model(tp.ones((2, 5)))
    lines = []
    model.summary(print_fn=lines.append)
    text = lines[0]
    assert "dense" in text and "(None, 8)" in text and "(None, 3)" in text
    assert "Total params: 75" in text  # 5*8+8 + 8*3+3


@pytest.mark.parametrize("jit", [False, True])
def test_two_input_model_fits_evaluates_and_predicts_from_lists(jit):
    rng = np.random.default_rng(3)
    xa, xb = rng.standard_normal((40, 5)).astype(np.float32), rng.standard_normal((40, 3)).astype(np.float32)
    y = (xa[:, 0] + xb[:, 0] > 0).astype(np.int64)
    a, b = tp.layers.Input(shape=(5,)), tp.layers.Input(shape=(3,))
    out = tp.layers.Dense(2)(tp.layers.Concatenate()([tp.layers.Dense(8, activation="relu")(a), b]))
    model = tp.Model([a, b], out)
    model.compile(
        tp.optimizers.Adam(0.05), tp.losses.SparseCategoricalCrossentropy(from_logits=True), ["accuracy"], jit=jit
    )
    history = model.fit(
        [xa, xb], y, batch_size=8, epochs=3, validation_split=0.25, validation_batch_size=5, seed=1, verbose=0
    )
    assert len(history.history["val_loss"]) == 3
    predicted = model.predict([xa, xb], batch_size=16)
    eager = model([tp.tensor(xa), tp.tensor(xb)], training=False).numpy()
    np.testing.assert_allclose(predicted, eager, rtol=1e-5, atol=1e-6)
    logs = model.evaluate([xa, xb], y, batch_size=16, verbose=0, return_dict=True)
    accuracy = float(np.mean(np.argmax(eager, axis=1) == y))
    assert logs["accuracy"] == pytest.approx(accuracy)
    with pytest.raises(ValueError, match="different sample counts"):
        model.predict([xa, xb[:10]])
