"""GradientTape semantics, the functional API and custom gradients, against analytic values."""

import gc
import sys
import threading
import weakref

import numpy as np
import pytest

import tapeflow as tp


def assert_close(t, want, rtol=1e-6, atol=1e-7):
    assert t is not None
    np.testing.assert_allclose(np.asarray(t), want, rtol=rtol, atol=atol)


# ------------------------------------------------------------ watching
def test_trainable_variables_are_watched_automatically():
    w = tp.Variable([1.0, 2.0], name="w")
    frozen = tp.Variable([3.0, 4.0], trainable=False, name="frozen")
    c = tp.tensor([5.0, 6.0])
    with tp.GradientTape() as tape:
        y = tp.sum(w * frozen * c)
    assert tape.watched_variables() == [w]
    assert_close(tape.gradient(y, w), [15.0, 24.0])


def test_non_trainable_variable_alone_is_not_watched():
    frozen = tp.Variable([3.0, 4.0], trainable=False)
    with tp.GradientTape() as tape:
        y = tp.sum(frozen * frozen)
    assert tape.watched_variables() == []
    assert tape.gradient(y, frozen) is None


def test_unwatched_sources_next_to_watched_ones_get_none():
    w = tp.Variable([1.0, 2.0], name="w")
    frozen = tp.Variable([3.0, 4.0], trainable=False, name="frozen")
    c = tp.tensor([5.0, 6.0])
    with tp.GradientTape() as tape:
        y = tp.sum(w * frozen * c)
    gw, gf, gc_ = tape.gradient(y, [w, frozen, c])
    assert_close(gw, [15.0, 24.0])
    assert gf is None
    assert gc_ is None


def test_watch_makes_constants_and_frozen_variables_differentiable():
    frozen = tp.Variable([3.0], trainable=False)
    c = tp.tensor([2.0])
    with tp.GradientTape() as tape:
        tape.watch([frozen, c])
        y = frozen * frozen * c
    gf, gc_ = tape.gradient(y, [frozen, c])
    assert_close(gf, [12.0])
    assert_close(gc_, [9.0])


def test_watch_accessed_variables_false():
    w = tp.Variable([2.0])
    with tp.GradientTape(watch_accessed_variables=False) as tape:
        y = w * w
    assert tape.gradient(y, w) is None


def test_stop_recording():
    x = tp.tensor(3.0)
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = x * x
        with tape.stop_recording():
            z = x * 10.0
        total = y + z
    assert_close(tape.gradient(total, x), 6.0)


# ------------------------------------------------------- sources/targets
def test_list_tuple_and_dict_sources_keep_their_structure():
    a, b = tp.Variable(2.0, name="a"), tp.Variable(5.0, name="b")
    with tp.GradientTape(persistent=True) as tape:
        y = a * a * b
    as_list = tape.gradient(y, [a, b])
    as_tuple = tape.gradient(y, (b, a))
    as_dict = tape.gradient(y, {"first": a, "second": b})
    assert isinstance(as_list, list) and isinstance(as_tuple, tuple)
    assert isinstance(as_dict, dict) and list(as_dict) == ["first", "second"]
    assert_close(as_list[0], 20.0)
    assert_close(as_list[1], 4.0)
    assert_close(as_tuple[0], 4.0)
    assert_close(as_dict["first"], 20.0)
    assert_close(as_dict["second"], 4.0)


def test_unconnected_sources_none_or_zero():
    x, unused = tp.Variable([1.0, 2.0]), tp.Variable(np.ones((2, 3)))
    with tp.GradientTape(persistent=True) as tape:
        y = tp.sum(x * 2.0)
    assert tape.gradient(y, [x, unused])[1] is None
    gx, gu = tape.gradient(y, [x, unused], unconnected_gradients="zero")
    assert_close(gx, [2.0, 2.0])
    assert gu.shape == (2, 3) and gu.dtype == tp.float64
    assert_close(gu, np.zeros((2, 3)))


