"""Graph passes: each keeps the graph's outputs (against the unoptimized graph and eager
execution), reports `changed` truthfully, and shrinks graphs by the expected counts."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.graph.executor import _IN_PLACE
from tapeflow.graph.passes import DEFAULT_PASSES, FUSION, optimize
from tapeflow.graph.passes.cse import CommonSubexpressionElimination
from tapeflow.graph.passes.dce import DeadCodeElimination
from tapeflow.graph.passes.fold import ConstantFolding
from tapeflow.graph.passes.fuse import ElementwiseFusion
from tapeflow.graph.passes.simplify import AlgebraicSimplification

ALL_PASSES = [*DEFAULT_PASSES, FUSION]


def run_program(arrays, program):
    """The program run as a graph runs it: the CPU backend's kernel bound to the program."""
    return tp.get_op("fused_elementwise").bound_kernel("cpu", {"program": program})(*arrays)


PASSES = {p.name: p for p in ALL_PASSES}


def _mlp():
    model = tp.Sequential([tp.layers.Dense(16, activation="relu"), tp.layers.Dense(10)])
    model.build((None, 8))
    return model, tp.TensorSpec((None, 8)), lambda rng, n: rng.standard_normal((n, 8)).astype(np.float32)


def _cnn():
    model = tp.Sequential(
        [
            tp.layers.Conv2D(4, 3, padding="same", activation="relu"),
            tp.layers.MaxPooling2D(2),
            tp.layers.Flatten(),
            tp.layers.Dense(16, activation="relu"),
            tp.layers.Dropout(0.4),
            tp.layers.Dense(10),
        ]
    )
    model.build((None, 8, 8, 1))
    return model, tp.TensorSpec((None, 8, 8, 1)), lambda rng, n: rng.standard_normal((n, 8, 8, 1)).astype(np.float32)


def _lstm():
    model = tp.Sequential([tp.layers.LSTM(16), tp.layers.Dense(4)])
    model(tp.zeros((4, 7, 8)))
    return model, tp.TensorSpec((4, 7, 8)), lambda rng, n: rng.standard_normal((4, 7, 8)).astype(np.float32)


MODELS = {"mlp": _mlp, "cnn": _cnn, "lstm": _lstm}


def _frozen(make):
    model, spec, data = make()
    graph = tp.freeze(lambda x: model(x, training=False), spec, optimize=False)
    return model, graph, data


def assert_same_outputs(graph, reference, feeds_list, rtol=1e-5, atol=1e-6):
    for feeds in feeds_list:
        got = graph(*[tp.tensor(f) for f in feeds])
        want = reference(*feeds)
        got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


@pytest.mark.parametrize("pass_name", [*PASSES, "all"])
@pytest.mark.parametrize("model_name", list(MODELS))
def test_pass_keeps_model_outputs(model_name, pass_name, rng):
    model, graph, data = _frozen(MODELS[model_name])
    plain = _frozen_copy(model, graph)
    feeds = [(data(rng, n),) for n in (3, 5)]
    passes = ALL_PASSES if pass_name == "all" else [PASSES[pass_name]]
    optimize(graph, passes)
    graph.lint()
    assert_same_outputs(graph, lambda x: plain(tp.tensor(x)).numpy(), feeds)
    assert_same_outputs(graph, lambda x: model(tp.tensor(x), training=False).numpy(), feeds)
    for p in passes:
        assert p.run(graph) is False, f"{p.name} reports a change on a graph it already optimized"


def _frozen_copy(model, graph):
    return tp.freeze(lambda x: model(x, training=False), tp.TensorSpec(graph.inputs[0].shape), optimize=False)


def test_fusion_fuses_mlp_activation():
    _, graph, _ = _frozen(_mlp)
    optimize(graph, [p for p in ALL_PASSES if p.name != "bias_activation_fusion"])
    assert graph.op_counts() == {"add": 1, "fused_elementwise": 1, "matmul": 2, "read_variable": 4}


