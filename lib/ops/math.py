"""Elementwise math, comparisons, logic, casts and matmul.

>>> import tapeflow as tp
>>> tp.exp(tp.tensor([0.0])).numpy().tolist()
[1.0]
>>> (tp.tensor([1, 2]) < 2).numpy().tolist()
[True, False]
"""

from __future__ import annotations

import numpy as np
import scipy.special

from tapeflow import dtypes
from tapeflow.backends.common import ufunc_at
from tapeflow.ops import shapes
from tapeflow.ops.array import concat, gather, one_hot, pad, stack
from tapeflow.ops.core import cast, expand_dims, reshape, squeeze, transpose, unbroadcast, zeros_like
from tapeflow.ops.registry import apply, as_tensor, autocast_operand, defop, get_op, wrap_host
from tapeflow.tensor import Tensor

__all__ = [
    "abs",
    "cdist",
    "erfc",
    "erfinv",
    "extract_sequences",
    "fft",
    "fft2",
    "ifft2",
    "in_top_k",
    "irfft",
    "istft",
    "logdet",
    "logsumexp",
    "rfft",
    "segment_max",
    "segment_min",
    "segment_prod",
    "segment_sum",
    "stft",
    "top_k",
    "view_as_complex",
    "view_as_real",
    "add",
    "binary_operands",
    "cast",
    "clip",
    "cos",
    "divide",
    "equal",
    "erf",
    "exp",
    "greater",
    "greater_equal",
    "identity",
    "less",
    "less_equal",
    "log",
    "log1p",
    "logical_and",
    "logical_not",
    "logical_or",
    "matmul",
    "maximum",
    "minimum",
    "multiply",
    "neg",
    "not_equal",
    "pow",
    "reciprocal",
    "rsqrt",
    "sigmoid",
    "sign",
    "sin",
    "sqrt",
    "square",
    "stop_gradient",
    "subtract",
    "tanh",
    "where",
]


# ---------------------------------------------------------------- operands
def binary_operands(x, y, name: str) -> tuple[Tensor, Tensor]:
    """Two operands as tensors of one promoted dtype (Python scalars are weak).

    >>> import tapeflow as tp
    >>> a, b = binary_operands(tp.ones((2,)), 3, "add")
    >>> b.dtype
    tapeflow.float32
    """
    x, y = autocast_operand(x), autocast_operand(y)
    xt, yt = isinstance(x, Tensor), isinstance(y, Tensor)
    if xt and yt:
        if x.dtype is y.dtype:
            return x, y
        d = dtypes.promote(x.dtype, y.dtype)
        return cast(x, d), cast(y, d)
    if xt:
        if isinstance(y, bool | int | float):
            xd = x.dtype
            d = dtypes.weak_scalar_dtype(xd, y)
            try:
                scalar = np.asarray(y, dtype=d.np)
            except OverflowError:
                wider = "tapeflow's widest integer" if d is dtypes.int64 else "cast the tensor to int64 first"
                raise OverflowError(
                    f"{name}: the Python integer {y} does not fit the {d.name} of the tensor it meets ({wider})"
                ) from None
            return (x if d is xd else cast(x, d)), wrap_host(scalar, x.device)
        return binary_operands(x, as_tensor(y, name=name), name)
    if yt:
        b, a = binary_operands(y, x, name)
        return a, b
    return binary_operands(as_tensor(x, name=name), y, name)


# ------------------------------------------------------------------- unary
def _unary(opdef, doc_example: str):
    def fn(x) -> Tensor:
        return apply(opdef, (as_tensor(x, name=opdef.name),), {})

    fn.__name__ = opdef.name
    fn.__qualname__ = opdef.name
    fn.__doc__ = f"Elementwise {opdef.name}.\n\n    >>> import tapeflow as tp\n    >>> {doc_example}\n    "
    return fn


_NEG = defop("neg", infer=shapes.numeric("neg"), vjp=lambda gs, xs, ys: (-gs[0],))(np.negative)
_ABS = defop("abs", infer=shapes.numeric("abs"), vjp=lambda gs, xs, ys: (gs[0] * sign(xs[0]),))(np.abs)
_SIGN = defop("sign", infer=shapes.numeric("sign"), vjp=lambda gs, xs, ys: (zeros_like(xs[0]),))(np.sign)
_EXP = defop("exp", infer=shapes.floating("exp"), vjp=lambda gs, xs, ys: (gs[0] * ys[0],))(np.exp)
_LOG = defop("log", infer=shapes.floating("log"), vjp=lambda gs, xs, ys: (gs[0] / xs[0],))(np.log)
_LOG1P = defop("log1p", infer=shapes.floating("log1p"), vjp=lambda gs, xs, ys: (gs[0] / (xs[0] + 1.0),))(np.log1p)
_SQRT = defop("sqrt", infer=shapes.floating("sqrt"), vjp=lambda gs, xs, ys: (gs[0] * 0.5 / ys[0],))(np.sqrt)
_RSQRT = defop(
    "rsqrt",
    infer=shapes.floating("rsqrt"),
    vjp=lambda gs, xs, ys: (gs[0] * -0.5 * ys[0] / xs[0],),
)(lambda x: 1.0 / np.sqrt(x))
_SQUARE = defop("square", infer=shapes.numeric("square"), vjp=lambda gs, xs, ys: (gs[0] * 2.0 * xs[0],))(np.square)
_RECIPROCAL = defop(
    "reciprocal",
    infer=shapes.floating("reciprocal"),
    vjp=lambda gs, xs, ys: (-gs[0] * square(ys[0]),),
)(np.reciprocal)
_SIN = defop("sin", infer=shapes.floating("sin"), vjp=lambda gs, xs, ys: (gs[0] * cos(xs[0]),))(np.sin)
_COS = defop("cos", infer=shapes.floating("cos"), vjp=lambda gs, xs, ys: (-gs[0] * sin(xs[0]),))(np.cos)
_TANH = defop("tanh", infer=shapes.floating("tanh"), vjp=lambda gs, xs, ys: (gs[0] * (1.0 - square(ys[0])),))(np.tanh)
_SIGMOID = defop(
    "sigmoid",
    infer=shapes.floating("sigmoid"),
    vjp=lambda gs, xs, ys: (gs[0] * ys[0] * (1.0 - ys[0]),),
)(scipy.special.expit)
_ERF = defop(
    "erf",
    infer=shapes.floating("erf"),
    vjp=lambda gs, xs, ys: (gs[0] * (2.0 / np.sqrt(np.pi)) * exp(-square(xs[0])),),
)(scipy.special.erf)

