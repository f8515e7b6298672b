"""optimizer.learning_rate (and Keras' alias `lr`) is read and set between steps, as a number
or a schedule, and the next step uses it: eagerly, in a frozen (jit) train step, and in fit."""

import numpy as np
import pytest

import tapeflow as tp

RNG = np.random.default_rng(5)
X = RNG.standard_normal((16, 4)).astype(np.float32)
Y = RNG.integers(0, 3, 16)


def _twins(optimizer):
    """An eager and a jit model with the same weights, each with its own optimizer."""
    models = []
    for jit in (False, True):
        tp.random.seed(1)
        model = tp.Sequential([tp.Input((4,)), tp.layers.Dense(3)])
        model.compile(optimizer(), tp.losses.SparseCategoricalCrossentropy(from_logits=True), jit=jit)
        models.append(model)
    return models


def _gradients(model):
    """d loss / d weights at the current weights, in NumPy float64 (the loss by hand)."""
    kernel, bias = (w.astype(np.float64) for w in model.get_weights())
    logits = X @ kernel + bias
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(len(Y)), Y] -= 1
    return [X.T @ p / len(Y), p.sum(0) / len(Y)]


@pytest.mark.parametrize("jit", [False, True])
def test_a_new_learning_rate_applies_to_the_next_step(jit):
    model = _twins(lambda: tp.optimizers.SGD(0.1))[int(jit)]
    for lr in (0.1, 0.0, 0.7):
        model.optimizer.learning_rate = lr
        before, grads = model.get_weights(), _gradients(model)
        model.train_on_batch(X, Y)
        for w0, w1, g in zip(before, model.get_weights(), grads, strict=True):
            np.testing.assert_allclose(w1, w0 - lr * g, rtol=1e-5, atol=1e-6)
    assert model.optimizer.learning_rate == 0.7 and model.optimizer.iterations == 3
    if jit:
        assert model._frozen()[0].trace_count == 1  # the rate is a graph input, not a constant


def test_lr_alias_reads_and_sets_the_same_rate():
    opt = tp.optimizers.Adam(0.01)
    assert opt.lr == opt.learning_rate == 0.01
    opt.lr = 0.2
    assert opt.learning_rate == 0.2
    opt.learning_rate = tp.tensor(0.3)
    assert opt.lr == pytest.approx(0.3)
    with pytest.raises(ValueError, match="Adam: learning_rate must be a number >= 0"):
        opt.lr = -1.0
    with pytest.raises(ValueError, match="learning_rate"):
        opt.learning_rate = "fast"


def test_schedules_set_mid_training_agree_eager_and_jit():
    eager, frozen = _twins(lambda: tp.optimizers.Adam(0.05))
    for model in (eager, frozen):
        model.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        schedule = tp.optimizers.schedules.ExponentialDecay(0.05, decay_steps=1, decay_rate=0.5)
        model.optimizer.learning_rate = schedule
        assert model.optimizer.learning_rate == pytest.approx(schedule(model.optimizer.iterations))
        model.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        with pytest.raises(TypeError, match="LearningRateSchedule"):
            model.optimizer.learning_rate = 0.1  # as in Keras: a schedule's optimizer takes only schedules
    for a, b in zip(eager.get_weights(), frozen.get_weights(), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    assert frozen.optimizer.learning_rate == pytest.approx(0.05 * 0.5**6)


@pytest.mark.parametrize("jit", [False, True])
def test_a_callback_lowering_the_rate_changes_training(jit):
    model = _twins(lambda: tp.optimizers.SGD(0.1))[int(jit)]
    halve = tp.callbacks.LearningRateScheduler(lambda epoch, lr: 0.0 if epoch >= 1 else lr)
    model.fit(X, Y, batch_size=16, epochs=1, verbose=0, callbacks=[halve])
    frozen_weights = model.get_weights()
    model.fit(X, Y, batch_size=16, epochs=3, initial_epoch=1, verbose=0, callbacks=[halve])
    assert model.optimizer.learning_rate == 0.0
    for a, b in zip(frozen_weights, model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
