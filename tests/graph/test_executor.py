"""The executor: repeated runs never change results or touch fed arrays, constants or
Variables, and a failing node is named."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp
from tapeflow._kernels import allocator
from tapeflow.graph import passes
from tapeflow.graph.executor import _CHAIN, Executor, NodeError, RunCancelled
from tapeflow.graph.ir import GraphIR
from tapeflow.graph.passes.fold import ConstantFolding
from tapeflow.ops.registry import apply, get_op


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
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((70, 130)).astype(np.float32)
    b = rng.standard_normal(130).astype(np.float32)
    graph = GraphIR("dense")
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


def _dense_stack(widths, activations):
    model = tp.Sequential([tp.layers.Dense(n, activation=a) for n, a in zip(widths[1:], activations, strict=True)])
    model.build((None, widths[0]))
    return model, model.freeze(tp.TensorSpec((None, widths[0])))


def test_dense_layers_feeding_one_another_run_as_one_step(rng):
    """A frozen stack of dense layers runs one row through one chained kernel step, with the
    bits of the layers run one by one; a batch, a profiled run and a cancellable run take
    the layers one by one."""
    model, graph = _dense_stack((20, 130, 70, 3), ("relu", "relu", None))
    executor = Executor(graph, graph.outputs, graph.inputs)
    assert [step[0] for step in executor._chained_steps] == [4]  # one chain
    assert len(executor._steps) == 3
    for rows in (1, 4, 1):
        x = rng.standard_normal((rows, 20)).astype(np.float32)
        (got,) = executor.run([x])
        (one_by_one,) = executor.run([x], cancelled=lambda: False)  # takes the unchained schedule
        np.testing.assert_array_equal(got, one_by_one)
        expected = x.astype(np.float64)
        for w, b, relu in zip(model.get_weights()[::2], model.get_weights()[1::2], (True, True, False), strict=True):
            expected = expected @ w + b
            expected = np.maximum(expected, 0) if relu else expected
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    with tp.profiler.trace() as profile:
        executor.run([x[:1]])
    assert [e.op for e in profile.events if e.op == "fused_matmul"] == ["fused_matmul"] * 3


def test_a_dense_chain_stops_at_a_value_read_twice_or_fetched(rng):
    """A layer's output that another node reads, or that is fetched, ends the chain there."""
    graph = GraphIR("branch")
    x = graph.add_input("x", (None, 6), "float32")
    weights = [graph.add_constant(rng.standard_normal(s).astype(np.float32)) for s in ((6, 8), (8,), (8, 8), (8,))]
    (h,) = graph.add_node("fused_matmul", [x, *weights[:2]], {"activation": "relu"}, [((None, 8), "float32")])
    (y,) = graph.add_node("fused_matmul", [h, *weights[2:]], {"activation": "relu"}, [((None, 8), "float32")])
    (z,) = graph.add_node("add", [y, h], {}, [((None, 8), "float32")])
    executor = Executor(graph, [z], [x])
    assert 4 not in [step[0] for step in executor._chained_steps]
    fetched = Executor(graph, [y, h], [x])
    assert 4 not in [step[0] for step in fetched._chained_steps]
    feed = rng.standard_normal((1, 6)).astype(np.float32)
    got_y, got_h = fetched.run([feed])
    np.testing.assert_array_equal(executor.run([feed])[0], got_y + got_h)


def test_a_chained_layer_that_fails_is_named(rng):
    """A chain given what its one-call kernel does not take runs its layers one by one, and
    a layer that fails is named as it would be alone."""
    _, graph = _dense_stack((5, 7, 3), ("relu", None))
    executor = Executor(graph, graph.outputs, graph.inputs)
    assert [step[0] for step in executor._chained_steps] == [4]
    with pytest.raises(NodeError, match=r"\(fused_matmul\) with inputs \(float32\[1, 6\], float32\[5, 7\]"):
        executor.run([np.ones((1, 6), np.float32)])


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


def _fused_dense_graph(x, w, b, feed_x: bool) -> GraphIR:
    graph = GraphIR("dense")
    xv = graph.add_input("x", x.shape, "float32") if feed_x else graph.add_constant(x)
    wv, bv = graph.add_constant(w), graph.add_constant(b)
    out = ((x.shape[0], w.shape[1]), "float32")
    graph.outputs = graph.add_node("fused_matmul", [xv, wv, bv], {"activation": "relu"}, [out])
    return graph


@pytest.mark.parametrize("rows", [1, 5])
def test_eager_folding_and_the_executor_give_the_same_bits(rows, rng):
    """All three run the kernel `OpDef.bound_kernel` finds (for one float32 row, the one-row
    dense kernel), so a fused_matmul gives the same bits in each."""
    x = rng.standard_normal((rows, 70)).astype(np.float32)
    w = rng.standard_normal((70, 130)).astype(np.float32)
    b = rng.standard_normal(130).astype(np.float32)
    eager = apply(get_op("fused_matmul"), (tp.tensor(x), tp.tensor(w), tp.tensor(b)), {"activation": "relu"}).numpy()
    graph = _fused_dense_graph(x, w, b, feed_x=True)
    (run,) = Executor(graph, graph.outputs, graph.inputs).run([x])
    folded_graph = _fused_dense_graph(x, w, b, feed_x=False)
    assert ConstantFolding().run(folded_graph)
    folded = folded_graph.outputs[0].data
    assert eager.tobytes() == run.tobytes() == folded.tobytes()


class _Recording(Executor):
    """Runs every node through its kernel, noting each op and the shapes it was given."""

    def __init__(self, *args, **kwargs):
        self.seen = []
        super().__init__(*args, **kwargs)

    def run_node(self, node, kernel, *arrays):
        self.seen.append((node.op, [a.shape for a in arrays]))
        return kernel(*arrays)