def test_dense_layers_become_fused_matmuls():
    model, graph, data = _frozen(_mlp)
    optimize(graph)
    assert graph.op_counts() == {"fused_matmul": 2, "read_variable": 4}
    assert [n.attrs["activation"] for n in graph.nodes if n.op == "fused_matmul"] == ["relu", "linear"]
    x = data(np.random.default_rng(0), 5)
    np.testing.assert_allclose(graph(x).numpy(), model(tp.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)


def test_cse_merges_exactly_the_duplicates(rng):
    def f(x, y):
        a = tp.exp(x) * y
        b = tp.exp(x) * y  # exp and multiply repeat
        c = tp.transpose(x, (1, 0))
        d = tp.transpose(x, (1, 0))  # equal tuple attrs
        e = tp.sum(x, axis=(0,))
        h = tp.sum(x, axis=(1,))  # different attrs: kept
        return a + b, c - d, e, h

    spec = tp.TensorSpec((3, 3))
    graph = tp.freeze(f, spec, spec, optimize=False)
    before = len(graph.nodes)
    assert CommonSubexpressionElimination().run(graph) is True
    assert DeadCodeElimination().run(graph) is False  # merged nodes are gone already
    assert len(graph.nodes) == before - 3
    assert CommonSubexpressionElimination().run(graph) is False
    x, y = rng.standard_normal((3, 3)).astype(np.float32), rng.standard_normal((3, 3)).astype(np.float32)
    outs = graph(tp.tensor(x), tp.tensor(y))
    eager = f(tp.tensor(x), tp.tensor(y))
    for o, e in zip(outs, eager, strict=True):
        np.testing.assert_allclose(o.numpy(), e.numpy(), rtol=1e-6)


def test_cse_merges_equal_constants_and_array_attrs():
    graph = tp.freeze(lambda x: x * np.float32(2.0) + x * np.float32(2.0), tp.TensorSpec((3,)), optimize=False)
    assert len(graph.constants) == 2
    assert CommonSubexpressionElimination().run(graph)
    assert len(graph.constants) == 1 and graph.op_counts() == {"add": 1, "multiply": 1}


def test_cse_never_merges_random_ops():
    graph = tp.freeze(lambda: tp.random.normal((4,)) - tp.random.normal((4,)), optimize=False)
    optimize(graph)
    assert graph.op_counts().get("random_normal", 0) == 2
    assert np.any(graph().numpy() != 0)


def test_cse_keeps_reads_around_a_write(rng):
    v = tp.Variable(np.ones(3, np.float32), name="v")

    def f(x):
        before = v * 1.5
        v.assign(x)
        return before, v * 1.5

    graph = tp.freeze(f, tp.TensorSpec((3,)), optimize=False)
    graph.add_node("read_variable", [], {"variable": graph.nodes[0].attrs["variable"]}, [((3,), "float32")])
    optimize(graph)
    assert graph.op_counts()["assign_variable"] == 1
    x = rng.standard_normal(3).astype(np.float32)
    before, after = graph(tp.tensor(x))
    np.testing.assert_allclose(before.numpy(), 1.5 * np.ones(3))
    np.testing.assert_allclose(after.numpy(), 1.5 * x, rtol=1e-6)
    np.testing.assert_allclose(v.numpy(), x)


def test_assign_survives_dce():
    v = tp.Variable(np.zeros(2, np.float32), name="counter")

    def step(x):
        v.assign_add(x)
        return x * 0.0

    graph = tp.freeze(step, tp.TensorSpec((2,)), optimize=False)
    graph.outputs, graph.output_structure = [], None
    optimize(graph)
    assert graph.op_counts() == {"add": 1, "assign_variable": 1, "read_variable": 1}
    graph(tp.tensor([1.0, 2.0]))
    graph(tp.tensor([1.0, 2.0]))
    np.testing.assert_allclose(v.numpy(), [2.0, 4.0])


def test_dce_drops_unused_nodes_constants_and_state():
    w = tp.Variable(np.ones(3, np.float32), name="unused")
    graph = tp.freeze(lambda x: (x + 1.0, w * 2.0)[0], tp.TensorSpec((3,)), optimize=False)
    assert "unused" in graph.state
    assert DeadCodeElimination().run(graph)
    assert graph.op_counts() == {"add": 1} and graph.state == {} and len(graph.constants) == 1
    assert DeadCodeElimination().run(graph) is False


def test_folding_leaves_only_a_constant():
    graph = tp.freeze(lambda: tp.ones((3,)) * 2 + 1, optimize=False)
    optimize(graph)
    assert graph.nodes == [] and len(graph.constants) == 1
    np.testing.assert_array_equal(graph().numpy(), np.ones(3, np.float32) * 2 + 1)
    assert ConstantFolding().run(graph) is False


def test_folding_makes_a_static_full_like_a_constant(rng):
    """full_like reads only its input's shape: with a static shape it folds, and what follows
    it folds too; with a dynamic batch it stays."""
    x = rng.standard_normal((4, 3)).astype(np.float32)

    def fn(v):
        return v * (tp.full_like(tp.sum(v, axis=1), 1.0) / 4.0)[:, None]

    graph = tp.freeze(fn, tp.TensorSpec((4, 3)), optimize=False)
    assert graph.op_counts()["full_like"] == 1
    assert ConstantFolding().run(graph) is True
    assert "full_like" not in graph.op_counts() and "divide" not in graph.op_counts()
    np.testing.assert_allclose(graph(x).numpy(), x / 4.0, rtol=1e-6)
    dynamic = tp.freeze(fn, tp.TensorSpec((None, 3)), optimize=False)
    ConstantFolding().run(dynamic)
    assert dynamic.op_counts()["full_like"] == 1
    np.testing.assert_allclose(dynamic(x).numpy(), x / 4.0, rtol=1e-6)


def test_folding_respects_the_size_cap():
    graph = tp.freeze(lambda: tp.ones((20,)) * 2.0, optimize=False)
    assert ConstantFolding(max_elements=10).run(graph) is False
    assert ConstantFolding(max_elements=20).run(graph) is True


@pytest.mark.parametrize(
    ("fn", "shape", "left"),
    [
        (lambda x: x * 1.0 + 0.0, (2, 3), {"add": 1}),  # -0.0 + 0.0 is 0.0: kept
        (lambda x: x * 1.0 + -0.0, (2, 3), {}),
        (lambda x: 1.0 * x - 0.0, (2, 3), {}),
        (lambda x: 1.0 * x - -0.0, (2, 3), {"subtract": 1}),  # -0.0 - -0.0 is 0.0: kept
        (lambda x: 0.0 + x / 1.0, (2, 3), {"add": 1}),
        (lambda x: -0.0 + x / 1.0, (2, 3), {}),
        (lambda x: x * np.ones((4, 1, 3), np.float32), (2, 3), {"multiply": 1}),  # broadcasting: kept
        (lambda x: x * 0.0, (2, 3), {"multiply": 1}),  # NaN * 0 is NaN: kept
        (lambda x: tp.transpose(tp.transpose(x, (1, 0, 2)), (1, 0, 2)), (2, 3, 4), {}),
        (lambda x: tp.transpose(tp.transpose(x, (1, 2, 0)), (1, 0, 2)), (2, 3, 4), {"transpose": 1}),
        (lambda x: tp.reshape(tp.reshape(x, (6, 4)), (4, 6)), (2, 3, 4), {"reshape": 1}),
        (lambda x: tp.reshape(tp.reshape(x, (6, 4)), (2, 3, 4)), (2, 3, 4), {}),
        (lambda x: tp.identity(tp.stop_gradient(tp.cast(x, "float32"))), (2, 3), {}),
    ],
)
def test_simplify(fn, shape, left, rng):
    graph = tp.freeze(fn, tp.TensorSpec(shape), optimize=False)
    simplify, dce = AlgebraicSimplification(), DeadCodeElimination()
    simplify.run(graph)
    dce.run(graph)
    assert graph.op_counts() == left
    assert simplify.run(graph) is False
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[0] = np.nan
    np.testing.assert_allclose(graph(tp.tensor(x)).numpy(), fn(tp.tensor(x)).numpy(), rtol=1e-6)


def test_fusion_program_matches_eager(rng):
    def f(x, b, y):
        h = tp.nn.relu(x + b) * 2.0
        return tp.tanh(h) - tp.sigmoid(tp.maximum(y, h)) / tp.exp(tp.minimum(x, 0.5)) + tp.sqrt(tp.square(y) + 1.0)

    specs = (tp.TensorSpec((None, 6)), tp.TensorSpec((6,)), tp.TensorSpec((None, 6)))
    graph = tp.freeze(f, *specs)
    optimize(graph, ALL_PASSES)
    assert graph.op_counts() == {"fused_elementwise": 1}
    for dtype in (np.float32,):
        for n in (1, 300):
            x, b, y = (rng.standard_normal(s).astype(dtype) for s in ((n, 6), (6,), (n, 6)))
            want = f(tp.tensor(x), tp.tensor(b), tp.tensor(y)).numpy()
            np.testing.assert_allclose(graph(x, b, y).numpy(), want, rtol=1e-5, atol=1e-6)
    assert ElementwiseFusion().run(graph) is False


@pytest.mark.parametrize(
    "shapes", [((5, 6), (5, 6)), ((5, 6), (6,)), ((5, 6), ()), ((5, 1), (1, 6)), ((4, 5, 6), (5, 1))]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_kernel_against_numpy(shapes, dtype, rng):
    """Full, row and scalar inputs take the compiled kernel; the rest fall back to NumPy."""
    a, b = (np.asarray(rng.standard_normal(s)).astype(dtype) for s in shapes)
    program = (("input", 0), ("input", 1), ("multiply", 0, 1), ("const", 0.25), ("add", 2, 3), ("relu", 4), ("exp", 5))
    want = np.exp(np.maximum(a * b + dtype(0.25), 0))
    got = run_program([a, b], program)
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-13)


def test_fused_kernel_nan_semantics():
    x = np.array([np.nan, -1.0, 2.0], np.float32)
    y = np.array([0.0, np.nan, 1.0], np.float32)
    program = (("input", 0), ("relu", 0), ("input", 1), ("maximum", 1, 2), ("minimum", 3, 2))
    want = np.minimum(np.maximum(np.maximum(x, 0), y), y)
    np.testing.assert_array_equal(run_program([x, y], program), want)


def test_fusion_stops_at_shared_values(rng):
    def f(x):
        e = tp.exp(x)
        return tp.tanh(e) + e * 2.0, e

    graph = tp.freeze(f, tp.TensorSpec((4,)))
    optimize(graph, ALL_PASSES)
    assert graph.op_counts() == {"exp": 1, "fused_elementwise": 1}
    x = rng.standard_normal(4).astype(np.float32)
    for got, want in zip(graph(tp.tensor(x)), f(tp.tensor(x)), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


EDGES = {
    np.float32: [88.0, 88.3, 88.5, 88.7, 88.7228, 88.73, 89.0, 1e30, -87.0, -87.3, -87.34, -87.4, -103.0, -1e30],
    np.float64: [709.0, 709.7, 709.79, 710.0, -708.0, -708.4, -745.0, -746.0, 1e300, -1e300],
}
SPECIALS = [0.0, -0.0, 1.5, -1.5, 1e-40, -1e-40, np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_exp_matches_eager_at_the_edges_of_float_range(dtype):
    """The fused exp used to clamp its input at 88, giving e^88 for x in (88, 88.72]."""
    x = np.array(EDGES[dtype] + SPECIALS, dtype)
    frozen = run_program([x], (("input", 0), ("exp", 0)))
    with np.errstate(over="ignore"):
        eager = tp.exp(tp.tensor(x)).numpy()
        exact = np.exp(x.astype(np.float64)).astype(dtype)
    np.testing.assert_allclose(frozen, eager, rtol=2e-6 if dtype == np.float32 else 1e-15, atol=0)
    normal = np.abs(exact) >= np.finfo(dtype).tiny  # below it, results are flushed to zero
    np.testing.assert_allclose(frozen[normal], exact[normal], rtol=2e-6 if dtype == np.float32 else 1e-15)


@pytest.mark.parametrize("rows", [1, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dense_relu_kernel_keeps_nan_as_eager_does(rows, dtype, rng):
    """The bias-and-relu epilogue of fused_matmul used to turn NaN into 0."""
    x = rng.standard_normal((rows, 6)).astype(dtype)
    x[0, 2] = np.nan
    w, b = rng.standard_normal((6, 4)).astype(dtype), rng.standard_normal(4).astype(dtype)
    w[2, 1] = 0.0  # NaN * 0 is still NaN
    eager = tp.nn.relu(tp.tensor(x) @ tp.tensor(w) + tp.tensor(b)).numpy()
    frozen = tp.get_op("fused_matmul").bound_kernel("cpu", {"activation": "relu"})(x, w, b)
    assert np.isnan(eager[0]).all()
    np.testing.assert_allclose(frozen, eager, rtol=1e-5, atol=1e-6)  # NaN positions must agree


# ------------------------------------------------------- descent on a product
def test_a_dense_layers_sgd_step_becomes_one_update_of_its_weight(rng):
    """A frozen train step with plain SGD folds each dense kernel's gradient product into its
    update, which the executor writes into the weight's own array; three steps match SGD
    worked out in float64 by hand."""
    model = tp.Sequential([tp.layers.Dense(3)])
    model.build((None, 5))
    model.compile(optimizer=tp.optimizers.SGD(0.1), loss="mse")
    w, b = (v.astype(np.float64) for v in model.get_weights())
    for _ in range(3):
        x = rng.standard_normal((8, 5)).astype(np.float32)
        y = rng.standard_normal((8, 3)).astype(np.float32)
        model.train_on_batch(x, y)
        delta = 2.0 * (x @ w + b - y) / y.size
        w, b = w - 0.1 * (x.T.astype(np.float64) @ delta), b - 0.1 * delta.sum(axis=0)
    graph = next(g for entry in model._steps._graphs.values() for g in entry if hasattr(g, "op_counts"))
    counts = graph.op_counts()
    assert counts.get("sgd_matmul_update") == 1 and "matmul" not in counts
    in_place = [step[5].op for step in graph._executor._steps if step[0] == _IN_PLACE]
    assert sorted(in_place) == ["fused_elementwise", "sgd_matmul_update"]  # the kernel's and the bias's update
    np.testing.assert_allclose(model.get_weights()[0], w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.get_weights()[1], b, rtol=1e-5, atol=1e-6)


def _update_graph(program_of, shapes_of_a_b=((4, 3), (3, 2)), gradient_fetched=False):
    """A graph updating a (4, 2) weight from a product, its update written by `program_of`."""
    w = tp.Variable(np.ones((4, 2), np.float32))

    def step(a, b, lr):
        g = tp.matmul(a, b)
        w.assign(program_of(w, g, lr))
        return [w, g] if gradient_fetched else w

    specs = [tp.TensorSpec(s) for s in shapes_of_a_b] + [tp.TensorSpec(())]
    return w, tp.freeze(step, *specs)


@pytest.mark.parametrize(
    "program_of, fused",
    [
        (lambda w, g, lr: w - g * lr, True),
        (lambda w, g, lr: w - lr * g, True),
        (lambda w, g, lr: w - g * 0.25, True),
        (lambda w, g, lr: w + g * lr, False),
        (lambda w, g, lr: w * 0.99 - g * lr, False),  # weight decay
        (lambda w, g, lr: w - g * (lr * 2.0), False),
    ],
    ids=["rate-input", "rate-first", "rate-constant", "ascent", "decay", "rate-computed"],
)
def test_only_a_plain_descent_step_on_a_product_is_folded(program_of, fused, rng):
    w, graph = _update_graph(program_of)
    assert ("sgd_matmul_update" in graph.op_counts()) == fused
    a, b = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
    lr = np.float32(0.5)
    expected = program_of(np.ones((4, 2)), a.astype(np.float64) @ b, np.float64(lr))
    graph(a, b, lr)
    np.testing.assert_allclose(w.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_a_product_read_elsewhere_or_batched_is_not_folded():
    _, fetched = _update_graph(lambda w, g, lr: w - g * lr, gradient_fetched=True)
    assert "sgd_matmul_update" not in fetched.op_counts()
    v = tp.Variable(np.ones((2, 4, 2), np.float32))

    def batched(a, b, lr):
        v.assign(v - tp.matmul(a, b) * lr)
        return v

    graph = tp.freeze(batched, tp.TensorSpec((2, 4, 3)), tp.TensorSpec((2, 3, 2)), tp.TensorSpec(()))
    assert "sgd_matmul_update" not in graph.op_counts()


@pytest.mark.parametrize("layer", ["conv", "dense"])
def test_a_relu_layers_bias_gradient_is_summed_by_its_mask(layer, rng):
    """A frozen gradient of a relu layer masks and sums in one `relu_bias_grad` node (the
    relu_grad and the bias's sum gone), and gives the eager tape's gradients."""
    if layer == "conv":
        model = tp.Sequential([tp.layers.Conv2D(5, 3, activation="relu"), tp.layers.Flatten(), tp.layers.Dense(2)])
        x = rng.standard_normal((4, 7, 7, 3)).astype(np.float32)
    else:
        model = tp.Sequential([tp.layers.Dense(6, activation="relu"), tp.layers.Dense(2)])
        x = rng.standard_normal((4, 3)).astype(np.float32)
    model(x)

    def grads(x):
        with tp.GradientTape() as tape:
            loss = tp.sum(model(x) ** 2)
        return tape.gradient(loss, model.trainable_weights)

    graph = tp.freeze(grads, tp.TensorSpec(x.shape))
    counts = graph.op_counts()
    assert counts.get("relu_bias_grad") == 1 and "relu_grad" not in counts
    for frozen, eager in zip(graph(x), grads(tp.tensor(x)), strict=True):
        np.testing.assert_allclose(np.asarray(frozen), eager.numpy(), rtol=1e-5, atol=1e-5)
