"""Every registered op against an independent NumPy float64 oracle.

`SAMPLES` maps each op name in the registry to cases; a new op without a case
fails `test_every_op_has_samples`. For each case we check the forward value,
the shape/dtype rule, the NumPy reference and the CPU kernel against the oracle,
and the VJP against central finite differences of the oracle. A few ops also get
a Hessian-vector product checked against finite differences of their gradient.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable

import numpy as np
import pytest
import scipy.linalg

import tapeflow as tp
from tapeflow.ops import registry, skipgram, transfer

_RNG = np.random.default_rng(20240607)

# Ops whose OpDef deliberately has no VJP: piecewise-constant, integer/bool
# valued, random, or gradient-blocking.
NOT_DIFFERENTIABLE = {
    "adagrad_update",
    "adam_update",
    "adamw_update",
    "argmax",
    "argmin",
    "argsort",
    "candidate_sampler",
    "categorical",
    "equal",
    "full_like",
    "fused_elementwise",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "logical_and",
    "logical_not",
    "logical_or",
    "lu_factor",
    "not_equal",
    "one_hot",
    "random_beta",
    "random_binomial",
    "random_gamma",
    "random_integers",
    "random_normal",
    "random_permutation",
    "random_uniform",
    "rmsprop_update",
    "sgd_momentum_update",
    "sparse_adam_update",
    "queue_close",  # queue ops move data in and out of queues: no gradient crosses them
    "queue_dequeue",
    "queue_dequeue_many",
    "queue_dequeue_up_to",
    "queue_enqueue",
    "queue_enqueue_many",
    "queue_size",
    "recv",  # no inputs; gradients cross devices by send/recv pairs of their own
    "searchsorted",
    "send",  # no outputs: partitioning happens after differentiation
    "stop_gradient",
    "truncated_normal",
    "unravel_index",
    "view",
    "while_loop_grad",
    "word2vec_sgns_train",
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One sample: inputs, attrs exactly as the OpDef takes them, and a NumPy oracle."""

    name: str
    inputs: tuple
    attrs: dict | Callable[..., dict]  # a callable (of the inputs) when attrs must be fresh
    expected: Callable  # (*inputs) -> array or tuple of arrays, in float64 NumPy
    call: Callable | None = None  # (tensors) -> outputs, instead of registry.apply
    used: tuple | None = None  # outputs the gradient tests differentiate (default: all)
    aliases: tuple | None = None  # op input k is inputs[aliases[k]] (one tensor fed twice)
    around: Callable | None = None  # (input arrays) -> the context the raw kernels run in
    fd_eps: float = 1e-6
    grad_tol: float = 1e-6
    exact: bool = False
    bugs: dict = dataclasses.field(default_factory=dict)  # test kind -> xfail reason

    def make_attrs(self) -> dict:
        return self.attrs(*self.inputs) if callable(self.attrs) else dict(self.attrs)


SAMPLES: dict[str, list[Case]] = {}


def sample(op: str, name: str, inputs, attrs, expected, **kw) -> None:
    SAMPLES.setdefault(op, []).append(Case(name, tuple(inputs), attrs, expected, **kw))


# ------------------------------------------------------------ input makers
def normal(*shape):
    return np.asarray(_RNG.standard_normal(shape))


def away(*shape, low=0.3):
    """Values with |v| >= low (away from kinks at zero), random signs."""
    return _RNG.uniform(low, low + 1.5, shape) * _RNG.choice([-1.0, 1.0], shape)


def positive(*shape):
    return _RNG.uniform(0.5, 2.0, shape)


def grid(*shape, offset=0.0):
    """Distinct values 0.1 apart (no ties for max/min), shuffled, plus `offset`."""
    n = math.prod(shape)
    return (_RNG.permutation(n) - n // 2).reshape(shape) * 0.1 + offset


def ints(low, high, *shape):
    return _RNG.integers(low, high, shape).astype(np.int64)


# ------------------------------------------------ unary and binary elementwise
def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


_UNARY = {
    "neg": (np.negative, normal),
    "abs": (np.abs, away),
    "sign": (np.sign, away),
    "exp": (np.exp, normal),
    "log": (np.log, positive),
    "log1p": (np.log1p, lambda *s: positive(*s) - 0.4),
    "sqrt": (np.sqrt, positive),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), positive),
    "square": (np.square, normal),
    "reciprocal": (lambda x: 1.0 / x, away),
    "sin": (np.sin, normal),
    "cos": (np.cos, normal),
    "tanh": (np.tanh, normal),
    "sigmoid": (_sigmoid, normal),
    "erf": (np.vectorize(math.erf, otypes=[np.float64]), normal),
    "identity": (lambda x: x.copy(), normal),
    "stop_gradient": (lambda x: x.copy(), normal),
    "relu": (lambda x: np.where(x > 0, x, 0.0), away),
    "softplus": (lambda x: np.log(1.0 + np.exp(x)), normal),
}
for _name, (_fn, _make) in _UNARY.items():
    sample(_name, "3x5", [_make(3, 5)], {}, _fn)
    sample(_name, "2x3x4", [_make(2, 3, 4)], {}, _fn)
    sample(_name, "scalar", [np.asarray(_make())], {}, _fn)
for _name in ("neg", "abs", "sign", "square"):
    sample(_name, "int64", [ints(-5, 6, 4, 3)], {}, _UNARY[_name][0])

_BINARY = {
    "add": (np.add, normal, normal),
    "subtract": (np.subtract, normal, normal),
    "multiply": (np.multiply, normal, normal),
    "divide": (lambda x, y: x / y, normal, away),
    "pow": (lambda x, y: np.exp(y * np.log(x)), positive, normal),
    "maximum": (lambda x, y: np.where(x > y, x, y), grid, lambda *s: grid(*s, offset=0.05)),
    "minimum": (lambda x, y: np.where(x < y, x, y), grid, lambda *s: grid(*s, offset=0.05)),
}
for _name, (_fn, _mx, _my) in _BINARY.items():
    sample(_name, "broadcast", [_mx(3, 1, 5), _my(4, 1)], {}, _fn)
    sample(_name, "same-shape", [_mx(2, 3), _my(2, 3)], {}, _fn)
    sample(_name, "scalar-rhs", [_mx(3, 4), np.asarray(_my())], {}, _fn)
    sample(_name, "scalar-lhs", [np.asarray(_mx()), _my(2, 5)], {}, _fn)
sample("multiply", "same-tensor-twice", [normal(3, 4)], {}, lambda x: x * x, aliases=(0, 0))
sample("add", "int64", [ints(-9, 9, 3, 1), ints(-9, 9, 4)], {}, np.add)
sample("subtract", "int64", [ints(-9, 9, 3, 4), ints(-9, 9, 4)], {}, np.subtract)
sample("multiply", "int64", [ints(-9, 9, 2, 3), ints(-9, 9, 3)], {}, np.multiply)
sample("divide", "int64-gives-float32", [ints(-9, 9, 2, 3), ints(1, 9, 3)], {}, lambda x, y: (x / y).astype(np.float32))

_COMPARE = {
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
}
for _name, _fn in _COMPARE.items():
    # small integers as floats, so ties (where <= and < differ) are frequent
    sample(_name, "float-broadcast", [ints(0, 3, 3, 1, 4).astype(float), ints(0, 3, 5, 1) * 1.0], {}, _fn)
    sample(_name, "int64", [ints(0, 3, 4, 3), ints(0, 3, 3)], {}, _fn)
sample("logical_and", "broadcast", [ints(0, 2, 3, 1) > 0, ints(0, 2, 4) > 0], {}, np.logical_and)
sample("logical_or", "broadcast", [ints(0, 2, 3, 1) > 0, ints(0, 2, 4) > 0], {}, np.logical_or)
sample("logical_not", "2x3", [ints(0, 2, 2, 3) > 0], {}, np.logical_not)


def _where(c, x, y):
    return np.where(c, x, y)


sample("where", "broadcast", [ints(0, 2, 3, 1) > 0, normal(1, 4), normal(3, 4)], {}, _where)
sample("where", "scalar-branch", [ints(0, 2, 2, 3, 4) > 0, normal(3, 4), np.asarray(0.7)], {}, _where)
sample("where", "cond-broadcasts-up", [ints(0, 2, 2, 1, 4) > 0, normal(3, 1), normal(4)], {}, _where)


def _clip_case(name, lo, hi):
    x = grid(4, 5, offset=0.05)  # bounds are multiples of 0.1: no x sits on one

    def fn(a):
        out = a.copy()
        if lo is not None:
            out = np.where(out < lo, lo, out)
        if hi is not None:
            out = np.where(out > hi, hi, out)
        return out

    sample("clip", name, [x], {"lo": lo, "hi": hi}, fn)


sample(
    "fused_elementwise",
    "row-and-scalar",
    [normal(3, 4), normal(4), np.asarray(0.5)],
    {"program": (("input", 0), ("input", 1), ("add", 0, 1), ("input", 2), ("multiply", 2, 3), ("tanh", 4))},
    lambda x, b, s: np.tanh((x + b) * s),
)
sample(
    "fused_elementwise",
    "column-broadcast",
    [normal(3, 1), normal(2, 1, 4)],
    {"program": (("input", 0), ("exp", 0), ("input", 1), ("maximum", 1, 2), ("const", 0.5), ("subtract", 3, 4))},
    lambda x, y: np.maximum(np.exp(x), y) - 0.5,
)

_clip_case("both", -0.5, 0.5)
_clip_case("upper-only", None, 0.3)
_clip_case("lower-only", -0.2, None)

sample(
    "cast",
    "f64-to-f32",
    [normal(3, 4)],
    {"dtype": "float32"},
    lambda x: x.astype(np.float32),
    fd_eps=1e-3,
    grad_tol=1e-3,
)
sample(
    "cast", "f64-to-int32", [grid(3, 4, offset=0.05) * 10], {"dtype": "int32"}, lambda x: np.trunc(x).astype(np.int32)
)
sample("cast", "f64-to-bool", [away(3, 4) * ints(0, 2, 3, 4)], {"dtype": "bool"}, lambda x: x != 0)
sample("cast", "int64-to-f64", [ints(-5, 5, 2, 3)], {"dtype": "float64"}, lambda x: x.astype(np.float64))

sample(
    "matmul",
    "batch-broadcast",
    [normal(2, 1, 3, 4), normal(5, 4, 2)],
    {},
    lambda a, b: np.einsum("...ij,...jk->...ik", a, b),
)
sample("matmul", "2d", [normal(3, 4), normal(4, 5)], {}, lambda a, b: np.einsum("ij,jk->ik", a, b))
sample(
    "matmul", "batch-rhs-1", [normal(3, 2, 4), normal(1, 4, 3)], {}, lambda a, b: np.einsum("...ij,...jk->...ik", a, b)
)
sample(
    "matmul",
    "sequence-by-matrix",
    [normal(2, 3, 3, 4), normal(4, 5)],
    {},
    lambda a, b: np.einsum("...ij,jk->...ik", a, b),
)
sample(
    "matmul", "matrix-by-batch", [normal(3, 4), normal(2, 4, 5)], {}, lambda a, b: np.einsum("ij,...jk->...ik", a, b)
)


# ------------------------------ keras.ops.numpy primitives (tapeflow.ops.elementwise)
NOT_DIFFERENTIABLE |= {
    "bitwise_and",
    "bitwise_invert",
    "bitwise_or",
    "bitwise_xor",
    "floor_divide",
    "gcd",
    "isfinite",
    "isinf",
    "isnan",
    "lcm",
    "left_shift",
    "nextafter",
    "quantile_weights",
    "right_shift",
    "signbit",
}


def _uniform(low, high):
    return lambda *s: _RNG.uniform(low, high, s)


def _i1_series(x):
    """The modified Bessel function I1 by its power series (40 terms)."""
    half = np.asarray(x, dtype=np.float64) / 2.0
    return sum(half ** (2 * k + 1) / (math.factorial(k) * math.factorial(k + 1)) for k in range(40))


_ELEMENTWISE_UNARY = {
    "arcsin": (np.arcsin, _uniform(-0.9, 0.9)),
    "arccos": (np.arccos, _uniform(-0.9, 0.9)),
    "arctan": (np.arctan, normal),
    "arcsinh": (np.arcsinh, normal),
    "arccosh": (np.arccosh, _uniform(1.2, 3.0)),
    "arctanh": (np.arctanh, _uniform(-0.9, 0.9)),
    "sinh": (np.sinh, normal),
    "cosh": (np.cosh, normal),
    "tan": (np.tan, _uniform(-1.2, 1.2)),
    "expm1": (np.expm1, normal),
    "cbrt": (lambda x: np.sign(x) * np.abs(x) ** (1.0 / 3.0), away),
    "bessel_i0": (np.i0, normal),
    "bessel_i1": (_i1_series, normal),
    "floor": (np.floor, lambda *s: grid(*s, offset=0.05)),
    "ceil": (np.ceil, lambda *s: grid(*s, offset=0.05)),
    "trunc": (np.trunc, lambda *s: grid(*s, offset=0.05)),
}
for _name, (_fn, _make) in _ELEMENTWISE_UNARY.items():
    sample(_name, "3x4", [_make(3, 4)], {}, _fn)
    sample(_name, "scalar", [np.asarray(_make())], {}, _fn)
sample("bessel_i1", "zero", [np.zeros(3)], {}, _i1_series)
sample("round_half_even", "1-decimal", [grid(3, 4, offset=0.013)], {"decimals": 1}, lambda a: np.round(a, 1))
sample("round_half_even", "int64-tens", [ints(-50, 50, 6)], {"decimals": -1}, lambda a: np.round(a, -1))

