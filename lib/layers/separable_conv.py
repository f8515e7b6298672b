"""Depthwise and depthwise-separable convolutions of sequences (1-D) and images (2-D): each
input channel is convolved with its own `depth_multiplier` kernels; the separable layers then
mix the channels with a 1x1 (pointwise) convolution.

>>> import tapeflow as tp
>>> tp.layers.SeparableConv2D(4, 3, padding="same")(tp.ones((1, 5, 5, 2))).shape
(1, 5, 5, 4)
"""

from __future__ import annotations

from tapeflow.layers.base import (
    InputSpec,
    Layer,
    serialize_constraint,
    serialize_initializer,
    serialize_regularizer,
)
from tapeflow.layers.conv import (
    data_format_of,
    from_channels_last,
    ints,
    output_sizes,
    padding_mode,
    register_alias,
    to_channels_last,
)
from tapeflow.layers.core import get_activation, serialize_activation
from tapeflow.ops import nn
from tapeflow.ops.array import expand_dims, reshape, squeeze
from tapeflow.ops.shapes import as_int


class _DepthwiseBase(Layer):
    """The depthwise part shared by the depthwise and separable layers."""

    rank = 2

    def __init__(
        self,
        kernel_size,
        strides,
        padding,
        depth_multiplier,
        data_format,
        dilation_rate,
        activation,
        use_bias,
        depthwise_initializer,
        bias_initializer,
        depthwise_regularizer,
        bias_regularizer,
        depthwise_constraint,
        bias_constraint,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.kernel_size = ints(self.name, "kernel_size", kernel_size, self.rank)
        self.strides = ints(self.name, "strides", strides, self.rank)
        self.padding = padding_mode(self.name, padding)
        self.depth_multiplier = as_int(self.name, "depth_multiplier", depth_multiplier, low=1)
        self.data_format = data_format_of(self.name, data_format)
        self.dilation_rate = ints(self.name, "dilation_rate", dilation_rate, self.rank)
        self.activation = get_activation(activation)
        self.use_bias = bool(use_bias)
        self.depthwise_initializer = depthwise_initializer
        self.bias_initializer = bias_initializer
        self.depthwise_regularizer = depthwise_regularizer
        self.bias_regularizer = bias_regularizer
        self.depthwise_constraint = depthwise_constraint
        self.bias_constraint = bias_constraint
        self.input_spec = InputSpec(ndim=self.rank + 2)

    @property
    def _channel_axis(self) -> int:
        return -1 if self.data_format == "channels_last" else 1

    def _channels(self, input_shape) -> int:
        channels = input_shape[self._channel_axis]
        if channels is None:
            raise ValueError(f"{self.name}: the channel axis of the input must be known, got shape {input_shape}")
        self.input_spec = InputSpec(ndim=self.rank + 2, axes={self._channel_axis: channels})
        return channels

    def _depthwise_kernel(self, input_shape, name: str):
        shape = (*self.kernel_size, self._channels(input_shape), self.depth_multiplier)
        return self.add_weight(
            name, shape, self.depthwise_initializer, self.depthwise_regularizer, constraint=self.depthwise_constraint
        )

    def _bias(self, size: int):
        if not self.use_bias:
            return None
        return self.add_weight(
            "bias", (size,), self.bias_initializer, self.bias_regularizer, constraint=self.bias_constraint
        )

    def _depthwise(self, x, kernel):
        """The depthwise convolution of channels-last `x`, as an image ([N, 1, steps, C] for 1-D)."""
        output_sizes(self.name, x.shape[1:-1], self.kernel_size, self.strides, self.padding, self.dilation_rate)
        lead = (1,) * (2 - self.rank)
        return nn.depthwise_conv2d(
            expand_dims(x, 1) if self.rank == 1 else x,
            expand_dims(kernel, 0) if self.rank == 1 else kernel,
            strides=(*lead, *self.strides),
            padding=self.padding.upper(),
            dilations=(*lead, *self.dilation_rate),
        )

    def _finish(self, y, bias):
        if bias is not None:
            y = y + bias
        y = self.activation(squeeze(y, 1) if self.rank == 1 else y)
        return from_channels_last(y, self.data_format)

    def get_config(self):
        return {
            **super().get_config(),
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "padding": self.padding,
            "depth_multiplier": self.depth_multiplier,
            "data_format": self.data_format,
            "dilation_rate": self.dilation_rate,
            "activation": serialize_activation(self.activation),
            "use_bias": self.use_bias,
            "depthwise_initializer": serialize_initializer(self.depthwise_initializer),
            "bias_initializer": serialize_initializer(self.bias_initializer),
            "depthwise_regularizer": serialize_regularizer(self.depthwise_regularizer),
            "bias_regularizer": serialize_regularizer(self.bias_regularizer),
            "activity_regularizer": serialize_regularizer(self.activity_regularizer),
            "depthwise_constraint": serialize_constraint(self.depthwise_constraint),
            "bias_constraint": serialize_constraint(self.bias_constraint),
        }


class _Depthwise(_DepthwiseBase):
    def __init__(
        self,
        kernel_size,
        strides=1,
        padding: str = "valid",
        depth_multiplier: int = 1,
        data_format=None,
        dilation_rate=1,
        activation=None,
        use_bias: bool = True,
        depthwise_initializer="glorot_uniform",
        bias_initializer="zeros",
        depthwise_regularizer=None,
        bias_regularizer=None,
        depthwise_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(
            kernel_size,
            strides,
            padding,
            depth_multiplier,
            data_format,
            dilation_rate,
            activation,
            use_bias,
            depthwise_initializer,
            bias_initializer,
            depthwise_regularizer,
            bias_regularizer,
            depthwise_constraint,
            bias_constraint,
            **kwargs,
        )

    def build(self, input_shape):
        self.kernel = self._depthwise_kernel(input_shape, "kernel")
        self.bias = self._bias(self.kernel.shape[-2] * self.depth_multiplier)

    def call(self, inputs):
        return self._finish(self._depthwise(to_channels_last(inputs, self.data_format), self.kernel), self.bias)


class DepthwiseConv1D(_Depthwise):
    """Depthwise 1-D convolution of sequences: each of the C input channels convolved with its
    own `depth_multiplier` kernels, giving C * depth_multiplier channels (channel c * M + m
    from kernel [:, c, m]); the kernel is [kernel_size, C, depth_multiplier].

    Args:
        kernel_size: the window's length (an int or a tuple of one).
        strides: the step between windows (an int or a tuple of one). Default 1.
        padding: "valid" or "same" (either case).
        depth_multiplier: output channels per input channel. Default 1.
        data_format: "channels_last" ([batch, steps, channels], the default, also None) or
            "channels_first" ([batch, channels, steps]).
        dilation_rate: the spacing between kernel taps (an int or a tuple of one). Default 1.
        activation: applied to the output (a name, a callable, or None for linear).
        use_bias: whether to add a bias [C * depth_multiplier].
        depthwise_initializer: initializer of the kernel. Default "glorot_uniform".
        bias_initializer: initializer of the bias. Default "zeros".
        depthwise_regularizer: regularizer of the kernel (a name, a regularizer, or None).
        bias_regularizer: regularizer of the bias.
        depthwise_constraint: constraint of the kernel (a name such as "max_norm", a constraint,
            or None), applied after each optimizer update.
        bias_constraint: constraint of the bias.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> layer = tp.layers.DepthwiseConv1D(3, depth_multiplier=2)
    >>> layer(tp.ones((2, 7, 3))).shape, layer.kernel.shape
    ((2, 5, 6), (3, 3, 2))
    """

    rank = 1


class DepthwiseConv2D(_Depthwise):
    """Depthwise 2-D convolution of images: each of the C input channels convolved with its
    own `depth_multiplier` kernels, giving C * depth_multiplier channels (channel c * M + m
    from kernel [:, :, c, m]); the kernel is [kh, kw, C, depth_multiplier].

    Args:
        kernel_size: the window's height and width (an int or a pair).
        strides: the step between windows (an int or a pair). Default 1.
        padding: "valid" or "same" (either case).
        depth_multiplier: output channels per input channel. Default 1.
        data_format: "channels_last" (NHWC, the default, also None) or "channels_first" (NCHW).
        dilation_rate: the spacing between kernel taps (an int or a pair). Default 1.
        activation: applied to the output (a name, a callable, or None for linear).
        use_bias: whether to add a bias [C * depth_multiplier].
        depthwise_initializer: initializer of the kernel. Default "glorot_uniform".
        bias_initializer: initializer of the bias. Default "zeros".
        depthwise_regularizer: regularizer of the kernel (a name, a regularizer, or None).
        bias_regularizer: regularizer of the bias.
        depthwise_constraint: constraint of the kernel (a name such as "max_norm", a constraint,
            or None), applied after each optimizer update.
        bias_constraint: constraint of the bias.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> layer = tp.layers.DepthwiseConv2D(3, padding="same")
    >>> layer(tp.ones((1, 4, 4, 3))).shape, layer.kernel.shape
    ((1, 4, 4, 3), (3, 3, 3, 1))
    """


class _Separable(_DepthwiseBase):
    def __init__(
        self,
        filters: int,
        kernel_size,
        strides=1,
        padding: str = "valid",
        data_format=None,
        dilation_rate=1,
        depth_multiplier: int = 1,
        activation=None,
        use_bias: bool = True,
        depthwise_initializer="glorot_uniform",
        pointwise_initializer="glorot_uniform",
        bias_initializer="zeros",
        depthwise_regularizer=None,
        pointwise_regularizer=None,
        bias_regularizer=None,
        depthwise_constraint=None,
        pointwise_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(
            kernel_size,
            strides,
            padding,
            depth_multiplier,
            data_format,
            dilation_rate,
            activation,
            use_bias,
            depthwise_initializer,
            bias_initializer,
            depthwise_regularizer,
            bias_regularizer,
            depthwise_constraint,
            bias_constraint,
            **kwargs,
        )
        self.filters = as_int(self.name, "filters", filters, low=1)
        self.pointwise_initializer = pointwise_initializer
        self.pointwise_regularizer = pointwise_regularizer
        self.pointwise_constraint = pointwise_constraint

    def build(self, input_shape):
        self.depthwise_kernel = self._depthwise_kernel(input_shape, "depthwise_kernel")
        mixed = self.depthwise_kernel.shape[-2] * self.depth_multiplier
        self.pointwise_kernel = self.add_weight(
            "pointwise_kernel",
            (*(1,) * self.rank, mixed, self.filters),
            self.pointwise_initializer,
            self.pointwise_regularizer,
            constraint=self.pointwise_constraint,
        )
        self.bias = self._bias(self.filters)

    def call(self, inputs):
        y = self._depthwise(to_channels_last(inputs, self.data_format), self.depthwise_kernel)
        pointwise = reshape(self.pointwise_kernel, (1, 1, *self.pointwise_kernel.shape[-2:]))
        return self._finish(nn.conv2d(y, pointwise), self.bias)

    def get_config(self):
        return {
            **super().get_config(),
            "filters": self.filters,
            "pointwise_initializer": serialize_initializer(self.pointwise_initializer),
            "pointwise_regularizer": serialize_regularizer(self.pointwise_regularizer),
            "pointwise_constraint": serialize_constraint(self.pointwise_constraint),
        }


class SeparableConv1D(_Separable):
    """Depthwise-separable 1-D convolution of sequences: a depthwise convolution (kernel
    [kernel_size, C, depth_multiplier]) then a pointwise one (kernel [1, C * depth_multiplier,
    filters]) mixing the channels, then the bias and the activation.

    Args:
        filters: the number of output channels.
        kernel_size: the window's length (an int or a tuple of one).
        strides: the step between windows (an int or a tuple of one). Default 1.
        padding: "valid" or "same" (either case).
        data_format: "channels_last" ([batch, steps, channels], the default, also None) or
            "channels_first" ([batch, channels, steps]).
        dilation_rate: the spacing between kernel taps (an int or a tuple of one). Default 1.
        depth_multiplier: depthwise output channels per input channel. Default 1.
        activation: applied to the output (a name, a callable, or None for linear).
        use_bias: whether to add a bias [filters].
        depthwise_initializer: initializer of the depthwise kernel. Default "glorot_uniform".
        pointwise_initializer: initializer of the pointwise kernel. Default "glorot_uniform".
        bias_initializer: initializer of the bias. Default "zeros".
        depthwise_regularizer: regularizer of the depthwise kernel.
        pointwise_regularizer: regularizer of the pointwise kernel.
        bias_regularizer: regularizer of the bias.
        depthwise_constraint: constraint of the depthwise kernel (a name such as "max_norm", a
            constraint, or None), applied after each optimizer update.
        pointwise_constraint: constraint of the pointwise kernel.
        bias_constraint: constraint of the bias.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> layer = tp.layers.SeparableConv1D(4, 3, depth_multiplier=2)
    >>> layer(tp.ones((2, 6, 3))).shape, layer.pointwise_kernel.shape
    ((2, 4, 4), (1, 6, 4))
    """

    rank = 1


class SeparableConv2D(_Separable):
    """Depthwise-separable 2-D convolution of images: a depthwise convolution (kernel
    [kh, kw, C, depth_multiplier]) then a pointwise one (kernel [1, 1, C * depth_multiplier,
    filters]) mixing the channels, then the bias and the activation.

    Args:
        filters: the number of output channels.
        kernel_size: the window's height and width (an int or a pair).
        strides: the step between windows (an int or a pair). Default 1.
        padding: "valid" or "same" (either case).
        data_format: "channels_last" (NHWC, the default, also None) or "channels_first" (NCHW).
        dilation_rate: the spacing between kernel taps (an int or a pair). Default 1.
        depth_multiplier: depthwise output channels per input channel. Default 1.
        activation: applied to the output (a name, a callable, or None for linear).
        use_bias: whether to add a bias [filters].
        depthwise_initializer: initializer of the depthwise kernel. Default "glorot_uniform".
        pointwise_initializer: initializer of the pointwise kernel. Default "glorot_uniform".
        bias_initializer: initializer of the bias. Default "zeros".
        depthwise_regularizer: regularizer of the depthwise kernel.
        pointwise_regularizer: regularizer of the pointwise kernel.
        bias_regularizer: regularizer of the bias.
        depthwise_constraint: constraint of the depthwise kernel (a name such as "max_norm", a
            constraint, or None), applied after each optimizer update.
        pointwise_constraint: constraint of the pointwise kernel.
        bias_constraint: constraint of the bias.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> layer = tp.layers.SeparableConv2D(4, 3, strides=2)
    >>> layer(tp.ones((1, 7, 7, 3))).shape, layer.depthwise_kernel.shape
    ((1, 3, 3, 4), (3, 3, 3, 1))
    """


SeparableConvolution1D = register_alias("SeparableConvolution1D", SeparableConv1D)
SeparableConvolution2D = register_alias("SeparableConvolution2D", SeparableConv2D)
