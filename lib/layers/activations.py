"""Activation layers with their own arguments: ReLU, LeakyReLU, ELU, PReLU (a learned slope)
and Softmax (over any axes, honouring a mask).

>>> import tapeflow as tp
>>> tp.layers.ReLU(max_value=1.0)(tp.tensor([-1.0, 0.5, 3.0])).numpy().tolist()
[0.0, 0.5, 1.0]
"""

from __future__ import annotations

import numbers

from tapeflow.layers.base import InputSpec, Layer, serialize_constraint, serialize_initializer, serialize_regularizer
from tapeflow.ops import nn
from tapeflow.ops.math import cast, exp, greater, minimum, where
from tapeflow.ops.reduce import logsumexp


def _non_negative(layer: str, label: str, value, allow_none: bool = False):
    if value is None and allow_none:
        return None
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{layer}: {label} must be a non-negative number, got {value!r}")
    return value


def _float(value):
    return None if value is None else float(value)


class ReLU(Layer):
    """The rectified linear unit with Keras's options: `x` above `threshold` (capped at
    `max_value`), `negative_slope * (x - threshold)` at or below it.

    Args:
        max_value: the largest output (a non-negative number), or None for no cap.
        negative_slope: the slope below the threshold (non-negative). Default 0.
        threshold: inputs at or below it take the negative slope (non-negative). Default 0.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> layer = tp.layers.ReLU(negative_slope=0.5, threshold=1.0)
    >>> layer(tp.tensor([0.0, 2.0])).numpy().tolist()
    [-0.5, 2.0]
    """

    supports_masking = True

    def __init__(self, max_value=None, negative_slope=0.0, threshold=0.0, **kwargs):
        super().__init__(**kwargs)
        self.max_value = _non_negative(self.name, "max_value", max_value, allow_none=True)
        self.negative_slope = _non_negative(self.name, "negative_slope", negative_slope)
        self.threshold = _non_negative(self.name, "threshold", threshold)

    def call(self, inputs):
        if self.max_value is None and self.threshold == 0:
            if self.negative_slope == 0:
                return nn.relu(inputs)
            return nn.leaky_relu(inputs, self.negative_slope)
        above = inputs if self.max_value is None else minimum(inputs, float(self.max_value))
        below = (inputs - float(self.threshold)) * float(self.negative_slope) if self.negative_slope else 0.0
        return where(greater(inputs, float(self.threshold)), above, below)

    def get_config(self):
        return {
            **super().get_config(),
            "max_value": _float(self.max_value),
            "negative_slope": _float(self.negative_slope),
            "threshold": _float(self.threshold),
        }


class LeakyReLU(Layer):
    """`x` for positive inputs, `negative_slope * x` otherwise.

    Args:
        negative_slope: the slope of negative inputs (non-negative). Default 0.3. Keras's old
            name `alpha` is accepted too.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.LeakyReLU(negative_slope=0.5)(tp.tensor([-2.0, 3.0])).numpy().tolist()
    [-1.0, 3.0]
    """

    supports_masking = True

    def __init__(self, negative_slope=0.3, **kwargs):
        if "alpha" in kwargs:
            negative_slope = kwargs.pop("alpha")
        super().__init__(**kwargs)
        self.negative_slope = _non_negative(self.name, "negative_slope", negative_slope)

    def call(self, inputs):
        return nn.leaky_relu(inputs, self.negative_slope)

    def get_config(self):
        return {**super().get_config(), "negative_slope": float(self.negative_slope)}


