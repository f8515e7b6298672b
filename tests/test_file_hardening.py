"""Each file a loader was once fooled by, hung on or crashed on: graph files, weights files,
whole-model files, checkpoints, the `tapeflow` command and IDX files. Every load must end
quickly in the original content or a ValueError subclass (`tp.io.FileReadError` for damage)
that names the file."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zlib

import h5py
import numpy as np
import pytest

import tapeflow as tp
from tapeflow.cli import main as cli_main
from tapeflow.files.safe_h5 import crc32, global_heaps_sound, write_array, write_attrs, write_manifest, write_text
from tapeflow.graph.file_format.codec import GraphFileError

LEGACY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "io", "legacy")
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(tp.__file__)))
ENV = {**os.environ, "PYTHONPATH": PACKAGE_ROOT}


def legacy_model():
    """The model the files in tests/io/legacy hold (written by tapeflow before checksums)."""
    return tp.Sequential(
        [
            tp.Input((3,)),
            tp.layers.Dense(4, activation="relu", name="hidden"),
            tp.layers.Dropout(0.2, seed=1, name="drop"),
            tp.layers.Dense(2, name="out"),
        ],
        name="legacy",
    )


def small_model():
    model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(4, name="hidden"), tp.layers.Dense(2, name="out")])
    model.set_weights([np.arange(w.size, dtype=np.float32).reshape(w.shape) + 1 for w in model.get_weights()])
    return model


def flat(model) -> np.ndarray:
    return np.concatenate([w.reshape(-1) for w in model.get_weights()])


def rewrite(path, out, edit_json=None, edit_arrays=None, edit_attrs=None):
    """A copy of a checked file with its parts edited and its checksums made valid again,
    so that the loader's other checks are what must refuse it."""
    arrays, texts = {}, {}
    with h5py.File(path, "r") as f:
        attrs = {k: v.decode() if isinstance(v, bytes) else int(v) for k, v in f.attrs.items() if k != "crc32"}

        def take(name, item):
            if isinstance(item, h5py.Dataset) and name != "manifest":
                (texts if item.dtype.kind == "S" else arrays)[name] = item[()]

        f.visititems(take)
    if edit_json is not None:
        meta = json.loads(arrays["graph_json"].tobytes())
        edit_json(meta)
        arrays["graph_json"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    for edit, part in ((edit_arrays, arrays), (edit_attrs, attrs)):
        if edit is not None:
            edit(part)
    with h5py.File(out, "w") as f:
        write_attrs(f, attrs)
        for name, value in arrays.items():
            write_array(f, name, value)
        for name, value in texts.items():
            write_text(f, name, value.decode())
        write_manifest(f)
    return out


def run_isolated(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter; a hang becomes a TimeoutExpired, not a stuck test."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=ENV
    )


# ================================================================ hangs
def _zero_free_space_size(data: bytearray) -> None:
    """Zero the two low bytes of the size of the free-space object in the first global heap
    collection: HDF5 then loops forever reading any variable-length string there."""
    start = data.find(b"GCOL")
    p = start + 16
    while int.from_bytes(data[p : p + 2], "little") != 0:  # objects before the free space
        p += 16 + (int.from_bytes(data[p + 8 : p + 16], "little") + 7) // 8 * 8
    data[p + 8 : p + 10] = b"\0\0"


_LOAD_ONE = """
import sys, tapeflow as tp
sys.path.insert(0, {tests!r})
from test_file_hardening import legacy_model
kind, path = {kind!r}, {path!r}
try:
    if kind == "graph":
        tp.load_graph(path)
    elif kind == "checkpoint":
        model = legacy_model()
        tp.io.load_checkpoint(path, model, None)
    else:
        legacy_model().load_weights(path)
except tp.io.FileReadError as err:
    print("refused:", err)
"""


@pytest.mark.parametrize(
    "kind, name", [("graph", "graph_v1.tfg"), ("weights", "weights_v1.h5"), ("checkpoint", "checkpoint_v1.h5")]
)
def test_a_zeroed_global_heap_size_is_refused_not_looped_on(tmp_path, kind, name):
    data = bytearray(open(os.path.join(LEGACY, name), "rb").read())
    _zero_free_space_size(data)
    path = tmp_path / name
    path.write_bytes(bytes(data))
    code = _LOAD_ONE.format(tests=os.path.dirname(os.path.abspath(__file__)), kind=kind, path=str(path))
    done = run_isolated(code)
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and name in done.stdout and "global heap" in done.stdout, done.stdout
    if kind == "graph":  # the command line too
        cli = subprocess.run(
            [sys.executable, "-m", "tapeflow.cli", "inspect", str(path)], capture_output=True, text=True, env=ENV
        )
        assert cli.returncode == 1 and "global heap" in cli.stderr and "Traceback" not in cli.stderr


_LOAD_FUZZ_MUTANT = """
import sys
sys.path.insert(0, {tests!r})
from file_fuzz_worker import answer
print(answer({{"kind": {kind!r}, "path": {path!r}}}))
"""


@pytest.mark.parametrize(
    "kind, name",
    [
        ("checkpoint", "checkpoint_v1_class_as_vlen_sequence.h5"),  # h5py segfaulted reading the 'class' attribute
        ("named_weights", "weights_v1_looping_heap.h5"),  # HDF5 looped forever on its global heap
    ],
)
def test_mutants_that_crashed_or_hung_the_old_loaders_are_refused(kind, name):
    tests = os.path.dirname(os.path.abspath(__file__))
    done = run_isolated(_LOAD_FUZZ_MUTANT.format(tests=tests, kind=kind, path=os.path.join(LEGACY, name)))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "'outcome': 'refused'" in done.stdout and name in done.stdout, done.stdout


def test_heap_check_accepts_every_legacy_file():
    for name in ("graph_v1.tfg", "weights_v1.h5", "checkpoint_v1.h5", "model_v1.keras", "weights_v2.weights.h5"):
        assert global_heaps_sound(os.path.join(LEGACY, name)), name
    assert not global_heaps_sound(os.path.join(LEGACY, "weights_v1_looping_heap.h5"))


# ================================================================ integrity
def _flip_first_byte_of(path, dataset: str) -> None:
    with h5py.File(path, "r") as f:
        offset = f[dataset].id.get_offset()
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x40]))


