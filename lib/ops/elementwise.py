"""The primitives behind `keras.ops.numpy` that no composite of other ops can give: inverse
trigonometric and hyperbolic functions, rounding, float predicates, integer and bitwise
arithmetic, remainders, cumulative products, quantiles and einsum.

Each function here takes tensors of the dtypes its op accepts; `tapeflow.ops.numpy` wraps
them with Keras's argument names and casts (an integer tensor given to `arcsin` is read as
float32 there, not here).

>>> import tapeflow as tp
>>> from tapeflow.ops import elementwise
>>> elementwise.arctan2(tp.tensor([1.0], "float64"), 1.0).numpy().round(4).tolist()
[0.7854]
"""

from __future__ import annotations

import string

import numpy as np
import scipy.special

from tapeflow import dtypes
from tapeflow.backends.common import ufunc_at
from tapeflow.ops import shapes
from tapeflow.ops.core import (
    broadcast_to,
    cast,
    expand_dims,
    reshape,
    restore_reduced_axes,
    sum,
    transpose,
    unbroadcast,
    zeros_like,
)
from tapeflow.ops.half import in_float32
from tapeflow.ops.math import binary_operands, cos, sqrt, square, where
from tapeflow.ops.registry import apply, as_tensor, defop, wrap_host
from tapeflow.tensor import Tensor

__all__ = [
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctan2",
    "arctanh",
    "bessel_i0",
    "bessel_i1",
    "bitwise_and",
    "bitwise_invert",
    "bitwise_left_shift",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "cbrt",
    "ceil",
    "cosh",
    "cumprod",
    "einsum",
    "expm1",
    "floor",
    "floor_divide",
    "fmod",
    "gcd",
    "isfinite",
    "isinf",
    "isnan",
    "lcm",
    "mod",
    "nextafter",
    "quantile",
    "round_half_even",
    "signbit",
    "sinh",
    "tan",
    "trunc",
]


# ------------------------------------------------------------------- unary
def _unary_fn(opdef):
    def fn(x) -> Tensor:
        return apply(opdef, (as_tensor(x, name=opdef.name),), {})

    fn.__name__ = fn.__qualname__ = opdef.name
    return fn


def _float_unary(name, reference, derivative):
    """An op on floating tensors whose VJP is g * derivative(x, y)."""
    return defop(name, infer=shapes.floating(name), vjp=lambda gs, xs, ys: (gs[0] * derivative(xs[0], ys[0]),))(
        reference
    )


_ARCSIN = _float_unary("arcsin", np.arcsin, lambda x, y: 1.0 / sqrt(1.0 - square(x)))
_ARCCOS = _float_unary("arccos", np.arccos, lambda x, y: -1.0 / sqrt(1.0 - square(x)))
_ARCTAN = _float_unary("arctan", np.arctan, lambda x, y: 1.0 / (1.0 + square(x)))
_ARCSINH = _float_unary("arcsinh", np.arcsinh, lambda x, y: 1.0 / sqrt(square(x) + 1.0))
_ARCCOSH = _float_unary("arccosh", np.arccosh, lambda x, y: 1.0 / sqrt(square(x) - 1.0))
_ARCTANH = _float_unary("arctanh", np.arctanh, lambda x, y: 1.0 / (1.0 - square(x)))
_SINH = _float_unary("sinh", np.sinh, lambda x, y: cosh(x))
_COSH = _float_unary("cosh", np.cosh, lambda x, y: sinh(x))
_TAN = _float_unary("tan", np.tan, lambda x, y: 1.0 / square(cos(x)))
_EXPM1 = _float_unary("expm1", np.expm1, lambda x, y: y + 1.0)
_CBRT = _float_unary("cbrt", np.cbrt, lambda x, y: 1.0 / (3.0 * square(y)))


def _i1_derivative(x, y):
    # I1'(x) = I0(x) - I1(x) / x, which tends to 1/2 at x = 0
    safe = where(x == 0.0, 1.0, x)
    return where(x == 0.0, 0.5, bessel_i0(x) - y / safe)


_I0 = _float_unary("bessel_i0", scipy.special.i0, lambda x, y: bessel_i1(x))
_I1 = _float_unary("bessel_i1", scipy.special.i1, _i1_derivative)

