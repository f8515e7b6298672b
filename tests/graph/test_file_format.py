"""Saved graph files: round trips against eager execution, atomic writes, and hostile files.

Round trips compare the loaded graph with the original graph (bit for bit) and with the
eager model (the independent reference). Hostile files are built by editing the JSON and
datasets of a valid file with h5py; each must be refused with a GraphFileError.
"""

import io
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest

import tapeflow as tp
from tapeflow.files.safe_h5 import write_array, write_attrs, write_manifest
from tapeflow.graph.file_format.codec import FORMAT_VERSION, GraphFileError


# ------------------------------------------------------------------ helpers
def roundtrip(graph, tmp_path, name="g.tfg"):
    path = tmp_path / name
    graph.save(path)
    return tp.load_graph(path)


def assert_same_graph_text(a, b):
    assert str(a) == str(b)


def mlp_graph():
    model = tp.Sequential([tp.layers.Dense(16, activation="relu"), tp.layers.Dense(10)])
    model(np.zeros((1, 8), np.float32))
    return model, tp.freeze(lambda x: model(x, training=False), tp.TensorSpec((None, 8)))


def small_graph():
    w = tp.Variable(np.arange(6, dtype=np.float32).reshape(3, 2), name="w")
    return tp.freeze(lambda x: tp.nn.relu(x @ w) + 1.0, tp.TensorSpec((None, 3)), optimize=False)


