"""Weights files and training checkpoints: round trips, strict reports, refused files,
saves that survive SIGKILL, and fit runs resumed from a checkpoint that match
uninterrupted ones exactly."""

import json
import os
import pickle
import random
import signal
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest

import tapeflow as tp
from tapeflow.files.safe_h5 import write_array, write_attrs, write_text
from tapeflow.io import BackupAndRestore, WeightsMismatchError
from tapeflow.trainers.data_adapter import ArrayData, shuffled_batches

CHILD_ENV = {**os.environ, "PYTHONHASHSEED": "0"}


class _Jitter(tp.layers.Layer):
    """Training noise from the global random stream, so a resume must restore that too."""

    def call(self, inputs, training=None):
        return inputs + tp.random.normal(inputs.shape, stddev=0.01) if training else inputs

    def compute_output_shape(self, input_shape):
        return input_shape


def _net(hidden=16):
    """Layers named explicitly, so models made anywhere match the same files."""
    return tp.Sequential(
        [
            tp.layers.Dense(hidden, activation="relu", name="hidden"),
            tp.layers.BatchNormalization(name="norm"),
            _Jitter(name="jitter"),
            tp.layers.Dropout(0.3, seed=5, name="drop"),
            tp.layers.Dense(3, name="logits"),
        ],
        name="net",
    )


def _built(model, features=6):
    model(np.zeros((2, features), "float32"))
    return model


def _data(n=48, features=6):
    rng = np.random.default_rng(7)
    return rng.standard_normal((n, features)).astype("float32"), rng.integers(0, 3, n)


def _assert_same_weights(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


# ------------------------------------------------------------------ weights
def test_weights_round_trip_with_documented_layout(tmp_path):
    path = tmp_path / "w.h5"
    source = _built(_net())
    tp.io.save_weights(source, path)
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] == b"tapeflow-weights" and f.attrs["version"] == tp.io.FORMAT_VERSION
        stored = []
        f.visititems(lambda name, item: stored.append(name) if isinstance(item, h5py.Dataset) else None)
    stored.remove("manifest")  # the list of entries the file holds
    assert sorted(stored) == sorted(w.name for w in source.weights)
    assert "norm/moving_mean" in stored  # non-trainable weights travel too

    target = _built(_net())
    report = tp.io.load_weights(target, path)
    assert report.ok and set(report.matched) == set(stored)
    _assert_same_weights(target.get_weights(), source.get_weights())
    assert os.listdir(tmp_path) == ["w.h5"]  # no temp file left behind


def test_nested_layers_use_their_variable_names_and_values_are_cast(tmp_path):
    class Nested(tp.Model):
        def __init__(self, dtype):
            super().__init__(name="outer")
            self.block = tp.Sequential([tp.layers.Dense(4, name="inner", dtype=dtype)], name="block")
            self.head = tp.layers.Dense(2, name="head", dtype=dtype)

        def call(self, x, training=None):
            return self.head(self.block(x))

    source = _built(Nested("float64"), 3)
    tp.io.save_weights(source, tmp_path / "w.h5")
    with h5py.File(tmp_path / "w.h5", "r") as f:
        assert f["inner/kernel"].dtype == np.float64 and f["head/bias"].shape == (2,)
    target = _built(Nested("float32"), 3)
    tp.io.load_weights(target, tmp_path / "w.h5")
    for got, want in zip(target.get_weights(), source.get_weights(), strict=True):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want.astype(np.float32))


def _mismatched_pair(tmp_path):
    """A file with a, b(4->3); a model with a, b(4->5), c: b mismatched, c missing... and a file-only d."""
    saved = tp.Sequential(
        [tp.layers.Dense(4, name="a"), tp.layers.Dense(3, name="b"), tp.layers.Dense(2, name="d")], name="saved"
    )
    tp.io.save_weights(_built(saved, 2), tmp_path / "w.h5")
    model = tp.Sequential(
        [tp.layers.Dense(4, name="a"), tp.layers.Dense(5, name="b"), tp.layers.Dense(2, name="c")], name="model"
    )
    return _built(model, 2), saved


