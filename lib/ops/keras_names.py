"""The `keras.ops` spellings: Keras's names and argument names over tapeflow's ops.

Where a Keras name is new (`relu`, `softmax`, `shape`, `concatenate`, `cumsum`,
`convert_to_numpy`) it is a plain function. Where tapeflow already has the name with its
TensorFlow-style arguments (`transpose(x, perm)`, `reshape(x, shape)`,
`one_hot(indices, depth)`, `where(c, x, y)` ...), the function here takes Keras's
arguments and still accepts tapeflow's keywords, so both spellings work.

>>> import tapeflow as tp
>>> tp.transpose(tp.ones((2, 3)), axes=(1, 0)).shape, tp.transpose(tp.ones((2, 3)), perm=(1, 0)).shape
((3, 2), (3, 2))
>>> tp.one_hot(tp.tensor([0, 2]), num_classes=3).numpy().tolist()
[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
"""

from __future__ import annotations

import numpy as np

from tapeflow import dtypes
from tapeflow.ops import array, creation, math, nn, reduce, shapes, sparse
from tapeflow.ops.half import in_float32
from tapeflow.ops.registry import apply, as_tensor, defop
from tapeflow.ops.shapes import DynamicDim
from tapeflow.tensor import Tensor, TracedTensor

__all__ = [
    "arange",
    "concatenate",
    "convert_to_numpy",
    "convert_to_tensor",
    "cumsum",
    "matmul",
    "maximum",
    "minimum",
    "one_hot",
    "relu",
    "reshape",
    "shape",
    "softmax",
    "stack",
    "transpose",
    "where",
]

_UNSET = object()


def _either(fn: str, keras_name: str, keras_value, tf_name: str, tf_value):
    """The one of Keras's argument and tapeflow's keyword for it that was given."""
    if keras_value is not _UNSET and tf_value is not _UNSET:
        raise TypeError(f"{fn}: got both {keras_name}= and {tf_name}=, which name the same argument")
    if keras_value is _UNSET and tf_value is _UNSET:
        raise TypeError(f"{fn}: missing the argument {keras_name}")
    return keras_value if keras_value is not _UNSET else tf_value


# ----------------------------------------------------------------- activations
def relu(x) -> Tensor:
    """max(x, 0), as `keras.ops.relu`.

    >>> import tapeflow as tp
    >>> tp.ops.relu(tp.tensor([-1.0, 2.0])).numpy().tolist()
    [0.0, 2.0]
    """
    return nn.relu(x)


def softmax(x, axis=-1) -> Tensor:
    """exp(x) normalized to sum to one along `axis` (an int or a tuple of ints).

    >>> import tapeflow as tp
    >>> tp.ops.softmax(tp.tensor([[1.0, 1.0]])).numpy().tolist()
    [[0.5, 0.5]]
    """
    x = as_tensor(x, name="softmax")
    if isinstance(axis, tuple | list):
        axes = tuple(shapes.normalize_axis("softmax", a, x.ndim) for a in axis)
        shifted = x - math.stop_gradient(reduce.max(x, axes, keepdims=True))
        e = math.exp(shifted)
        return e / reduce.sum(e, axes, keepdims=True)
    return nn.softmax(x, shapes.normalize_axis("softmax", axis, x.ndim))


# ---------------------------------------------------------------------- shapes
def shape(x) -> tuple:
    """The shape of `x` as a tuple: ints, and for a size known only when the model runs (the
    batch of a functional model's input, a traced dynamic dimension) a `DynamicDim` that
    `tp.zeros`, `tp.ones`, `tp.full` and `tp.random.*` accept in their `shape`.

    >>> import tapeflow as tp
    >>> tp.ops.shape(tp.ones((2, 3)))
    (2, 3)
    >>> batch, dim = tp.ops.shape(tp.Input((3,)))
    >>> tp.zeros((batch, dim)).shape
    (None, 3)
    """
    if not isinstance(x, Tensor):
        return tuple(int(d) for d in np.shape(x))
    if isinstance(x, TracedTensor):
        return tuple(DynamicDim(x, i) if d is None else int(d) for i, d in enumerate(x.shape))
    return tuple(int(d) for d in x.shape)


def concatenate(xs, axis=0) -> Tensor:
    """Join tensors along an existing axis, as `keras.ops.concatenate` (`tp.concat`).

    >>> import tapeflow as tp
    >>> tp.ops.concatenate([tp.ones((1, 2)), tp.zeros((1, 3))], axis=-1).shape
    (1, 5)
    """
    return array.concat(xs, axis=axis)