# ------------------------------------------------------------------ round trips
def test_mlp_roundtrip_matches_eager_and_original(tmp_path, rng):
    model, graph = mlp_graph()
    loaded = roundtrip(graph, tmp_path)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    assert_same_graph_text(graph, loaded)
    np.testing.assert_array_equal(loaded(x).numpy(), graph(x).numpy())
    np.testing.assert_allclose(loaded(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
    assert loaded.parameter_count() == sum(w.numpy().size for w in model.weights)


def test_cnn_roundtrip_matches_eager(tmp_path, rng):
    model = tp.Sequential(
        [
            tp.layers.Conv2D(4, 5, padding="same", activation="relu"),
            tp.layers.MaxPooling2D(2),
            tp.layers.Conv2D(8, 3, padding="same", activation="relu"),
            tp.layers.MaxPooling2D(2),
            tp.layers.Flatten(),
            tp.layers.Dense(32, activation="relu"),
            tp.layers.Dropout(0.4),
            tp.layers.Dense(10),
        ]
    )
    x = rng.standard_normal((2, 28, 28, 1)).astype(np.float32)
    model(x)
    graph = tp.freeze(lambda x: model(x, training=False), tp.TensorSpec((2, 28, 28, 1)))
    loaded = roundtrip(graph, tmp_path)
    np.testing.assert_array_equal(loaded(x).numpy(), graph(x).numpy())
    np.testing.assert_allclose(loaded(x).numpy(), model(x, training=False).numpy(), rtol=1e-4, atol=1e-5)


def test_lstm_roundtrip_matches_eager(tmp_path, rng):
    model = tp.Sequential([tp.layers.Embedding(50, 8), tp.layers.LSTM(16), tp.layers.Dense(4)])
    ids = rng.integers(0, 50, (3, 7)).astype(np.int64)
    expected = model(ids).numpy()
    embedding, rest = model.layers[0], model.layers[1:]

    def forward(x):  # the embedding lookup written out, as the layer checks ids eagerly
        h = tp.nn.embedding_lookup(embedding.embeddings, x)
        for layer in rest:
            h = layer(h, training=False)
        return h

    graph = tp.freeze(forward, tp.TensorSpec((3, 7), "int64"))
    loaded = roundtrip(graph, tmp_path)
    np.testing.assert_array_equal(loaded(ids).numpy(), graph(ids).numpy())
    np.testing.assert_allclose(loaded(ids).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_training_step_roundtrip_updates_state_like_the_original(tmp_path, rng):
    model = tp.Sequential([tp.layers.Dense(8, activation="tanh"), tp.layers.Dense(3)])
    model(np.zeros((1, 4), np.float32))
    opt = tp.optimizers.SGD(0.1, momentum=0.9)
    loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    noise = tp.random.Generator(11)

    def train_step(x, y):
        with tp.GradientTape() as tape:
            h = tp.nn.dropout(x, 0.25, rng=noise)
            loss = loss_fn(y, model(h, training=True))
        grads = tape.gradient(loss, model.trainable_weights)
        opt.apply_gradients(zip(grads, model.trainable_weights, strict=True))
        return {"loss": loss}

    graph = tp.freeze(train_step, tp.TensorSpec((6, 4)), tp.TensorSpec((6,), "int64"))
    x = rng.standard_normal((6, 4)).astype(np.float32)
    y = rng.integers(0, 3, 6).astype(np.int64)
    opt.apply_gradients([(tp.ones_like(w) * 0.01, w) for w in model.trainable_weights])  # nonzero momentum
    start = {name: var.numpy().copy() for name, var in graph.state.items()}
    noise_start = noise.get_state()
    loaded = roundtrip(graph, tmp_path)
    assert sorted(loaded.state) == sorted(start)
    for name, value in start.items():
        np.testing.assert_array_equal(loaded.state[name].numpy(), value)
        assert loaded.state[name] is not graph.state[name]

    out_original = graph(x, y)
    out_loaded = loaded(x, y)
    assert set(out_loaded) == {"loss"}
    np.testing.assert_array_equal(out_loaded["loss"].numpy(), out_original["loss"].numpy())
    moved = 0
    for name, var in graph.state.items():
        np.testing.assert_array_equal(loaded.state[name].numpy(), var.numpy())
        moved += not np.array_equal(var.numpy(), start[name])
    assert moved == len(start)  # every weight and momentum slot changed

    # the eager step from the same start (weights, slots and random stream) is the reference
    updated = {name: var.numpy().copy() for name, var in graph.state.items()}
    for name, var in graph.state.items():
        var.assign(start[name])
    noise.set_state(noise_start)
    eager = train_step(tp.tensor(x), tp.tensor(y))
    np.testing.assert_allclose(eager["loss"].numpy(), out_loaded["loss"].numpy(), rtol=1e-5)
    for name, var in graph.state.items():
        np.testing.assert_allclose(var.numpy(), updated[name], rtol=1e-5, atol=1e-6)


def test_attrs_of_every_kind_survive(tmp_path, rng):
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    rows = np.array([3, 0, 0, 2])
    mask = rng.random(6) > 0.5

    def fn(t):
        a = t[..., 1:5:2, None, -1]  # ellipsis, slice, None, negative int
        b = t[rows, :, ::-1][:, 2]  # int array, reversed slice
        c = tp.cast(tp.clip(t, -np.inf, 0.5), "float64")  # inf attr, dtype
        d = tp.transpose(t, (2, 0, 1))  # tuple attr
        e = tp.sum(t, axis=(0, 2), keepdims=True)
        f = tp.where(tp.tensor(mask), t, -1.0)  # a bool constant
        return {"a": a, "b": b, "c": c, "d": d, "e": e, "f": f, "parts": [t * 2.0, (t + 1.0,)]}

    graph = tp.freeze(fn, tp.TensorSpec((4, 5, 6)))
    loaded = roundtrip(graph, tmp_path)
    assert_same_graph_text(graph, loaded)
    want, got = graph(x), loaded(x)
    assert set(got) == set(want) and isinstance(got["parts"], list) and isinstance(got["parts"][1], tuple)
    for key in "abcdef":
        np.testing.assert_array_equal(got[key].numpy(), want[key].numpy())
    np.testing.assert_array_equal(got["b"].numpy(), x[rows, :, ::-1][:, 2])
    np.testing.assert_array_equal(got["f"].numpy(), np.where(mask, x, -1.0))
    np.testing.assert_array_equal(got["parts"][1][0].numpy(), x + 1.0)


def test_large_index_arrays_go_to_datasets(tmp_path, rng):
    x = rng.standard_normal((1000,)).astype(np.float32)
    idx = rng.integers(0, 1000, 600)
    graph = tp.freeze(lambda t: t[idx], tp.TensorSpec((1000,)))
    loaded = roundtrip(graph, tmp_path)
    np.testing.assert_array_equal(loaded(x).numpy(), x[idx])
    with h5py.File(tmp_path / "g.tfg", "r") as f:
        assert f["attr_arrays/0"].shape == (600,)


def test_random_ops_keep_their_stream(tmp_path):
    gen = tp.random.Generator(5)
    graph = tp.freeze(lambda x: x + tp.random.normal((3,), generator=gen), tp.TensorSpec((3,)))
    loaded = roundtrip(graph, tmp_path)
    zero = np.zeros(3, np.float32)
    np.testing.assert_array_equal(loaded(zero).numpy(), graph(zero).numpy())  # same saved stream state
    np.testing.assert_array_equal(loaded(zero).numpy(), graph(zero).numpy())


def test_control_flow_subgraphs_roundtrip(tmp_path):
    cond = tp.freeze(lambda x: tp.cond(tp.sum(x) > 0, lambda: x * 2.0, lambda: -x), tp.TensorSpec((2,)))
    loaded = roundtrip(cond, tmp_path)
    for x in ([1.0, 2.0], [-1.0, -3.0]):
        x = np.array(x, np.float32)
        np.testing.assert_array_equal(loaded(x).numpy(), x * 2.0 if x.sum() > 0 else -x)

    def doubled_thrice(x):
        return tp.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2.0), [tp.constant(0), x])[1]

    loop = roundtrip(tp.freeze(doubled_thrice, tp.TensorSpec((2,))), tmp_path, "loop.tfg")
    x = np.array([1.0, -2.5], np.float32)
    np.testing.assert_array_equal(loop(x).numpy(), x * 8.0)


def test_loaded_graph_supports_partial_runs_and_resave(tmp_path, rng):
    graph = small_graph()
    loaded = roundtrip(graph, tmp_path)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    inner = [n for n in loaded.nodes if n.op == "matmul"][0].outputs[0].name
    np.testing.assert_allclose(loaded.run({"x": x}, inner), x @ np.arange(6, dtype=np.float32).reshape(3, 2))
    again = roundtrip(loaded, tmp_path, "again.tfg")
    assert_same_graph_text(graph, again)
    assert loaded.unique_name("add") not in {n.name for n in loaded.nodes}


def test_file_holds_no_pickle_only_numeric_datasets(tmp_path):
    graph = small_graph()
    graph.save(tmp_path / "g.tfg")
    kinds = {}
    with h5py.File(tmp_path / "g.tfg", "r") as f:
        assert f.attrs["format"] == b"tapeflow-graph" and f.attrs["format_version"] == FORMAT_VERSION
        f.visititems(lambda name, obj: kinds.update({name: obj.dtype}) if isinstance(obj, h5py.Dataset) else None)
        meta = json.loads(f["graph_json"][()].tobytes())
    assert kinds.pop("manifest").kind == "S"  # the list of entries, a fixed-length string
    assert all(dt.kind in "biuf" for dt in kinds.values()), kinds
    assert {"graph_json", "state/0"} <= set(kinds)
    assert [s["name"] for s in meta["state"]] == ["w"]
    assert b"\x80\x04\x95" not in (tmp_path / "g.tfg").read_bytes()  # no pickle protocol-4 frame


def test_unsavable_attrs_are_named(tmp_path):
    graph = small_graph()
    graph.nodes[-1].attrs["hook"] = object()
    with pytest.raises(tp.graph.GraphError, match=r"node '.*' \(add\) attr 'hook': values of type object"):
        graph.save(tmp_path / "g.tfg")
    assert not os.listdir(tmp_path)


# ------------------------------------------------------------------ atomic writes
def test_failed_save_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "g.tfg"
    small_graph().save(path)
    before = path.read_bytes()
    calls = []
    original = h5py.Group.create_dataset

    def failing(self, *args, **kwargs):
        calls.append(args[0])
        if len(calls) == 2:
            raise OSError("disk full")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", failing)
    _, other = mlp_graph()
    with pytest.raises(OSError, match="disk full"):
        other.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["g.tfg"]  # the temp file is gone
    assert list(tp.load_graph(path).state) == ["w"]


_KILLED_WRITER = """
import sys, time
import h5py
import tapeflow as tp
path, marker = sys.argv[1], sys.argv[2]
original = h5py.Group.create_dataset
def slow(self, *args, **kwargs):
    out = original(self, *args, **kwargs)
    open(marker, "w").close()
    time.sleep(60)
    return out
h5py.Group.create_dataset = slow
w = tp.Variable(tp.ones((4, 4)), name="other")
tp.freeze(lambda x: x @ w, tp.TensorSpec((None, 4))).save(path)
"""


def test_killed_save_leaves_the_old_file(tmp_path):
    path, marker = tmp_path / "g.tfg", tmp_path / "marker"
    small_graph().save(path)
    before = path.read_bytes()
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_KILLED_WRITER), str(path), str(marker)])
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the child never reached the middle of its save"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert path.read_bytes() == before
    assert list(tp.load_graph(path).state) == ["w"]