neg = _unary(_NEG, "tp.neg(tp.tensor([1.0])).numpy().tolist()\n    [-1.0]")
abs = _unary(_ABS, "tp.abs(tp.tensor([-2.0])).numpy().tolist()\n    [2.0]")  # noqa: A001
sign = _unary(_SIGN, "tp.sign(tp.tensor([-2.0])).numpy().tolist()\n    [-1.0]")
exp = _unary(_EXP, "tp.exp(tp.tensor([0.0])).numpy().tolist()\n    [1.0]")
log = _unary(_LOG, "tp.log(tp.tensor([1.0])).numpy().tolist()\n    [0.0]")
log1p = _unary(_LOG1P, "tp.log1p(tp.tensor([0.0])).numpy().tolist()\n    [0.0]")
sqrt = _unary(_SQRT, "tp.sqrt(tp.tensor([4.0])).numpy().tolist()\n    [2.0]")
rsqrt = _unary(_RSQRT, "tp.rsqrt(tp.tensor([4.0])).numpy().tolist()\n    [0.5]")
square = _unary(_SQUARE, "tp.square(tp.tensor([3.0])).numpy().tolist()\n    [9.0]")
reciprocal = _unary(_RECIPROCAL, "tp.reciprocal(tp.tensor([4.0])).numpy().tolist()\n    [0.25]")
sin = _unary(_SIN, "tp.sin(tp.tensor([0.0])).numpy().tolist()\n    [0.0]")
cos = _unary(_COS, "tp.cos(tp.tensor([0.0])).numpy().tolist()\n    [1.0]")
tanh = _unary(_TANH, "tp.tanh(tp.tensor([0.0])).numpy().tolist()\n    [0.0]")
sigmoid = _unary(_SIGMOID, "tp.sigmoid(tp.tensor([0.0])).numpy().tolist()\n    [0.5]")
erf = _unary(_ERF, "tp.erf(tp.tensor([0.0])).numpy().tolist()\n    [0.0]")


# ------------------------------------------------------------------ binary
def _binary(opdef, doc_example: str):
    def fn(x, y) -> Tensor:
        a, b = binary_operands(x, y, opdef.name)
        return apply(opdef, (a, b), {})

    fn.__name__ = opdef.name
    fn.__qualname__ = opdef.name
    fn.__doc__ = (
        f"Elementwise {opdef.name}, broadcasting.\n\n    >>> import tapeflow as tp\n    >>> {doc_example}\n    "
    )
    return fn


# The binary ops' VJPs build only the gradients asked for (`needs`): a constant operand, such
# as dropout's mask or a scale, costs no product, sum or reshape.
def _add_vjp(gs, xs, ys, needs=(True, True)):
    g = gs[0]
    return (
        unbroadcast(g, xs[0].shape) if needs[0] else None,
        unbroadcast(g, xs[1].shape) if needs[1] else None,
    )


def _sub_vjp(gs, xs, ys, needs=(True, True)):
    g = gs[0]
    return (
        unbroadcast(g, xs[0].shape) if needs[0] else None,
        unbroadcast(-g, xs[1].shape) if needs[1] else None,
    )


def _mul_vjp(gs, xs, ys, needs=(True, True)):
    g, (x, y) = gs[0], xs
    return (
        unbroadcast(g * y, x.shape) if needs[0] else None,
        unbroadcast(g * x, y.shape) if needs[1] else None,
    )


def _div_vjp(gs, xs, ys, needs=(True, True)):
    g, (x, y) = gs[0], xs
    gx = g / y
    return unbroadcast(gx, x.shape) if needs[0] else None, unbroadcast(-gx * ys[0], y.shape) if needs[1] else None


def _pow_vjp(gs, xs, ys):
    g, (x, y), out = gs[0], xs, ys[0]
    gx = g * y * pow(x, y - 1.0)
    positive = greater(x, 0.0)
    safe_x = where(positive, x, 1.0)
    gy = where(positive, g * out * log(safe_x), 0.0)
    return unbroadcast(gx, x.shape), unbroadcast(gy, y.shape)


def _select_vjp(pick_first):
    def vjp(gs, xs, ys):
        g, (x, y) = gs[0], xs
        first = pick_first(x, y)
        return unbroadcast(where(first, g, 0.0), x.shape), unbroadcast(where(first, 0.0, g), y.shape)

    return vjp


def _power(x, y):
    if x.dtype.kind in "iu" and y.dtype.kind in "iu" and y.size and (y < 0).any():
        raise ValueError(
            f"pow: integers to negative integer powers are not allowed (exponent {int(y.min())} for an "
            f"{x.dtype} base); cast the base to a float dtype first"
        )
    return np.power(x, y)


_ADD = defop("add", infer=shapes.binary("add"), vjp=_add_vjp, partial_vjp=True)(np.add)
_SUBTRACT = defop("subtract", infer=shapes.binary("subtract", kinds="if"), vjp=_sub_vjp, partial_vjp=True)(np.subtract)
_MULTIPLY = defop("multiply", infer=shapes.binary("multiply"), vjp=_mul_vjp, partial_vjp=True)(np.multiply)
_DIVIDE = defop("divide", infer=shapes.binary("divide", result="float", kinds="if"), vjp=_div_vjp, partial_vjp=True)(
    np.true_divide
)
_POW = defop("pow", infer=shapes.binary("pow", kinds="if"), vjp=_pow_vjp)(_power)
_MAXIMUM = defop(
    "maximum", infer=shapes.binary("maximum", kinds="if"), vjp=_select_vjp(lambda x, y: greater_equal(x, y))
)(np.maximum)
_MINIMUM = defop("minimum", infer=shapes.binary("minimum", kinds="if"), vjp=_select_vjp(lambda x, y: less_equal(x, y)))(
    np.minimum
)