def test_integer_sources_get_none():
    i = tp.tensor([1, 2, 3])
    x = tp.tensor([1.0, 1.0, 1.0])
    with tp.GradientTape(persistent=True) as tape:
        tape.watch([i, x])
        y = tp.sum(tp.cast(i, "float32") * x)
    assert tape.gradient(y, i) is None
    assert tape.gradient(y, i, unconnected_gradients="zero") is None
    assert_close(tape.gradient(y, x), [1.0, 2.0, 3.0])


def test_non_scalar_target_gives_gradient_of_the_sum():
    x = tp.tensor(np.array([1.0, 2.0, 3.0]))
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = tp.stack([x * x, tp.sin(x)])  # shape (2, 3)
    assert_close(tape.gradient(y, x), 2 * np.array([1.0, 2.0, 3.0]) + np.cos([1.0, 2.0, 3.0]), rtol=1e-12)


def test_list_of_targets_sums_them():
    x = tp.tensor(2.0)
    with tp.GradientTape() as tape:
        tape.watch(x)
        ys = [x * x, x * x * x]
    assert_close(tape.gradient(ys, x), 4.0 + 12.0)


def test_output_gradients_weight_the_target():
    x = tp.tensor(np.array([1.0, 2.0, 3.0]))
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    g = tape.gradient(y, x, output_gradients=tp.tensor(np.array([1.0, -1.0, 0.5])))
    assert_close(g, [2.0, -4.0, 3.0])


def test_persistent_tape_can_be_reused():
    x = tp.tensor(3.0)
    with tp.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
        z = y * y
    assert_close(tape.gradient(y, x), 6.0)
    assert_close(tape.gradient(z, x), 4 * 27.0)
    assert_close(tape.gradient(z, y), 18.0)


def test_non_persistent_tape_cannot_be_reentered():
    tape = tp.GradientTape()
    x = tp.tensor(1.0)
    with tape:
        tape.watch(x)
        y = x * 2.0
    tape.gradient(y, x)
    with pytest.raises(tp.TapeError):
        with tape:
            pass


# ------------------------------------------------------------- higher order
def _second_derivative(f, x0):
    x = tp.tensor(np.asarray(x0, dtype=np.float64))
    with tp.GradientTape() as outer:
        outer.watch(x)
        with tp.GradientTape() as inner:
            inner.watch(x)
            y = f(x)
        dy = inner.gradient(y, x)
    return dy, outer.gradient(dy, x)


def test_second_derivative_of_cube():
    x0 = np.array([-1.5, 0.5, 2.0])
    d1, d2 = _second_derivative(lambda x: x**3, x0)
    assert_close(d1, 3 * x0**2, rtol=1e-12)
    assert_close(d2, 6 * x0, rtol=1e-12)


def test_second_derivative_of_tanh():
    x0 = np.array([-2.0, -0.3, 0.0, 0.7, 1.5])
    d1, d2 = _second_derivative(tp.tanh, x0)
    t = np.tanh(x0)
    assert_close(d1, 1 - t**2, rtol=1e-12)
    assert_close(d2, -2 * t * (1 - t**2), rtol=1e-12, atol=1e-15)


def test_third_derivative_of_sin():
    x = tp.tensor(np.array([0.3, 1.1]))
    with tp.GradientTape() as t3:
        t3.watch(x)
        with tp.GradientTape() as t2:
            t2.watch(x)
            with tp.GradientTape() as t1:
                t1.watch(x)
                y = tp.sin(x)
            d1 = t1.gradient(y, x)
        d2 = t2.gradient(d1, x)
    assert_close(t3.gradient(d2, x), -np.cos([0.3, 1.1]), rtol=1e-12)