def test_strict_load_names_every_offending_weight_and_changes_nothing(tmp_path):
    model, _ = _mismatched_pair(tmp_path)
    before = model.get_weights()
    with pytest.raises(WeightsMismatchError) as caught:
        tp.io.load_weights(model, tmp_path / "w.h5")
    message = str(caught.value)
    for name in ("c/kernel", "c/bias", "d/kernel", "d/bias", "b/kernel", "b/bias", "(4, 3)", "(4, 5)"):
        assert name in message
    report = caught.value.report
    assert isinstance(caught.value, ValueError)
    assert report.missing == ("c/kernel", "c/bias") and report.unexpected == ("d/bias", "d/kernel")
    assert [m.name for m in report.mismatched] == ["b/kernel", "b/bias"]
    assert report.mismatched[0].file_shape == (4, 3) and report.mismatched[0].model_shape == (4, 5)
    _assert_same_weights(model.get_weights(), before)  # "a" matched, yet was not loaded either


def test_non_strict_load_takes_what_matches(tmp_path):
    model, saved = _mismatched_pair(tmp_path)
    before = model.get_weights()
    report = tp.io.load_weights(model, tmp_path / "w.h5", strict=False)
    assert report.matched == ("a/kernel", "a/bias") and not report.ok
    assert repr(report) == (
        "LoadReport(matched=2, missing=['c/kernel', 'c/bias'], unexpected=['d/bias', 'd/kernel'], "
        "mismatched=['b/kernel: file (4, 3), model (4, 5)', 'b/bias: file (3,), model (5,)'])"
    )
    after = model.get_weights()
    _assert_same_weights(after[:2], saved.get_weights()[:2])
    _assert_same_weights(after[2:], before[2:])


def test_newer_version_wrong_format_and_non_hdf5_files_are_refused(tmp_path):
    model = _built(_net())
    path = tmp_path / "w.h5"
    tp.io.save_weights(model, path)
    with h5py.File(path, "a") as f:
        write_attrs(f, {"format": "tapeflow-weights", "version": 5})
    with pytest.raises(tp.io.FileReadError, match="version 5 was written by a newer tapeflow"):
        tp.io.load_weights(model, path)
    with h5py.File(path, "a") as f:
        write_attrs(f, {"format": "keras", "version": 3})
    with pytest.raises(ValueError, match="is not a tapeflow-weights or tapeflow-checkpoint file.*'keras'"):
        tp.io.load_weights(model, path)
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(ValueError, match="not an HDF5 file"):
        tp.io.load_weights(model, tmp_path / "text.h5")
    with pytest.raises(FileNotFoundError):
        tp.io.load_weights(model, tmp_path / "absent.h5")
    tp.io.save_weights(model, path)
    with pytest.raises(ValueError, match="is not a tapeflow-checkpoint file"):
        tp.io.load_checkpoint(path, model, None)


def test_unbuilt_models_and_duplicate_weight_names_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not built yet"):
        tp.io.save_weights(_net(), tmp_path / "w.h5")
    twins = _built(tp.Sequential([tp.layers.Dense(6, name="same"), tp.layers.Dense(6, name="same")]))
    with pytest.raises(ValueError, match="both named 'same/kernel'; give the layers unique names"):
        tp.io.save_weights(twins, tmp_path / "w.h5")
    assert os.listdir(tmp_path) == []


TRIGGERED = []


def _record_unpickling():
    TRIGGERED.append(True)
    return "boom"


class _Payload:
    def __reduce__(self):
        return (_record_unpickling, ())


PICKLED = pickle.dumps(_Payload())