add = _binary(_ADD, "tp.add(tp.tensor([1.0]), 2).numpy().tolist()\n    [3.0]")
subtract = _binary(_SUBTRACT, "tp.subtract(tp.tensor([1.0]), 2).numpy().tolist()\n    [-1.0]")
multiply = _binary(_MULTIPLY, "tp.multiply(tp.tensor([1.5]), 2).numpy().tolist()\n    [3.0]")
divide = _binary(_DIVIDE, "tp.divide(tp.tensor([1.0]), 4).numpy().tolist()\n    [0.25]")
pow = _binary(_POW, "tp.pow(tp.tensor([3.0]), 2).numpy().tolist()\n    [9.0]")  # noqa: A001
maximum = _binary(_MAXIMUM, "tp.maximum(tp.tensor([1.0, 5.0]), 2).numpy().tolist()\n    [2.0, 5.0]")
minimum = _binary(_MINIMUM, "tp.minimum(tp.tensor([1.0, 5.0]), 2).numpy().tolist()\n    [1.0, 2.0]")


# ------------------------------------------------- comparisons and logic
_EQUAL = defop("equal", infer=shapes.binary("equal", result=dtypes.bool_))(np.equal)
_NOT_EQUAL = defop("not_equal", infer=shapes.binary("not_equal", result=dtypes.bool_))(np.not_equal)
_LESS = defop("less", infer=shapes.binary("less", result=dtypes.bool_, kinds="if"))(np.less)
_LESS_EQUAL = defop("less_equal", infer=shapes.binary("less_equal", result=dtypes.bool_, kinds="if"))(np.less_equal)
_GREATER = defop("greater", infer=shapes.binary("greater", result=dtypes.bool_, kinds="if"))(np.greater)
_GREATER_EQUAL = defop("greater_equal", infer=shapes.binary("greater_equal", result=dtypes.bool_, kinds="if"))(
    np.greater_equal
)
_LOGICAL_AND = defop("logical_and", infer=shapes.binary("logical_and", kinds="b"))(np.logical_and)
_LOGICAL_OR = defop("logical_or", infer=shapes.binary("logical_or", kinds="b"))(np.logical_or)


def _bool_unary(name):
    def infer(x):
        if x.dtype.kind != "b":
            raise TypeError(f"{name}: expected a bool tensor, got {x.dtype}")
        return [(x.shape, x.dtype)]

    return infer


_LOGICAL_NOT = defop("logical_not", infer=_bool_unary("logical_not"))(np.logical_not)

equal = _binary(_EQUAL, "tp.equal(tp.tensor([1, 2]), 2).numpy().tolist()\n    [False, True]")
not_equal = _binary(_NOT_EQUAL, "tp.not_equal(tp.tensor([1, 2]), 2).numpy().tolist()\n    [True, False]")
less = _binary(_LESS, "tp.less(tp.tensor([1, 2]), 2).numpy().tolist()\n    [True, False]")
less_equal = _binary(_LESS_EQUAL, "tp.less_equal(tp.tensor([1, 3]), 2).numpy().tolist()\n    [True, False]")
greater = _binary(_GREATER, "tp.greater(tp.tensor([1, 3]), 2).numpy().tolist()\n    [False, True]")
greater_equal = _binary(_GREATER_EQUAL, "tp.greater_equal(tp.tensor([1, 2]), 2).numpy().tolist()\n    [False, True]")
logical_and = _binary(
    _LOGICAL_AND, "tp.logical_and(tp.tensor([True, False]), True).numpy().tolist()\n    [True, False]"
)
logical_or = _binary(_LOGICAL_OR, "tp.logical_or(tp.tensor([True, False]), False).numpy().tolist()\n    [True, False]")
logical_not = _unary(_LOGICAL_NOT, "tp.logical_not(tp.tensor([True])).numpy().tolist()\n    [False]")


def _where_infer(cond, x, y):
    if cond.dtype.kind != "b":
        raise TypeError(f"where: condition must be bool, got {cond.dtype}")
    if x.dtype is not y.dtype:
        raise TypeError(f"where: branches have dtypes {x.dtype} and {y.dtype}")
    return [(shapes.broadcast("where", cond.shape, x.shape, y.shape), x.dtype)]


def _where_vjp(gs, xs, ys):
    g, (c, x, y) = gs[0], xs
    zero = wrap_host(np.zeros((), dtype=g.dtype.np), g.device)
    return (
        None,
        unbroadcast(apply(_WHERE, (c, g, zero), {}), x.shape),
        unbroadcast(apply(_WHERE, (c, zero, g), {}), y.shape),
    )


_WHERE = defop("where", infer=_where_infer, vjp=_where_vjp)(np.where)


def where(condition, x, y) -> Tensor:
    """Pick from `x` where `condition` holds, else from `y` (broadcasting).

    >>> import tapeflow as tp
    >>> tp.where(tp.tensor([True, False]), 1.0, tp.tensor([5.0, 6.0])).numpy().tolist()
    [1.0, 6.0]
    """
    c = as_tensor(condition, name="where")
    a, b = binary_operands(x, y, "where")
    return apply(_WHERE, (c, a, b), {})


# ---------------------------------------------------------------- clip
def _clip_infer(x, lo, hi):
    if x.dtype.kind == "b":
        raise TypeError("clip: expected a numeric tensor, got bool")
    if (lo is not None and lo != lo) or (hi is not None and hi != hi):
        raise ValueError(f"clip: bounds must not be NaN, got {lo} and {hi}")
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"clip: lower bound {lo} is above upper bound {hi}")
    return [(x.shape, x.dtype)]


def _clip_vjp(gs, xs, ys, lo, hi):
    x = xs[0]
    inside = logical_and(
        greater_equal(x, lo if lo is not None else -np.inf), less_equal(x, hi if hi is not None else np.inf)
    )
    return (where(inside, gs[0], 0.0),)


@defop("clip", infer=_clip_infer, vjp=_clip_vjp)
def _clip(x, lo, hi):
    return np.clip(x, lo, hi).astype(x.dtype, copy=False)


def clip(x, clip_value_min=None, clip_value_max=None) -> Tensor:
    """Limit values to [min, max]; the gradient passes where x is inside.

    >>> import tapeflow as tp
    >>> tp.clip(tp.tensor([-2.0, 0.5, 3.0]), -1, 1).numpy().tolist()
    [-1.0, 0.5, 1.0]
    """
    lo = None if clip_value_min is None else float(clip_value_min)
    hi = None if clip_value_max is None else float(clip_value_max)
    return apply(_clip, (as_tensor(x, name="clip"),), {"lo": lo, "hi": hi})


@defop("stop_gradient", infer=shapes.same)
def _stop_gradient(x):
    return x