arcsin = _unary_fn(_ARCSIN)
arccos = _unary_fn(_ARCCOS)
arctan = _unary_fn(_ARCTAN)
arcsinh = _unary_fn(_ARCSINH)
arccosh = _unary_fn(_ARCCOSH)
arctanh = _unary_fn(_ARCTANH)
sinh = _unary_fn(_SINH)
cosh = _unary_fn(_COSH)
tan = _unary_fn(_TAN)
expm1 = _unary_fn(_EXPM1)
cbrt = _unary_fn(_CBRT)
bessel_i0 = _unary_fn(_I0)
bessel_i1 = _unary_fn(_I1)


# ---------------------------------------------------------------- rounding
def _zero_vjp(gs, xs, ys, **_):
    return (zeros_like(xs[0]),)


_FLOOR = defop("floor", infer=shapes.floating("floor"), vjp=_zero_vjp)(np.floor)
_CEIL = defop("ceil", infer=shapes.floating("ceil"), vjp=_zero_vjp)(np.ceil)
_TRUNC = defop("trunc", infer=shapes.floating("trunc"), vjp=_zero_vjp)(np.trunc)


@defop("round_half_even", infer=shapes.numeric("round_half_even"), vjp=_zero_vjp)
def _ROUND(x, decimals):
    return np.round(x, decimals)


floor = _unary_fn(_FLOOR)
ceil = _unary_fn(_CEIL)
trunc = _unary_fn(_TRUNC)


def round_half_even(x, decimals: int = 0) -> Tensor:
    """`x` rounded to `decimals` decimal places, halves to the even neighbour (NumPy's rule).

    >>> import tapeflow as tp
    >>> round_half_even(tp.tensor([0.5, 1.5, 2.25], "float64"), 1).numpy().tolist()
    [0.5, 1.5, 2.2]
    """
    x = as_tensor(x, name="round")
    return apply(_ROUND, (x,), {"decimals": shapes.as_int("round", "decimals", decimals, low=-shapes.MAX_DIM)})


# -------------------------------------------------------------- predicates
def _predicate_infer(name):
    def infer(x):
        return [(x.shape, dtypes.bool_)]

    return infer


_ISNAN = defop("isnan", infer=_predicate_infer("isnan"))(np.isnan)
_ISINF = defop("isinf", infer=_predicate_infer("isinf"))(np.isinf)
_ISFINITE = defop("isfinite", infer=_predicate_infer("isfinite"))(np.isfinite)
_SIGNBIT = defop("signbit", infer=_predicate_infer("signbit"))(np.signbit)

isnan = _unary_fn(_ISNAN)
isinf = _unary_fn(_ISINF)
isfinite = _unary_fn(_ISFINITE)
signbit = _unary_fn(_SIGNBIT)


# ------------------------------------------------------------------ binary
def _binary_fn(opdef):
    def fn(x1, x2) -> Tensor:
        a, b = binary_operands(x1, x2, opdef.name)
        return apply(opdef, (a, b), {})

    fn.__name__ = fn.__qualname__ = opdef.name
    return fn


def _arctan2_vjp(gs, xs, ys):
    g, (y, x) = gs[0], xs
    r2 = square(x) + square(y)
    return unbroadcast(g * x / r2, y.shape), unbroadcast(-g * y / r2, x.shape)


def _remainder_vjp(quotient):
    def vjp(gs, xs, ys):
        g, (x, y) = gs[0], xs
        return unbroadcast(g, x.shape), unbroadcast(-g * quotient(x / y), y.shape)

    return vjp