def stack(x=_UNSET, axis=0, *, values=_UNSET) -> Tensor:
    """Join tensors of one shape along a new axis (`values=` is accepted for `x=`).

    >>> import tapeflow as tp
    >>> tp.stack([tp.ones((2,)), tp.zeros((2,))], axis=1).shape
    (2, 2)
    """
    return array.stack(_either("stack", "x", x, "values", values), axis=axis)


def reshape(x, newshape=_UNSET, *, shape=_UNSET) -> Tensor:
    """`x` with a new shape, one size of which may be -1 (`shape=` is accepted for `newshape=`).

    >>> import tapeflow as tp
    >>> tp.reshape(tp.arange(6), newshape=(2, -1)).shape
    (2, 3)
    """
    return array.reshape(x, _either("reshape", "newshape", newshape, "shape", shape))


def transpose(x, axes=_UNSET, *, perm=_UNSET) -> Tensor:
    """`x` with its axes permuted (reversed when `axes` is None; `perm=` is accepted for `axes=`).

    >>> import tapeflow as tp
    >>> tp.transpose(tp.ones((2, 3, 4)), axes=(0, 2, 1)).shape
    (2, 4, 3)
    """
    if axes is _UNSET and perm is _UNSET:
        axes = None
    return array.transpose(x, _either("transpose", "axes", axes, "perm", perm))


def one_hot(
    x=_UNSET,
    num_classes=_UNSET,
    axis=-1,
    dtype=None,
    sparse=False,
    *,
    indices=_UNSET,
    depth=_UNSET,
    on_value=1.0,
    off_value=0.0,
) -> Tensor:
    """One-hot vectors of integer class ids along `axis` (-1: a new last axis), as
    `keras.ops.one_hot`; tapeflow's `indices=`, `depth=`, `on_value=`, `off_value=` also work.
    Negative ids give an all-`off_value` vector.

    >>> import tapeflow as tp
    >>> tp.one_hot(tp.tensor([1, 0]), 2, axis=0).numpy().tolist()
    [[0.0, 1.0], [1.0, 0.0]]
    """
    if sparse:
        raise ValueError("one_hot: sparse=True is not supported; tapeflow's one_hot is dense")
    ids = _either("one_hot", "x", x, "indices", indices)
    n = _either("one_hot", "num_classes", num_classes, "depth", depth)
    out = array.one_hot(ids, n, on_value, off_value, "float32" if dtype is None else dtype)
    if axis == -1 or axis == out.ndim - 1:
        return out
    a = shapes.normalize_axis("one_hot", axis, out.ndim)
    return array.transpose(out, tuple(range(a)) + (out.ndim - 1,) + tuple(range(a, out.ndim - 1)))


def matmul(x1=_UNSET, x2=_UNSET, *, a=_UNSET, b=_UNSET) -> Tensor:
    """The matrix product of the last two axes, batched over the leading ones (`a=`, `b=` are
    accepted for `x1=`, `x2=`).

    >>> import tapeflow as tp
    >>> tp.matmul(tp.ones((2, 3)), tp.ones((3, 4))).shape
    (2, 4)
    """
    return math.matmul(_either("matmul", "x1", x1, "a", a), _either("matmul", "x2", x2, "b", b))


def maximum(x1=_UNSET, x2=_UNSET, *, x=_UNSET, y=_UNSET) -> Tensor:
    """The elementwise larger of `x1` and `x2`, broadcast (`x=`, `y=` are accepted too).

    >>> import tapeflow as tp
    >>> tp.maximum(tp.tensor([1.0, 4.0]), 2.0).numpy().tolist()
    [2.0, 4.0]
    """
    return math.maximum(_either("maximum", "x1", x1, "x", x), _either("maximum", "x2", x2, "y", y))


def minimum(x1=_UNSET, x2=_UNSET, *, x=_UNSET, y=_UNSET) -> Tensor:
    """The elementwise smaller of `x1` and `x2`, broadcast (`x=`, `y=` are accepted too).

    >>> import tapeflow as tp
    >>> tp.minimum(tp.tensor([1.0, 4.0]), 2.0).numpy().tolist()
    [1.0, 2.0]
    """
    return math.minimum(_either("minimum", "x1", x1, "x", x), _either("minimum", "x2", x2, "y", y))


