"""Models with several outputs: compile(loss=[...] | {...}, loss_weights=, metrics=, weighted_metrics=)
as Keras 3 takes them, the per-output logs ("out1_loss", "out1_accuracy"), and the numbers
against hand-computed NumPy totals and a PyTorch step."""

import os

import numpy as np
import pytest
import torch

import tapeflow as tp

RNG = np.random.default_rng(31)
N = 12
X = RNG.standard_normal((N, 4)).astype(np.float32)
Y1 = RNG.integers(0, 3, N)
Y2 = RNG.standard_normal((N, 1)).astype(np.float32)
W = RNG.random(N).astype(np.float32)
SCE = tp.losses.SparseCategoricalCrossentropy(from_logits=True)


def _model(jit=False, optimizer=None, **compile_args):
    tp.random.seed(6)
    inputs = tp.Input((4,))
    hidden = tp.layers.Dense(6, activation="tanh", name="hidden")(inputs)
    model = tp.Model(inputs, [tp.layers.Dense(3, name="out1")(hidden), tp.layers.Dense(1, name="out2")(hidden)])
    args = {"loss": [SCE, "mse"], "loss_weights": [1.0, 0.5], "metrics": [["accuracy"], ["mae"]], **compile_args}
    model.compile(optimizer or tp.optimizers.SGD(0.1), jit=jit, **args)
    return model


def _by_hand(model, w1=None, w2=None):
    """Each output's loss, accuracy and MAE in NumPy float64 from the model's predictions."""
    logits, value = (p.astype(np.float64) for p in model.predict(X))
    log_p = logits - logits.max(1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(1, keepdims=True))
    ce = -log_p[np.arange(N), Y1]
    se = ((value - Y2) ** 2)[:, 0]
    w1 = np.ones(N) if w1 is None else w1
    w2 = np.ones(N) if w2 is None else w2
    return {
        "out1_loss": float((w1 * ce).sum() / N),
        "out2_loss": float((w2 * se).sum() / N),
        "out1_accuracy": float(np.mean(logits.argmax(1) == Y1)),
        "out2_mae": float(np.mean(np.abs(value - Y2))),
    }


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("form", ["list", "dict"])
def test_per_output_logs_match_numpy_totals(jit, form):
    if form == "list":
        model, y = _model(jit), [Y1, Y2]
    else:
        model = _model(
            jit,
            loss={"out1": SCE, "out2": "mse"},
            loss_weights={"out2": 0.5},
            metrics={"out1": "accuracy", "out2": "mae"},
        )
        y = {"out2": Y2, "out1": Y1}
    logs = model.evaluate(X, y, batch_size=5, verbose=0, return_dict=True)
    assert list(logs) == ["loss", "out1_accuracy", "out2_mae", "out1_loss", "out2_loss"]  # Keras 3's order
    expected = _by_hand(model)
    for key, value in expected.items():
        assert logs[key] == pytest.approx(value, rel=1e-5), key
    assert logs["loss"] == pytest.approx(expected["out1_loss"] + 0.5 * expected["out2_loss"], rel=1e-5)


def test_sample_weights_per_output_or_shared():
    model = _model()
    logs = model.evaluate(X, [Y1, Y2], sample_weight={"out1": W}, verbose=0, return_dict=True)
    expected = _by_hand(model, w1=W)
    assert logs["out1_loss"] == pytest.approx(expected["out1_loss"], rel=1e-5)
    assert logs["out2_loss"] == pytest.approx(expected["out2_loss"], rel=1e-5)  # no weights given for out2
    shared = model.evaluate(X, [Y1, Y2], sample_weight=W, verbose=0, return_dict=True)
    expected = _by_hand(model, w1=W, w2=W)
    assert shared["loss"] == pytest.approx(expected["out1_loss"] + 0.5 * expected["out2_loss"], rel=1e-5)
    listed = model.evaluate(X, [Y1, Y2], sample_weight=[W, np.ones(N)], verbose=0, return_dict=True)
    assert listed["out1_loss"] == pytest.approx(expected["out1_loss"], rel=1e-5)