_ARCTAN2 = defop("arctan2", infer=shapes.binary("arctan2", kinds="f"), vjp=_arctan2_vjp)(np.arctan2)
_MOD = defop("mod", infer=shapes.binary("mod", kinds="if"), vjp=_remainder_vjp(lambda q: floor(q)))(np.mod)
_FMOD = defop("fmod", infer=shapes.binary("fmod", kinds="if"), vjp=_remainder_vjp(lambda q: trunc(q)))(np.fmod)
_FLOOR_DIVIDE = defop("floor_divide", infer=shapes.binary("floor_divide", kinds="if"))(np.floor_divide)
_NEXTAFTER = defop("nextafter", infer=shapes.binary("nextafter", kinds="f"))(np.nextafter)
_GCD = defop("gcd", infer=shapes.binary("gcd", kinds="i"))(np.gcd)
_LCM = defop("lcm", infer=shapes.binary("lcm", kinds="i"))(np.lcm)
_BITWISE_AND = defop("bitwise_and", infer=shapes.binary("bitwise_and", kinds="bi"))(np.bitwise_and)
_BITWISE_OR = defop("bitwise_or", infer=shapes.binary("bitwise_or", kinds="bi"))(np.bitwise_or)
_BITWISE_XOR = defop("bitwise_xor", infer=shapes.binary("bitwise_xor", kinds="bi"))(np.bitwise_xor)
_LEFT_SHIFT = defop("left_shift", infer=shapes.binary("left_shift", kinds="i"))(np.left_shift)
_RIGHT_SHIFT = defop("right_shift", infer=shapes.binary("right_shift", kinds="i"))(np.right_shift)


def _integer_or_bool(name):
    def infer(x):
        if x.dtype.kind not in "bi":
            raise TypeError(f"{name}: expected an integer or bool tensor, got {x.dtype}")
        return [(x.shape, x.dtype)]

    return infer


_INVERT = defop("bitwise_invert", infer=_integer_or_bool("bitwise_invert"))(np.invert)

arctan2 = _binary_fn(_ARCTAN2)
mod = _binary_fn(_MOD)
fmod = _binary_fn(_FMOD)
floor_divide = _binary_fn(_FLOOR_DIVIDE)
nextafter = _binary_fn(_NEXTAFTER)
gcd = _binary_fn(_GCD)
lcm = _binary_fn(_LCM)
bitwise_and = _binary_fn(_BITWISE_AND)
bitwise_or = _binary_fn(_BITWISE_OR)
bitwise_xor = _binary_fn(_BITWISE_XOR)
bitwise_left_shift = _binary_fn(_LEFT_SHIFT)
bitwise_right_shift = _binary_fn(_RIGHT_SHIFT)
bitwise_invert = _unary_fn(_INVERT)


# ----------------------------------------------------------------- cumprod
def _cumprod_infer(x, *, axis):
    if x.dtype.kind == "b":
        raise TypeError("cumprod: boolean input; cast it to a number first")
    shapes.normalize_axis("cumprod", axis, max(len(x.shape), 1))
    return [(tuple(x.shape), x.dtype)]


def _cumprod_vjp(gs, xs, ys, *, axis):
    # d y_j / d x_i = prod_{k <= j, k != i} x_k for j >= i: the running products of x with
    # its i-th entry replaced by one, one row per i (n^2 values along the axis)
    x, g = xs[0], gs[0]
    n = x.shape[axis]
    last = x.ndim - 1
    perm = tuple(a for a in range(x.ndim) if a != axis) + (axis,)
    xt, gt = transpose(x, perm), transpose(g, perm)
    eye = wrap_host(np.eye(n, dtype=bool), x.device)
    rows = where(eye, 1.0, expand_dims(xt, -2))
    products = apply(_CUMPROD, (rows,), {"axis": last + 1})
    upper = wrap_host(np.triu(np.ones((n, n), dtype=bool)), x.device)
    grad = sum(where(upper, expand_dims(gt, -2) * products, 0.0), (last + 1,))
    return (transpose(grad, tuple(int(i) for i in np.argsort(perm))),)


@defop("cumprod", infer=_cumprod_infer, vjp=_cumprod_vjp)
def _CUMPROD(x, *, axis):
    return np.cumprod(x, axis=axis, dtype=x.dtype)


@in_float32
def cumprod(x, axis: int) -> Tensor:
    """Running products along `axis`; the gradient is exact with zeros in `x`.

    >>> import tapeflow as tp
    >>> cumprod(tp.tensor([1.0, 2.0, 3.0]), 0).numpy().tolist()
    [1.0, 2.0, 6.0]
    """
    x = as_tensor(x, name="cumprod")
    return apply(_CUMPROD, (x,), {"axis": shapes.normalize_axis("cumprod", axis, max(x.ndim, 1))})


# ---------------------------------------------------------------- quantile
QUANTILE_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile_shape(x_shape, qs, scalar_q, axes, keepdims):
    reduced = shapes.reduced_shape(x_shape, axes, keepdims)
    return reduced if scalar_q else (len(qs),) + reduced