# ------------------------------------------------------------------ hostile files
def read_parts(path):
    """The JSON description, datasets and root attrs of a graph file."""
    with h5py.File(path, "r") as f:
        meta = json.loads(f["graph_json"][()].tobytes())
        arrays = {}
        f.visititems(lambda name, obj: arrays.update({name: obj[()]}) if isinstance(obj, h5py.Dataset) else None)
        attrs = {k: v.decode() if isinstance(v, bytes) else int(v) for k, v in f.attrs.items() if k != "crc32"}
    del arrays["graph_json"], arrays["manifest"]
    return meta, arrays, attrs


def write_parts(path, meta, arrays, attrs):
    """A crafted file, with valid checksums (so that the loader's other checks are what refuse it)."""
    with h5py.File(path, "w") as f:
        write_attrs(f, attrs)
        text = meta if isinstance(meta, str) else json.dumps(meta)
        write_array(f, "graph_json", np.frombuffer(text.encode(), np.uint8))
        for key, value in arrays.items():
            if np.asarray(value).dtype.kind in "biuf":
                write_array(f, key, value)
            else:
                f.create_dataset(key, data=value)
        write_manifest(f)


@pytest.fixture
def valid(tmp_path):
    """(path of a valid file of small_graph, a function writing an edited copy of it)."""
    path = tmp_path / "valid.tfg"
    small_graph().save(path)

    def edited(edit_meta=None, edit_arrays=None, edit_attrs=None, text=None):
        meta, arrays, attrs = read_parts(path)
        for edit, part in ((edit_meta, meta), (edit_arrays, arrays), (edit_attrs, attrs)):
            if edit is not None:
                edit(part)  # edits change the part in place
        out = tmp_path / "edited.tfg"
        write_parts(out, meta if text is None else text, arrays, attrs)
        return out

    return path, edited


