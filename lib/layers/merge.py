"""Merge layers: combine a list of tensors elementwise (Add, Subtract, Multiply, Average,
Maximum, Minimum), by joining them along an axis (Concatenate) or by a batched dot product
(Dot), and the functional forms (`add`, `subtract`, ..., `concatenate`, `dot`) that make the
layer and call it at once.

>>> import tapeflow as tp
>>> tp.layers.Add()([tp.ones((2, 3)), tp.ones((2, 3))]).numpy().tolist()
[[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]
"""

from __future__ import annotations

import functools
import math

from tapeflow.layers.base import Layer
from tapeflow.ops import math as _math
from tapeflow.ops.array import concat, reshape
from tapeflow.ops.core import transpose
from tapeflow.ops.reduce import sum as reduce_sum


class _Merge(Layer):
    """Elementwise merge of two or more inputs whose shapes broadcast together."""

    _min_inputs, _max_inputs = 2, None

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def _check_count(self, input_shape) -> list:
        if not isinstance(input_shape, list | tuple) or not input_shape or not isinstance(input_shape[0], tuple):
            raise ValueError(f"{self.name}: expected a list of input tensors, got one of shape {input_shape}")
        n = len(input_shape)
        if n < self._min_inputs or (self._max_inputs is not None and n > self._max_inputs):
            want = self._min_inputs if self._max_inputs == self._min_inputs else f"at least {self._min_inputs}"
            raise ValueError(f"{self.name}: expected {want} inputs, got {n} with shapes {list(input_shape)}")
        return list(input_shape)

    def build(self, input_shape):
        self._check_shapes(input_shape)

    def call(self, inputs):
        self._check_shapes([tuple(x.shape) for x in inputs])
        return self._merge(list(inputs))

    def _check_shapes(self, input_shape) -> None:
        """Errors that name the layer, before the ops see the inputs."""
        shapes = self._check_count(input_shape)
        for i in range(1, max(len(s) for s in shapes) + 1):
            if len({s[-i] for s in shapes if len(s) >= i} - {None, 1}) > 1:
                raise ValueError(f"{self.name}: input shapes {shapes} do not broadcast together")

    def _merge(self, inputs):
        return functools.reduce(self._combine, inputs)


class Add(_Merge):
    """The sum of the inputs.

    Args:
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.Add()([tp.ones((1, 2)), tp.ones((1, 2)), tp.ones((1, 2))]).numpy().tolist()
    [[3.0, 3.0]]
    """

    _combine = staticmethod(_math.add)


class Subtract(_Merge):
    """inputs[0] - inputs[1] (exactly two inputs).

    Args:
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.Subtract()([tp.ones((1, 2)), tp.ones((1, 2))]).numpy().tolist()
    [[0.0, 0.0]]
    """

    _max_inputs = 2
    _combine = staticmethod(_math.subtract)


class Multiply(_Merge):
    """The elementwise product of the inputs.

    Args:
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.Multiply()([tp.full((1, 2), 3.0), tp.full((1, 2), 2.0)]).numpy().tolist()
    [[6.0, 6.0]]
    """

    _combine = staticmethod(_math.multiply)


class Average(_Merge):
    """The elementwise mean of the inputs.

    Args:
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.Average()([tp.full((1, 2), 3.0), tp.full((1, 2), 1.0)]).numpy().tolist()
    [[2.0, 2.0]]
    """

    _combine = staticmethod(_math.add)

    def _merge(self, inputs):
        return super()._merge(inputs) * (1.0 / len(inputs))


class Maximum(_Merge):
    """The elementwise maximum of the inputs.

    Args:
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.Maximum()([tp.tensor([[1.0, 5.0]]), tp.tensor([[3.0, 2.0]])]).numpy().tolist()
    [[3.0, 5.0]]
    """

    _combine = staticmethod(_math.maximum)


class Minimum(_Merge):
    """The elementwise minimum of the inputs.

    Args:
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.Minimum()([tp.tensor([[1.0, 5.0]]), tp.tensor([[3.0, 2.0]])]).numpy().tolist()
    [[1.0, 2.0]]
    """

    _combine = staticmethod(_math.minimum)