def _quantile_infer(x, *, qs, scalar_q, axes, keepdims, method, ignore_nan):
    if x.dtype.kind != "f":
        raise TypeError(f"quantile: expected a floating-point tensor, got {x.dtype}")
    return [(_quantile_shape(x.shape, qs, scalar_q, axes, keepdims), x.dtype)]


def _quantile_vjp(gs, xs, ys, *, qs, scalar_q, axes, keepdims, method, ignore_nan):
    x, g = xs[0], gs[0]
    attrs = {"qs": qs, "scalar_q": scalar_q, "axes": axes, "keepdims": keepdims, "method": method}
    weights = apply(_QUANTILE_WEIGHTS, (x,), {**attrs, "ignore_nan": ignore_nan})
    if scalar_q:
        return (restore_reduced_axes(g, x.shape, axes, keepdims) * weights,)
    g = restore_reduced_axes(g, (len(qs),) + x.shape, tuple(a + 1 for a in axes), keepdims)
    return (sum(g * weights, (0,)),)


@defop("quantile", infer=_quantile_infer, vjp=_quantile_vjp)
def _QUANTILE(x, *, qs, scalar_q, axes, keepdims, method, ignore_nan):
    q = qs[0] if scalar_q else np.asarray(qs, like=x)
    if x.size == 0:
        return _filled(_quantile_shape(x.shape, qs, scalar_q, axes, keepdims), np.nan, x.dtype, x)
    if ignore_nan and not isinstance(x, np.ndarray):  # a device array's module (CuPy) has no nanquantile
        return _nan_quantile_from_weights(x, qs=qs, scalar_q=scalar_q, axes=axes, keepdims=keepdims, method=method)
    fn = np.nanquantile if ignore_nan else np.quantile
    return fn(x, q, axis=axes, method=method, keepdims=keepdims).astype(x.dtype, copy=False)


def _nan_quantile_from_weights(x, *, qs, scalar_q, axes, keepdims, method):
    """nanquantile as the weighted sum of the order statistics each quantile interpolates
    (NaN where a row holds no number)."""
    weights = _QUANTILE_WEIGHTS.reference(
        x, qs=qs, scalar_q=scalar_q, axes=axes, keepdims=keepdims, method=method, ignore_nan=True
    )
    numbers = ~np.isnan(x)
    lead = 0 if scalar_q else 1
    summed = tuple(a + lead for a in axes)
    out = (weights * np.where(numbers, x, 0)).sum(axis=summed, keepdims=keepdims)
    empty = ~numbers.any(axis=axes, keepdims=keepdims)
    return np.where(empty, np.nan, out).astype(x.dtype, copy=False)


def _filled(shape, value, dtype, like):
    """np.full(shape, value, dtype) in the array module of `like` (np.full's like= hands CuPy a
    device= argument its full does not take)."""
    out = np.empty(shape, dtype=dtype, like=like)
    out.fill(value)
    return out


def _weights_infer(x, *, qs, scalar_q, axes, keepdims, method, ignore_nan):
    return [(x.shape if scalar_q else (len(qs),) + tuple(x.shape), x.dtype)]


