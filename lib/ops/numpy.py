"""`keras.ops.numpy`: NumPy's names and arguments over tapeflow's ops, as Keras 3 spells them.

Integer and bool inputs follow Keras: functions that only make sense on floats (`exp`,
`sqrt`, `mean`, `arctan2` ...) read them as float32; others keep their dtype. tapeflow has
no complex dtype, so `real`, `imag`, `conj`, `angle` and `isreal` treat every input as
real, as Keras does with real tensors. Names tapeflow already had (`clip`, `max`, `eye`,
`linspace`, `identity` ...) accept their tapeflow keywords too.

>>> import tapeflow as tp
>>> tp.ops.numpy.arctan2(tp.tensor(1.0, "float64"), 1.0).numpy().round(4).item()
0.7854
>>> tp.ops.numpy.quantile(tp.tensor([1.0, 2.0, 3.0, 4.0]), [0.25, 0.5]).numpy().tolist()
[1.75, 2.5]
"""

from __future__ import annotations

import builtins
import math as _pymath

import numpy as np

from tapeflow import dtypes
from tapeflow.ops import array, core, creation, elementwise, keras_names, reduce, shapes
from tapeflow.ops import math as tmath
from tapeflow.ops.array_keras import (  # noqa: A004 - NumPy's names, some of them builtins'
    append,
    argpartition,
    argsort,
    array_split,
    diag,
    diagflat,
    diagonal,
    diff,
    digitize,
    dsplit,
    dstack,
    flip,
    fliplr,
    flipud,
    get_item,
    hsplit,
    hstack,
    meshgrid,
    moveaxis,
    nonzero,
    pad,
    ravel,
    repeat,
    roll,
    rot90,
    searchsorted,
    select,
    sort,
    split,
    swapaxes,
    take,
    take_along_axis,
    tile,
    trace,
    tril,
    triu,
    unique,
    unravel_index,
    vander,
    view,
    vsplit,
    vstack,
)
from tapeflow.ops.core import broadcast_to, expand_dims, squeeze
from tapeflow.ops.half import in_float32
from tapeflow.ops.keras_names import arange, concatenate, reshape, stack, transpose, where
from tapeflow.ops.linalg import slogdet
from tapeflow.ops.registry import as_tensor, wrap_host
from tapeflow.tensor import Tensor, TracedTensor

__all__ = [
    "abs",
    "absolute",
    "add",
    "all",
    "allclose",
    "amax",
    "amin",
    "angle",
    "any",
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctan2",
    "arctanh",
    "argmax",
    "argmin",
    "average",
    "bartlett",
    "bincount",
    "bitwise_and",
    "bitwise_invert",
    "bitwise_left_shift",
    "bitwise_not",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "blackman",
    "cbrt",
    "ceil",
    "clip",
    "conj",
    "conjugate",
    "copy",
    "corrcoef",
    "correlate",
    "cos",
    "cosh",
    "count_nonzero",
    "cross",
    "cumprod",
    "cumsum",
    "deg2rad",
    "divide",
    "divide_no_nan",
    "dot",
    "einsum",
    "empty",
    "empty_like",
    "equal",
    "exp",
    "exp2",
    "expm1",
    "eye",
    "fabs",
    "floor",
    "floor_divide",
    "fmax",
    "fmin",
    "fmod",
    "full",
    "full_like",
    "gcd",
    "geomspace",
    "greater",
    "greater_equal",
    "hamming",
    "hanning",
    "heaviside",
    "histogram",
    "hypot",
    "i0",
    "identity",
    "imag",
    "inner",
    "isclose",
    "isfinite",
    "isin",
    "isinf",
    "isnan",
    "isneginf",
    "isposinf",
    "isreal",
    "kaiser",
    "kron",
    "lcm",
    "ldexp",
    "left_shift",
    "less",
    "less_equal",
    "linspace",
    "log",
    "log10",
    "log1p",
    "log2",
    "logaddexp",
    "logaddexp2",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "logspace",
    "matmul",
    "max",
    "maximum",
    "mean",
    "median",
    "min",
    "minimum",
    "mod",
    "multiply",
    "nan_to_num",
    "nanargmax",
    "nanargmin",
    "nancumprod",
    "nancumsum",
    "nanmax",
    "nanmean",
    "nanmedian",
    "nanmin",
    "nanpercentile",
    "nanprod",
    "nanquantile",
    "nanstd",
    "nansum",
    "nanvar",
    "ndim",
    "negative",
    "nextafter",
    "not_equal",
    "ones",
    "ones_like",
    "outer",
    "percentile",
    "power",
    "prod",
    "ptp",
    "quantile",
    "rad2deg",
    "real",
    "reciprocal",
    "right_shift",
    "round",
    "sign",
    "signbit",
    "sin",
    "sinc",
    "sinh",
    "size",
    "sqrt",
    "square",
    "std",
    "subtract",
    "sum",
    "tan",
    "tanh",
    "tensordot",
    "trapezoid",
    "tri",
    "true_divide",
    "trunc",
    "var",
    "vdot",
    "vectorize",
    "zeros",
    "zeros_like",
    "append",
    "argpartition",
    "argsort",
    "array_split",
    "diag",
    "diagflat",
    "diagonal",
    "diff",
    "digitize",
    "dsplit",
    "dstack",
    "flip",
    "fliplr",
    "flipud",
    "get_item",
    "hsplit",
    "hstack",
    "meshgrid",
    "moveaxis",
    "nonzero",
    "pad",
    "ravel",
    "repeat",
    "roll",
    "rot90",
    "searchsorted",
    "select",
    "sort",
    "split",
    "swapaxes",
    "take",
    "take_along_axis",
    "tile",
    "trace",
    "tril",
    "triu",
    "unique",
    "unravel_index",
    "vander",
    "view",
    "vsplit",
    "vstack",
    "arange",
    "concatenate",
    "reshape",
    "stack",
    "transpose",
    "where",
    "broadcast_to",
    "expand_dims",
    "squeeze",
    "slogdet",
]

_UNSET = keras_names._UNSET
_LN2 = _pymath.log(2.0)
_LN10 = _pymath.log(10.0)


# --------------------------------------------------------------------- helpers
def _tensor(x, name: str) -> Tensor:
    return as_tensor(x, name=name)


def _floating(x, name: str) -> Tensor:
    """`x` as a tensor, integers and bools read as float32 (Keras's rule for float-only math)."""
    x = as_tensor(x, name=name)
    return x if x.dtype.kind == "f" else core.cast(x, dtypes.DEFAULT_FLOAT)


def _float_pair(x1, x2, name: str) -> tuple[Tensor, Tensor]:
    a, b = tmath.binary_operands(x1, x2, name)
    if a.dtype.kind != "f":
        a, b = core.cast(a, dtypes.DEFAULT_FLOAT), core.cast(b, dtypes.DEFAULT_FLOAT)
    return a, b


def _example(name: str, example: str) -> str:
    return f"\n\n    >>> import tapeflow as tp\n    >>> tp.ops.numpy.{example}\n    "


def _float_unary(name: str, fn, doc: str, example: str, wide_int64: bool = False):
    def op(x) -> Tensor:
        x = _tensor(x, name)
        if wide_int64 and x.dtype is dtypes.int64:  # Keras reads int64 as float64 here
            return fn(core.cast(x, dtypes.float64))
        return fn(_floating(x, name))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc + _example(name, example)
    return op


def _keras_binary(name: str, fn, doc: str, example: str):
    """Keras's `(x1, x2)`, with tapeflow's `x=`, `y=` keywords kept."""

    def op(x1=_UNSET, x2=_UNSET, *, x=_UNSET, y=_UNSET) -> Tensor:
        return fn(keras_names._either(name, "x1", x1, "x", x), keras_names._either(name, "x2", x2, "y", y))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc + _example(name, example)
    return op


def _optional(fn: str, keras_name: str, keras_value, tf_name: str, tf_value):
    """The one of two spellings of an argument that was given, or None for neither."""
    if keras_value is _UNSET and tf_value is _UNSET:
        return None
    return keras_names._either(fn, keras_name, keras_value, tf_name, tf_value)


def _bools_as(fn, dtype):
    """`fn` of two operands, reading a pair of bool operands as `dtype` (as Keras does)."""

    def op(x1, x2):
        a, b = tmath.binary_operands(x1, x2, fn.__name__)
        if a.dtype.kind == "b":
            a, b = core.cast(a, dtype), core.cast(b, dtype)
        return fn(a, b)

    return op


def _bool_extreme(x1, x2, logical, numeric):
    a, b = tmath.binary_operands(x1, x2, numeric.__name__)
    return logical(a, b) if a.dtype.kind == "b" else numeric(a, b)


def _int_or_bool_pair(x1, x2, name: str, kinds: str = "bi") -> tuple[Tensor, Tensor]:
    a, b = tmath.binary_operands(x1, x2, name)
    if a.dtype.kind not in kinds:
        wanted = "integer or bool" if "b" in kinds else "integer"
        raise TypeError(f"{name}: expected {wanted} tensors, got {a.dtype}")
    return a, b


def _as_bool(x, name: str) -> Tensor:
    x = as_tensor(x, name=name)
    return x if x.dtype.kind == "b" else tmath.not_equal(x, 0)