_SPECIALS = np.array([[1.0, np.nan, np.inf], [-np.inf, -0.0, -2.0]])
for _name, _fn in {"isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite, "signbit": np.signbit}.items():
    sample(_name, "specials", [_SPECIALS], {}, _fn)
    sample(_name, "int64", [ints(-3, 3, 4)], {}, _fn)

sample("arctan2", "broadcast", [normal(3, 4), normal(4)], {}, np.arctan2)
sample("mod", "floats", [normal(3, 4), away(3, 4)], {}, lambda a, b: a - np.floor(a / b) * b)
sample("mod", "int64", [ints(-9, 9, 5), ints(1, 4, 5) * np.array([1, -1, 1, -1, 1])], {}, np.mod)
sample("fmod", "floats", [normal(3, 4), away(4)], {}, lambda a, b: a - np.trunc(a / b) * b)
sample("fmod", "int64", [ints(-9, 9, 5), ints(1, 4, 5) * np.array([1, -1, 1, -1, 1])], {}, np.fmod)
sample("floor_divide", "floats", [normal(3, 4), away(3, 4)], {}, lambda a, b: np.floor(a / b))
sample("floor_divide", "int64", [ints(-9, 9, 5), ints(1, 4, 5)], {}, np.floor_divide)
sample("nextafter", "floats", [normal(3, 4), normal(3, 4)], {}, np.nextafter)
sample("gcd", "int64", [ints(-20, 20, 6), ints(1, 30, 6)], {}, np.gcd)
sample("lcm", "int64", [ints(-20, 20, 6), ints(1, 30, 6)], {}, np.lcm)
for _name, _fn in {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}.items():
    sample(_name, "int64", [ints(-20, 20, 6), ints(0, 64, 6)], {}, _fn)
    sample(_name, "bool", [ints(0, 2, 6) > 0, ints(0, 2, 6) > 0], {}, _fn)
sample("left_shift", "int64", [ints(-20, 20, 6), ints(0, 5, 6)], {}, lambda a, b: a * 2**b)
sample("right_shift", "int64", [ints(-20, 20, 6), ints(0, 5, 6)], {}, lambda a, b: np.floor_divide(a, 2**b))
sample("bitwise_invert", "int64", [ints(-20, 20, 6)], {}, lambda a: -a - 1)
sample("bitwise_invert", "bool", [ints(0, 2, 6) > 0], {}, np.logical_not)


def _cumprod(a, axis):
    out = np.moveaxis(np.array(a, dtype=np.float64, copy=True), axis, 0)
    for i in range(1, out.shape[0]):
        out[i] = out[i - 1] * out[i]
    return np.moveaxis(out, 0, axis)


sample("cumprod", "axis-1", [away(3, 4)], {"axis": 1}, lambda a: _cumprod(a, 1))
sample("cumprod", "axis-0", [away(4, 2, 3)], {"axis": 0}, lambda a: _cumprod(a, 0))
_x_cumprod_zeros = away(2, 5)
_x_cumprod_zeros[0, 1] = _x_cumprod_zeros[1, 2] = _x_cumprod_zeros[1, 4] = 0.0
sample("cumprod", "zeros", [_x_cumprod_zeros], {"axis": 1}, lambda a: _cumprod(a, 1))
sample("cumprod", "int64", [ints(-3, 4, 2, 4)], {"axis": 1}, lambda a: np.cumprod(a, axis=1))


def _quantile_attrs(qs, axes, keepdims=False, method="linear", scalar_q=None, ignore_nan=False):
    scalar = len(qs) == 1 if scalar_q is None else scalar_q
    return {
        "qs": qs,
        "scalar_q": scalar,
        "axes": axes,
        "keepdims": keepdims,
        "method": method,
        "ignore_nan": ignore_nan,
    }


def _np_quantile(attrs):
    fn = np.nanquantile if attrs["ignore_nan"] else np.quantile
    q = attrs["qs"][0] if attrs["scalar_q"] else np.asarray(attrs["qs"])
    return lambda a: fn(a, q, axis=attrs["axes"], method=attrs["method"], keepdims=attrs["keepdims"])


def _quantile_jacobian(attrs, eps=1e-3):
    """d quantile / d x by central differences (exact for these piecewise-linear functions)."""
    f = _np_quantile({**attrs, "keepdims": True})

    def jac(a):
        out = np.zeros((len(attrs["qs"]),) + a.shape)
        for idx in np.ndindex(a.shape):
            step = np.zeros_like(a)
            step[idx] = eps
            d = (np.asarray(f(a + step)) - np.asarray(f(a - step))) / (2 * eps)
            d = d.reshape(len(attrs["qs"]), -1) if not attrs["scalar_q"] else d.reshape(1, -1)
            out[(slice(None),) + idx] = np.nansum(d, axis=1)
        return out[0] if attrs["scalar_q"] else out

    return jac


_x_nan = grid(3, 5)
_x_nan[0, 2] = _x_nan[2, 0] = _x_nan[2, 4] = np.nan
_QUANTILE_CASES = {
    "median-axis-1": (grid(3, 5), _quantile_attrs((0.5,), (1,))),
    "three-qs-all-axes-keepdims": (grid(3, 4), _quantile_attrs((0.1, 0.5, 0.93), (0, 1), keepdims=True)),
    "lower": (grid(2, 6), _quantile_attrs((0.3,), (1,), method="lower")),
    "higher": (grid(2, 6), _quantile_attrs((0.3, 0.8), (0,), method="higher")),
    "midpoint": (grid(2, 6), _quantile_attrs((0.3,), (1,), method="midpoint")),
    "nearest": (grid(2, 6), _quantile_attrs((0.3, 0.7), (1,), method="nearest")),
    "vector-q-of-one": (grid(4, 3), _quantile_attrs((0.25,), (0,), scalar_q=False)),
    "nan-ignored": (_x_nan, _quantile_attrs((0.4,), (1,), ignore_nan=True)),
}
for _label, (_x, _attrs) in _QUANTILE_CASES.items():
    sample("quantile", _label, [_x], _attrs, _np_quantile(_attrs))
    sample("quantile_weights", _label, [_x], _attrs, _quantile_jacobian(_attrs))

_EINSUM_CASES = {
    "matmul": (("ij", "jk"), "ik", [normal(2, 3), normal(3, 4)]),
    "batched": (("bij", "bjk"), "bik", [normal(2, 2, 3), normal(2, 3, 2)]),
    "sum-all": (("ij",), "", [normal(3, 4)]),
    "transpose": (("ij",), "ji", [normal(3, 4)]),
    "outer": (("i", "j"), "ij", [normal(3), normal(4)]),
    "matvec": (("ij", "j"), "i", [normal(3, 4), normal(4)]),
    "chain-of-three": (("ij", "jk", "kl"), "il", [normal(2, 3), normal(3, 4), normal(4, 2)]),
    "unshared-axis": (("ij", "k"), "k", [normal(2, 3), normal(4)]),
    "int64": (("ij", "jk"), "ik", [ints(-3, 4, 2, 3), ints(-3, 4, 3, 2)]),
}


def _np_einsum(spec):
    return lambda *a: np.einsum(spec, *a)


for _label, (_terms, _out, _xs) in _EINSUM_CASES.items():
    sample("einsum", _label, _xs, {"terms": _terms, "output": _out}, _np_einsum(",".join(_terms) + "->" + _out))


# -------------------------------------------------------------- reductions
def _reduce_case(op, name, x, axes, keepdims, fn):
    sample(
        op, name, [x], {"axes": axes, "keepdims": keepdims}, lambda a: np.asarray(fn(a, axis=axes, keepdims=keepdims))
    )


def _logsumexp(a, axis, keepdims):
    return np.log(np.sum(np.exp(a), axis=axis, keepdims=keepdims))


def _prod(a, axis, keepdims):
    """Product by repeated multiplication (not np.prod)."""
    moved = np.moveaxis(a, axis, tuple(range(len(axis))))
    out = np.ones(moved.shape[len(axis) :])
    for idx in np.ndindex(moved.shape[: len(axis)]):
        out = out * moved[idx]
    if keepdims:
        out = out.reshape([1 if i in axis else d for i, d in enumerate(a.shape)])
    return out


_REDUCERS = {
    "sum": (np.sum, normal),
    "max": (np.max, grid),
    "min": (np.min, grid),
    "logsumexp": (_logsumexp, normal),
    "prod": (_prod, lambda *s: away(*s, low=0.5)),
}
for _name, (_fn, _make) in _REDUCERS.items():
    _reduce_case(_name, "axes-0-2", _make(3, 4, 5), (0, 2), False, _fn)
    _reduce_case(_name, "axis-1-keepdims", _make(3, 4, 5), (1,), True, _fn)
    _reduce_case(_name, "all-axes", _make(3, 5), (0, 1), False, _fn)
    _reduce_case(_name, "all-axes-keepdims", _make(2, 3, 2), (0, 1, 2), True, _fn)
    _reduce_case(_name, "no-axes", _make(2, 3), (), False, _fn)
    _reduce_case(_name, "scalar", np.asarray(_make()), (), False, _fn)
_x_zeros = away(3, 4, low=0.5)
_x_zeros[0, 1] = 0.0  # one zero in row 0
_x_zeros[1, 0] = _x_zeros[1, 3] = 0.0  # two zeros in row 1
PROD_TWO_ZEROS_LIMIT = (
    "prod's VJP is exact to first order; its second derivative is exact only up to one zero "
    "per reduced slice, and a slice with two zeros loses d2/dx_i dx_j for the zero pair"
)
_x_one_zero = away(3, 4, low=0.5)
_x_one_zero[0, 1] = _x_one_zero[2, 3] = 0.0  # at most one zero per row
sample("prod", "one-zero-per-row", [_x_one_zero], {"axes": (1,), "keepdims": False}, lambda a: _prod(a, (1,), False))
sample(
    "prod",
    "two-zeros-in-a-row",
    [_x_zeros],
    {"axes": (1,), "keepdims": False},
    lambda a: _prod(a, (1,), False),
    bugs={"second_order": PROD_TWO_ZEROS_LIMIT},
)
_reduce_case("prod", "zeros-keepdims", _x_zeros, (1,), True, _prod)
_reduce_case("max", "int64", ints(-50, 50, 3, 4), (1,), False, np.max)
_reduce_case("sum", "int64", ints(-50, 50, 3, 4), (0,), True, np.sum)
sample(
    "sum",
    "bool-counts",
    [ints(0, 2, 3, 4) > 0],
    {"axes": (1,), "keepdims": False},
    lambda a: np.count_nonzero(a, axis=1).astype(np.int64),
)

for _name, _fn in (("argmax", np.argmax), ("argmin", np.argmin)):
    sample(_name, "axis-1", [grid(3, 4, 5)], {"axis": 1}, lambda a, f=_fn: f(a, axis=1))
    sample(_name, "axis-none", [grid(3, 4)], {"axis": None}, lambda a, f=_fn: np.asarray(f(a)))
    sample(
        _name,
        "int64-axis-0",
        [_RNG.permutation(12).reshape(4, 3).astype(np.int64)],
        {"axis": 0},
        lambda a, f=_fn: f(a, axis=0),
    )


# ------------------------------------------------------------- array ops
sample("reshape", "minus-one", [normal(2, 3, 5)], {"shape": (5, -1)}, lambda x: x.reshape(5, 6))
sample("reshape", "to-scalar", [normal(1, 1)], {"shape": ()}, lambda x: x.reshape(()))
sample("reshape", "add-axes", [normal(6)], {"shape": (1, 2, 1, 3)}, lambda x: x.reshape(1, 2, 1, 3))
sample("reshape_like", "matrix", [normal(6), normal(2, 3)], {}, lambda x, like: x.reshape(like.shape))
sample("transpose", "perm-201", [normal(2, 3, 4)], {"perm": (2, 0, 1)}, lambda x: np.moveaxis(x, 2, 0))
sample("transpose", "2d", [normal(3, 5)], {"perm": (1, 0)}, lambda x: x.T.copy())
sample("broadcast_to", "3x1-to-2x3x4", [normal(3, 1)], {"shape": (2, 3, 4)}, lambda x: x + np.zeros((2, 3, 4)))
sample("broadcast_to", "scalar", [np.asarray(normal())], {"shape": (2, 3)}, lambda x: x + np.zeros((2, 3)))
sample(
    "concat",
    "axis-1-three",
    [normal(2, 1, 3), normal(2, 3, 3), normal(2, 2, 3)],
    {"axis": 1},
    lambda *xs: np.concatenate(xs, axis=1),
)
sample("concat", "axis-0-two", [normal(1, 4), normal(3, 4)], {"axis": 0}, lambda *xs: np.concatenate(xs, axis=0))
sample("concat", "same-tensor-twice", [normal(2, 3)], {"axis": 0}, lambda x: np.concatenate([x, x]), aliases=(0, 0))
sample("concat", "int64", [ints(0, 9, 2, 2), ints(0, 9, 2, 1)], {"axis": 1}, lambda *xs: np.concatenate(xs, axis=1))


def _split(x, sizes, axis):
    ends = np.cumsum(sizes)
    parts = zip(sizes, ends, strict=True)
    return tuple(np.take(x, np.arange(e - s, e), axis=axis) for s, e in parts)


sample("split", "sizes-axis-1", [normal(3, 6, 2)], {"sizes": (1, 3, 2), "axis": 1}, lambda x: _split(x, (1, 3, 2), 1))
sample("split", "equal-axis-0", [normal(3, 5)], {"sizes": (1, 1, 1), "axis": 0}, lambda x: _split(x, (1, 1, 1), 0))
sample("split", "single-part", [normal(4, 2)], {"sizes": (2,), "axis": 1}, lambda x: (x.copy(),))
sample(
    "split",
    "middle-part-only",
    [normal(3, 6)],
    {"sizes": (2, 3, 1), "axis": 1},
    lambda x: _split(x, (2, 3, 1), 1),
    used=(1,),
)
sample("split", "empty-part", [normal(2, 5)], {"sizes": (2, 0, 3), "axis": 1}, lambda x: _split(x, (2, 0, 3), 1))


def _pad(x, paddings, value):
    out = np.full([d + a + b for d, (a, b) in zip(x.shape, paddings, strict=True)], value)
    out[tuple(slice(a, a + d) for d, (a, _) in zip(x.shape, paddings, strict=True))] = x
    return out


sample(
    "pad",
    "2d",
    [normal(3, 4)],
    {"paddings": ((1, 0), (2, 3)), "constant_value": 1.5},
    lambda x: _pad(x, ((1, 0), (2, 3)), 1.5),
)
sample(
    "pad",
    "3d",
    [normal(2, 3, 2)],
    {"paddings": ((0, 0), (1, 1), (0, 2)), "constant_value": 0.0},
    lambda x: _pad(x, ((0, 0), (1, 1), (0, 2)), 0.0),
)
sample("tile", "2d", [normal(2, 3)], {"multiples": (2, 1)}, lambda x: np.concatenate([x, x]))
sample("tile", "zero-multiple", [normal(2, 3)], {"multiples": (0, 2)}, lambda x: np.zeros((0, 6)))
sample("tile", "3d", [normal(2, 1, 3)], {"multiples": (1, 3, 2)}, lambda x: np.tile(x, (1, 3, 2)))

# indices in the form getitem's wrapper passes them on (tensors and lists become int64 arrays)
_INDEXES = {
    "negative-step": (slice(None, None, -1), 1, slice(1, None, 2)),
    "ellipsis-none": (Ellipsis, None, slice(-2, None)),
    "int-array-repeats": (np.array([2, 0, 2, -1]), slice(None, None, -2)),
    "bool-mask": (slice(None), np.array([True, False, True, True, False])),
    "arrays-around-slice": (np.array([[0], [3]]), slice(1, 4), np.array([5, 0, 5])),
    "scalar": (3, -1, 2),
    "2d-bool-mask": (np.arange(20).reshape(4, 5) % 3 == 0,),
    "0d-bool": (np.asarray(True), 1),
    "array-and-int": (1, np.array([[0, 4], [4, 4]]), slice(None, 3)),
}


def _getitem_grad(g, shape, index):
    """Adjoint of indexing: each input cell gets the sum of the output cells it fed."""
    size = math.prod(shape)
    source = np.arange(size).reshape(shape)[index]
    return np.bincount(np.ravel(source), weights=np.ravel(g), minlength=size).reshape(shape)


for _label, _index in _INDEXES.items():
    _x = normal(4, 5, 6)
    sample("getitem", _label, [_x], {"index": _index}, lambda x, i=_index: np.array(x[i]))
    sample(
        "getitem_grad",
        _label,
        [normal(*np.shape(_x[_index]))],
        {"shape": (4, 5, 6), "index": _index},
        lambda g, i=_index: _getitem_grad(g, (4, 5, 6), i),
    )


def _gather(x, idx, axis):
    out = [np.take(x, int(i) % x.shape[axis], axis=axis) for i in np.ravel(idx)]
    out = np.stack(out, axis=axis) if out else np.zeros(x.shape[:axis] + (0,) + x.shape[axis + 1 :])
    return out.reshape(x.shape[:axis] + idx.shape + x.shape[axis + 1 :])


def _scatter_add(x, idx, upd, axis):
    out = x.copy()
    lead = (slice(None),) * axis
    for m in np.ndindex(idx.shape):
        out[lead + (idx[m],)] += upd[lead + m]
    return out


sample(
    "gather",
    "rows-repeats",
    [normal(4, 5), np.array([[3, 0, 3], [-1, 2, 0]])],
    {"axis": 0},
    lambda x, i: _gather(x, i, 0),
)
sample("gather", "axis-1", [normal(3, 5, 2), np.array([4, -5, 4, 1])], {"axis": 1}, lambda x, i: _gather(x, i, 1))
sample(
    "gather",
    "int32-ids",
    [normal(6, 3), np.array([5, 1, 1], dtype=np.int32)],
    {"axis": 0},
    lambda x, i: _gather(x, i, 0),
)
sample("gather", "3d-axis-0", [normal(4, 2, 3), np.array([1, 3])], {"axis": 0}, lambda x, i: _gather(x, i, 0))
sample("gather", "empty-ids", [normal(4, 3), np.zeros((0,), np.int64)], {"axis": 0}, lambda x, i: _gather(x, i, 0))


def _unique_sum(idx, values, num_rows):
    rows = [int(i) % num_rows for i in idx]
    unique = sorted(set(rows))
    sums = np.zeros((len(unique), *values.shape[1:]))
    for r, v in zip(rows, values, strict=True):
        sums[unique.index(r)] += v
    return np.array(unique), np.array([unique.index(r) for r in rows]), sums


sample(
    "unique_sum",
    "repeats-negative",
    [np.array([4, 0, -1, 2, 0]), normal(5, 3)],
    {"num_rows": 5},
    lambda i, v: _unique_sum(i, v, 5),
    used=(2,),
)
sample(
    "unique_sum",
    "3d-rows",
    [np.array([1, 1], dtype=np.int32), normal(2, 2, 3)],
    {"num_rows": 3},
    lambda i, v: _unique_sum(i, v, 3),
    used=(2,),
)


def _scatter_update(x, idx, upd):
    out = x.copy()
    for k, i in enumerate(idx):
        out[i] = upd[k]
    return out


sample(
    "scatter_update",
    "rows",
    [normal(5, 3), np.array([3, 0, -1]), normal(3, 3)],
    {},
    _scatter_update,
)
sample("scatter_update", "vector", [normal(4), np.array([2]), normal(1)], {}, _scatter_update)
sample(
    "scatter_add",
    "empty-ids",
    [normal(4, 3), np.zeros((0,), np.int64), normal(0, 3)],
    {"axis": 0},
    lambda x, i, u: _scatter_add(x, i, u, 0),
)
sample(
    "scatter_add",
    "rows-repeats",
    [normal(5, 3), np.array([4, 0, 4, -1]), normal(4, 3)],
    {"axis": 0},
    lambda x, i, u: _scatter_add(x, i, u, 0),
)
sample(
    "scatter_add",
    "axis-1",
    [normal(2, 4, 3), np.array([[1, 1], [3, 0]]), normal(2, 2, 2, 3)],
    {"axis": 1},
    lambda x, i, u: _scatter_add(x, i, u, 1),
)
sample(
    "scatter_add",
    "1d",
    [normal(5), np.array([0, 0, 2]), normal(3)],
    {"axis": 0},
    lambda x, i, u: _scatter_add(x, i, u, 0),
)


def _gather_nd(x, idx):
    k = idx.shape[-1]
    rows = [x[tuple(idx[m])] for m in np.ndindex(idx.shape[:-1])]
    return np.array(rows).reshape(idx.shape[:-1] + x.shape[k:])


def _scatter_nd_add(x, idx, upd):
    out = x.copy()
    for m in np.ndindex(idx.shape[:-1]):
        out[tuple(idx[m])] += upd[m]
    return out


_nd_idx = np.array([[[0, 1], [3, 4], [0, 1]], [[2, 0], [1, 1], [3, 0]]])
sample("gather_nd", "pairs", [normal(4, 5, 3), _nd_idx], {}, _gather_nd)
sample("gather_nd", "full-index", [normal(4, 5), np.array([[1, 2], [3, 0], [1, 2]])], {}, _gather_nd)
sample(
    "scatter_nd_add", "full-index", [normal(4, 5), np.array([[1, 2], [3, 0], [1, 2]]), normal(3)], {}, _scatter_nd_add
)
sample("scatter_nd_add", "rows", [normal(4, 5, 2), np.array([[2], [0], [2]]), normal(3, 5, 2)], {}, _scatter_nd_add)


def _one_hot(idx, depth, on, off, npdtype):
    out = np.full(idx.shape + (depth,), off)
    for m in np.ndindex(idx.shape):
        if 0 <= idx[m] < depth:
            out[m + (idx[m],)] = on
    return out.astype(npdtype)


sample(
    "one_hot",
    "out-of-range",
    [np.array([[0, 3], [-1, 5], [2, 2]])],
    {"depth": 4, "on_value": 2.0, "off_value": -1.0, "dtype": "float64"},
    lambda i: _one_hot(i, 4, 2.0, -1.0, np.float64),
)
sample(
    "one_hot",
    "float32",
    [np.array([1, 0, 2], dtype=np.int32)],
    {"depth": 3, "on_value": 1.0, "off_value": 0.0, "dtype": "float32"},
    lambda i: _one_hot(i, 3, 1.0, 0.0, np.float32),
)
sample("cumsum", "axis1", [normal(3, 4)], {"axis": 1, "reverse": False}, lambda x: np.cumsum(x, axis=1))
sample("cumsum", "reverse", [normal(2, 3)], {"axis": 0, "reverse": True}, lambda x: np.cumsum(x[::-1], axis=0)[::-1])
sample("full_like", "same-dtype", [normal(2, 3)], {"value": 3.5, "dtype": None}, lambda x: np.full((2, 3), 3.5))
sample(
    "full_like", "int32", [normal(3, 1)], {"value": 7, "dtype": "int32"}, lambda x: np.full((3, 1), 7, dtype=np.int32)
)
sample("full_like", "scalar", [np.asarray(1.0)], {"value": 0, "dtype": None}, lambda x: np.asarray(0.0))


# ------------------------------------------------------- convolution oracle
def _axis_window(size, k, stride, dilation, padding):
    """(outputs, pad before, pad after) along one axis, by TensorFlow's rules."""
    span = (k - 1) * dilation + 1
    if padding == "SAME":
        out = -(-size // stride)
        total = max((out - 1) * stride + span - size, 0)
        return out, total // 2, total - total // 2
    before, after = (0, 0) if padding == "VALID" else padding
    return (size + before + after - span) // stride + 1, before, after


def _geometry(in_hw, k_hw, strides, padding, dilations):
    per_axis = (padding, padding) if isinstance(padding, str) else padding
    (oh, t, b), (ow, left, r) = (_axis_window(in_hw[a], k_hw[a], strides[a], dilations[a], per_axis[a]) for a in (0, 1))
    return oh, ow, ((0, 0), (t, b), (left, r), (0, 0))


def _patch(xp, p, q, k_hw, strides, dilations):
    """The window of output cell (p, q): a view [n, kh, kw, c] into the padded input."""
    r0, c0 = p * strides[0], q * strides[1]
    return xp[
        :,
        r0 : r0 + (k_hw[0] - 1) * dilations[0] + 1 : dilations[0],
        c0 : c0 + (k_hw[1] - 1) * dilations[1] + 1 : dilations[1],
        :,
    ]


def _crop(xp, pads, in_hw):
    (t, _), (left, _) = pads[1], pads[2]
    return xp[:, t : t + in_hw[0], left : left + in_hw[1], :]


def np_conv2d(x, w, strides, padding, dilations):
    oh, ow, pads = _geometry(x.shape[1:3], w.shape[:2], strides, padding, dilations)
    xp = np.pad(x, pads)
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]))
    for p in range(oh):
        for q in range(ow):
            patch = _patch(xp, p, q, w.shape, strides, dilations)
            out[:, p, q] = np.einsum("nijc,ijco->no", patch, w)
    return out