class Concatenate(_Merge):
    """Join the inputs along `axis`; every other axis must match.

    Args:
        axis: the axis to join along.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.Concatenate()([tp.ones((2, 3)), tp.ones((2, 5))]).shape
    (2, 8)
    """

    def __init__(self, axis: int = -1, **kwargs):
        super().__init__(**kwargs)
        self.axis = int(axis)

    def _check_shapes(self, input_shape) -> None:
        shapes = self._check_count(input_shape)
        ndim = len(shapes[0])
        if not -ndim <= self.axis < ndim or any(len(s) != ndim for s in shapes):
            raise ValueError(f"{self.name}: cannot concatenate shapes {shapes} along axis {self.axis}")
        axis = self.axis % ndim
        for i in range(ndim):
            if i != axis and len({s[i] for s in shapes} - {None}) > 1:
                raise ValueError(
                    f"{self.name}: input shapes {shapes} differ outside the concatenation axis {self.axis}"
                )

    def _merge(self, inputs):
        return concat(inputs, axis=self.axis)

    def get_config(self):
        return {**super().get_config(), "axis": self.axis}


class Dot(_Merge):
    """The dot product of two batches of tensors along `axes` (one per input, never the batch
    axis): the output holds the first input's other axes, then the second's (without its batch
    axis); a rank-1 result becomes [batch, 1]. `normalize=True` L2-normalizes both inputs along
    those axes first (cosine similarity).

    Args:
        axes: one axis for both inputs, or a pair (axis of the first, axis of the second).
        normalize: whether to L2-normalize the inputs along the dot axes first.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.Dot(axes=1)([tp.ones((2, 3)), tp.full((2, 3), 2.0)]).numpy().tolist()
    [[6.0], [6.0]]
    >>> tp.layers.Dot(axes=(2, 1))([tp.ones((2, 4, 3)), tp.ones((2, 3, 5))]).shape
    (2, 4, 5)
    """

    _min_inputs = _max_inputs = 2

    def __init__(self, axes, normalize: bool = False, **kwargs):
        super().__init__(**kwargs)
        if isinstance(axes, list | tuple):
            if len(axes) != 2 or not all(isinstance(a, int) and not isinstance(a, bool) for a in axes):
                raise ValueError(f"{self.name}: axes must be an int or a pair of ints, got {axes!r}")
            axes = list(axes)
        elif not isinstance(axes, int) or isinstance(axes, bool):
            raise TypeError(f"{self.name}: axes must be an int or a list of two ints, got {axes!r}")
        self.axes = axes
        self.normalize = bool(normalize)

    def _axes_for(self, shapes) -> list:
        pair = [self.axes, self.axes] if isinstance(self.axes, int) else self.axes
        out = []
        for axis, shape in zip(pair, shapes, strict=True):
            if not -len(shape) <= axis < len(shape):
                raise ValueError(f"{self.name}: axis {axis} is out of range for an input of shape {shape}")
            out.append(axis % len(shape))
        return out

    def _check_shapes(self, input_shape) -> None:
        shapes = self._check_count(input_shape)
        if any(len(s) < 2 for s in shapes):
            raise ValueError(f"{self.name}: both inputs need a batch axis and at least one more, got {shapes}")
        a, b = self._axes_for(shapes)
        if 0 in (a, b):
            raise ValueError(f"{self.name}: the dot axes cannot include the batch axis 0, got axes={self.axes}")
        if None not in (shapes[0][a], shapes[1][b]) and shapes[0][a] != shapes[1][b]:
            raise ValueError(
                f"{self.name}: incompatible input shapes: axis {a} of {shapes[0]} and axis {b} of {shapes[1]} differ"
            )

    def _merge(self, inputs):
        x, y = inputs
        a, b = self._axes_for([x.shape, y.shape])
        if self.normalize:
            x = _l2_normalize(x, a)
            y = _l2_normalize(y, b)
        x_rest = [d for i, d in enumerate(x.shape) if i not in (0, a)]
        y_rest = [d for i, d in enumerate(y.shape) if i not in (0, b)]
        if None in x_rest or None in y_rest:
            raise ValueError(f"{self.name}: the non-batch axes of the inputs must be known, got {x.shape}, {y.shape}")
        x = transpose(x, [0, *(i for i in range(x.ndim) if i not in (0, a)), a])
        y = transpose(y, [0, b, *(i for i in range(y.ndim) if i not in (0, b))])
        depth = x.shape[-1]
        product = reshape(x, (-1, math.prod(x_rest), depth)) @ reshape(y, (-1, depth, math.prod(y_rest)))
        return reshape(product, (-1, *x_rest, *y_rest) if x_rest or y_rest else (-1, 1))

    def compute_output_shape(self, input_shape):
        self._check_shapes(input_shape)
        (x, y), (a, b) = input_shape, self._axes_for(input_shape)
        rest = [d for i, d in enumerate(x) if i not in (0, a)] + [d for i, d in enumerate(y) if i not in (0, b)]
        return (x[0], *(rest or [1]))

    def compute_mask(self, inputs, mask=None):
        return None

    def get_config(self):
        return {**super().get_config(), "axes": self.axes, "normalize": self.normalize}