@defop("quantile_weights", infer=_weights_infer)
def _QUANTILE_WEIGHTS(x, *, qs, scalar_q, axes, keepdims, method, ignore_nan):
    """d quantile / d x: the weight each element of x has in each quantile."""
    kept = tuple(a for a in range(x.ndim) if a not in axes)
    moved = np.transpose(x, kept + axes)
    rows = moved.reshape(-1, int(np.prod([x.shape[a] for a in axes], dtype=np.int64)))
    m, n = rows.shape
    order = np.argsort(rows, axis=1, kind="stable")  # NaNs sort last
    valid = (~np.isnan(rows)).sum(axis=1) if ignore_nan else _filled(m, n, np.int64, x)
    out = np.zeros((len(qs), m, n), dtype=x.dtype, like=x)
    r = np.arange(m, like=x)
    for k, q in enumerate(qs):
        pos = q * np.maximum(valid - 1, 0)
        lo, hi = np.floor(pos).astype(np.int64), np.ceil(pos).astype(np.int64)
        frac = pos - lo
        if method == "linear":
            w_lo, w_hi = 1.0 - frac, frac
        elif method == "lower":
            w_lo, w_hi = _filled(m, 1.0, np.float64, x), np.zeros(m, like=x)
        elif method == "higher":
            w_lo, w_hi = np.zeros(m, like=x), _filled(m, 1.0, np.float64, x)
        elif method == "midpoint":
            w_lo, w_hi = _filled(m, 0.5, np.float64, x), _filled(m, 0.5, np.float64, x)
        else:  # nearest, halves to the even index as NumPy does
            near = np.around(pos).astype(np.int64)
            lo, hi = near, near
            w_lo, w_hi = _filled(m, 1.0, np.float64, x), np.zeros(m, like=x)
        live = valid > 0
        ufunc_at(np.add, out[k], (r[live], order[r, np.minimum(lo, n - 1)][live]), w_lo[live])
        ufunc_at(np.add, out[k], (r[live], order[r, np.minimum(hi, n - 1)][live]), w_hi[live])
    out = out.reshape((len(qs),) + moved.shape)
    out = np.transpose(out, (0,) + tuple(int(i) + 1 for i in np.argsort(kept + axes)))
    return out[0] if scalar_q else out


@in_float32
def quantile(x, q, axis=None, method: str = "linear", keepdims: bool = False, ignore_nan: bool = False) -> Tensor:
    """The `q`-th quantiles (q in [0, 1], a number or a 1-D list) of a floating tensor over
    `axis`, as `numpy.quantile`; with `ignore_nan` NaNs are left out (`numpy.nanquantile`).
    The gradient reaches the one or two order statistics each quantile interpolates.

    >>> import tapeflow as tp
    >>> quantile(tp.tensor([1.0, 2.0, 3.0, 4.0]), 0.5).numpy().item()
    2.5
    """
    x = as_tensor(x, name="quantile")
    if isinstance(q, Tensor):
        q = q.numpy()
    q_arr = np.asarray(q, dtype=np.float64)
    if q_arr.ndim > 1:
        raise ValueError(f"quantile: q must be a number or a 1-D sequence, got shape {q_arr.shape}")
    if np.any(np.isnan(q_arr)) or np.any((q_arr < 0) | (q_arr > 1)):
        raise ValueError(f"quantile: q must lie in [0, 1], got {q_arr.tolist()}")
    if method not in QUANTILE_METHODS:
        raise ValueError(f"quantile: method must be one of {QUANTILE_METHODS}, got {method!r}")
    attrs = {
        "qs": tuple(float(v) for v in q_arr.reshape(-1)),
        "scalar_q": q_arr.ndim == 0,
        "axes": shapes.normalize_axes("quantile", axis, x.ndim),
        "keepdims": bool(keepdims),
        "method": method,
        "ignore_nan": bool(ignore_nan),
    }
    return apply(_QUANTILE, (x,), attrs)


# ------------------------------------------------------------------ einsum
def _parse_einsum(subscripts: str, ranks: list) -> tuple[list, str]:
    """Explicit subscripts: the ellipsis spelled out in unused letters, and the output given."""
    spec = subscripts.replace(" ", "")
    inputs, arrow, output = spec.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"einsum: subscripts {subscripts!r} name {len(terms)} operands, got {len(ranks)}")
    for term in terms + [output]:
        bad = set(term.replace("...", "")) - set(string.ascii_letters)
        if bad or term.replace("...", "").count(".") or term.count("...") > 1:
            raise ValueError(f"einsum: bad subscripts {subscripts!r}")
    spare = [c for c in string.ascii_letters if c not in spec]
    n_ellipsis = max(
        [r - len(t.replace("...", "")) for t, r in zip(terms, ranks, strict=True) if "..." in t], default=0
    )
    ell = "".join(spare[:n_ellipsis])
    expanded = []
    for t, r in zip(terms, ranks, strict=True):
        named = len(t.replace("...", ""))
        if "..." in t:
            k = r - named
            if k < 0:
                raise ValueError(f"einsum: term {t!r} names more axes than its operand's rank {r}")
            t = t.replace("...", ell[n_ellipsis - k :])
        elif named != r:
            raise ValueError(f"einsum: term {t!r} names {named} axes, but its operand has rank {r}")
        expanded.append(t)
    if arrow:
        out = output.replace("...", ell)
    else:
        letters = "".join(expanded)
        out = ell + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ell))
    for c in out:
        if not any(c in t for t in expanded):
            raise ValueError(f"einsum: output subscript {c!r} of {subscripts!r} is not in any operand")
    if len(set(out)) != len(out):
        raise ValueError(f"einsum: output subscripts of {subscripts!r} repeat a letter")
    return expanded, out


