"""Device annotations, placement and partitioning of frozen graphs.

The reference for every partitioned run is the unpartitioned graph (itself checked
against eager execution elsewhere), and for the 4-stage MLP also a NumPy float64
forward pass and gradient.
"""

import io

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.graph.executor import NodeError
from tapeflow.graph.ir import GraphError, GraphIR, Node, Value
from tapeflow.graph.partition import partition
from tapeflow.graph.placer import PlacementError, place
from tapeflow.ops.transfer import rendezvous

WORKERS = ["/worker:0/cpu:0", "/worker:1/cpu:0"]


def four_stage_mlp(seed=0, sizes=(6, 8, 8, 8, 3)):
    """The weights of a 4-layer tanh MLP and a function running stage k on worker k // 2."""
    rng = np.random.default_rng(seed)
    weights = [
        tp.Variable(rng.standard_normal((a, b)).astype(np.float32) / np.sqrt(a), name=f"w{k}")
        for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True))
    ]

    def forward(x):
        h = x
        for k, w in enumerate(weights):
            with tp.device(f"/worker:{k // 2}"):
                h = tp.tanh(h @ w) if k < len(weights) - 1 else h @ w
        return h

    def step(x, y):
        with tp.GradientTape() as tape:
            with tp.device("/worker:1"):
                loss = tp.mean((forward(x) - y) ** 2)
        return (loss, *tape.gradient(loss, weights))

    return weights, forward, step


def numpy_step(weights, x, y):
    """Loss and gradients of the MLP in float64, by hand."""
    ws = [w.numpy().astype(np.float64) for w in weights]
    hs = [x.astype(np.float64)]
    for k, w in enumerate(ws):
        z = hs[-1] @ w
        hs.append(np.tanh(z) if k < len(ws) - 1 else z)
    diff = hs[-1] - y
    loss = np.mean(diff**2)
    grad = 2 * diff / diff.size
    grads = []
    for k in reversed(range(len(ws))):
        if k < len(ws) - 1:
            grad = grad * (1 - hs[k + 1] ** 2)
        grads.append(hs[k].T @ grad)
        grad = grad @ ws[k].T
    return loss, grads[::-1]


# ------------------------------------------------------------------ annotations
def test_device_names_are_recorded_on_traced_nodes():
    w = tp.Variable(tp.ones((3, 2)), name="w")

    def f(x):
        with tp.device("/worker:1/gpu:0"):
            h = x @ w
        with tp.device("/WORKER:2"):
            return tp.nn.relu(h)

    g = tp.freeze(f, tp.TensorSpec((4, 3)), optimize=False)
    devices = {n.op: n.device for n in g.nodes}
    assert devices == {"read_variable": "/worker:1/gpu:0", "matmul": "/worker:1/gpu:0", "relu": "/worker:2/cpu:0"}
    assert "@ /worker:1/gpu:0" in str(g)
    assert 'label="/worker:2/cpu:0"' in g.to_dot()


def test_worker_device_does_not_move_eager_tensors():
    with tp.device("/worker:3"):
        t = tp.ones((2,))
    assert t.device == tp.Device("cpu", 0)


@pytest.mark.parametrize("bad", ["/worker", "/worker:x", "/worker:1/tpu:0", "/job:1"])
def test_bad_worker_device_names(bad):
    with pytest.raises(ValueError, match="worker device"), tp.device(bad):
        pass


def test_gradient_nodes_follow_the_ops_they_differentiate():
    weights, _, step = four_stage_mlp()
    g = tp.freeze(step, tp.TensorSpec((5, 6)), tp.TensorSpec((5, 3)), optimize=False)
    grads = g.outputs[1:]
    assert [v.producer.device for v in grads] == [WORKERS[0], WORKERS[0], WORKERS[1], WORKERS[1]]


def test_save_and_load_keep_devices():
    _, _, step = four_stage_mlp()
    g = tp.freeze(step, tp.TensorSpec((5, 6)), tp.TensorSpec((5, 3)))
    buffer = io.BytesIO()
    g.save(buffer)
    loaded = tp.load_graph(io.BytesIO(buffer.getvalue()))
    assert [n.device for n in loaded.nodes] == [n.device for n in g.nodes]
    assert {n.device for n in loaded.nodes} >= set(WORKERS)