# ------------------------------------------------------------ arithmetic
add = _keras_binary("add", tmath.add, "x1 + x2, broadcast.", "add(1.0, tp.tensor([2.0])).numpy().tolist()\n    [3.0]")
subtract = _keras_binary(
    "subtract", tmath.subtract, "x1 - x2, broadcast.", "subtract(tp.tensor([3, 4]), 1).numpy().tolist()\n    [2, 3]"
)
multiply = _keras_binary(
    "multiply", tmath.multiply, "x1 * x2, broadcast.", "multiply(tp.tensor([3, 4]), 2).numpy().tolist()\n    [6, 8]"
)
divide = _keras_binary(
    "divide",
    _bools_as(tmath.divide, dtypes.float32),
    "x1 / x2, broadcast; integers divide into float32.",
    "divide(tp.tensor([3, 4]), 2).numpy().tolist()\n    [1.5, 2.0]",
)
true_divide = _keras_binary(
    "true_divide",
    _bools_as(tmath.divide, dtypes.float32),
    "The same as `divide`.",
    "true_divide(1, tp.tensor([4.0])).numpy().tolist()\n    [0.25]",
)
power = _keras_binary(
    "power", tmath.pow, "x1 ** x2, broadcast.", "power(tp.tensor([2, 3]), 2).numpy().tolist()\n    [4, 9]"
)
equal = _keras_binary(
    "equal", tmath.equal, "x1 == x2, broadcast.", "equal(tp.tensor([1, 2]), 2).numpy().tolist()\n    [False, True]"
)
not_equal = _keras_binary(
    "not_equal",
    tmath.not_equal,
    "x1 != x2, broadcast.",
    "not_equal(tp.tensor([1, 2]), 2).numpy().tolist()\n    [True, False]",
)
less = _keras_binary(
    "less",
    _bools_as(tmath.less, dtypes.int32),
    "x1 < x2, broadcast.",
    "less(tp.tensor([1, 2]), 2).numpy().tolist()\n    [True, False]",
)
less_equal = _keras_binary(
    "less_equal",
    _bools_as(tmath.less_equal, dtypes.int32),
    "x1 <= x2, broadcast.",
    "less_equal(tp.tensor([1, 3]), 2).numpy().tolist()\n    [True, False]",
)
greater = _keras_binary(
    "greater",
    _bools_as(tmath.greater, dtypes.int32),
    "x1 > x2, broadcast.",
    "greater(tp.tensor([1, 3]), 2).numpy().tolist()\n    [False, True]",
)
greater_equal = _keras_binary(
    "greater_equal",
    _bools_as(tmath.greater_equal, dtypes.int32),
    "x1 >= x2, broadcast.",
    "greater_equal(tp.tensor([1, 2]), 2).numpy().tolist()\n    [False, True]",
)
maximum = _keras_binary(
    "maximum",
    lambda a, b: _bool_extreme(a, b, tmath.logical_or, tmath.maximum),
    "The elementwise larger of x1 and x2, broadcast (for bools: x1 or x2).",
    "maximum(tp.tensor([1.0, 4.0]), 2.0).numpy().tolist()\n    [2.0, 4.0]",
)
minimum = _keras_binary(
    "minimum",
    lambda a, b: _bool_extreme(a, b, tmath.logical_and, tmath.minimum),
    "The elementwise smaller of x1 and x2, broadcast (for bools: x1 and x2).",
    "minimum(tp.tensor([1.0, 4.0]), 2.0).numpy().tolist()\n    [1.0, 2.0]",
)
cumsum = keras_names.cumsum


def negative(x) -> Tensor:
    """-x.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.negative(tp.tensor([1, -2])).numpy().tolist()
    [-1, 2]
    """
    return tmath.neg(x)


def absolute(x) -> Tensor:
    """|x| (a bool tensor is its own absolute value).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.absolute(tp.tensor([-1, 2])).numpy().tolist()
    [1, 2]
    """
    x = _tensor(x, "absolute")
    return tmath.identity(x) if x.dtype.kind == "b" else tmath.abs(x)


abs = absolute  # noqa: A001


def fabs(x) -> Tensor:
    """|x| as a float (integers read as float32).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.fabs(tp.tensor([-1, 2])).numpy().tolist()
    [1.0, 2.0]
    """
    return tmath.abs(_floating(x, "fabs"))


def sign(x) -> Tensor:
    """-1, 0 or 1 by the sign of x (a bool tensor is kept).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.sign(tp.tensor([-3, 0, 2])).numpy().tolist()
    [-1, 0, 1]
    """
    x = _tensor(x, "sign")
    return tmath.identity(x) if x.dtype.kind == "b" else tmath.sign(x)


def square(x) -> Tensor:
    """x * x (bools read as int32, as Keras does).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.square(tp.tensor([-3, 2])).numpy().tolist()
    [9, 4]
    """
    x = _tensor(x, "square")
    return tmath.square(core.cast(x, dtypes.int32) if x.dtype.kind == "b" else x)


def divide_no_nan(x1, x2) -> Tensor:
    """x1 / x2, and 0 where x2 is 0 (with a zero gradient there).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.divide_no_nan(tp.tensor([1.0, 2.0]), tp.tensor([0.0, 4.0])).numpy().tolist()
    [0.0, 0.5]
    """
    a, b = _float_pair(x1, x2, "divide_no_nan")
    zero = tmath.equal(b, 0.0)
    return tmath.where(zero, 0.0, a / tmath.where(zero, 1.0, b))


def reciprocal(x) -> Tensor:
    """1 / x (integers read as float32).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.reciprocal(tp.tensor([2, 4])).numpy().tolist()
    [0.5, 0.25]
    """
    return tmath.reciprocal(_floating(x, "reciprocal"))


def floor_divide(x1, x2) -> Tensor:
    """floor(x1 / x2), in the operands' promoted dtype.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.floor_divide(tp.tensor([7, -7]), 2).numpy().tolist()
    [3, -4]
    """
    return elementwise.floor_divide(x1, x2)


def mod(x1, x2) -> Tensor:
    """The remainder of floor division: it has the sign of x2, as NumPy's `mod`.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.mod(tp.tensor([7, -7]), 3).numpy().tolist()
    [1, 2]
    """
    return elementwise.mod(x1, x2)


def fmod(x1, x2) -> Tensor:
    """The remainder of truncated division: it has the sign of x1, as C's `fmod`.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.fmod(tp.tensor([7, -7]), 3).numpy().tolist()
    [1, -1]
    """
    return elementwise.fmod(x1, x2)


def _extreme_nan_aware(x1, x2, pick, name):
    a, b = tmath.binary_operands(x1, x2, name)
    if a.dtype.kind != "f":
        return pick(a, b)
    return tmath.where(elementwise.isnan(b), a, tmath.where(elementwise.isnan(a), b, pick(a, b)))


def fmax(x1, x2) -> Tensor:
    """The elementwise larger value, ignoring a NaN when the other value is a number.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.fmax(tp.tensor([1.0, float("nan")]), 2.0).numpy().tolist()
    [2.0, 2.0]
    """
    return _extreme_nan_aware(x1, x2, maximum, "fmax")


def fmin(x1, x2) -> Tensor:
    """The elementwise smaller value, ignoring a NaN when the other value is a number.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.fmin(tp.tensor([1.0, float("nan")]), 2.0).numpy().tolist()
    [1.0, 2.0]
    """
    return _extreme_nan_aware(x1, x2, minimum, "fmin")


def clip(x, x_min=_UNSET, x_max=_UNSET, *, clip_value_min=_UNSET, clip_value_max=_UNSET) -> Tensor:
    """`x` limited to [x_min, x_max] (`clip_value_min=`, `clip_value_max=` accepted too; a bound
    left out or None is no bound). A bool tensor is read as int32, and float bounds make an
    integer tensor float32, as in Keras.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.clip(tp.tensor([-2, 0, 5]), 0, 3).numpy().tolist()
    [0, 0, 3]
    """
    lo = _optional("clip", "x_min", x_min, "clip_value_min", clip_value_min)
    hi = _optional("clip", "x_max", x_max, "clip_value_max", clip_value_max)
    lo, hi = (v.item() if isinstance(v, np.generic) else v for v in (lo, hi))
    x = _tensor(x, "clip")
    if x.dtype.kind == "b":
        x = core.cast(x, dtypes.int32)
    if isinstance(lo, Tensor | np.ndarray) or isinstance(hi, Tensor | np.ndarray):
        out = x if lo is None else tmath.maximum(x, lo)
        return out if hi is None else tmath.minimum(out, hi)
    d = dtypes.result_type(x.dtype, *[v for v in (lo, hi) if v is not None])
    return tmath.clip(core.cast(x, d), lo, hi)


# ------------------------------------------------------ exponents and logs
exp = _float_unary("exp", tmath.exp, "e ** x.", "exp(tp.tensor([0])).numpy().tolist()\n    [1.0]")
exp2 = _float_unary(
    "exp2", lambda x: tmath.exp(x * _LN2), "2 ** x.", "exp2(tp.tensor([3.0])).numpy().round(5).tolist()\n    [8.0]"
)
expm1 = _float_unary(
    "expm1", elementwise.expm1, "e ** x - 1, exact near 0.", "expm1(tp.tensor([0.0])).numpy().tolist()\n    [0.0]"
)
log = _float_unary("log", tmath.log, "The natural logarithm.", "log(tp.tensor([1])).numpy().tolist()\n    [0.0]")
log1p = _float_unary(
    "log1p", tmath.log1p, "log(1 + x), exact near 0.", "log1p(tp.tensor([0.0])).numpy().tolist()\n    [0.0]"
)
log2 = _float_unary(
    "log2", lambda x: tmath.log(x) / _LN2, "The base-2 logarithm.", "log2(tp.tensor([8.0])).numpy().tolist()\n    [3.0]"
)
log10 = _float_unary(
    "log10",
    lambda x: tmath.log(x) / _LN10,
    "The base-10 logarithm.",
    "log10(tp.tensor([100.0])).numpy().tolist()\n    [2.0]",
)
sqrt = _float_unary("sqrt", tmath.sqrt, "The square root.", "sqrt(tp.tensor([4])).numpy().tolist()\n    [2.0]")
cbrt = _float_unary(
    "cbrt",
    elementwise.cbrt,
    "The cube root (negative for negative x).",
    "cbrt(tp.tensor([-8.0])).numpy().tolist()\n    [-2.0]",
    wide_int64=True,
)


def logaddexp(x1, x2) -> Tensor:
    """log(exp(x1) + exp(x2)) without overflow.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.logaddexp(tp.tensor(1000.0, "float64"), 1000.0).numpy().round(3).item()
    1000.693
    """
    a, b = _float_pair(x1, x2, "logaddexp")
    shapes.broadcast("logaddexp", a.shape, b.shape)
    top = tmath.maximum(a, b)
    top = tmath.stop_gradient(tmath.where(elementwise.isfinite(top), top, 0.0))
    return top + tmath.log(tmath.exp(a - top) + tmath.exp(b - top))