def test_a_subclass_runs_every_kernel_node_through_run_node(rng):
    """Overriding `run_node` sees each kernel node once per run, multi-output ones included,
    and a plain pass-through gives the base executor's results."""
    graph = tp.freeze(lambda x: [tp.exp(p) for p in tp.split(x, 2)], tp.TensorSpec((4,)), optimize=False)
    x = rng.standard_normal(4).astype(np.float32)
    recording = _Recording(graph, graph.outputs, graph.inputs)
    got = recording.run([x])
    expected = Executor(graph, graph.outputs, graph.inputs).run([x])
    assert [a.tobytes() for a in got] == [a.tobytes() for a in expected]
    assert recording.seen == [("split", [(4,)]), ("exp", [(2,)]), ("exp", [(2,)])]


def test_an_in_place_scatter_also_passes_through_run_node():
    """A scatter into a variable, which the base executor writes in place, still passes
    through an overriding `run_node` and gives the same variable."""
    table = tp.Variable(np.arange(12, dtype=np.float32).reshape(4, 3), name="table")

    def step(rows):
        table.assign(tp.scatter_update(table, tp.tensor([1, 3]), rows))
        return tp.sum(table)

    graph = tp.freeze(step, tp.TensorSpec((2, 3)), optimize=False)
    recording = _Recording(graph, graph.outputs, graph.inputs)
    (total,) = recording.run([np.ones((2, 3), np.float32)])
    assert "scatter_update" in [op for op, _ in recording.seen]
    np.testing.assert_array_equal(table.numpy()[[1, 3]], np.ones((2, 3)))
    assert float(total) == float(table.numpy().sum())


def test_the_compiled_run_loop_gives_the_python_loops_bits(rng):
    """A CPU graph runs on the backend's compiled loop; for every kind of step (kernels, a
    multi-output node, a dense chain, constants, a state write) it gives the bits and the
    state of the Python loop that profiled and cancellable runs take."""
    model = tp.Sequential([tp.layers.Dense(16, activation="relu"), tp.layers.Dense(8)])
    model.build((None, 6))
    total = tp.Variable(np.zeros((), np.float32), name="total")
    offset = rng.standard_normal(4).astype(np.float32)

    def f(x):
        a, b = tp.split(model(x, training=False), 2, axis=-1)
        total.assign_add(tp.sum(a))
        return [tp.exp(a) + tp.tensor(offset), b * 2.0]

    graph = tp.freeze(f, tp.TensorSpec((None, 6)))
    executor = Executor(graph, graph.outputs, graph.inputs)
    assert executor._schedule is not None and _CHAIN in [step[0] for step in executor._chained_steps]
    for rows in (1, 3):
        x = rng.standard_normal((rows, 6)).astype(np.float32)
        total.assign(np.float32(1.5))
        compiled = executor.run([x])
        after_compiled = total.numpy()
        total.assign(np.float32(1.5))
        python = executor.run([x], cancelled=lambda: False)
        assert [a.tobytes() for a in compiled] == [a.tobytes() for a in python]
        assert after_compiled.tobytes() == total.numpy().tobytes()
        y = model(tp.tensor(x), training=False).numpy().astype(np.float64)
        np.testing.assert_allclose(compiled[1], y[:, 4:] * 2.0, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(after_compiled, 1.5 + y[:, :4].sum(), rtol=1e-5, atol=1e-5)


def test_a_graph_call_checks_every_new_shape_and_dtype(rng):
    """Calling a graph of one input again with an array of the shape and dtype it last took
    runs it at once; any other array is checked (and converted) as the first one was, and an
    edited graph checks again."""
    model, graph = _dense_stack((6, 16, 3), ("relu", None))
    x = rng.standard_normal((1, 6)).astype(np.float32)
    first = graph(x).numpy()
    np.testing.assert_allclose(first, model(tp.tensor(x), training=False).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(graph(x).numpy(), first)
    np.testing.assert_array_equal(graph(x.astype(np.float64)).numpy(), first)  # converted
    np.testing.assert_allclose(graph(np.repeat(x, 2, axis=0)).numpy(), np.repeat(first, 2, axis=0), rtol=1e-6)
    with pytest.raises(ValueError, match=r"feed 'input' expects shape float32\[\?,6\], got \(1, 5\)"):
        graph(x[:, :5])
    np.testing.assert_array_equal(graph(np.ones((1, 6), np.int32)).numpy(), graph(np.ones((1, 6), np.float32)).numpy())
    with pytest.raises(TypeError, match="expects float32, got bool"):
        graph(np.ones((1, 6), bool))
    graph.changed()
    with pytest.raises(ValueError, match=r"got \(1, 5\)"):
        graph(x[:, :5])
    np.testing.assert_array_equal(graph(x).numpy(), first)


def test_a_run_with_large_arrays_takes_kept_blocks_on_the_compiled_loop_too(rng):
    """A graph making arrays of 256 KiB and more runs on the compiled loop inside the backend's
    block-reusing context: its large arrays come from kept blocks, with the Python loop's bits."""
    graph = tp.freeze(lambda x: tp.tanh(x * 2.0) @ tp.transpose(x, (1, 0)), tp.TensorSpec((300, 400)))
    executor = Executor(graph, graph.outputs, graph.inputs)
    assert executor._schedule is not None and executor._reusing is not None
    x = rng.standard_normal((300, 400)).astype(np.float32)
    python = executor.run([x], cancelled=lambda: False)[0]
    before = allocator.reused_blocks()
    for _ in range(3):
        compiled = executor.run([x])[0]
        assert compiled.tobytes() == python.tobytes()
    assert allocator.reused_blocks() > before
