"""The straight-line form of a schedule: the same arrays, state writes and errors as the
executor's step-by-step loop, which still runs where a run is observed or cancellable."""

from __future__ import annotations

import contextlib
import weakref

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.graph import executor as executor_module
from tapeflow.graph.executor import Executor, NodeError
from tapeflow.graph.straight_line import KERNEL, compile_schedule
from tapeflow.ops.profiling import HOOKS


def _training_graph(rng):
    """A frozen training step (multi-output kernels, state writes, freed values), its model and feeds."""
    model = tp.Sequential([tp.layers.Dense(6, activation="relu"), tp.layers.Dense(3)])
    model.compile(tp.optimizers.Adam(0.01), tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = rng.standard_normal((5, 4)).astype(np.float32)
    y = np.array([0, 2, 1, 1, 0])
    model.train_on_batch(x, y)
    (graph,) = model._step_runner().frozen()[0].graphs.values()
    assert [v.name for v in graph.inputs] == ["x", "y", "learning_rate", "step"]
    return model, graph, [x, y, np.float32(0.01), np.float32(2.0)]


def test_straight_line_and_loop_train_alike(rng):
    model, graph, feeds = _training_graph(rng)
    executor = Executor(graph, graph.outputs, graph.inputs)
    assert executor._straight is not None
    assert {n.op for n in graph.nodes} >= {"adam_update", "assign_variable", "sparse_softmax_cross_entropy_with_logits"}
    state = list(graph.state.values())  # weights and the optimizer's slots
    start = [v.numpy().copy() for v in state]
    weights_before = model.get_weights()
    feeds = [np.asarray(a) for a in feeds]
    first = executor.run(feeds)
    after_straight = [v.numpy().copy() for v in state]
    for v, value in zip(state, start, strict=True):
        v.assign(value)
    executor._straight = None  # the step-by-step loop on the same schedule
    second = executor.run(feeds)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    for a, v in zip(after_straight, state, strict=True):
        np.testing.assert_array_equal(a, v.numpy())
    trained = zip(weights_before, model.get_weights(), strict=True)
    assert all(not np.array_equal(a, b) for a, b in trained)  # every weight moved


def test_a_failing_kernel_is_named_with_its_inputs():
    w = tp.Variable(np.ones((3, 4), np.float32), name="w")
    graph = tp.freeze(lambda x: tp.nn.relu(x @ w) * 2.0, tp.TensorSpec((None, None)))
    graph(tp.ones((2, 3)))
    assert graph._executor._straight is not None
    with pytest.raises(NodeError, match=r"node 'matmul_0' \(matmul\) with inputs \(float32\[2, 5\], float32\[3, 4\]\)"):
        graph(tp.ones((2, 5)))
    np.testing.assert_array_equal(graph(tp.ones((1, 3))).numpy(), np.full((1, 4), 6.0))


def test_an_observed_run_takes_the_loop(rng):
    graph = tp.freeze(lambda x: tp.exp(x) + 1.0, tp.TensorSpec((3,)), optimize=False)
    x = rng.standard_normal(3).astype(np.float32)
    seen = []
    HOOKS.node = lambda graph, node, args, result, start: seen.append(node.op)
    try:
        (got,) = Executor(graph, graph.outputs, graph.inputs).run([x])
    finally:
        HOOKS.node = None
    assert seen == ["exp", "add"]
    np.testing.assert_allclose(got, np.exp(x) + 1.0, rtol=1e-6)


def test_long_schedules_run_step_by_step(monkeypatch, rng):
    monkeypatch.setattr(executor_module, "_STRAIGHT_MAX_STEPS", 1)
    graph = tp.freeze(lambda x: tp.exp(x) + 1.0, tp.TensorSpec((3,)), optimize=False)
    executor = Executor(graph, graph.outputs, graph.inputs)
    assert executor._straight is None
    x = rng.standard_normal(3).astype(np.float32)
    np.testing.assert_allclose(executor.run([x])[0], np.exp(x) + 1.0, rtol=1e-6)


def test_values_are_released_after_their_last_reader(rng):
    """A value no later step reads is deleted at once: its array can go while the run goes on."""
    kept = []

    def doubled(x):
        out = x * 2.0
        kept.append(weakref.ref(out))
        return out

    def plus_one(y):
        assert kept[-1]() is None  # the doubled array was freed after exp, its last reader
        return y + 1.0

    f64 = np.dtype(np.float64)
    steps = [
        (KERNEL, doubled, (0,), 1, f64, None, None, (0,)),
        (KERNEL, np.exp, (1,), 2, f64, None, None, (1,)),
        (KERNEL, plus_one, (2,), 3, f64, None, None, (2,)),
    ]
    options = {"devices": (), "reusing": contextlib.nullcontext, "from_host": None, "device_index": 0}
    run = compile_schedule(steps, [0], [], [], [3], {**options, "node_error": None})
    x = rng.standard_normal(4)
    np.testing.assert_allclose(run([x])[0], np.exp(x * 2.0) + 1.0)