def logaddexp2(x1, x2) -> Tensor:
    """log2(2 ** x1 + 2 ** x2) without overflow.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.logaddexp2(1.0, 1.0).numpy().item()
    2.0
    """
    a, b = _float_pair(x1, x2, "logaddexp2")
    return logaddexp(a * _LN2, b * _LN2) / _LN2


def ldexp(x1, x2) -> Tensor:
    """x1 * 2 ** x2 for an integer exponent x2.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.ldexp(tp.tensor([1.5]), tp.tensor([2])).numpy().tolist()
    [6.0]
    """
    e = _tensor(x2, "ldexp")
    if e.dtype.kind != "i":
        raise TypeError(f"ldexp: the exponent x2 must be an integer tensor, got {e.dtype}")
    m = _floating(x1, "ldexp")
    return m * tmath.pow(2.0, core.cast(e, m.dtype))


# ------------------------------------------------------------ trigonometry
sin = _float_unary("sin", tmath.sin, "The sine.", "sin(tp.tensor([0])).numpy().tolist()\n    [0.0]")
cos = _float_unary("cos", tmath.cos, "The cosine.", "cos(tp.tensor([0])).numpy().tolist()\n    [1.0]")
tan = _float_unary("tan", elementwise.tan, "The tangent.", "tan(tp.tensor([0.0])).numpy().tolist()\n    [0.0]")
arcsin = _float_unary(
    "arcsin", elementwise.arcsin, "The inverse sine.", "arcsin(tp.tensor([0.0])).numpy().tolist()\n    [0.0]"
)
arccos = _float_unary(
    "arccos", elementwise.arccos, "The inverse cosine.", "arccos(tp.tensor([1.0])).numpy().tolist()\n    [0.0]"
)
arctan = _float_unary(
    "arctan", elementwise.arctan, "The inverse tangent.", "arctan(tp.tensor([0.0])).numpy().tolist()\n    [0.0]"
)
sinh = _float_unary(
    "sinh", elementwise.sinh, "The hyperbolic sine.", "sinh(tp.tensor([0.0])).numpy().tolist()\n    [0.0]"
)
cosh = _float_unary(
    "cosh", elementwise.cosh, "The hyperbolic cosine.", "cosh(tp.tensor([0.0])).numpy().tolist()\n    [1.0]"
)
tanh = _float_unary("tanh", tmath.tanh, "The hyperbolic tangent.", "tanh(tp.tensor([0.0])).numpy().tolist()\n    [0.0]")
arcsinh = _float_unary(
    "arcsinh",
    elementwise.arcsinh,
    "The inverse hyperbolic sine.",
    "arcsinh(tp.tensor([0.0])).numpy().tolist()\n    [0.0]",
)
arccosh = _float_unary(
    "arccosh",
    elementwise.arccosh,
    "The inverse hyperbolic cosine.",
    "arccosh(tp.tensor([1.0])).numpy().tolist()\n    [0.0]",
)
arctanh = _float_unary(
    "arctanh",
    elementwise.arctanh,
    "The inverse hyperbolic tangent.",
    "arctanh(tp.tensor([0.0])).numpy().tolist()\n    [0.0]",
)
i0 = _float_unary(
    "i0",
    elementwise.bessel_i0,
    "The modified Bessel function of the first kind, order 0.",
    "i0(tp.tensor([0.0])).numpy().tolist()\n    [1.0]",
    wide_int64=True,
)
deg2rad = _float_unary(
    "deg2rad",
    lambda x: x * (np.pi / 180.0),
    "Degrees to radians.",
    "deg2rad(tp.tensor([180.0], 'float64')).numpy().round(4).tolist()\n    [3.1416]",
    wide_int64=True,
)
rad2deg = _float_unary(
    "rad2deg",
    lambda x: x * (180.0 / np.pi),
    "Radians to degrees.",
    "rad2deg(tp.tensor([np.pi])).numpy().round(3).tolist()\n    [180.0]",
    wide_int64=True,
)


def arctan2(x1, x2) -> Tensor:
    """The angle of the point (x2, x1) from the positive x axis, in (-pi, pi].

    >>> import tapeflow as tp
    >>> tp.ops.numpy.arctan2(tp.tensor([1.0], "float64"), -1.0).numpy().round(4).tolist()
    [2.3562]
    """
    return elementwise.arctan2(*_float_pair(x1, x2, "arctan2"))


def hypot(x1, x2) -> Tensor:
    """sqrt(x1 ** 2 + x2 ** 2).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.hypot(3, tp.tensor([4])).numpy().tolist()
    [5.0]
    """
    a, b = _float_pair(x1, x2, "hypot")
    return tmath.sqrt(tmath.square(a) + tmath.square(b))


def sinc(x) -> Tensor:
    """sin(pi x) / (pi x), and 1 at x = 0.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.sinc(tp.tensor([0.0, 0.5], "float64")).numpy().round(4).tolist()
    [1.0, 0.6366]
    """
    x = _floating(x, "sinc")
    zero = tmath.equal(x, 0.0)
    px = tmath.where(zero, 1.0, x) * np.pi
    return tmath.where(zero, 1.0, tmath.sin(px) / px)


def heaviside(x1, x2) -> Tensor:
    """0 where x1 < 0, 1 where x1 > 0, and x2 where x1 == 0.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.heaviside(tp.tensor([-1.0, 0.0, 2.0]), 0.5).numpy().tolist()
    [0.0, 0.5, 1.0]
    """
    a, b = _float_pair(x1, x2, "heaviside")
    return tmath.where(tmath.less(a, 0.0), 0.0, tmath.where(tmath.greater(a, 0.0), 1.0, b))


def nextafter(x1, x2) -> Tensor:
    """The next representable float after x1 towards x2.

    >>> import tapeflow as tp
    >>> bool(tp.ops.numpy.nextafter(tp.tensor([1.0]), 2.0).numpy()[0] > 1.0)
    True
    """
    return elementwise.nextafter(*_float_pair(x1, x2, "nextafter"))


# ---------------------------------------------------------------- rounding
def floor(x) -> Tensor:
    """The largest integer <= x, as a float (integers read as float32).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.floor(tp.tensor([-1.5, 1.5])).numpy().tolist()
    [-2.0, 1.0]
    """
    return elementwise.floor(_floating(x, "floor"))


def ceil(x) -> Tensor:
    """The smallest integer >= x, as a float (integers read as float32).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.ceil(tp.tensor([-1.5, 1.5])).numpy().tolist()
    [-1.0, 2.0]
    """
    return elementwise.ceil(_floating(x, "ceil"))


def trunc(x) -> Tensor:
    """x rounded toward zero; integer and bool tensors are kept.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.trunc(tp.tensor([-1.5, 1.5])).numpy().tolist()
    [-1.0, 1.0]
    """
    x = _tensor(x, "trunc")
    return elementwise.trunc(x) if x.dtype.kind == "f" else tmath.identity(x)


def round(x, decimals: int = 0) -> Tensor:  # noqa: A001
    """x rounded to `decimals` places, halves to even (integer tensors keep their dtype).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.round(tp.tensor([0.5, 1.5, 1.26], "float64"), 1).numpy().tolist()
    [0.5, 1.5, 1.3]
    """
    x = _tensor(x, "round")
    if x.dtype.kind == "b":
        raise TypeError("round: expected a numeric tensor, got bool")
    return elementwise.round_half_even(x, decimals)


# -------------------------------------------------------------- predicates
def isnan(x) -> Tensor:
    """Whether each entry is NaN.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.isnan(tp.tensor([1.0, float("nan")])).numpy().tolist()
    [False, True]
    """
    return elementwise.isnan(x)


def isinf(x) -> Tensor:
    """Whether each entry is +inf or -inf.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.isinf(tp.tensor([1.0, float("-inf")])).numpy().tolist()
    [False, True]
    """
    return elementwise.isinf(x)


def isfinite(x) -> Tensor:
    """Whether each entry is neither infinite nor NaN.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.isfinite(tp.tensor([1.0, float("inf")])).numpy().tolist()
    [True, False]
    """
    return elementwise.isfinite(x)


def isposinf(x) -> Tensor:
    """Whether each entry is +inf.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.isposinf(tp.tensor([float("inf"), float("-inf")])).numpy().tolist()
    [True, False]
    """
    x = _tensor(x, "isposinf")
    return tmath.logical_and(elementwise.isinf(x), tmath.logical_not(elementwise.signbit(x)))


def isneginf(x) -> Tensor:
    """Whether each entry is -inf.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.isneginf(tp.tensor([float("inf"), float("-inf")])).numpy().tolist()
    [False, True]
    """
    x = _tensor(x, "isneginf")
    return tmath.logical_and(elementwise.isinf(x), elementwise.signbit(x))


def signbit(x) -> Tensor:
    """Whether each entry's sign bit is set (True for -0.0).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.signbit(tp.tensor([-0.0, 1.0])).numpy().tolist()
    [True, False]
    """
    return elementwise.signbit(x)


def isclose(x1, x2, rtol=1e-5, atol=1e-8, equal_nan: bool = False) -> Tensor:
    """Whether |x1 - x2| <= atol + rtol * |x2| entrywise (infinities equal when they match).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.isclose(tp.tensor([1.0, 1.1]), 1.0).numpy().tolist()
    [True, False]
    """
    a, b = _float_pair(x1, x2, "isclose")
    finite = tmath.logical_and(elementwise.isfinite(a), elementwise.isfinite(b))
    close = tmath.less_equal(tmath.abs(a - b), atol + rtol * tmath.abs(b))
    out = tmath.where(finite, close, tmath.equal(a, b))
    if equal_nan:
        out = tmath.logical_or(out, tmath.logical_and(elementwise.isnan(a), elementwise.isnan(b)))
    return out


def allclose(x1, x2, rtol=1e-5, atol=1e-8, equal_nan: bool = False) -> Tensor:
    """Whether `isclose` holds for every entry: a bool scalar.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.allclose(tp.tensor([1.0, 2.0]), tp.tensor([1.0, 2.0 + 1e-9])).numpy().item()
    True
    """
    return all(isclose(x1, x2, rtol, atol, equal_nan))


