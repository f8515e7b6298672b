"""The frozen train step (forward, loss, gradients and optimizer update in one graph;
`compile`'s default) gives the eager weights after 20 steps, and a model that cannot be
frozen trains eagerly under jit="auto"."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import tapeflow as tp

RNG = np.random.default_rng(11)


def mlp():
    return tp.Sequential(
        [tp.layers.Dense(32, activation="relu"), tp.layers.Dense(16, activation="tanh"), tp.layers.Dense(5)]
    )


def cnn():
    return tp.Sequential(
        [
            tp.layers.Conv2D(4, 5, padding="same", activation="relu"),
            tp.layers.MaxPooling2D(2),
            tp.layers.Conv2D(8, 3, padding="same", activation="relu"),
            tp.layers.MaxPooling2D(2),
            tp.layers.Flatten(),
            tp.layers.Dense(16, activation="relu"),
            tp.layers.Dropout(0.3),
            tp.layers.BatchNormalization(),
            tp.layers.Dense(5),
        ]
    )


def lstm():
    return tp.Sequential([tp.layers.Embedding(20, 6), tp.layers.LSTM(8), tp.layers.Dense(5)])


DATA = {
    "mlp": (mlp, lambda n: RNG.standard_normal((n, 12)).astype(np.float32)),
    "cnn": (cnn, lambda n: RNG.random((n, 12, 12, 1)).astype(np.float32)),
    "lstm": (lstm, lambda n: RNG.integers(0, 20, (n, 6))),
}
OPTIMIZERS = {
    "sgd": lambda: tp.optimizers.SGD(0.05, momentum=0.9),
    "adam": lambda: tp.optimizers.Adam(tp.optimizers.schedules.ExponentialDecay(3e-3, 5, 0.9)),
}


def _pair(name, optimizer, x):
    models = []
    for jit in (False, True):
        tp.random.seed(3)  # same initial weights and dropout streams for both
        model = DATA[name][0]()
        model(tp.tensor(x[:2]))
        model.compile(
            OPTIMIZERS[optimizer](), tp.losses.SparseCategoricalCrossentropy(from_logits=True), ["accuracy"], jit=jit
        )
        models.append(model)
    return models


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("name", sorted(DATA))
def test_frozen_training_matches_eager_after_20_steps(name, optimizer):
    x, y = DATA[name][1](64), RNG.integers(0, 5, 64)
    eager, frozen = _pair(name, optimizer, x)
    for step in range(20):
        batch = slice((step % 4) * 16, (step % 4 + 1) * 16)
        logs_e = eager.train_on_batch(x[batch], y[batch], return_dict=True)
        logs_f = frozen.train_on_batch(x[batch], y[batch], return_dict=True)
        assert logs_f["loss"] == pytest.approx(logs_e["loss"], rel=1e-4, abs=1e-6)
    for a, b in zip(eager.get_weights(), frozen.get_weights(), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    assert frozen.optimizer.iterations == eager.optimizer.iterations == 20
    train_fn = frozen._frozen()[0]
    assert train_fn.trace_count == 1
    ops = next(iter(train_fn.graphs.values())).op_counts()
    assert ops["assign_variable"] >= len(frozen.trainable_weights)


def test_fit_and_evaluate_with_jit():
    x, y = DATA["mlp"][1](100), RNG.integers(0, 5, 100)
    eager, frozen = _pair("mlp", "adam", x)
    h_e = eager.fit(x, y, batch_size=32, epochs=2, shuffle=True, seed=4, verbose=0)
    h_f = frozen.fit(x, y, batch_size=32, epochs=2, shuffle=True, seed=4, verbose=0)
    np.testing.assert_allclose(h_f.history["loss"], h_e.history["loss"], rtol=1e-4)
    # 100 = 3 x 32 + 4: one more trace for the short last batch, none after
    assert frozen._frozen()[0].trace_count == 2
    ev_e, ev_f = eager.evaluate(x, y, verbose=0, return_dict=True), frozen.evaluate(x, y, verbose=0, return_dict=True)
    assert ev_f["loss"] == pytest.approx(ev_e["loss"], rel=1e-4)
    assert ev_f["accuracy"] == pytest.approx(ev_e["accuracy"])


@pytest.mark.parametrize("bad", [np.nan, np.inf, 3e38])
@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_jit_reports_the_loss_eager_reports_on_hostile_inputs(name, bad):
    """A NaN loss was hidden by the frozen step (relu turned NaN into 0) while the weights went NaN."""
    x, y = DATA[name][1](32), RNG.integers(0, 5, 32)
    x.reshape(32, -1)[5, 3] = bad
    eager, frozen = _pair(name, "sgd", x[6:])
    h_e = eager.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    h_f = frozen.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(h_f.history["loss"], h_e.history["loss"], rtol=1e-4)  # NaN where NaN
    for a, b in zip(eager.get_weights(), frozen.get_weights(), strict=True):
        np.testing.assert_array_equal(np.isnan(b), np.isnan(a))


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        (lambda y: y + 0.99, "labels must be integer class ids, got [0-9.]+99"),
        (lambda y: np.where(y == 1, 7, y), "out of range"),
        (lambda y: np.where(y == 1, -1, y), "out of range"),
    ],
)
def test_jit_refuses_the_targets_eager_refuses(targets, message):
    """Non-integer labels were truncated silently by the frozen step; eager refuses them."""
    x, y = DATA["mlp"][1](16), RNG.integers(0, 5, 16)
    y[0] = 1
    bad = targets(y)
    eager, frozen = _pair("mlp", "adam", x)
    before = [w.copy() for w in frozen.get_weights()]
    errors = []
    for model in (eager, frozen):
        for call in (model.train_on_batch, model.test_on_batch):
            with pytest.raises(ValueError, match=message) as info:
                call(x, bad)
            errors.append(str(info.value))
    assert len(set(errors)) == 1, errors  # the same error, word for word
    for a, b in zip(before, frozen.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)  # refused before any update
    assert frozen.optimizer.iterations == 0


class ReadsItsInput(tp.layers.Layer):
    """A layer whose Python reads a tensor value, which a frozen graph cannot do."""

    def call(self, inputs):
        return inputs * float(np.sign(inputs.numpy().sum()) or 1.0)


def _unfreezable(jit):
    tp.random.seed(3)
    model = tp.Sequential([ReadsItsInput(), tp.layers.Dense(5)])
    model(tp.ones((2, 12)))  # built now, from the seeded generator
    model.compile(tp.optimizers.SGD(0.1), tp.losses.SparseCategoricalCrossentropy(from_logits=True), jit=jit)
    return model


def test_auto_trains_a_model_that_cannot_be_frozen_eagerly_with_a_warning():
    x, y = DATA["mlp"][1](32), RNG.integers(0, 5, 32)
    auto, eager = _unfreezable("auto"), _unfreezable(False)
    with pytest.warns(UserWarning, match=r"cannot be frozen into a graph, so it runs eagerly.*numpy\(\)"):
        h_auto = auto.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    h_eager = eager.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    assert h_auto.history["loss"] == h_eager.history["loss"]  # the failed trace ran no step
    assert auto.optimizer.iterations == eager.optimizer.iterations == 8
    assert auto.jit is False  # warned once, then eager for good


def test_jit_true_refuses_a_model_that_cannot_be_frozen():
    model = _unfreezable(True)
    with pytest.raises(tp.FreezeError, match=r"numpy\(\) of a traced tensor"):
        model.train_on_batch(DATA["mlp"][1](8), RNG.integers(0, 5, 8))
    with pytest.raises(ValueError, match="jit_compile must be True, False or 'auto', got 'yes'"):
        model.compile("sgd", "mse", jit="yes")


def test_fit_freezes_the_step_by_default(caplog):
    model = tp.Sequential([tp.Input((12,)), tp.layers.Dense(5)])
    model.compile("adam", tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    with caplog.at_level(logging.INFO, logger="tapeflow.function"):
        model.fit(DATA["mlp"][1](50), RNG.integers(0, 5, 50), batch_size=16, validation_split=0.2, verbose=0)
    assert model.jit == "auto" and model._frozen()[0].trace_count == 2  # 40 rows: batches of 16, then one of 8
    assert caplog.records and all(r.levelno == logging.INFO for r in caplog.records)  # expected: no warning


def test_a_layer_made_untrainable_between_fits_stays_put_in_the_frozen_step():
    """Keras asks for a new compile after changing `trainable`; the frozen step retraces
    instead, so it trains what eager training trains."""
    x, y = DATA["mlp"][1](32), RNG.integers(0, 5, 32)
    eager, frozen = _pair("mlp", "sgd", x)
    for model in (eager, frozen):
        model.fit(x, y, batch_size=16, shuffle=False, verbose=0)
        model.layers[0].trainable = False
        before = model.layers[0].get_weights()
        model.fit(x, y, batch_size=16, shuffle=False, verbose=0)
        for a, b in zip(model.layers[0].get_weights(), before, strict=True):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(eager.get_weights(), frozen.get_weights(), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    assert frozen._frozen()[0].trace_count == 2


def test_predict_runs_a_frozen_graph_that_gives_the_eager_outputs():
    x = DATA["cnn"][1](21)
    tp.random.seed(5)
    frozen = cnn()
    eager = cnn()
    frozen(tp.tensor(x[:2]))
    eager(tp.tensor(x[:2]))
    eager.set_weights(frozen.get_weights())
    eager.compile("sgd", "mse", jit=False)
    got, want = frozen.predict(x, batch_size=8, verbose=0), eager.predict(x, batch_size=8, verbose=0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert frozen._frozen_predict.trace_count == 2 and eager._frozen_predict is None  # 8 rows, then 5
    np.testing.assert_allclose(frozen.predict_on_batch(x[:8]), want[:8], rtol=1e-5, atol=1e-6)


def test_predict_falls_back_to_eager_for_a_model_that_cannot_be_frozen():
    model, x = _unfreezable("auto"), DATA["mlp"][1](10)
    with pytest.warns(UserWarning, match="cannot be frozen into a graph"):
        got = model.predict(x, verbose=0)
    np.testing.assert_allclose(got, model(tp.tensor(x)).numpy(), rtol=1e-6)