def node(meta, op):
    return next(n for n in meta["nodes"] if n["op"] == op)


def test_the_unedited_copy_loads(valid, rng):
    _, edited = valid
    x = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(tp.load_graph(edited())(x).numpy(), small_graph()(x).numpy())


def test_truncated_file(valid, tmp_path):
    path, _ = valid
    blob = path.read_bytes()
    for cut in (len(blob) // 2, 1000, 10):
        (tmp_path / "cut.tfg").write_bytes(blob[:cut])
        with pytest.raises(GraphFileError, match="cut.tfg"):
            tp.load_graph(tmp_path / "cut.tfg")


def test_not_hdf5_and_missing(tmp_path):
    (tmp_path / "text.tfg").write_text("graph lambda(x: float32[3]) -> ()\n")
    with pytest.raises(GraphFileError, match="not an HDF5 file"):
        tp.load_graph(tmp_path / "text.tfg")
    with pytest.raises(GraphFileError, match="no such file"):
        tp.load_graph(tmp_path / "absent.tfg")


def test_wrong_format_and_newer_version(valid):
    _, edited = valid
    with pytest.raises(GraphFileError, match="not a tapeflow-graph file.*tapeflow-weights"):
        tp.load_graph(edited(edit_attrs=lambda a: a.update(format="tapeflow-weights")))
    with pytest.raises(GraphFileError, match=f"version {FORMAT_VERSION + 1}.*newer.*reads version {FORMAT_VERSION}"):
        tp.load_graph(edited(edit_attrs=lambda a: a.update(format_version=FORMAT_VERSION + 1)))
    with pytest.raises(GraphFileError, match="format_version"):
        tp.load_graph(edited(edit_attrs=lambda a: a.update(format_version="1")))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m["inputs"][0].update(shape="(None, 3)"), "shape must be a list"),
        (lambda m: m["inputs"][0].update(shape=[None, 3.0]), "must hold ints"),
        (lambda m: m["inputs"][0].update(dtype="object"), "dtype 'object' is not one of"),
        (lambda m: m.update(nodes={"a": 1}), "'nodes' must be a list"),
        (lambda m: node(m, "matmul").update(inputs="x"), "'inputs' must be a list"),
        (lambda m: node(m, "matmul").update(attrs=[1, 2]), "'attrs' must be a dict"),
        (lambda m: node(m, "matmul").update(attrs={"transpose": True}), r"takes no attrs, got \['transpose'\]"),
        (lambda m: node(m, "relu")["outputs"][0].update(shape=[None, 5]), r"declares outputs.*shape rule gives"),
        (lambda m: node(m, "read_variable").update(attrs={"variable": 3}), "attrs must be exactly"),
        (lambda m: node(m, "read_variable").update(attrs={"variable": "nope"}), "unknown state 'nope'"),
        (lambda m: m.update(output_structure={"leaf": 7}), "invalid output structure"),
        (lambda m: m.update(outputs=["nowhere"]), "output 0 names value 'nowhere'"),
        (lambda m: m["state"][0].update(trainable="yes"), "'trainable' must be a bool"),
        (lambda m: node(m, "add").update(attrs={"k": {"tuple": "12"}}), "a tuple body must be a list"),
        (lambda m: node(m, "add").update(attrs={"k": {"float": "1e400x"}}), "tagged float"),
        (lambda m: node(m, "add").update(attrs={"k": {"slice": [0, 1, 0]}}), "step cannot be zero"),
        (lambda m: node(m, "add").update(attrs={"k": {"array": {"dtype": "O", "shape": [1], "data": [1]}}}), "dtype"),
        (lambda m: node(m, "add").update(attrs={"k": {"generator": 3}}), "generator must be 'global' or an index"),
        (lambda m: node(m, "relu").update(device="../../etc"), "unknown device '../../etc'"),
        (lambda m: node(m, "relu").update(device="/worker:../etc"), "unknown worker device '/worker:../etc'"),
        (lambda m: m.update(device="tpu:7"), "unknown device 'tpu:7'"),
        (lambda m: node(m, "relu").update(device=["/worker:0"]), "'device' must be a str"),
    ],
)
def test_wrong_json_types(valid, edit, message):
    _, edited = valid
    with pytest.raises(GraphFileError, match=message):
        tp.load_graph(edited(edit_meta=edit))