def isin(x1, x2, assume_unique: bool = False, invert: bool = False) -> Tensor:
    """Whether each entry of x1 occurs anywhere in x2 (not, with `invert`).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.isin(tp.tensor([1, 2, 3]), [2, 5]).numpy().tolist()
    [False, True, False]
    """
    a, b = tmath.binary_operands(x1, x2, "isin")
    b = array.reshape(b, (-1,))
    if b.shape[0] == 0:
        found = core.full_like(a, False, dtypes.bool_)
    else:
        found = any(tmath.equal(core.expand_dims(a, -1), b), axis=-1)
    return tmath.logical_not(found) if invert else found


def nan_to_num(x, nan=0.0, posinf=None, neginf=None) -> Tensor:
    """`x` with NaN, +inf and -inf replaced (the infinities by the dtype's largest finite values
    unless given).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.nan_to_num(tp.tensor([float("nan"), 1.0]), nan=-1.0).numpy().tolist()
    [-1.0, 1.0]
    """
    x = _tensor(x, "nan_to_num")
    if x.dtype.kind != "f":
        return tmath.identity(x)
    info = np.finfo(x.dtype.np)
    hi = float(info.max) if posinf is None else posinf
    lo = float(info.min) if neginf is None else neginf
    x = tmath.where(elementwise.isnan(x), nan, x)
    x = tmath.where(tmath.equal(x, np.inf), hi, x)
    return tmath.where(tmath.equal(x, -np.inf), lo, x)


# ------------------------------------------------------------------ logic
def logical_and(x1, x2) -> Tensor:
    """x1 and x2 entrywise (numbers are true when nonzero).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.logical_and(tp.tensor([1, 0, 2]), True).numpy().tolist()
    [True, False, True]
    """
    return tmath.logical_and(_as_bool(x1, "logical_and"), _as_bool(x2, "logical_and"))


def logical_or(x1, x2) -> Tensor:
    """x1 or x2 entrywise (numbers are true when nonzero).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.logical_or(tp.tensor([1, 0]), False).numpy().tolist()
    [True, False]
    """
    return tmath.logical_or(_as_bool(x1, "logical_or"), _as_bool(x2, "logical_or"))


def logical_xor(x1, x2) -> Tensor:
    """x1 xor x2 entrywise (numbers are true when nonzero).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.logical_xor(tp.tensor([True, False]), True).numpy().tolist()
    [False, True]
    """
    return tmath.not_equal(_as_bool(x1, "logical_xor"), _as_bool(x2, "logical_xor"))


def logical_not(x) -> Tensor:
    """not x entrywise (numbers are true when nonzero).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.logical_not(tp.tensor([1, 0])).numpy().tolist()
    [False, True]
    """
    return tmath.logical_not(_as_bool(x, "logical_not"))


# ------------------------------------------------------- integers and bits
def bitwise_and(x, y) -> Tensor:
    """x & y on integer or bool tensors.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.bitwise_and(tp.tensor([12]), 10).numpy().tolist()
    [8]
    """
    return elementwise.bitwise_and(*_int_or_bool_pair(x, y, "bitwise_and"))


def bitwise_or(x, y) -> Tensor:
    """x | y on integer or bool tensors.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.bitwise_or(tp.tensor([12]), 10).numpy().tolist()
    [14]
    """
    return elementwise.bitwise_or(*_int_or_bool_pair(x, y, "bitwise_or"))


def bitwise_xor(x, y) -> Tensor:
    """x ^ y on integer or bool tensors.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.bitwise_xor(tp.tensor([12]), 10).numpy().tolist()
    [6]
    """
    return elementwise.bitwise_xor(*_int_or_bool_pair(x, y, "bitwise_xor"))


def bitwise_invert(x) -> Tensor:
    """~x on an integer (two's complement) or bool tensor.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.bitwise_invert(tp.tensor([0, 5])).numpy().tolist()
    [-1, -6]
    """
    return elementwise.bitwise_invert(x)


bitwise_not = bitwise_invert


def bitwise_left_shift(x, y) -> Tensor:
    """x << y on integer tensors.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.bitwise_left_shift(tp.tensor([3]), 2).numpy().tolist()
    [12]
    """
    return elementwise.bitwise_left_shift(*_int_or_bool_pair(x, y, "bitwise_left_shift", "i"))


def bitwise_right_shift(x, y) -> Tensor:
    """x >> y on integer tensors (arithmetic: the sign is kept).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.bitwise_right_shift(tp.tensor([12, -8]), 2).numpy().tolist()
    [3, -2]
    """
    return elementwise.bitwise_right_shift(*_int_or_bool_pair(x, y, "bitwise_right_shift", "i"))


left_shift = bitwise_left_shift
right_shift = bitwise_right_shift


def gcd(x1, x2) -> Tensor:
    """The greatest common divisor of integer tensors.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.gcd(tp.tensor([12, 7]), 8).numpy().tolist()
    [4, 1]
    """
    return elementwise.gcd(*_int_or_bool_pair(x1, x2, "gcd", "i"))


def lcm(x1, x2) -> Tensor:
    """The least common multiple of integer tensors.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.lcm(tp.tensor([4, 3]), 6).numpy().tolist()
    [12, 6]
    """
    return elementwise.lcm(*_int_or_bool_pair(x1, x2, "lcm", "i"))


# ------------------------------------------------------ real-valued complex
def real(x) -> Tensor:
    """The real part: tapeflow's tensors are real, so `x` itself.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.real(tp.tensor([1.5])).numpy().tolist()
    [1.5]
    """
    return tmath.identity(_tensor(x, "real"))


def imag(x) -> Tensor:
    """The imaginary part: tapeflow's tensors are real, so zeros like `x`.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.imag(tp.tensor([1.5])).numpy().tolist()
    [0.0]
    """
    return core.zeros_like(_tensor(x, "imag"))


def conj(x) -> Tensor:
    """The complex conjugate: tapeflow's tensors are real, so `x` itself.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.conj(tp.tensor([1.5])).numpy().tolist()
    [1.5]
    """
    return tmath.identity(_tensor(x, "conj"))


conjugate = conj


def angle(x) -> Tensor:
    """The complex argument of a real number: 0, or pi for negatives (and -0.0).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.angle(tp.tensor([2.0, -2.0], dtype="float64")).numpy().round(4).tolist()
    [0.0, 3.1416]
    """
    x = _floating(x, "angle")
    return elementwise.arctan2(core.zeros_like(x), x)


def isreal(x) -> Tensor:
    """Whether each entry has no imaginary part: always, for tapeflow's real tensors.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.isreal(tp.tensor([1.5])).numpy().tolist()
    [True]
    """
    return core.full_like(_tensor(x, "isreal"), True, dtypes.bool_)


def copy(x) -> Tensor:
    """A new tensor with the value of `x` (gradients flow through it).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.copy(tp.tensor([1, 2])).numpy().tolist()
    [1, 2]
    """
    return tmath.identity(_tensor(x, "copy"))


# -------------------------------------------------------------- reductions
def _axes(name, axis, ndim):
    return shapes.normalize_axes(name, axis, ndim)