def _einsum_sizes(terms, shapes_):
    sizes = {}
    for t, s in zip(terms, shapes_, strict=True):
        for c, d in zip(t, s, strict=True):
            if c in sizes and d is not None and sizes[c] is not None and sizes[c] != d:
                if sizes[c] == 1 or d == 1:
                    raise ValueError(f"einsum: axis {c!r} has sizes {sizes[c]} and {d}; broadcast the operands first")
                raise ValueError(f"einsum: axis {c!r} has sizes {sizes[c]} and {d}")
            if sizes.get(c) is None:
                sizes[c] = d
    return sizes


def _einsum_infer(*xs, terms, output):
    first = xs[0].dtype
    for x in xs[1:]:
        if x.dtype is not first:
            raise TypeError(f"einsum: operands have dtypes {first} and {x.dtype}")
    if first.kind == "b":
        raise TypeError("einsum: bool operands; cast them to numbers first")
    sizes = _einsum_sizes(terms, [x.shape for x in xs])
    return [(tuple(sizes[c] for c in output), first)]


def _einsum_vjp(gs, xs, ys, *, terms, output):
    g = gs[0]
    sizes = _einsum_sizes(terms, [x.shape for x in xs])
    grads = []
    for i, t in enumerate(terms):
        if len(set(t)) != len(t):
            raise NotImplementedError(f"einsum: no gradient for term {t!r}, which repeats an axis (a diagonal)")
        others = [terms[j] for j in range(len(terms)) if j != i]
        present = set(output).union(*others)
        reduced = "".join(c for c in t if c in present)
        grad = apply(
            _EINSUM,
            (g, *[xs[j] for j in range(len(xs)) if j != i]),
            {
                "terms": (output, *others),
                "output": reduced,
            },
        )
        if reduced != t:
            grad = reshape(grad, tuple(sizes[c] if c in present else 1 for c in t))
            grad = broadcast_to(grad, tuple(sizes[c] for c in t))
        grads.append(grad)
    return tuple(grads)


@defop("einsum", infer=_einsum_infer, vjp=_einsum_vjp)
def _EINSUM(*xs, terms, output):
    return np.einsum(",".join(terms) + "->" + output, *xs, optimize=len(xs) > 2)


def einsum(subscripts: str, *operands) -> Tensor:
    """Sums of products of the operands' entries along the axes `subscripts` names, as
    `numpy.einsum` (ellipsis and the implicit output included; ellipsis axes broadcast). A term
    that repeats an axis (a diagonal, "ii->i") has no gradient.

    >>> import tapeflow as tp
    >>> einsum("ij,j->i", tp.ones((2, 3)), tp.ones((3,))).numpy().tolist()
    [3.0, 3.0]
    """
    if not isinstance(subscripts, str):
        raise TypeError(f"einsum: subscripts must be a string, got {subscripts!r}")
    if not operands:
        raise ValueError("einsum: no operands")
    xs = [as_tensor(o, name="einsum") for o in operands]
    dtype = xs[0].dtype
    for x in xs[1:]:
        dtype = dtypes.promote(dtype, x.dtype)
    if dtype.kind == "b":
        dtype = dtypes.int64
    xs = [cast(x, dtype) for x in xs]
    terms, output = _parse_einsum(subscripts, [x.ndim for x in xs])
    # broadcast size-1 axes that meet a larger size of the same letter
    sizes = {}
    for t, x in zip(terms, xs, strict=True):
        for c, d in zip(t, x.shape, strict=True):
            if d != 1 and d is not None:
                sizes.setdefault(c, d)
    for i, (t, x) in enumerate(zip(terms, xs, strict=True)):
        target = tuple(sizes.get(c, d) if d == 1 else d for c, d in zip(t, x.shape, strict=True))
        if target != x.shape:
            xs[i] = broadcast_to(x, target)
    return apply(_EINSUM, tuple(xs), {"terms": tuple(terms), "output": output})