def stop_gradient(x) -> Tensor:
    """The same value, but gradients do not flow through it.

    >>> import tapeflow as tp
    >>> tp.stop_gradient(tp.tensor([1.0])).numpy().tolist()
    [1.0]
    """
    return apply(_stop_gradient, (as_tensor(x, name="stop_gradient"),), {})


@defop("identity", infer=lambda x: [(x.shape, x.dtype)], vjp=lambda gs, xs, ys: (gs[0],))
def _IDENTITY(x):
    return x


def identity(x) -> Tensor:
    """The same value, as a new tensor that gradients flow through.

    >>> import tapeflow as tp
    >>> tp.identity(tp.tensor([1.0])).numpy().tolist()
    [1.0]
    """
    return apply(_IDENTITY, (as_tensor(x, name="identity"),), {})


# ------------------------------------------------------------------ matmul
def _matmul_infer(a, b):
    if a.dtype is not b.dtype:
        raise TypeError(f"matmul: operands have dtypes {a.dtype} and {b.dtype}")
    if a.dtype.kind != "f":
        raise TypeError(f"matmul: expected floating-point operands, got {a.dtype}")
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise ValueError(f"matmul: operands need rank >= 2, got shapes {a.shape} and {b.shape}")
    k1, k2 = a.shape[-1], b.shape[-2]
    if k1 is not None and k2 is not None and k1 != k2:
        raise ValueError(f"matmul: inner dimensions differ: {a.shape} @ {b.shape} ({k1} != {k2})")
    batch = shapes.broadcast("matmul", a.shape[:-2], b.shape[:-2])
    return [(batch + (a.shape[-2], b.shape[-1]), a.dtype)]


