"""Pooling layers on NHWC images: windowed max/average and global average/max.

>>> import tapeflow as tp
>>> tp.layers.MaxPooling2D()(tp.ones((1, 4, 4, 3))).shape
(1, 2, 2, 3)
"""

from __future__ import annotations

from tapeflow.layers.base import InputSpec, Layer
from tapeflow.layers.conv import padding_mode, pair
from tapeflow.ops import nn
from tapeflow.ops.reduce import max as reduce_max
from tapeflow.ops.reduce import mean
from tapeflow.ops.shapes import window_output_size


class _Pooling2D(Layer):
    _op = None  # the tp.nn pooling function

    def __init__(self, pool_size=(2, 2), strides=None, padding: str = "valid", **kwargs):
        super().__init__(**kwargs)
        self.pool_size = pair(self.name, "pool_size", pool_size)
        self.strides = self.pool_size if strides is None else pair(self.name, "strides", strides)
        self.padding = padding_mode(self.name, padding)
        self.input_spec = InputSpec(ndim=4)

    def call(self, inputs):
        self._output_size(*inputs.shape[1:3])  # a window larger than the image: an error naming the layer
        return self._op(inputs, self.pool_size, self.strides, self.padding.upper())

    def _output_size(self, h, w) -> tuple:
        return window_output_size(self.name, h, w, *self.pool_size, self.strides, self.padding.upper())

    def get_config(self):
        return {**super().get_config(), "pool_size": self.pool_size, "strides": self.strides, "padding": self.padding}


class MaxPooling2D(_Pooling2D):
    """The maximum of each pool_size window of NHWC images ([batch, height, width, channels];
    channels are pooled separately).

    Args:
        pool_size: the window's height and width (an int or a pair). Default 2.
        strides: the step between windows (an int or a pair); None (the default) uses pool_size.
        padding: "valid" (windows inside the image only) or "same" (zero-padded edges, output
            ceil(input / strides)); either case.
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
    """The mean of each pool_size window of NHWC images ([batch, height, width, channels]);
    with "same" padding, padded cells are not counted.

    Args:
        pool_size: the window's height and width (an int or a pair). Default 2.
        strides: the step between windows (an int or a pair); None (the default) uses pool_size.
        padding: "valid" (windows inside the image only) or "same" (zero-padded edges, output
            ceil(input / strides)); either case.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> x = tp.reshape(tp.arange(16, dtype="float32"), (1, 4, 4, 1))
    >>> tp.layers.AveragePooling2D(2)(x).numpy().ravel().tolist()
    [2.5, 4.5, 10.5, 12.5]
    """

    _op = staticmethod(nn.avg_pool2d)


class _GlobalPooling2D(Layer):
    _reduce = None

    def __init__(self, keepdims: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.keepdims = bool(keepdims)
        self.input_spec = InputSpec(ndim=4)

    def call(self, inputs):
        return self._reduce(inputs, (1, 2), keepdims=self.keepdims)

    def get_config(self):
        return {**super().get_config(), "keepdims": self.keepdims}


class GlobalAveragePooling2D(_GlobalPooling2D):
    """The mean over height and width: [N, H, W, C] -> [N, C].

    Args:
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
    """The maximum over height and width: [N, H, W, C] -> [N, C].

    Args:
        keepdims: keep the height and width axes, with size 1 ([N, 1, 1, C]).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.GlobalMaxPooling2D(keepdims=True)(tp.ones((2, 3, 3, 4))).shape
    (2, 1, 1, 4)
    """

    _reduce = staticmethod(reduce_max)
