"""Graphs in TensorBoard: a tapeflow Graph written as a GraphDef event and read back by the
real tensorboard package (no TensorFlow needed), directly and from the TensorBoard callback."""

import warnings
from collections import Counter

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.callbacks import TensorBoard
from tapeflow.io import tensorboard as tb_events

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
types_pb2 = pytest.importorskip("tensorboard.compat.proto.types_pb2")


def read_graph(log_dir):
    acc = event_accumulator.EventAccumulator(str(log_dir))
    acc.Reload()
    return acc.Graph()


def shapes_of(node_def):
    return [[d.size for d in s.dim] for s in node_def.attr["_output_shapes"].list.shape]


def mlp():
    model = tp.Sequential([tp.layers.Dense(8, activation="relu"), tp.layers.Dense(3)])
    model(np.zeros((1, 4), np.float32))
    return model


def test_written_graph_reads_back_with_names_ops_inputs_and_shapes(tmp_path):
    model = mlp()
    graph = tp.freeze(lambda x: model(x, training=False), tp.TensorSpec((None, 4)))
    with tb_events.EventFileWriter(tmp_path) as writer:
        writer.add_graph(graph)
    got = {n.name: n for n in read_graph(tmp_path).node}

    assert got["x"].op == "Placeholder" and shapes_of(got["x"]) == [[-1, 4]]
    assert got["x"].attr["dtype"].type == types_pb2.DT_FLOAT
    for name, var in graph.state.items():
        assert got[name].op == "VariableV2" and shapes_of(got[name]) == [list(var.shape)]
    by_node = {}
    for node in graph.nodes:
        if node.op == "read_variable":
            gd = got[f"{node.attrs['variable']}/read"]
            assert list(gd.input) == [node.attrs["variable"]]
        else:
            gd = got[node.name]
            assert list(gd.input) == [by_node.get(id(v.producer), v.name) for v in node.inputs]
        by_node[id(node)] = gd.name
        assert gd.op == node.op
        assert shapes_of(gd) == [[-1 if d is None else d for d in v.shape] for v in node.outputs]
    assert len(got) == len(graph.inputs) + len(graph.constants) + len(graph.state) + len(graph.nodes)


def test_multi_output_nodes_attrs_and_assignments(tmp_path):
    w = tp.Variable(np.ones((4,), np.float32), name="w")

    def fn(x):
        a, b = tp.split(x, 2, axis=1)
        w.assign_add(tp.sum(b, axis=0))
        return tp.transpose(a, (1, 0))

    graph = tp.freeze(fn, tp.TensorSpec((3, 8)))
    with tb_events.EventFileWriter(tmp_path) as writer:
        writer.add_graph(graph)
    got = {n.name: n for n in read_graph(tmp_path).node}
    split = next(n for n in graph.nodes if n.op == "split")
    transpose = next(n for n in graph.nodes if n.op == "transpose")
    consumers = [n for n in graph.nodes if split.outputs[1] in n.inputs]
    assert f"{split.name}:1" in got[consumers[0].name].input
    assert list(got[transpose.name].input) == [split.name]  # output 0 is the node name itself
    assert list(got[transpose.name].attr["perm"].list.i) == [1, 0]
    assert shapes_of(got[split.name]) == [[3, 4], [3, 4]]
    assert got["w/assign"].op == "assign_variable" and got["w/assign"].input[0] == "w"


def test_callback_writes_the_frozen_inference_graph(tmp_path):
    model = mlp()
    model.compile(tp.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
    x = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    y = np.arange(16) % 3
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[TensorBoard(str(tmp_path))])
    nodes = read_graph(tmp_path / "train").node
    reference = tp.freeze(lambda x: model(x, training=False), tp.TensorSpec((None, 4)))
    ops = Counter(n.op for n in nodes)
    assert ops == Counter(["Placeholder"] + ["Const"] * len(reference.constants)) + Counter(
        ["VariableV2"] * len(model.weights) + [n.op for n in reference.nodes]
    )
    assert "fused_matmul" in ops and "assign_variable" not in ops  # the op graph, inference only
    assert sorted(n.name for n in nodes if n.op == "VariableV2") == sorted(w.name for w in model.weights)
    assert [d.size for d in next(n for n in nodes if n.op == "Placeholder").attr["shape"].shape.dim] == [-1, 4]

    model.fit(x, y, epochs=1, verbose=0, callbacks=[TensorBoard(str(tmp_path / "off"), write_graph=False)])
    acc = event_accumulator.EventAccumulator(str(tmp_path / "off" / "train"))
    assert not acc.Reload().Tags()["graph"]


class _Escapes(tp.layers.Layer):
    """A layer whose call needs concrete values, so the model cannot be frozen."""

    def call(self, inputs):
        return inputs * float(np.sign(inputs.numpy().sum()) or 1.0)


def test_callback_falls_back_to_the_layer_graph(tmp_path):
    model = tp.Sequential([tp.layers.Dense(3), _Escapes()])
    model(np.zeros((1, 4), np.float32))
    model.compile(tp.optimizers.SGD(0.1), "mse")
    x = np.ones((4, 4), np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, x[:, :3], epochs=1, verbose=0, callbacks=[TensorBoard(str(tmp_path))])
    assert any("layer graph" in str(w.message) for w in caught)
    first, second = model.layers
    assert [(n.name, n.op) for n in read_graph(tmp_path / "train").node] == [
        (first.name, "Dense"),
        (second.name, "_Escapes"),
    ]
