"""Volumetric pooling (windowed and global max/average over depth, height and width) and
adaptive pooling of sequences, images and volumes to a fixed output size.

>>> import tapeflow as tp
>>> tp.layers.MaxPooling3D()(tp.ones((1, 4, 4, 4, 3))).shape
(1, 2, 2, 2, 3)
"""

from __future__ import annotations

import numpy as np

from tapeflow.layers.base import InputSpec, Layer
from tapeflow.layers.conv import (
    data_format_of,
    from_channels_last,
    ints,
    output_sizes,
    padding_mode,
    register_alias,
    to_channels_last,
)
from tapeflow.layers.pooling import refuse_empty_pools
from tapeflow.ops.array import concat
from tapeflow.ops.half import in_float32
from tapeflow.ops.nn.conv3d import avg_pool3d, max_pool3d
from tapeflow.ops.reduce import max as reduce_max
from tapeflow.ops.reduce import mean


class _Pooling3D(Layer):
    _op = None  # the 3-D pooling op

    def __init__(self, pool_size=(2, 2, 2), strides=None, padding: str = "valid", data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.pool_size = ints(self.name, "pool_size", pool_size, 3)
        self.strides = self.pool_size if strides is None else ints(self.name, "strides", strides, 3)
        self.padding = padding_mode(self.name, padding)
        self.data_format = data_format_of(self.name, data_format)
        self.input_spec = InputSpec(ndim=5)

    def call(self, inputs):
        x = to_channels_last(inputs, self.data_format)
        output_sizes(self.name, x.shape[1:4], self.pool_size, self.strides, self.padding)
        return from_channels_last(self._op(x, self.pool_size, self.strides, self.padding.upper()), self.data_format)

    def get_config(self):
        return {
            **super().get_config(),
            "pool_size": self.pool_size,
            "strides": self.strides,
            "padding": self.padding,
            "data_format": self.data_format,
        }


class MaxPooling3D(_Pooling3D):
    """The maximum of each pool_size window of volumes ([batch, d, h, w, channels], or
    channels first; channels are pooled separately).

    Args:
        pool_size: the window's depth, height and width (an int or three). Default 2.
        strides: the step between windows (an int or three); None (the default) uses pool_size.
        padding: "valid" (windows inside the volume only) or "same" (padded edges, output
            ceil(input / strides)); either case.
        data_format: "channels_last" (the default, also None) or "channels_first".
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.arange(8, dtype="float32"), (1, 2, 2, 2, 1))
    >>> tp.layers.MaxPooling3D()(x).numpy().ravel().tolist()
    [7.0]
    """

    _op = staticmethod(max_pool3d)


class AveragePooling3D(_Pooling3D):
    """The mean of each pool_size window of volumes ([batch, d, h, w, channels], or channels
    first); with "same" padding, padded cells are not counted.

    Args:
        pool_size: the window's depth, height and width (an int or three).
        strides: the step between windows (an int or three); None (the default) uses pool_size.
        padding: "valid" (windows inside the volume only) or "same" (padded edges, output
            ceil(input / strides)); either case.
        data_format: "channels_last" (the default, also None) or "channels_first".
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.arange(8, dtype="float32"), (1, 2, 2, 2, 1))
    >>> tp.layers.AveragePooling3D(2)(x).numpy().ravel().tolist()
    [3.5]
    """

    _op = staticmethod(avg_pool3d)

    def __init__(self, pool_size, strides=None, padding: str = "valid", data_format=None, **kwargs):
        super().__init__(pool_size, strides, padding, data_format, **kwargs)


class _GlobalPooling3D(Layer):
    _reduce = None

    def __init__(self, data_format=None, keepdims: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.data_format = data_format_of(self.name, data_format)
        self.keepdims = bool(keepdims)
        self.input_spec = InputSpec(ndim=5)

    def call(self, inputs):
        axes = (1, 2, 3) if self.data_format == "channels_last" else (2, 3, 4)
        refuse_empty_pools(self.name, inputs.shape, axes)
        return self._reduce(inputs, axes, keepdims=self.keepdims)

    def get_config(self):
        return {**super().get_config(), "data_format": self.data_format, "keepdims": self.keepdims}


class GlobalAveragePooling3D(_GlobalPooling3D):
    """The mean over depth, height and width: [N, D, H, W, C] -> [N, C] ("channels_first":
    [N, C, D, H, W] -> [N, C]).

    Args:
        data_format: "channels_last" (the default, also None) or "channels_first".
        keepdims: keep the pooled axes, with size 1.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.GlobalAveragePooling3D()(tp.ones((2, 3, 3, 3, 4))).shape
    (2, 4)
    """

    _reduce = staticmethod(mean)


class GlobalMaxPooling3D(_GlobalPooling3D):
    """The maximum over depth, height and width: [N, D, H, W, C] -> [N, C] ("channels_first":
    [N, C, D, H, W] -> [N, C]).

    Args:
        data_format: "channels_last" (the default, also None) or "channels_first".
        keepdims: keep the pooled axes, with size 1.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.GlobalMaxPooling3D(keepdims=True)(tp.ones((2, 3, 3, 3, 4))).shape
    (2, 1, 1, 1, 4)
    """

    _reduce = staticmethod(reduce_max)


def adaptive_bins(size: int, out: int) -> list[tuple[int, int]]:
    """The [start, end) bins of adaptive pooling: bin i covers floor(i * size / out) to
    ceil((i + 1) * size / out), so bins overlap when `out` does not divide `size`.

    >>> adaptive_bins(5, 3)
    [(0, 2), (1, 4), (3, 5)]
    """
    return [((i * size) // out, -(-((i + 1) * size) // out)) for i in range(out)]


class _AdaptivePooling(Layer):
    rank = 2
    _reduce = None

    def __init__(self, output_size, data_format=None, **kwargs):
        super().__init__(**kwargs)
        sizes = (output_size,) * self.rank if isinstance(output_size, int | np.integer) else output_size
        if (
            not isinstance(sizes, list | tuple)
            or len(sizes) != self.rank
            or any(isinstance(s, bool) or not isinstance(s, int | np.integer) or s < 1 for s in sizes)
        ):
            raise TypeError(
                f"{self.name}: output_size must be a positive int or a tuple of {self.rank}, got {output_size!r}"
            )
        self.output_size = tuple(int(s) for s in sizes)
        self.data_format = data_format_of(self.name, data_format)
        self.input_spec = InputSpec(ndim=self.rank + 2)

    @in_float32  # averages of half floats lose digits axis by axis
    def call(self, inputs):
        x = to_channels_last(inputs, self.data_format)
        for axis, out in enumerate(self.output_size, start=1):
            size = x.shape[axis]
            if size is None:
                raise ValueError(f"{self.name}: the pooled axes must be known, got shape {tuple(inputs.shape)}")
            refuse_empty_pools(self.name, x.shape, (axis,))
            head = (slice(None),) * axis
            parts = [self._reduce(x[(*head, slice(a, b))], axis, keepdims=True) for a, b in adaptive_bins(size, out)]
            x = concat(parts, axis=axis) if len(parts) > 1 else parts[0]
        return from_channels_last(x, self.data_format)

    def compute_output_shape(self, input_shape):
        if self.data_format == "channels_last":
            return (input_shape[0], *self.output_size, input_shape[-1])
        return (input_shape[0], input_shape[1], *self.output_size)

    def get_config(self):
        return {**super().get_config(), "output_size": self.output_size, "data_format": self.data_format}


class AdaptiveAveragePooling1D(_AdaptivePooling):
    """Adaptive average pooling of sequences to a fixed output length: each output cell is the average
    of an input bin (see `adaptive_bins`), whatever the input's size.

    Args:
        output_size: the output's length (an int or a tuple of one).
        data_format: "channels_last" (the default, also None) or "channels_first".
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.AdaptiveAveragePooling1D(3)(tp.ones((2, 7, 4))).shape
    (2, 3, 4)
    """

    rank = 1
    _reduce = staticmethod(mean)


class AdaptiveAveragePooling2D(_AdaptivePooling):
    """Adaptive average pooling of images to a fixed output height and width: each output cell is the average
    of an input bin (see `adaptive_bins`), whatever the input's size.

    Args:
        output_size: the output's height and width (an int or a tuple of 2).
        data_format: "channels_last" (the default, also None) or "channels_first".
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.AdaptiveAveragePooling2D(3)(tp.ones((2, 7, 5, 4))).shape
    (2, 3, 3, 4)
    """

    rank = 2
    _reduce = staticmethod(mean)


class AdaptiveAveragePooling3D(_AdaptivePooling):
    """Adaptive average pooling of volumes to a fixed output depth, height and width: each output cell is the average
    of an input bin (see `adaptive_bins`), whatever the input's size.

    Args:
        output_size: the output's depth, height and width (an int or a tuple of 3).
        data_format: "channels_last" (the default, also None) or "channels_first".
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.AdaptiveAveragePooling3D(3)(tp.ones((2, 5, 7, 4, 2))).shape
    (2, 3, 3, 3, 2)
    """

    rank = 3
    _reduce = staticmethod(mean)


class AdaptiveMaxPooling1D(_AdaptivePooling):
    """Adaptive maximum pooling of sequences to a fixed output length: each output cell is the maximum
    of an input bin (see `adaptive_bins`), whatever the input's size.

    Args:
        output_size: the output's length (an int or a tuple of one).
        data_format: "channels_last" (the default, also None) or "channels_first".
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.AdaptiveMaxPooling1D(3)(tp.ones((2, 7, 4))).shape
    (2, 3, 4)
    """

    rank = 1
    _reduce = staticmethod(reduce_max)


class AdaptiveMaxPooling2D(_AdaptivePooling):
    """Adaptive maximum pooling of images to a fixed output height and width: each output cell is the maximum
    of an input bin (see `adaptive_bins`), whatever the input's size.

    Args:
        output_size: the output's height and width (an int or a tuple of 2).
        data_format: "channels_last" (the default, also None) or "channels_first".
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.AdaptiveMaxPooling2D(3)(tp.ones((2, 7, 5, 4))).shape
    (2, 3, 3, 4)
    """

    rank = 2
    _reduce = staticmethod(reduce_max)


class AdaptiveMaxPooling3D(_AdaptivePooling):
    """Adaptive maximum pooling of volumes to a fixed output depth, height and width: each output cell is the maximum
    of an input bin (see `adaptive_bins`), whatever the input's size.

    Args:
        output_size: the output's depth, height and width (an int or a tuple of 3).
        data_format: "channels_last" (the default, also None) or "channels_first".
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.AdaptiveMaxPooling3D(3)(tp.ones((2, 5, 7, 4, 2))).shape
    (2, 3, 3, 3, 2)
    """

    rank = 3
    _reduce = staticmethod(reduce_max)


MaxPool3D = register_alias("MaxPool3D", MaxPooling3D)
AvgPool3D = register_alias("AvgPool3D", AveragePooling3D)
GlobalMaxPool3D = register_alias("GlobalMaxPool3D", GlobalMaxPooling3D)
GlobalAvgPool3D = register_alias("GlobalAvgPool3D", GlobalAveragePooling3D)