def sum(x, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """The sum over `axis` (None: all axes).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.sum(tp.tensor([[1, 2], [3, 4]]), axis=0).numpy().tolist()
    [4, 6]
    """
    return core.sum(x, axis, keepdims)


mean = reduce.mean
var = reduce.var
std = reduce.std


def prod(x, axis=None, keepdims: bool = False, dtype=None) -> Tensor:
    """The product over `axis`, computed in `dtype` when given (bools as int64).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.prod(tp.tensor([[1, 2], [3, 4]]), axis=1).numpy().tolist()
    [2, 12]
    """
    x = _tensor(x, "prod")
    if dtype is not None:
        x = core.cast(x, dtype)
    elif x.dtype.kind == "b":
        x = core.cast(x, dtypes.int64)
    return reduce.prod(x, axis, keepdims)


def _extreme(name, reducer, pick, x, axis, keepdims, initial):
    x = _tensor(x, name)
    boolean = x.dtype.kind == "b"
    if boolean:
        x = core.cast(x, dtypes.int32)
    if initial is None and builtins.any(x.shape[a] == 0 for a in _axes(name, axis, x.ndim)):
        raise ValueError(f"{name}: zero-size reduction over axis {axis} of shape {x.shape}, and no `initial`")
    if initial is not None and builtins.any(x.shape[a] == 0 for a in _axes(name, axis, x.ndim)):
        out = core.full_like(core.sum(x, axis, keepdims), initial)
    else:
        out = reducer(x, axis, keepdims)
    if initial is not None:
        out = pick(out, initial)
    return tmath.not_equal(out, 0) if boolean else out


def max(x, axis=None, keepdims: bool = False, initial=None) -> Tensor:  # noqa: A001
    """The largest value over `axis`, at least `initial` when given; ties share the gradient.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.max(tp.tensor([[1, 5], [7, 2]]), axis=1).numpy().tolist()
    [5, 7]
    """
    return _extreme("max", reduce.max, tmath.maximum, x, axis, keepdims, initial)


def min(x, axis=None, keepdims: bool = False, initial=None) -> Tensor:  # noqa: A001
    """The smallest value over `axis`, at most `initial` when given; ties share the gradient.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.min(tp.tensor([[1, 5], [7, 2]]), axis=1, initial=0).numpy().tolist()
    [0, 0]
    """
    return _extreme("min", reduce.min, tmath.minimum, x, axis, keepdims, initial)


def amax(x, axis=None, keepdims: bool = False) -> Tensor:
    """The largest value over `axis` (the same as `max`).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.amax(tp.tensor([1.0, 3.0])).numpy().item()
    3.0
    """
    return max(x, axis, keepdims)


def amin(x, axis=None, keepdims: bool = False) -> Tensor:
    """The smallest value over `axis` (the same as `min`).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.amin(tp.tensor([1.0, 3.0])).numpy().item()
    1.0
    """
    return min(x, axis, keepdims)


def ptp(x, axis=None, keepdims: bool = False) -> Tensor:
    """max - min over `axis` ("peak to peak").

    >>> import tapeflow as tp
    >>> tp.ops.numpy.ptp(tp.tensor([[1, 5], [7, 2]]), axis=1).numpy().tolist()
    [4, 5]
    """
    x = _tensor(x, "ptp")
    if x.dtype.kind == "b":
        raise TypeError("ptp: expected a numeric tensor, got bool")
    return max(x, axis, keepdims) - min(x, axis, keepdims)


def _arg(name, reducer, x, axis, keepdims):
    x = _tensor(x, name)
    if x.dtype.kind == "b":
        x = core.cast(x, dtypes.int32)
    reduced = x.shape if axis is None else (x.shape[shapes.normalize_axis(name, axis, x.ndim)],)
    if x.shape and builtins.any(d == 0 for d in reduced):
        raise ValueError(f"{name}: empty input of shape {x.shape}")
    out = reducer(x, axis)
    if not keepdims:
        return out
    if axis is None:
        return array.reshape(out, (1,) * x.ndim)
    return core.expand_dims(out, shapes.normalize_axis(name, axis, x.ndim))


def argmax(x, axis=None, keepdims: bool = False) -> Tensor:
    """The index (int64) of the largest value along `axis` (of the flattened tensor for None).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.argmax(tp.tensor([[1, 5], [7, 2]]), axis=1, keepdims=True).numpy().tolist()
    [[1], [0]]
    """
    return _arg("argmax", reduce.argmax, x, axis, keepdims)


def argmin(x, axis=None, keepdims: bool = False) -> Tensor:
    """The index (int64) of the smallest value along `axis` (of the flattened tensor for None).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.argmin(tp.tensor([3.0, 1.0, 2.0])).numpy().item()
    1
    """
    return _arg("argmin", reduce.argmin, x, axis, keepdims)


def all(x, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Whether every entry over `axis` is true (nonzero); True over an empty axis.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.all(tp.tensor([[1, 0], [2, 3]]), axis=1).numpy().tolist()
    [False, True]
    """
    false = core.cast(tmath.logical_not(_as_bool(x, "all")), dtypes.int32)
    return tmath.equal(core.sum(false, axis, keepdims), 0)


def any(x, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Whether some entry over `axis` is true (nonzero); False over an empty axis.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.any(tp.tensor([[1, 0], [0, 0]]), axis=1).numpy().tolist()
    [True, False]
    """
    true = core.cast(_as_bool(x, "any"), dtypes.int32)
    return tmath.greater(core.sum(true, axis, keepdims), 0)


def count_nonzero(x, axis=None) -> Tensor:
    """How many entries over `axis` are nonzero, as int32.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.count_nonzero(tp.tensor([[1, 0], [2, 3]]), axis=1).numpy().tolist()
    [1, 2]
    """
    return core.sum(core.cast(_as_bool(x, "count_nonzero"), dtypes.int32), axis)


@in_float32
def average(x, axis=None, weights=None) -> Tensor:
    """The mean over `axis` weighted by `weights` (shaped like `x`, or 1-D along one `axis`).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.average(tp.tensor([1.0, 3.0]), weights=tp.tensor([3.0, 1.0])).numpy().item()
    1.5
    """
    x = _floating(x, "average")
    if weights is None:
        return reduce.mean(x, axis)
    w = _tensor(weights, "average")
    x, w = tmath.binary_operands(x, w if w.dtype.kind == "f" else core.cast(w, x.dtype), "average")
    if w.shape != x.shape:
        if w.ndim != 1 or not isinstance(axis, int):
            raise ValueError(
                f"average: weights of shape {w.shape} must match x's shape {x.shape}, or be 1-D along an int axis"
            )
        a = shapes.normalize_axis("average", axis, x.ndim)
        if w.shape[0] != x.shape[a]:
            raise ValueError(f"average: {w.shape[0]} weights for axis {axis} of size {x.shape[a]}")
        w = array.reshape(w, tuple(-1 if i == a else 1 for i in range(x.ndim)))
    return core.sum(x * w, axis) / core.sum(w + core.zeros_like(x), axis)


def _quantile(name, x, q, axis, method, keepdims, ignore_nan):
    return elementwise.quantile(_floating(x, name), q, axis, method, keepdims, ignore_nan)


def quantile(x, q, axis=None, method: str = "linear", keepdims: bool = False) -> Tensor:
    """The `q`-th quantiles (q in [0, 1]) over `axis`; `method` is "linear", "lower",
    "higher", "midpoint" or "nearest". A 1-D `q` puts one quantile per entry first.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.quantile(tp.tensor([[1, 2, 3, 4]]), 0.5, axis=1).numpy().tolist()
    [2.5]
    """
    return _quantile("quantile", x, q, axis, method, keepdims, False)


def nanquantile(x, q, axis=None, method: str = "linear", keepdims: bool = False) -> Tensor:
    """`quantile`, leaving NaNs out.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.nanquantile(tp.tensor([1.0, float("nan"), 3.0]), 0.5).numpy().item()
    2.0
    """
    return _quantile("nanquantile", x, q, axis, method, keepdims, True)


def _as_fraction(q):
    return (q.numpy() if isinstance(q, Tensor) else np.asarray(q, dtype=np.float64)) / 100.0


def percentile(x, q, axis=None, method: str = "linear", keepdims: bool = False) -> Tensor:
    """The `q`-th percentiles (q in [0, 100]) over `axis`, as `quantile`.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.percentile(tp.tensor([1.0, 2.0, 3.0]), 50).numpy().item()
    2.0
    """
    return _quantile("percentile", x, _as_fraction(q), axis, method, keepdims, False)


def nanpercentile(x, q, axis=None, method: str = "linear", keepdims: bool = False) -> Tensor:
    """`percentile`, leaving NaNs out.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.nanpercentile(tp.tensor([1.0, float("nan"), 3.0]), 100).numpy().item()
    3.0
    """
    return _quantile("nanpercentile", x, _as_fraction(q), axis, method, keepdims, True)


def median(x, axis=None, keepdims: bool = False) -> Tensor:
    """The median over `axis` (the mean of the middle two for an even count).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.median(tp.tensor([3, 1, 2, 10])).numpy().item()
    2.5
    """
    return _quantile("median", x, 0.5, axis, "linear", keepdims, False)


def nanmedian(x, axis=None, keepdims: bool = False) -> Tensor:
    """`median`, leaving NaNs out.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.nanmedian(tp.tensor([3.0, float("nan"), 1.0])).numpy().item()
    2.0
    """
    return _quantile("nanmedian", x, 0.5, axis, "linear", keepdims, True)


# ------------------------------------------------------- NaN-ignoring forms
def _nan_filled(x, value, name):
    x = _tensor(x, name)
    if x.dtype.kind != "f":
        return x, None
    nan = elementwise.isnan(x)
    return tmath.where(nan, value, x), nan


@in_float32
def nansum(x, axis=None, keepdims: bool = False) -> Tensor:
    """The sum over `axis`, NaNs counted as zero.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.nansum(tp.tensor([1.0, float("nan"), 2.0])).numpy().item()
    3.0
    """
    return core.sum(_nan_filled(x, 0.0, "nansum")[0], axis, keepdims)


@in_float32
def nanprod(x, axis=None, keepdims: bool = False) -> Tensor:
    """The product over `axis`, NaNs counted as one.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.nanprod(tp.tensor([2.0, float("nan"), 3.0])).numpy().item()
    6.0
    """
    return prod(_nan_filled(x, 1.0, "nanprod")[0], axis, keepdims)


@in_float32
def nanmean(x, axis=None, keepdims: bool = False) -> Tensor:
    """The mean over `axis` of the entries that are not NaN.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.nanmean(tp.tensor([1.0, float("nan"), 2.0])).numpy().item()
    1.5
    """
    filled, nan = _nan_filled(_floating(x, "nanmean"), 0.0, "nanmean")
    count = core.sum(core.cast(tmath.logical_not(nan), filled.dtype), axis, keepdims)
    return core.sum(filled, axis, keepdims) / count


@in_float32
def nanvar(x, axis=None, keepdims: bool = False) -> Tensor:
    """The variance over `axis` of the entries that are not NaN.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.nanvar(tp.tensor([1.0, float("nan"), 3.0])).numpy().item()
    1.0
    """
    filled, nan = _nan_filled(_floating(x, "nanvar"), 0.0, "nanvar")
    present = core.cast(tmath.logical_not(nan), filled.dtype)
    mean_ = core.sum(filled, axis, keepdims=True) / core.sum(present, axis, keepdims=True)
    centered = present * (filled - mean_)
    return core.sum(tmath.square(centered), axis, keepdims) / core.sum(present, axis, keepdims)


@in_float32
def nanstd(x, axis=None, keepdims: bool = False) -> Tensor:
    """The standard deviation over `axis` of the entries that are not NaN.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.nanstd(tp.tensor([1.0, float("nan"), 3.0])).numpy().item()
    1.0
    """
    return tmath.sqrt(nanvar(x, axis, keepdims))


def _nan_extreme(name, reducer, fill, x, axis, keepdims):
    filled, nan = _nan_filled(x, fill, name)
    out = reducer(filled, axis, keepdims)
    if nan is None:
        return out
    return tmath.where(all(nan, axis, keepdims), np.nan, out)


def nanmax(x, axis=None, keepdims: bool = False) -> Tensor:
    """The largest value over `axis` ignoring NaNs (NaN where all are NaN).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.nanmax(tp.tensor([1.0, float("nan"), 2.0])).numpy().item()
    2.0
    """
    return _nan_extreme("nanmax", max, -np.inf, x, axis, keepdims)


def nanmin(x, axis=None, keepdims: bool = False) -> Tensor:
    """The smallest value over `axis` ignoring NaNs (NaN where all are NaN).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.nanmin(tp.tensor([1.0, float("nan"), 2.0])).numpy().item()
    1.0
    """
    return _nan_extreme("nanmin", min, np.inf, x, axis, keepdims)


def nanargmax(x, axis=None, keepdims: bool = False) -> Tensor:
    """The index of the largest value along `axis`, ignoring NaNs.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.nanargmax(tp.tensor([1.0, float("nan"), 2.0])).numpy().item()
    2
    """
    return argmax(_nan_filled(x, -np.inf, "nanargmax")[0], axis, keepdims)


def nanargmin(x, axis=None, keepdims: bool = False) -> Tensor:
    """The index of the smallest value along `axis`, ignoring NaNs.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.nanargmin(tp.tensor([float("nan"), 2.0, 1.0])).numpy().item()
    2
    """
    return argmin(_nan_filled(x, np.inf, "nanargmin")[0], axis, keepdims)


@in_float32
def cumprod(x, axis=None, dtype=None) -> Tensor:
    """Running products along `axis` (of the flattened tensor when None).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.cumprod(tp.tensor([[1, 2], [3, 4]]), axis=1).numpy().tolist()
    [[1, 2], [3, 12]]
    """
    x = _tensor(x, "cumprod")
    if dtype is not None:
        x = core.cast(x, dtype)
    elif x.dtype.kind == "b":
        x = core.cast(x, dtypes.int32)
    if axis is None:
        x, axis = array.reshape(x, (-1,)), 0
    return elementwise.cumprod(x, axis)


@in_float32
def nancumsum(x, axis=None, dtype=None) -> Tensor:
    """Running sums along `axis`, NaNs counted as zero.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.nancumsum(tp.tensor([1.0, float("nan"), 2.0])).numpy().tolist()
    [1.0, 1.0, 3.0]
    """
    x = _tensor(x, "nancumsum")
    if x.dtype.kind == "b" and dtype is None:
        x = core.cast(x, dtypes.int32)
    return keras_names.cumsum(_nan_filled(x, 0.0, "nancumsum")[0], axis, dtype)


@in_float32
def nancumprod(x, axis=None, dtype=None) -> Tensor:
    """Running products along `axis`, NaNs counted as one.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.nancumprod(tp.tensor([2.0, float("nan"), 3.0])).numpy().tolist()
    [2.0, 2.0, 6.0]
    """
    return cumprod(_nan_filled(x, 1.0, "nancumprod")[0], axis, dtype)


# -------------------------------------------------------- statistics
def corrcoef(x) -> Tensor:
    """Pearson correlation coefficients between the rows of `x` (variables in rows).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.corrcoef(tp.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])).numpy().round(6).tolist()
    [[1.0, -1.0], [-1.0, 1.0]]
    """
    x = _floating(x, "corrcoef")
    if x.ndim not in (1, 2):
        raise ValueError(f"corrcoef: expected a 1-D or 2-D tensor, got shape {x.shape}")
    rows = array.reshape(x, (1, -1)) if x.ndim == 1 else x
    centered = rows - reduce.mean(rows, 1, keepdims=True)
    cov = tmath.matmul(centered, core.transpose(centered))
    scale = tmath.sqrt(core.sum(tmath.square(centered), 1))
    out = tmath.clip(cov / (core.expand_dims(scale, 1) * core.expand_dims(scale, 0)), -1.0, 1.0)
    return array.reshape(out, ()) if x.ndim == 1 else out


def correlate(x1, x2, mode: str = "valid") -> Tensor:
    """The cross-correlation of two 1-D tensors, `mode` "valid", "same" or "full" (NumPy's).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.correlate(tp.tensor([1.0, 2.0, 3.0]), tp.tensor([0.0, 1.0])).numpy().tolist()
    [2.0, 3.0]
    """
    if mode not in ("valid", "same", "full"):
        raise ValueError(f"correlate: mode must be 'valid', 'same' or 'full', got {mode!r}")
    a, v = _float_pair(x1, x2, "correlate")
    if a.ndim != 1 or v.ndim != 1:
        raise ValueError(f"correlate: expected 1-D tensors, got shapes {a.shape} and {v.shape}")
    n, m = a.shape[0], v.shape[0]
    if n == 0 or m == 0:
        raise ValueError(f"correlate: empty input of shapes {a.shape} and {v.shape}")
    padded = array.pad(a, [(m - 1, m - 1)])
    windows = padded[np.arange(n + m - 1)[:, None] + np.arange(m)[None, :]]
    full = core.sum(windows * v, 1)
    if mode == "full":
        return full
    if mode == "same":
        start = (n + m - 1 - builtins.max(n, m)) // 2
        return full[start : start + builtins.max(n, m)]
    return full[builtins.min(n, m) - 1 : builtins.max(n, m)]


@in_float32
def trapezoid(y, x=None, dx=1.0, axis: int = -1) -> Tensor:
    """The integral of `y` along `axis` by the trapezoidal rule, at points `x` (or `dx` apart).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.trapezoid(tp.tensor([1.0, 2.0, 3.0])).numpy().item()
    4.0
    """
    y = _floating(y, "trapezoid")
    a = shapes.normalize_axis("trapezoid", axis, y.ndim)
    head = (slice(None),) * a
    mids = (y[head + (slice(1, None),)] + y[head + (slice(None, -1),)]) * 0.5
    if x is None:
        return core.sum(mids, a) * dx
    x = _floating(x, "trapezoid")
    if x.ndim == 1:
        if x.shape[0] != y.shape[a]:
            raise ValueError(f"trapezoid: {x.shape[0]} sample points for axis {axis} of size {y.shape[a]}")
        d = array.reshape(x[1:] - x[:-1], tuple(-1 if i == a else 1 for i in range(y.ndim)))
    else:
        d = x[head + (slice(1, None),)] - x[head + (slice(None, -1),)]
    return core.sum(mids * d, a)


def histogram(x, bins: int = 10, range=None) -> tuple[Tensor, Tensor]:  # noqa: A002
    """Counts of a 1-D tensor's values in `bins` equal bins over `range` (default: its min to
    max), and the bins' edges; the last bin includes its right edge. Both are float32.

    >>> import tapeflow as tp
    >>> counts, edges = tp.ops.numpy.histogram(tp.tensor([0.0, 1.0, 1.0, 4.0]), bins=2)
    >>> counts.numpy().tolist(), edges.numpy().tolist()
    ([3.0, 1.0], [0.0, 2.0, 4.0])
    """
    x = _floating(x, "histogram")
    bins = shapes.as_int("histogram", "bins", bins, low=1)
    if x.ndim != 1:
        raise ValueError(f"histogram: expected a 1-D tensor, got shape {x.shape}")
    if range is None:
        lo, hi = reduce.min(x), reduce.max(x)
    else:
        if len(range) != 2 or range[0] > range[1]:
            raise ValueError(f"histogram: range must be (min, max) with min <= max, got {range!r}")
        lo, hi = core.cast(range[0], x.dtype), core.cast(range[1], x.dtype)
    same = tmath.equal(lo, hi)
    lo, hi = tmath.where(same, lo - 0.5, lo), tmath.where(same, hi + 0.5, hi)
    steps = wrap_host(np.arange(bins + 1, dtype=x.dtype.np) / bins)
    edges = lo + (hi - lo) * steps
    inside = tmath.logical_and(tmath.greater_equal(x, lo), tmath.less_equal(x, hi))
    index = core.cast(elementwise.floor((x - lo) / (hi - lo) * bins), dtypes.int64)
    index = tmath.where(inside, tmath.minimum(index, bins - 1), -1)
    counts = core.sum(array.one_hot(index, bins, 1.0, 0.0, dtypes.float32), 0)
    return counts, core.cast(edges, dtypes.float32)


def bincount(x, weights=None, minlength: int = 0, sparse: bool = False) -> Tensor:
    """How often each value 0, 1, ... occurs in a non-negative integer tensor (1-D, or 2-D counted
    per row), summing `weights` instead of ones when given. The length is max(x) + 1, at least
    `minlength`, so it needs `x`'s values (eager tensors).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.bincount(tp.tensor([0, 2, 2])).numpy().tolist()
    [1, 0, 2]
    """
    if sparse:
        raise ValueError("bincount: sparse=True is not supported; tapeflow's tensors are dense")
    x = _tensor(x, "bincount")
    if x.dtype.kind != "i":
        raise TypeError(f"bincount: expected an integer tensor, got {x.dtype}")
    if x.ndim not in (1, 2):
        raise ValueError(f"bincount: expected a 1-D or 2-D tensor, got shape {x.shape}")
    minlength = shapes.as_int("bincount", "minlength", minlength)
    values = x.numpy()
    if values.size and values.min() < 0:
        raise ValueError(f"bincount: values must be non-negative, got {int(values.min())}")
    length = builtins.max(int(values.max()) + 1 if values.size else 0, minlength)
    if weights is None:
        w, dtype = None, dtypes.int32
    else:
        w = _tensor(weights, "bincount")
        if w.shape != x.shape:
            raise ValueError(f"bincount: weights of shape {w.shape} do not match x's shape {x.shape}")
        dtype = w.dtype if w.dtype.kind == "f" else dtypes.int32
        w = core.cast(w, dtype)
    hot = array.one_hot(x, length, 1, 0, dtype)
    if w is not None:
        hot = hot * core.expand_dims(w, -1)
    return core.sum(hot, x.ndim - 1)


# ------------------------------------------------------------------ products
def einsum(subscripts, *operands, **kwargs) -> Tensor:
    """Sums of products of the operands' entries along the axes `subscripts` names, as
    `numpy.einsum` (ellipsis and the implicit output included).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.einsum("ij,jk->ik", tp.ones((2, 3)), tp.ones((3, 2))).numpy().tolist()
    [[3.0, 3.0], [3.0, 3.0]]
    """
    if kwargs:
        raise TypeError(f"einsum: unsupported keyword arguments {sorted(kwargs)}")
    return elementwise.einsum(subscripts, *operands)


def _letters(n, start=0):
    return "abcdefghijklmnopqrstuvwxyz"[start : start + n]


def tensordot(x1, x2, axes=2) -> Tensor:
    """Sums of products over `axes`: an int N (the last N axes of x1 with the first N of x2)
    or a pair of axis lists.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.tensordot(tp.ones((2, 3)), tp.ones((3, 4)), axes=1).shape
    (2, 4)
    """
    a, b = tmath.binary_operands(x1, x2, "tensordot")
    if isinstance(axes, int):
        if not 0 <= axes <= builtins.min(a.ndim, b.ndim):
            raise ValueError(f"tensordot: axes={axes} for operands of ranks {a.ndim} and {b.ndim}")
        pairs_a, pairs_b = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        if len(axes) != 2:
            raise ValueError(f"tensordot: axes must be an int or a pair of axis lists, got {axes!r}")
        pa, pb = ([v] if isinstance(v, int) else list(v) for v in axes)
        if len(pa) != len(pb):
            raise ValueError(f"tensordot: axes {axes!r} pair {len(pa)} axes of x1 with {len(pb)} of x2")
        pairs_a = [shapes.normalize_axis("tensordot", v, a.ndim) for v in pa]
        pairs_b = [shapes.normalize_axis("tensordot", v, b.ndim) for v in pb]
    for i, j in zip(pairs_a, pairs_b, strict=True):
        if a.shape[i] != b.shape[j]:
            raise ValueError(f"tensordot: axis {i} of x1 {a.shape} and axis {j} of x2 {b.shape} differ in size")
    sa = list(_letters(a.ndim))
    sb = list(_letters(b.ndim, a.ndim))
    for i, j in zip(pairs_a, pairs_b, strict=True):
        sb[j] = sa[i]
    out = [c for k, c in enumerate(sa) if k not in pairs_a] + [c for k, c in enumerate(sb) if k not in pairs_b]
    return elementwise.einsum(f"{''.join(sa)},{''.join(sb)}->{''.join(out)}", a, b)


def dot(x1, x2) -> Tensor:
    """NumPy's dot: a product for scalars, matmul for matrices, and otherwise a sum over the
    last axis of x1 and the second-to-last (or only) axis of x2.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.dot(tp.tensor([1, 2]), tp.tensor([3, 4])).numpy().item()
    11
    """
    a, b = tmath.binary_operands(x1, x2, "dot")
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return tensordot(a, b, ([a.ndim - 1], [builtins.max(b.ndim - 2, 0)]))


def inner(x1, x2) -> Tensor:
    """Sums of products over the last axes of x1 and x2 (a product for scalars).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.inner(tp.ones((2, 3)), tp.ones((4, 3))).shape
    (2, 4)
    """
    a, b = tmath.binary_operands(x1, x2, "inner")
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return tensordot(a, b, ([a.ndim - 1], [b.ndim - 1]))


def vdot(x1, x2) -> Tensor:
    """The dot product of the two tensors flattened.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.vdot(tp.ones((2, 2)), tp.ones((4,))).numpy().item()
    4.0
    """
    a, b = tmath.binary_operands(x1, x2, "vdot")
    return elementwise.einsum("i,i->", array.reshape(a, (-1,)), array.reshape(b, (-1,)))


def outer(x1, x2) -> Tensor:
    """The products of every entry of x1 (flattened) with every entry of x2 (flattened).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.outer(tp.tensor([1, 2]), tp.tensor([1, 10])).numpy().tolist()
    [[1, 10], [2, 20]]
    """
    a, b = tmath.binary_operands(x1, x2, "outer")
    return array.reshape(a, (-1, 1)) * array.reshape(b, (1, -1))


def kron(x1, x2) -> Tensor:
    """The Kronecker product: blocks of x2 scaled by each entry of x1.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.kron(tp.tensor([1, 10]), tp.tensor([1, 2])).numpy().tolist()
    [1, 2, 10, 20]
    """
    a, b = tmath.binary_operands(x1, x2, "kron")
    n = builtins.max(a.ndim, b.ndim)
    sa = (1,) * (n - a.ndim) + a.shape
    sb = (1,) * (n - b.ndim) + b.shape
    a = array.reshape(a, tuple(d for pair in zip(sa, (1,) * n, strict=True) for d in pair))
    b = array.reshape(b, tuple(d for pair in zip((1,) * n, sb, strict=True) for d in pair))
    return array.reshape(a * b, tuple(p * q for p, q in zip(sa, sb, strict=True)))


def cross(x1, x2, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis=None) -> Tensor:
    """The cross product of 3-vectors (or 2-vectors, taken with a zero third component) along
    `axisa` of x1 and `axisb` of x2, put along `axisc`; `axis` sets all three. Two 2-vectors
    give the z component only.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.cross(tp.tensor([1.0, 0.0, 0.0]), tp.tensor([0.0, 1.0, 0.0])).numpy().tolist()
    [0.0, 0.0, 1.0]
    """
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = tmath.binary_operands(x1, x2, "cross")
    a = keras_names.transpose(a, _to_last(shapes.normalize_axis("cross", axisa, a.ndim), a.ndim))
    b = keras_names.transpose(b, _to_last(shapes.normalize_axis("cross", axisb, b.ndim), b.ndim))
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ValueError(
            f"cross: the vectors must have 2 or 3 components, got {a.shape[-1]} and {b.shape[-1]} "
            f"(shapes {a.shape} and {b.shape})"
        )
    a0, a1, b0, b1 = a[..., 0], a[..., 1], b[..., 0], b[..., 1]
    z = a0 * b1 - a1 * b0
    if a.shape[-1] == 2 and b.shape[-1] == 2:
        return z
    a2 = a[..., 2] if a.shape[-1] == 3 else core.zeros_like(a0)
    b2 = b[..., 2] if b.shape[-1] == 3 else core.zeros_like(b0)
    out = array.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, z], axis=-1)
    c = shapes.normalize_axis("cross", axisc, out.ndim)
    return keras_names.transpose(out, tuple(int(i) for i in np.argsort(_to_last(c, out.ndim))))


