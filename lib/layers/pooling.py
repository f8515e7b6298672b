"""Pooling layers: windowed max/average and global average/max, on images (2-D; NHWC or NCHW) and
[batch, steps, channels] sequences (1-D, pooled as height-1 images).

>>> import tapeflow as tp
>>> tp.layers.MaxPooling2D()(tp.ones((1, 4, 4, 3))).shape
(1, 2, 2, 3)
"""

from __future__ import annotations

from tapeflow.layers.base import InputSpec, Layer
from tapeflow.layers.conv import (
    channels_last,
    data_format_of,
    from_channels_last,
    ints,
    padding_mode,
    pair,
    register_alias,
    to_channels_last,
)
from tapeflow.ops import nn
from tapeflow.ops.array import expand_dims, squeeze
from tapeflow.ops.math import cast, where
from tapeflow.ops.reduce import max as reduce_max
from tapeflow.ops.reduce import mean
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.shapes import window_output_size


class _Pooling2D(Layer):
    _op = None  # the tp.nn pooling function

    def __init__(self, pool_size=(2, 2), strides=None, padding: str = "valid", data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.pool_size = pair(self.name, "pool_size", pool_size)
        self.strides = self.pool_size if strides is None else pair(self.name, "strides", strides)
        self.padding = padding_mode(self.name, padding)
        self.data_format = data_format_of(self.name, data_format)
        self.input_spec = InputSpec(ndim=4)

    def call(self, inputs):
        x = to_channels_last(inputs, self.data_format)
        self._output_size(*x.shape[1:3])  # a window larger than the image: an error naming the layer
        return from_channels_last(self._op(x, self.pool_size, self.strides, self.padding.upper()), self.data_format)

    def _output_size(self, h, w) -> tuple:
        return window_output_size(self.name, h, w, *self.pool_size, self.strides, self.padding.upper())

    def get_config(self):
        return {
            **super().get_config(),
            "pool_size": self.pool_size,
            "strides": self.strides,
            "padding": self.padding,
            "data_format": self.data_format,
        }


class MaxPooling2D(_Pooling2D):
    """The maximum of each pool_size window of images ([batch, height, width, channels], or
    channels first; channels are pooled separately).

    Args:
        pool_size: the window's height and width (an int or a pair). Default 2.
        strides: the step between windows (an int or a pair); None (the default) uses pool_size.
        padding: "valid" (windows inside the image only) or "same" (zero-padded edges, output
            ceil(input / strides)); either case.
        data_format: "channels_last" (NHWC, the default, also None) or "channels_first" (NCHW).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.arange(16, dtype="float32"), (1, 4, 4, 1))
    >>> tp.layers.MaxPooling2D(2)(x).numpy().ravel().tolist()
    [5.0, 7.0, 13.0, 15.0]
    """

    _op = staticmethod(nn.max_pool2d)


class AveragePooling2D(_Pooling2D):
    """The mean of each pool_size window of images ([batch, height, width, channels], or
    channels first); with "same" padding, padded cells are not counted.

    Args:
        pool_size: the window's height and width (an int or a pair).
        strides: the step between windows (an int or a pair); None (the default) uses pool_size.
        padding: "valid" (windows inside the image only) or "same" (zero-padded edges, output
            ceil(input / strides)); either case.
        data_format: "channels_last" (NHWC, the default, also None) or "channels_first" (NCHW).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.arange(16, dtype="float32"), (1, 4, 4, 1))
    >>> tp.layers.AveragePooling2D(2)(x).numpy().ravel().tolist()
    [2.5, 4.5, 10.5, 12.5]
    """

    _op = staticmethod(nn.avg_pool2d)

    def __init__(self, pool_size, strides=None, padding: str = "valid", data_format=None, **kwargs):
        super().__init__(pool_size, strides, padding, data_format, **kwargs)


def refuse_empty_pools(layer: str, shape, axes) -> None:
    """Raise a ValueError naming `layer` when an axis it pools over has size 0: the average
    or maximum of no values is undefined, and NaN would flow on silently."""
    empty = [a for a in axes if shape[a] == 0]
    if empty:
        raise ValueError(f"{layer}: cannot pool over axis {empty[0]} of size 0 (input shape {tuple(shape)})")


class _GlobalPooling2D(Layer):
    _reduce = None

    def __init__(self, data_format=None, keepdims: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.data_format = data_format_of(self.name, data_format)
        self.keepdims = bool(keepdims)
        self.input_spec = InputSpec(ndim=4)

    def call(self, inputs):
        axes = (1, 2) if self.data_format == "channels_last" else (2, 3)
        refuse_empty_pools(self.name, inputs.shape, axes)
        return self._reduce(inputs, axes, keepdims=self.keepdims)

    def get_config(self):
        return {**super().get_config(), "data_format": self.data_format, "keepdims": self.keepdims}


class GlobalAveragePooling2D(_GlobalPooling2D):
    """The mean over height and width: [N, H, W, C] -> [N, C] ("channels_first": [N, C, H, W]
    -> [N, C]).

    Args:
        data_format: "channels_last" (the default, also None) or "channels_first": where the
            channel axis is.
        keepdims: keep the height and width axes, with size 1 ([N, 1, 1, C]).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.GlobalAveragePooling2D()(tp.ones((2, 3, 3, 4))).shape
    (2, 4)
    """

    _reduce = staticmethod(mean)


class GlobalMaxPooling2D(_GlobalPooling2D):
    """The maximum over height and width: [N, H, W, C] -> [N, C] ("channels_first":
    [N, C, H, W] -> [N, C]).

    Args:
        data_format: "channels_last" (the default, also None) or "channels_first": where the
            channel axis is.
        keepdims: keep the height and width axes, with size 1 ([N, 1, 1, C]).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.GlobalMaxPooling2D(keepdims=True)(tp.ones((2, 3, 3, 4))).shape
    (2, 1, 1, 4)
    """

    _reduce = staticmethod(reduce_max)


class _Pooling1D(Layer):
    _op = None  # the tp.nn 2-D pooling function

    def __init__(self, pool_size=2, strides=None, padding: str = "valid", data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.pool_size = ints(self.name, "pool_size", pool_size, 1)
        self.strides = self.pool_size if strides is None else ints(self.name, "strides", strides, 1)
        self.padding = padding_mode(self.name, padding)
        self.data_format = channels_last(self.name, data_format)
        self.input_spec = InputSpec(ndim=3)

    def call(self, inputs):
        # a window longer than the sequence: an error naming the layer
        window_output_size(self.name, 1, inputs.shape[1], 1, *self.pool_size, (1, *self.strides), self.padding.upper())
        y = self._op(expand_dims(inputs, 1), (1, *self.pool_size), (1, *self.strides), self.padding.upper())
        return squeeze(y, 1)

    def get_config(self):
        return {
            **super().get_config(),
            "pool_size": self.pool_size,
            "strides": self.strides,
            "padding": self.padding,
            "data_format": self.data_format,
        }


class MaxPooling1D(_Pooling1D):
    """The maximum of each pool_size window of sequences ([batch, steps, channels]; channels
    are pooled separately).

    Args:
        pool_size: the window's length (an int or a tuple of one). Default 2.
        strides: the step between windows (an int or a tuple of one); None (the default) uses
            pool_size.
        padding: "valid" (windows inside the sequence only) or "same" (padded edges, output
            ceil(steps / strides)); either case.
        data_format: "channels_last" (or None, the same); channels-first sequences are refused.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.arange(6, dtype="float32"), (1, 6, 1))
    >>> tp.layers.MaxPooling1D(2)(x).numpy().ravel().tolist()
    [1.0, 3.0, 5.0]
    """

    _op = staticmethod(nn.max_pool2d)


class AveragePooling1D(_Pooling1D):
    """The mean of each pool_size window of sequences ([batch, steps, channels]); with "same"
    padding, padded steps are not counted.

    Args:
        pool_size: the window's length (an int or a tuple of one).
        strides: the step between windows (an int or a tuple of one); None (the default) uses
            pool_size.
        padding: "valid" (windows inside the sequence only) or "same" (padded edges, output
            ceil(steps / strides)); either case.
        data_format: "channels_last" (or None, the same); channels-first sequences are refused.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.arange(6, dtype="float32"), (1, 6, 1))
    >>> tp.layers.AveragePooling1D(3)(x).numpy().ravel().tolist()
    [1.0, 4.0]
    """

    _op = staticmethod(nn.avg_pool2d)

    def __init__(self, pool_size, strides=None, padding: str = "valid", data_format=None, **kwargs):
        super().__init__(pool_size, strides, padding, data_format, **kwargs)


class _GlobalPooling1D(Layer):
    def __init__(self, data_format=None, keepdims: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.data_format = data_format_of(self.name, data_format)
        self.keepdims = bool(keepdims)
        self.input_spec = InputSpec(ndim=3)

    @property
    def _steps_axis(self) -> int:
        return 1 if self.data_format == "channels_last" else 2

    def compute_mask(self, inputs, mask=None):
        return None

    def get_config(self):
        return {**super().get_config(), "data_format": self.data_format, "keepdims": self.keepdims}


class GlobalAveragePooling1D(_GlobalPooling1D):
    """The mean over the steps of sequences: [N, steps, C] -> [N, C] ("channels_first":
    [N, C, steps] -> [N, C]). With a mask ([N, steps], from `Masking` or `Embedding(mask_zero=True)`),
    the mean of the unmasked steps only.

    Args:
        data_format: "channels_last" (the default, also None) or "channels_first": which axis
            holds the steps.
        keepdims: keep the steps axis, with size 1.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.arange(6, dtype="float32"), (1, 3, 2))
    >>> tp.layers.GlobalAveragePooling1D()(x, mask=tp.tensor([[True, True, False]])).numpy().tolist()
    [[1.0, 2.0]]
    """

    def call(self, inputs, mask=None):
        axis = self._steps_axis
        refuse_empty_pools(self.name, inputs.shape, (axis,))
        if mask is None:
            return mean(inputs, axis, keepdims=self.keepdims)
        keep = cast(expand_dims(mask, 2 if axis == 1 else 1), "bool")
        total = reduce_sum(where(keep, inputs, 0.0), axis, keepdims=self.keepdims)
        return total / reduce_sum(cast(keep, inputs.dtype), axis, keepdims=self.keepdims)


class GlobalMaxPooling1D(_GlobalPooling1D):
    """The maximum over the steps of sequences: [N, steps, C] -> [N, C] ("channels_first":
    [N, C, steps] -> [N, C]). A mask is ignored, as in Keras.

    Args:
        data_format: "channels_last" (the default, also None) or "channels_first": which axis
            holds the steps.
        keepdims: keep the steps axis, with size 1.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.GlobalMaxPooling1D(keepdims=True)(tp.ones((2, 5, 3))).shape
    (2, 1, 3)
    """

    def call(self, inputs):
        refuse_empty_pools(self.name, inputs.shape, (self._steps_axis,))
        return reduce_max(inputs, self._steps_axis, keepdims=self.keepdims)


MaxPool1D = register_alias("MaxPool1D", MaxPooling1D)
MaxPool2D = register_alias("MaxPool2D", MaxPooling2D)
AvgPool1D = register_alias("AvgPool1D", AveragePooling1D)
AvgPool2D = register_alias("AvgPool2D", AveragePooling2D)
GlobalMaxPool1D = register_alias("GlobalMaxPool1D", GlobalMaxPooling1D)
GlobalMaxPool2D = register_alias("GlobalMaxPool2D", GlobalMaxPooling2D)
GlobalAvgPool1D = register_alias("GlobalAvgPool1D", GlobalAveragePooling1D)
GlobalAvgPool2D = register_alias("GlobalAvgPool2D", GlobalAveragePooling2D)