@pytest.mark.parametrize("perm", ["10", {"tuple": [0, 1, 2]}, {"tuple": [0, 0]}])
def test_attrs_the_shape_rule_rejects(tmp_path, perm):
    path = tmp_path / "t.tfg"
    tp.freeze(lambda x: tp.transpose(x, (1, 0)), tp.TensorSpec((2, 3)), optimize=False).save(path)
    meta, arrays, attrs = read_parts(path)
    node(meta, "transpose")["attrs"]["perm"] = perm
    write_parts(path, meta, arrays, attrs)
    with pytest.raises(
        GraphFileError, match=r"node 'transpose_0' \(transpose\): the op rejects inputs \(float32\[2,3\]\)"
    ):
        tp.load_graph(path)


def test_bad_json_text(valid):
    _, edited = valid
    for text, message in (("{", "not valid UTF-8 JSON"), ("[1, 2]", "must be a dict"), ('{"x": NaN}', "NaN")):
        with pytest.raises(GraphFileError, match=message):
            tp.load_graph(edited(text=text))


def test_cycle_and_undefined_references(valid):
    _, edited = valid

    def cycle(meta):
        relu, add = node(meta, "relu"), node(meta, "add")
        relu["inputs"] = [add["outputs"][0]["name"]]

    with pytest.raises(GraphFileError, match=r"input 0 'add_0' is defined only later \(a cycle"):
        tp.load_graph(edited(edit_meta=cycle))
    with pytest.raises(GraphFileError, match="input 1 'ghost' is not defined"):
        tp.load_graph(edited(edit_meta=lambda m: node(m, "matmul")["inputs"].__setitem__(1, "ghost")))


@pytest.mark.parametrize("op", ["no_such_op", "os.system", "builtins.eval", "__import__"])
def test_unknown_and_module_path_ops_are_refused(valid, op):
    _, edited = valid
    with pytest.raises(GraphFileError, match=rf"unknown op '{op}'.*nothing is imported"):
        tp.load_graph(edited(edit_meta=lambda m: node(m, "relu").update(op=op)))


@pytest.mark.parametrize(
    "shape, message",
    [([2**40, 2**40], "too large"), ([2**16, 2**16], "too large"), ([-1, 2], "negative"), ([3, -2], "negative")],
)
def test_huge_and_negative_shapes_are_refused_before_allocating(valid, shape, message):
    _, edited = valid
    with pytest.raises(GraphFileError, match=message):
        tp.load_graph(edited(edit_meta=lambda m: m["state"][0].update(shape=shape)))
    with pytest.raises(GraphFileError, match=message):
        tp.load_graph(edited(edit_meta=lambda m: m["inputs"][0].update(shape=[None] + shape)))