def _swap_last(t: Tensor) -> Tensor:
    perm = list(range(t.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return transpose(t, perm)


def _rows(t: Tensor) -> Tensor | None:
    """t [..., n] as a matrix [rows, n], or None where n is unknown."""
    return None if t.shape[-1] is None else reshape(t, (-1, t.shape[-1]))


def _shared_matrix_grad(x: Tensor, g: Tensor, transpose_x: bool) -> Tensor | None:
    """The gradient of a matrix shared by every item of a batch of products, as one product
    over all the items' rows (never a product per item summed after): x^T g, or g^T x with
    `transpose_x` False; None where the rows' widths are unknown."""
    x2, g2 = _rows(x), _rows(g)
    if x2 is None or g2 is None:
        return None
    return apply(_MATMUL, (_swap_last(x2), g2) if transpose_x else (_swap_last(g2), x2), {})


def _matmul_vjp(gs, xs, ys, needs=(True, True)):
    g, (a, b) = gs[0], xs
    ga = gb = None
    if needs[0]:
        if a.ndim == 2 and b.ndim > 2:  # a [m, k] shared by every b[i]: g[i] b[i]^T summed over i
            ga = _shared_matrix_grad(_swap_last(b), _swap_last(g), transpose_x=False)
        if ga is None:
            ga = unbroadcast(apply(_MATMUL, (g, _swap_last(b)), {}), a.shape)
    if needs[1]:
        if b.ndim == 2 and a.ndim > 2:  # b [k, n] shared by every a[i]: a[i]^T g[i] summed over i
            gb = _shared_matrix_grad(a, g, transpose_x=True)
        if gb is None:
            gb = unbroadcast(apply(_MATMUL, (_swap_last(a), g), {}), b.shape)
    return ga, gb


_MATMUL = defop("matmul", infer=_matmul_infer, vjp=_matmul_vjp, partial_vjp=True)(np.matmul)


def matmul(a, b) -> Tensor:
    """Matrix product, batched over leading dimensions that broadcast.

    A 1-D operand is treated as a row (left) or column (right) vector, as in NumPy.

    >>> import tapeflow as tp
    >>> tp.matmul(tp.ones((2, 3)), tp.ones((3, 4))).shape
    (2, 4)
    """
    a, b = binary_operands(a, b, "matmul")
    vec_a, vec_b = a.ndim == 1, b.ndim == 1
    if vec_a:
        a = expand_dims(a, 0)
    if vec_b:
        b = expand_dims(b, -1)
    out = apply(_MATMUL, (a, b), {})
    if vec_b:
        out = squeeze(out, -1)
    if vec_a:
        out = squeeze(out, -2 if not vec_b else -1)
    return out


# ------------------------------------------------------- Keras's ops.math
_ERFINV = defop(
    "erfinv",
    infer=shapes.floating("erfinv"),
    vjp=lambda gs, xs, ys: (gs[0] * (np.sqrt(np.pi) / 2.0) * exp(square(ys[0])),),
)(scipy.special.erfinv)
erfinv = _unary(_ERFINV, "tp.ops.math.erfinv(tp.tensor([0.0])).numpy().tolist()\n    [0.0]")


def erfc(x) -> Tensor:
    """The complementary error function 1 - erf(x).

    >>> import tapeflow as tp
    >>> tp.ops.math.erfc(tp.tensor([0.0])).numpy().tolist()
    [1.0]
    """
    return 1.0 - erf(x)


def logsumexp(x, axis=None, keepdims=False) -> Tensor:
    """log(sum(exp(x))) over `axis`, without overflow: the op behind `tp.logsumexp`.

    >>> import tapeflow as tp
    >>> round(float(tp.ops.math.logsumexp(tp.tensor([0.0, 0.0]))), 4)
    0.6931
    """
    x = as_tensor(x, name="logsumexp")
    axes = shapes.normalize_axes("logsumexp", axis, x.ndim)
    return apply(get_op("logsumexp"), (x,), {"axes": axes, "keepdims": bool(keepdims)})


# ---------------------------------------------------------------- segments
_SEGMENT_INIT = {"segment_sum": 0.0, "segment_max": -np.inf, "segment_min": np.inf, "segment_prod": 1.0}
_SEGMENT_UFUNC = {
    "segment_sum": np.add,
    "segment_max": np.maximum,
    "segment_min": np.minimum,
    "segment_prod": np.multiply,
}


def _segment_infer(name):
    def infer(data, ids, num_segments):
        if len(ids.shape) != 1:
            raise ValueError(f"{name}: segment_ids must be 1-D, got shape {ids.shape}")
        if len(data.shape) < 1:
            raise ValueError(f"{name}: data must have at least one axis, got a scalar")
        if None not in (ids.shape[0], data.shape[0]) and ids.shape[0] != data.shape[0]:
            raise ValueError(
                f"{name}: segment_ids (shape {ids.shape}) must have one entry per row of data (shape {data.shape})"
            )
        if ids.dtype.kind != "i":
            raise TypeError(f"{name}: segment_ids must be integers, got {ids.dtype}")
        return [((num_segments, *data.shape[1:]), data.dtype)]

    return infer


def _segment_reference(name):
    def reference(data, ids, num_segments):
        out = np.full((num_segments + 1, *data.shape[1:]), _SEGMENT_INIT[name], dtype=np.float64)
        ids = np.where((ids >= 0) & (ids < num_segments), ids, num_segments)
        ufunc_at(_SEGMENT_UFUNC[name], out, ids, data.astype(np.float64))
        return out[:-1].astype(data.dtype)

    return reference


def _segment_rows(t: Tensor, ids: Tensor, num_segments: int) -> Tensor:
    """t[ids] for every row of data (a zero row for ids out of [0, num_segments))."""
    valid = logical_and(greater_equal(ids, 0), less(ids, num_segments))
    safe = where(valid, ids, num_segments)
    padded = concat([t, zeros_like(t[:1])], axis=0)
    return gather(padded, safe, axis=0)


def _segment_sum_vjp(gs, xs, ys, num_segments):
    return (_segment_rows(gs[0], xs[1], num_segments), None)


def _segment_extreme_vjp(gs, xs, ys, num_segments):
    data, ids = xs
    picked = cast(equal(data, _segment_rows(ys[0], ids, num_segments)), data.dtype)
    ties = apply(_SEGMENTS["segment_sum"], (picked, ids), {"num_segments": num_segments})
    share = picked / maximum(_segment_rows(ties, ids, num_segments), 1.0)
    return (_segment_rows(gs[0], ids, num_segments) * share, None)


def _segment_prod_vjp(gs, xs, ys, num_segments):
    data, ids = xs
    return (_segment_rows(gs[0] * ys[0], ids, num_segments) / data, None)


_SEGMENT_VJPS = {
    "segment_sum": _segment_sum_vjp,
    "segment_max": _segment_extreme_vjp,
    "segment_min": _segment_extreme_vjp,
    "segment_prod": _segment_prod_vjp,
}
_SEGMENTS = {
    name: defop(name, infer=_segment_infer(name), vjp=_SEGMENT_VJPS[name])(_segment_reference(name))
    for name in _SEGMENT_INIT
}


def _segment(name: str, data, segment_ids, num_segments) -> Tensor:
    data = as_tensor(data, name=name)
    ids = as_tensor(segment_ids, name=name)
    if ids.dtype.kind != "i":
        ids = cast(ids, "int64")
    if num_segments is None:
        values = ids.numpy()
        num_segments = int(values.max()) + 1 if values.size else 0
    return apply(_SEGMENTS[name], (data, ids), {"num_segments": int(num_segments)})


def segment_sum(data, segment_ids, num_segments=None, sorted=False) -> Tensor:  # noqa: A002
    """Sum of the rows of `data` that share a segment id; ids outside [0, num_segments)
    are dropped and empty segments give 0. Without `num_segments`, max(id) + 1 (eager only).

    >>> import tapeflow as tp
    >>> tp.ops.math.segment_sum(tp.tensor([1.0, 2.0, 3.0]), tp.tensor([0, 0, 2])).numpy().tolist()
    [3.0, 0.0, 3.0]
    """
    return _segment("segment_sum", data, segment_ids, num_segments)


def segment_max(data, segment_ids, num_segments=None, sorted=False) -> Tensor:  # noqa: A002
    """Maximum of the rows of `data` that share a segment id (-inf for an empty segment).

    >>> import tapeflow as tp
    >>> tp.ops.math.segment_max(tp.tensor([1.0, 2.0, 3.0]), tp.tensor([0, 0, 1])).numpy().tolist()
    [2.0, 3.0]
    """
    return _segment("segment_max", data, segment_ids, num_segments)


def segment_min(data, segment_ids, num_segments=None, sorted=False) -> Tensor:  # noqa: A002
    """Minimum of the rows of `data` that share a segment id (inf for an empty segment).

    >>> import tapeflow as tp
    >>> tp.ops.math.segment_min(tp.tensor([1.0, 2.0, 3.0]), tp.tensor([0, 0, 1])).numpy().tolist()
    [1.0, 3.0]
    """
    return _segment("segment_min", data, segment_ids, num_segments)


def segment_prod(data, segment_ids, num_segments=None, sorted=False) -> Tensor:  # noqa: A002
    """Product of the rows of `data` that share a segment id (1 for an empty segment).

    >>> import tapeflow as tp
    >>> tp.ops.math.segment_prod(tp.tensor([1.0, 2.0, 3.0]), tp.tensor([0, 0, 1])).numpy().tolist()
    [2.0, 3.0]
    """
    return _segment("segment_prod", data, segment_ids, num_segments)


# -------------------------------------------------------------------- top k
def _top_k_infer(x, k, sorted):
    if len(x.shape) < 1:
        raise ValueError("top_k: needs a tensor of at least one axis, got a scalar")
    n = x.shape[-1]
    if n is not None and not 0 <= k <= n:
        raise ValueError(f"top_k: k={k} must lie in [0, {n}] for shape {x.shape}")
    shape = (*x.shape[:-1], k)
    return [(shape, x.dtype), (shape, dtypes.int32)]


def _top_k_vjp(gs, xs, ys, k, sorted):
    if gs[0] is None:
        return (zeros_like(xs[0]),)
    n = xs[0].shape[-1]
    hot = one_hot(ys[1], n, dtype=gs[0].dtype)  # (..., k, n)
    return (squeeze(matmul(expand_dims(gs[0], -2), hot), -2),)


@defop("top_k", infer=_top_k_infer, vjp=_top_k_vjp, num_outputs=2)
def _TOP_K(x, k, sorted):
    order = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, order, axis=-1), order.astype(np.int32)


def top_k(x, k, sorted=True) -> tuple[Tensor, Tensor]:  # noqa: A002
    """The `k` largest entries along the last axis and their indices (int32), largest
    first (also for sorted=False); the values are differentiable.

    >>> import tapeflow as tp
    >>> values, indices = tp.ops.math.top_k(tp.tensor([1.0, 5.0, 3.0]), 2)
    >>> values.numpy().tolist(), indices.numpy().tolist()
    ([5.0, 3.0], [1, 2])
    """
    x = as_tensor(x, name="top_k")
    values, indices = apply(_TOP_K, (x,), {"k": int(k), "sorted": bool(sorted)})
    return values, indices


def in_top_k(targets, predictions, k) -> Tensor:
    """Whether each row's target class scores at least the row's k-th largest prediction.

    >>> import tapeflow as tp
    >>> tp.ops.math.in_top_k(tp.tensor([1, 0]), tp.tensor([[0.1, 0.9], [0.2, 0.8]]), 1).numpy().tolist()
    [True, False]
    """
    predictions = as_tensor(predictions, name="in_top_k")
    targets = as_tensor(targets, name="in_top_k")
    if predictions.ndim != 2 or targets.ndim != 1:
        raise ValueError(
            f"in_top_k: expected predictions (batch, classes) and targets (batch,), got {predictions.shape} "
            f"and {targets.shape}"
        )
    if predictions.dtype.kind != "f":
        predictions = cast(predictions, "float32")
    kth = top_k(stop_gradient(predictions), k)[0][:, -1]
    hot = one_hot(cast(targets, "int64"), predictions.shape[-1], dtype=predictions.dtype)
    target_value = apply(get_op("sum"), (hot * predictions,), {"axes": (1,), "keepdims": False})
    return greater_equal(target_value, kth)


# ------------------------------------------------------------------ logdet
def _swap_last_two(t: Tensor) -> Tensor:
    return transpose(t, (*range(t.ndim - 2), t.ndim - 1, t.ndim - 2))


def _inverse_transpose_vjp(gs, xs, ys):
    y = ys[0]
    return (-matmul(matmul(y, _swap_last_two(gs[0])), y),)


def _square_matrices(name):
    def infer(x):
        if len(x.shape) < 2 or (None not in x.shape[-2:] and x.shape[-1] != x.shape[-2]):
            raise ValueError(f"{name}: expected square matrices (..., n, n), got shape {x.shape}")
        if x.dtype.kind != "f":
            raise TypeError(f"{name}: expected a floating-point tensor, got {x.dtype}")
        return [(x.shape if name != "logdet" else x.shape[:-2], x.dtype)]

    return infer


@defop("logdet_grad", infer=_square_matrices("logdet_grad"), vjp=_inverse_transpose_vjp)
def _LOGDET_GRAD(x):
    return np.swapaxes(np.linalg.inv(x), -1, -2)


def _logdet_vjp(gs, xs, ys):
    return (expand_dims(expand_dims(gs[0], -1), -1) * apply(_LOGDET_GRAD, (xs[0],), {}),)


@defop("logdet", infer=_square_matrices("logdet"), vjp=_logdet_vjp)
def _LOGDET(x):
    sign, value = np.linalg.slogdet(x)
    return np.where(sign > 0, value, np.where(sign == 0, -np.inf, np.nan)).astype(x.dtype)


def logdet(x) -> Tensor:
    """log(det(x)) of square matrices (NaN where the determinant is negative).

    >>> import tapeflow as tp
    >>> round(float(tp.ops.math.logdet(tp.tensor([[2.0, 0.0], [0.0, 3.0]]))), 4)
    1.7918
    """
    return apply(_LOGDET, (as_tensor(x, name="logdet"),), {})


# --------------------------------------------------------------------- FFT
def _dft_infer(real, imag, axes, inverse):
    if tuple(real.shape) != tuple(imag.shape):
        raise ValueError(f"fft: the real and imaginary parts must have one shape, got {real.shape} and {imag.shape}")
    if real.dtype.kind != "f" or imag.dtype.kind != "f":
        raise ValueError(f"fft: the real and imaginary parts must be floating point, got {real.dtype} and {imag.dtype}")
    if real.dtype is not imag.dtype:
        raise TypeError(f"fft: the real and imaginary parts must have one dtype, got {real.dtype} and {imag.dtype}")
    for a in axes:
        if len(real.shape) < -a:
            raise ValueError(f"fft: needs at least {-a} axes, got shape {real.shape}")
    return [(real.shape, real.dtype), (real.shape, real.dtype)]


def _dft_vjp(gs, xs, ys, axes, inverse):
    # The adjoint of the DFT is n times the inverse DFT; that of the inverse is the DFT over n.
    n = float(np.prod([xs[0].shape[a] for a in axes]))
    g_real, g_imag = (g if g is not None else zeros_like(y) for g, y in zip(gs, ys, strict=True))
    real, imag = apply(_DFT, (g_real, g_imag), {"axes": axes, "inverse": not inverse})
    scale = 1.0 / n if inverse else n
    return real * scale, imag * scale


@defop("dft", infer=_dft_infer, vjp=_dft_vjp, num_outputs=2)
def _DFT(real, imag, axes, inverse):
    z = real.astype(np.complex128) + 1j * imag.astype(np.complex128)
    out = np.fft.ifftn(z, axes=axes) if inverse else np.fft.fftn(z, axes=axes)
    return out.real.astype(real.dtype), out.imag.astype(real.dtype)


def _complex_pair(name: str, x) -> tuple[Tensor, Tensor]:
    if not isinstance(x, tuple | list) or len(x) != 2:
        raise ValueError(f"{name}: x must be a tuple of two tensors, the real and imaginary parts, got {x!r}")
    real, imag = as_tensor(x[0], name=name), as_tensor(x[1], name=name)
    if tuple(real.shape) != tuple(imag.shape):
        raise ValueError(f"{name}: the real and imaginary parts must have one shape, got {real.shape} and {imag.shape}")
    if real.dtype.kind != "f" or imag.dtype.kind != "f":
        raise ValueError(f"{name}: the real and imaginary parts must be floating point, got {real.dtype}, {imag.dtype}")
    return real, imag


def _dft(name: str, x, axes, inverse) -> tuple[Tensor, Tensor]:
    real, imag = _complex_pair(name, x)
    return apply(_DFT, (real, imag), {"axes": axes, "inverse": inverse})


def fft(x) -> tuple[Tensor, Tensor]:
    """The discrete Fourier transform along the last axis of a complex tensor given as
    (real, imag); returns (real, imag).

    >>> import tapeflow as tp
    >>> real, imag = tp.ops.math.fft((tp.tensor([1.0, 0.0]), tp.tensor([0.0, 0.0])))
    >>> real.numpy().tolist(), imag.numpy().tolist()
    ([1.0, 1.0], [0.0, 0.0])
    """
    return _dft("fft", x, (-1,), False)


def fft2(x) -> tuple[Tensor, Tensor]:
    """The 2-D discrete Fourier transform over the last two axes of (real, imag).

    >>> import tapeflow as tp
    >>> real, imag = tp.ops.math.fft2((tp.ones((2, 2)), tp.zeros((2, 2))))
    >>> real.numpy().tolist()
    [[4.0, 0.0], [0.0, 0.0]]
    """
    return _dft("fft2", x, (-2, -1), False)


def ifft2(x) -> tuple[Tensor, Tensor]:
    """The inverse 2-D discrete Fourier transform over the last two axes of (real, imag).

    >>> import tapeflow as tp
    >>> real, imag = tp.ops.math.ifft2((tp.ones((2, 2)), tp.zeros((2, 2))))
    >>> real.numpy().tolist()
    [[1.0, 0.0], [0.0, 0.0]]
    """
    return _dft("ifft2", x, (-2, -1), True)


def _fit_last(x: Tensor, n: int) -> Tensor:
    """x cropped or zero-padded along its last axis to length n."""
    have = x.shape[-1]
    if have > n:
        return x[..., :n]
    if have < n:
        return pad(x, [[0, 0]] * (x.ndim - 1) + [[0, n - have]])
    return x


def rfft(x, fft_length=None) -> tuple[Tensor, Tensor]:
    """The DFT of a real signal along the last axis (cropped or zero-padded to
    `fft_length`), its fft_length // 2 + 1 non-negative frequencies as (real, imag).

    >>> import tapeflow as tp
    >>> real, imag = tp.ops.math.rfft(tp.tensor([1.0, 1.0, 1.0, 1.0]))
    >>> real.numpy().tolist()
    [4.0, 0.0, 0.0]
    """
    x = as_tensor(x, name="rfft")
    if x.dtype.kind != "f":
        x = cast(x, "float32")
    n = x.shape[-1] if fft_length is None else int(fft_length)
    x = _fit_last(x, n)
    real, imag = apply(_DFT, (x, zeros_like(x)), {"axes": (-1,), "inverse": False})
    return real[..., : n // 2 + 1], imag[..., : n // 2 + 1]


def irfft(x, fft_length=None) -> Tensor:
    """The real signal whose rfft is the (real, imag) half spectrum `x`: the inverse of
    `rfft`, of length `fft_length` (default 2 * (bins - 1)).

    >>> import tapeflow as tp
    >>> tp.ops.math.irfft((tp.tensor([4.0, 0.0, 0.0]), tp.zeros((3,)))).numpy().tolist()
    [1.0, 1.0, 1.0, 1.0]
    """
    real, imag = _complex_pair("irfft", x)
    n = 2 * (real.shape[-1] - 1) if fft_length is None else int(fft_length)
    half = n // 2 + 1
    real, imag = _fit_last(real, half), _fit_last(imag, half)
    mirror = np.arange(n - half, 0, -1) if n % 2 else np.arange(n - half, 0, -1)
    index = Tensor._wrap(mirror.astype(np.int64)).to(real.device)
    full_real = concat([real, gather(real, index, axis=-1)], axis=-1) if mirror.size else real
    full_imag = concat([imag, -gather(imag, index, axis=-1)], axis=-1) if mirror.size else imag
    out, _ = apply(_DFT, (full_real[..., :n], full_imag[..., :n]), {"axes": (-1,), "inverse": True})
    return out


def view_as_real(x) -> Tensor:
    """The (real, imag) pair that stands for a complex tensor, stacked on a new last axis.

    >>> import tapeflow as tp
    >>> tp.ops.math.view_as_real((tp.tensor([1.0]), tp.tensor([2.0]))).numpy().tolist()
    [[1.0, 2.0]]
    """
    real, imag = _complex_pair("view_as_real", x)
    return stack([real, imag], axis=-1)


def view_as_complex(x) -> tuple[Tensor, Tensor]:
    """A (..., 2) real tensor as the (real, imag) pair that stands for a complex tensor
    (tapeflow has no complex dtype).

    >>> import tapeflow as tp
    >>> real, imag = tp.ops.math.view_as_complex(tp.tensor([[1.0, 2.0]]))
    >>> real.numpy().tolist(), imag.numpy().tolist()
    ([1.0], [2.0])
    """
    x = as_tensor(x, name="view_as_complex")
    if x.ndim < 1 or x.shape[-1] != 2:
        raise ValueError(f"view_as_complex: the last axis must have size 2, got shape {x.shape}")
    return x[..., 0], x[..., 1]


# ------------------------------------------------------------ frames, STFT
def extract_sequences(x, sequence_length, sequence_stride) -> Tensor:
    """Frames of `sequence_length` samples every `sequence_stride` along the last axis:
    (..., frames, sequence_length).

    >>> import tapeflow as tp
    >>> tp.ops.math.extract_sequences(tp.arange(5.0), 2, 2).numpy().tolist()
    [[0.0, 1.0], [2.0, 3.0]]
    """
    x = as_tensor(x, name="extract_sequences")
    length, stride = int(sequence_length), int(sequence_stride)
    if length < 1 or stride < 1:
        raise ValueError(f"extract_sequences: sequence_length and sequence_stride must be >= 1, got {length}, {stride}")
    samples = x.shape[-1]
    frames = max((samples - length) // stride + 1, 0)
    index = np.arange(frames)[:, None] * stride + np.arange(length)[None, :]
    flat = gather(x, Tensor._wrap(index.reshape(-1).astype(np.int64)).to(x.device), axis=x.ndim - 1)
    return flat.reshape((*[-1 if d is None else d for d in x.shape[:-1]], frames, length))


def _window(name: str, window, length: int, dtype) -> np.ndarray | Tensor:
    if window is None:
        return np.ones(length)
    if isinstance(window, str):
        if window not in ("hann", "hamming"):
            raise ValueError(f"{name}: window must be 'hann', 'hamming', an array or None, got {window!r}")
        t = np.arange(length) / length
        a = 0.5 if window == "hann" else 0.54
        return a - (1.0 - a) * np.cos(2.0 * np.pi * t)
    w = window if isinstance(window, Tensor) else np.asarray(window, dtype=np.float64)
    if w.ndim != 1 or w.shape[0] != length:
        raise ValueError(f"{name}: the window must have shape ({length},), got {tuple(w.shape)}")
    return cast(w, dtype) if isinstance(w, Tensor) else w


def _centred(window, length: int, fft_length: int):
    left = (fft_length - length) // 2
    right = fft_length - length - left
    if isinstance(window, np.ndarray):
        return np.pad(window, (left, right))
    return pad(window, [[left, right]])


def stft(x, sequence_length, sequence_stride, fft_length, window="hann", center=True) -> tuple[Tensor, Tensor]:
    """The short-time Fourier transform along the last axis, as (real, imag) of shape
    (..., frames, fft_length // 2 + 1); `center` reflect-pads fft_length // 2 on each side.

    >>> import tapeflow as tp
    >>> real, imag = tp.ops.math.stft(tp.ones((16,)), 8, 4, 8)
    >>> real.shape
    (5, 5)
    """
    x = as_tensor(x, name="stft")
    if x.dtype.name not in ("float32", "float64"):
        raise TypeError(f"stft: expected a float32 or float64 input, got {x.dtype}")
    length, stride, n = int(sequence_length), int(sequence_stride), int(fft_length)
    if n < length:
        raise ValueError(f"stft: fft_length ({n}) must be >= sequence_length ({length})")
    win = _centred(_window("stft", window, length, x.dtype), length, n)
    if center:
        half, samples = n // 2, x.shape[-1]
        if half >= samples:
            raise ValueError(f"stft: with center=True the signal ({samples}) must be longer than fft_length // 2")
        index = np.concatenate([np.arange(half, 0, -1), np.arange(samples), samples - 2 - np.arange(half)])
        x = gather(x, Tensor._wrap(index.astype(np.int64)).to(x.device), axis=x.ndim - 1)
    frames = extract_sequences(x, n, stride)
    if isinstance(win, np.ndarray):  # a host constant, placed beside the frames
        win = Tensor._wrap(win.astype(x.dtype.np)).to(x.device)
    return rfft(frames * win, n)


def _overlap_add(frames: Tensor, stride: int) -> Tensor:
    """Sum frames (..., F, n) placed `stride` apart into a signal of stride * (F - 1) + n."""
    count, n = frames.shape[-2], frames.shape[-1]
    steps = -(-n // stride)
    lead = [[0, 0]] * (frames.ndim - 2)
    chunks = pad(frames, lead + [[0, 0], [0, steps * stride - n]])
    chunks = chunks.reshape((*[-1 if d is None else d for d in frames.shape[:-2]], count, steps, stride))
    total = None
    for s in range(steps):
        part = pad(chunks[..., s, :], lead + [[s, steps - 1 - s], [0, 0]])
        total = part if total is None else total + part
    signal = total.reshape((*[-1 if d is None else d for d in frames.shape[:-2]], (count + steps - 1) * stride))
    return signal[..., : stride * (count - 1) + n]


def istft(x, sequence_length, sequence_stride, fft_length, length=None, window="hann", center=True) -> Tensor:
    """The inverse of `stft`: inverse real FFTs of (real, imag) frames, windowed and
    overlap-added, normalized by the summed squared window.

    >>> import tapeflow as tp
    >>> signal = tp.random.normal((32,), seed=0)
    >>> back = tp.ops.math.istft(tp.ops.math.stft(signal, 8, 4, 8), 8, 4, 8, length=32)
    >>> bool(abs(back - signal).numpy().max() < 1e-5)
    True
    """
    real, _ = _complex_pair("istft", x)
    length_, stride, n = int(sequence_length), int(sequence_stride), int(fft_length)
    frames = irfft(x, n)
    count = frames.shape[-2]
    win = _window("istft", window, length_, real.dtype)
    if window is not None:
        win = _centred(win, length_, n)
    expected = n + stride * (count - 1)
    if length_ == n and center and window is not None:
        weight = win if isinstance(win, np.ndarray) else None
        if weight is None:
            raise NotImplementedError("istft: a window Tensor is not supported; pass a NumPy array or a name")
        envelope = np.zeros(expected)
        for f in range(count):
            envelope[f * stride : f * stride + n] += weight**2
        signal = _overlap_add(frames * Tensor._wrap(weight.astype(real.dtype.np)).to(real.device), stride)
        start = n // 2
        end = expected - n // 2 if length is None else start + int(length)
        keep = envelope[start:end]
        signal = signal[..., start:end]
        if signal.shape[-1] < end - start:
            signal = pad(signal, [[0, 0]] * (signal.ndim - 1) + [[0, end - start - signal.shape[-1]]])
            keep = np.pad(keep, (0, end - start - keep.size), constant_values=1.0)
        safe = np.where(np.abs(keep) > 1e-11, keep, 1.0)
        return signal / Tensor._wrap(safe.astype(real.dtype.np)).to(real.device)
    if window is not None:
        w = win if isinstance(win, np.ndarray) else None
        if w is None:
            raise NotImplementedError("istft: a window tensor is not supported; pass a NumPy array or a name")
        overlaps = -(-n // stride)
        denom = np.pad(w**2, (0, overlaps * stride - n)).reshape(overlaps, stride).sum(0)
        w = w / np.tile(denom, overlaps)[:n]
        frames = frames * Tensor._wrap(w.astype(real.dtype.np)).to(real.device)
    signal = _overlap_add(frames, stride)
    start = n // 2 if center else 0
    if length is not None:
        end = start + int(length)
    elif center:
        end = expected - n // 2
    else:
        end = expected
    return signal[..., start:end]


def cdist(x, y) -> Tensor:
    """Euclidean distances between the rows of x (..., m, d) and y (..., n, d): (..., m, n).

    >>> import tapeflow as tp
    >>> tp.ops.math.cdist(tp.tensor([[0.0, 0.0]]), tp.tensor([[3.0, 4.0]])).numpy().tolist()
    [[5.0]]
    """
    x, y = binary_operands(x, y, "cdist")
    if x.ndim < 2 or y.ndim < 2 or x.shape[-1] != y.shape[-1]:
        raise ValueError(f"cdist: inputs need rank >= 2 and one last dimension, got {x.shape} and {y.shape}")
    diff = expand_dims(x, -2) - expand_dims(y, -3)
    return sqrt(apply(get_op("sum"), (square(diff),), {"axes": (diff.ndim - 1,), "keepdims": False}))