def _plant(kind):
    """Rewrite the hidden layer's kernel (shape (6, 16)) as something hostile."""

    def plant(f):
        del f["hidden/kernel"]
        group = f["hidden"]
        if kind == "object strings":
            group.create_dataset("kernel", data=np.full((6, 16), "x", dtype=object), dtype=h5py.string_dtype())
        elif kind == "opaque pickle":
            group["kernel"] = np.void(PICKLED)
        elif kind == "pickle as bytes":
            group.create_dataset("kernel", data=np.array([PICKLED]))
        elif kind == "external link":
            group["kernel"] = h5py.ExternalLink("elsewhere.h5", "/kernel")
        elif kind == "soft link":
            group["kernel"] = h5py.SoftLink("/hidden/bias")
        elif kind == "group cycle":
            group["kernel"] = np.zeros((6, 16), "float32")
            group["loop"] = f["hidden"]

    return plant


@pytest.mark.parametrize(
    "kind", ["object strings", "opaque pickle", "pickle as bytes", "external link", "soft link", "group cycle"]
)
def test_hostile_files_are_refused_before_anything_is_read(tmp_path, kind):
    model = _built(_net())
    path = tmp_path / "w.h5"
    tp.io.save_weights(model, path)
    with h5py.File(path, "a") as f:
        _plant(kind)(f)
    before = model.get_weights()
    for strict in (True, False):
        with pytest.raises(ValueError, match="refused|only plain groups|only a plain tree"):
            tp.io.load_weights(model, path, strict=strict)
    _assert_same_weights(model.get_weights(), before)
    assert not TRIGGERED


def test_pickled_bytes_in_a_numeric_dataset_are_only_numbers(tmp_path):
    model = tp.Sequential([tp.layers.Dense(len(PICKLED), name="d")])
    _built(model, 1)
    path = tmp_path / "w.h5"
    tp.io.save_weights(model, path)
    with h5py.File(path, "a") as f:
        del f["d/bias"]
        write_array(f, "d/bias", np.frombuffer(PICKLED, dtype=np.uint8))
    tp.io.load_weights(model, path)
    np.testing.assert_array_equal(model.weights[1].numpy(), np.frombuffer(PICKLED, np.uint8).astype("float32"))
    assert not TRIGGERED


# -------------------------------------------------------------- checkpoints
def _train_steps(model, optimizer, steps, x, y):
    loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    for i in range(steps):
        xb, yb = tp.tensor(x[i * 8 : i * 8 + 8]), tp.tensor(y[i * 8 : i * 8 + 8])
        with tp.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        variables = model.trainable_weights
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))


def test_checkpoint_restores_weights_optimizer_and_every_random_stream(tmp_path):
    x, y = _data()
    model, opt = _built(_net()), tp.optimizers.Adam(0.01)
    _train_steps(model, opt, 2, x, y)
    path = tmp_path / "ckpt.h5"
    tp.io.save_checkpoint(path, model, opt, epoch=3, extra={"lr": [0.1, 0.01]}, shuffle_seed=2**63 + 5)
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] == b"tapeflow-checkpoint" and f.attrs["epoch"] == 3
        assert set(json.loads(f["rng"][()])["layers"]) == {"drop/generator"}
        assert f["optimizer"].attrs["class"] == b"Adam" and f["optimizer"].attrs["iterations"] == 2
        assert "hidden/kernel/velocity" in f["optimizer/slots"]
    _train_steps(model, opt, 3, x[16:], y[16:])
    expected = model.get_weights()
    next_global_draw = tp.random.uniform((4,)).numpy()

    tp.random.seed(123)  # the restore must undo this, and the fresh model's own streams
    fresh, fresh_opt = _built(_net()), tp.optimizers.Adam(0.01)
    info = tp.io.load_checkpoint(path, fresh, fresh_opt)
    assert (info.epoch, info.shuffle_seed, info.extra) == (3, 2**63 + 5, {"lr": [0.1, 0.01]})
    assert fresh_opt.iterations == 2 and info.weights.ok
    _train_steps(fresh, fresh_opt, 3, x[16:], y[16:])
    _assert_same_weights(fresh.get_weights(), expected)
    np.testing.assert_array_equal(tp.random.uniform((4,)).numpy(), next_global_draw)


