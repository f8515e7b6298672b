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
from tapeflow.ops import shapes
from tapeflow.ops.core import cast, expand_dims, squeeze, transpose, unbroadcast, zeros_like
from tapeflow.ops.registry import apply, as_tensor, autocast_operand, defop
from tapeflow.tensor import Tensor

__all__ = [
    "abs",
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
            return (x if d is xd else cast(x, d)), Tensor._wrap(np.asarray(y, dtype=d.np), x.device)
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


def _add_vjp(gs, xs, ys):
    g = gs[0]
    return unbroadcast(g, xs[0].shape), unbroadcast(g, xs[1].shape)


def _sub_vjp(gs, xs, ys):
    g = gs[0]
    return unbroadcast(g, xs[0].shape), unbroadcast(-g, xs[1].shape)


def _mul_vjp(gs, xs, ys):
    g, (x, y) = gs[0], xs
    return unbroadcast(g * y, x.shape), unbroadcast(g * x, y.shape)


def _div_vjp(gs, xs, ys):
    g, (x, y) = gs[0], xs
    gx = g / y
    return unbroadcast(gx, x.shape), unbroadcast(-gx * ys[0], y.shape)


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


_ADD = defop("add", infer=shapes.binary("add"), vjp=_add_vjp)(np.add)
_SUBTRACT = defop("subtract", infer=shapes.binary("subtract", kinds="if"), vjp=_sub_vjp)(np.subtract)
_MULTIPLY = defop("multiply", infer=shapes.binary("multiply"), vjp=_mul_vjp)(np.multiply)
_DIVIDE = defop("divide", infer=shapes.binary("divide", result="float", kinds="if"), vjp=_div_vjp)(np.true_divide)
_POW = defop("pow", infer=shapes.binary("pow", kinds="if"), vjp=_pow_vjp)(np.power)
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
    zero = Tensor._wrap(np.zeros((), dtype=g.dtype.np), g.device)
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


def _matmul_vjp(gs, xs, ys, needs=(True, True)):
    g, (a, b) = gs[0], xs
    ga = unbroadcast(apply(_MATMUL, (g, _swap_last(b)), {}), a.shape) if needs[0] else None
    gb = unbroadcast(apply(_MATMUL, (_swap_last(a), g), {}), b.shape) if needs[1] else None
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