def np_conv2d_input_grad(dy, w, input_size, strides, padding, dilations):
    oh, ow, pads = _geometry(input_size, w.shape[:2], strides, padding, dilations)
    assert (oh, ow) == dy.shape[1:3]
    dxp = np.zeros(np.add((dy.shape[0], *input_size, w.shape[2]), np.sum(pads, axis=1)))
    for p in range(oh):
        for q in range(ow):
            view = _patch(dxp, p, q, w.shape, strides, dilations)
            view += np.einsum("no,ijco->nijc", dy[:, p, q], w)
    return _crop(dxp, pads, input_size)


def np_conv2d_filter_grad(x, dy, filter_size, strides, padding, dilations):
    oh, ow, pads = _geometry(x.shape[1:3], filter_size, strides, padding, dilations)
    xp = np.pad(x, pads)
    dw = np.zeros((*filter_size, x.shape[3], dy.shape[3]))
    for p in range(oh):
        for q in range(ow):
            patch = _patch(xp, p, q, filter_size, strides, dilations)
            dw += np.einsum("nijc,no->ijco", patch, dy[:, p, q])
    return dw


_CONVS = {  # name: (x shape, filter shape, strides, padding, dilations)
    "valid-s1": ((2, 5, 6, 3), (3, 2, 3, 4), (1, 1), "VALID", (1, 1)),
    "same-s2": ((1, 7, 6, 2), (3, 3, 2, 3), (2, 2), "SAME", (1, 1)),
    "explicit-s21-d21": ((2, 6, 7, 2), (2, 3, 2, 2), (2, 1), ((1, 2), (0, 1)), (2, 1)),
    "same-s12-d2": ((1, 5, 5, 1), (3, 2, 1, 2), (1, 2), "SAME", (2, 2)),
    "valid-s2-1x1": ((2, 5, 4, 3), (1, 1, 3, 2), (2, 2), "VALID", (1, 1)),
}
for _label, (_xs, _ws, _s, _p, _d) in _CONVS.items():
    _attrs = {"strides": _s, "padding": _p, "dilations": _d}
    sample("conv2d", _label, [normal(*_xs), normal(*_ws)], _attrs, lambda x, w, a=_attrs: np_conv2d(x, w, **a))
    _oh, _ow, _ = _geometry(_xs[1:3], _ws[:2], _s, _p, _d)
    _dy = normal(_xs[0], _oh, _ow, _ws[3])
    sample(
        "conv2d_input_grad",
        _label,
        [_dy, normal(*_ws)],
        {"input_size": _xs[1:3], **_attrs},
        lambda dy, w, i=_xs[1:3], a=_attrs: np_conv2d_input_grad(dy, w, i, **a),
    )
    sample(
        "conv2d_filter_grad",
        _label,
        [normal(*_xs), _dy],
        {"filter_size": _ws[:2], **_attrs},
        lambda x, dy, f=_ws[:2], a=_attrs: np_conv2d_filter_grad(x, dy, f, **a),
    )


