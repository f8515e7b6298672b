"""Normalization layers: BatchNormalization (batch statistics in training, moving
averages at inference) and LayerNormalization (statistics of each example).

>>> import tapeflow as tp
>>> y = tp.layers.LayerNormalization()(tp.tensor([[1.0, 2.0, 3.0]]))
>>> [round(v, 3) for v in y.numpy()[0].tolist()]
[-1.224, 0.0, 1.224]
"""

from __future__ import annotations

import math
import numbers

from tapeflow.layers.base import InputSpec, Layer, serialize_initializer, serialize_regularizer
from tapeflow.ops.array import reshape
from tapeflow.ops.math import rsqrt, stop_gradient
from tapeflow.ops.reduce import mean, var


def _normalize_axes(layer: str, axis, ndim: int) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    for a in axes:
        if not isinstance(a, int) or not -ndim <= a < ndim:
            raise ValueError(f"{layer}: axis {axis!r} is out of range for an input of rank {ndim}")
    return tuple(sorted({a % ndim for a in axes}))


def _in_range(owner: str, label: str, value, low: float, high: float, low_open: bool = False) -> float:
    """`value` as a float in [low, high] ((low, high] with `low_open`; NaN never), or a ValueError."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (low < value if low_open else low <= value) and value <= high
    if not ok:
        bounds = f"> {low}" if high == math.inf else f"in {'(' if low_open else '['}{low}, {high}]"
        raise ValueError(f"{owner}: {label} must be a finite number {bounds}, got {value!r}")
    return float(value)


class _Normalization(Layer):
    """Shared pieces: the axes normalized over, gamma and beta, and the affine output."""

    supports_masking = True  # a mask passes through, as in Keras

    def __init__(
        self,
        axis=-1,
        epsilon: float = 1e-3,
        center: bool = True,
        scale: bool = True,
        beta_initializer="zeros",
        gamma_initializer="ones",
        beta_regularizer=None,
        gamma_regularizer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.axis = axis if isinstance(axis, int) else list(axis)
        self.epsilon = _in_range(self.name, "epsilon", epsilon, 0.0, math.inf, low_open=True)
        self.center = bool(center)
        self.scale = bool(scale)
        self.beta_initializer = beta_initializer
        self.gamma_initializer = gamma_initializer
        self.beta_regularizer = beta_regularizer
        self.gamma_regularizer = gamma_regularizer

    def _build_affine(self, input_shape) -> tuple:
        """Create gamma and beta over the kept axes; return the parameter shape."""
        self._axes = _normalize_axes(self.name, self.axis, len(input_shape))
        param_shape = tuple(input_shape[a] for a in self._axes)
        if None in param_shape:
            raise ValueError(f"{self.name}: axis {self.axis} of the input must be known, got shape {input_shape}")
        self._broadcast_shape = tuple(input_shape[i] if i in self._axes else 1 for i in range(len(input_shape)))
        self.gamma = self.beta = None
        if self.scale:
            self.gamma = self.add_weight("gamma", param_shape, self.gamma_initializer, self.gamma_regularizer)
        if self.center:
            self.beta = self.add_weight("beta", param_shape, self.beta_initializer, self.beta_regularizer)
        self.input_spec = InputSpec(ndim=len(input_shape), axes={a: input_shape[a] for a in self._axes})
        return param_shape

    def _normalize(self, inputs, mu, variance):
        inv = rsqrt(variance + self.epsilon)
        if self.gamma is not None:
            inv = inv * reshape(self.gamma, self._broadcast_shape)
        y = (inputs - mu) * inv
        if self.beta is not None:
            y = y + reshape(self.beta, self._broadcast_shape)
        return y

    def get_config(self):
        return {
            **super().get_config(),
            "axis": self.axis,
            "epsilon": self.epsilon,
            "center": self.center,
            "scale": self.scale,
            "beta_initializer": serialize_initializer(self.beta_initializer),
            "gamma_initializer": serialize_initializer(self.gamma_initializer),
            "beta_regularizer": serialize_regularizer(self.beta_regularizer),
            "gamma_regularizer": serialize_regularizer(self.gamma_regularizer),
        }


class BatchNormalization(_Normalization):
    """Normalize with the batch's mean and variance in training, and with moving averages
    of them at inference (or when the layer is frozen with trainable=False).

    Each training call updates `moving_mean` and `moving_variance` (non-trainable
    weights) by `moving = moving * momentum + batch * (1 - momentum)`, assigning new
    values. The batch variance is the population one, as in Keras.

    Args:
        axis: the features axis (one int; -1, the channels of NHWC images, by default).
        momentum: the moving averages' decay per training step.
        epsilon: added to the variance before its square root.
        center: whether to add the learned offset beta.
        scale: whether to multiply by the learned scale gamma.
        beta_initializer: initializer of beta (a name or an initializer). Default "zeros".
        gamma_initializer: initializer of gamma. Default "ones".
        moving_mean_initializer: initializer of the moving mean. Default "zeros".
        moving_variance_initializer: initializer of the moving variance. Default "ones".
        beta_regularizer: regularizer of beta (a name, a regularizer, or None).
        gamma_regularizer: regularizer of gamma.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> bn = tp.layers.BatchNormalization(momentum=0.5)
    >>> x = tp.tensor([[0.0], [2.0]])
    >>> bn(x, training=True).numpy().ravel().tolist()
    [-0.9995003938674927, 0.9995003938674927]
    >>> bn.moving_mean.numpy().tolist(), bn.moving_variance.numpy().tolist()
    ([0.5], [1.0])
    """

    def __init__(
        self,
        axis: int = -1,
        momentum: float = 0.99,
        epsilon: float = 1e-3,
        center: bool = True,
        scale: bool = True,
        beta_initializer="zeros",
        gamma_initializer="ones",
        moving_mean_initializer="zeros",
        moving_variance_initializer="ones",
        beta_regularizer=None,
        gamma_regularizer=None,
        **kwargs,
    ):
        super().__init__(
            axis,
            epsilon,
            center,
            scale,
            beta_initializer,
            gamma_initializer,
            beta_regularizer,
            gamma_regularizer,
            **kwargs,
        )
        if not isinstance(axis, int):
            raise ValueError(f"{self.name}: axis must be one int, got {axis!r}")
        self.momentum = _in_range(self.name, "momentum", momentum, 0.0, 1.0)
        self.moving_mean_initializer = moving_mean_initializer
        self.moving_variance_initializer = moving_variance_initializer

    def build(self, input_shape):
        param_shape = self._build_affine(input_shape)
        self.moving_mean = self.add_weight("moving_mean", param_shape, self.moving_mean_initializer, trainable=False)
        self.moving_variance = self.add_weight(
            "moving_variance", param_shape, self.moving_variance_initializer, trainable=False
        )

    def call(self, inputs, training=None):
        if training and self.trainable:
            reduce_axes = tuple(i for i in range(inputs.ndim) if i not in self._axes)
            mu = mean(inputs, reduce_axes, keepdims=True)
            variance = var(inputs, reduce_axes, keepdims=True)
            for moving, batch in ((self.moving_mean, mu), (self.moving_variance, variance)):
                batch = reshape(stop_gradient(batch), moving.shape)
                moving.assign(moving * self.momentum + batch * (1.0 - self.momentum))
        else:
            mu = reshape(self.moving_mean, self._broadcast_shape)
            variance = reshape(self.moving_variance, self._broadcast_shape)
        return self._normalize(inputs, mu, variance)

    def get_config(self):
        return {
            **super().get_config(),
            "momentum": self.momentum,
            "moving_mean_initializer": serialize_initializer(self.moving_mean_initializer),
            "moving_variance_initializer": serialize_initializer(self.moving_variance_initializer),
        }


class LayerNormalization(_Normalization):
    """Normalize each example over `axis` (an int or a list of axes) with its own mean
    and variance, then scale by gamma and shift by beta (shaped like those axes).

    Args:
        axis: the axis, or list of axes, normalized over (the last by default).
        epsilon: added to the variance before its square root.
        center: whether to add the learned offset beta.
        scale: whether to multiply by the learned scale gamma.
        beta_initializer: initializer of beta (a name or an initializer). Default "zeros".
        gamma_initializer: initializer of gamma. Default "ones".
        beta_regularizer: regularizer of beta (a name, a regularizer, or None).
        gamma_regularizer: regularizer of gamma.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> ln = tp.layers.LayerNormalization(axis=[1, 2])
    >>> ln(tp.ones((2, 3, 4))).shape, ln.gamma.shape
    ((2, 3, 4), (3, 4))
    """

    def build(self, input_shape):
        self._build_affine(input_shape)

    def call(self, inputs):
        mu = mean(inputs, self._axes, keepdims=True)
        return self._normalize(inputs, mu, var(inputs, self._axes, keepdims=True))