def test_checkpoint_mismatches_are_refused_and_failed_saves_leave_files_alone(tmp_path):
    model, opt = _built(_net()), tp.optimizers.Adam()
    _train_steps(model, opt, 1, *_data())
    path = tmp_path / "ckpt.h5"
    tp.io.save_checkpoint(path, model, opt, epoch=0)
    original = path.read_bytes()
    with pytest.raises(TypeError, match="extra must be JSON-serializable"):
        tp.io.save_checkpoint(path, model, opt, epoch=1, extra={"bad": object()})
    assert path.read_bytes() == original and os.listdir(tmp_path) == ["ckpt.h5"]

    with pytest.raises(ValueError, match="holds 'Adam' state, not SGD"):
        tp.io.load_checkpoint(path, _built(_net()), tp.optimizers.SGD())
    no_dropout = _built(tp.Sequential([tp.layers.Dense(16, name="hidden"), tp.layers.Dense(3, name="logits")]))
    with pytest.raises(
        ValueError, match="random generators do not match.*missing \\[\\], unexpected \\['drop/generator'\\]"
    ):
        tp.io.load_checkpoint(path, no_dropout, None)
    with h5py.File(path, "a") as f:
        del f["rng"]
        write_text(f, "rng", "{not json")
    with pytest.raises(ValueError, match="'rng' is not valid JSON"):
        tp.io.load_checkpoint(path, _built(_net()), None)


# ---------------------------------------------------- saves killed mid-write
SAVER = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tapeflow as tp

    model = tp.Sequential([tp.layers.Dense(512, name=f"d{i}") for i in range(6)])
    model(np.zeros((1, 512), "float32"))
    opt = tp.optimizers.Adam()
    opt.build(model.trainable_weights)
    for i in range(1, 10**6):
        for v in model.weights + opt.variables:
            v.assign(np.full(v.shape, i, "float32"))
        tp.io.save_checkpoint(sys.argv[1], model, opt, epoch=i)
        print(i, flush=True)
    """
)


def test_a_save_killed_at_random_moments_leaves_the_previous_complete_file(tmp_path):
    path = tmp_path / "ckpt.h5"
    model = _built(tp.Sequential([tp.layers.Dense(512, name=f"d{i}") for i in range(6)]), 512)
    opt = tp.optimizers.Adam()
    for trial in range(4):
        child = subprocess.Popen(
            [sys.executable, "-c", SAVER, str(path)], stdout=subprocess.PIPE, text=True, env=CHILD_ENV
        )
        first = child.stdout.readline()  # one complete save exists from here on
        assert first.strip().isdigit(), first
        random.seed(trial)
        try:
            child.wait(timeout=random.uniform(0.0, 0.3))
        except subprocess.TimeoutExpired:
            os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert child.returncode == -signal.SIGKILL
        reported = int(([first] + child.stdout.read().split())[-1])
        child.stdout.close()

        info = tp.io.load_checkpoint(path, model, opt)
        assert info.epoch in (reported, reported + 1)  # the kill may land between the replace and the print
        for v in model.weights + opt.variables:
            np.testing.assert_array_equal(v.numpy(), np.float32(info.epoch))
        leftovers = set(os.listdir(tmp_path)) - {"ckpt.h5"}
        assert all(name.startswith(".ckpt.h5.") and name.endswith(".tmp") for name in leftovers), leftovers
        removed = tp.io.remove_temp_files(path)
        assert len(removed) == len(leftovers) and os.listdir(tmp_path) == ["ckpt.h5"]


# ------------------------------------------------------------------ resuming
class _Crash(tp.callbacks.Callback):
    def __init__(self, after_epoch):
        super().__init__()
        self.after_epoch = after_epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.after_epoch:
            raise KeyboardInterrupt("simulated crash")


OPTIMIZERS = {
    "sgd": lambda: tp.optimizers.SGD(0.05, momentum=0.9),
    "adam": lambda: tp.optimizers.Adam(0.01),
}


def _compiled(optimizer):
    model = _net()
    model.compile(OPTIMIZERS[optimizer](), tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _uninterrupted(optimizer, epochs=4):
    x, y = _data()
    tp.random.seed(0)
    model = _compiled(optimizer)
    model.fit(x, y, batch_size=8, epochs=epochs, verbose=0)
    return model.get_weights()


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_fit_resumed_after_a_crash_matches_the_uninterrupted_run(tmp_path, optimizer):
    x, y = _data()
    expected = _uninterrupted(optimizer)

    tp.random.seed(0)
    model = _compiled(optimizer)
    with pytest.raises(KeyboardInterrupt):
        model.fit(x, y, batch_size=8, epochs=4, verbose=0, callbacks=[BackupAndRestore(tmp_path), _Crash(1)])
    assert os.path.exists(tmp_path / "checkpoint.h5")

    tp.random.seed(99)  # a new, unbuilt model with other initial weights and other random streams
    resumed = _compiled(optimizer)
    history = resumed.fit(x, y, batch_size=8, epochs=4, verbose=0, callbacks=[BackupAndRestore(tmp_path)])
    assert history.epoch == [2, 3]
    _assert_same_weights(resumed.get_weights(), expected)
    assert not os.path.exists(tmp_path / "checkpoint.h5")  # a run that completes deletes its backup


def test_fit_continues_a_finished_run_when_the_backup_is_kept(tmp_path):
    x, y = _data()
    expected = _uninterrupted("adam", epochs=3)
    tp.random.seed(0)
    model = _compiled("adam")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[BackupAndRestore(tmp_path, delete_checkpoint=False)])
    tp.random.seed(5)
    again = _compiled("adam")
    history = again.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=[BackupAndRestore(tmp_path)])
    assert history.epoch == [1, 2]
    _assert_same_weights(again.get_weights(), expected)


TRAINER = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, os.path.dirname(sys.argv[1]))
    import tapeflow as tp
    from test_checkpoint import _compiled, _data

    class Die(tp.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                os.kill(os.getpid(), signal.SIGKILL)

    x, y = _data()
    tp.random.seed(0)
    model = _compiled("adam")
    model.fit(x, y, batch_size=8, epochs=4, verbose=0, callbacks=[tp.io.BackupAndRestore(sys.argv[2]), Die()])
    """
)