def test_a_damaged_weight_is_refused_naming_the_file_and_the_entry(tmp_path):
    model = small_model()
    checks = [
        ("w.weights.h5", model.save_weights, "weights/layers/dense/kernel", small_model().load_weights),
        ("named.h5", lambda p: tp.io.save_weights(model, p), "hidden/kernel", small_model().load_weights),
        ("m.keras", model.save, "weights/layers/dense_1/bias", tp.models.load_model),
    ]
    for name, save, dataset, load in checks:
        path = tmp_path / name
        save(path)
        if dataset not in h5py.File(path, "r"):
            dataset = next(d for d in ("weights/layers/dense/kernel", "weights/hidden/kernel") if d in h5py.File(path))
        _flip_first_byte_of(path, dataset)
        with pytest.raises(tp.io.FileReadError, match=rf"{name}.*'{dataset}' is corrupt \(checksum mismatch\)"):
            load(path)


def test_a_damaged_graph_constant_or_structure_is_refused(tmp_path):
    w = tp.Variable(tp.ones((3, 2)), name="w")
    graph = tp.freeze(lambda x: tp.nn.relu(x @ w), tp.TensorSpec((None, 3)))
    for dataset in ("state/0", "graph_json"):
        path = tmp_path / "g.tfg"
        graph.save(path)
        _flip_first_byte_of(path, dataset)
        with pytest.raises(GraphFileError, match=rf"g.tfg.*'{dataset}' is corrupt"):
            tp.load_graph(path)


