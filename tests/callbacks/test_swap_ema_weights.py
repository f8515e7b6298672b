"""SwapEMAWeights against Keras itself: validation with the averaged weights during fit,
the weights swapped back after each evaluation, swap_on_epoch around the epoch's end,
and the errors for optimizers without use_ema."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402


def _models(seed=0):
    ours = tp.Sequential([tp.layers.Input((4,)), tp.layers.Dense(3, activation="tanh"), tp.layers.Dense(1)])
    theirs = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(1)])
    rng = np.random.default_rng(seed)
    weights = [rng.normal(size=w.shape).astype("float32") for w in theirs.get_weights()]
    ours.set_weights(weights)
    theirs.set_weights(weights)
    return ours, theirs


def _data():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(32, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [0.3]], "float32")).astype("float32")
    return x, y, x[:16] * 0.5, y[:16] * 0.5


def _recorder(base, hooks):
    """A callback of `base` (tapeflow's or Keras's) keeping copies of the model's
    trainable weights at each of `hooks`, as (hook, [arrays])."""

    class Recorder(base):
        def __init__(self):
            super().__init__()
            self.seen = []

        def _keep(self, hook):
            self.seen.append((hook, [np.array(keras.ops.convert_to_numpy(w)) for w in self.model.trainable_weights]))

    for hook in hooks:
        setattr(Recorder, hook, lambda self, *args, _hook=hook, **kwargs: self._keep(_hook))
    return Recorder()


def _fit_both(optimizer, cfg, swap_on_epoch, jit, epochs=3, hooks=("on_test_begin", "on_test_end")):
    ours, theirs = _models()
    x, y, vx, vy = _data()
    ours.compile(optimizer=getattr(tp.optimizers, optimizer)(**cfg), loss="mse", jit_compile=jit)
    theirs.compile(optimizer=getattr(keras.optimizers, optimizer)(**cfg), loss="mse")
    runs = []
    for model, module in ((ours, tp.callbacks), (theirs, keras.callbacks)):
        before, after = _recorder(module.Callback, hooks), _recorder(module.Callback, hooks)
        history = model.fit(
            x,
            y,
            batch_size=8,
            epochs=epochs,
            verbose=0,
            shuffle=False,
            validation_data=(vx, vy),
            callbacks=[before, module.SwapEMAWeights(swap_on_epoch=swap_on_epoch), after],
        )
        runs.append((model, history.history, before.seen, after.seen))
    return runs


def _close(a, b):
    for u, v in zip(a, b, strict=True):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-5)


CASES = [
    ("SGD", {"learning_rate": 0.1, "use_ema": True, "ema_momentum": 0.9}),
    ("Adam", {"learning_rate": 0.05, "use_ema": True, "ema_momentum": 0.8, "ema_overwrite_frequency": 3}),
]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "frozen"])
@pytest.mark.parametrize(("optimizer", "cfg"), CASES, ids=[name for name, _ in CASES])
def test_validation_uses_the_averages_as_keras(optimizer, cfg, jit):
    (ours, ours_h, ours_before, ours_after), (theirs, theirs_h, theirs_before, theirs_after) = _fit_both(
        optimizer, cfg, False, jit
    )
    assert sorted(ours_h) == sorted(theirs_h) == ["loss", "val_loss"]
    for key in ("loss", "val_loss"):
        np.testing.assert_allclose(ours_h[key], theirs_h[key], rtol=1e-5)
    assert [h for h, _ in ours_before] == [h for h, _ in theirs_before]
    for (_, a), (_, b) in zip(ours_before + ours_after, theirs_before + theirs_after, strict=True):
        _close(a, b)
    # each evaluation ran with the averages, and the weights were swapped back after it (with
    # ema_overwrite_frequency=3 the weights are their averages after the 12th step, the last)
    differ = []
    for (_, raw), (_, averaged), (_, back) in zip(ours_before[::2], ours_before[1::2], ours_after[1::2], strict=True):
        np.testing.assert_array_equal(
            np.concatenate([b.ravel() for b in back]), np.concatenate([r.ravel() for r in raw])
        )
        differ.append(not all(np.array_equal(u, v) for u, v in zip(raw, averaged, strict=True)))
    assert differ == ([True, True, False] if cfg.get("ema_overwrite_frequency") else [True, True, True])
    _close([w.numpy() for w in ours.trainable_weights], [keras.ops.convert_to_numpy(w) for w in theirs.weights])


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "frozen"])
def test_swap_on_epoch_matches_keras(jit):
    hooks = ("on_epoch_begin", "on_epoch_end", "on_test_begin", "on_test_end")
    (ours, ours_h, ours_before, ours_after), (theirs, theirs_h, theirs_before, theirs_after) = _fit_both(
        "SGD", CASES[0][1], True, jit, hooks=hooks
    )
    for key in ("loss", "val_loss"):
        np.testing.assert_allclose(ours_h[key], theirs_h[key], rtol=1e-5)
    assert [h for h, _ in ours_after] == [h for h, _ in theirs_after]
    for (_, a), (_, b) in zip(ours_before + ours_after, theirs_before + theirs_after, strict=True):
        _close(a, b)
    # from each epoch's end to the next epoch's begin the model holds the averages
    ends = [w for hook, w in ours_after if hook == "on_epoch_end"]
    begins = [w for hook, w in ours_after if hook == "on_epoch_begin"][1:]
    for end, begin in zip(ends, begins):  # noqa: B905 - the last epoch has no next begin
        assert not all(np.array_equal(u, v) for u, v in zip(end, begin, strict=True))
    # the last epoch's averages stay in the model after fit, as in Keras
    final = [w.numpy() for w in ours.trainable_weights]
    _close(final, ends[-1])
    _close(final, [keras.ops.convert_to_numpy(w) for w in theirs.weights])


def test_evaluate_and_predict_swap_back():
    model, _ = _models()
    x, y, _, _ = _data()
    model.compile(optimizer=tp.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5), loss="mse")
    model.fit(x, y, epochs=1, batch_size=8, verbose=0, shuffle=False)
    model.optimizer.apply_gradients([(tp.ones_like(w), w) for w in model.trainable_weights])  # weights != averages
    raw = [w.numpy().copy() for w in model.trainable_weights]
    averages = [model.optimizer.slots(w)["average"].numpy().copy() for w in model.trainable_weights]
    swap = tp.callbacks.SwapEMAWeights()
    with_averages = model.evaluate(x, y, verbose=0, callbacks=[swap])
    _close([w.numpy() for w in model.trainable_weights], raw)
    _close([model.optimizer.slots(w)["average"].numpy() for w in model.trainable_weights], averages)
    plain = model.evaluate(x, y, verbose=0)
    assert with_averages != plain
    predicted = model.predict(x, verbose=0, callbacks=[swap])
    _close([w.numpy() for w in model.trainable_weights], raw)
    model.set_weights(averages)
    np.testing.assert_allclose(model.evaluate(x, y, verbose=0), with_averages, rtol=1e-6)
    np.testing.assert_allclose(model.predict(x, verbose=0), predicted, rtol=1e-6)


@pytest.mark.parametrize("optimizer", [tp.optimizers.SGD(0.1), tp.optimizers.Adam(use_ema=False)])
def test_an_optimizer_without_ema_raises_as_keras(optimizer):
    ours, theirs = _models()
    x, y, vx, vy = _data()
    ours.compile(optimizer=optimizer, loss="mse")
    theirs.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    kwargs = {"epochs": 1, "verbose": 0, "validation_data": (vx, vy)}
    with pytest.raises(ValueError, match=r"keeps no weight averages \(use_ema=False\)"):
        ours.fit(x, y, callbacks=[tp.callbacks.SwapEMAWeights()], **kwargs)
    with pytest.raises(ValueError, match=r"use_ema=False"):
        theirs.fit(x, y, callbacks=[keras.callbacks.SwapEMAWeights()], **kwargs)


def test_inside_loss_scale_and_multi_optimizers():
    x, y, vx, vy = _data()
    model, _ = _models()
    inner = tp.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5)
    model.compile(optimizer=tp.optimizers.LossScaleOptimizer(inner), loss="mse")
    history = model.fit(x, y, epochs=2, verbose=0, validation_data=(vx, vy), callbacks=[tp.callbacks.SwapEMAWeights()])
    assert len(history.history["val_loss"]) == 2

    model, _ = _models()
    plain = tp.optimizers.MultiOptimizer(tp.optimizers.OptimizerMap(tp.optimizers.SGD(0.1)))
    model.compile(optimizer=plain, loss="mse", jit_compile=False)
    with pytest.raises(ValueError, match="at least one inner optimizer has `use_ema=True`"):
        model.fit(x, y, epochs=1, verbose=0, validation_data=(vx, vy), callbacks=[tp.callbacks.SwapEMAWeights()])

    model, _ = _models()
    ema = tp.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5)
    mixed = tp.optimizers.MultiOptimizer(tp.optimizers.OptimizerMap(tp.optimizers.SGD(0.1), {".*bias": ema}))
    model.compile(optimizer=mixed, loss="mse", jit_compile=False)
    raw = []
    keep = tp.callbacks.LambdaCallback(on_test_end=lambda logs: raw.append([w.numpy() for w in model.weights]))
    model.fit(x, y, epochs=1, verbose=0, validation_data=(vx, vy), callbacks=[tp.callbacks.SwapEMAWeights(), keep])
    assert len(raw) == 1


def test_swap_on_epoch_is_kept():
    assert tp.callbacks.SwapEMAWeights().swap_on_epoch is False
    assert tp.callbacks.SwapEMAWeights(swap_on_epoch=True).swap_on_epoch is True