def where(condition, x1=_UNSET, x2=_UNSET, *, x=_UNSET, y=_UNSET):
    """`x1` where `condition` holds, else `x2`, broadcast (`x=`, `y=` are accepted too). With
    neither, the indices of the true entries: a tuple of int64 tensors, one per axis (eager only).

    >>> import tapeflow as tp
    >>> tp.where(tp.tensor([True, False]), 1.0, 0.0).numpy().tolist()
    [1.0, 0.0]
    >>> [i.numpy().tolist() for i in tp.where(tp.tensor([0, 3, 5]) > 1)]
    [[1, 2]]
    """
    a = x1 if x1 is not _UNSET else x
    b = x2 if x2 is not _UNSET else y
    if a is _UNSET and b is _UNSET:
        c = as_tensor(condition, name="where")
        if isinstance(c, TracedTensor):
            raise TypeError(
                "where: with only a condition the result's size depends on its values, which a symbolic or "
                "traced tensor does not have; pass x1 and x2"
            )
        return tuple(creation.tensor(i.astype(np.int64)) for i in np.nonzero(c.numpy()))
    if a is _UNSET or b is _UNSET:
        raise TypeError("where: give both x1 and x2, or neither")
    x1 = _either("where", "x1", x1, "x", x)
    x2 = _either("where", "x2", x2, "y", y)
    return math.where(condition, x1, x2)


def arange(start, stop=None, step=None, dtype=None, device=None) -> Tensor:
    """Evenly spaced values in [start, stop) (`step` None means 1), as `keras.ops.arange`.

    >>> import tapeflow as tp
    >>> tp.arange(1, 7, 2).numpy().tolist()
    [1, 3, 5]
    """
    return creation.arange(start, stop, 1 if step is None else step, dtype=dtype, device=device)


# ------------------------------------------------------------------ conversion
def convert_to_tensor(x=_UNSET, dtype=None, sparse=None, ragged=None, *, value=_UNSET) -> Tensor:
    """A Tensor from a tensor, an array or a nested list, optionally cast to `dtype` (`value=` is
    accepted for `x=`). `sparse=True` and `ragged=True` are refused: tapeflow's tensors are dense.

    >>> import tapeflow as tp
    >>> tp.convert_to_tensor([1, 2], dtype="float32").numpy().tolist()
    [1.0, 2.0]
    """
    if sparse or ragged:
        raise ValueError(f"convert_to_tensor: sparse={sparse!r}, ragged={ragged!r}: tapeflow's tensors are dense")
    return _convert(_either("convert_to_tensor", "x", x, "value", value), dtype=dtype)


def convert_to_numpy(x) -> np.ndarray:
    """A NumPy array of a tensor's value (or of an array, a number or a nested list).

    >>> import tapeflow as tp
    >>> tp.ops.convert_to_numpy(tp.ones((2,))).tolist()
    [1.0, 1.0]
    """
    if isinstance(x, Tensor):
        return np.asarray(x.numpy())
    if isinstance(x, list | tuple):
        return np.asarray([convert_to_numpy(v) for v in x])
    return np.asarray(x)


# ---------------------------------------------------------------------- cumsum
def _cumsum_infer(x, *, axis, reverse):
    if x.dtype.kind == "b":
        raise TypeError("cumsum: boolean input; cast it to a number first")
    shapes.normalize_axis("cumsum", axis, max(len(x.shape), 1))
    return [(tuple(x.shape), x.dtype)]


def _cumsum_vjp(gs, xs, ys, *, axis, reverse):
    return (apply(_CUMSUM, (gs[0],), {"axis": axis, "reverse": not reverse}),)


@defop("cumsum", infer=_cumsum_infer, vjp=_cumsum_vjp)
def _CUMSUM(x, *, axis, reverse):
    if reverse:
        return np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=x.dtype), axis)
    return np.cumsum(x, axis=axis, dtype=x.dtype)


@in_float32
def cumsum(x, axis=None, dtype=None) -> Tensor:
    """Running sums along `axis` (of the flattened tensor when None), as `keras.ops.cumsum`.

    >>> import tapeflow as tp
    >>> tp.cumsum(tp.tensor([[1, 2], [3, 4]]), axis=1).numpy().tolist()
    [[1, 3], [3, 7]]
    """
    x = as_tensor(x, name="cumsum")
    if dtype is not None:
        x = math.cast(x, dtypes.as_dtype(dtype))
    if axis is None:
        x, axis = array.reshape(x, (-1,)), 0
    axis = shapes.normalize_axis("cumsum", axis, max(x.ndim, 1))
    return apply(_CUMSUM, (x,), {"axis": axis, "reverse": False})


_convert = sparse.convert_to_tensor