def test_a_damaged_checkpoint_slot_or_header_is_refused(tmp_path):
    model = small_model()
    model.compile(optimizer=tp.optimizers.Adam(), loss="mse")
    model.fit(np.ones((4, 3), np.float32), np.ones((4, 2), np.float32), epochs=1, verbose=0)
    path = tmp_path / "ckpt.h5"
    tp.io.save_checkpoint(path, model, model.optimizer, epoch=1)
    _flip_first_byte_of(path, "optimizer/slots/hidden/kernel/momentum")
    with pytest.raises(tp.io.FileReadError, match="'optimizer/slots/hidden/kernel/momentum' is corrupt"):
        tp.io.load_checkpoint(path, small_model(), tp.optimizers.Adam())
    tp.io.save_checkpoint(path, model, model.optimizer, epoch=1)
    with h5py.File(path, "a") as f:
        f.attrs["epoch"] = np.int64(7)  # edited without its checksum
    with pytest.raises(tp.io.FileReadError, match="attributes of '/' are corrupt"):
        tp.io.load_checkpoint(path, small_model(), None)


def test_a_renamed_entry_is_refused_by_the_manifest(tmp_path):
    path = tmp_path / "ckpt.h5"
    tp.io.save_checkpoint(path, small_model(), None, epoch=0, extra={"note": 1})
    with h5py.File(path, "a") as f:
        f.move("extra", "extrb")
    with pytest.raises(
        tp.io.FileReadError, match=r"do not match its manifest: missing \['extra'\], not listed \['extrb'\]"
    ):
        tp.io.load_checkpoint(path, small_model(), None)


def test_unwritten_chunks_do_not_load_as_zeros(tmp_path):
    model = small_model()
    for name, version in (("new.weights.h5", 4), ("old.weights.h5", 2)):
        path = tmp_path / name
        model.save_weights(path)
        with h5py.File(path, "a") as f:
            del f["weights/layers/dense/bias"]
            ds = f.create_dataset("weights/layers/dense/bias", shape=(4,), dtype="float32", chunks=(2,))
            ds.attrs["crc32"] = np.uint32(crc32(np.zeros(4, np.float32)))  # the checksum of what would load
            if version == 2:
                write_attrs(f, {"format": "tapeflow-weights", "version": 2})
                del f["manifest"]
        with pytest.raises(
            tp.io.FileReadError, match=rf"{name}.*'weights/layers/dense/bias' holds less data than its shape"
        ):
            small_model().load_weights(path)


def test_a_value_out_of_the_weights_range_is_refused_not_cast_to_inf(tmp_path):
    path = tmp_path / "w.weights.h5"
    small_model().save_weights(path)
    big = np.full(4, 1e300)

    def edit(arrays):
        arrays["weights/layers/dense/bias"] = big

    rewrite(path, tmp_path / "big.weights.h5", edit_arrays=edit)
    with pytest.raises(
        tp.io.FileReadError, match=r"big.weights.h5.*'weights/layers/dense/bias'.*1e\+300 does not fit float32"
    ):
        small_model().load_weights(tmp_path / "big.weights.h5")
    fine = np.arange(4, dtype=np.float64) / 3  # a float64 that rounds into float32 loads
    rewrite(path, tmp_path / "f64.weights.h5", edit_arrays=lambda a: a.update({"weights/layers/dense/bias": fine}))
    target = small_model()
    target.load_weights(tmp_path / "f64.weights.h5")
    np.testing.assert_array_equal(target.weights[1].numpy(), fine.astype(np.float32))


# ================================================================ graphs: shapes, constants, maps, caps
def _loop_graph():
    return tp.freeze(
        lambda x: tp.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s * 2.0), (tp.constant(0), x))[1],
        tp.TensorSpec((2,)),
    )


def _node(meta, op):
    return next(n for n in meta["nodes"] if n["op"] == op)


def test_an_edited_output_spec_is_refused_at_load(tmp_path):
    path = tmp_path / "loop.tfg"
    _loop_graph().save(path)

    def edit(meta):  # a consistent lie: the attr and the node's outputs both say [5]
        node = _node(meta, "while_loop")
        node["attrs"]["output_specs"]["tuple"][1]["tuple"][0] = {"tuple": [5]}
        node["outputs"][1]["shape"] = [5]

    rewrite(path, tmp_path / "lie.tfg", edit_json=edit)
    with pytest.raises(GraphFileError, match=r"lie.tfg.*while_loop.*output_specs .* disagree"):
        tp.load_graph(tmp_path / "lie.tfg")