def test_passes_keep_devices_apart():
    def f(x):
        with tp.device("/worker:0"):
            a = tp.exp(x) * 2.0
        with tp.device("/worker:1"):
            b = tp.exp(x) * 2.0
        return tp.tanh(a) + b

    g = tp.freeze(f, tp.TensorSpec((3,)))  # CSE must not merge across devices, fusion not fuse across
    per_device = {}
    for n in g.nodes:
        per_device.setdefault(n.device, []).append(n.op)
    assert set(per_device) == {*WORKERS, None}  # the unplaced sum is fused apart from both
    x = np.array([0.1, -0.2, 0.3], np.float32)
    np.testing.assert_allclose(g(x).numpy(), np.tanh(np.exp(x) * 2) + np.exp(x) * 2, rtol=1e-6)


# ------------------------------------------------------------------ placement
def test_unplaced_nodes_colocate_with_their_inputs_by_bytes():
    def f(big, small):
        with tp.device("/worker:0"):
            a = tp.exp(big)  # 64 floats
        with tp.device("/worker:1"):
            b = tp.exp(small)  # 8 floats, broadcast
        return a * b  # cheaper to bring b to worker 0

    g = tp.freeze(f, tp.TensorSpec((8, 8)), tp.TensorSpec((8,)), optimize=False)
    assert place(g) == 1
    assert g.nodes[-1].device == WORKERS[0]


def test_reads_colocate_with_readers_and_the_rest_goes_to_the_default():
    w = tp.Variable(tp.ones((3,)), name="w")

    def f(x):
        c = tp.exp(x)  # reads only a graph input: placed with its reader
        with tp.device("/worker:1"):
            return c * w

    g = tp.freeze(f, tp.TensorSpec((3,)), optimize=False)
    place(g)
    assert {n.op: n.device for n in g.nodes} == {"exp": WORKERS[1], "read_variable": WORKERS[1], "multiply": WORKERS[1]}
    lone = tp.freeze(lambda x: tp.exp(x), tp.TensorSpec((3,)), optimize=False)
    place(lone, default="/worker:2")
    assert lone.nodes[0].device == "/worker:2/cpu:0"


def test_a_variable_lives_on_one_device():
    w = tp.Variable(tp.ones((3,)), name="w")

    def f(x):
        with tp.device("/worker:1"):
            y = w * 2.0
        with tp.device("/worker:0"):
            w.assign(x)
        return y

    with pytest.raises(PlacementError, match="variable 'w'"):
        place(tp.freeze(f, tp.TensorSpec((3,)), optimize=False))


def test_a_device_outside_the_cluster_is_an_error_naming_the_node():
    def f(x):
        with tp.device("/worker:5"):
            return tp.exp(x)

    g = tp.freeze(f, tp.TensorSpec((3,)), optimize=False)
    with pytest.raises(PlacementError, match="node 'exp_0'.*worker:5"):
        partition(g, devices=WORKERS)


def test_a_cycle_is_an_error_naming_the_node():
    g = GraphIR("cyclic")
    x = g.add_input("x", (2,), "float32")
    a = Value("a", (2,), "float32")
    b_node = Node("b", "exp", [a], {}, [])
    b_node.outputs = [Value("b", (2,), "float32", producer=b_node)]
    a_node = Node("a", "add", [x, b_node.outputs[0]], {}, [a])
    a.producer = a_node
    g.nodes = [b_node, a_node]
    g.outputs = [a]
    with pytest.raises(GraphError, match="node 'b'"):
        partition(g)


# ------------------------------------------------------------------ partitioning
@pytest.fixture
def mlp_graph():
    weights, forward, step = four_stage_mlp()
    graph = tp.freeze(step, tp.TensorSpec((5, 6)), tp.TensorSpec((5, 3)))
    rng = np.random.default_rng(3)
    return weights, graph, rng.standard_normal((5, 6)).astype(np.float32), rng.standard_normal((5, 3))


