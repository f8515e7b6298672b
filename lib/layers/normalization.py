"""Normalization layers: BatchNormalization (batch statistics in training, moving
averages at inference), LayerNormalization (statistics of each example), and
GroupNormalization, RMSNormalization and UnitNormalization.

>>> import tapeflow as tp
>>> y = tp.layers.LayerNormalization()(tp.tensor([[1.0, 2.0, 3.0]]))
>>> [round(v, 3) for v in y.numpy()[0].tolist()]
[-1.224, 0.0, 1.224]
"""

from __future__ import annotations

import math
import numbers

from tapeflow.layers.base import (
    InputSpec,
    Layer,
    serialize_constraint,
    serialize_initializer,
    serialize_regularizer,
)
from tapeflow.ops.array import reshape
from tapeflow.ops.core import ones_like
from tapeflow.ops.half import in_float32
from tapeflow.ops.math import minimum, rsqrt, square, stop_gradient, where
from tapeflow.ops.reduce import mean, var
from tapeflow.ops.reduce import sum as reduce_sum


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
        beta_constraint=None,
        gamma_constraint=None,
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
        self.beta_constraint = beta_constraint
        self.gamma_constraint = gamma_constraint

    def _build_affine(self, input_shape, scale=None, center=None) -> tuple:
        """Create gamma (if `scale`, by default the layer's) and beta (if `center`) over the
        kept axes; return the parameter shape."""
        self._axes = _normalize_axes(self.name, self.axis, len(input_shape))
        param_shape = tuple(input_shape[a] for a in self._axes)
        if None in param_shape:
            raise ValueError(f"{self.name}: axis {self.axis} of the input must be known, got shape {input_shape}")
        self._broadcast_shape = tuple(input_shape[i] if i in self._axes else 1 for i in range(len(input_shape)))
        scale = self.scale if scale is None else scale
        center = self.center if center is None else center
        self.gamma = self.beta = None
        if scale:
            self.gamma = self.add_weight(
                "gamma", param_shape, self.gamma_initializer, self.gamma_regularizer, constraint=self.gamma_constraint
            )
        if center:
            self.beta = self.add_weight(
                "beta", param_shape, self.beta_initializer, self.beta_regularizer, constraint=self.beta_constraint
            )
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
            "beta_constraint": serialize_constraint(self.beta_constraint),
            "gamma_constraint": serialize_constraint(self.gamma_constraint),
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
        beta_constraint: constraint of beta (a name such as "non_neg", a constraint, or None),
            applied after each optimizer update.
        gamma_constraint: constraint of gamma.
        renorm: False only (batch renormalization is not supported).
        renorm_clipping: the clipping of batch renormalization (kept in the config; used only
            with renorm).
        renorm_momentum: the moving averages' decay of batch renormalization (kept in the
            config; used only with renorm).
        synchronized: statistics over every replica's batch under a distribution strategy;
            kept in the config and without effect here, where the batch statistics are those
            of the batch the layer sees (the whole batch in one process).
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
        beta_constraint=None,
        gamma_constraint=None,
        renorm: bool = False,
        renorm_clipping=None,
        renorm_momentum: float = 0.99,
        synchronized: bool = False,
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
            beta_constraint,
            gamma_constraint,
            **kwargs,
        )
        if not isinstance(axis, int):
            raise ValueError(f"{self.name}: axis must be one int, got {axis!r}")
        if renorm:
            raise NotImplementedError(f"{self.name}: renorm=True (batch renormalization) is not supported; pass False")
        if renorm_clipping is not None and not isinstance(renorm_clipping, dict):
            raise ValueError(f"{self.name}: renorm_clipping must be a dict or None, got {renorm_clipping!r}")
        self.renorm = False
        self.renorm_clipping = renorm_clipping
        self.renorm_momentum = _in_range(self.name, "renorm_momentum", renorm_momentum, 0.0, 1.0)
        self.synchronized = bool(synchronized)
        self.momentum = _in_range(self.name, "momentum", momentum, 0.0, 1.0)
        self.moving_mean_initializer = moving_mean_initializer
        self.moving_variance_initializer = moving_variance_initializer

    def build(self, input_shape):
        param_shape = self._build_affine(input_shape)
        self.moving_mean = self.add_weight("moving_mean", param_shape, self.moving_mean_initializer, trainable=False)
        self.moving_variance = self.add_weight(
            "moving_variance", param_shape, self.moving_variance_initializer, trainable=False
        )

    @in_float32
    def call(self, inputs, training=None):
        reduce_axes = tuple(i for i in range(inputs.ndim) if i not in self._axes)
        empty = any(inputs.shape[i] == 0 for i in reduce_axes)  # no statistics to learn: the state stays
        if training and self.trainable and not empty:
            mu = mean(inputs, reduce_axes, keepdims=True)
            variance = var(inputs, reduce_axes, keepdims=True)
            # a size known only when the graph runs may be 0: then the batch's NaN statistics are not taken
            unknown = any(inputs.shape[i] is None for i in reduce_axes)
            rows = reduce_sum(ones_like(inputs), reduce_axes, keepdims=True) > 0 if unknown else None
            for moving, batch in ((self.moving_mean, mu), (self.moving_variance, variance)):
                batch = reshape(stop_gradient(batch), moving.shape)
                updated = moving * self.momentum + batch * (1.0 - self.momentum)
                moving.assign(updated if rows is None else where(reshape(rows, moving.shape), updated, moving))
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
            "renorm": self.renorm,
            "renorm_clipping": self.renorm_clipping,
            "renorm_momentum": self.renorm_momentum,
            "synchronized": self.synchronized,
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
        beta_constraint: constraint of beta (a name such as "non_neg", a constraint, or None),
            applied after each optimizer update.
        gamma_constraint: constraint of gamma.
        rms_scaling: Keras's older variant: the input, not centered, divided by the square root
            of its variance plus epsilon, then multiplied by gamma (always made; no beta).
            False by default.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> ln = tp.layers.LayerNormalization(axis=[1, 2])
    >>> ln(tp.ones((2, 3, 4))).shape, ln.gamma.shape
    ((2, 3, 4), (3, 4))
    >>> rms = tp.layers.LayerNormalization(epsilon=1e-6, rms_scaling=True)
    >>> [round(v, 3) for v in rms(tp.tensor([[1.0, 3.0]])).numpy()[0].tolist()], rms.beta
    ([1.0, 3.0], None)
    """

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
        beta_constraint=None,
        gamma_constraint=None,
        rms_scaling: bool = False,
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
            beta_constraint,
            gamma_constraint,
            **kwargs,
        )
        self.rms_scaling = bool(rms_scaling)

    def build(self, input_shape):
        if self.rms_scaling:
            self._build_affine(input_shape, scale=True, center=False)
        else:
            self._build_affine(input_shape)

    @in_float32
    def call(self, inputs):
        variance = var(inputs, self._axes, keepdims=True)
        if self.rms_scaling:
            return self._normalize(inputs, 0.0, variance)
        return self._normalize(inputs, mean(inputs, self._axes, keepdims=True), variance)

    def get_config(self):
        return {**super().get_config(), "rms_scaling": self.rms_scaling}


class GroupNormalization(_Normalization):
    """Split the channels (`axis`) into `groups` and normalize each example over each group
    (the group's channels and every other non-batch axis), then scale by gamma and shift by beta
    per channel.

    Args:
        groups: the number of groups (dividing the channels); -1 for one group per channel.
        axis: the channels axis (-1 by default).
        epsilon: added to the variance before its square root.
        center: whether to add the learned offset beta.
        scale: whether to multiply by the learned scale gamma.
        beta_initializer: initializer of beta. Default "zeros".
        gamma_initializer: initializer of gamma. Default "ones".
        beta_regularizer: regularizer of beta.
        gamma_regularizer: regularizer of gamma.
        beta_constraint: constraint of beta (a name such as "non_neg", a constraint, or None),
            applied after each optimizer update.
        gamma_constraint: constraint of gamma.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> gn = tp.layers.GroupNormalization(groups=2)
    >>> gn(tp.ones((2, 3, 4))).shape, gn.gamma.shape
    ((2, 3, 4), (4,))
    """

    def __init__(
        self,
        groups: int = 32,
        axis: int = -1,
        epsilon: float = 1e-3,
        center: bool = True,
        scale: bool = True,
        beta_initializer="zeros",
        gamma_initializer="ones",
        beta_regularizer=None,
        gamma_regularizer=None,
        beta_constraint=None,
        gamma_constraint=None,
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
            beta_constraint,
            gamma_constraint,
            **kwargs,
        )
        if isinstance(groups, bool) or not isinstance(groups, int) or (groups <= 0 and groups != -1):
            raise ValueError(f"{self.name}: groups must be a positive int or -1, got {groups!r}")
        if not isinstance(axis, int):
            raise ValueError(f"{self.name}: axis must be one int, got {axis!r}")
        self.groups = groups

    def build(self, input_shape):
        axis = _normalize_axes(self.name, self.axis, len(input_shape))[0]
        channels = input_shape[axis]
        if channels is None:
            raise ValueError(f"{self.name}: axis {self.axis} of the input must be known, got shape {input_shape}")
        if self.groups == -1:
            self.groups = channels
        if channels < self.groups or channels % self.groups:
            raise ValueError(
                f"{self.name}: the number of groups ({self.groups}) must divide the number of channels ({channels})"
            )
        self._build_affine(input_shape)
        group_shape = [1] * (len(input_shape) + 1)
        group_shape[axis : axis + 2] = [self.groups, channels // self.groups]
        self._group_broadcast = tuple(group_shape)
        self._channel_axis = axis

    @in_float32
    def call(self, inputs):
        axis, shape = self._channel_axis, inputs.shape
        grouped_shape = [-1, *shape[1:axis], self.groups, shape[axis] // self.groups, *shape[axis + 1 :]]
        grouped = reshape(inputs, tuple(grouped_shape))
        reduce_axes = tuple(i for i in range(1, grouped.ndim) if i != axis)
        mu = mean(grouped, reduce_axes, keepdims=True)
        inv = rsqrt(var(grouped, reduce_axes, keepdims=True) + self.epsilon)
        if self.gamma is not None:
            inv = inv * reshape(self.gamma, self._group_broadcast)
        y = (grouped - mu) * inv
        if self.beta is not None:
            y = y + reshape(self.beta, self._group_broadcast)
        return reshape(y, tuple(-1 if i == 0 else d for i, d in enumerate(shape)))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        return {**config, "groups": self.groups}


class RMSNormalization(Layer):
    """Divide by the root mean square over `axis` (plus `epsilon` inside the root) and
    multiply by a learned `scale` shaped like those axes.

    Args:
        axis: the axis, or list of axes, normalized over (the last by default).
        epsilon: added to the mean square before its square root.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> y = tp.layers.RMSNormalization(epsilon=0.0)(tp.tensor([[3.0, 4.0]]))
    >>> [round(v, 4) for v in y.numpy()[0].tolist()]
    [0.8485, 1.1314]
    """

    supports_masking = True

    def __init__(self, axis=-1, epsilon: float = 1e-6, **kwargs):
        super().__init__(**kwargs)
        self.axis = axis if isinstance(axis, int) else sorted(axis)
        self.epsilon = _in_range(self.name, "epsilon", epsilon, 0.0, math.inf)

    def build(self, input_shape):
        self._axes = _normalize_axes(self.name, self.axis, len(input_shape))
        shape = tuple(input_shape[a] for a in self._axes)
        if None in shape:
            raise ValueError(f"{self.name}: axis {self.axis} of the input must be known, got shape {input_shape}")
        self._broadcast_shape = tuple(input_shape[i] if i in self._axes else 1 for i in range(len(input_shape)))
        self.scale = self.add_weight("scale", shape, "ones")

    @in_float32
    def call(self, inputs):
        inv = rsqrt(mean(square(inputs), self._axes, keepdims=True) + self.epsilon)
        return inputs * inv * reshape(self.scale, self._broadcast_shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "axis": self.axis, "epsilon": self.epsilon}


class UnitNormalization(Layer):
    """Scale each example to unit L2 norm over `axis` (an int or a list of axes).

    Args:
        axis: the axis, or list of axes, whose norm becomes 1 (the last by default).
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> tp.layers.UnitNormalization()(tp.tensor([[3.0, 4.0]])).numpy().tolist()
    [[0.6000000238418579, 0.800000011920929]]
    """

    supports_masking = True

    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        if isinstance(axis, list | tuple):
            self.axis = list(axis)
        elif isinstance(axis, int) and not isinstance(axis, bool):
            self.axis = axis
        else:
            raise TypeError(f"{self.name}: axis must be an int or a list of ints, got {axis!r}")

    @in_float32
    def call(self, inputs):
        axes = _normalize_axes(self.name, self.axis, inputs.ndim)
        inv_norm = minimum(rsqrt(reduce_sum(square(inputs), axes, keepdims=True)), 1e12)
        return inputs * inv_norm

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "axis": self.axis}
