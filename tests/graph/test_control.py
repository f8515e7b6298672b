"""tp.cond and tp.while_loop, eagerly and in graphs, with gradients checked against
central finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp


def _finite_difference(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        grad[i] = (f(up) - f(down)) / (2 * eps)
    return grad


def piecewise(x, w):
    return tp.cond(tp.sum(x) > 0, lambda: tp.sum(tp.sin(x) * w), lambda: tp.sum(x * x * w))


def power_loop(x, n):
    _, y = tp.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * x + 0.5), (tp.tensor(0), tp.ones_like(x)))
    return tp.sum(y)


def _gradient_graph(f):
    def grads(x, *rest):
        with tp.GradientTape() as tape:
            tape.watch(x)
            y = f(x, *rest)
        return y, tape.gradient(y, x)

    return tp.function(grads)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_value_and_gradient_in_a_graph(sign):
    w = tp.tensor(np.array([0.5, -1.5, 2.0]))
    x = sign * np.array([0.3, 0.8, 0.4])
    frozen = _gradient_graph(lambda x: piecewise(x, w))
    value, grad = frozen(tp.tensor(x))
    assert any(n.op == "cond" for n in list(frozen.graphs.values())[0].nodes)
    eager_value = piecewise(tp.tensor(x), w).item()
    assert value.item() == pytest.approx(eager_value, rel=1e-12)
    expected = _finite_difference(lambda a: piecewise(tp.tensor(a), w).item(), x)
    np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-6, atol=1e-8)


def test_cond_with_a_known_predicate_is_plain_python():
    graph = tp.freeze(lambda x, flag: tp.cond(flag, lambda: x * 2.0, lambda: x), tp.TensorSpec((2,)), True)
    assert [n.op for n in graph.nodes] == ["multiply"]


@pytest.mark.parametrize("n", [0, 1, 4])
def test_while_loop_value_and_gradient_in_a_graph(n):
    x = np.array([0.7, -1.2, 0.3])
    frozen = _gradient_graph(power_loop)
    value, grad = frozen(tp.tensor(x), tp.tensor(n))
    assert frozen.trace_count == 1 or n == 0
    assert value.item() == pytest.approx(power_loop(tp.tensor(x), n).item(), rel=1e-12)
    expected = _finite_difference(lambda a: power_loop(tp.tensor(a), n).item(), x)
    np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-6, atol=1e-8)


def test_while_loop_eager_gradient_and_maximum_iterations():
    x = tp.tensor(np.array([1.5, 2.0]))
    with tp.GradientTape() as tape:
        tape.watch(x)
        _, y = tp.while_loop(
            lambda i, y: i < 10, lambda i, y: (i + 1, y * x), (tp.tensor(0), tp.ones_like(x)), maximum_iterations=3
        )
        total = tp.sum(y)
    np.testing.assert_allclose(y.numpy(), x.numpy() ** 3)
    np.testing.assert_allclose(tape.gradient(total, x).numpy(), 3 * x.numpy() ** 2)
    frozen = tp.function(
        lambda x: tp.while_loop(
            lambda i, y: i < 10, lambda i, y: (i + 1, y * x), (tp.tensor(0), tp.ones_like(x)), maximum_iterations=3
        )[1]
    )
    np.testing.assert_allclose(frozen(x).numpy(), x.numpy() ** 3)


def test_graph_control_flow_reads_variables():
    w = tp.Variable(np.array([2.0, 3.0]), name="w")
    f = tp.function(lambda x: tp.cond(tp.sum(x) > 0, lambda: x * w, lambda: x - w))
    np.testing.assert_array_equal(f(tp.tensor([1.0, 1.0])).numpy(), [2.0, 3.0])
    w.assign([4.0, 5.0])
    np.testing.assert_array_equal(f(tp.tensor([1.0, 1.0])).numpy(), [4.0, 5.0])
    np.testing.assert_array_equal(f(tp.tensor([-1.0, -1.0])).numpy(), [-5.0, -6.0])


def test_control_flow_errors():
    spec = tp.TensorSpec((2,))
    with pytest.raises(ValueError, match="output 0 is float32\\[2\\] in true_fn but int64\\[\\] in false_fn"):
        tp.freeze(lambda x: tp.cond(tp.sum(x) > 0, lambda: x, lambda: tp.tensor(1)), spec)
    with pytest.raises(ValueError, match="loop variable 1 enters as float32\\[2\\]"):
        tp.freeze(lambda x: tp.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, tp.sum(y)), (tp.tensor(0), x)), spec)
    v = tp.Variable([0.0, 0.0])
    with pytest.raises(tp.FreezeError, match="inside a tp.cond branch"):
        tp.freeze(lambda x: tp.cond(tp.sum(x) > 0, lambda: v.assign(x) * 1.0, lambda: x), spec)
    with pytest.raises(ValueError, match="the predicate must be a scalar"):
        tp.cond(tp.ones((2,)) > 0, lambda: 1, lambda: 2)