# ---------------------------------------------------------- functional API
def test_grad_and_value_and_grad_argnums():
    def f(x, y):
        return tp.sum(x * x * y)

    x, y = tp.tensor(np.array([1.0, 2.0])), tp.tensor(np.array([3.0, 4.0]))
    assert_close(tp.grad(f)(x, y), 2 * np.array([1.0, 2.0]) * [3.0, 4.0])
    assert_close(tp.grad(f, argnums=1)(x, y), [1.0, 4.0])
    gx, gy = tp.grad(f, argnums=(0, 1))(x, y)
    assert_close(gx, [6.0, 16.0])
    assert_close(gy, [1.0, 4.0])
    value, (gy2, gx2) = tp.value_and_grad(f, argnums=(1, 0))(x, y)
    assert_close(value, 3.0 + 16.0)
    assert_close(gy2, [1.0, 4.0])
    assert_close(gx2, [6.0, 16.0])


def test_nested_grad_gives_higher_derivatives():
    x0 = np.array([0.5, 2.0])
    d2 = tp.grad(tp.grad(lambda x: tp.sum(x**3)))(tp.tensor(x0))
    assert_close(d2, 6 * x0, rtol=1e-12)
    d3 = tp.grad(tp.grad(tp.grad(lambda x: tp.sum(tp.exp(2.0 * x)))))(tp.tensor(x0))
    assert_close(d3, 8 * np.exp(2 * x0), rtol=1e-12)


def test_grad_accepts_python_and_numpy_inputs():
    assert_close(tp.grad(lambda x: tp.sum(tp.exp(x)))(np.array([0.0, 1.0])), np.exp([0.0, 1.0]), rtol=1e-12)
    assert_close(tp.grad(lambda x: x * x)(3.0), 6.0)


def test_grad_of_unused_argument_is_zero():
    g = tp.grad(lambda x, y: tp.sum(x) * 2.0, argnums=1)(tp.ones((2,)), tp.ones((3,)))
    assert_close(g, np.zeros(3))


def test_stop_gradient_blocks_flow():
    x = tp.tensor(3.0)
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = x * tp.stop_gradient(x * x)
    assert_close(tape.gradient(y, x), 9.0)  # d/dx of x * c with c = 9


# -------------------------------------------------------- custom gradient
def test_custom_gradient_replaces_the_vjp():
    @tp.custom_gradient
    def clipped_identity(x):
        return tp.identity(x), lambda g: tp.clip(g, -1.0, 1.0)

    x = tp.tensor(np.array([1.0, 2.0]))
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = clipped_identity(x) * tp.tensor(np.array([5.0, -0.5]))
    assert_close(y, [5.0, -1.0])
    assert_close(tape.gradient(y, x), [1.0, -0.5])


def test_custom_gradient_numerically_stable_log1pexp():
    @tp.custom_gradient
    def log1pexp(x):
        e = tp.exp(x)
        return tp.log(1.0 + e), lambda g: g * (1.0 - 1.0 / (1.0 + e))

    x = tp.tensor(np.array([0.0, 100.0]))
    g = tp.grad(lambda t: tp.sum(log1pexp(t)))(x)
    assert_close(g, [0.5, 1.0])


def test_custom_gradient_with_two_inputs():
    @tp.custom_gradient
    def mul(a, b):
        return a * b, lambda g: (g * b * 10.0, g * a * 100.0)

    ga, gb = tp.grad(lambda a, b: tp.sum(mul(a, b)), argnums=(0, 1))(tp.tensor([2.0]), tp.tensor([3.0]))
    assert_close(ga, [30.0])
    assert_close(gb, [200.0])


def test_custom_gradient_with_variables():
    w = tp.Variable([2.0, 3.0], name="w")

    @tp.custom_gradient
    def scaled(x):
        def grad_fn(g, variables=None):
            assert len(variables) == 1 and variables[0] is w
            return g * w * 2.0, [tp.sum(g * x, axis=0) * 3.0]

        return x * w, grad_fn

    x = tp.tensor([[1.0, 1.0], [4.0, 5.0]])
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = scaled(x)
    assert_close(y, [[2.0, 3.0], [8.0, 15.0]])
    gx, gw = tape.gradient(y, [x, w])
    assert_close(gx, [[4.0, 6.0], [4.0, 6.0]])
    assert_close(gw, [15.0, 18.0])