def _l2_normalize(x, axis: int, epsilon: float = 1e-7):
    inv_norm = _math.minimum(_math.rsqrt(reduce_sum(_math.square(x), axis, keepdims=True)), 1.0 / epsilon)
    return x * inv_norm


# ------------------------------------------------------------ functional forms
def _apply(layer_class, name: str, inputs, kwargs):
    if not isinstance(inputs, list | tuple):
        raise TypeError(f"layers.{name}: expected a list of input tensors, got {type(inputs).__name__}")
    return layer_class(**kwargs)(list(inputs))


def add(inputs, **kwargs):
    """`Add()(inputs)`: the sum of a list of tensors.

    >>> import tapeflow as tp
    >>> tp.layers.add([tp.ones((1, 2)), tp.ones((1, 2))]).numpy().tolist()
    [[2.0, 2.0]]
    """
    return _apply(Add, "add", inputs, kwargs)


def subtract(inputs, **kwargs):
    """`Subtract()(inputs)`: inputs[0] - inputs[1].

    >>> import tapeflow as tp
    >>> tp.layers.subtract([tp.full((1, 2), 3.0), tp.ones((1, 2))]).numpy().tolist()
    [[2.0, 2.0]]
    """
    return _apply(Subtract, "subtract", inputs, kwargs)


def multiply(inputs, **kwargs):
    """`Multiply()(inputs)`: the elementwise product of a list of tensors.

    >>> import tapeflow as tp
    >>> tp.layers.multiply([tp.full((1, 2), 3.0), tp.full((1, 2), 2.0)]).numpy().tolist()
    [[6.0, 6.0]]
    """
    return _apply(Multiply, "multiply", inputs, kwargs)


def average(inputs, **kwargs):
    """`Average()(inputs)`: the elementwise mean of a list of tensors.

    >>> import tapeflow as tp
    >>> tp.layers.average([tp.full((1, 2), 3.0), tp.ones((1, 2))]).numpy().tolist()
    [[2.0, 2.0]]
    """
    return _apply(Average, "average", inputs, kwargs)


def maximum(inputs, **kwargs):
    """`Maximum()(inputs)`: the elementwise maximum of a list of tensors.

    >>> import tapeflow as tp
    >>> tp.layers.maximum([tp.tensor([[1.0, 5.0]]), tp.tensor([[3.0, 2.0]])]).numpy().tolist()
    [[3.0, 5.0]]
    """
    return _apply(Maximum, "maximum", inputs, kwargs)


def minimum(inputs, **kwargs):
    """`Minimum()(inputs)`: the elementwise minimum of a list of tensors.

    >>> import tapeflow as tp
    >>> tp.layers.minimum([tp.tensor([[1.0, 5.0]]), tp.tensor([[3.0, 2.0]])]).numpy().tolist()
    [[1.0, 2.0]]
    """
    return _apply(Minimum, "minimum", inputs, kwargs)


def concatenate(inputs, axis: int = -1, **kwargs):
    """`Concatenate(axis)(inputs)`: join a list of tensors along `axis`.

    >>> import tapeflow as tp
    >>> tp.layers.concatenate([tp.ones((2, 3)), tp.ones((2, 5))]).shape
    (2, 8)
    """
    return _apply(Concatenate, "concatenate", inputs, {"axis": axis, **kwargs})


def dot(inputs, axes=-1, **kwargs):
    """`Dot(axes)(inputs)`: the batched dot product of two tensors (`normalize=` as the layer).

    >>> import tapeflow as tp
    >>> tp.layers.dot([tp.ones((2, 3)), tp.ones((2, 3))], axes=1).numpy().tolist()
    [[3.0], [3.0]]
    """
    return _apply(Dot, "dot", inputs, {"axes": axes, **kwargs})