def _dense_depthwise(w):
    """The (kh, kw, C, C * M) conv2d filter equal to depthwise filter w (kh, kw, C, M)."""
    kh, kw, c, m = w.shape
    dense = np.zeros((kh, kw, c, c * m))
    for ch in range(c):
        dense[:, :, ch, ch * m : (ch + 1) * m] = w[:, :, ch, :]
    return dense


def np_depthwise_filter_grad(x, dy, filter_size, strides, padding, dilations):
    c = x.shape[3]
    m = dy.shape[3] // c
    full = np_conv2d_filter_grad(x, dy, filter_size, strides, padding, dilations)
    return np.stack([full[:, :, ch, ch * m : (ch + 1) * m] for ch in range(c)], axis=2)


_DEPTHWISE = {  # name: (x shape, filter shape (kh, kw, C, M), strides, padding, dilations)
    "valid-s1-m1": ((2, 5, 6, 3), (3, 2, 3, 1), (1, 1), "VALID", (1, 1)),
    "same-s2-m2": ((1, 7, 6, 2), (3, 3, 2, 2), (2, 2), "SAME", (1, 1)),
    "explicit-s21-d21-m3": ((2, 6, 7, 2), (2, 3, 2, 3), (2, 1), ((1, 2), (0, 1)), (2, 1)),
}
for _label, (_xs, _ws, _s, _p, _d) in _DEPTHWISE.items():
    _attrs = {"strides": _s, "padding": _p, "dilations": _d}
    sample(
        "depthwise_conv2d",
        _label,
        [normal(*_xs), normal(*_ws)],
        _attrs,
        lambda x, w, a=_attrs: np_conv2d(x, _dense_depthwise(w), **a),
    )
    _oh, _ow, _ = _geometry(_xs[1:3], _ws[:2], _s, _p, _d)
    _dy = normal(_xs[0], _oh, _ow, _ws[2] * _ws[3])
    sample(
        "depthwise_conv2d_input_grad",
        _label,
        [_dy, normal(*_ws)],
        {"input_size": _xs[1:3], **_attrs},
        lambda dy, w, i=_xs[1:3], a=_attrs: np_conv2d_input_grad(dy, _dense_depthwise(w), i, **a),
    )
    sample(
        "depthwise_conv2d_filter_grad",
        _label,
        [normal(*_xs), _dy],
        {"filter_size": _ws[:2], **_attrs},
        lambda x, dy, f=_ws[:2], a=_attrs: np_depthwise_filter_grad(x, dy, f, **a),
    )


# ----------------------------------------------------- whole-sequence LSTM oracle
def np_lstm_sequence(xp, h0, c0, kernel, mask=None, go_backwards=False):
    """Keras's LSTM steps (sigmoid written as (1 + tanh(z / 2)) / 2); works on complex inputs too."""
    batch, steps, width = xp.shape
    u = width // 4
    keep = np.ones((batch, steps), bool) if mask is None else mask
    h, c, y = h0, c0, np.zeros_like(h0)
    ys, cs, acts = [], [], [None] * steps
    for t in range(steps - 1, -1, -1) if go_backwards else range(steps):
        z = xp[:, t] + h @ kernel
        gates = (1 + np.tanh(z / 2)) / 2
        a = np.concatenate([gates[:, : 2 * u], np.tanh(z[:, 2 * u : 3 * u]), gates[:, 3 * u :]], 1)
        c_new = a[:, u : 2 * u] * c + a[:, :u] * a[:, 2 * u : 3 * u]
        h_new = a[:, 3 * u :] * np.tanh(c_new)
        k = keep[:, t : t + 1]
        c, h, y = np.where(k, c_new, c), np.where(k, h_new, h), np.where(k, h_new, y)
        ys.append(y)
        cs.append(c)
        acts[t] = np.where(k, a, 0.0)
    return np.stack(ys, 1), h, c, np.stack(cs, 1), np.stack(acts, 1)


def np_lstm_sequence_grad(xp, gys, gh, gc, h0, c0, kernel, mask=None, go_backwards=False):
    """The VJP of np_lstm_sequence at (xp, h0, c0, kernel), by complex steps: one forward run
    per input element."""
    args = [xp, h0, c0, kernel]
    grads = []
    for k, a in enumerate(args):
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            bumped = [b.astype(complex) for b in args]
            bumped[k][idx] += 1e-30j
            out = np_lstm_sequence(*bumped, mask, go_backwards)
            g[idx] = sum(np.sum(w * o.imag) for w, o in zip((gys, gh, gc), out[:3], strict=True)) / 1e-30
        grads.append(g)
    return tuple(grads)


_LSTM_MASK = np.array([[False, True, True], [True, False, True]])
for _label, _mask, _back in (("plain", None, False), ("masked-backwards", _LSTM_MASK, True)):
    _ins = [normal(2, 3, 8), normal(2, 2), normal(2, 2), normal(2, 8) * 0.5]
    _extra = [] if _mask is None else [_mask]
    sample(
        "lstm_sequence",
        _label,
        _ins + _extra,
        {"go_backwards": _back},
        lambda *a, b=_back: np_lstm_sequence(*a[:4], a[4] if len(a) > 4 else None, b),
        used=(0, 1, 2),
    )
    _fwd = np_lstm_sequence(*_ins, _mask, _back)
    _gins = [normal(2, 3, 2), normal(2, 2), normal(2, 2), _ins[1], _ins[2], _ins[3], _fwd[0], _fwd[3], _fwd[4]]
    sample(
        "lstm_sequence_grad",
        _label,
        _gins + _extra,
        {"go_backwards": _back},
        lambda *a, b=_back, xp=_ins[0]: np_lstm_sequence_grad(xp, *a[:6], a[9] if len(a) > 9 else None, b),
    )
NOT_DIFFERENTIABLE |= {"lstm_sequence_grad"}


# ------------------------------------------------------ whole-sequence GRU oracle
def np_gru_sequence(xp, h0, kernel, bias, mask=None, reset_after=True, go_backwards=False):
    """Keras's GRU steps (sigmoid written as (1 + tanh(z / 2)) / 2); works on complex inputs too."""
    batch, steps, width = xp.shape
    u = width // 3
    keep = np.ones((batch, steps), bool) if mask is None else mask
    h, y = h0, np.zeros_like(h0)
    ys, acts = [], [None] * steps
    for t in range(steps - 1, -1, -1) if go_backwards else range(steps):
        xz, xr, xh = np.split(xp[:, t], 3, axis=1)
        if reset_after:
            rz, rr, rh = np.split(h @ kernel + bias, 3, axis=1)
            z, r = (1 + np.tanh((xz + rz) / 2)) / 2, (1 + np.tanh((xr + rr) / 2)) / 2
            extra = rh
            cand = np.tanh(xh + r * rh)
        else:
            rz, rr = np.split(h @ kernel[:, : 2 * u] + bias[: 2 * u], 2, axis=1)
            z, r = (1 + np.tanh((xz + rz) / 2)) / 2, (1 + np.tanh((xr + rr) / 2)) / 2
            extra = r * h
            cand = np.tanh(xh + extra @ kernel[:, 2 * u :] + bias[2 * u :])
        h_new = z * h + (1 - z) * cand
        k = keep[:, t : t + 1]
        h, y = np.where(k, h_new, h), np.where(k, h_new, y)
        ys.append(y)
        acts[t] = np.where(k, np.concatenate([z, r, cand, extra], 1), 0.0)
    return np.stack(ys, 1), h, np.stack(acts, 1)


def np_gru_sequence_grad(xp, bias, gys, gh, h0, kernel, mask=None, reset_after=True, go_backwards=False):
    """The VJP of np_gru_sequence at (xp, h0, kernel, bias), by complex steps."""
    args = [xp, h0, kernel, bias]
    grads = []
    for k, a in enumerate(args):
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            bumped = [b.astype(complex) for b in args]
            bumped[k][idx] += 1e-30j
            out = np_gru_sequence(*bumped, mask, reset_after, go_backwards)
            g[idx] = sum(np.sum(w * o.imag) for w, o in zip((gys, gh), out[:2], strict=True)) / 1e-30
        grads.append(g)
    return tuple(grads)


_GRU_MASK = np.array([[False, True, True], [True, False, True]])
for _label, _mask, _after, _back in (
    ("plain", None, True, False),
    ("masked-backwards", _GRU_MASK, True, True),
    ("reset-before", None, False, False),
    ("reset-before-masked-backwards", _GRU_MASK, False, True),
):
    _ins = [normal(2, 3, 6), normal(2, 2), normal(2, 6) * 0.5, normal(6) * 0.5]
    _extra = [] if _mask is None else [_mask]
    _attrs = {"reset_after": _after, "go_backwards": _back}
    sample(
        "gru_sequence",
        _label,
        _ins + _extra,
        _attrs,
        lambda *a, ra=_after, b=_back: np_gru_sequence(*a[:4], a[4] if len(a) > 4 else None, ra, b),
        used=(0, 1),
    )
    _fwd = np_gru_sequence(*_ins, _mask, _after, _back)
    _gins = [normal(2, 3, 2), normal(2, 2), _ins[1], _ins[2], _fwd[0], _fwd[2]]
    sample(
        "gru_sequence_grad",
        _label,
        _gins + _extra,
        _attrs,
        lambda *a, ra=_after, b=_back, xp=_ins[0], bias=_ins[3]: np_gru_sequence_grad(
            xp, bias, *a[:4], a[6] if len(a) > 6 else None, ra, b
        ),
    )
NOT_DIFFERENTIABLE |= {"gru_sequence_grad"}


# ----------------------------------------------------------- pooling oracle
def _pool_windows(x, ksize, strides, padding, fill):
    oh, ow, pads = _geometry(x.shape[1:3], ksize, strides, padding, (1, 1))
    xp = np.pad(x, pads, constant_values=fill)
    for p in range(oh):
        for q in range(ow):
            yield p, q, _patch(xp, p, q, ksize, strides, (1, 1))


def np_max_pool(x, ksize, strides, padding):
    oh, ow, _ = _geometry(x.shape[1:3], ksize, strides, padding, (1, 1))
    out = np.empty((x.shape[0], oh, ow, x.shape[3]))
    for p, q, win in _pool_windows(x, ksize, strides, padding, -np.inf):
        out[:, p, q] = win.max(axis=(1, 2))
    return out


def _argmax_cells(x, ksize, strides, padding):
    """Per output cell: (p, q, index into the padded input of the window's first max)."""
    n, c = x.shape[0], x.shape[3]
    nn, cc = np.meshgrid(np.arange(n), np.arange(c), indexing="ij")
    for p, q, win in _pool_windows(x, ksize, strides, padding, -np.inf):
        i, j = np.divmod(win.reshape(n, -1, c).argmax(axis=1), ksize[1])
        yield p, q, (nn, p * strides[0] + i, q * strides[1] + j, cc)


def np_max_pool_grad(x, dy, ksize, strides, padding):
    _, _, pads = _geometry(x.shape[1:3], ksize, strides, padding, (1, 1))
    dxp = np.zeros(np.add(x.shape, np.sum(pads, axis=1)))
    for p, q, cell in _argmax_cells(x, ksize, strides, padding):
        np.add.at(dxp, cell, dy[:, p, q])
    return _crop(dxp, pads, x.shape[1:3])


def np_max_pool_grad_grad(x, g, ksize, strides, padding):
    oh, ow, pads = _geometry(x.shape[1:3], ksize, strides, padding, (1, 1))
    gp = np.pad(g, pads)
    out = np.empty((x.shape[0], oh, ow, x.shape[3]))
    for p, q, cell in _argmax_cells(x, ksize, strides, padding):
        out[:, p, q] = gp[cell]
    return out


def _window_counts(in_hw, ksize, strides, padding):
    """How many real (unpadded) cells each output window covers."""
    ones = np.ones((1, *in_hw, 1))
    oh, ow, _ = _geometry(in_hw, ksize, strides, padding, (1, 1))
    counts = np.zeros((oh, ow))
    for p, q, win in _pool_windows(ones, ksize, strides, padding, 0.0):
        counts[p, q] = win.sum()
    return counts[None, :, :, None]


def np_avg_pool(x, ksize, strides, padding):
    oh, ow, _ = _geometry(x.shape[1:3], ksize, strides, padding, (1, 1))
    out = np.empty((x.shape[0], oh, ow, x.shape[3]))
    for p, q, win in _pool_windows(x, ksize, strides, padding, 0.0):
        out[:, p, q] = win.sum(axis=(1, 2))
    return out / _window_counts(x.shape[1:3], ksize, strides, padding)