def test_custom_gradient_reading_variables_requires_variables_kwarg():
    w = tp.Variable([2.0])

    @tp.custom_gradient
    def f(x):
        return x * w, lambda g: g

    with pytest.raises(TypeError, match="custom_gradient"):
        f(tp.tensor([1.0]))


# ------------------------------------------------------------- broadcasting
def test_broadcast_inputs_get_gradients_of_their_own_shape():
    a = tp.Variable(np.ones((3, 1)), name="a")
    b = tp.Variable(np.arange(4.0), name="b")
    s = tp.Variable(np.array(2.0), name="s")
    with tp.GradientTape() as tape:
        y = (a + b) * s  # shape (3, 4)
    ga, gb, gs = tape.gradient(y, [a, b, s])
    assert ga.shape == (3, 1) and gb.shape == (4,) and gs.shape == ()
    assert_close(ga, np.full((3, 1), 8.0))
    assert_close(gb, np.full(4, 6.0))
    assert_close(gs, (1.0 + np.arange(4.0)).sum() * 3)


# --------------------------------------------------------- scale and order
def test_deep_chain_does_not_hit_the_recursion_limit():
    depth = 5000
    assert depth > sys.getrecursionlimit() // 2
    x = tp.tensor(np.array(0.5))
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = x
        for _ in range(depth):
            y = y * 1.0001 + 0.0
    assert_close(tape.gradient(y, x), 1.0001**depth, rtol=1e-9)


def test_gradient_is_deterministic():
    rng = np.random.default_rng(0)
    w = [tp.Variable(rng.standard_normal((4, 4)), name=f"w{i}") for i in range(4)]

    def run():
        with tp.GradientTape() as tape:
            h = tp.tensor(np.ones((2, 4)))
            for v in w:
                h = tp.tanh(h @ v) + h
            loss = tp.sum(h * h)
        return [g.numpy().copy() for g in tape.gradient(loss, w)]

    first = run()
    for _ in range(3):
        for a, b in zip(first, run(), strict=True):
            np.testing.assert_array_equal(a, b)


def test_variable_assigned_after_use_gives_gradient_at_old_value():
    w = tp.Variable(np.array([2.0, 3.0]), name="w")
    with tp.GradientTape() as tape:
        y = tp.sum(w * w * w)
        w.assign(np.array([10.0, 20.0]))
        w.assign_add(np.array([1.0, 1.0]))
    assert_close(tape.gradient(y, w), 3 * np.array([2.0, 3.0]) ** 2)
    assert_close(w, [11.0, 21.0])


def test_variable_assigned_between_uses():
    w = tp.Variable(np.array(2.0), name="w")
    with tp.GradientTape() as tape:
        a = w * w  # at w = 2: d/dw = 4
        w.assign(np.array(5.0))
        b = w * w  # at w = 5: d/dw = 10
        y = a + b
    assert_close(tape.gradient(y, w), 14.0)


def test_tape_ignores_ops_of_other_threads():
    w = tp.Variable([1.0, 2.0], name="w")
    other = []
    with tp.GradientTape() as tape:
        worker = threading.Thread(target=lambda: other.append(w * w))
        worker.start()
        worker.join()
        recorded = tape.watched_variables()
    assert recorded == []
    assert tape.gradient(other[0], w) is None


def test_non_persistent_tape_frees_its_records():
    x = tp.tensor(np.ones((100,)))
    with tp.GradientTape() as tape:
        tape.watch(x)
        hidden = tp.exp(x)
        y = tp.sum(hidden * 2.0)
    ref = weakref.ref(hidden)
    del hidden
    gc.collect()
    assert ref() is not None  # the tape still holds the intermediate
    assert_close(tape.gradient(y, x), 2 * np.e * np.ones(100))
    gc.collect()
    assert ref() is None
