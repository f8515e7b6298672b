"""Callbacks in real `fit` runs: checkpoints, early stopping, learning-rate control and CSV logs.

Monitored values are mostly scripted (a callback overwrites the logged value before the
callback under test reads it), so each expectation is worked out by hand from the script.
"""

import csv
import math

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.callbacks import (
    Callback,
    CSVLogger,
    EarlyStopping,
    LearningRateScheduler,
    ModelCheckpoint,
    ReduceLROnPlateau,
)

N, FEATURES, CLASSES = 64, 4, 3


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, FEATURES)).astype("float32")
    y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 0.5)
    return x, y


def _model(lr=0.1):
    model = tp.Sequential([tp.layers.Dense(8, activation="relu"), tp.layers.Dense(CLASSES, activation="softmax")])
    model.compile(tp.optimizers.SGD(lr), "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def _fit(model, callbacks, epochs, validation=True, **kwargs):
    x, y = _data()
    val = _data(seed=1) if validation else None
    return model.fit(x, y, batch_size=16, epochs=epochs, validation_data=val, callbacks=callbacks, verbose=0, **kwargs)


class Scripted(Callback):
    """Overwrites `logs[key]` at each epoch's end with the next scripted value."""

    def __init__(self, key, values):
        super().__init__()
        self.key, self.values = key, list(values)

    def on_epoch_end(self, epoch, logs=None):
        logs[self.key] = self.values[epoch]


class Recorder(Callback):
    """Keeps the weights after every epoch and the learning rate at the start of every epoch."""

    def __init__(self):
        super().__init__()
        self.weights, self.lrs = [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.lrs.append(self.model.optimizer.learning_rate)

    def on_epoch_end(self, epoch, logs=None):
        self.weights.append(self.model.get_weights())


def _same(a, b):
    return len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(a, b, strict=True))


# --------------------------------------------------------------- ModelCheckpoint


def test_checkpoint_every_epoch_formats_epoch_and_logged_values(tmp_path):
    model, recorder = _model(), Recorder()
    pattern = str(tmp_path / "ckpt" / "w.{epoch:02d}-{val_loss:.2f}.h5")
    history = _fit(model, [recorder, ModelCheckpoint(pattern)], epochs=3)
    val_loss = history.history["val_loss"]
    expected = [tmp_path / "ckpt" / f"w.{e + 1:02d}-{val_loss[e]:.2f}.h5" for e in range(3)]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == sorted(p.name for p in expected)
    for epoch, path in enumerate(expected):
        model.load_weights(str(path))
        assert _same(model.get_weights(), recorder.weights[epoch])


def test_checkpoint_save_best_only_keeps_only_improvements(tmp_path):
    model, recorder = _model(), Recorder()
    scripted = Scripted("val_loss", [1.0, 0.5, 0.7, 0.4, 0.6])
    every = ModelCheckpoint(str(tmp_path / "e{epoch}.h5"), save_best_only=True)
    best = ModelCheckpoint(str(tmp_path / "best.h5"), save_best_only=True)
    _fit(model, [scripted, recorder, every, best], epochs=5)
    assert sorted(p.name for p in tmp_path.glob("e*.h5")) == ["e1.h5", "e2.h5", "e4.h5"]
    assert best.best == 0.4
    model.load_weights(str(tmp_path / "best.h5"))
    assert _same(model.get_weights(), recorder.weights[3])


def test_checkpoint_mode_auto_maximizes_accuracy_and_honours_threshold(tmp_path):
    scripted = Scripted("val_accuracy", [0.5, 0.7, 0.6, 0.8])
    auto = ModelCheckpoint(str(tmp_path / "a{epoch}.h5"), monitor="val_accuracy", save_best_only=True)
    assert auto.mode == "max"
    gated = ModelCheckpoint(
        str(tmp_path / "g{epoch}.h5"), monitor="val_accuracy", save_best_only=True, initial_value_threshold=0.75
    )
    _fit(_model(), [scripted, auto, gated], epochs=4)
    assert sorted(p.name for p in tmp_path.glob("a*.h5")) == ["a1.h5", "a2.h5", "a4.h5"]
    assert sorted(p.name for p in tmp_path.glob("g*.h5")) == ["g4.h5"]


def test_checkpoint_every_n_batches_counts_across_epochs(tmp_path):
    # 64 samples / 16 per batch = 4 batches an epoch; every 3rd of 12 batches: epoch.batch 1.3, 2.2, 3.1, 3.4
    _fit(_model(), [ModelCheckpoint(str(tmp_path / "e{epoch}b{batch}.h5"), save_freq=3)], epochs=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e1b3.h5", "e2b2.h5", "e3b1.h5", "e3b4.h5"]


def test_checkpoint_errors_and_missing_monitor(tmp_path):
    with pytest.raises(ValueError, match="save_freq"):
        ModelCheckpoint(str(tmp_path / "m.h5"), save_freq=0)
    with pytest.raises(ValueError, match="mode"):
        ModelCheckpoint(str(tmp_path / "m.h5"), mode="up")
    with pytest.raises(ValueError, match="val_acc.*val_accuracy"):
        _fit(_model(), [ModelCheckpoint(str(tmp_path / "{val_acc}.h5"))], epochs=1)
    with pytest.warns(RuntimeWarning, match="'val_loss' is not in the logs"):
        _fit(_model(), [ModelCheckpoint(str(tmp_path / "m.h5"), save_best_only=True)], epochs=1, validation=False)
    assert not (tmp_path / "m.h5").exists()


# ----------------------------------------------------------------- EarlyStopping


def test_early_stopping_stops_after_patience_and_restores_best_weights():
    recorder = Recorder()
    scripted = Scripted("val_loss", [1.0, 0.8, 0.9, 0.85, 0.95, 0.7])
    stopper = EarlyStopping(patience=2, restore_best_weights=True)
    model = _model()
    history = _fit(model, [scripted, recorder, stopper], epochs=6)
    # best 0.8 at epoch 1; epochs 2 and 3 do not improve, so training stops after epoch 3
    assert len(history.history["loss"]) == 4
    assert (stopper.stopped_epoch, stopper.best_epoch, stopper.best) == (3, 1, 0.8)
    assert _same(model.get_weights(), recorder.weights[1])


def test_early_stopping_restores_best_weights_when_all_epochs_run():
    recorder = Recorder()
    scripted = Scripted("val_loss", [0.5, 0.3, 0.4, 0.45])
    stopper = EarlyStopping(patience=10, restore_best_weights=True)
    model = _model()
    history = _fit(model, [scripted, recorder, stopper], epochs=4)
    assert len(history.history["loss"]) == 4 and stopper.stopped_epoch == 0
    assert not _same(recorder.weights[1], recorder.weights[3])
    assert _same(model.get_weights(), recorder.weights[1])


def test_early_stopping_without_restore_keeps_last_weights():
    recorder = Recorder()
    model = _model()
    _fit(model, [Scripted("val_loss", [0.5, 0.3, 0.4]), recorder, EarlyStopping(patience=5)], epochs=3)
    assert _same(model.get_weights(), recorder.weights[2])


@pytest.mark.parametrize(
    "kwargs, key, script, epochs_run, best_epoch",
    [
        # an improvement smaller than min_delta does not count: stop after epoch 1
        ({"min_delta": 0.1, "patience": 1}, "val_loss", [1.0, 0.95, 0.92, 0.9], 2, 0),
        # auto mode maximizes accuracy
        ({"monitor": "val_accuracy", "patience": 1}, "val_accuracy", [0.5, 0.6, 0.55, 0.7], 3, 1),
        ({"monitor": "val_loss", "mode": "max", "patience": 1}, "val_loss", [0.5, 0.6, 0.55, 0.7], 3, 1),
        # improving but never beating the baseline: stops after `patience` epochs
        ({"baseline": 0.5, "patience": 2}, "val_loss", [0.9, 0.8, 0.7, 0.6, 0.4], 2, 1),
        # beating the baseline resets patience as usual
        ({"baseline": 0.5, "patience": 2}, "val_loss", [0.9, 0.45, 0.4, 0.41, 0.42, 0.43], 5, 2),
        # the first two epochs are ignored, even though later ones are worse
        ({"start_from_epoch": 2, "patience": 1}, "val_loss", [1.0, 2.0, 3.0, 4.0, 5.0], 4, 2),
        ({"patience": 0}, "val_loss", [1.0, 0.9, 0.8, 0.8, 0.7], 4, 2),
    ],
)
def test_early_stopping_options(kwargs, key, script, epochs_run, best_epoch):
    stopper = EarlyStopping(**kwargs)
    history = _fit(_model(), [Scripted(key, script), stopper], epochs=len(script))
    assert len(history.history["loss"]) == epochs_run
    assert stopper.best_epoch == best_epoch


def test_early_stopping_on_a_real_plateau():
    # learning rate 0: the validation loss never changes, so patience runs out after epoch 2
    stopper = EarlyStopping(monitor="val_loss", patience=2)
    history = _fit(_model(lr=0.0), [stopper], epochs=10)
    assert len(set(history.history["val_loss"])) == 1
    assert len(history.history["val_loss"]) == 3 and stopper.stopped_epoch == 2


def test_early_stopping_warns_about_a_missing_monitor():
    with pytest.warns(RuntimeWarning, match="available: loss, accuracy"):
        history = _fit(_model(), [EarlyStopping(patience=0)], epochs=2, validation=False)
    assert len(history.history["loss"]) == 2


# ------------------------------------------------------------- ReduceLROnPlateau


@pytest.mark.parametrize(
    "kwargs, script, lrs",
    [
        # plateau from the start: reduce after 2 epochs, then one cooldown epoch that does not count
        (
            {"factor": 0.5, "patience": 2, "cooldown": 1},
            [1.0] * 8,
            [0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025],
        ),
        # clamped at min_lr, then no further change
        ({"factor": 0.1, "patience": 1, "min_lr": 0.003}, [1.0] * 5, [0.1, 0.1, 0.01, 0.003, 0.003]),
        # improvements smaller than min_delta count as none; a real improvement resets patience
        (
            {"factor": 0.5, "patience": 1, "min_delta": 0.1},
            [1.0, 0.95, 0.9, 0.7, 0.65, 0.5],
            [0.1, 0.1, 0.05, 0.025, 0.025, 0.0125],
        ),
        # an improvement during a cooldown still sets the best value
        # (0.7 is then no improvement, so it reduces again)
        ({"factor": 0.5, "patience": 1, "cooldown": 1}, [1.0, 1.0, 0.5, 0.7, 0.7], [0.1, 0.1, 0.05, 0.05, 0.025]),
    ],
)
def test_reduce_lr_on_plateau_schedule(kwargs, script, lrs):
    model, recorder = _model(lr=0.1), Recorder()
    history = _fit(model, [Scripted("val_loss", script), recorder, ReduceLROnPlateau(**kwargs)], epochs=len(script))
    np.testing.assert_allclose(recorder.lrs, lrs, rtol=1e-12)
    np.testing.assert_allclose(history.history["learning_rate"], lrs, rtol=1e-12)


def test_reduce_lr_on_plateau_maximizes_accuracy():
    model, recorder = _model(lr=0.1), Recorder()
    scripted = Scripted("val_accuracy", [0.5, 0.6, 0.6, 0.6])
    reducer = ReduceLROnPlateau(monitor="val_accuracy", factor=0.5, patience=1)
    _fit(model, [scripted, recorder, reducer], epochs=4)
    assert reducer.mode == "max"
    assert recorder.lrs == [0.1, 0.1, 0.1, 0.05]
    assert model.optimizer.learning_rate == 0.025


def test_reduce_lr_on_plateau_rejects_schedules_and_bad_factors():
    model = tp.Sequential([tp.layers.Dense(CLASSES, activation="softmax")])
    schedule = tp.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.9)
    model.compile(tp.optimizers.SGD(schedule), "sparse_categorical_crossentropy")
    with pytest.raises(TypeError, match="schedule.*float learning_rate"):
        _fit(model, [ReduceLROnPlateau()], epochs=1)
    with pytest.raises(ValueError, match="factor"):
        ReduceLROnPlateau(factor=1.0)


# --------------------------------------------------------- LearningRateScheduler


def test_learning_rate_scheduler_sets_each_epochs_rate():
    model, recorder = _model(lr=0.1), Recorder()
    seen = []

    def schedule(epoch, lr):
        seen.append((epoch, lr))
        return 0.2 * 0.5**epoch

    history = _fit(model, [LearningRateScheduler(schedule), recorder], epochs=3)
    assert seen == [(0, 0.1), (1, 0.2), (2, 0.1)]
    assert recorder.lrs == [0.2, 0.1, 0.05]
    assert history.history["learning_rate"] == [0.2, 0.1, 0.05]


def test_learning_rate_scheduler_rate_zero_freezes_the_weights():
    model, recorder = _model(lr=0.1), Recorder()
    _fit(model, [LearningRateScheduler(lambda epoch, lr: 0.1 if epoch < 2 else 0.0), recorder], epochs=4)
    assert not _same(recorder.weights[0], recorder.weights[1])
    assert _same(recorder.weights[1], recorder.weights[2]) and _same(recorder.weights[2], recorder.weights[3])


@pytest.mark.parametrize("value, error", [(None, TypeError), (-1.0, ValueError), (math.nan, ValueError)])
def test_learning_rate_scheduler_rejects_bad_rates(value, error):
    with pytest.raises(error, match="LearningRateScheduler"):
        _fit(_model(), [LearningRateScheduler(lambda epoch, lr: value)], epochs=1)


# --------------------------------------------------------------------- CSVLogger


def _read_csv(path, separator=","):
    with open(path, newline="") as f:
        return list(csv.reader(f, delimiter=separator))


class RowCounter(Callback):
    """Reads the CSV file at each epoch's end, to see that rows are flushed as they are written."""

    def __init__(self, path):
        super().__init__()
        self.path, self.rows = path, []

    def on_epoch_end(self, epoch, logs=None):
        self.rows.append(len(_read_csv(self.path)))


def test_csv_logger_writes_one_flushed_row_per_epoch(tmp_path):
    path = tmp_path / "log.csv"
    counter = RowCounter(path)
    history = _fit(_model(), [CSVLogger(str(path)), counter], epochs=3)
    rows = _read_csv(path)
    keys = sorted(history.history)
    assert rows[0] == ["epoch", *keys]
    assert [int(row[0]) for row in rows[1:]] == [0, 1, 2]
    for column, key in enumerate(keys, start=1):
        assert [float(row[column]) for row in rows[1:]] == history.history[key]
    assert counter.rows == [2, 3, 4]  # header + one row per finished epoch


def test_csv_logger_appends_under_the_existing_header(tmp_path):
    path = tmp_path / "log.tsv"
    model = _model()
    _fit(model, [CSVLogger(path, separator="\t")], epochs=2)
    _fit(model, [CSVLogger(path, separator="\t", append=True)], epochs=3, initial_epoch=1)
    rows = _read_csv(path, "\t")
    assert rows[0] == ["epoch", "accuracy", "loss", "val_accuracy", "val_loss"]
    assert [row[0] for row in rows[1:]] == ["0", "1", "1", "2"]
    # without validation data the val_ columns of the existing header are marked missing
    _fit(model, [CSVLogger(path, separator="\t", append=True)], epochs=1, validation=False)
    assert _read_csv(path, "\t")[-1][3:] == ["NA", "NA"]
    # without append, the file starts over
    _fit(model, [CSVLogger(path, separator="\t")], epochs=1)
    assert len(_read_csv(path, "\t")) == 2


def test_checkpoint_can_save_the_whole_model(tmp_path):
    model = _model()
    _fit(model, [ModelCheckpoint(str(tmp_path / "m{epoch}.keras"), save_weights_only=False)], epochs=2)
    loaded = tp.models.load_model(tmp_path / "m2.keras")
    x, _ = _data()
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    assert loaded.optimizer.iterations == model.optimizer.iterations
