"""The executor: repeated runs never change results or touch fed arrays, constants or
Variables, and a failing node is named."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.graph import passes
from tapeflow.graph.executor import Executor, NodeError, RunCancelled


def _mlp_graph(optimize):
    model = tp.Sequential(
        [tp.layers.Dense(32, activation="relu"), tp.layers.Dense(16, activation="tanh"), tp.layers.Dense(4)]
    )
    model.build((None, 8))
    graph = tp.freeze(lambda x: model(x, training=False), tp.TensorSpec((None, 8)), optimize=optimize)
    if optimize:
        passes.optimize(graph, [*passes.DEFAULT_PASSES, passes.FUSION])
    return model, graph


@pytest.mark.parametrize("optimize", [False, True])
def test_repeated_runs_and_batch_sizes_match_eager(optimize, rng):
    model, graph = _mlp_graph(optimize)
    executor = Executor(graph, graph.outputs, graph.inputs)
    plain = Executor(graph, graph.outputs, graph.inputs)
    weights = [w.copy() for w in model.get_weights()]
    results = []
    for n in (5, 3, 5, 5, 1, 3):
        x = rng.standard_normal((n, 8)).astype(np.float32)
        x_copy = x.copy()
        (got,) = executor.run([x])
        results.append((x_copy, got))
        np.testing.assert_array_equal(x, x_copy)  # the fed array is untouched
        np.testing.assert_array_equal(got, plain.run([x])[0])
    for x, got in results:  # earlier outputs were not overwritten by later runs
        np.testing.assert_allclose(got, model(tp.tensor(x), training=False).numpy(), rtol=1e-5, atol=1e-6)
    for w, before in zip(model.get_weights(), weights, strict=True):
        np.testing.assert_array_equal(w, before)


def test_state_and_constants_are_never_written(rng):
    v = tp.Variable(rng.standard_normal((4, 3)).astype(np.float32), name="w")
    c = rng.standard_normal((4, 3)).astype(np.float32)

    def f(x):
        out = tp.exp(v * 1.0) + x  # read v, add a constant, then elementwise ops
        v.assign(tp.tanh(v + 0.5) * 2.0)
        return tp.nn.relu(out + tp.tensor(c))

    graph = tp.freeze(f, tp.TensorSpec((4, 3)), optimize=False)
    executor = Executor(graph, graph.outputs, graph.inputs)
    constants = [(k.data, k.data.copy()) for k in graph.constants]
    for _ in range(3):
        held = v._value
        held_copy = held.copy()
        x = rng.standard_normal((4, 3)).astype(np.float32)
        want = np.maximum(np.exp(held_copy) + x + c, 0)
        (got,) = executor.run([x])
        np.testing.assert_allclose(got, want, rtol=1e-6)
        np.testing.assert_array_equal(held, held_copy)  # the old state array was replaced, not written
        np.testing.assert_allclose(v.numpy(), np.tanh(held_copy + 0.5) * 2.0, rtol=1e-6)
        for data, copy in constants:
            np.testing.assert_array_equal(data, copy)


def test_views_keep_their_buffer_alive(rng):
    def f(x):
        a = x * 2.0
        r = tp.reshape(a, (6, 2))  # a view of a's buffer
        b = tp.exp(x)  # must not take a's buffer while r is live
        return tp.reshape(b, (6, 2)) + r

    graph = tp.freeze(f, tp.TensorSpec((3, 4)), optimize=False)
    executor = Executor(graph, graph.outputs, graph.inputs)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(executor.run([x])[0], f(tp.tensor(x)).numpy(), rtol=1e-6)


def test_a_failing_node_is_named():
    w = tp.Variable(np.ones((3, 4), np.float32), name="w")
    graph = tp.freeze(lambda x: tp.nn.relu(x @ w), tp.TensorSpec((None, None)))
    graph(tp.ones((2, 3)))
    with pytest.raises(NodeError, match=r"node 'matmul_0' \(matmul\) with inputs \(float32\[2, 5\], float32\[3, 4\]\)"):
        graph(tp.ones((2, 5)))
    np.testing.assert_array_equal(graph(tp.ones((1, 3))).numpy(), np.full((1, 4), 3.0))


@pytest.mark.parametrize("shape", [(1, 70), (6, 70), (2, 3, 70)], ids=["one-row", "batch", "sequence"])
@pytest.mark.parametrize("activation", ["linear", "relu"])
def test_fused_matmul_nodes_match_float64(shape, activation, rng):
    """The executor binds fused_matmul to a compiled kernel; every input shape gives a @ w + b."""
    from tapeflow.graph.ir import Graph
    from tapeflow.ops.registry import get_op

    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((70, 130)).astype(np.float32)
    b = rng.standard_normal(130).astype(np.float32)
    graph = Graph("dense")
    xv = graph.add_input("x", (None,) * (len(shape) - 1) + (70,), "float32")
    wv, bv = graph.add_constant(w), graph.add_constant(b)
    out_shape = (None,) * (len(shape) - 1) + (130,)
    graph.outputs = graph.add_node("fused_matmul", [xv, wv, bv], {"activation": activation}, [(out_shape, "float32")])
    expected = x.astype(np.float64) @ w + b
    if activation == "relu":
        expected = np.maximum(expected, 0)
    (got,) = Executor(graph, graph.outputs, [xv]).run([x])
    assert got.shape == expected.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
    assert isinstance(get_op("fused_matmul").bound_kernel("cpu", {"activation": activation}), tp._kernels.DenseKernel)


def test_a_cancelled_run_stops_between_nodes(rng):
    """A run stops with RunCancelled before the first node after `cancelled` turns true, and a
    `cancelled` that never does changes nothing."""
    graph = tp.freeze(lambda x: tp.tanh(tp.exp(x) * 2.0) + 1.0, tp.TensorSpec((3,)), optimize=False)
    x = rng.standard_normal(3).astype(np.float32)
    expected = np.tanh(np.exp(x.astype(np.float64)) * 2.0) + 1.0
    np.testing.assert_allclose(graph.execute([x], cancelled=lambda: False)[0], expected, rtol=1e-6)
    asked = []

    def after_two_nodes():
        asked.append(True)
        return len(asked) > 2

    with pytest.raises(RunCancelled, match="cancelled before node"):
        graph.execute([x], cancelled=after_two_nodes)
    assert len(asked) == 3  # asked before each node until it said yes
