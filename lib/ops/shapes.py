"""Shape and dtype rules shared by many ops (the `infer` half of an OpDef), and the
geometry of window ops (convolution and pooling) that layers and exporters use.

>>> window_output_size("pool", 28, 28, 2, 2, (2, 2), "VALID")
(14, 14)
"""

from __future__ import annotations

import operator

from tapeflow import dtypes
from tapeflow.backends.geometry import MAX_EXTENT, axis_geometry, conv_geometry, padded_extent

__all__ = [
    "MAX_DIM",
    "as_dims",
    "as_int",
    "binary",
    "broadcast",
    "conv_geometry",
    "conv_transpose_output_size",
    "floating",
    "normalize_axes",
    "normalize_axis",
    "numeric",
    "padded_extent",
    "reduced_shape",
    "reduction",
    "same",
    "window_output_size",
]

# The largest dimension, count or index an op takes: the compiled kernels (and BLAS) hold
# them in C ints.
MAX_DIM = MAX_EXTENT


def as_int(name: str, label: str, value, low: int = 0, high: int = MAX_DIM) -> int:
    """`value` as a Python int in [low, high], or a TypeError / ValueError naming op `name`.

    Integers of any kind are accepted (NumPy's too); floats, bools and strings are not, so
    2.7 is never silently read as 2.

    >>> as_int("tile", "multiples", 3)
    3
    >>> as_int("tile", "multiples", 2**31)
    Traceback (most recent call last):
    ...
    ValueError: tile: multiples must be an integer in [0, 2147483647], got 2147483648
    """
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{name}: {label} must be an integer, got {value!r}")
    number = operator.index(value)
    if not low <= number <= high:
        what = f"a positive integer (at most {high})" if low == 1 else f"an integer in [{low}, {high}]"
        raise ValueError(f"{name}: {label} must be {what}, got {number}")
    return number


class DynamicDim:
    """A size known only when the graph runs: axis `axis` of the symbolic or traced `tensor`.
    `tp.ops.shape` gives one for each unknown size; the ops that take a `shape` (`tp.zeros`,
    `tp.random.normal` ...) accept it and read the size from the tensor at run time.

    >>> import tapeflow as tp
    >>> tp.ops.shape(tp.Input((3,)))[0]
    DynamicDim(axis 0 of a (None, 3) tensor)
    """

    __slots__ = ("tensor", "axis")

    def __init__(self, tensor, axis: int):
        self.tensor = tensor
        self.axis = axis

    def _refuse(self, what: str):
        raise TypeError(
            f"{what} of {self!r}: the size is known only when the model runs; pass it to a shape= "
            "argument (tp.zeros, tp.ones, tp.full, tp.random.*) instead"
        )

    def __index__(self):
        self._refuse("use as an int")

    def __int__(self):
        self._refuse("int()")

    def __bool__(self):
        self._refuse("bool()")

    def __repr__(self) -> str:
        return f"DynamicDim(axis {self.axis} of a {tuple(self.tensor.shape)} tensor)"


def has_dynamic(shape) -> bool:
    """Whether a shape argument holds a `DynamicDim`.

    >>> has_dynamic((2, 3)), has_dynamic(4)
    (False, False)
    """
    return isinstance(shape, tuple | list) and any(isinstance(d, DynamicDim) for d in shape)


def as_dims(name: str, shape, *, unknown: bool = False, label: str = "shape") -> tuple:
    """A shape (one int or a sequence of them) as a tuple of ints in [0, MAX_DIM]; with
    `unknown`, None marks a dimension known only at run time.

    >>> as_dims("zeros", 3), as_dims("zeros", (2, None), unknown=True)
    ((3,), (2, None))
    """
    if hasattr(type(shape), "__index__") and not isinstance(shape, bool):
        shape = (shape,)
    try:
        items = tuple(shape)
    except TypeError:
        raise TypeError(f"{name}: {label} must be a sequence of integers, got {shape!r}") from None
    return tuple(None if d is None and unknown else as_int(name, f"each dimension of {label}", d) for d in items)


def same(x, **_):
    """Output like the input."""
    return [(x.shape, x.dtype)]


def floating(name: str):
    """Rule for a unary op defined on floating tensors only."""

    def infer(x, **_):
        if x.dtype.kind != "f":
            raise TypeError(f"{name}: expected a floating-point tensor, got {x.dtype}")
        return [(x.shape, x.dtype)]

    return infer


def numeric(name: str):
    """Rule for a unary op defined on numbers (not bool)."""

    def infer(x, **_):
        if x.dtype.kind == "b":
            raise TypeError(f"{name}: expected a numeric tensor, got bool")
        return [(x.shape, x.dtype)]

    return infer


def broadcast(name: str, *shapes) -> tuple:
    """The broadcast of several shapes, or a ValueError naming the op."""
    first = shapes[0]
    if len(shapes) == 2:
        second = shapes[1]
        if first == second or not second:
            return tuple(first)
        if not first:
            return tuple(second)
    elif all(s == first for s in shapes[1:]):
        return tuple(first)
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        dim = 1
        for s in shapes:
            k = i - (ndim - len(s))
            if k < 0:
                continue
            d = s[k]
            if d == 1:
                continue
            if dim == 1 or dim is None:
                dim = d
            elif d is not None and d != dim:
                raise ValueError(f"{name}: shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast")
        out.append(dim)
    return tuple(out)