def np_avg_pool_grad(dy, input_size, ksize, strides, padding):
    _, _, pads = _geometry(input_size, ksize, strides, padding, (1, 1))
    shape = (dy.shape[0], *input_size, dy.shape[3])
    dxp = np.zeros(np.add(shape, np.sum(pads, axis=1)))
    scaled = dy / _window_counts(input_size, ksize, strides, padding)
    for p in range(dy.shape[1]):
        for q in range(dy.shape[2]):
            view = _patch(dxp, p, q, ksize, strides, (1, 1))
            view += scaled[:, p, q][:, None, None, :]
    return _crop(dxp, pads, input_size)


_POOLS = {  # name: (x shape, ksize, strides, padding)
    "valid-k23-s2": ((2, 5, 7, 3), (2, 3), (2, 2), "VALID"),
    "same-k3-s2": ((1, 6, 5, 2), (3, 3), (2, 2), "SAME"),
    "same-k2-s1-overlap": ((2, 4, 5, 1), (2, 2), (1, 1), "SAME"),
    "valid-k31-s12": ((1, 7, 6, 2), (3, 1), (1, 2), "VALID"),
}
for _label, (_xs, _k, _s, _p) in _POOLS.items():
    _attrs = {"ksize": _k, "strides": _s, "padding": _p}
    _oh, _ow, _ = _geometry(_xs[1:3], _k, _s, _p, (1, 1))
    _dy_shape = (_xs[0], _oh, _ow, _xs[3])
    sample("max_pool2d", _label, [grid(*_xs)], _attrs, lambda x, a=_attrs: np_max_pool(x, **a))
    sample("avg_pool2d", _label, [normal(*_xs)], _attrs, lambda x, a=_attrs: np_avg_pool(x, **a))
    sample(
        "max_pool2d_grad",
        _label,
        [grid(*_xs), normal(*_dy_shape)],
        _attrs,
        lambda x, dy, a=_attrs: np_max_pool_grad(x, dy, **a),
    )
    sample(
        "max_pool2d_grad_grad",
        _label,
        [grid(*_xs), normal(*_xs)],
        _attrs,
        lambda x, g, a=_attrs: np_max_pool_grad_grad(x, g, **a),
    )
    sample(
        "avg_pool2d_grad",
        _label,
        [normal(*_dy_shape)],
        {"input_size": _xs[1:3], **_attrs},
        lambda dy, i=_xs[1:3], a=_attrs: np_avg_pool_grad(dy, i, **a),
    )


# --------------------------------------------- 3-D convolution and pooling oracle
def _geometry3(sizes, ksize, strides, padding, dilations):
    axes = [_axis_window(n, k, s, d, padding) for n, k, s, d in zip(sizes, ksize, strides, dilations, strict=True)]
    return tuple(a[0] for a in axes), ((0, 0), *((a[1], a[2]) for a in axes), (0, 0))


def _cells3(outs, ksize, strides, dilations):
    """(output cell, the slices of its window in the padded input) for each output cell."""
    for cell in np.ndindex(*outs):
        spans = zip(cell, ksize, strides, dilations, strict=True)
        yield cell, (slice(None), *(slice(c * s, c * s + (k - 1) * d + 1, d) for c, k, s, d in spans), slice(None))


def _crop3(xp, pads, sizes):
    return xp[(slice(None), *(slice(b, b + n) for (b, _), n in zip(pads[1:4], sizes, strict=True)), slice(None))]


def np_conv3d(x, w, strides, padding, dilations):
    outs, pads = _geometry3(x.shape[1:4], w.shape[:3], strides, padding, dilations)
    xp = np.pad(x, pads)
    out = np.zeros((x.shape[0], *outs, w.shape[4]))
    for cell, win in _cells3(outs, w.shape[:3], strides, dilations):
        out[(slice(None), *cell)] = np.einsum("nijkc,ijkco->no", xp[win], w)
    return out


def np_conv3d_input_grad(dy, w, input_size, strides, padding, dilations):
    outs, pads = _geometry3(input_size, w.shape[:3], strides, padding, dilations)
    dxp = np.zeros(np.add((dy.shape[0], *input_size, w.shape[3]), np.sum(pads, axis=1)))
    for cell, win in _cells3(outs, w.shape[:3], strides, dilations):
        dxp[win] += np.einsum("no,ijkco->nijkc", dy[(slice(None), *cell)], w)
    return _crop3(dxp, pads, input_size)


def np_conv3d_filter_grad(x, dy, filter_size, strides, padding, dilations):
    outs, pads = _geometry3(x.shape[1:4], filter_size, strides, padding, dilations)
    xp = np.pad(x, pads)
    dw = np.zeros((*filter_size, x.shape[4], dy.shape[4]))
    for cell, win in _cells3(outs, filter_size, strides, dilations):
        dw += np.einsum("nijkc,no->ijkco", xp[win], dy[(slice(None), *cell)])
    return dw


def _argmax_cells3(x, ksize, strides, padding):
    """Per output cell: (cell, index into the padded input of its window's first max)."""
    n, c = x.shape[0], x.shape[4]
    outs, pads = _geometry3(x.shape[1:4], ksize, strides, padding, (1, 1, 1))
    xp = np.pad(x, pads, constant_values=-np.inf)
    nn, cc = np.meshgrid(np.arange(n), np.arange(c), indexing="ij")
    for cell, win in _cells3(outs, ksize, strides, (1, 1, 1)):
        taps = np.unravel_index(xp[win].reshape(n, -1, c).argmax(axis=1), ksize)
        yield cell, (nn, *(p * s + t for p, s, t in zip(cell, strides, taps, strict=True)), cc)


def np_max_pool3d(x, ksize, strides, padding):
    outs, pads = _geometry3(x.shape[1:4], ksize, strides, padding, (1, 1, 1))
    xp = np.pad(x, pads, constant_values=-np.inf)
    out = np.empty((x.shape[0], *outs, x.shape[4]))
    for cell, win in _cells3(outs, ksize, strides, (1, 1, 1)):
        out[(slice(None), *cell)] = xp[win].max(axis=(1, 2, 3))
    return out


def np_max_pool3d_grad(x, dy, ksize, strides, padding):
    _, pads = _geometry3(x.shape[1:4], ksize, strides, padding, (1, 1, 1))
    dxp = np.zeros(np.add(x.shape, np.sum(pads, axis=1)))
    for cell, index in _argmax_cells3(x, ksize, strides, padding):
        np.add.at(dxp, index, dy[(slice(None), *cell)])
    return _crop3(dxp, pads, x.shape[1:4])


def np_max_pool3d_grad_grad(x, g, ksize, strides, padding):
    outs, pads = _geometry3(x.shape[1:4], ksize, strides, padding, (1, 1, 1))
    gp = np.pad(g, pads)
    out = np.empty((x.shape[0], *outs, x.shape[4]))
    for cell, index in _argmax_cells3(x, ksize, strides, padding):
        out[(slice(None), *cell)] = gp[index]
    return out


def _window_counts3(sizes, ksize, strides, padding):
    outs, pads = _geometry3(sizes, ksize, strides, padding, (1, 1, 1))
    ones = np.pad(np.ones((1, *sizes, 1)), pads)
    counts = np.zeros((1, *outs, 1))
    for cell, win in _cells3(outs, ksize, strides, (1, 1, 1)):
        counts[(0, *cell)] = ones[win].sum()
    return counts


def np_avg_pool3d(x, ksize, strides, padding):
    outs, pads = _geometry3(x.shape[1:4], ksize, strides, padding, (1, 1, 1))
    xp = np.pad(x, pads)
    out = np.empty((x.shape[0], *outs, x.shape[4]))
    for cell, win in _cells3(outs, ksize, strides, (1, 1, 1)):
        out[(slice(None), *cell)] = xp[win].sum(axis=(1, 2, 3))
    return out / _window_counts3(x.shape[1:4], ksize, strides, padding)


def np_avg_pool3d_grad(dy, input_size, ksize, strides, padding):
    outs, pads = _geometry3(input_size, ksize, strides, padding, (1, 1, 1))
    dxp = np.zeros(np.add((dy.shape[0], *input_size, dy.shape[4]), np.sum(pads, axis=1)))
    scaled = dy / _window_counts3(input_size, ksize, strides, padding)
    for cell, win in _cells3(outs, ksize, strides, (1, 1, 1)):
        dxp[win] += scaled[(slice(None), *cell)][:, None, None, None, :]
    return _crop3(dxp, pads, input_size)


_CONVS3 = {  # name: (x shape, filter shape, strides, padding, dilations)
    "valid-s1": ((2, 4, 5, 3, 2), (2, 3, 2, 2, 3), (1, 1, 1), "VALID", (1, 1, 1)),
    "same-s212-d121": ((1, 5, 4, 4, 2), (3, 2, 2, 2, 2), (2, 1, 2), "SAME", (1, 2, 1)),
}
for _label, (_xs, _ws, _s, _p, _d) in _CONVS3.items():
    _attrs = {"strides": _s, "padding": _p, "dilations": _d}
    sample("conv3d", _label, [normal(*_xs), normal(*_ws)], _attrs, lambda x, w, a=_attrs: np_conv3d(x, w, **a))
    _outs, _ = _geometry3(_xs[1:4], _ws[:3], _s, _p, _d)
    _dy = normal(_xs[0], *_outs, _ws[4])
    sample(
        "conv3d_input_grad",
        _label,
        [_dy, normal(*_ws)],
        {"input_size": _xs[1:4], **_attrs},
        lambda dy, w, i=_xs[1:4], a=_attrs: np_conv3d_input_grad(dy, w, i, **a),
    )
    sample(
        "conv3d_filter_grad",
        _label,
        [normal(*_xs), _dy],
        {"filter_size": _ws[:3], **_attrs},
        lambda x, dy, f=_ws[:3], a=_attrs: np_conv3d_filter_grad(x, dy, f, **a),
    )

_POOLS3 = {  # name: (x shape, ksize, strides, padding)
    "valid-k2-s2": ((2, 4, 5, 4, 2), (2, 2, 2), (2, 2, 2), "VALID"),
    "same-k323-s2": ((1, 5, 4, 5, 2), (3, 2, 3), (2, 2, 2), "SAME"),
}
for _label, (_xs, _k, _s, _p) in _POOLS3.items():
    _attrs = {"ksize": _k, "strides": _s, "padding": _p}
    _outs, _ = _geometry3(_xs[1:4], _k, _s, _p, (1, 1, 1))
    _dy_shape = (_xs[0], *_outs, _xs[4])
    sample("max_pool3d", _label, [grid(*_xs)], _attrs, lambda x, a=_attrs: np_max_pool3d(x, **a))
    sample("avg_pool3d", _label, [normal(*_xs)], _attrs, lambda x, a=_attrs: np_avg_pool3d(x, **a))
    sample(
        "max_pool3d_grad",
        _label,
        [grid(*_xs), normal(*_dy_shape)],
        _attrs,
        lambda x, dy, a=_attrs: np_max_pool3d_grad(x, dy, **a),
    )
    sample(
        "max_pool3d_grad_grad",
        _label,
        [grid(*_xs), normal(*_xs)],
        _attrs,
        lambda x, g, a=_attrs: np_max_pool3d_grad_grad(x, g, **a),
    )
    sample(
        "avg_pool3d_grad",
        _label,
        [normal(*_dy_shape)],
        {"input_size": _xs[1:4], **_attrs},
        lambda dy, i=_xs[1:4], a=_attrs: np_avg_pool3d_grad(dy, i, **a),
    )


# ------------------------------------------------------------------ nn misc
sample("relu_grad", "3x4", [normal(3, 4), away(3, 4)], {}, lambda g, y: np.where(y > 0, g, 0.0))
sample(
    "relu_bias_grad",
    "image",
    [normal(2, 3, 4, 5), away(2, 3, 4, 5)],
    {},
    lambda g, y: (np.where(y > 0, g, 0.0), np.where(y > 0, g, 0.0).sum(axis=(0, 1, 2))),
)
sample(
    "relu_bias_grad",
    "rows",
    [normal(6, 3), away(6, 3)],
    {},
    lambda g, y: (np.where(y > 0, g, 0.0), np.where(y > 0, g, 0.0).sum(axis=0)),
)
sample("relu_bias_grad", "vector", [normal(4), away(4)], {}, lambda g, y: (np.where(y > 0, g, 0.0),) * 2)


def np_sparse_xent(logits, labels):
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    rows = np.arange(len(labels))
    return -np.log(p[rows, labels]), p - np.eye(logits.shape[1])[labels]


sample(
    "sparse_softmax_cross_entropy_with_logits", "5x4", [normal(5, 4) * 2, np.array([0, 3, 1, 3, 2])], {}, np_sparse_xent
)
sample(
    "sparse_softmax_cross_entropy_with_logits",
    "1x3-int32",
    [normal(1, 3), np.array([2], dtype=np.int32)],
    {},
    np_sparse_xent,
)
sample(
    "sparse_softmax_cross_entropy_with_logits",
    "loss-only",
    [normal(4, 3), np.array([2, 0, 1, 1])],
    {},
    np_sparse_xent,
    used=(0,),
)
sample(
    "sparse_softmax_cross_entropy_with_logits",
    "backprop-only",
    [normal(4, 3), np.array([2, 0, 1, 1])],
    {},
    np_sparse_xent,
    used=(1,),
)
sample(
    "sparse_softmax_cross_entropy_with_logits",
    "large-logits",
    [normal(3, 4) + 800.0, np.array([1, 0, 3])],
    {},
    np_sparse_xent,
)


