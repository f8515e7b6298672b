"""`tp.ops.numpy`, Keras 3's `keras.ops.numpy` names: values against NumPy in float64,
integer inputs, gradients against finite differences, frozen graphs against eager runs,
values and result dtypes against Keras itself (torch backend), and clear errors."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.ops import numpy as tnp

NAMES = (
    "absolute abs add all any allclose amax amin angle arccos arccosh arcsin arcsinh arctan arctan2 arctanh argmax "
    "argmin average bartlett bincount bitwise_and bitwise_invert bitwise_left_shift bitwise_not bitwise_or "
    "bitwise_right_shift bitwise_xor blackman cbrt ceil clip conj conjugate copy corrcoef correlate cos cosh "
    "count_nonzero cumprod deg2rad divide divide_no_nan empty empty_like equal exp exp2 expm1 eye fabs floor "
    "floor_divide fmax fmin fmod full full_like gcd geomspace greater greater_equal hamming hanning heaviside "
    "histogram hypot i0 identity imag isclose isfinite isin isinf isnan isneginf isposinf isreal kaiser lcm ldexp "
    "left_shift less less_equal linspace log log10 log1p log2 logaddexp logaddexp2 logical_and logical_not "
    "logical_or logical_xor logspace max maximum mean median min minimum mod multiply nan_to_num nanargmax "
    "nanargmin nancumprod nancumsum nanmax nanmean nanmedian nanmin nanpercentile nanprod nanquantile nanstd "
    "nansum nanvar negative nextafter not_equal ones ones_like percentile power prod ptp quantile rad2deg real "
    "reciprocal right_shift round sign signbit sin sinc sinh sqrt square std subtract sum tan tanh trapezoid tri "
    "true_divide trunc var vdot inner outer kron cross dot tensordot einsum matmul vectorize zeros zeros_like "
    "ndim size"
).split()

RNG = np.random.default_rng(1234)


def f64(*shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, shape)


def t(a):
    return tp.tensor(np.asarray(a))


def assert_close(actual, expected, rtol=1e-10, atol=1e-12):
    actual = actual.numpy() if isinstance(actual, tp.Tensor) else np.asarray(actual)
    np.testing.assert_allclose(actual, np.asarray(expected, dtype=actual.dtype), rtol=rtol, atol=atol)


# --------------------------------------------------------------------- names
@pytest.mark.parametrize("name", NAMES)
def test_name_is_in_keras_numpy_and_ops(name):
    assert name in tnp.__all__
    assert callable(getattr(tnp, name))
    assert callable(getattr(tp.ops, name))
    assert callable(getattr(tp, name))


def test_every_name_is_a_keras_name():
    knp = _keras().ops.numpy
    assert [n for n in tnp.__all__ if not hasattr(knp, n)] == []


# ------------------------------------------------------- unary vs NumPy (float64)
UNARY = {
    "absolute": (np.abs, f64),
    "abs": (np.abs, f64),
    "negative": (np.negative, f64),
    "sign": (np.sign, f64),
    "square": (np.square, f64),
    "sqrt": (np.sqrt, lambda *s: f64(*s, low=0.1)),
    "cbrt": (np.cbrt, f64),
    "exp": (np.exp, f64),
    "exp2": (np.exp2, f64),
    "expm1": (np.expm1, f64),
    "log": (np.log, lambda *s: f64(*s, low=0.1)),
    "log2": (np.log2, lambda *s: f64(*s, low=0.1)),
    "log10": (np.log10, lambda *s: f64(*s, low=0.1)),
    "log1p": (np.log1p, lambda *s: f64(*s, low=-0.9)),
    "sin": (np.sin, f64),
    "cos": (np.cos, f64),
    "tan": (np.tan, lambda *s: f64(*s, low=-1.2, high=1.2)),
    "arcsin": (np.arcsin, lambda *s: f64(*s, low=-0.99, high=0.99)),
    "arccos": (np.arccos, lambda *s: f64(*s, low=-0.99, high=0.99)),
    "arctan": (np.arctan, f64),
    "sinh": (np.sinh, f64),
    "cosh": (np.cosh, f64),
    "tanh": (np.tanh, f64),
    "arcsinh": (np.arcsinh, f64),
    "arccosh": (np.arccosh, lambda *s: f64(*s, low=1.01, high=4.0)),
    "arctanh": (np.arctanh, lambda *s: f64(*s, low=-0.99, high=0.99)),
    "ceil": (np.ceil, f64),
    "floor": (np.floor, f64),
    "trunc": (np.trunc, f64),
    "round": (np.round, f64),
    "reciprocal": (np.reciprocal, lambda *s: f64(*s, low=0.2)),
    "deg2rad": (np.deg2rad, f64),
    "rad2deg": (np.rad2deg, f64),
    "sinc": (np.sinc, f64),
    "i0": (np.i0, f64),
    "fabs": (np.fabs, f64),
    "real": (np.real, f64),
    "imag": (np.imag, f64),
    "conj": (np.conj, f64),
    "conjugate": (np.conjugate, f64),
    "angle": (np.angle, f64),
    "copy": (np.copy, f64),
    "isreal": (np.isreal, f64),
    "signbit": (np.signbit, f64),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_numpy(name):
    fn, make = UNARY[name]
    x = make(3, 4)
    out = getattr(tnp, name)(t(x))
    expected = fn(x)
    assert out.shape == expected.shape
    if expected.dtype.kind == "b":
        assert out.dtype == tp.bool_
        np.testing.assert_array_equal(out.numpy(), expected)
    else:
        assert out.dtype == tp.float64
        assert_close(out, expected)


def test_specials_and_predicates():
    x = np.array([1.0, np.nan, np.inf, -np.inf, -0.0, -2.0])
    for name in ("isnan", "isinf", "isfinite", "isposinf", "isneginf", "signbit"):
        np.testing.assert_array_equal(getattr(tnp, name)(t(x)).numpy(), getattr(np, name)(x), err_msg=name)
    assert_close(tnp.nan_to_num(t(x)), np.nan_to_num(x))
    assert_close(
        tnp.nan_to_num(t(x), nan=5.0, posinf=1.0, neginf=-1.0), np.nan_to_num(x, nan=5.0, posinf=1.0, neginf=-1.0)
    )
    np.testing.assert_array_equal(tnp.angle(t(x)).numpy(), np.angle(x))
    np.testing.assert_array_equal(tnp.round(t(np.array([0.5, 1.5, 2.5, -0.5]))).numpy(), [0.0, 2.0, 2.0, -0.0])
    assert_close(tnp.round(t(np.array([1.234, -5.678])), 2), np.round([1.234, -5.678], 2))


# ----------------------------------------------------- binary vs NumPy (float64)
BINARY = {
    "add": (np.add, f64, f64),
    "subtract": (np.subtract, f64, f64),
    "multiply": (np.multiply, f64, f64),
    "divide": (np.divide, f64, lambda *s: f64(*s, low=0.5)),
    "true_divide": (np.true_divide, f64, lambda *s: f64(*s, low=0.5)),
    "power": (np.power, lambda *s: f64(*s, low=0.5), f64),
    "maximum": (np.maximum, f64, f64),
    "minimum": (np.minimum, f64, f64),
    "fmax": (np.fmax, f64, f64),
    "fmin": (np.fmin, f64, f64),
    "mod": (np.mod, f64, lambda *s: f64(*s, low=0.5)),
    "fmod": (np.fmod, f64, lambda *s: f64(*s, low=0.5)),
    "floor_divide": (np.floor_divide, f64, lambda *s: f64(*s, low=0.5)),
    "arctan2": (np.arctan2, f64, f64),
    "hypot": (np.hypot, f64, f64),
    "logaddexp": (np.logaddexp, f64, f64),
    "logaddexp2": (np.logaddexp2, f64, f64),
    "heaviside": (np.heaviside, f64, f64),
    "nextafter": (np.nextafter, f64, f64),
    "equal": (np.equal, f64, f64),
    "not_equal": (np.not_equal, f64, f64),
    "less": (np.less, f64, f64),
    "less_equal": (np.less_equal, f64, f64),
    "greater": (np.greater, f64, f64),
    "greater_equal": (np.greater_equal, f64, f64),
    "logical_and": (np.logical_and, lambda *s: np.round(f64(*s)), f64),
    "logical_or": (np.logical_or, lambda *s: np.round(f64(*s)), lambda *s: np.round(f64(*s))),
    "logical_xor": (np.logical_xor, lambda *s: np.round(f64(*s)), lambda *s: np.round(f64(*s))),
    "isclose": (np.isclose, f64, f64),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_matches_numpy_with_broadcasting(name):
    fn, make_a, make_b = BINARY[name]
    a, b = make_a(3, 4), make_b(4)
    if name == "isclose":
        b = a[0] + 1e-9 * RNG.standard_normal(4)
    expected = fn(a, b)
    out = getattr(tnp, name)(t(a), t(b))
    assert out.shape == expected.shape
    if expected.dtype.kind == "b":
        np.testing.assert_array_equal(out.numpy(), expected)
    else:
        assert_close(out, expected)


def test_nan_aware_extremes_and_divide_no_nan():
    a = np.array([1.0, np.nan, np.nan, 3.0])
    b = np.array([np.nan, 2.0, np.nan, 1.0])
    assert_close(tnp.fmax(t(a), t(b)), np.fmax(a, b))
    assert_close(tnp.fmin(t(a), t(b)), np.fmin(a, b))
    assert_close(tnp.divide_no_nan(t([1.0, 2.0, 0.0]), t([0.0, 4.0, 0.0])), [0.0, 0.5, 0.0])
    assert tnp.allclose(t([1.0, np.nan]), t([1.0, np.nan]), equal_nan=True).numpy().item() is True
    assert tnp.allclose(t([1.0, np.nan]), t([1.0, np.nan])).numpy().item() is False
    np.testing.assert_array_equal(
        tnp.isclose(t([np.inf, -np.inf, 1.0]), t([np.inf, np.inf, 1.0 + 1e-6])).numpy(),
        np.isclose([np.inf, -np.inf, 1.0], [np.inf, np.inf, 1.0 + 1e-6]),
    )
    assert_close(tnp.ldexp(t([1.5, -2.0]), t(np.array([3, -1]))), np.ldexp([1.5, -2.0], [3, -1]))


# ----------------------------------------------------------- integer inputs
INT_CASES = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "mod": np.mod,
    "fmod": np.fmod,
    "floor_divide": np.floor_divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "gcd": np.gcd,
    "lcm": np.lcm,
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
    "left_shift": np.left_shift,
    "right_shift": np.right_shift,
    "bitwise_left_shift": np.left_shift,
    "bitwise_right_shift": np.right_shift,
    "power": np.power,
}


@pytest.mark.parametrize("name", sorted(INT_CASES))
def test_integer_binary_ops_keep_integers(name):
    a = RNG.integers(-20, 20, (3, 4))
    b = RNG.integers(1, 5, (4,))
    out = getattr(tnp, name)(t(a), t(b))
    assert out.dtype == tp.int64
    np.testing.assert_array_equal(out.numpy(), INT_CASES[name](a, b))


def test_integer_unary_ops():
    a = RNG.integers(-20, 20, (3, 4))
    for name in ("absolute", "negative", "sign", "square", "trunc", "copy", "real", "conj"):
        out = getattr(tnp, name)(t(a))
        assert out.dtype == tp.int64, name
        np.testing.assert_array_equal(out.numpy(), getattr(np, name)(a), err_msg=name)
    np.testing.assert_array_equal(tnp.bitwise_invert(t(a)).numpy(), np.invert(a))
    np.testing.assert_array_equal(tnp.bitwise_not(t([True, False])).numpy(), [False, True])
    np.testing.assert_array_equal(tnp.round(t(a), -1).numpy(), np.round(a, -1))
    np.testing.assert_array_equal(tnp.logical_not(t(a)).numpy(), np.logical_not(a))
    np.testing.assert_array_equal(tnp.clip(t(a), x_max=3).numpy(), np.minimum(a, 3))
    np.testing.assert_array_equal(tnp.zeros_like(t(a)).numpy(), np.zeros_like(a))
    np.testing.assert_array_equal(tnp.ones_like(t(a), "float32").numpy(), np.ones(a.shape, "float32"))
    np.testing.assert_array_equal(tnp.full_like(t(a), 7).numpy(), np.full_like(a, 7))
    np.testing.assert_array_equal(tnp.nan_to_num(t(a)).numpy(), a)
    np.testing.assert_array_equal(tnp.isnan(t(a)).numpy(), np.zeros(a.shape, bool))
    for name in ("i0", "cbrt", "deg2rad", "rad2deg"):  # Keras reads int64 as float64 for these
        assert getattr(tnp, name)(t(np.array([1, 2]))).dtype == tp.float64, name
        assert getattr(tnp, name)(t(np.array([1, 2], "int32"))).dtype == tp.float32, name
    for name in ("sqrt", "exp", "sin", "floor", "ceil", "reciprocal", "fabs", "log1p", "arctan"):
        out = getattr(tnp, name)(t(np.array([1, 2, 3])))
        assert out.dtype == tp.float32, name
        assert_close(out, getattr(np, name)(np.array([1.0, 2.0, 3.0])), rtol=1e-6, atol=1e-6)
    assert tnp.divide(t(np.array([1, 2])), 2).dtype == tp.float32
    assert tnp.mean(t(np.array([1, 2]))).dtype == tp.float32
    assert tnp.square(t([True, False])).dtype == tp.int32


# ------------------------------------------------------------- reductions
REDUCTIONS = {
    "sum": np.sum,
    "prod": np.prod,
    "mean": np.mean,
    "var": np.var,
    "std": np.std,
    "max": np.max,
    "min": np.min,
    "amax": np.amax,
    "amin": np.amin,
    "ptp": np.ptp,
    "median": np.median,
    "nansum": np.nansum,
    "nanprod": np.nanprod,
    "nanmean": np.nanmean,
    "nanvar": np.nanvar,
    "nanstd": np.nanstd,
    "nanmax": np.nanmax,
    "nanmin": np.nanmin,
    "nanmedian": np.nanmedian,
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize(("axis", "keepdims"), [(None, False), (1, False), ((0, 2), True), (-1, True)])
def test_reductions_match_numpy(name, axis, keepdims):
    x = f64(3, 4, 5)
    if name.startswith("nan"):
        x[0, 1, 2] = x[2, 3, 0] = x[1, 0, 4] = np.nan
    out = getattr(tnp, name)(t(x), axis=axis, keepdims=keepdims)
    assert_close(out, REDUCTIONS[name](x, axis=axis, keepdims=keepdims), rtol=1e-9)


@pytest.mark.parametrize("name", ["argmax", "argmin", "nanargmax", "nanargmin"])
@pytest.mark.parametrize(("axis", "keepdims"), [(None, False), (1, False), (0, True), (None, True)])
def test_arg_reductions(name, axis, keepdims):
    x = f64(3, 4)
    if name.startswith("nan"):
        x[0, 1] = x[2, 2] = np.nan
    out = getattr(tnp, name)(t(x), axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(out.numpy(), getattr(np, name)(x, axis=axis, keepdims=keepdims))


def test_logical_reductions_and_counts():
    x = np.array([[1, 0, 2], [0, 0, 0]])
    for axis in (None, 0, 1, (0, 1)):
        for name in ("all", "any"):
            out = getattr(tnp, name)(t(x), axis=axis)
            np.testing.assert_array_equal(out.numpy(), getattr(np, name)(x, axis=axis))
        out = tnp.count_nonzero(t(x), axis=axis)
        assert out.dtype == tp.int32
        np.testing.assert_array_equal(out.numpy(), np.count_nonzero(x, axis=axis))
    assert tnp.all(t(np.zeros((0,)))).numpy().item() is True
    assert tnp.any(t(np.zeros((0,)))).numpy().item() is False
    np.testing.assert_array_equal(tnp.max(t([True, False])).numpy(), True)
    assert_close(tnp.max(t(f64(3)), initial=5.0), 5.0)
    assert_close(tnp.min(t(np.zeros((0,))), initial=1.0), 1.0)
    assert tnp.prod(t(np.array([2, 3])), dtype="float64").dtype == tp.float64


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("axis", [None, 0, (0, 2)])
def test_quantiles_and_percentiles(method, axis):
    x = f64(4, 5, 3)
    q = [0.0, 0.3, 0.5, 1.0]
    assert_close(tnp.quantile(t(x), q, axis=axis, method=method), np.quantile(x, q, axis=axis, method=method))
    assert_close(
        tnp.quantile(t(x), 0.7, axis=axis, method=method, keepdims=True),
        np.quantile(x, 0.7, axis=axis, method=method, keepdims=True),
    )
    assert_close(
        tnp.percentile(t(x), [10, 90], axis=axis, method=method), np.percentile(x, [10, 90], axis=axis, method=method)
    )
    x[1, 2, 0] = x[0, 0, 0] = np.nan
    assert_close(tnp.nanquantile(t(x), q, axis=axis, method=method), np.nanquantile(x, q, axis=axis, method=method))
    assert_close(
        tnp.nanpercentile(t(x), 25, axis=axis, method=method), np.nanpercentile(x, 25, axis=axis, method=method)
    )


def test_cumulative_ops():
    x = f64(3, 4)
    assert_close(tnp.cumprod(t(x), axis=1), np.cumprod(x, axis=1))
    assert_close(tnp.cumprod(t(x)), np.cumprod(x))
    x[0, 1] = x[2, 3] = np.nan
    assert_close(tnp.nancumsum(t(x), axis=0), np.nancumsum(x, axis=0))
    assert_close(tnp.nancumprod(t(x), axis=1), np.nancumprod(x, axis=1))
    np.testing.assert_array_equal(tnp.cumprod(t(np.array([[1, 2], [3, 4]])), axis=0).numpy(), [[1, 2], [3, 8]])


def test_statistics():
    x = f64(3, 6)
    assert_close(tnp.corrcoef(t(x)), np.corrcoef(x))
    w = RNG.uniform(0.1, 1.0, (3, 6))
    assert_close(tnp.average(t(x), axis=1, weights=t(w)), np.average(x, axis=1, weights=w))
    assert_close(tnp.average(t(x), axis=0, weights=t(w[:, 0])), np.average(x, axis=0, weights=w[:, 0]))
    assert_close(tnp.average(t(x)), np.average(x))
    for mode in ("valid", "same", "full"):
        for a, v in ((f64(7), f64(3)), (f64(3), f64(5)), (f64(4), f64(4))):
            assert_close(tnp.correlate(t(a), t(v), mode=mode), np.correlate(a, v, mode=mode))
    y, xs = f64(3, 5), np.sort(f64(5))
    assert_close(tnp.trapezoid(t(y)), np.trapezoid(y))
    assert_close(tnp.trapezoid(t(y), dx=0.5, axis=0), np.trapezoid(y, dx=0.5, axis=0))
    assert_close(tnp.trapezoid(t(y), t(xs)), np.trapezoid(y, xs))
    data = f64(50)
    for kwargs in ({}, {"bins": 4}, {"bins": 3, "range": (-1.0, 1.0)}):
        counts, edges = tnp.histogram(t(data), **kwargs)
        np_counts, np_edges = np.histogram(data, **kwargs)
        np.testing.assert_array_equal(counts.numpy(), np_counts)
        assert_close(edges, np_edges, rtol=1e-6, atol=1e-6)
    ids = np.array([0, 3, 3, 1, 5])
    np.testing.assert_array_equal(tnp.bincount(t(ids)).numpy(), np.bincount(ids))
    np.testing.assert_array_equal(tnp.bincount(t(ids), minlength=9).numpy(), np.bincount(ids, minlength=9))
    wts = f64(5)
    assert_close(tnp.bincount(t(ids), weights=t(wts)), np.bincount(ids, weights=wts))
    rows = np.array([[0, 1, 1], [2, 2, 2]])
    np.testing.assert_array_equal(tnp.bincount(t(rows)).numpy(), [[1, 2, 0], [0, 0, 3]])
    np.testing.assert_array_equal(tnp.isin(t([1, 2, 3, 4]), t([2, 4, 9])).numpy(), [False, True, False, True])
    np.testing.assert_array_equal(tnp.isin(t([1, 2]), t([2]), invert=True).numpy(), [True, False])


# -------------------------------------------------------------- products
def test_products_match_numpy():
    a, b = f64(3, 4), f64(4, 5)
    assert_close(tnp.dot(t(a), t(b)), np.dot(a, b))
    c = f64(2, 3, 4)
    assert_close(tnp.dot(t(c), t(b)), np.dot(c, b))
    assert_close(tnp.dot(t(a[0]), t(b)), np.dot(a[0], b))
    assert_close(tnp.dot(t(a), 2.0), a * 2.0)
    d = f64(2, 4)
    assert_close(tnp.inner(t(a), t(d)), np.inner(a, d))
    assert_close(tnp.vdot(t(a), t(a)), np.vdot(a, a))
    assert_close(tnp.outer(t(a[0]), t(b[0])), np.outer(a[0], b[0]))
    assert_close(tnp.kron(t(a), t(b[:2, :2])), np.kron(a, b[:2, :2]))
    assert_close(tnp.kron(t(a[0]), t(b)), np.kron(a[0], b))
    p, q = f64(2, 3, 4), f64(3, 4, 5)
    assert_close(tnp.tensordot(t(p), t(q)), np.tensordot(p, q))
    assert_close(tnp.tensordot(t(p), t(q), axes=([1], [0])), np.tensordot(p, q, axes=([1], [0])))
    assert_close(tnp.tensordot(t(p), t(q), axes=0), np.tensordot(p, q, axes=0))
    u, v = f64(4, 3), f64(4, 3)
    assert_close(tnp.cross(t(u), t(v)), np.cross(u, v))
    assert_close(tnp.cross(t(u.T), t(v.T), axis=0), np.cross(u.T, v.T, axis=0))
    assert_close(tnp.cross(t(u[:, :2]), t(v)), np.cross(u[:, :2], v))
    assert_close(tnp.cross(t(u[:, :2]), t(v[:, :2])), u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0])
    for spec, shapes in [
        ("ij,jk->ik", [(2, 3), (3, 4)]),
        ("ij,jk", [(2, 3), (3, 4)]),
        ("...ij,...jk->...ik", [(2, 2, 3), (3, 4)]),
        ("bij,bj->bi", [(2, 3, 4), (2, 4)]),
        ("ii->i", [(3, 3)]),
        ("ij->", [(2, 3)]),
        ("i,i", [(3,), (3,)]),
        ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 2)]),
    ]:
        ops = [f64(*s) for s in shapes]
        assert_close(tnp.einsum(spec, *[t(o) for o in ops]), np.einsum(spec, *ops))
    assert_close(tnp.matmul(t(p), t(q[0])), np.matmul(p, q[0]))
    ia, ib = RNG.integers(-5, 5, (2, 3)), RNG.integers(-5, 5, (3,))
    out = tnp.matmul(t(ia), t(ib))
    assert out.dtype == tp.int64
    np.testing.assert_array_equal(out.numpy(), ia @ ib)
    np.testing.assert_array_equal(tnp.dot(t(ia), t(ib)).numpy(), ia @ ib)


def test_vectorize():
    def norm(v):
        return tp.sqrt(tp.sum(v * v))

    x = f64(2, 3, 4)
    assert_close(tnp.vectorize(norm, signature="(n)->()")(t(x)), np.sqrt((x * x).sum(-1)))
    assert_close(tnp.vectorize(lambda a, b: a * b + 1.0)(t(x), t(x[0])), x * x[0] + 1.0)
    scale = tnp.vectorize(lambda v, k: v * k, excluded={1}, signature="(n)->(n)")
    assert_close(scale(t(x), 3.0), x * 3.0)


# --------------------------------------------------------------- creation
def test_creation_matches_numpy():
    assert_close(tnp.linspace(0.0, 1.0, 7), np.linspace(0.0, 1.0, 7), rtol=1e-6)
    assert_close(tnp.linspace(2.0, 3.0, 5, endpoint=False), np.linspace(2.0, 3.0, 5, endpoint=False), rtol=1e-6)
    values, step = tnp.linspace(0.0, 2.0, 5, retstep=True)
    assert step == pytest.approx(0.5)
    start, stop = np.array([0.0, 1.0]), np.array([1.0, 3.0])
    for axis in (0, 1, -1):
        assert_close(
            tnp.linspace(t(start), t(stop), 4, axis=axis, dtype="float64"), np.linspace(start, stop, 4, axis=axis)
        )
    assert_close(tnp.logspace(0.0, 3.0, 4), np.logspace(0.0, 3.0, 4), rtol=1e-6)
    assert_close(tnp.logspace(0.0, 3.0, 4, base=2), np.logspace(0.0, 3.0, 4, base=2), rtol=1e-6)
    assert_close(tnp.geomspace(1.0, 1000.0, 4), np.geomspace(1.0, 1000.0, 4), rtol=1e-6)
    assert_close(tnp.geomspace(-1.0, -16.0, 5), np.geomspace(-1.0, -16.0, 5), rtol=1e-6)
    assert_close(tnp.geomspace(t(2.0), t(32.0), 5, dtype="float64"), np.geomspace(2.0, 32.0, 5), rtol=1e-6)
    assert_close(tnp.eye(3, 4, k=1), np.eye(3, 4, k=1))
    assert_close(tnp.eye(3, k=-1, dtype="float64"), np.eye(3, k=-1))
    assert_close(tnp.identity(3), np.identity(3))
    assert_close(tnp.tri(3, 4, k=1), np.tri(3, 4, k=1))
    for name in ("bartlett", "blackman", "hamming", "hanning"):
        assert_close(getattr(tnp, name)(7), getattr(np, name)(7), rtol=1e-6, atol=1e-7)
    assert_close(tnp.kaiser(7, 2.5), np.kaiser(7, 2.5), rtol=1e-6, atol=1e-7)
    assert tnp.full((2,), 3).dtype == tp.float32
    assert tnp.full_like(t(np.array([1, 2])), 2).dtype == tp.int64
    assert tnp.zeros((2, 1)).dtype == tnp.ones((2,)).dtype == tnp.empty((3,)).dtype == tp.float32
    assert tnp.empty_like(t(np.array([1, 2]))).shape == (2,)
    assert tnp.ndim(t(f64(2, 3))) == 2
    assert tnp.size(t(f64(2, 3))).numpy().item() == 6


def test_identity_keeps_both_meanings():
    x = tp.tensor([1.0, 2.0])
    assert tp.identity(x).numpy().tolist() == [1.0, 2.0]
    assert tp.identity(2).numpy().tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert tp.ops.clip(x, clip_value_min=1.5, clip_value_max=3.0).numpy().tolist() == [1.5, 2.0]
    assert tp.ops.clip(x, x_min=0.0, x_max=1.0).numpy().tolist() == [1.0, 1.0]
    assert tp.ops.add(x=x, y=1.0).numpy().tolist() == [2.0, 3.0]


# ------------------------------------------------------------- gradients
def _numeric_gradient(f, arrays, i, eps=1e-6):
    base = [np.array(a, dtype=np.float64) for a in arrays]
    grad = np.zeros_like(base[i])
    for idx in np.ndindex(base[i].shape):
        plus = [a.copy() for a in base]
        minus = [a.copy() for a in base]
        plus[i][idx] += eps
        minus[i][idx] -= eps
        grad[idx] = (f(*[tp.tensor(a) for a in plus]) - f(*[tp.tensor(a) for a in minus])) / (2 * eps)
    return grad


def check_gradients(fn, *arrays, tol=1e-6):
    out = fn(*[tp.tensor(np.asarray(a, dtype=np.float64)) for a in arrays])
    weights = RNG.standard_normal(out.shape)

    def scalar(*ts):
        return float(np.sum(fn(*ts).numpy() * weights))

    xs = [tp.tensor(np.asarray(a, dtype=np.float64)) for a in arrays]
    with tp.GradientTape() as tape:
        for x in xs:
            tape.watch(x)
        loss = tp.sum(fn(*xs) * tp.tensor(weights))
    grads = tape.gradient(loss, xs)
    for i, g in enumerate(grads):
        expected = _numeric_gradient(scalar, arrays, i)
        got = np.zeros_like(expected) if g is None else g.numpy()
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol, err_msg=f"input {i}")


GRADIENTS = {
    "exp2": (lambda x: tnp.exp2(x), [f64(3, 4)]),
    "log2": (lambda x: tnp.log2(x), [f64(3, 4, low=0.5)]),
    "log10": (lambda x: tnp.log10(x), [f64(3, 4, low=0.5)]),
    "arcsin": (lambda x: tnp.arcsin(x), [f64(3, 4, low=-0.9, high=0.9)]),
    "arccosh": (lambda x: tnp.arccosh(x), [f64(3, 4, low=1.2, high=3.0)]),
    "i0": (lambda x: tnp.i0(x), [np.array([0.0, 0.5, -1.5, 2.0])]),
    "sinc": (lambda x: tnp.sinc(x), [np.array([0.3, -1.2, 0.5, 2.2])]),
    "deg2rad": (lambda x: tnp.deg2rad(x), [f64(3)]),
    "hypot": (lambda a, b: tnp.hypot(a, b), [f64(3, 4), f64(4)]),
    "arctan2": (lambda a, b: tnp.arctan2(a, b), [f64(3, 4), f64(3, 4)]),
    "logaddexp": (lambda a, b: tnp.logaddexp(a, b), [f64(3, 4), f64(4)]),
    "logaddexp-ties": (lambda a, b: tnp.logaddexp(a, b), [np.array([1.0, 2.0]), np.array([1.0, 2.0])]),
    "logaddexp2": (lambda a, b: tnp.logaddexp2(a, b), [f64(3, 4), f64(3, 4)]),
    "fmax": (lambda a, b: tnp.fmax(a, b), [f64(3, 4), f64(3, 4)]),
    "mod": (lambda a, b: tnp.mod(a, b), [f64(5), f64(5, low=0.5)]),
    "divide_no_nan": (lambda a, b: tnp.divide_no_nan(a, b), [f64(4), np.array([0.4, 1.5, -2.0, 0.7])]),
    "ldexp": (lambda a: tnp.ldexp(a, tp.tensor(np.array([1, -2, 3]))), [f64(3)]),
    "clip": (lambda a: tnp.clip(a, -0.55, 0.55), [np.array([-1.0, -0.3, 0.2, 0.9])]),
    "max-initial": (lambda a: tnp.max(a, axis=1, initial=0.1), [np.array([[0.5, -0.2], [-0.3, -0.7]])]),
    "ptp": (lambda a: tnp.ptp(a, axis=0), [f64(3, 4)]),
    "nanmean": (lambda a: tnp.nanmean(a, axis=1), [np.where(np.eye(3, 4) > 0, np.nan, f64(3, 4))]),
    "nanstd": (lambda a: tnp.nanstd(a, axis=1), [np.where(np.eye(3, 4) > 0, np.nan, f64(3, 4))]),
    "nanmax": (lambda a: tnp.nanmax(a, axis=1), [np.where(np.eye(2, 3) > 0, np.nan, f64(2, 3))]),
    "median": (lambda a: tnp.median(a, axis=1), [f64(3, 4)]),
    "quantile": (lambda a: tnp.quantile(a, [0.2, 0.9], axis=0), [f64(5, 2)]),
    "nanpercentile": (lambda a: tnp.nanpercentile(a, 40), [np.array([0.3, np.nan, -1.2, 0.8])]),
    "average": (lambda a, w: tnp.average(a, axis=1, weights=w), [f64(3, 4), f64(3, 4, low=0.5)]),
    "var": (lambda a: tnp.var(a, axis=0), [f64(3, 4)]),
    "corrcoef": (lambda a: tnp.corrcoef(a), [f64(2, 5)]),
    "correlate": (lambda a, v: tnp.correlate(a, v, mode="full"), [f64(5), f64(3)]),
    "trapezoid": (lambda y, x: tnp.trapezoid(y, x), [f64(3, 4), np.array([0.0, 0.5, 1.5, 3.0])]),
    "cumprod": (lambda a: tnp.cumprod(a, axis=1), [np.array([[1.5, 0.0, -2.0, 0.5], [0.7, 1.2, 0.0, 0.0]])]),
    "nancumsum": (lambda a: tnp.nancumsum(a, axis=0), [f64(3, 2)]),
    "cross": (lambda a, b: tnp.cross(a, b), [f64(2, 3), f64(2, 3)]),
    "kron": (lambda a, b: tnp.kron(a, b), [f64(2, 2), f64(3, 2)]),
    "dot": (lambda a, b: tnp.dot(a, b), [f64(2, 3, 4), f64(4, 2)]),
    "tensordot": (lambda a, b: tnp.tensordot(a, b, axes=([0, 2], [1, 0])), [f64(2, 3, 4), f64(4, 2, 2)]),
    "inner": (lambda a, b: tnp.inner(a, b), [f64(2, 3), f64(4, 3)]),
    "vdot": (lambda a, b: tnp.vdot(a, b), [f64(2, 3), f64(3, 2)]),
    "outer": (lambda a, b: tnp.outer(a, b), [f64(3), f64(2, 2)]),
    "einsum": (lambda a, b: tnp.einsum("...ij,jk->...k", a, b), [f64(2, 2, 3), f64(3, 2)]),
    "einsum-unshared": (lambda a, b: tnp.einsum("ij,k->k", a, b), [f64(2, 3), f64(4)]),
    "linspace-tensor-bounds": (lambda s, e: tnp.linspace(s, e, 4, axis=1, dtype="float64"), [f64(2), f64(2)]),
    "angle": (lambda a: tnp.angle(a), [np.array([0.5, -1.5])]),
    "heaviside": (lambda b: tnp.heaviside(tp.tensor(np.array([-1.0, 0.0, 2.0])), b), [f64(3)]),
}


@pytest.mark.parametrize("name", sorted(GRADIENTS))
def test_gradients_match_finite_differences(name):
    fn, arrays = GRADIENTS[name]
    check_gradients(fn, *arrays)


def test_second_order_of_a_new_primitive():
    x = tp.tensor(np.array([0.3, -0.4, 0.8]))
    with tp.GradientTape() as outer:
        outer.watch(x)
        with tp.GradientTape() as inner:
            inner.watch(x)
            y = tp.sum(tnp.arctan(x))
        g = inner.gradient(y, x)
        gg = tp.sum(g)
    h = outer.gradient(gg, x).numpy()
    v = x.numpy()
    np.testing.assert_allclose(h, -2.0 * v / (1.0 + v * v) ** 2, rtol=1e-10)


# ------------------------------------------------------- frozen == eager
FROZEN = {
    "logaddexp": (lambda a, b: tnp.logaddexp(a, b), [f64(3, 4), f64(3, 4)]),
    "median": (lambda a: tnp.median(a, axis=1), [f64(3, 5)]),
    "quantile": (lambda a: tnp.quantile(a, [0.1, 0.6], axis=0, method="midpoint"), [f64(4, 3)]),
    "nanvar": (lambda a: tnp.nanvar(a, axis=0), [np.where(f64(4, 3) > 1.0, np.nan, f64(4, 3))]),
    "einsum": (lambda a, b: tnp.einsum("ij,kj->ik", a, b), [f64(2, 3), f64(4, 3)]),
    "cross": (lambda a, b: tnp.cross(a, b), [f64(4, 3), f64(4, 3)]),
    "cumprod": (lambda a: tnp.cumprod(a, axis=0), [f64(3, 2)]),
    "isclose": (lambda a, b: tnp.isclose(a, b), [f64(3), f64(3)]),
    "histogram": (lambda a: tnp.histogram(a, bins=4)[0], [f64(20)]),
    "size-of-dynamic": (lambda a: tnp.size(a), [f64(3, 2)]),
}


@pytest.mark.parametrize("name", sorted(FROZEN))
def test_frozen_equals_eager(name):
    fn, arrays = FROZEN[name]
    eager = fn(*[tp.tensor(a) for a in arrays]).numpy()
    specs = [tp.TensorSpec((None,) + np.shape(a)[1:], "float64") for a in arrays]
    graph = tp.freeze(fn, *specs)
    frozen = graph(*[np.asarray(a) for a in arrays])
    frozen = frozen.numpy() if isinstance(frozen, tp.Tensor) else np.asarray(frozen)
    np.testing.assert_allclose(frozen, eager, rtol=1e-12, equal_nan=True)


def test_frozen_gradient_of_quantile_equals_eager():
    x = f64(4, 3)

    def grad(a):
        with tp.GradientTape() as tape:
            tape.watch(a)
            y = tp.sum(tnp.quantile(a, 0.3, axis=0) * tp.tensor(np.array([1.0, -2.0, 0.5])))
        return tape.gradient(y, a)

    eager = grad(tp.tensor(x)).numpy()
    frozen = tp.freeze(grad, tp.TensorSpec((4, 3), "float64"))(x)
    np.testing.assert_allclose(np.asarray(frozen.numpy() if isinstance(frozen, tp.Tensor) else frozen), eager)


# ------------------------------------------------------------ bad input
BAD = [
    ("axis out of range", lambda: tnp.sum(tp.ones((2, 3)), axis=2), ValueError, "axis 2"),
    ("quantile axis", lambda: tnp.quantile(tp.ones((2, 3)), 0.5, axis=5), ValueError, "axis 5"),
    ("quantile q range", lambda: tnp.quantile(tp.ones((3,)), 1.5), ValueError, r"\[0, 1\]"),
    ("percentile q range", lambda: tnp.percentile(tp.ones((3,)), 120), ValueError, r"\[0, 1\]"),
    ("quantile method", lambda: tnp.quantile(tp.ones((3,)), 0.5, method="cubic"), ValueError, "method"),
    ("mismatched shapes", lambda: tnp.arctan2(tp.ones((2, 3)), tp.ones((4,))), ValueError, "broadcast"),
    ("logaddexp shapes", lambda: tnp.logaddexp(tp.ones((2, 3)), tp.ones((2,))), ValueError, "logaddexp"),
    ("bitwise on floats", lambda: tnp.bitwise_and(tp.ones((2,)), tp.ones((2,))), TypeError, "bitwise_and"),
    ("shift on bools", lambda: tnp.left_shift(tp.tensor([True]), tp.tensor([True])), TypeError, "integer"),
    ("gcd of floats", lambda: tnp.gcd(tp.ones((2,)), 2.0), TypeError, "gcd"),
    ("ldexp float exponent", lambda: tnp.ldexp(tp.ones((2,)), tp.ones((2,))), TypeError, "integer"),
    ("einsum operands", lambda: tnp.einsum("ij,jk->ik", tp.ones((2, 3))), ValueError, "einsum"),
    ("einsum sizes", lambda: tnp.einsum("ij,jk->ik", tp.ones((2, 3)), tp.ones((4, 2))), ValueError, "'j'"),
    ("einsum output", lambda: tnp.einsum("ij->k", tp.ones((2, 3))), ValueError, "'k'"),
    ("einsum kwargs", lambda: tnp.einsum("ij->", tp.ones((2, 3)), optimize="greedy"), TypeError, "optimize"),
    ("tensordot sizes", lambda: tnp.tensordot(tp.ones((2, 3)), tp.ones((4, 2)), axes=1), ValueError, "tensordot"),
    ("cross size", lambda: tnp.cross(tp.ones((4,)), tp.ones((3,))), ValueError, "2 or 3"),
    ("correlate rank", lambda: tnp.correlate(tp.ones((2, 2)), tp.ones((2,))), ValueError, "1-D"),
    ("correlate mode", lambda: tnp.correlate(tp.ones((3,)), tp.ones((2,)), mode="wide"), ValueError, "mode"),
    ("bincount negative", lambda: tnp.bincount(tp.tensor([1, -1])), ValueError, "non-negative"),
    ("bincount float", lambda: tnp.bincount(tp.ones((2,))), TypeError, "integer"),
    ("bincount sparse", lambda: tnp.bincount(tp.tensor([1]), sparse=True), ValueError, "sparse"),
    ("histogram rank", lambda: tnp.histogram(tp.ones((2, 2))), ValueError, "1-D"),
    ("histogram range", lambda: tnp.histogram(tp.ones((2,)), range=(2.0, 1.0)), ValueError, "range"),
    ("average weights", lambda: tnp.average(tp.ones((2, 3)), axis=1, weights=tp.ones((2,))), ValueError, "weights"),
    ("max of empty", lambda: tnp.max(tp.ones((0, 2)), axis=0), ValueError, "initial"),
    ("argmax of empty", lambda: tnp.argmax(tp.ones((0,))), ValueError, "empty"),
    ("round bool", lambda: tnp.round(tp.tensor([True])), TypeError, "bool"),
    ("mod of bools", lambda: tnp.mod(tp.tensor([True]), tp.tensor([True])), TypeError, "mod"),
    ("clip both names", lambda: tnp.clip(tp.ones((2,)), 0, 1, clip_value_min=0), TypeError, "x_min"),
    ("eye negative", lambda: tnp.eye(-1), ValueError, "eye"),
    ("identity dtype on tensor", lambda: tnp.identity(tp.ones((2,)), dtype="float32"), TypeError, "identity"),
    ("vectorize signature", lambda: tnp.vectorize(lambda v: v, signature="n->()"), ValueError, "signature"),
    ("geomspace zero", lambda: tnp.geomspace(0.0, 1.0, 3), ValueError, "nonzero"),
    ("corrcoef rank", lambda: tnp.corrcoef(tp.ones((2, 2, 2))), ValueError, "corrcoef"),
    ("matmul scalar ints", lambda: tnp.matmul(tp.tensor(2), tp.tensor([1, 2])), ValueError, "scalars"),
]


@pytest.mark.parametrize(("label", "fn", "error", "match"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_raises_clear_errors(label, fn, error, match):
    with pytest.raises(error, match=match):
        fn()


# ------------------------------------------------------- against Keras (torch)
def _keras():
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":
        pytest.skip("the Keras comparison runs on the torch backend")
    return keras


KERAS_SAME = [
    ("exp", [np.array([1, 2, 3], "int32")]),
    ("sqrt", [np.array([1.0, 4.0, 2.0], "float32")]),
    ("log2", [np.array([1, 8], "int64")]),
    ("arctan2", [np.array([1.0, -2.0], "float32"), np.array([3.0, 0.5], "float32")]),
    ("divide", [np.array([1, 2], "int32"), np.array([4, 3], "int32")]),
    ("true_divide", [np.array([1, 2], "int64"), np.array([4, 3], "int64")]),
    ("divide_no_nan", [np.array([1.0, 2.0], "float32"), np.array([0.0, 3.0], "float32")]),
    ("mod", [np.array([7, -7], "int32"), np.array([3, 3], "int32")]),
    ("fmod", [np.array([7.5, -7.5], "float32"), np.array([2.0, 2.0], "float32")]),
    ("floor_divide", [np.array([7.5, -7.5], "float32"), np.array([2.0, 2.0], "float32")]),
    ("hypot", [np.array([3, 5], "int32"), np.array([4, 12], "int32")]),
    ("logaddexp", [np.array([1.0, 2.0], "float32"), np.array([0.5, -1.0], "float32")]),
    ("heaviside", [np.array([-1.0, 0.0, 3.0], "float32"), np.array([0.5, 0.5, 0.5], "float32")]),
    ("fmax", [np.array([1.0, np.nan], "float32"), np.array([np.nan, 2.0], "float32")]),
    ("nextafter", [np.array([1.0, 2.0], "float32"), np.array([2.0, 1.0], "float32")]),
    ("gcd", [np.array([12, 18], "int32"), np.array([8, 27], "int32")]),
    ("bitwise_xor", [np.array([12, 5], "int32"), np.array([10, 3], "int32")]),
    ("left_shift", [np.array([3, 5], "int32"), np.array([2, 1], "int32")]),
    ("logical_xor", [np.array([True, False]), np.array([True, True])]),
    ("floor", [np.array([1.5, -1.5], "float32")]),
    ("ceil", [np.array([1, 2], "int32")]),
    ("trunc", [np.array([1.5, -1.5], "float32")]),
    ("round", [np.array([0.5, 1.5, 2.6], "float32")]),
    ("sinc", [np.array([0.0, 0.25, 1.5], "float32")]),
    ("i0", [np.array([0.0, 1.0, -2.0], "float32")]),
    ("cbrt", [np.array([-8.0, 27.0], "float32")]),
    ("expm1", [np.array([1e-5, 1.0], "float32")]),
    ("arccosh", [np.array([1.5, 3.0], "float32")]),
    ("isnan", [np.array([1.0, np.nan], "float32")]),
    ("isposinf", [np.array([np.inf, -np.inf, 1.0], "float32")]),
    ("signbit", [np.array([-0.0, 1.0, -2.0], "float32")]),
    ("nan_to_num", [np.array([np.nan, np.inf, -np.inf, 1.0], "float32")]),
    ("angle", [np.array([-1.0, 2.0], "float32")]),
    ("real", [np.array([-1.0, 2.0], "float32")]),
    ("isreal", [np.array([-1.0, 2.0], "float32")]),
    ("mean", [np.array([[1, 2], [3, 5]], "int32")]),
    ("median", [np.array([[1, 2, 7], [3, 5, 4]], "float32")]),
    ("var", [np.array([[1, 2, 7], [3, 5, 4]], "float32")]),
    ("nanmean", [np.array([1.0, np.nan, 4.0], "float32")]),
    ("nanmax", [np.array([1.0, np.nan, 4.0], "float32")]),
    ("nansum", [np.array([1.0, np.nan, 4.0], "float32")]),
    ("count_nonzero", [np.array([[1, 0], [2, 3]], "int32")]),
    ("all", [np.array([[1, 0], [2, 3]], "int32")]),
    ("any", [np.array([[1, 0], [0, 0]], "int32")]),
    ("ptp", [np.array([[1.0, 5.0], [2.0, -3.0]], "float32")]),
    ("corrcoef", [np.array([[1.0, 2.0, 4.0], [3.0, 1.0, 0.5]], "float32")]),
    ("correlate", [np.array([1.0, 2.0, 3.0, 4.0], "float32"), np.array([0.5, 1.0], "float32")]),
    ("trapezoid", [np.array([1.0, 2.0, 4.0], "float32")]),
    ("cross", [np.array([1.0, 2.0, 3.0], "float32"), np.array([-1.0, 0.5, 2.0], "float32")]),
    ("kron", [np.array([[1.0, 2.0]], "float32"), np.array([[1.0], [3.0]], "float32")]),
    ("outer", [np.array([1.0, 2.0], "float32"), np.array([1.0, 3.0, 4.0], "float32")]),
    ("inner", [np.array([1.0, 2.0], "float32"), np.array([[1.0, 3.0], [0.5, 2.0]], "float32")]),
    ("vdot", [np.array([1.0, 2.0], "float32"), np.array([1.0, 3.0], "float32")]),
    ("dot", [np.array([[1.0, 2.0]], "float32"), np.array([[1.0], [3.0]], "float32")]),
    ("isin", [np.array([1, 2, 3], "int32"), np.array([2, 5], "int32")]),
    ("cumprod", [np.array([[1.0, 2.0], [3.0, 4.0]], "float32")]),
    ("nancumsum", [np.array([1.0, np.nan, 2.0], "float32")]),
    ("isclose", [np.array([1.0, 1.1], "float32"), np.array([1.0, 1.0], "float32")]),
    ("ldexp", [np.array([1.5, 2.0], "float32"), np.array([2, -1], "int32")]),
    ("square", [np.array([True, False])]),
    ("divide", [np.array([True, False]), np.array([True, True])]),
    ("maximum", [np.array([True, False]), np.array([False, False])]),
    ("minimum", [np.array([True, True]), np.array([False, True])]),
    ("less", [np.array([True, False]), np.array([True, True])]),
    ("cbrt", [np.array([8, -27], "int64")]),
    ("clip", [np.array([1, 5, 9], "int32"), np.float64(2.5), np.float64(6.0)]),
]


@pytest.mark.parametrize(("name", "inputs"), KERAS_SAME, ids=[c[0] for c in KERAS_SAME])
def test_matches_keras_values_and_dtypes(name, inputs):
    keras = _keras()
    expected = keras.ops.convert_to_numpy(getattr(keras.ops.numpy, name)(*inputs))
    got = getattr(tnp, name)(*[a if isinstance(a, np.generic) else tp.tensor(a) for a in inputs]).numpy()
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype, f"{name}: tapeflow gives {got.dtype}, Keras {expected.dtype}"
    if expected.dtype.kind == "f":
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected)


def test_matches_keras_with_arguments():
    keras = _keras()
    kn = keras.ops.numpy
    x = np.array([[1.0, 5.0, 2.0, 8.0], [3.0, 0.5, 7.0, 2.0]], "float32")
    pairs = [
        (tnp.quantile(tp.tensor(x), [0.2, 0.7], axis=1), kn.quantile(x, [0.2, 0.7], axis=1)),
        (tnp.percentile(tp.tensor(x), 30, axis=0, method="lower"), kn.percentile(x, 30, axis=0, method="lower")),
        (tnp.nanquantile(tp.tensor(x), 0.5, keepdims=True), kn.nanquantile(x, 0.5, keepdims=True)),
        (tnp.max(tp.tensor(x), axis=1, initial=6.0), kn.max(x, axis=1, initial=6.0)),
        (tnp.average(tp.tensor(x), axis=1, weights=tp.tensor(x[0])), kn.average(x, axis=1, weights=x[0])),
        (tnp.clip(tp.tensor(x), 1.0, 4.0), kn.clip(x, 1.0, 4.0)),
        (tnp.linspace(0.0, 1.0, 5, endpoint=False), kn.linspace(0.0, 1.0, 5, endpoint=False)),
        (tnp.logspace(0.0, 2.0, 3, base=2), kn.logspace(0.0, 2.0, 3, base=2)),
        (tnp.geomspace(1.0, 8.0, 4), kn.geomspace(1.0, 8.0, 4)),
        (tnp.eye(3, 4, k=-1), kn.eye(3, 4, k=-1)),
        (tnp.tri(3, k=1), kn.tri(3, k=1)),
        (tnp.identity(2), kn.identity(2)),
        (tnp.hamming(5), kn.hamming(5)),
        (tnp.kaiser(5, 1.5), kn.kaiser(5, 1.5)),
        (tnp.tensordot(tp.tensor(x), tp.tensor(x.T), axes=1), kn.tensordot(x, x.T, axes=1)),
        (tnp.einsum("ij,ij->i", tp.tensor(x), tp.tensor(x)), kn.einsum("ij,ij->i", x, x)),
        (tnp.bincount(tp.tensor(np.array([0, 2, 2], "int32"))), kn.bincount(np.array([0, 2, 2], "int32"))),
        (tnp.histogram(tp.tensor(x[0]), bins=3)[0], kn.histogram(x[0], bins=3)[0]),
        (tnp.histogram(tp.tensor(x[0]), bins=3)[1], kn.histogram(x[0], bins=3)[1]),
        (tnp.round(tp.tensor(x / 3.0), 2), kn.round(x / 3.0, 2)),
        (tnp.full((2,), 3), kn.full((2,), 3)),
        (tnp.size(tp.tensor(x)), kn.size(x)),
    ]
    for i, (got, expected) in enumerate(pairs):
        got, expected = got.numpy(), keras.ops.convert_to_numpy(expected)
        assert got.shape == expected.shape, i
        assert got.dtype == expected.dtype or (got.dtype, expected.dtype) == (np.int32, np.int64), i
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=str(i))
    assert tnp.ndim(tp.tensor(x)) == kn.ndim(x)


def test_float_only_ops_of_tp_stay_strict():
    with pytest.raises(TypeError, match="exp"):
        tp.exp(tp.tensor([1, 2]))
    assert tnp.exp(tp.tensor([0, 1])).dtype == tp.float32