def _to_last(axis: int, ndim: int) -> tuple:
    return tuple(i for i in range(ndim) if i != axis) + (axis,)


def matmul(x1=_UNSET, x2=_UNSET, *, a=_UNSET, b=_UNSET) -> Tensor:
    """The matrix product of the last two axes, batched over the leading ones (integer tensors
    too; `a=`, `b=` are accepted for `x1=`, `x2=`).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.matmul(tp.tensor([[1, 2]]), tp.tensor([[3], [4]])).numpy().tolist()
    [[11]]
    """
    x = keras_names._either("matmul", "x1", x1, "a", a)
    y = keras_names._either("matmul", "x2", x2, "b", b)
    p, q = tmath.binary_operands(x, y, "matmul")
    if p.dtype.kind == "f":
        return tmath.matmul(p, q)
    if p.ndim == 0 or q.ndim == 0:
        raise ValueError(f"matmul: operands must not be scalars, got shapes {p.shape} and {q.shape}")
    left = "...ij" if p.ndim > 1 else "j"
    right = "...jk" if q.ndim > 1 else "j"
    out = "..." + ("i" if p.ndim > 1 else "") + ("k" if q.ndim > 1 else "")
    return elementwise.einsum(f"{left},{right}->{out}", p, q)


def vectorize(pyfunc, *, excluded=None, signature=None):
    """`pyfunc` applied along the leading (batch) axes of its tensor arguments. Without a
    `signature`, `pyfunc` must be elementwise in tensor ops: it is called once on the
    broadcast arguments. With a signature such as "(n),(n)->()", it is called once per
    batch entry and the results are stacked. Arguments named in `excluded` (positions or
    keywords) are passed through as they are.

    >>> import tapeflow as tp
    >>> norms = tp.ops.numpy.vectorize(lambda v: tp.sqrt(tp.sum(v * v)), signature="(n)->()")
    >>> norms(tp.tensor([[3.0, 4.0], [6.0, 8.0]])).numpy().tolist()
    [5.0, 10.0]
    """
    excluded = set(excluded or ())
    core_ranks = None
    if signature is not None:
        ins, arrow, outs = signature.replace(" ", "").partition("->")
        if not arrow or "),(" in outs or not ins.startswith("(") or not outs.startswith("("):
            raise ValueError(f"vectorize: signature must look like '(n),(n)->()', got {signature!r}")
        core_ranks = [len([d for d in t.strip("()").split(",") if d]) for t in ins[1:-1].split("),(")]

    def vectorized(*args, **kwargs):
        if core_ranks is None:
            return pyfunc(*args, **kwargs)
        positions = [i for i in range(len(args)) if i not in excluded]
        tensors = [_tensor(args[i], "vectorize") for i in positions]
        if len(core_ranks) != len(tensors):
            raise ValueError(f"vectorize: signature {signature!r} takes {len(core_ranks)} tensors, got {len(tensors)}")
        for x, r in zip(tensors, core_ranks, strict=True):
            if x.ndim < r:
                raise ValueError(
                    f"vectorize: an argument of shape {x.shape} has fewer than the {r} core axes of {signature!r}"
                )
        batch_shapes = [t.shape[: t.ndim - r] for t, r in zip(tensors, core_ranks, strict=True)]
        batch = shapes.broadcast("vectorize", *batch_shapes)
        flat = [
            array.reshape(core.broadcast_to(t, batch + t.shape[t.ndim - r :]), (-1,) + t.shape[t.ndim - r :])
            for t, r in zip(tensors, core_ranks, strict=True)
        ]
        results = []
        for k in range(_pymath.prod(batch)):
            call = list(args)
            for i, f in zip(positions, flat, strict=True):
                call[i] = f[k]
            results.append(_tensor(pyfunc(*call, **kwargs), "vectorize"))
        out = array.stack(results) if results else core.zeros((0,))
        return array.reshape(out, batch + out.shape[1:])

    return vectorized


