"""Noise and regularization layers: GaussianNoise, GaussianDropout, AlphaDropout, the spatial
dropouts and ActivityRegularization. The noise layers act only in training.

>>> import tapeflow as tp
>>> noise = tp.layers.GaussianNoise(0.1, seed=0)
>>> noise(tp.ones((2, 2))).numpy().tolist()
[[1.0, 1.0], [1.0, 1.0]]
"""

from __future__ import annotations

import math

from tapeflow import regularizers
from tapeflow.layers.base import InputSpec, Layer
from tapeflow.ops import random
from tapeflow.ops.core import cast
from tapeflow.ops.math import stop_gradient
from tapeflow.ops.random import Generator, global_generator
from tapeflow.ops.reduce import sum as reduce_sum


def layer_generator(seed) -> Generator:
    """The random stream a layer owns: from `seed`, or from a seed drawn from the global stream
    (so that `tp.random.seed` makes the layer reproducible)."""
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ValueError(f"seed must be an int or None, got {seed!r}")
    return Generator(seed if seed is not None else int(global_generator().numpy.integers(2**63)))


def _rate(layer: str, rate) -> float:
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.0 <= float(rate) <= 1.0:
        raise ValueError(f"{layer}: rate must be a number in [0, 1], got {rate!r}")
    return float(rate)


class _Noise(Layer):
    """Shared pieces of the noise layers: a rate (or stddev), a seed and the layer's stream."""

    supports_masking = True

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = _rate(self.name, rate)
        self.seed = seed
        self.generator = layer_generator(seed)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}


class GaussianNoise(_Noise):
    """In training, add zero-centred normal noise of standard deviation `stddev`.

    Args:
        stddev: the noise's standard deviation (>= 0).
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> y = tp.layers.GaussianNoise(1.0, seed=0)(tp.zeros((10000,)), training=True)
    >>> 0.95 < float(tp.std(y)) < 1.05
    True
    """

    def __init__(self, stddev, seed=None, **kwargs):
        if isinstance(stddev, bool) or not isinstance(stddev, int | float) or not 0.0 <= stddev:
            raise ValueError(f"GaussianNoise: stddev must be a number >= 0, got {stddev!r}")
        super().__init__(0.0, seed=seed, **kwargs)
        self.stddev = float(stddev)

    def call(self, inputs, training=False):
        if not training or self.stddev == 0.0:
            return inputs
        return inputs + random.normal(inputs.shape, 0.0, self.stddev, inputs.dtype, generator=self.generator)

    def get_config(self):
        config = super().get_config()
        del config["rate"]
        return {**config, "stddev": self.stddev}


class GaussianDropout(_Noise):
    """In training, multiply by normal noise of mean 1 and standard deviation sqrt(rate / (1 - rate)).

    Args:
        rate: the equivalent drop probability, in [0, 1).
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> y = tp.layers.GaussianDropout(0.5, seed=0)(tp.ones((10000,)), training=True)
    >>> 0.95 < float(tp.std(y)) < 1.05
    True
    """

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(rate, seed=seed, **kwargs)
        if self.rate >= 1.0:
            raise ValueError(f"{self.name}: rate must be in [0, 1), got {rate!r}")

    def call(self, inputs, training=False):
        if not training or self.rate == 0.0:
            return inputs
        stddev = math.sqrt(self.rate / (1.0 - self.rate))
        return inputs * random.normal(inputs.shape, 1.0, stddev, inputs.dtype, generator=self.generator)


class AlphaDropout(_Noise):
    """In training, set dropped values to SELU's negative saturation and rescale so that the
    mean and variance of SELU activations are kept (self-normalizing networks).

    Args:
        rate: the drop probability, in [0, 1].
        noise_shape: the shape of the keep/drop mask (None entries take the input's size).
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> y = tp.layers.AlphaDropout(0.2, seed=0)(tp.zeros((20000,)), training=True)
    >>> abs(float(tp.mean(y))) < 0.05
    True
    """

    _ALPHA = 1.6732632423543772848170429916717
    _SCALE = 1.0507009873554804934193349852946

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        super().__init__(rate, seed=seed, **kwargs)
        self.noise_shape = None if noise_shape is None else tuple(noise_shape)

    def call(self, inputs, training=False):
        if not training or self.rate == 0.0:
            return inputs
        shape = inputs.shape
        if self.noise_shape is not None:
            if len(self.noise_shape) != inputs.ndim:
                raise ValueError(f"{self.name}: noise_shape {self.noise_shape} does not fit input shape {shape}")
            shape = tuple(d if n is None else n for n, d in zip(self.noise_shape, shape, strict=True))
        alpha_p = -self._ALPHA * self._SCALE
        keep = cast(random.uniform(shape, dtype=inputs.dtype, generator=self.generator) >= self.rate, inputs.dtype)
        a = ((1.0 - self.rate) * (1.0 + self.rate * alpha_p**2)) ** -0.5
        b = -a * alpha_p * self.rate
        return a * (inputs * keep + alpha_p * (1.0 - keep)) + b

    def get_config(self):
        return {**super().get_config(), "noise_shape": self.noise_shape}