def binary(name: str, *, result=None, kinds: str = "bif"):
    """Rule for a broadcasting binary op on operands of one dtype."""

    def infer(x, y, **_):
        if x.dtype is not y.dtype:
            raise TypeError(f"{name}: operands have dtypes {x.dtype} and {y.dtype}")
        if x.dtype.kind not in kinds:
            raise TypeError(f"{name}: dtype {x.dtype} is not supported")
        out = result or x.dtype
        if out == "float":
            out = x.dtype if x.dtype.kind == "f" else dtypes.DEFAULT_FLOAT
        return [(broadcast(name, x.shape, y.shape), out)]

    return infer


def normalize_axes(name: str, axis, ndim: int) -> tuple:
    """Axis None / int / sequence -> a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axes = (axis,)
    elif isinstance(axis, list | tuple):
        axes = tuple(axis)
    else:
        raise TypeError(f"{name}: axis must be None, an int or a sequence of ints, got {axis!r}")
    out = []
    for a in axes:
        if not isinstance(a, int) or isinstance(a, bool):
            raise TypeError(f"{name}: axis must be an int, got {a!r}")
        if not -ndim <= a < max(ndim, 1):
            raise ValueError(f"{name}: axis {a} is out of range for a tensor of rank {ndim}")
        a = a % ndim if ndim else 0
        if a in out:
            raise ValueError(f"{name}: axis {a} is repeated in {axis!r}")
        out.append(a)
    return tuple(sorted(out))


def normalize_axis(name: str, axis: int, ndim: int) -> int:
    """One axis, negative allowed, checked against the rank."""
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"{name}: axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}: axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim


def reduction(name: str, kinds: str = "if"):
    """Rule for a reduction over `axes` (already normalized); bools sum to int64."""

    def infer(x, axes, keepdims):
        if x.dtype.kind not in kinds:
            raise TypeError(f"{name}: dtype {x.dtype} is not supported")
        if not isinstance(keepdims, bool):
            raise TypeError(f"{name}: keepdims must be a bool, got {keepdims!r:.40}")
        for a in axes:
            if isinstance(a, bool) or not hasattr(a, "__index__"):
                raise TypeError(f"{name}: an axis must be an int, got {a!r:.40}")
            if not 0 <= a < max(len(x.shape), 1):
                raise ValueError(f"{name}: axis {a} is out of range for shape {x.shape}")
        if len(set(axes)) != len(axes):
            raise ValueError(f"{name}: an axis is repeated in {axes!r:.60}")
        out = dtypes.int64 if x.dtype.kind == "b" else x.dtype
        return [(reduced_shape(x.shape, axes, keepdims), out)]

    return infer


def reduced_shape(shape: tuple, axes: tuple, keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


# ---------------------------------------------------------------- windows
def window_output_size(name: str, in_h, in_w, kh: int, kw: int, strides, padding: str, dilations=(1, 1)) -> tuple:
    """(out_h, out_w) of a 'SAME' or 'VALID' window op, for layers: an unknown size (None)
    stays unknown, and a window larger than the input is an error in the layer's words.

    >>> window_output_size("pool", None, 7, 3, 3, (2, 2), "SAME")
    (None, 4)
    >>> window_output_size("pool", 2, 5, 3, 3, (1, 1), "VALID")
    Traceback (most recent call last):
    ...
    ValueError: pool: input size 2 is smaller than the window 3 with 'valid' padding
    """
    sizes = []
    for size, k, stride, dilation in zip((in_h, in_w), (kh, kw), strides, dilations, strict=True):
        span = (k - 1) * dilation + 1
        if padding == "VALID" and size is not None and size < span:
            raise ValueError(f"{name}: input size {size} is smaller than the window {span} with 'valid' padding")
        sizes.append(axis_geometry(name, size, k, stride, dilation, padding, (0, 0))[0])
    return tuple(sizes)


def conv_transpose_output_size(in_h, in_w, kh: int, kw: int, strides, padding, output_padding, dilations):
    """(out_h, out_w) of a transposed convolution by Keras' rule, for layers that must give
    the op its output size: without `output_padding`, in * stride ('SAME') or
    in * stride + max(window - stride, 0) ('VALID'). An unknown size (None) stays unknown.

    >>> conv_transpose_output_size(4, 4, 3, 3, (2, 2), "VALID", None, (1, 1))
    (9, 9)
    >>> conv_transpose_output_size(4, 4, 3, 3, (2, 2), "SAME", (1, 0), (1, 1))
    (8, 7)
    """
    sizes = []
    axes = zip((in_h, in_w), (kh, kw), strides, output_padding or (None, None), dilations, strict=True)
    for size, k, stride, extra, dilation in axes:
        span = (k - 1) * dilation + 1
        if size is None:
            sizes.append(None)
        elif extra is None:
            sizes.append(size * stride + max(span - stride, 0) if padding == "VALID" else size * stride)
        else:
            pad = span // 2 if padding == "SAME" else 0
            sizes.append((size - 1) * stride + span - 2 * pad + extra)
    return tuple(sizes)