def test_pickled_payloads_are_refused_and_never_run(valid, tmp_path):
    _, edited = valid
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    payload = pickle.dumps(Exploit())

    def opaque(arrays):
        arrays["state/0"] = np.void(payload)

    def object_dataset(arrays):
        arrays["extra"] = np.array([payload.hex()], dtype=h5py.string_dtype())  # object dtype in h5py

    for edit in (opaque, object_dataset):
        with pytest.raises(GraphFileError, match="only bool, integer and float arrays are read"):
            tp.load_graph(edited(edit_arrays=edit))
    crafted = [
        {"pickle": payload.hex()},
        {"__reduce__": ["os.system", ["touch " + str(marker)]]},
        {"py/object": "os.system"},
    ]
    for attr in crafted:
        with pytest.raises(GraphFileError, match="unknown attribute type"):
            tp.load_graph(edited(edit_meta=lambda m, a=attr: node(m, "add").update(attrs={"k": a})))
    # a pickle hidden in a string attr stays a string, and is refused as an attr the op does not take
    with pytest.raises(GraphFileError, match=r"\(add\): the op takes no attrs, got \['k'\]"):
        tp.load_graph(edited(edit_meta=lambda m: node(m, "add").update(attrs={"k": payload.decode("latin-1")})))
    assert not marker.exists()


def test_dataset_shape_and_dtype_must_match_the_declaration(valid):
    _, edited = valid
    with pytest.raises(GraphFileError, match=r"'state/0' is float32\[2, 3\], but the graph declares float32\[3, 2\]"):
        tp.load_graph(edited(edit_arrays=lambda a: a.update({"state/0": a["state/0"].reshape(2, 3)})))
    with pytest.raises(GraphFileError, match=r"'state/0' is float64\[3, 2\]"):
        tp.load_graph(edited(edit_arrays=lambda a: a.update({"state/0": a["state/0"].astype(np.float64)})))
    with pytest.raises(GraphFileError, match="'constants/0' is missing"):
        tp.load_graph(edited(edit_arrays=lambda a: a.pop("constants/0")))
    with pytest.raises(GraphFileError, match=r"dataset '../state/0'"):
        tp.load_graph(edited(edit_meta=lambda m: m["state"][0].update(dataset="../state/0")))


def test_unwritten_and_linked_datasets_are_refused(valid, tmp_path):
    path, _ = valid
    sparse = tmp_path / "sparse.tfg"
    meta, arrays, attrs = read_parts(path)
    meta["state"][0]["shape"] = [2**15, 2**15]
    write_parts(sparse, meta, {k: v for k, v in arrays.items() if k != "state/0"}, attrs)
    with h5py.File(sparse, "a") as f:
        f.create_dataset("state/0", shape=(2**15, 2**15), dtype="float32", chunks=(64, 64))  # never written
    with pytest.raises(GraphFileError, match="holds less data than its shape"):
        tp.load_graph(sparse)
    linked = tmp_path / "linked.tfg"
    write_parts(linked, *read_parts(path))
    with h5py.File(linked, "a") as f:
        f["extra"] = h5py.ExternalLink("/etc/passwd", "/")
    with pytest.raises(GraphFileError, match="'extra' is a ExternalLink"):
        tp.load_graph(linked)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m["inputs"].append(dict(m["inputs"][0])), "value name 'x' .* is used twice"),
        (lambda m: node(m, "relu")["outputs"][0].update(name="x"), "value name 'x' .* is used twice"),
        (lambda m: node(m, "relu").update(name=node(m, "matmul")["name"]), "node name 'matmul_0' is used twice"),
        (lambda m: m["state"].append(dict(m["state"][0])), "state name 'w' is used twice"),
    ],
)
def test_duplicate_names(valid, edit, message):
    _, edited = valid
    with pytest.raises(GraphFileError, match=message):
        tp.load_graph(edited(edit_meta=edit))


def test_every_error_is_a_value_error_subclass():
    assert issubclass(GraphFileError, tp.graph.GraphError) and issubclass(GraphFileError, ValueError)


def test_graph_round_trips_through_bytes(rng):
    graph = small_graph()
    buffer = io.BytesIO()
    graph.save(buffer)
    loaded = tp.load_graph(io.BytesIO(buffer.getvalue()))
    x = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(loaded(x).numpy(), graph(x).numpy())


def test_loading_bytes_that_are_not_a_graph_file_names_the_problem():
    with pytest.raises(GraphFileError, match="not a readable HDF5 file"):
        tp.load_graph(io.BytesIO(b"not hdf5 at all"))