def test_one_step_matches_pytorch_on_the_weighted_total():
    model = _model()
    hidden, out1, out2 = (torch.nn.Linear(i, o) for i, o in ((4, 6), (6, 3), (6, 1)))
    with torch.no_grad():
        for layer, (kernel, bias) in zip(
            (hidden, out1, out2), zip(*[iter(model.get_weights())] * 2, strict=True), strict=True
        ):
            layer.weight.copy_(torch.from_numpy(kernel.T))
            layer.bias.copy_(torch.from_numpy(bias))
    params = [p for layer in (hidden, out1, out2) for p in layer.parameters()]
    h = torch.tanh(hidden(torch.from_numpy(X)))
    total = torch.nn.functional.cross_entropy(out1(h), torch.from_numpy(Y1)) + 0.5 * torch.nn.functional.mse_loss(
        out2(h), torch.from_numpy(Y2)
    )
    total.backward()
    with torch.no_grad():
        for p in params:
            p -= 0.1 * p.grad
    loss = model.train_on_batch(X, [Y1, Y2])[0]
    assert loss == pytest.approx(float(total.detach()), rel=1e-5)
    np.testing.assert_allclose(model.get_weights()[0], hidden.weight.detach().numpy().T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.get_weights()[5], out2.bias.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_fit_eager_and_jit_agree_and_log_every_output():
    models = [_model(jit, optimizer=tp.optimizers.Adam(0.01)) for jit in (False, True)]
    histories = [
        m.fit(X, [Y1, Y2], batch_size=5, epochs=2, seed=3, validation_data=(X, [Y1, Y2]), verbose=0) for m in models
    ]
    keys = {"loss", "out1_loss", "out2_loss", "out1_accuracy", "out2_mae"}
    assert set(histories[0].history) == keys | {f"val_{k}" for k in keys}
    for key in histories[0].history:
        np.testing.assert_allclose(histories[1].history[key], histories[0].history[key], rtol=1e-4, err_msg=key)
    for a, b in zip(*(m.get_weights() for m in models), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_on_batch_results_and_predictions_come_per_output():
    model = _model()
    expected = _by_hand(model)
    values = model.test_on_batch(X, [Y1, Y2])
    ordered = ["out1_loss", "out2_loss", "out1_accuracy", "out2_mae"]  # loss, output losses, then sorted
    np.testing.assert_allclose(values[1:], [expected[k] for k in ordered], rtol=1e-5)
    assert set(model.test_on_batch(X, [Y1, Y2], return_dict=True)) == {"loss", *ordered}
    logits, value = model.predict(X, batch_size=5)
    assert logits.shape == (N, 3) and value.shape == (N, 1)
    np.testing.assert_allclose(model.predict_on_batch(X)[1], value, rtol=1e-6)


def test_an_output_without_loss_and_dict_outputs():
    model = _model(loss=[SCE, None], loss_weights=None, metrics=None)
    logs = model.evaluate(X, {"out1": Y1}, verbose=0, return_dict=True)
    assert list(logs) == ["loss"] and logs["loss"] == pytest.approx(_by_hand(model)["out1_loss"], rel=1e-5)
    inputs = tp.Input((4,))
    named = tp.Model(inputs, {"b": tp.layers.Dense(1)(inputs), "a": tp.layers.Dense(3)(inputs)})
    assert named.output_names == ["a", "b"]
    named.compile("sgd", loss={"a": SCE, "b": "mse"}, metrics={"a": ["accuracy"]})
    history = named.fit(X, {"a": Y1, "b": Y2}, epochs=1, verbose=0)
    assert set(history.history) == {"loss", "a_loss", "b_loss", "a_accuracy"}


def test_save_and_load_keep_the_per_output_compile(tmp_path):
    model = _model(weighted_metrics={"out1": ["accuracy"]})
    model.fit(X, [Y1, Y2], sample_weight=W, epochs=1, verbose=0)
    path = os.fspath(tmp_path / "m.keras")
    model.save(path)
    loaded = tp.models.load_model(path)
    args = {"x": X, "y": [Y1, Y2], "sample_weight": W, "verbose": 0}
    assert loaded.evaluate(**args) == pytest.approx(model.evaluate(**args))


def test_multi_output_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"compile: loss has 3 entries but the model has 2 outputs \['out1', 'out2'\]"):
        _model(loss=["mse", "mse", "mse"])
    with pytest.raises(ValueError, match=r"compile: loss has keys \['nope'\] that name no output"):
        _model(loss={"out1": "mse", "nope": "mse"})
    with pytest.raises(ValueError, match="compile: metrics has 1 entries but the model has 2 outputs"):
        _model(metrics=["accuracy"])
    with pytest.raises(ValueError, match="compile: metrics must be a list"):
        _model(metrics="accuracy")
    with pytest.raises(ValueError, match="loss_weights must be a list or a dict"):
        _model(loss_weights=0.5)
    with pytest.raises(ValueError, match="loss_weights entries must be numbers"):
        _model(loss_weights=[1.0, "x"])
    model = _model()
    with pytest.raises(ValueError, match="fit: the model has 2 outputs .* so y must be a list of 2 entries"):
        model.fit(X, Y1, verbose=0)
    with pytest.raises(ValueError, match=r"fit: x has 12 samples but y has 5"):
        model.fit(X, [Y1, Y2[:5]], verbose=0)
    with pytest.raises(ValueError, match="class_weight is only supported for models with a single output"):
        model.fit(X, [Y1, Y2], class_weight={0: 2.0}, verbose=0)
    with pytest.raises(ValueError, match="distribute= runs models with one output only"):
        model.fit(X, [Y1, Y2], distribute=object(), verbose=0)


class TwoHeads(tp.Model):
    def __init__(self):
        super().__init__()
        self.classes, self.value = tp.layers.Dense(3), tp.layers.Dense(1)

    def call(self, x, training=None):
        return [self.classes(x), self.value(x)]


def test_a_subclassed_model_with_two_outputs_names_them_by_position():
    model = TwoHeads()
    model.compile("sgd", loss=[SCE, "mse"], loss_weights=[1.0, 2.0])
    logs = model.evaluate(X, [Y1, Y2], verbose=0, return_dict=True)
    assert list(logs) == ["loss", "output_1_loss", "output_2_loss"]
    assert logs["loss"] == pytest.approx(logs["output_1_loss"] + 2.0 * logs["output_2_loss"], rel=1e-6)
    model.compile("sgd", loss="mse")
    with pytest.raises(ValueError, match="set up for 1 outputs .* model returned 2; give compile one loss per output"):
        model.evaluate(X, Y2, verbose=0, return_dict=True)