def test_fit_resumed_after_the_training_process_was_killed_matches(tmp_path):
    child = subprocess.run(
        [sys.executable, "-c", TRAINER, os.path.abspath(__file__), str(tmp_path)], env=CHILD_ENV, capture_output=True
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    x, y = _data()
    expected = _uninterrupted("adam")
    tp.random.seed(42)
    resumed = _compiled("adam")
    history = resumed.fit(x, y, batch_size=8, epochs=4, verbose=0, callbacks=[BackupAndRestore(tmp_path)])
    assert history.epoch == [2, 3]
    _assert_same_weights(resumed.get_weights(), expected)


def test_restoring_needs_a_built_model_when_the_data_is_a_dataset(tmp_path):
    x, y = _data()
    model = _compiled("sgd")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[BackupAndRestore(tmp_path, delete_checkpoint=False)])
    data = tp.data.Dataset.from_tensor_slices((x, y)).batch(8)
    with pytest.raises(ValueError, match="must be built to restore"):
        _compiled("sgd").fit(data, epochs=2, verbose=0, callbacks=[BackupAndRestore(tmp_path)])


def test_each_epoch_shuffle_depends_only_on_seed_and_epoch():
    arrays = ArrayData(np.arange(10, dtype="float32")[:, None], np.zeros(10))
    first = [np.ravel(b[0]).tolist() for b in shuffled_batches(arrays.dataset(), 10, 10, 3, 2)]
    tp.random.seed(77)
    again = [np.ravel(b[0]).tolist() for b in shuffled_batches(arrays.dataset(), 10, 10, 3, 2)]
    other = [np.ravel(b[0]).tolist() for b in shuffled_batches(arrays.dataset(), 10, 10, 3, 1)]
    assert first == again and first != other and sorted(first[0]) == list(range(10))