# ---------------------------------------------------------------- creation
def zeros(shape, dtype=None) -> Tensor:
    """A tensor of zeros (float32 unless `dtype`).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.zeros((2,)).numpy().tolist()
    [0.0, 0.0]
    """
    return creation.zeros(shape, dtype)


def ones(shape, dtype=None) -> Tensor:
    """A tensor of ones (float32 unless `dtype`).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.ones((2,), "int32").numpy().tolist()
    [1, 1]
    """
    return creation.ones(shape, dtype)


def empty(shape, dtype=None) -> Tensor:
    """A tensor of the shape, filled with zeros (tapeflow never hands out uninitialized memory).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.empty((2,)).shape
    (2,)
    """
    return creation.zeros(shape, dtype)


def full(shape, fill_value, dtype=None) -> Tensor:
    """A tensor filled with `fill_value` (float32 unless `dtype`, as in Keras; `tp.full` takes
    the value's dtype instead).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.full((2,), 7).numpy().tolist()
    [7.0, 7.0]
    """
    d = dtypes.DEFAULT_FLOAT if dtype is None else dtypes.as_dtype(dtype)
    if isinstance(fill_value, Tensor):
        return core.broadcast_to(core.cast(fill_value, d), shapes.as_dims("full", shape))
    return creation.full(shape, fill_value, d)