# ----------------------------------------------------------------- random
def _pcg(seed):
    return np.random.Generator(np.random.PCG64(seed))


def _truncated(seed, shape, mean, stddev):
    g = _pcg(seed)
    draw = g.standard_normal(shape)
    while (np.abs(draw) > 2.0).any():
        bad = np.abs(draw) > 2.0
        draw[bad] = g.standard_normal(int(bad.sum()))
    return draw * stddev + mean


def _categorical(seed, logits, num_samples):
    u = _pcg(seed).random((logits.shape[0], num_samples))
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    cdf = np.cumsum(z / z.sum(axis=1, keepdims=True), axis=1)
    counts = (cdf[:, None, :] <= u[:, :, None]).sum(axis=2)
    return np.minimum(counts, logits.shape[1] - 1)


def _random_case(op, name, seed, shape, dtype, params, expected):
    sample(
        op,
        name,
        [],
        lambda: {"shape": shape, "dtype": dtype, "generator": tp.random.Generator(seed), **params},
        lambda: expected().astype(dtype),
        exact=True,
    )


_random_case(
    "random_normal",
    "f64",
    7,
    (3, 5),
    "float64",
    {"mean": 0.5, "stddev": 2.0},
    lambda: _pcg(7).standard_normal((3, 5)) * 2.0 + 0.5,
)
_random_case(
    "random_normal",
    "f32",
    8,
    (4,),
    "float32",
    {"mean": 0.0, "stddev": 1.0},
    lambda: _pcg(8).standard_normal((4,)) * 1.0 + 0.0,
)
sample(
    "random_normal",
    "shaped-like-input",
    [np.zeros((2, 3))],
    lambda x: {"shape": None, "dtype": "float64", "generator": tp.random.Generator(12), "mean": 1.0, "stddev": 2.0},
    lambda x: _pcg(12).standard_normal((2, 3)) * 2.0 + 1.0,
    exact=True,
)
_random_case(
    "random_uniform",
    "f64",
    9,
    (2, 3, 2),
    "float64",
    {"minval": -2.0, "maxval": 3.0},
    lambda: _pcg(9).uniform(-2.0, 3.0, (2, 3, 2)),
)
_random_case(
    "truncated_normal",
    "f64-redraws",
    10,
    (60,),
    "float64",
    {"mean": 1.0, "stddev": 0.5},
    lambda: _truncated(10, (60,), 1.0, 0.5),
)
_random_case(
    "truncated_normal",
    "f32",
    11,
    (3, 4),
    "float32",
    {"mean": 0.0, "stddev": 1.0},
    lambda: _truncated(11, (3, 4), 0.0, 1.0),
)
sample(
    "categorical",
    "3x5",
    [normal(3, 5)],
    lambda logits: {"num_samples": 7, "generator": tp.random.Generator(12)},
    lambda logits: _categorical(12, logits, 7),
    exact=True,
)
_random_case("random_gamma", "f32", 13, (3, 4), "float32", {"alpha": 2.5}, lambda: _pcg(13).standard_gamma(2.5, (3, 4)))
_random_case(
    "random_beta", "f64", 14, (5,), "float64", {"alpha": 2.0, "beta": 3.0}, lambda: _pcg(14).beta(2.0, 3.0, (5,))
)
_random_case(
    "random_binomial",
    "f32",
    15,
    (2, 3),
    "float32",
    {"counts": 7, "probabilities": 0.4},
    lambda: _pcg(15).binomial(7, 0.4, (2, 3)),
)
_random_case(
    "random_integers", "i32", 16, (6,), "int32", {"minval": -3, "maxval": 4}, lambda: _pcg(16).integers(-3, 4, (6,))
)


def _sampler_attrs(distribution, seed, unique=False):
    return lambda t: {
        "num_true": 2,
        "num_sampled": 6,
        "unique": unique,
        "range_max": 9,
        "distribution": distribution,
        "unigrams": (),
        "distortion": 1.0,
        "generator": tp.random.Generator(seed),
    }


def _log_uniform_oracle(seed, true_classes):
    classes = np.arange(9.0)
    p = np.log((classes + 2) / (classes + 1)) / np.log(10.0)
    draws = np.clip(np.floor(np.exp(_pcg(seed).random(6) * np.log(10.0))) - 1, 0, 8).astype(np.int64)
    return draws, (p[true_classes] * 6).astype(np.float32), (p[draws] * 6).astype(np.float32)


sample(
    "candidate_sampler",
    "uniform",
    [np.array([[0, 3], [8, 1]])],
    _sampler_attrs("uniform", 5),
    lambda t: (_pcg(5).integers(0, 9, 6), np.full(t.shape, 6 / 9, np.float32), np.full(6, 6 / 9, np.float32)),
)
sample(
    "candidate_sampler",
    "log-uniform",
    [np.array([[0, 3], [8, 1]])],
    _sampler_attrs("log_uniform", 6),
    lambda t: _log_uniform_oracle(6, t),
)
sample(
    "random_permutation",
    "9",
    [],
    lambda: {"n": 9, "generator": tp.random.Generator(13)},
    lambda: _pcg(13).permutation(9),
    exact=True,
)


# ------------------------------------------------------------- optimizers
def np_adam(param, m, v, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * np.square(grad)
    step_size = lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)
    eps = epsilon if epsilon_on_sqrt_v else epsilon * math.sqrt(1 - beta2**step)
    return param - step_size * m / (np.sqrt(v) + eps), m, v


_ADAM = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7}
sample(
    "adam_update",
    "step-3",
    [normal(3, 4), normal(3, 4), positive(3, 4), normal(3, 4), np.array(0.01), np.array(3.0)],
    _ADAM,
    lambda p, m, v, g, lr, step: np_adam(p, m, v, g, lr, step, **_ADAM),
)
sample(
    "adam_update",
    "step-1-zero-slots",
    [normal(5), np.zeros(5), np.zeros(5), normal(5), np.array(0.01), np.array(1.0)],
    _ADAM,
    lambda p, m, v, g, lr, step: np_adam(p, m, v, g, lr, step, **_ADAM),
)
sample(
    "adam_update",
    "keras-epsilon",
    [normal(5), normal(5), positive(5), normal(5), np.array(0.1), np.array(2.0)],
    {**_ADAM, "epsilon": 0.1, "epsilon_on_sqrt_v": True},
    lambda p, m, v, g, lr, step: np_adam(p, m, v, g, lr, step, **{**_ADAM, "epsilon": 0.1}, epsilon_on_sqrt_v=True),
)
sample(
    "adamw_update",
    "keras-epsilon",
    [normal(3, 4), normal(3, 4), positive(3, 4), normal(3, 4), np.array(0.1), np.array(2.0)],
    {**_ADAM, "weight_decay": 0.3, "epsilon_on_sqrt_v": True},
    lambda p, m, v, g, lr, step: np_adam(p - p * lr * 0.3, m, v, g, lr, step, **_ADAM, epsilon_on_sqrt_v=True),
)


def np_sparse_adam(param, m, v, indices, grad, lr, step, **settings):
    rows = np.where(indices < 0, indices + param.shape[0], indices)
    outs = [param.copy(), m.copy(), v.copy()]
    for out, part in zip(outs, np_adam(param[rows], m[rows], v[rows], grad, lr, step, **settings), strict=True):
        out[rows] = part
    return tuple(outs)


sample(
    "sparse_adam_update",
    "rows",
    [normal(6, 3), normal(6, 3), positive(6, 3), np.array([4, 0, -1]), normal(3, 3), np.array(0.01), np.array(3.0)],
    _ADAM,
    lambda p, m, v, i, g, lr, step: np_sparse_adam(p, m, v, i, g, lr, step, **_ADAM),
)
sample(
    "sparse_adam_update",
    "keras-epsilon-3d",
    [normal(4, 2, 3), normal(4, 2, 3), positive(4, 2, 3), np.array([2, 1]), normal(2, 2, 3)]
    + [np.array(0.1), np.array(2.0)],
    {**_ADAM, "epsilon": 0.1, "epsilon_on_sqrt_v": True},
    lambda p, m, v, i, g, lr, step: np_sparse_adam(
        p, m, v, i, g, lr, step, **{**_ADAM, "epsilon": 0.1}, epsilon_on_sqrt_v=True
    ),
)
sample(
    "sparse_adam_update",
    "no-rows",
    [normal(3, 2), normal(3, 2), positive(3, 2), np.zeros((0,), np.int64), normal(0, 2)]
    + [np.array(0.01), np.array(1.0)],
    _ADAM,
    lambda p, m, v, i, g, lr, step: (p, m, v),
)


def np_sgd_momentum(param, m, grad, lr, momentum, nesterov):
    m = momentum * m - lr * grad
    return (param + momentum * m - lr * grad if nesterov else param + m), m


for _nesterov in (False, True):
    sample(
        "sgd_momentum_update",
        "nesterov" if _nesterov else "plain",
        [normal(3, 4), normal(3, 4), normal(3, 4), np.array(0.05)],
        {"momentum": 0.9, "nesterov": _nesterov},
        lambda p, m, g, lr, n=_nesterov: np_sgd_momentum(p, m, g, lr, 0.9, n),
    )


def np_rmsprop(param, velocity, grad, lr, *slots, rho, momentum, epsilon, centered):
    velocity = rho * velocity + (1 - rho) * np.square(grad)
    average = rho * slots[-1] + (1 - rho) * grad if centered else 0.0
    step = lr * grad / np.sqrt(velocity - np.square(average) + epsilon)
    moment = momentum * slots[0] + step if momentum else None
    outs = [v for v in (moment, average if centered else None) if v is not None]
    return (param - (step if moment is None else moment), velocity, *outs)


for _momentum, _centered in ((0.0, False), (0.5, False), (0.0, True), (0.5, True)):
    _rms = {"rho": 0.8, "momentum": _momentum, "epsilon": 1e-3, "centered": _centered}
    sample(
        "rmsprop_update",
        f"momentum-{_momentum}-centered-{_centered}",
        [normal(2, 5), positive(2, 5), normal(2, 5), np.array(0.01)]
        + [normal(2, 5)] * (_momentum > 0)
        + [0.3 * normal(2, 5)] * _centered,
        _rms,
        lambda *arrays, attrs=_rms: np_rmsprop(*arrays, **attrs),
    )


def np_adagrad(param, accumulator, grad, lr, epsilon):
    accumulator = accumulator + np.square(grad)
    return param - lr * grad / np.sqrt(accumulator + epsilon), accumulator


sample(
    "adagrad_update",
    "epsilon",
    [normal(3, 4), positive(3, 4), normal(3, 4), np.array(0.1)],
    {"epsilon": 1e-3},
    lambda p, a, g, lr: np_adagrad(p, a, g, lr, 1e-3),
)


# ------------------------------------------------------------- word2vec
def np_sgns(syn0, syn1, ids, offsets, keep, cum, alpha_start, alpha_end, seed, window, negative, threads):
    """Skip-gram negative sampling, one window at a time, with the kernel's draws (one thread)."""
    syn0, syn1, counts = syn0.copy(), syn1.copy(), np.zeros(3, np.int64)
    draws = skipgram.sgns_windows(
        ids, offsets, keep, cum, 0, len(ids), window, negative, alpha_start, alpha_end, int(seed), counts
    )
    for ctx, out, lr in draws:
        scores = syn0[ctx] @ syn1[out].T
        labels = (np.arange(len(out)) == 0).astype(float)
        g = lr * (labels - 1 / (1 + np.exp(-scores))) * ((out != out[0]) | (np.arange(len(out)) == 0))
        update0, update1 = g @ syn1[out], g.T @ syn0[ctx]
        np.add.at(syn1, out, update1)
        np.add.at(syn0, ctx, update0)
    return syn0, syn1, counts


_W2V_IDS = ints(0, 9, 60)
_W2V_COUNTS = np.bincount(_W2V_IDS, minlength=9) + 1
sample(
    "word2vec_sgns_train",
    "subsampled-two-sentences",
    [
        normal(9, 4),
        normal(9, 4) * 0.1,
        _W2V_IDS,
        np.array([0, 25, 60]),
        np.minimum(1.0, 4.0 / _W2V_COUNTS),
        skipgram.negative_table(_W2V_COUNTS),
        np.array(0.05),
        np.array(0.01),
        np.array(3),
    ],
    {"window": 3, "negative": 4, "threads": 1},
    lambda *a: np_sgns(*a, window=3, negative=4, threads=1),
)


# ----------------------------------------------------------- custom_gradient
def _product_and_sine_attrs(x, y):
    """Attrs of the custom_gradient op for (x * y, sin(x)) with a hand-written VJP."""
    tx, ty = tp.tensor(x), tp.tensor(y)

    def grad_fn(g_prod, g_sin):
        return g_prod * ty + g_sin * tp.cos(tx), g_prod * tx

    outs = (tp.tensor(x * y), tp.tensor(np.sin(x)))
    return {"outputs": outs, "grad_fn": grad_fn, "variables": ()}


@tp.custom_gradient
def product_and_sine(x, y):
    def grad_fn(g_prod, g_sin):
        return g_prod * y + g_sin * tp.cos(x), g_prod * x

    return (x * y, tp.sin(x)), grad_fn


sample(
    "custom_gradient", "apply", [normal(3, 2), normal(3, 2)], _product_and_sine_attrs, lambda x, y: (x * y, np.sin(x))
)
sample(
    "custom_gradient",
    "second-output-only",
    [normal(4), normal(4)],
    _product_and_sine_attrs,
    lambda x, y: (x * y, np.sin(x)),
    used=(1,),
)
sample(
    "custom_gradient",
    "decorator",
    [normal(2, 3), normal(2, 3)],
    _product_and_sine_attrs,
    lambda x, y: (x * y, np.sin(x)),
    call=lambda tensors: tuple(product_and_sine(*tensors)),
)