def test_a_fused_constant_beyond_float_range_is_refused_at_load(tmp_path):
    path = tmp_path / "fused.tfg"
    tp.freeze(lambda x: tp.exp(x * 2.0) + 1.0, tp.TensorSpec((3,))).save(path)

    def edit(meta):
        program = _node(meta, "fused_elementwise")["attrs"]["program"]["tuple"]
        const = next(ins for ins in program if ins["tuple"][0] == "const")
        const["tuple"][1] = 10**400

    rewrite(path, tmp_path / "huge.tfg", edit_json=edit)
    with pytest.raises(GraphFileError, match=r"huge.tfg.*fused_elementwise.*instruction \d+ .* is invalid"):
        tp.load_graph(tmp_path / "huge.tfg")


def test_an_out_of_range_then_map_is_refused_at_load(tmp_path):
    path = tmp_path / "cond.tfg"
    tp.freeze(lambda x: tp.cond(tp.sum(x) > 0, lambda: x * 2.0, lambda: -x), tp.TensorSpec((2,))).save(path)

    def edit(meta):
        _node(meta, "cond")["attrs"]["then_map"] = {"tuple": [7]}

    rewrite(path, tmp_path / "map.tfg", edit_json=edit)
    with pytest.raises(GraphFileError, match=r"map.tfg.*cond.*capture map of then_graph \(7,\)"):
        tp.load_graph(tmp_path / "map.tfg")


def test_a_loop_that_grows_a_value_past_the_element_cap_stops(monkeypatch):
    from tapeflow.graph import control

    monkeypatch.setattr(control, "MAX_ELEMENTS", 1000)
    graph = tp.freeze(
        lambda x: tp.while_loop(lambda s: tp.sum(s) > -1.0, lambda s: tp.concat([s, s], 0), x), tp.TensorSpec((None,))
    )
    with pytest.raises(tp.graph.NodeError, match=r"loop variable 0 grew to shape \[1024\] after 10 iterations"):
        graph(np.ones(1, np.float32))


# ================================================================ while_loop(maximum_iterations=)
def _doubling(x, limit):
    return tp.while_loop(lambda i, s: i < 100, lambda i, s: (i + 1, s * 2.0), (tp.constant(0), x), limit)


def test_maximum_iterations_caps_eager_frozen_and_loaded_loops(tmp_path):
    x = np.array([1.0, -0.5], np.float32)
    expected = x * 2.0**3
    np.testing.assert_array_equal(_doubling(tp.tensor(x), 3)[1].numpy(), expected)
    np.testing.assert_array_equal(_doubling(tp.tensor(x), tp.tensor(3))[1].numpy(), expected)  # a tensor, as TF
    graph = tp.freeze(lambda t: _doubling(t, 3)[1], tp.TensorSpec((2,)))
    np.testing.assert_array_equal(graph(x).numpy(), expected)
    graph.save(tmp_path / "capped.tfg")
    np.testing.assert_array_equal(tp.load_graph(tmp_path / "capped.tfg")(x).numpy(), expected)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="maximum_iterations must be an int >= 0"):
            _doubling(tp.tensor(x), bad)


def test_maximum_iterations_gradients_eager_and_frozen():
    x = tp.tensor([1.5, -2.0])
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = tp.sum(_doubling(x, 4)[1])
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [16.0, 16.0])  # d(16 x)/dx

    @tp.function
    def frozen_grad(t):
        with tp.GradientTape() as inner:
            inner.watch(t)
            out = tp.sum(_doubling(t, 4)[1] ** 2)
        return inner.gradient(out, t)

    np.testing.assert_allclose(frozen_grad(x).numpy(), 2 * 256.0 * x.numpy())  # d(256 x^2)/dx