class ELU(Layer):
    """The exponential linear unit: `x` for positive inputs, `alpha * (exp(x) - 1)` otherwise.

    Args:
        alpha: the scale of the negative part. Default 1.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> round(tp.layers.ELU()(tp.tensor([-1.0])).numpy().item(), 4)
    -0.6321
    """

    supports_masking = True

    def __init__(self, alpha=1.0, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(alpha, numbers.Real) or isinstance(alpha, bool):
            raise ValueError(f"{self.name}: alpha must be a number, got {alpha!r}")
        self.alpha = float(alpha)

    def call(self, inputs):
        return nn.elu(inputs, self.alpha)

    def get_config(self):
        return {**super().get_config(), "alpha": self.alpha}


class PReLU(Layer):
    """The parametric ReLU: `x` for positive inputs, `alpha * x` otherwise, with `alpha` a
    weight of the input's shape without the batch axis (size 1 along `shared_axes`).

    Args:
        alpha_initializer: initializer of alpha (a name or an initializer). Default "Zeros".
        alpha_regularizer: regularizer of alpha (a name, a regularizer, or None).
        alpha_constraint: constraint of alpha (a name such as "non_neg", a constraint, or None),
            applied after each optimizer update.
        shared_axes: the axes (an int or a list; 1 is the first after the batch axis) along which
            one slope is shared, e.g. [1, 2] for one slope per channel of images.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> layer = tp.layers.PReLU(alpha_initializer="ones", shared_axes=[1])
    >>> layer(tp.ones((2, 5, 3))).shape, layer.alpha.shape
    ((2, 5, 3), (1, 3))
    """

    supports_masking = True

    def __init__(
        self, alpha_initializer="Zeros", alpha_regularizer=None, alpha_constraint=None, shared_axes=None, **kwargs
    ):
        super().__init__(**kwargs)
        self.alpha_initializer = alpha_initializer
        self.alpha_regularizer = alpha_regularizer
        self.alpha_constraint = alpha_constraint
        if shared_axes is None:
            self.shared_axes = None
        else:
            axes = list(shared_axes) if isinstance(shared_axes, list | tuple) else [shared_axes]
            if any(not isinstance(a, int) or isinstance(a, bool) or a < 1 for a in axes):
                raise ValueError(f"{self.name}: shared_axes must be positive axes (1 or more), got {shared_axes!r}")
            self.shared_axes = axes

    def build(self, input_shape):
        shape = list(input_shape[1:])
        for axis in self.shared_axes or ():
            if axis > len(shape):
                raise ValueError(f"{self.name}: shared axis {axis} is out of range for inputs of shape {input_shape}")
            shape[axis - 1] = 1
        if any(size is None for size in shape):
            raise ValueError(
                f"{self.name}: the input's unshared axes must be known to make alpha, got shape {input_shape}"
            )
        self.alpha = self.add_weight(
            "alpha", tuple(shape), self.alpha_initializer, self.alpha_regularizer, constraint=self.alpha_constraint
        )
        axes = {i: input_shape[i] for i in range(1, len(input_shape)) if i not in (self.shared_axes or ())}
        self.input_spec = InputSpec(ndim=len(input_shape), axes=axes)

    def call(self, inputs):
        return nn.relu(inputs) - self.alpha * nn.relu(-inputs)

    def get_config(self):
        return {
            **super().get_config(),
            "alpha_initializer": serialize_initializer(self.alpha_initializer),
            "alpha_regularizer": serialize_regularizer(self.alpha_regularizer),
            "alpha_constraint": serialize_constraint(self.alpha_constraint),
            "shared_axes": self.shared_axes,
        }


def _large_negative(dtype) -> float:
    return -3e4 if dtype.bits <= 16 else -1e9


class Softmax(Layer):
    """Softmax over `axis` (an int, or a list of axes normalized together). With a mask
    (broadcastable to the input; True or above 0.5 keeps an entry), masked entries get
    probability 0 and the rest share the whole mass.

    Args:
        axis: the axis, or list of axes, to normalize over. Default -1.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> layer = tp.layers.Softmax()
    >>> layer(tp.zeros((1, 3)), mask=tp.tensor([[True, True, False]])).numpy().tolist()
    [[0.5, 0.5, 0.0]]
    """

    supports_masking = True

    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        axes = list(axis) if isinstance(axis, list | tuple) else [axis]
        if not axes or any(not isinstance(a, int) or isinstance(a, bool) for a in axes):
            raise ValueError(f"{self.name}: axis must be an int or a list of ints, got {axis!r}")
        self.axis = axes if isinstance(axis, list | tuple) else axis

    def call(self, inputs, mask=None):
        keep = None
        if mask is not None:
            if len(mask.shape) > len(inputs.shape):
                raise ValueError(
                    f"{self.name}: the mask (shape {mask.shape}) must be broadcastable to the inputs "
                    f"(shape {inputs.shape})"
                )
            keep = mask if mask.dtype.name == "bool" else greater(mask, cast(0.5, mask.dtype))
            inputs = where(keep, inputs, _large_negative(inputs.dtype))
        axes = self.axis if isinstance(self.axis, list) else [self.axis]
        if len(axes) == 1:
            outputs = nn.softmax(inputs, axis=axes[0])
        else:
            outputs = exp(inputs - logsumexp(inputs, axis=tuple(axes), keepdims=True))
        return outputs if keep is None else where(keep, outputs, 0.0)

    def get_config(self):
        return {**super().get_config(), "axis": self.axis}
