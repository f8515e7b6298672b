"""Volumetric convolution layers: Conv3D and Conv3DTranspose on [batch, depth, height, width,
channels] volumes (or channels first); kernels are [kd, kh, kw, in, out].

>>> import tapeflow as tp
>>> tp.layers.Conv3D(4, 3, padding="same")(tp.ones((1, 4, 4, 4, 2))).shape
(1, 4, 4, 4, 4)
"""

from __future__ import annotations

import numpy as np

from tapeflow.layers.conv import (
    _check_groups,
    _Conv,
    data_format_of,
    from_channels_last,
    grouped_conv2d,
    output_sizes,
    register_alias,
    to_channels_last,
)
from tapeflow.ops.nn.conv3d import conv3d, conv3d_transpose
from tapeflow.ops.shapes import conv_transpose_output_size


class Conv3D(_Conv):
    """3-D convolution of volumes: [batch, d, h, w, channels] in, [batch, d', h', w', filters]
    out (both channels first with data_format="channels_first"); the kernel is
    [kd, kh, kw, in_channels / groups, filters].

    Args:
        filters: the number of output channels.
        kernel_size: the window's depth, height and width (an int or three).
        strides: the step between windows (an int or three). Default 1.
        padding: "valid" (no padding: the output shrinks) or "same" (zero padding so that the
            output is ceil(input / strides)); either case.
        data_format: "channels_last" (the default, also None) or "channels_first".
        dilation_rate: the spacing between kernel taps (an int or three). Default 1.
        groups: split the channels into this many groups convolved separately; divides `filters`
            and the input channels.
        activation: applied to the output (a name, a callable, or None for linear).
        use_bias: whether to add a bias [filters].
        kernel_initializer: initializer of the kernel (a name or an initializer). Default "glorot_uniform".
        bias_initializer: initializer of the bias. Default "zeros".
        kernel_regularizer: regularizer of the kernel (a name, a regularizer, or None).
        bias_regularizer: regularizer of the bias.
        kernel_constraint: constraint of the kernel (a name such as "max_norm", a constraint, or
            None), applied after each optimizer update.
        bias_constraint: constraint of the bias.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> conv = tp.layers.Conv3D(2, (1, 3, 3), strides=2, data_format="channels_first")
    >>> conv(tp.ones((1, 3, 5, 5, 5))).shape, conv.kernel.shape
    ((1, 2, 3, 2, 2), (1, 3, 3, 3, 2))
    """

    rank = 3

    def __init__(
        self,
        filters: int,
        kernel_size,
        strides=(1, 1, 1),
        padding: str = "valid",
        data_format=None,
        dilation_rate=(1, 1, 1),
        groups: int = 1,
        activation=None,
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(
            filters,
            kernel_size,
            strides,
            padding,
            dilation_rate,
            activation,
            use_bias,
            kernel_initializer,
            bias_initializer,
            kernel_regularizer,
            bias_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            **kwargs,
        )
        self.data_format = data_format_of(self.name, data_format)
        self.groups = _check_groups(self.name, groups, self.filters)

    def build(self, input_shape):
        self._build_grouped(input_shape)

    def call(self, inputs):
        x = to_channels_last(inputs, self.data_format)
        output_sizes(self.name, x.shape[1:4], self.kernel_size, self.strides, self.padding, self.dilation_rate)
        attrs = {"strides": self.strides, "padding": self.padding.upper(), "dilations": self.dilation_rate}
        y = grouped_conv2d(x, self.kernel, self.groups, attrs, conv=conv3d)
        return from_channels_last(self._finish(y), self.data_format)

    def get_config(self):
        return {**super().get_config(), "data_format": self.data_format, "groups": self.groups}


class Conv3DTranspose(_Conv):
    """Transposed 3-D convolution (the gradient of Conv3D with respect to its input), to
    upsample volumes ([batch, d, h, w, channels], or channels first); the kernel is
    [kd, kh, kw, filters, in_channels].

    Args:
        filters: the number of output channels.
        kernel_size: the window's depth, height and width (an int or three).
        strides: the upsampling factor (an int or three). Default 1.
        padding: "valid" or "same" (either case): the padding of the convolution this one
            transposes; with "same" the output is input * strides.
        data_format: "channels_last" (the default, also None) or "channels_first".
        output_padding: extra cells added at the end of each output axis (an int or three, each
            below its stride); None infers it.
        dilation_rate: the spacing between kernel taps (an int or three). Default 1.
        activation: applied to the output (a name, a callable, or None for linear).
        use_bias: whether to add a bias [filters].
        kernel_initializer: initializer of the kernel (a name or an initializer). Default "glorot_uniform".
        bias_initializer: initializer of the bias. Default "zeros".
        kernel_regularizer: regularizer of the kernel (a name, a regularizer, or None).
        bias_regularizer: regularizer of the bias.
        kernel_constraint: constraint of the kernel (a name such as "max_norm", a constraint, or
            None), applied after each optimizer update.
        bias_constraint: constraint of the bias.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import tapeflow as tp
    >>> tp.layers.Conv3DTranspose(3, 3, strides=2, padding="same")(tp.ones((1, 2, 3, 4, 2))).shape
    (1, 4, 6, 8, 3)
    """

    rank = 3

    def __init__(
        self,
        filters: int,
        kernel_size,
        strides=(1, 1, 1),
        padding: str = "valid",
        data_format=None,
        output_padding=None,
        dilation_rate=(1, 1, 1),
        activation=None,
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(
            filters,
            kernel_size,
            strides,
            padding,
            dilation_rate,
            activation,
            use_bias,
            kernel_initializer,
            bias_initializer,
            kernel_regularizer,
            bias_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            **kwargs,
        )
        self.data_format = data_format_of(self.name, data_format)
        self.output_padding = None
        if output_padding is not None:
            values = (output_padding,) * 3 if isinstance(output_padding, int | np.integer) else tuple(output_padding)
            if len(values) != 3 or any(not 0 <= int(p) < s for p, s in zip(values, self.strides, strict=True)):
                raise ValueError(
                    f"{self.name}: output_padding must be three ints in [0, strides), got {output_padding!r}"
                )
            self.output_padding = tuple(int(p) for p in values)

    def build(self, input_shape):
        channels = self._channels(input_shape)
        self._make_weights((*self.kernel_size, self.filters, channels), channels)

    def call(self, inputs):
        x = to_channels_last(inputs, self.data_format)
        y = conv3d_transpose(
            x,
            self.kernel,
            self._output_size(x.shape[1:4]),
            strides=self.strides,
            padding=self.padding.upper(),
            dilations=self.dilation_rate,
        )
        return from_channels_last(self._finish(y), self.data_format)

    def _output_size(self, sizes) -> tuple:
        """The output's (depth, height, width) by Keras's rule."""
        extras = self.output_padding or (None,) * 3
        axes = zip(sizes, self.kernel_size, self.strides, extras, self.dilation_rate, strict=True)
        return tuple(
            conv_transpose_output_size(n, 1, k, 1, (s, 1), self.padding.upper(), (extra, None), (d, 1))[0]
            for n, k, s, extra, d in axes
        )

    def get_config(self):
        return {**super().get_config(), "data_format": self.data_format, "output_padding": self.output_padding}


Convolution3D = register_alias("Convolution3D", Conv3D)
Convolution3DTranspose = register_alias("Convolution3DTranspose", Conv3DTranspose)