class _SpatialDropout(_Noise):
    """Dropout of whole feature maps: one keep/drop draw per example and channel."""

    _rank = 3

    def __init__(self, rate, data_format=None, seed=None, **kwargs):
        super().__init__(rate, seed=seed, **kwargs)
        if self.rate >= 1.0:
            raise ValueError(f"{self.name}: rate must be in [0, 1), got {rate!r}")
        if data_format not in (None, "channels_last", "channels_first"):
            raise ValueError(
                f"{self.name}: data_format must be 'channels_last' or 'channels_first', got {data_format!r}"
            )
        self.data_format = data_format or "channels_last"
        self.input_spec = InputSpec(ndim=self._rank)

    def call(self, inputs, training=False):
        if not training or self.rate == 0.0:
            return inputs
        shape = list(inputs.shape)
        spatial = range(2, inputs.ndim) if self.data_format == "channels_first" else range(1, inputs.ndim - 1)
        for axis in spatial:
            shape[axis] = 1
        return random.dropout(inputs, self.rate, tuple(shape), seed=self.generator)

    def get_config(self):
        config = super().get_config()
        del config["trainable"]  # as Keras's, whose spatial dropouts leave it out
        return config if self._rank == 3 else {**config, "data_format": self.data_format}


class SpatialDropout1D(_SpatialDropout):
    """Dropout of whole channels of [batch, steps, channels] inputs in training.

    Args:
        rate: the drop probability, in [0, 1).
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> y = tp.layers.SpatialDropout1D(0.5, seed=0)(tp.ones((1, 4, 3)), training=True)
    >>> bool((y.numpy() == y.numpy()[:, :1]).all())
    True
    """

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(rate, seed=seed, **kwargs)


class SpatialDropout2D(_SpatialDropout):
    """Dropout of whole feature maps of 4-D images in training.

    Args:
        rate: the drop probability, in [0, 1).
        data_format: "channels_last" (NHWC, default) or "channels_first".
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> tp.layers.SpatialDropout2D(0.5)(tp.ones((1, 2, 2, 3))).shape
    (1, 2, 2, 3)
    """

    _rank = 4


class SpatialDropout3D(_SpatialDropout):
    """Dropout of whole feature maps of 5-D volumes in training.

    Args:
        rate: the drop probability, in [0, 1).
        data_format: "channels_last" (default) or "channels_first".
        seed: the seed of the layer's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> tp.layers.SpatialDropout3D(0.5)(tp.ones((1, 2, 2, 2, 3))).shape
    (1, 2, 2, 2, 3)
    """

    _rank = 5


class ActivityRegularization(Layer):
    """Pass inputs through and add `l1 * sum(|x|) + l2 * sum(x**2)`, divided by the batch size,
    to the layer's losses (as Keras's activity regularization does).

    Args:
        l1: the L1 factor (>= 0).
        l2: the L2 factor (>= 0).
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> layer = tp.layers.ActivityRegularization(l1=0.5)
    >>> _ = layer(tp.ones((2, 3)))
    >>> [float(v) for v in layer.losses]
    [1.5]
    """

    supports_masking = True

    def __init__(self, l1=0.0, l2=0.0, **kwargs):
        super().__init__(**kwargs)
        for label, value in (("l1", l1), ("l2", l2)):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{self.name}: {label} must be a number >= 0, got {value!r}")
        self.l1, self.l2 = float(l1), float(l2)
        self.regularizer = regularizers.L1L2(l1=self.l1, l2=self.l2)

    def call(self, inputs):
        loss = self.regularizer(inputs)
        if inputs.ndim > 0 and inputs.shape[0] is not None:
            loss = loss / float(max(inputs.shape[0], 1))
        elif inputs.ndim > 0 and 0 not in inputs.shape[1:]:  # a zero-size example has no penalty to share
            first = inputs[(slice(None),) + (0,) * (inputs.ndim - 1)]  # one entry per example
            loss = loss / reduce_sum(stop_gradient(first) * 0.0 + 1.0)
        self.add_loss(loss)
        return inputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "l1": self.l1, "l2": self.l2}