_KEY = "/worker:0/cpu:0;/worker:1/cpu:0;x"


@contextlib.contextmanager
def _sending(arrays):
    """A rendezvous that must hold the first input under _KEY when the block ends."""
    with transfer.rendezvous({}) as table:
        yield
    np.testing.assert_array_equal(table.pop(_KEY), arrays[0])
    assert table == {}


def _receiving(arrays):
    return transfer.rendezvous({"k": np.asarray(arrays[0])})


def _sent(tensors):
    with _sending([tensors[0].numpy()]):
        return transfer.send(tensors[0], key=_KEY)


def _received(tensors):
    with _receiving([tensors[0].numpy()]) as table:
        out = transfer.recv("k", (None, 2), "float64")
    assert table == {}  # taken out
    return (out,)


sample("send", "into-the-rendezvous", [normal(2, 3)], {"key": _KEY}, lambda x: (), call=_sent, around=_sending)
sample(
    "recv",
    "out-of-the-rendezvous",
    [normal(4, 2)],  # what was sent; the op itself has no inputs
    {"key": "k", "shape": (None, 2), "dtype": "float64"},
    lambda x: x,
    call=_received,
    aliases=(),
    around=_receiving,
)


sample(
    "copy_to_device",
    "onto-its-own-device",  # the one device every backend has; tests/graph/test_node_devices.py crosses devices
    [normal(2, 3)],
    {"source": "cpu:0", "device": "cpu:0"},
    lambda x: x,
    call=lambda tensors: (transfer.copy_to_device(tensors[0], tensors[0].device),),
)


# ------------------------------------------------------- queue ops (tapeflow.queue.graph_ops)
def _queue_holding(batch, closed=False):
    """A fresh float64 queue holding the rows of `batch` (the kernels take the queue object)."""
    q = tp.queue.FIFOQueue(max(len(batch), 1), "float64", shapes=[batch.shape[1:]])
    q.enqueue_many(batch)
    if closed:
        q.close()
    return q


def _dequeue_attrs(batch, closed=False, **more):
    shapes = (tuple(batch.shape[1:]),)
    return {"queue": _queue_holding(batch, closed), "dtypes": ("float64",), "shapes": shapes, "timeout": 5.0, **more}


sample(
    "queue_enqueue",
    "one-element",
    [normal(2, 3)],
    lambda x: {"queue": tp.queue.FIFOQueue(1, "float64", shapes=[(2, 3)]), "timeout": 5.0},
    lambda x: (),
)
sample(
    "queue_enqueue_many",
    "three-elements",
    [normal(3, 2)],
    lambda x: {"queue": tp.queue.FIFOQueue(3, "float64", shapes=[(2,)]), "timeout": 5.0},
    lambda x: (),
)
sample("queue_dequeue", "one-element", [normal(2, 3)], lambda x: _dequeue_attrs(x[None]), lambda x: x, aliases=())
sample("queue_dequeue_many", "a-batch", [normal(4, 2)], lambda x: _dequeue_attrs(x, n=4), lambda x: x, aliases=())
sample(
    "queue_dequeue_up_to",
    "what-a-closed-queue-holds",
    [normal(3, 2)],
    lambda x: _dequeue_attrs(x, closed=True, n=5),
    lambda x: x,
    aliases=(),
)
sample("queue_close", "an-open-queue", [], lambda: {"queue": _queue_holding(normal(1, 2))}, lambda: ())
sample(
    "queue_size",
    "three-elements",
    [normal(3, 2)],
    lambda x: {"queue": _queue_holding(x)},
    lambda x: np.int32(3),
    aliases=(),
    exact=True,
)


# ------------------------------------------------------- Keras array ops (array_keras.py)
sample("sort", "axis-1", [grid(3, 4)], {"axis": 1}, lambda x: np.sort(x, axis=1))
sample("sort", "axis-0-3d", [grid(3, 2, 2)], {"axis": 0}, lambda x: np.sort(x, axis=0))
sample("sort", "int64", [ints(-5, 5, 2, 6)], {"axis": 1}, lambda x: np.sort(x, axis=1))
sample("argsort", "axis-1", [grid(3, 4)], {"axis": 1}, lambda x: np.argsort(x, axis=1).astype(np.int32))
sample("argsort", "ties-stable", [ints(0, 3, 8)], {"axis": 0}, lambda x: np.argsort(x, kind="stable").astype(np.int32))
sample(
    "take_along_axis",
    "repeats-negative",
    [normal(3, 4), np.array([[0, 0, -1], [3, 1, 1], [2, -4, 0]])],
    {"axis": 1},
    lambda x, i: np.take_along_axis(x, i % 4, axis=1),
)
sample(
    "take_along_axis",
    "axis-0",
    [normal(3, 2), np.array([[2, 0]])],
    {"axis": 0},
    lambda x, i: np.take_along_axis(x, i, axis=0),
)


def _put_along_axis_add(x, i, u, axis):
    out = x.copy()
    np.add.at(out, tuple(i % x.shape[axis] if k == axis else np.indices(i.shape)[k] for k in range(x.ndim)), u)
    return out


sample(
    "put_along_axis_add",
    "repeats",
    [normal(2, 4), np.array([[0, 0, 3], [1, -1, 2]]), normal(2, 3)],
    {"axis": 1},
    lambda x, i, u: _put_along_axis_add(x, i, u, 1),
)
sample(
    "searchsorted",
    "left",
    [np.array([0.1, 0.5, 0.5, 2.0]), np.array([[0.5, -1.0], [3.0, 0.2]])],
    {"side": "left"},
    lambda s, v: np.searchsorted(s, v, side="left").astype(np.int32),
)
sample(
    "searchsorted",
    "right-int64",
    [np.array([1, 3, 3, 7]), ints(0, 9, 5)],
    {"side": "right"},
    lambda s, v: np.searchsorted(s, v, side="right").astype(np.int32),
)
sample(
    "unravel_index",
    "2x3x4",
    [np.array([[0, 23], [5, 13]])],
    {"shape": (2, 3, 4)},
    lambda i: tuple(c.astype(np.int32) for c in np.unravel_index(i, (2, 3, 4))),
)
sample("view", "float32-as-int32", [normal(2, 3).astype(np.float32)], {"dtype": "int32"}, lambda x: x.view(np.int32))
sample("view", "float64-as-int32", [normal(2, 3)], {"dtype": "int32"}, lambda x: x.view(np.int32))


# ------------------------------------------------------------- linalg (linalg.py)
def _sym(a):
    return 0.5 * (a + np.swapaxes(a, -1, -2))


def _spd(*batch, n=3):
    a = normal(*batch, n, n)
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


# cholesky and eigh read the lower triangle and give the gradient of the symmetric part
sample("cholesky", "batch", [_spd(2)], {}, lambda a: np.linalg.cholesky(_sym(a)))
sample("eigh", "batch", [_spd(2)], {}, lambda a: np.linalg.eigh(_sym(a)), grad_tol=1e-5)
sample("qr", "tall", [normal(4, 3)], {"mode": "reduced"}, lambda a: np.linalg.qr(a))
sample("qr", "square-batch", [normal(2, 3, 3)], {"mode": "reduced"}, lambda a: np.linalg.qr(a))
for _name, _shape in (("tall", (4, 3)), ("wide", (2, 4))):
    sample(
        "svd",
        _name,
        [normal(*_shape)],
        {"full_matrices": False},
        lambda a: np.linalg.svd(a, full_matrices=False),
        grad_tol=1e-5,
    )
sample("solve", "batch-broadcast", [normal(2, 3, 3) + 3 * np.eye(3), normal(3, 2)], {}, np.linalg.solve)
for _lower, _tri in ((True, np.tril), (False, np.triu)):
    sample(
        "solve_triangular",
        f"lower-{_lower}",
        [normal(3, 3) + 3 * np.eye(3), normal(3, 2)],
        {"lower": _lower},
        lambda a, b, t=_tri: np.linalg.solve(t(a), b),
    )
sample("inv", "batch", [normal(2, 3, 3) + 3 * np.eye(3)], {}, np.linalg.inv)
sample("det", "batch", [normal(2, 3, 3)], {}, np.linalg.det)
sample("slogdet", "batch", [normal(2, 3, 3)], {}, np.linalg.slogdet, used=(1,))
sample(
    "lu_factor",
    "square",
    [normal(4, 4)],
    {},
    lambda a: (scipy.linalg.lu_factor(a)[0], scipy.linalg.lu_factor(a)[1].astype(np.int32)),
)


# ===================================================================== helpers
def _as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, tuple | list) else (value,)


def _params(kind: str, ops=None, need_floats=False):
    out = []
    for op_name in sorted(SAMPLES):
        if ops is not None and op_name not in ops:
            continue
        for case in SAMPLES[op_name]:
            if ops is not None and case.name not in ops[op_name]:
                continue
            if need_floats and (not _float_inputs(case) or registry.get_op(op_name).num_outputs == 0):
                continue  # nothing to differentiate, or nothing to differentiate it by (send)
            marks = []
            if kind in case.bugs:
                marks = [pytest.mark.xfail(strict=True, reason=case.bugs[kind])]
            out.append(pytest.param(op_name, case, id=f"{op_name}-{case.name}", marks=marks))
    return out


def _op_inputs(case: Case, values: list) -> list:
    """The op's inputs, given one value per case input."""
    return values if case.aliases is None else [values[j] for j in case.aliases]


def _run(op, case: Case, tensors: list) -> tuple:
    """Run the case on one tensor per case input; return the outputs as a tuple."""
    if case.call is not None:
        return _as_tuple(case.call(tensors))
    out = registry.apply(op, tuple(_op_inputs(case, tensors)), case.make_attrs())
    return (out,) if op.num_outputs == 1 else tuple(out)


def _assert_matches(actual, expected, exact: bool, what: str, check_dtype: bool = True) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if check_dtype:
        assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if expected.dtype.kind == "f" and not exact:
        rtol = 1e-10 if expected.dtype == np.float64 else 1e-6
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * 1e-2, err_msg=what)
    else:
        np.testing.assert_array_equal(actual, expected.astype(actual.dtype, copy=False), err_msg=what)


def _float_inputs(case: Case) -> list[int]:
    return [i for i, a in enumerate(case.inputs) if np.asarray(a).dtype.kind == "f"]


def _weighted_sum(outputs, cotangents):
    """sum_k sum(outputs[k] * cotangents[k]), with outputs taken as float64."""
    total = None
    for o, c in zip(outputs, cotangents, strict=True):
        term = tp.sum(tp.cast(o, "float64") * tp.tensor(c))
        total = term if total is None else total + term
    return total


def _used(case: Case, outputs) -> list:
    """The outputs a gradient test differentiates (the others stay unconnected)."""
    return [outputs[k] for k in case.used] if case.used is not None else list(outputs)


def _tape_gradient(op, case: Case, arrays, cotangents, floats):
    tensors = [tp.tensor(a) for a in arrays]
    sources = [tensors[i] for i in floats]
    with tp.GradientTape() as tape:
        tape.watch(sources)
        target = _weighted_sum(_used(case, _run(op, case, tensors)), cotangents)
    return tape.gradient(target, sources)


def _finite_difference(f, arrays, i: int, eps: float) -> np.ndarray:
    """Central differences of scalar f(*arrays) with respect to arrays[i]."""
    arrays = [np.array(a, copy=True) for a in arrays]
    x = arrays[i]
    grad = np.zeros(x.shape)
    for j in np.ndindex(x.shape):
        orig = x[j]
        x[j] = orig + eps
        up = f(*arrays)
        x[j] = orig - eps
        down = f(*arrays)
        x[j] = orig
        grad[j] = (up - down) / (2 * eps)
    return grad


# ----------------------------------------------- Keras's ops.math (math.py)
def _segments(kind, x, ids, n):
    init = {"sum": 0.0, "max": -np.inf, "min": np.inf, "prod": 1.0}[kind]
    out = np.full((n + 1, *x.shape[1:]), init)
    ufunc = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}[kind]
    ufunc.at(out, np.where((ids >= 0) & (ids < n), ids, n), x)
    return out[:-1]


sample("erfinv", "3x4", [_RNG.uniform(-0.9, 0.9, (3, 4))], {}, np.vectorize(lambda v: _erfinv(v)))
sample(
    "segment_sum",
    "dropped-and-empty",
    [normal(5, 3), np.array([0, 3, 0, -1, 5])],
    {"num_segments": 4},
    lambda x, i: _segments("sum", x, i, 4),
)
for _kind in ("max", "min"):
    sample(
        f"segment_{_kind}",
        "rows",
        [grid(5, 2), np.array([0, 2, 0, 1, 2])],
        {"num_segments": 3},
        lambda x, i, k=_kind: _segments(k, x, i, 3),
    )
