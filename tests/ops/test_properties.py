"""Property tests: broadcasting binary ops and reductions against NumPy float64."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import tapeflow as tp

SETTINGS = settings(deadline=None, max_examples=50)
TOL = {"rtol": 1e-10, "atol": 1e-12}


def _reduce_to(g, shape):
    """Sum a broadcast gradient down to `shape` (NumPy reference)."""
    g = g.sum(axis=tuple(range(g.ndim - len(shape))))
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True).reshape(shape)


# Each entry: tapeflow op, NumPy forward, NumPy partials (d/dx, d/dy) as functions of x, y.
BINARY = {
    "add": (tp.add, np.add, lambda x, y: (np.ones_like(x * y), np.ones_like(x * y))),
    "subtract": (
        tp.subtract,
        np.subtract,
        lambda x, y: (np.ones_like(x * y), -np.ones_like(x * y)),
    ),
    "multiply": (tp.multiply, np.multiply, lambda x, y: (y + 0 * x, x + 0 * y)),
    "divide": (tp.divide, np.divide, lambda x, y: (1 / y + 0 * x, -x / y**2)),
    "maximum": (tp.maximum, np.maximum, lambda x, y: ((x >= y) * 1.0, (x < y) * 1.0)),
    "minimum": (tp.minimum, np.minimum, lambda x, y: ((x <= y) * 1.0, (x > y) * 1.0)),
    "pow": (tp.pow, np.power, lambda x, y: (y * x ** (y - 1), x**y * np.log(x))),
}


def _operands(name, shapes, seed):
    rng = np.random.default_rng(seed)
    x, y = (rng.standard_normal(s) for s in shapes)
    if name == "pow":  # positive base, moderate exponent
        x = rng.uniform(0.5, 2.0, shapes[0])
        y = rng.uniform(-2.0, 2.0, shapes[1])
    if name == "divide":  # keep the divisor away from zero
        y = np.sign(y + 1e-3) * (np.abs(y) + 0.5)
    return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)


@SETTINGS
@given(
    name=st.sampled_from(sorted(BINARY)),
    shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, min_side=1, max_side=4),
    seed=st.integers(0, 2**32 - 1),
)
def test_broadcasting_binary_op(name, shapes, seed):
    op, np_op, partials = BINARY[name]
    x, y = _operands(name, shapes.input_shapes, seed)
    tx, ty = tp.tensor(x), tp.tensor(y)
    with tp.GradientTape() as tape:
        tape.watch([tx, ty])
        out = op(tx, ty)
    want = np_op(x, y)
    assert out.shape == want.shape == shapes.result_shape
    assert out.dtype == tp.float64
    np.testing.assert_allclose(out.numpy(), want, **TOL)

    cot = np.random.default_rng(seed + 1).standard_normal(want.shape)
    gx, gy = tape.gradient(out, [tx, ty], output_gradients=tp.tensor(np.asarray(cot)))
    dx, dy = partials(x, y)
    assert gx.shape == x.shape and gy.shape == y.shape
    np.testing.assert_allclose(gx.numpy(), _reduce_to(cot * dx, x.shape), **TOL)
    np.testing.assert_allclose(gy.numpy(), _reduce_to(cot * dy, y.shape), **TOL)


@SETTINGS
@given(
    shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, min_side=1, max_side=4),
    scalar=st.floats(-3, 3, allow_nan=False),
    seed=st.integers(0, 2**32 - 1),
)
def test_operators_match_numpy_with_python_scalars(shapes, scalar, seed):
    x, y = _operands("add", shapes.input_shapes, seed)
    tx, ty = tp.tensor(x), tp.tensor(y)
    np.testing.assert_allclose(((tx + ty) * scalar - ty).numpy(), (x + y) * scalar - y, **TOL)
    np.testing.assert_allclose((scalar - tx * ty).numpy(), scalar - x * y, **TOL)
    assert (tx * scalar).dtype == tp.float64


# --------------------------------------------------------------- reductions
def _np_logsumexp(x, axis, keepdims):
    return np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))


REDUCTIONS = {
    "sum": (tp.sum, np.sum),
    "mean": (tp.mean, np.mean),
    "max": (tp.max, np.max),
    "min": (tp.min, np.min),
    "prod": (tp.prod, np.prod),
    "logsumexp": (tp.logsumexp, _np_logsumexp),
    "var": (tp.var, np.var),
}


@st.composite
def reduction_case(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=4)))
    ndim = len(shape)
    if draw(st.booleans()):
        axis = None
    else:
        axes = draw(st.lists(st.integers(0, max(ndim - 1, 0)), unique=True, max_size=ndim))
        signs = draw(st.lists(st.booleans(), min_size=len(axes), max_size=len(axes)))
        axes = tuple(a - ndim if neg else a for a, neg in zip(axes, signs, strict=True))
        axis = axes[0] if len(axes) == 1 and draw(st.booleans()) else axes
    return shape, axis


@SETTINGS
@given(
    name=st.sampled_from(sorted(REDUCTIONS)),
    case=reduction_case(),
    keepdims=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_reduction(name, case, keepdims, seed):
    shape, axis = case
    op, np_op = REDUCTIONS[name]
    x = np.random.default_rng(seed).standard_normal(shape)
    tx = tp.tensor(x)
    with tp.GradientTape() as tape:
        tape.watch(tx)
        out = op(tx, axis=axis, keepdims=keepdims)
    want = np.asarray(np_op(x, axis=axis, keepdims=keepdims))
    assert out.shape == want.shape
    assert out.dtype == tp.float64
    np.testing.assert_allclose(out.numpy(), want, **TOL)
    g = tape.gradient(out, tx)
    assert g.shape == x.shape and g.dtype == tp.float64
    if name in ("sum", "mean"):
        count = x.size / max(want.size, 1) if x.size else 1
        expected = np.ones_like(x) / (count if name == "mean" else 1)
        np.testing.assert_allclose(g.numpy(), expected, **TOL)


@SETTINGS
@given(case=reduction_case(), seed=st.integers(0, 2**32 - 1))
def test_argmax_matches_numpy(case, seed):
    shape, axis = case
    if not shape or not isinstance(axis, int):
        axis = None
    x = np.random.default_rng(seed).standard_normal(shape)
    np.testing.assert_array_equal(tp.argmax(tp.tensor(x), axis).numpy(), np.argmax(x, axis))