# ================================================================ the command line
def test_run_timeout_stops_an_endless_loop_with_status_124(tmp_path):
    graph = tp.freeze(lambda x: tp.while_loop(lambda s: tp.sum(s) > -1.0, lambda s: s + 1.0, x), tp.TensorSpec((2,)))
    graph.save(tmp_path / "endless.tfg")
    np.save(tmp_path / "x.npy", np.zeros(2, np.float32))
    done = subprocess.run(
        [sys.executable, "-m", "tapeflow.cli", "run", "endless.tfg", "--input", "x.npy", "--timeout", "1.5"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert done.returncode == 124, done.stderr
    assert "tapeflow run: error: timed out after 1.5 s" in done.stderr and "Traceback" not in done.stderr
    with pytest.raises(SystemExit):
        cli_main(["run", "endless.tfg", "--timeout", "-3"])


def test_the_command_prints_one_line_for_any_failure(tmp_path, capsys, monkeypatch):
    from tapeflow import cli

    def broken(path, **kwargs):
        raise RuntimeError("a fault deep down\nwith a second line")

    monkeypatch.setattr(cli.reader, "load_graph", broken)
    assert cli_main(["inspect", str(tmp_path / "g.tfg")]) == 1
    err = capsys.readouterr().err
    assert err == "tapeflow inspect: error: RuntimeError: a fault deep down with a second line\n"


# ================================================================ raw errors that must name the file
def _all_loaders(tmp_path):
    """(name, writer, loader) for every kind of file."""
    model = small_model()
    return [
        ("g.tfg", lambda p: tp.freeze(lambda x: x * 2.0, tp.TensorSpec((2,))).save(p), tp.load_graph),
        ("w.weights.h5", model.save_weights, lambda p: small_model().load_weights(p)),
        ("named.h5", lambda p: tp.io.save_weights(model, p), lambda p: tp.io.load_weights(small_model(), p)),
        ("m.keras", model.save, tp.models.load_model),
        (
            "ckpt.h5",
            lambda p: tp.io.save_checkpoint(p, model, None, epoch=0),
            lambda p: tp.io.load_checkpoint(p, small_model(), None),
        ),
    ]


def test_a_truncated_file_is_refused_naming_it(tmp_path):
    for name, save, load in _all_loaders(tmp_path):
        save(tmp_path / name)
        blob = (tmp_path / name).read_bytes()
        for cut in (len(blob) // 2, len(blob) - 100, 700):
            (tmp_path / f"cut-{name}").write_bytes(blob[:cut])
            with pytest.raises(tp.io.FileReadError, match=f"cut-{name}"):
                load(tmp_path / f"cut-{name}")


def test_a_link_name_that_is_not_text_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "w.h5"
    tp.io.save_weights(small_model(), path)
    with h5py.File(path, "a") as f:
        f.create_dataset(b"hidden/\xff\xfe", data=np.zeros(3))
    with pytest.raises(tp.io.FileReadError, match=r"w.h5.*link name under 'hidden/' is not UTF-8"):
        tp.io.load_weights(small_model(), path)


@pytest.mark.timeout(60)
def test_a_directory_or_fifo_is_named_as_such_and_never_blocks(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    os.mkdir(tmp_path / "folder")
    for _, _, load in _all_loaders(tmp_path):
        with pytest.raises(tp.io.FileReadError, match="folder' is a directory"):
            load(tmp_path / "folder")
        with pytest.raises(tp.io.FileReadError, match="pipe' is not a regular file"):
            load(tmp_path / "pipe")
    with pytest.raises(tp.io.FileReadError, match="pipe' is not a regular file"):
        tp.data.datasets.mnist.read_idx(tmp_path / "pipe")


def test_a_checkpoint_with_a_negative_epoch_is_refused_at_load(tmp_path):
    model = small_model()
    path = tmp_path / "ckpt.h5"
    tp.io.save_checkpoint(path, model, None, epoch=2)
    rewrite(path, tmp_path / "neg.h5", edit_attrs=lambda a: a.update(epoch=-5))
    with pytest.raises(tp.io.FileReadError, match=r"neg.h5.*'epoch' must be an integer in \[0, "):
        tp.io.load_checkpoint(tmp_path / "neg.h5", model, None)
    backup = tmp_path / "backup"
    backup.mkdir()
    shutil.copy(tmp_path / "neg.h5", backup / "checkpoint.h5")
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(tp.io.FileReadError, match="'epoch' must be an integer"):
        model.fit(np.ones((2, 3)), np.ones((2, 2)), epochs=1, callbacks=[tp.callbacks.BackupAndRestore(backup)])


def test_a_gzip_idx_file_is_not_inflated_past_its_header(tmp_path):
    import gzip

    header = bytes([0, 0, 0x08, 1]) + (4).to_bytes(4, "big")
    (tmp_path / "bomb.gz").write_bytes(gzip.compress(header + bytes(1 << 24)))  # 16 MiB after 4 bytes
    with pytest.raises(tp.io.FileReadError, match="trailing bytes"):
        tp.data.datasets.mnist.read_idx(tmp_path / "bomb.gz")
    (tmp_path / "fine.gz").write_bytes(gzip.compress(header + bytes([1, 2, 3, 4])))
    assert tp.data.datasets.mnist.read_idx(tmp_path / "fine.gz").tolist() == [1, 2, 3, 4]


# ================================================================ temp files of killed writers
def test_the_next_save_removes_stale_temp_files_of_its_target_only(tmp_path):
    path = tmp_path / "w.h5"
    stale = [tmp_path / f".w.h5.{i:012x}.tmp" for i in range(3)]
    for p in stale:
        p.write_bytes(b"x" * 100)
    others = [tmp_path / ".other.h5.0123456789ab.tmp", tmp_path / ".w.h5.notes.tmp.bak"]
    for p in others:
        p.write_bytes(b"keep")
    live = tmp_path / ".w.h5.aaaaaaaaaaaa.tmp"
    live.write_bytes(b"being written")
    with open(live, "rb") as held:  # a writer still at work holds its lock
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        tp.io.save_weights(small_model(), path)
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in others) and live.exists()
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in [path, live, *others])


_KILLED = """
import sys, time, h5py, tapeflow as tp
original = h5py.Group.create_dataset
def slow(self, *args, **kwargs):
    out = original(self, *args, **kwargs)
    open(sys.argv[2], "w").close()
    time.sleep(60)
    return out
h5py.Group.create_dataset = slow
model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)])
model.save_weights(sys.argv[1])
"""


def test_a_killed_writers_temp_file_is_removed_by_the_next_save(tmp_path):
    path, marker = tmp_path / "w.weights.h5", tmp_path / "marker"
    child = subprocess.Popen([sys.executable, "-c", _KILLED, str(path), str(marker)], env=ENV)
    try:
        for _ in range(1200):
            if marker.exists() or child.poll() is not None:
                break
            subprocess.run(["sleep", "0.05"])
        assert marker.exists()
    finally:
        child.kill()
        child.wait()
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]  # what the kill left
    small_model().save_weights(path)
    assert sorted(os.listdir(tmp_path)) == ["marker", "w.weights.h5"]


# ================================================================ files of earlier versions
def test_files_written_before_checksums_still_load():
    expected = np.load(os.path.join(LEGACY, "expected_weights.npy"))
    for name in ("weights_v1.h5", "weights_v2.weights.h5", "model_v1.keras", "checkpoint_v1.h5"):
        model = legacy_model()
        model.load_weights(os.path.join(LEGACY, name))
        np.testing.assert_array_equal(flat(model), expected)
    np.testing.assert_array_equal(flat(tp.models.load_model(os.path.join(LEGACY, "model_v1.keras"))), expected)
    model = legacy_model()
    model.compile(optimizer=tp.optimizers.Adam(1e-2), loss="mse")
    model.optimizer.build(model.trainable_weights)
    info = tp.io.load_checkpoint(os.path.join(LEGACY, "checkpoint_v1.h5"), model, model.optimizer)
    assert (info.epoch, info.shuffle_seed, info.extra) == (2, 7, {"note": "legacy"})
    graph = tp.load_graph(os.path.join(LEGACY, "graph_v1.tfg"))
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    x = np.array([[1.0, -2.0, 0.5]], np.float32)
    np.testing.assert_array_equal(graph(x).numpy(), np.maximum(x @ w, 0) + 1.0)


def test_checksums_are_crc32_of_the_little_endian_bytes():
    a = np.arange(5, dtype=">f4")
    assert crc32(a) == zlib.crc32(a.astype("<f4").tobytes())
    assert crc32(np.zeros((0, 3))) == 0


@pytest.mark.parametrize(
    "name, value",
    [
        ("format", np.array([b"tapeflow-graph", b"tapeflow-graph"])),  # an array: ambiguous truth value
        ("format_version", np.float64(2.0)),
        ("format_version", np.array([2, 2])),
        ("format", np.void(b"tapeflow-graph")),  # opaque
    ],
)
def test_root_attributes_of_an_unexpected_type_or_shape_are_refused_naming_the_file(tmp_path, name, value):
    path = tmp_path / "g.tfg"
    tp.freeze(lambda x: x * 2.0, tp.TensorSpec((2,))).save(path)
    with h5py.File(path, "a") as f:
        f.attrs[name] = value
    with pytest.raises(GraphFileError, match=rf"g.tfg.*attribute '/' '{name}'"):
        tp.load_graph(path)


def test_large_datasets_are_checksummed_block_by_block_exactly(tmp_path, monkeypatch):
    from tapeflow.files import safe_h5 as _h5safe

    monkeypatch.setattr(_h5safe, "_OVERLAP_BYTES", 1000)  # blocks of a few rows, as 64 MiB ones are
    model = tp.Sequential([tp.Input((300,)), tp.layers.Dense(70, name="wide")])
    model.set_weights([np.random.default_rng(3).standard_normal(w.shape).astype(np.float32) for w in model.weights])
    path = tmp_path / "w.weights.h5"
    model.save_weights(path)
    with h5py.File(path, "r") as f:
        data, crc = _h5safe._read_with_crc(f["weights/layers/dense/kernel"])
        assert crc == crc32(f["weights/layers/dense/kernel"][()]) and (data == model.weights[0].numpy()).all()
    target = tp.Sequential([tp.Input((300,)), tp.layers.Dense(70, name="wide")])
    target.load_weights(path)
    np.testing.assert_array_equal(flat(target), flat(model))
    _flip_first_byte_of(path, "weights/layers/dense/kernel")
    with pytest.raises(tp.io.FileReadError, match="'weights/layers/dense/kernel' is corrupt"):
        target.load_weights(path)


# ================================================================ hardening, round 2
@pytest.mark.parametrize(
    "fn, op, key, value",
    [
        (lambda x: tp.tile(x, (1, 2)), "tile", "multiples", {"tuple": [1, 2**62]}),
        (
            lambda x: tp.pad(x, [(0, 0), (1, 1)]),
            "pad",
            "paddings",
            {"tuple": [{"tuple": [0, 0]}, {"tuple": [1, 2**62]}]},
        ),
        (lambda x: tp.broadcast_to(x, (3, 2, 3)), "broadcast_to", "shape", {"tuple": [2**40, 2, 3]}),
        (lambda x: x + tp.random.normal((2, 3), seed=1), "random_normal", "shape", {"tuple": [2, 2**40]}),
    ],
)
def test_attrs_beyond_the_public_bounds_are_refused_at_load(tmp_path, fn, op, key, value):
    path = tmp_path / "g.tfg"
    tp.freeze(fn, tp.TensorSpec((2, 3))).save(path)

    def edit(meta):
        node = _node(meta, op)
        node["attrs"][key] = value

    rewrite(path, tmp_path / "big.tfg", edit_json=edit)
    with pytest.raises(GraphFileError, match=rf"big.tfg.*{op}.*must be an integer in \[0, 2147483647\]"):
        tp.load_graph(tmp_path / "big.tfg")


def test_saving_through_a_symlink_replaces_its_target_and_keeps_the_mode(tmp_path):
    model = small_model()
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "m.weights.h5"
    model.save_weights(target)
    os.chmod(target, 0o600)
    link = tmp_path / "link.weights.h5"
    os.symlink(target, link)
    model.set_weights([w + 1 for w in model.get_weights()])
    model.save_weights(link)
    assert os.path.islink(link) and os.path.realpath(link) == str(target)
    assert (os.stat(target).st_mode & 0o777) == 0o600
    fresh = small_model()
    fresh.load_weights(target)
    np.testing.assert_array_equal(flat(fresh), flat(model))
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert not [n for n in os.listdir(tmp_path / "real") if n.endswith(".tmp")]


_SAVER = """
import sys, time, numpy as np
sys.path.insert(0, {tests!r})
from test_file_hardening import small_model
model, path = small_model(), {path!r}
end = time.time() + {seconds}
i = 0
while time.time() < end:
    model.set_weights([np.full(w.shape, i % 7, np.float32) for w in model.get_weights()])
    model.save(path)
    i += 1
print(i)
"""


@pytest.mark.timeout(300)
def test_loading_while_another_process_saves_sees_the_old_or_the_new_file(tmp_path):
    path = str(tmp_path / "m.keras")
    small_model().save(path)
    first = flat(small_model())
    tests = os.path.dirname(os.path.abspath(__file__))
    saver = subprocess.Popen(
        [sys.executable, "-c", _SAVER.format(tests=tests, path=path, seconds=8)],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    loads, errors = 0, []
    try:
        while saver.poll() is None:
            try:
                weights = tp.models.load_model(path).get_weights()
            except Exception as err:  # noqa: BLE001 - every failure is collected and shown
                errors.append(f"{type(err).__name__}: {err}")
                continue
            loads += 1
            values = np.concatenate([w.reshape(-1) for w in weights])
            assert len(np.unique(values)) == 1 or (values == first).all(), values  # one save's, never a mix
    finally:
        out, err = saver.communicate(timeout=120)
    assert saver.returncode == 0, err
    assert int(out) > 5 and loads > 5, (out, loads)
    assert not errors, errors[:3]


@pytest.mark.parametrize("make", [lambda: tp.layers.LSTM(2, name="mem"), lambda: tp.layers.Dense(2, name="mem")])
def test_an_unknown_call_keyword_in_a_functional_config_is_refused_at_load(tmp_path, make, monkeypatch):
    x = tp.Input((5, 3))
    model = tp.Model(x, make()(x))
    config = model.get_config()
    config["calls"][0]["call_kwargs"]["bogus"] = 1
    monkeypatch.setattr(model, "get_config", lambda: config)
    model.save(tmp_path / "bad.keras")
    refused = r"bad.keras.*layer 'mem' \((LSTM|Dense)\).*unexpected keyword argument 'bogus'"
    with pytest.raises(ValueError, match=refused):
        tp.models.load_model(tmp_path / "bad.keras")


def test_a_config_asking_for_more_weights_than_the_file_holds_is_refused_before_allocating(tmp_path, monkeypatch):
    model = tp.Sequential([tp.Input((30,)), tp.layers.Dense(8, name="hidden"), tp.layers.Dense(2, name="out")])
    config = model.get_config()
    config["layers"][0]["config"]["units"] = 20_000_000  # a 2.4 GB kernel from a 10 KB file
    monkeypatch.setattr(model, "get_config", lambda: config)
    model.save(tmp_path / "big.keras")
    calls = []
    monkeypatch.setattr(tp.initializers.GlorotUniform, "__call__", lambda self, *a, **k: calls.append(a) or 1 / 0)
    with pytest.raises(tp.io.FileReadError, match=r"big.keras.*layer 'hidden' \(Dense\) create a weight of 600000000"):
        tp.models.load_model(tmp_path / "big.keras")
    assert not calls  # refused before any initializer ran
    monkeypatch.undo()
    fine = tmp_path / "fine.keras"
    small_model().save(fine)
    np.testing.assert_array_equal(flat(tp.models.load_model(fine)), flat(small_model()))
