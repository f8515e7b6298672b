"""Freezing: traced graphs match eager execution, state is ordered, partial runs
prune, and values escaping into Python stop the freeze with the user's line."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.graph import GraphError, NodeError
from tapeflow.graph.ir import ASSIGN, READ

RNG = np.random.default_rng(5)


def mlp():
    model = tp.Sequential(
        [tp.layers.Dense(16, activation="relu"), tp.layers.Dense(16, activation="tanh"), tp.layers.Dense(4)]
    )
    model(tp.ones((1, 8)))
    return model


def cnn():
    model = tp.Sequential(
        [
            tp.layers.Conv2D(4, 5, padding="same", activation="relu"),
            tp.layers.MaxPooling2D(2),
            tp.layers.Conv2D(8, 5, padding="same", activation="relu"),
            tp.layers.MaxPooling2D(2),
            tp.layers.Flatten(),
            tp.layers.Dense(32, activation="relu"),
            tp.layers.Dropout(0.4),
            tp.layers.Dense(10),
        ]
    )
    model(tp.ones((1, 28, 28, 1)))
    return model


def lstm():
    model = tp.Sequential([tp.layers.Embedding(30, 8), tp.layers.LSTM(12), tp.layers.Dense(3)])
    model(tp.tensor(np.zeros((1, 7), np.int64)))
    return model


MODELS = {
    "mlp": (mlp, lambda n: RNG.standard_normal((n, 8)).astype(np.float32), tp.TensorSpec((None, 8))),
    "cnn": (cnn, lambda n: RNG.random((n, 28, 28, 1)).astype(np.float32), tp.TensorSpec((None, 28, 28, 1))),
    "lstm": (lstm, lambda n: RNG.integers(0, 30, (n, 7)), tp.TensorSpec((None, 7), "int64")),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_frozen_model_equals_eager_at_any_batch_size(name):
    make, data, spec = MODELS[name]
    model = make()
    graph = tp.freeze(lambda x: model(x, training=False), spec)
    graph.lint()
    for n in (1, 5):
        x = data(n)
        np.testing.assert_allclose(graph(x).numpy(), model(tp.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)


def test_model_freeze_gives_the_inference_graph():
    model = cnn()
    graph = model.freeze()
    ops = graph.op_counts()
    assert "random_uniform" not in ops and ASSIGN not in ops  # dropout is the identity at inference
    x = MODELS["cnn"][1](3)
    np.testing.assert_allclose(graph(x).numpy(), model.predict(x), rtol=1e-5, atol=1e-6)


def test_printing_lint_and_dot_show_every_node():
    w = tp.Variable(RNG.standard_normal((3, 2)).astype(np.float32), name="w")
    graph = tp.freeze(lambda x: tp.nn.relu(x @ w), tp.TensorSpec((None, 3)), optimize=False)
    text = str(graph)
    assert text.splitlines()[0] == "graph lambda(x: float32[?,3]) -> (float32[?,2])"
    assert "state w: float32[3,2]" in text
    assert "= matmul(x, %read_0) : float32[?,2]" in text and "= relu(%matmul_0) : float32[?,2]" in text
    assert len([line for line in text.splitlines() if " = " in line]) == len(graph.nodes)
    dot = graph.to_dot()
    assert dot.startswith('digraph "lambda"') and all(f'"{n.name}"' in dot for n in graph.nodes)


def test_lint_finds_a_use_before_definition():
    graph = tp.freeze(lambda x: tp.exp(x) + 1.0, tp.TensorSpec((2,)), optimize=False)
    graph.nodes.reverse()
    with pytest.raises(GraphError, match="is not defined before it"):
        graph.lint()


def test_state_reads_and_writes_keep_program_order():
    v = tp.Variable(np.array([1.0, 2.0], np.float32), name="v")

    def step(x):
        before = v + 0.0  # read
        v.assign_add(x)  # write
        after = v * 1.0  # sees the write
        return before, after

    graph = tp.freeze(step, tp.TensorSpec((2,)), optimize=False)
    ops = [n.op for n in graph.nodes]
    assert ops.count(READ) == 1 and ops.count(ASSIGN) == 1
    before, after = graph(np.array([10.0, 20.0], np.float32))
    np.testing.assert_array_equal(before.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(after.numpy(), [11.0, 22.0])
    np.testing.assert_array_equal(v.numpy(), [11.0, 22.0])
    graph(np.array([1.0, 1.0], np.float32))  # the graph keeps updating the same Variable
    np.testing.assert_array_equal(v.numpy(), [12.0, 23.0])


def test_gradient_tape_inside_a_freeze_matches_eager():
    model = mlp()
    x = RNG.standard_normal((6, 8)).astype(np.float32)

    def grads(x):
        with tp.GradientTape() as tape:
            loss = tp.sum(tp.square(model(x)))
        return tape.gradient(loss, model.trainable_weights)

    graph = tp.freeze(grads, tp.TensorSpec((None, 8)))
    for g, e in zip(graph(x), grads(tp.tensor(x)), strict=True):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)


def test_partial_execution_prunes_and_accepts_inner_feeds():
    calls = []
    graph = tp.freeze(lambda x: (tp.exp(x) * 2.0, tp.log(x)), tp.TensorSpec((3,)), optimize=False)
    exp_value = next(n.outputs[0] for n in graph.nodes if n.op == "exp")
    log_value = next(n.outputs[0] for n in graph.nodes if n.op == "log")
    x = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_allclose(graph.run({"x": x}, log_value.name), np.log(x), rtol=1e-6)
    # feeding the exp output replaces its computation: x is not needed at all
    out = graph.run({exp_value.name: np.ones(3, np.float32)}, graph.outputs[0])
    np.testing.assert_array_equal(out, [2.0, 2.0, 2.0])
    with pytest.raises(GraphError, match="not fed"):
        graph.run({}, [log_value])
    with pytest.raises(GraphError, match="no value named"):
        graph.run({"x": x}, "nonexistent")
    assert not calls


def test_constants_are_captured_and_side_effects_run_once():
    seen = []
    table = tp.tensor([1.0, 2.0, 3.0])

    def f(x):
        seen.append("traced")
        return x * table

    graph = tp.freeze(f, tp.TensorSpec((3,)))
    assert len(graph.constants) == 1
    for _ in range(3):
        np.testing.assert_array_equal(graph(np.ones(3, np.float32)).numpy(), [1.0, 2.0, 3.0])
    assert seen == ["traced"]


def test_feeds_are_checked():
    graph = tp.freeze(lambda x: x * 2.0, tp.TensorSpec((None, 3)))
    with pytest.raises(ValueError, match=r"feed 'x' expects shape float32\[\?,3\], got \(2, 4\)"):
        graph(np.ones((2, 4), np.float32))
    with pytest.raises(TypeError, match="expects float32, got bool"):
        graph(np.ones((2, 3), bool))
    with pytest.raises(GraphError, match="expected 1 inputs"):
        graph(np.ones((2, 3)), np.ones((2, 3)))


def test_an_error_inside_a_node_names_it():
    w = tp.ones((3, 4))
    graph = tp.freeze(lambda x: tp.reshape(x, (None, 3)) @ w, tp.TensorSpec((None, None)))
    with pytest.raises(NodeError, match=r"node 'reshape_0' \(reshape\) with inputs \(float32\[2, 5\]\)"):
        graph(np.ones((2, 5), np.float32))


# ------------------------------------------------------------ FreezeError
def _line_of(marker: str) -> int:
    source, start = inspect.getsourcelines(_escapes)
    return start + next(i for i, line in enumerate(source) if marker in line)


def _escapes(kind):
    def f(x):
        if kind == "bool":
            if tp.sum(x) > 0:  # escape: bool
                return x
            return -x
        if kind == "float":
            return x * float(tp.sum(x))  # escape: float
        if kind == "int":
            return x[: int(tp.argmax(x))]  # escape: int
        if kind == "numpy":
            return x * x.numpy()  # escape: numpy
        if kind == "len":
            return x * len(x)  # escape: len
        if kind == "iter":
            return sum(row for row in x)  # escape: iter
        raise AssertionError(kind)

    return f


@pytest.mark.parametrize("kind", ["bool", "float", "int", "numpy", "len", "iter"])
def test_freeze_error_names_the_users_line(kind):
    with pytest.raises(tp.FreezeError) as info:
        tp.freeze(_escapes(kind), tp.TensorSpec((None,)))
    message = str(info.value)
    assert f"{__file__}:{_line_of(f'escape: {kind}')}" in message, message
    assert "tp.cond" in message and "tp.while_loop" in message


def test_len_of_a_static_dimension_is_allowed():
    graph = tp.freeze(lambda x: x * float(len(x)), tp.TensorSpec((4,)))
    np.testing.assert_array_equal(graph(np.ones(4, np.float32)).numpy(), [4.0] * 4)


def test_a_tensor_kept_from_an_earlier_trace_is_rejected():
    kept = []
    tp.freeze(lambda x: kept.append(x) or x, tp.TensorSpec((2,)))
    with pytest.raises(tp.FreezeError, match="belongs to another traced function"):
        tp.freeze(lambda y: y + kept[0], tp.TensorSpec((2,)))


def test_functional_model_with_two_inputs_freezes():
    a, b = tp.layers.Input(shape=(6,)), tp.layers.Input(shape=(4,))
    h = tp.layers.Concatenate()([tp.layers.Dense(5, activation="relu")(a), b])
    out = tp.layers.Dense(3)(tp.layers.BatchNormalization()(h))
    model = tp.Model([a, b], out)
    xa, xb = RNG.standard_normal((7, 6)).astype(np.float32), RNG.standard_normal((7, 4)).astype(np.float32)
    graph = model.freeze()  # from the symbolic inputs, before any eager call
    assert [v.name for v in graph.inputs] == ["input_0", "input_1"]
    eager = model([tp.tensor(xa), tp.tensor(xb)], training=False).numpy()
    np.testing.assert_allclose(graph(xa, xb).numpy(), eager, rtol=1e-5, atol=1e-6)


def test_graph_gradients_append_nodes_that_match_the_tape():
    model = mlp()
    x = RNG.standard_normal((5, 8)).astype(np.float32)
    graph = tp.freeze(lambda x: tp.sum(tp.square(model(x))), tp.TensorSpec((None, 8)), optimize=False)
    before = len(graph.nodes)
    reads = {n.attrs["variable"]: n.outputs[0] for n in graph.nodes if n.op == READ}
    wrt = [reads[w.name] for w in model.trainable_weights] + graph.inputs
    grads = tp.gradients(graph, graph.outputs, wrt)
    assert len(graph.nodes) > before and all(g is not None for g in grads)
    got = graph.run({"x": x}, grads)
    xt = tp.tensor(x)
    with tp.GradientTape() as tape:
        tape.watch(xt)
        loss = tp.sum(tp.square(model(xt)))
    expected = tape.gradient(loss, [*model.trainable_weights, xt])
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e.numpy(), rtol=1e-5, atol=1e-5)
    # an unconnected value gets None; weighting by grad_ys scales the result
    assert tp.gradients(graph, reads[model.trainable_weights[1].name], graph.inputs) == [None]
    two = graph.add_constant(np.float32(2.0), "two")
    (scaled,) = tp.gradients(graph, graph.outputs, graph.inputs, grad_ys=[two])
    np.testing.assert_allclose(graph.run({"x": x}, scaled), 2 * expected[-1].numpy(), rtol=1e-5, atol=1e-5)


def test_convolution_and_pooling_freeze_with_unknown_image_sizes():
    """The window ops' shape rules leave unknown sizes unknown, so one graph serves every image size."""
    model = tp.Sequential([tp.layers.Conv2D(3, 3, padding="same"), tp.layers.MaxPooling2D(2), tp.layers.Conv2D(2, 3)])
    assert model.compute_output_shape((None, None, None, 1)) == (None, None, None, 2)
    model.build((None, 12, 10, 1))
    graph = tp.freeze(lambda x: model(x), tp.TensorSpec((None, None, None, 1)))
    assert graph.outputs[0].shape == (None, None, None, 2)
    for h, w in ((12, 10), (9, 15)):
        x = RNG.standard_normal((2, h, w, 1)).astype(np.float32)
        got = graph(x).numpy()
        assert got.shape == (2, h // 2 - 2, w // 2 - 2, 2)
        np.testing.assert_allclose(got, model(tp.tensor(x)).numpy(), rtol=1e-5, atol=1e-5)


def test_concat_shape_rule_fills_an_unknown_size_from_a_known_one():
    graph = tp.freeze(lambda a, b: tp.concat([a, b], axis=1), tp.TensorSpec((4, 3)), tp.TensorSpec((None, 2)))
    assert graph.outputs[0].shape == (4, 5)
    with pytest.raises(ValueError, match=r"concat: shapes .* differ outside axis 1"):
        tp.freeze(lambda a, b: tp.concat([a, b], axis=1), tp.TensorSpec((4, 3)), tp.TensorSpec((5, 2)))