sample(
    "segment_prod",
    "rows",
    [positive(5, 2), np.array([1, 0, 1, 1, 0])],
    {"num_segments": 2},
    lambda x, i: _segments("prod", x, i, 2),
)
sample(
    "top_k",
    "k2",
    [grid(3, 5)],
    {"k": 2, "sorted": True},
    lambda x: (-np.sort(-x, axis=-1)[..., :2], np.argsort(-x, axis=-1)[..., :2].astype(np.int32)),
    used=(0,),
)
_ROOT = normal(2, 3, 3)
_SPD = _ROOT @ _ROOT.transpose(0, 2, 1) + 3 * np.eye(3)  # symmetric positive definite whatever the draw
sample("logdet", "spd-batch", [_SPD], {}, lambda a: np.linalg.slogdet(a)[1])
sample("logdet_grad", "spd-batch", [_SPD], {}, lambda a: np.linalg.inv(a).transpose(0, 2, 1))
sample(
    "dft",
    "fft-last",
    [normal(3, 4), normal(3, 4)],
    {"axes": (-1,), "inverse": False},
    lambda r, i: (np.fft.fft(r + 1j * i).real, np.fft.fft(r + 1j * i).imag),
)
sample(
    "dft",
    "ifft2",
    [normal(2, 3, 4), normal(2, 3, 4)],
    {"axes": (-2, -1), "inverse": True},
    lambda r, i: (np.fft.ifft2(r + 1j * i).real, np.fft.ifft2(r + 1j * i).imag),
)


def _erfinv(y, steps=60):
    """erf^-1 by bisection, independent of scipy's."""
    lo, hi = -6.0, 6.0
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if math.erf(mid) < y else (lo, mid)
    return (lo + hi) / 2


# -------------------------------------------------------------- control flow
def _subgraph(fn, *specs):
    from tapeflow.graph.trace import trace

    return trace(fn, tuple(tp.TensorSpec(shape, dtype) for shape, dtype in specs))


def _cond_attrs(p, x, y):
    then_graph = _subgraph(lambda a, b: a * b + tp.sin(a), ((3, 2), "float64"), ((3, 2), "float64"))
    else_graph = _subgraph(lambda a: tp.exp(a), ((3, 2), "float64"))
    return {
        "then_graph": then_graph,
        "else_graph": else_graph,
        "then_map": (0, 1),
        "else_map": (0,),
        "output_specs": (((3, 2), "float64"),),
        "structure": then_graph.output_structure,
    }


for _pred in (True, False):
    sample(
        "cond",
        f"pred-{_pred}",
        [np.array(_pred), normal(3, 2), normal(3, 2)],
        _cond_attrs,
        lambda p, x, y: x * y + np.sin(x) if p else np.exp(x),
    )


def _while_attrs(i, y, x, *grads, maximum_iterations=None):
    cond_graph = _subgraph(lambda i, y: i < 3, ((), "int64"), ((3,), "float64"))
    body_graph = _subgraph(lambda i, y, x: (i + 1, y * x), ((), "int64"), ((3,), "float64"), ((3,), "float64"))
    return {
        "cond_graph": cond_graph,
        "body_graph": body_graph,
        "cond_map": (),
        "body_map": (0,),
        "n_vars": 2,
        "maximum_iterations": maximum_iterations,
        "output_specs": (((), "int64"), ((3,), "float64")),
    }


sample("while_loop", "three-steps", [np.array(0), normal(3), normal(3)], _while_attrs, lambda i, y, x: (3, y * x**3))
sample(
    "while_loop",
    "maximum-iterations",
    [np.array(0), normal(3), normal(3)],
    lambda i, y, x: _while_attrs(i, y, x, maximum_iterations=2),
    lambda i, y, x: (2, y * x**2),
)


def _while_grad_attrs(*inputs):
    from tapeflow.graph.control import _body_gradient_graph

    attrs = _while_attrs(*inputs)
    return {**attrs, "body_grad_graph": _body_gradient_graph(attrs)}


sample(
    "while_loop_grad",
    "three-steps",
    [np.array(0), normal(3), normal(3), np.array(0), normal(3)],
    _while_grad_attrs,
    lambda i, y, x, gi, gy: (0, gy * x**3, gy * y * 3 * x**2),
)


# ------------------------------------------------------- fused layer epilogues
def _biased(y, b, activation):
    y = y + b
    return np.maximum(y, 0) if activation == "relu" else y


for _act in ("relu", "linear"):
    sample(
        "fused_matmul",
        _act,
        [normal(4, 5), normal(5, 3), normal(3)],
        {"activation": _act},
        lambda a, w, b, act=_act: _biased(a @ w, b, act),
    )
    _attrs = {"strides": (2, 1), "padding": "SAME", "dilations": (1, 1), "activation": _act}
    sample(
        "fused_conv2d",
        _act,
        [normal(2, 5, 4, 2), normal(3, 2, 2, 3), normal(3)],
        _attrs,
        lambda x, w, b, act=_act: _biased(np_conv2d(x, w, (2, 1), "SAME", (1, 1)), b, act),
    )


# ------------------------------------------------------- descent on a product
sample(
    "sgd_matmul_update",
    "weight-gradient",
    [normal(4, 3), normal(5, 4).T, normal(5, 3), np.array(0.05)],
    {},
    lambda p, a, b, lr: p - lr * (a @ b),
)
sample(
    "sgd_matmul_update",
    "large-rate",
    [normal(2, 6), normal(2, 3), normal(3, 6), np.array(1.5)],
    {},
    lambda p, a, b, lr: p - lr * (a @ b),
)


# ======================================================================= tests
def test_every_op_has_samples():
    registered = {op.name for op in registry.all_ops()}
    missing = sorted(registered - set(SAMPLES))
    unknown = sorted(set(SAMPLES) - registered)
    assert not missing, f"ops without samples in SAMPLES: {missing}"
    assert not unknown, f"SAMPLES names ops that are not registered: {unknown}"
    untested = [
        op.name
        for op in registry.all_ops()
        if op.differentiable and not any(_float_inputs(c) for c in SAMPLES[op.name])
    ]
    assert not untested, f"differentiable ops without a float-input sample: {untested}"


@pytest.mark.parametrize("op", registry.all_ops(), ids=lambda op: op.name)
def test_op_is_differentiable_unless_listed(op):
    assert op.differentiable == (op.name not in NOT_DIFFERENTIABLE), (
        f"{op.name}: vjp is {'set' if op.differentiable else 'None'}; update NOT_DIFFERENTIABLE if that is intended"
    )


@pytest.mark.parametrize(("op_name", "case"), _params("forward"))
def test_forward_matches_numpy(op_name, case):
    op = registry.get_op(op_name)
    expected = [np.asarray(e) for e in _as_tuple(case.expected(*case.inputs))]
    tensors = [tp.tensor(a) for a in case.inputs]
    outputs = _run(op, case, tensors)
    assert len(outputs) == len(expected), f"{op_name}: {len(outputs)} outputs"
    for k, (o, e) in enumerate(zip(outputs, expected, strict=True)):
        _assert_matches(o.numpy(), e, case.exact, f"{op_name} output {k} (apply)")

    specs = op.infer(*_op_inputs(case, tensors), **case.make_attrs())
    # A None dimension in the rule is one known only when the op runs (unique_sum's row count).
    ruled = [(tuple(s), d) for s, d in specs]
    got = [
        (tuple(None if r is None else n for r, n in zip(s, o.shape, strict=True)), o.dtype)
        for (s, _), o in zip(ruled, outputs, strict=True)
    ]
    assert ruled == got, f"{op_name}: infer gives {specs}"

    for label, fn in (("reference", op.reference), ("cpu kernel", op.kernel("cpu"))):
        arrays = [np.array(a, copy=True) for a in case.inputs]
        with case.around(arrays) if case.around is not None else contextlib.nullcontext():
            raw = fn(*_op_inputs(case, arrays), **case.make_attrs())
        raw = (raw,) if op.num_outputs == 1 else tuple(raw)
        assert len(raw) == len(expected)
        for k, (r, e) in enumerate(zip(raw, expected, strict=True)):
            _assert_matches(r, e, case.exact, f"{op_name} output {k} ({label})", check_dtype=False)
        for a, orig in zip(arrays, case.inputs, strict=True):
            np.testing.assert_array_equal(a, orig, err_msg=f"{op_name} ({label}) changed an input")


@pytest.mark.parametrize(("op_name", "case"), _params("vjp", need_floats=True))
def test_vjp_matches_finite_differences(op_name, case):
    """Cases without float inputs (random, logical, int-only) have nothing to differentiate;
    test_op_is_differentiable_unless_listed covers them."""
    op = registry.get_op(op_name)
    floats = _float_inputs(case)
    rng = np.random.default_rng(7)
    expected = _used(case, _as_tuple(case.expected(*case.inputs)))
    cotangents = [rng.standard_normal(np.shape(e)) for e in expected]
    grads = _tape_gradient(op, case, case.inputs, cotangents, floats)
    if not op.differentiable:
        assert all(g is None for g in grads), f"{op_name} is not differentiable but got gradients"
        return

    def objective(*arrays):
        outs = _used(case, _as_tuple(case.expected(*arrays)))
        return sum(float(np.sum(c * np.asarray(o, dtype=np.float64))) for c, o in zip(cotangents, outs, strict=True))

    for i, g in zip(floats, grads, strict=True):
        fd = _finite_difference(objective, case.inputs, i, case.fd_eps)
        if g is None:
            got = np.zeros_like(fd)
        else:
            assert g.dtype == tp.float64, f"{op_name}: gradient of input {i} has dtype {g.dtype}"
            got = g.numpy()
        assert got.shape == fd.shape, f"{op_name}: gradient of input {i} has shape {got.shape}"
        np.testing.assert_allclose(
            got, fd, rtol=case.grad_tol, atol=case.grad_tol, err_msg=f"{op_name}[{case.name}]: d/d input {i}"
        )


def test_custom_gradient_with_variable():
    v = tp.Variable(np.array([0.7, -1.3, 2.1]), name="scale")
    x_np = np.array([0.4, -0.9, 1.7])

    @tp.custom_gradient
    def scaled_sine(x):
        def grad_fn(g, variables):
            return g * tp.cos(x) * v, [g * tp.sin(x)]

        return tp.sin(x) * v, grad_fn

    x = tp.tensor(x_np)
    cot = np.array([1.5, -0.5, 2.0])
    with tp.GradientTape() as tape:
        tape.watch(x)
        target = tp.sum(scaled_sine(x) * tp.tensor(cot))
    gx, gv = tape.gradient(target, [x, v])
    np.testing.assert_allclose(gx.numpy(), cot * np.cos(x_np) * v.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gv.numpy(), cot * np.sin(x_np), rtol=1e-12)


# ----------------------------------------------------------- second order
SECOND_ORDER = {
    "exp": ["3x5"],
    "tanh": ["2x3x4"],
    "sigmoid": ["3x5"],
    "matmul": ["batch-broadcast", "sequence-by-matrix", "matrix-by-batch"],
    "conv2d": ["same-s2", "explicit-s21-d21"],
    "max_pool2d": ["same-k3-s2"],
    "sparse_softmax_cross_entropy_with_logits": ["5x4"],
    "logsumexp": ["axes-0-2"],
    "getitem": ["int-array-repeats", "negative-step"],
    "gather": ["rows-repeats", "axis-1"],
    # beyond the required handful
    "prod": ["axes-0-2", "zeros-in-rows"],
    "pow": ["broadcast"],
    "divide": ["broadcast"],
    "avg_pool2d": ["same-k3-s2"],
    "conv3d": ["same-s212-d121"],
    "depthwise_conv2d": ["same-s2-m2"],
    "max_pool3d": ["same-k323-s2"],
    "avg_pool3d": ["same-k323-s2"],
    "scatter_add": ["rows-repeats"],
    "erf": ["3x5"],
    "softplus": ["3x5"],
    "split": ["middle-part-only"],
    "where": ["broadcast"],
    "relu": ["3x5"],
}


@pytest.mark.parametrize(("op_name", "case"), _params("second_order", SECOND_ORDER))
def test_second_order_matches_finite_differences(op_name, case):
    """d/dx <grad L(x), v> from nested tapes against finite differences of grad L along v.

    L = sum(c1 * y) + sum(c2 * y * y) over the outputs y, so that the gradient depends on
    y and every op's VJP is itself differentiated.
    """
    op = registry.get_op(op_name)
    floats = _float_inputs(case)
    rng = np.random.default_rng(11)
    outs = _used(case, _as_tuple(case.expected(*case.inputs)))
    c1 = [rng.standard_normal(np.shape(o)) for o in outs]
    c2 = [rng.standard_normal(np.shape(o)) for o in outs]
    vs = [rng.standard_normal(case.inputs[i].shape) for i in floats]

    def first_order(arrays, outer=None):
        tensors = [tp.tensor(a) for a in arrays]
        sources = [tensors[i] for i in floats]
        if outer is not None:
            outer.watch(sources)
        with tp.GradientTape() as tape:
            tape.watch(sources)
            ys = _used(case, _run(op, case, tensors))
            loss = _weighted_sum(ys, c1) + _weighted_sum([y * y for y in ys], c2)
        grads = tape.gradient(loss, sources, unconnected_gradients="zero")
        return sources, grads

    with tp.GradientTape() as outer:
        sources, grads = first_order(case.inputs, outer)
        h = _weighted_sum(grads, vs)
    hvp = outer.gradient(h, sources, unconnected_gradients="zero")

    eps = 1e-5

    def shifted(sign):
        arrays = list(case.inputs)
        for i, v in zip(floats, vs, strict=True):
            arrays[i] = arrays[i] + sign * eps * v
        return [g.numpy() for g in first_order(arrays)[1]]

    for k, (got, up, down) in enumerate(zip(hvp, shifted(1), shifted(-1), strict=True)):
        np.testing.assert_allclose(
            got.numpy(),
            (up - down) / (2 * eps),
            rtol=1e-6,
            atol=1e-6,
            err_msg=f"{op_name}[{case.name}]: Hessian-vector product {k}",
        )