def test_partitions_in_sequence_equal_the_whole_graph(mlp_graph):
    weights, graph, x, y = mlp_graph
    y = y.astype(np.float32)
    whole = graph.execute([x, y])
    cut = partition(graph)
    parts = cut.run(x, y)
    for a, b in zip(whole, parts, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
    loss, grads = numpy_step(weights, x, y)
    np.testing.assert_allclose(parts[0], loss, rtol=1e-5)
    for got, want in zip(parts[1:], grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_forward_and_backward_partitions_form_a_pipeline(mlp_graph):
    _, graph, _, _ = mlp_graph
    cut = partition(graph)
    # worker 0's forward, worker 1's forward + loss + backward, worker 0's backward
    assert [(p.device, p.rank) for p in cut.partitions] == [(WORKERS[0], 0), (WORKERS[1], 1), (WORKERS[0], 2)]
    assert cut.devices == WORKERS


def test_every_cut_edge_has_one_transfer_and_no_value_crosses_twice(mlp_graph):
    _, graph, _, _ = mlp_graph
    cut = partition(graph)
    device_of = {id(v): n.device for n in graph.nodes for v in n.outputs}
    crossing = {
        (v.name, node.device)
        for node in graph.nodes
        for v in node.inputs
        if id(v) in device_of and device_of[id(v)] != node.device
    }
    assert {(t.value, t.destination) for t in cut.transfers} == crossing
    assert len({t.key for t in cut.transfers}) == len(cut.transfers)
    sends = [t.key for p in cut.partitions for t in p.sends]
    recvs = [t.key for p in cut.partitions for t in p.recvs]
    assert sorted(sends) == sorted(recvs) == sorted(t.key for t in cut.transfers)
    # ... and each is one send node and one recv node in the partitions' graphs
    for op, listed in (("send", sends), ("recv", recvs)):
        nodes = [n for p in cut.partitions for n in p.graph.nodes if n.op == op]
        assert sorted(n.attrs["key"] for n in nodes) == sorted(listed)
        assert all(n.device == p.device for p in cut.partitions for n in p.graph.nodes)
    for p in cut.partitions:  # a received value is no input of its partition
        assert not {t.value for t in p.recvs} & set(p.input_names)
    readers = {}
    for node in graph.nodes:
        for v in node.inputs:
            if id(v) in device_of and device_of[id(v)] != node.device:
                readers.setdefault(v.name, set()).add(node.name)
    assert any(len(r) > 1 for r in readers.values())  # some value has several readers over there, yet crosses once


def test_each_partition_is_a_graph_that_saves_and_runs(mlp_graph):
    _, graph, x, y = mlp_graph
    cut = partition(graph)
    first = cut.partitions[0]
    buffer = io.BytesIO()
    first.graph.save(buffer)
    loaded = tp.load_graph(io.BytesIO(buffer.getvalue()))
    assert [n.op for n in loaded.nodes] == [n.op for n in first.graph.nodes]
    feeds, tables = {"x": x}, ({}, {})
    with rendezvous(tables[0]):
        got = loaded.execute([feeds[n] for n in first.input_names])
    with rendezvous(tables[1]):
        want = first.graph.execute([x])
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    assert sorted(tables[0]) == sorted(tables[1]) == sorted(t.key for t in first.sends)
    for key, value in tables[0].items():
        np.testing.assert_array_equal(value, tables[1][key])


def test_a_partition_run_without_its_rendezvous_is_an_error_naming_the_send(mlp_graph):
    _, graph, x, _ = mlp_graph
    first = partition(graph).partitions[0]
    with pytest.raises(NodeError, match=r"send '.*': no rendezvous is active"):
        first.graph.execute([x])


def test_partitions_print_and_draw(mlp_graph):
    _, graph, _, _ = mlp_graph
    cut = partition(graph)
    text, dot = str(cut), cut.to_dot()
    assert text.count("\npartition ") == len(cut.partitions)
    for t in cut.transfers:
        assert f"send[key='{t.key}'](%{t.value})" in text
        assert f"%{t.value} = recv[key='{t.key}'" in text
    assert dot.count("style=dashed") == len(cut.transfers)
    assert dot.count("subgraph") == len(cut.partitions)