def zeros_like(x, dtype=None) -> Tensor:
    """Zeros shaped like `x` (of its dtype unless `dtype`).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.zeros_like(tp.tensor([1, 2])).numpy().tolist()
    [0, 0]
    """
    return core.zeros_like(x, dtype)


def ones_like(x, dtype=None) -> Tensor:
    """Ones shaped like `x` (of its dtype unless `dtype`).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.ones_like(tp.tensor([1, 2])).numpy().tolist()
    [1, 1]
    """
    return core.ones_like(x, dtype)


def empty_like(x, dtype=None) -> Tensor:
    """A tensor shaped like `x`, filled with zeros.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.empty_like(tp.tensor([1, 2])).shape
    (2,)
    """
    return core.zeros_like(x, dtype)


def full_like(x, fill_value, dtype=None) -> Tensor:
    """A tensor shaped like `x` filled with `fill_value` (of x's dtype unless `dtype`).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.full_like(tp.tensor([1, 2]), 5).numpy().tolist()
    [5, 5]
    """
    return core.full_like(x, fill_value, dtype)


def _host(name, array_, dtype, device=None) -> Tensor:
    d = dtypes.DEFAULT_FLOAT if dtype is None else dtypes.as_dtype(dtype)
    return wrap_host(np.asarray(array_).astype(d.np), device)


def eye(N=_UNSET, M=None, k: int = 0, dtype=None, *, n=_UNSET, m=None, device=None) -> Tensor:
    """A matrix with ones on diagonal `k` (0: the main one) and zeros elsewhere, N x M
    (`n=`, `m=` are accepted for `N=`, `M=`).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.eye(2, 3, k=1).numpy().tolist()
    [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    rows = shapes.as_int("eye", "N", keras_names._either("eye", "N", N, "n", n))
    cols = M if M is not None else m
    cols = rows if cols is None else shapes.as_int("eye", "M", cols)
    k = shapes.as_int("eye", "k", k, low=-shapes.MAX_DIM)
    return _host("eye", np.eye(rows, cols, k), dtype, device)


def identity(n, dtype=None) -> Tensor:
    """Keras's `identity(n)`: the n x n identity matrix. Given a tensor (or array, list) instead
    of an int, tapeflow's `identity(x)`: the same value as a new tensor.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.identity(2).numpy().tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    >>> tp.identity(tp.tensor([3.0])).numpy().tolist()
    [3.0]
    """
    if isinstance(n, int | np.integer) and not isinstance(n, bool):
        return eye(n, dtype=dtype)
    if dtype is not None:
        raise TypeError("identity: dtype= is for identity(n), the identity matrix; not for a tensor argument")
    return tmath.identity(n)


def tri(N, M=None, k: int = 0, dtype=None) -> Tensor:
    """Ones at and below diagonal `k` of an N x M matrix, zeros above.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.tri(2).numpy().tolist()
    [[1.0, 0.0], [1.0, 1.0]]
    """
    rows = shapes.as_int("tri", "N", N)
    cols = rows if M is None else shapes.as_int("tri", "M", M)
    return _host("tri", np.tri(rows, cols, shapes.as_int("tri", "k", k, low=-shapes.MAX_DIM)), dtype)


def _spaced(name, start, stop, num, endpoint, axis):
    """Evenly spaced steps start + t * (stop - start), as a tensor, and the step."""
    num = shapes.as_int(name, "num", num)
    div = (num - 1) if endpoint else num
    if not isinstance(start, Tensor) and not isinstance(stop, Tensor):
        values, step = np.linspace(
            np.asarray(start, np.float64), np.asarray(stop, np.float64), num, endpoint=endpoint, retstep=True, axis=axis
        )
        return wrap_host(values), step
    s, e = _float_pair(start, stop, name)
    shape = shapes.broadcast(name, s.shape, e.shape)
    t = wrap_host((np.arange(num) / builtins.max(div, 1)).astype(s.dtype.np))
    out_ndim = len(shape) + 1
    a = shapes.normalize_axis(name, axis, out_ndim)
    t = array.reshape(t, tuple(-1 if i == a else 1 for i in range(out_ndim)))
    s, e = core.expand_dims(core.broadcast_to(s, shape), a), core.expand_dims(core.broadcast_to(e, shape), a)
    step = (e - s) / div if div > 0 else (e - s) * np.nan
    values = s + (e - s) * t
    if endpoint and num > 1:
        last = wrap_host(np.arange(num) == num - 1)
        values = tmath.where(array.reshape(last, t.shape), e, values)
    return values, array.reshape(step, shape) if isinstance(step, Tensor) else step


def _spaced_dtype(dtype, values, start, stop):
    """`dtype`, or by default float32 for numbers and the computed float dtype for tensor bounds."""
    if dtype is not None:
        return dtypes.as_dtype(dtype)
    return values.dtype if isinstance(start, Tensor) or isinstance(stop, Tensor) else dtypes.DEFAULT_FLOAT


def linspace(
    start, stop, num: int = 50, endpoint: bool = True, retstep: bool = False, dtype=None, axis: int = 0, *, device=None
):
    """`num` evenly spaced values from `start` to `stop` (included when `endpoint`), along a new
    `axis` for tensor bounds; with `retstep`, also the spacing.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.linspace(0, 1, 5).numpy().tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    values, step = _spaced("linspace", start, stop, num, endpoint, axis)
    d = _spaced_dtype(dtype, values, start, stop)
    if d.kind == "i":
        values = elementwise.floor(values)
    out = core.cast(values, d)
    if device is not None:
        out = out.to(device)
    return (out, step) if retstep else out


def logspace(start, stop, num: int = 50, endpoint: bool = True, base=10, dtype=None, axis: int = 0) -> Tensor:
    """`num` values base ** t for t evenly spaced from `start` to `stop`.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.logspace(0, 2, 3).numpy().tolist()
    [1.0, 10.0, 100.0]
    """
    values, _ = _spaced("logspace", start, stop, num, endpoint, axis)
    out = tmath.pow(core.cast(base, values.dtype) if isinstance(base, Tensor) else float(base), values)
    return core.cast(out, _spaced_dtype(dtype, values, start, stop))


def geomspace(start, stop, num: int = 50, endpoint: bool = True, dtype=None, axis: int = 0) -> Tensor:
    """`num` values from `start` to `stop` spaced evenly on a log scale (a geometric sequence).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.geomspace(1, 1000, 4).numpy().round(3).tolist()
    [1.0, 10.0, 100.0, 1000.0]
    """
    if not isinstance(start, Tensor) and not isinstance(stop, Tensor):
        if np.any(np.asarray(start) == 0) or np.any(np.asarray(stop) == 0):
            raise ValueError("geomspace: start and stop must be nonzero")
        arr = np.geomspace(np.asarray(start, np.float64), np.asarray(stop, np.float64), num, endpoint, axis=axis)
        return _host("geomspace", arr, dtype)
    s, e = _float_pair(start, stop, "geomspace")
    values, _ = _spaced("geomspace", tmath.log(tmath.abs(s)), tmath.log(tmath.abs(e)), num, endpoint, axis)
    out = tmath.exp(values)
    a = shapes.normalize_axis("geomspace", axis, out.ndim)
    out = out * core.expand_dims(core.broadcast_to(tmath.sign(s), out.shape[:a] + out.shape[a + 1 :]), a)
    return core.cast(out, _spaced_dtype(dtype, out, start, stop))


def _window(name, fn, x, *extra) -> Tensor:
    if isinstance(x, Tensor):
        x = x.numpy()
    n = shapes.as_int(name, "x", int(np.asarray(x)))
    return _host(name, fn(n, *extra), None)


def bartlett(x) -> Tensor:
    """The Bartlett (triangular) window of `x` points.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.bartlett(3).numpy().tolist()
    [0.0, 1.0, 0.0]
    """
    return _window("bartlett", np.bartlett, x)


def blackman(x) -> Tensor:
    """The Blackman window of `x` points.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.blackman(3).numpy().astype("float64").round(4).tolist()
    [-0.0, 1.0, -0.0]
    """
    return _window("blackman", np.blackman, x)


def hamming(x) -> Tensor:
    """The Hamming window of `x` points.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.hamming(3).numpy().astype("float64").round(4).tolist()
    [0.08, 1.0, 0.08]
    """
    return _window("hamming", np.hamming, x)


def hanning(x) -> Tensor:
    """The Hann window of `x` points.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.hanning(3).numpy().tolist()
    [0.0, 1.0, 0.0]
    """
    return _window("hanning", np.hanning, x)


def kaiser(x, beta) -> Tensor:
    """The Kaiser window of `x` points with shape parameter `beta`.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.kaiser(3, 0.0).numpy().tolist()
    [1.0, 1.0, 1.0]
    """
    return _window("kaiser", np.kaiser, x, float(beta))


# ------------------------------------------------------------------- shape
def ndim(x) -> int:
    """The number of axes of `x`.

    >>> import tapeflow as tp
    >>> tp.ops.numpy.ndim(tp.ones((2, 3)))
    2
    """
    return x.ndim if isinstance(x, Tensor) else np.ndim(x)


def size(x) -> Tensor:
    """The number of entries of `x`, as an int32 scalar tensor (counted when a graph runs
    for a dimension known only then).

    >>> import tapeflow as tp
    >>> tp.ops.numpy.size(tp.ones((2, 3))).numpy().item()
    6
    """
    x = _tensor(x, "size")
    if isinstance(x, TracedTensor) and None in x.shape:
        return core.sum(core.full_like(x, 1, dtypes.int32))
    return wrap_host(np.asarray(_pymath.prod(x.shape), dtype=np.int32))
