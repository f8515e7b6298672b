"""Convolution layers: Conv2D and Conv2DTranspose on images (NHWC, or NCHW with
data_format="channels_first"; kernels are HWIO), and Conv1D and Conv1DTranspose on
[batch, steps, channels] sequences (a height-1 image).

>>> import tapeflow as tp
>>> tp.layers.Conv2D(8, 3, padding="same")(tp.ones((1, 5, 5, 2))).shape
(1, 5, 5, 8)
"""

from __future__ import annotations

import numpy as np

from tapeflow.layers.base import (
    _REGISTRY,
    InputSpec,
    Layer,
    serialize_constraint,
    serialize_initializer,
    serialize_regularizer,
)
from tapeflow.layers.core import get_activation, serialize_activation
from tapeflow.ops import nn
from tapeflow.ops.array import concat, expand_dims, pad, split, squeeze, transpose
from tapeflow.ops.shapes import as_int, conv_transpose_output_size, window_output_size


def ints(layer: str, label: str, value, rank: int) -> tuple[int, ...]:
    """A positive int, or `rank` of them, as a tuple of `rank` ints.

    >>> ints("conv1d", "strides", 2, 1), ints("conv2d", "strides", [1, 2], 2)
    ((2,), (1, 2))
    """
    values = (value,) * rank if not isinstance(value, list | tuple) else tuple(value)
    if len(values) != rank:
        what = "a pair of them" if rank == 2 else f"a tuple of {rank}"
        raise ValueError(f"{layer}: {label} must be a positive int or {what}, got {value!r}")
    return tuple(as_int(layer, label, v, low=1) for v in values)


def pair(layer: str, label: str, value) -> tuple[int, int]:
    """An int or a pair of positive ints as a pair.

    >>> pair("conv2d", "strides", 2)
    (2, 2)
    """
    return ints(layer, label, value, 2)


def padding_mode(layer: str, padding: str, allowed=("valid", "same")) -> str:
    """One of `allowed` (either case), lowercased."""
    if not isinstance(padding, str) or padding.lower() not in allowed:
        names = " or ".join(repr(a) for a in allowed)
        raise ValueError(f"{layer}: padding must be {names}, got {padding!r}")
    return padding.lower()


def channels_last(layer: str, data_format) -> str:
    """Keras's `data_format` of the layers that only take channels last: None or "channels_last"."""
    if data_format not in (None, "channels_last"):
        raise ValueError(f"{layer}: data_format must be 'channels_last' (or None), got {data_format!r}")
    return "channels_last"


def data_format_of(layer: str, data_format) -> str:
    """Keras's `data_format`: "channels_last" (also None) or "channels_first"."""
    if data_format not in (None, "channels_last", "channels_first"):
        raise ValueError(f"{layer}: data_format must be 'channels_last' or 'channels_first', got {data_format!r}")
    return data_format or "channels_last"


def to_channels_last(x, data_format: str):
    """[N, C, *spatial] as [N, *spatial, C] when `data_format` is "channels_first"."""
    if data_format == "channels_last":
        return x
    return transpose(x, (0, *range(2, len(x.shape)), 1))


def from_channels_last(y, data_format: str):
    """The inverse of `to_channels_last`."""
    if data_format == "channels_last":
        return y
    rank = len(y.shape)
    return transpose(y, (0, rank - 1, *range(1, rank - 1)))


def output_sizes(layer: str, sizes, window, strides, padding: str, dilations=None) -> tuple:
    """The output sizes of a 'valid' or 'same' window op over any number of axes; a window
    larger than the input is an error naming the layer; unknown sizes stay None.

    >>> output_sizes("pool", (5, None, 7), (2, 2, 3), (2, 2, 1), "valid")
    (2, None, 5)
    """
    dilations = dilations or (1,) * len(sizes)
    axes = zip(sizes, window, strides, dilations, strict=True)
    return tuple(window_output_size(layer, n, 1, k, 1, (s, 1), padding.upper(), (d, 1))[0] for n, k, s, d in axes)


def register_alias(alias: str, cls: type) -> type:
    """Let `tp.layers.deserialize` find `cls` under Keras's other name for it too."""
    _REGISTRY[alias] = cls
    return cls


def grouped_conv2d(x, kernel, groups: int, attrs: dict, conv=nn.conv2d):
    """`conv` (conv2d by default) of channels-last `x` with `kernel` (in and out channels
    last), the channels split into `groups` convolved apart."""
    if groups == 1:
        return conv(x, kernel, **attrs)
    parts = zip(split(x, groups, axis=-1), split(kernel, groups, axis=-1), strict=True)
    return concat([conv(xs, ws, **attrs) for xs, ws in parts], axis=-1)


class _Conv(Layer):
    """Shared configuration of the convolution layers."""

    rank = 2
    paddings = ("valid", "same")
    data_format = "channels_last"

    def __init__(
        self,
        filters: int,
        kernel_size,
        strides=(1, 1),
        padding: str = "valid",
        dilation_rate=(1, 1),
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
        super().__init__(**kwargs)
        self.filters = as_int(self.name, "filters", filters, low=1)
        self.kernel_size = ints(self.name, "kernel_size", kernel_size, self.rank)
        self.strides = ints(self.name, "strides", strides, self.rank)
        self.padding = padding_mode(self.name, padding, self.paddings)
        self.dilation_rate = ints(self.name, "dilation_rate", dilation_rate, self.rank)
        self.activation = get_activation(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
        self.kernel_regularizer = kernel_regularizer
        self.bias_regularizer = bias_regularizer
        self.kernel_constraint = kernel_constraint
        self.bias_constraint = bias_constraint
        self.input_spec = InputSpec(ndim=self.rank + 2)

    @property
    def _channel_axis(self) -> int:
        return -1 if self.data_format == "channels_last" else 1

    def _channels(self, input_shape) -> int:
        channels = input_shape[self._channel_axis]
        if channels is None:
            raise ValueError(f"{self.name}: the channel axis of the input must be known, got shape {input_shape}")
        return channels

    def _make_weights(self, kernel_shape, channels: int) -> None:
        self.kernel = self.add_weight(
            "kernel",
            kernel_shape,
            self.kernel_initializer,
            self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                "bias", (self.filters,), self.bias_initializer, self.bias_regularizer, constraint=self.bias_constraint
            )
        self.input_spec = InputSpec(ndim=self.rank + 2, axes={self._channel_axis: channels})

    def _build_grouped(self, input_shape) -> None:
        """The weights of a convolution whose `groups` split the input channels: a kernel of
        (*kernel_size, channels // groups, filters)."""
        channels = self._channels(input_shape)
        if channels % self.groups:
            raise ValueError(
                f"{self.name}: input channels {channels} (shape {input_shape}) "
                f"are not divisible by groups={self.groups}"
            )
        self._make_weights((*self.kernel_size, channels // self.groups, self.filters), channels)

    def _finish(self, y):
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y)

    def get_config(self):
        return {
            **super().get_config(),
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "padding": self.padding,
            "dilation_rate": self.dilation_rate,
            "activation": serialize_activation(self.activation),
            "use_bias": self.use_bias,
            "kernel_initializer": serialize_initializer(self.kernel_initializer),
            "bias_initializer": serialize_initializer(self.bias_initializer),
            "kernel_regularizer": serialize_regularizer(self.kernel_regularizer),
            "bias_regularizer": serialize_regularizer(self.bias_regularizer),
            "activity_regularizer": serialize_regularizer(self.activity_regularizer),
            "kernel_constraint": serialize_constraint(self.kernel_constraint),
            "bias_constraint": serialize_constraint(self.bias_constraint),
        }


class Conv2D(_Conv):
    """2-D convolution of images ([batch, height, width, channels] in, [batch, out_height,
    out_width, filters] out; channels first with data_format="channels_first"); the kernel is
    [kh, kw, in_channels / groups, filters].

    With `groups` > 1, the channels are split into groups convolved separately
    and the results concatenated.

    Args:
        filters: the number of output channels.
        kernel_size: the window's height and width (an int or a pair).
        strides: the step between windows (an int or a pair). Default 1.
        padding: "valid" (no padding: the output shrinks) or "same" (zero padding so that the
            output is ceil(input / strides)); either case.
        data_format: "channels_last" (NHWC, the default, also None) or "channels_first" (NCHW).
        dilation_rate: the spacing between kernel taps (an int or a pair). Default 1.
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
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> conv = tp.layers.Conv2D(4, (3, 3), strides=2, groups=2)
    >>> conv(tp.ones((2, 9, 9, 6))).shape, conv.kernel.shape
    ((2, 4, 4, 4), (3, 3, 3, 4))
    """

    def __init__(
        self,
        filters: int,
        kernel_size,
        strides=(1, 1),
        padding: str = "valid",
        data_format=None,
        dilation_rate=(1, 1),
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
        self._output_size(*x.shape[1:3])  # a window larger than the image: an error naming the layer
        attrs = {"strides": self.strides, "padding": self.padding.upper(), "dilations": self.dilation_rate}
        return from_channels_last(self._finish(grouped_conv2d(x, self.kernel, self.groups, attrs)), self.data_format)

    def _output_size(self, h, w) -> tuple:
        return window_output_size(
            self.name, h, w, *self.kernel_size, self.strides, self.padding.upper(), self.dilation_rate
        )

    def get_config(self):
        return {**super().get_config(), "data_format": self.data_format, "groups": self.groups}


class Conv2DTranspose(_Conv):
    """Transposed convolution (the gradient of Conv2D with respect to its input), for
    upsampling, on images ([batch, height, width, channels], or channels first); the kernel is
    [kh, kw, filters, in_channels].

    Args:
        filters: the number of output channels.
        kernel_size: the window's height and width (an int or a pair).
        strides: the upsampling factor (an int or a pair). Default 1.
        padding: "valid" or "same" (either case): the padding of the convolution this one transposes;
            with "same" the output is input * strides.
        output_padding: extra rows and columns added to one side of the output (an int or a pair,
            each below the stride), to pick among the output sizes a stride allows; None infers it.
        data_format: "channels_last" (NHWC, the default, also None) or "channels_first" (NCHW).
        dilation_rate: the spacing between kernel taps (an int or a pair). Default 1.
        activation: applied to the output (a name, a callable, or None for linear).
        use_bias: whether to add a bias [filters].
        kernel_initializer: initializer of the kernel (a name or an initializer). Default "glorot_uniform".
        bias_initializer: initializer of the bias. Default "zeros".
        kernel_regularizer: regularizer of the kernel (a name, a regularizer, or None).
        bias_regularizer: regularizer of the bias.
        kernel_constraint: constraint of the kernel (a name such as "max_norm", a constraint, or
            None), applied after each optimizer update.
        bias_constraint: constraint of the bias.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.Conv2DTranspose(3, 3, strides=2, padding="same")(tp.ones((1, 4, 4, 2))).shape
    (1, 8, 8, 3)
    """

    def __init__(
        self,
        filters: int,
        kernel_size,
        strides=(1, 1),
        padding: str = "valid",
        output_padding=None,
        data_format=None,
        dilation_rate=(1, 1),
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
            values = (output_padding,) * 2 if isinstance(output_padding, int | np.integer) else tuple(output_padding)
            if len(values) != 2 or any(not 0 <= int(p) < s for p, s in zip(values, self.strides, strict=True)):
                raise ValueError(
                    f"{self.name}: output_padding must be a pair of ints in [0, strides), got {output_padding!r}"
                )
            self.output_padding = tuple(int(p) for p in values)

    def build(self, input_shape):
        channels = self._channels(input_shape)
        self._make_weights((*self.kernel_size, self.filters, channels), channels)

    def call(self, inputs):
        x = to_channels_last(inputs, self.data_format)
        y = nn.conv2d_transpose(
            x,
            self.kernel,
            self._output_size(*x.shape[1:3]),
            strides=self.strides,
            padding=self.padding.upper(),
            dilations=self.dilation_rate,
        )
        return from_channels_last(self._finish(y), self.data_format)

    def compute_output_shape(self, input_shape):  # the op's output size is a fixed attr: unknown sizes stay here
        first = self.data_format == "channels_first"
        n, h, w = (input_shape[0], *input_shape[2:]) if first else input_shape[:3]
        if h is None or w is None:
            size = self._output_size(h, w)
            return (n, self.filters, *size) if first else (n, *size, self.filters)
        return super().compute_output_shape(input_shape)

    def _output_size(self, h, w) -> tuple:
        """(out_h, out_w) for an image of h x w (None where unknown)."""
        return conv_transpose_output_size(
            h, w, *self.kernel_size, self.strides, self.padding.upper(), self.output_padding, self.dilation_rate
        )

    def get_config(self):
        return {**super().get_config(), "output_padding": self.output_padding, "data_format": self.data_format}


def _check_groups(layer: str, groups, filters: int) -> int:
    if not isinstance(groups, int | np.integer) or groups < 1 or filters % groups:
        raise ValueError(f"{layer}: groups must be a positive divisor of filters={filters}, got {groups!r}")
    return int(groups)


class Conv1D(_Conv):
    """1-D convolution of sequences ([batch, steps, channels] in, [batch, out_steps, filters]
    out); the kernel is [kernel_size, in_channels / groups, filters].

    Args:
        filters: the number of output channels.
        kernel_size: the window's length (an int or a tuple of one).
        strides: the step between windows (an int or a tuple of one). Default 1.
        padding: "valid" (no padding: the output shrinks), "same" (zero padding so that the output
            is ceil(steps / strides)) or "causal" (zeros before the first step only, so that
            output t sees no input after t); either case.
        data_format: "channels_last" (or None, the same); channels-first sequences are refused.
        dilation_rate: the spacing between kernel taps (an int or a tuple of one). Default 1.
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
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> conv = tp.layers.Conv1D(4, 3, padding="causal")
    >>> conv(tp.ones((2, 10, 3))).shape, conv.kernel.shape
    ((2, 10, 4), (3, 3, 4))
    """

    rank = 1
    paddings = ("valid", "same", "causal")

    def __init__(
        self,
        filters: int,
        kernel_size,
        strides=1,
        padding: str = "valid",
        data_format=None,
        dilation_rate=1,
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
        self.data_format = channels_last(self.name, data_format)
        self.groups = _check_groups(self.name, groups, self.filters)

    def build(self, input_shape):
        self._build_grouped(input_shape)

    def call(self, inputs):
        x = inputs
        padding = self.padding
        if padding == "causal":
            x = pad(x, [[0, 0], [(self.kernel_size[0] - 1) * self.dilation_rate[0], 0], [0, 0]])
            padding = "valid"
        # a window longer than the sequence: an error naming the layer
        window_output_size(
            self.name,
            1,
            x.shape[1],
            1,
            *self.kernel_size,
            (1, *self.strides),
            padding.upper(),
            (1, *self.dilation_rate),
        )
        attrs = {"strides": (1, *self.strides), "padding": padding.upper(), "dilations": (1, *self.dilation_rate)}
        y = grouped_conv2d(expand_dims(x, 1), expand_dims(self.kernel, 0), self.groups, attrs)
        return self._finish(squeeze(y, 1))

    def get_config(self):
        return {**super().get_config(), "data_format": self.data_format, "groups": self.groups}


class Conv1DTranspose(_Conv):
    """Transposed 1-D convolution (the gradient of Conv1D with respect to its input), for
    upsampling sequences ([batch, steps, channels] in, [batch, out_steps, filters] out); the
    kernel is [kernel_size, filters, in_channels].

    Args:
        filters: the number of output channels.
        kernel_size: the window's length (an int or a tuple of one).
        strides: the upsampling factor (an int or a tuple of one). Default 1.
        padding: "valid" or "same" (either case): the padding of the convolution this one
            transposes; with "same" the output is steps * strides.
        output_padding: extra steps added at the end of the output (an int or a tuple of one,
            below the stride), to pick among the output lengths a stride allows; None infers it.
        data_format: "channels_last" (or None, the same); channels-first sequences are refused.
        dilation_rate: the spacing between kernel taps (an int or a tuple of one). Default 1.
        activation: applied to the output (a name, a callable, or None for linear).
        use_bias: whether to add a bias [filters].
        kernel_initializer: initializer of the kernel (a name or an initializer). Default "glorot_uniform".
        bias_initializer: initializer of the bias. Default "zeros".
        kernel_regularizer: regularizer of the kernel (a name, a regularizer, or None).
        bias_regularizer: regularizer of the bias.
        kernel_constraint: constraint of the kernel (a name such as "max_norm", a constraint, or
            None), applied after each optimizer update.
        bias_constraint: constraint of the bias.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.Conv1DTranspose(3, 3, strides=2, padding="same")(tp.ones((1, 4, 2))).shape
    (1, 8, 3)
    """

    rank = 1

    def __init__(
        self,
        filters: int,
        kernel_size,
        strides=1,
        padding: str = "valid",
        output_padding=None,
        data_format=None,
        dilation_rate=1,
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
        self.data_format = channels_last(self.name, data_format)
        self.output_padding = None
        if output_padding is not None:
            values = (output_padding,) if isinstance(output_padding, int | np.integer) else tuple(output_padding)
            if len(values) != 1 or not 0 <= int(values[0]) < self.strides[0]:
                raise ValueError(f"{self.name}: output_padding must be an int in [0, strides), got {output_padding!r}")
            self.output_padding = (int(values[0]),)

    def build(self, input_shape):
        channels = self._channels(input_shape)
        self._make_weights((*self.kernel_size, self.filters, channels), channels)

    def call(self, inputs):
        y = nn.conv2d_transpose(
            expand_dims(inputs, 1),
            expand_dims(self.kernel, 0),
            (1, self._output_steps(inputs.shape[1])),
            strides=(1, *self.strides),
            padding=self.padding.upper(),
            dilations=(1, *self.dilation_rate),
        )
        return self._finish(squeeze(y, 1))

    def compute_output_shape(self, input_shape):  # the op's output size is a fixed attr: unknown sizes stay here
        n, steps, _ = input_shape
        if steps is None:
            return (n, None, self.filters)
        return super().compute_output_shape(input_shape)

    def _output_steps(self, steps):
        extra = None if self.output_padding is None else (None, *self.output_padding)
        return conv_transpose_output_size(
            1, steps, 1, *self.kernel_size, (1, *self.strides), self.padding.upper(), extra, (1, *self.dilation_rate)
        )[1]

    def get_config(self):
        return {**super().get_config(), "output_padding": self.output_padding, "data_format": self.data_format}


Convolution1D = register_alias("Convolution1D", Conv1D)
Convolution1DTranspose = register_alias("Convolution1DTranspose", Conv1DTranspose)
Convolution2D = register_alias("Convolution2D", Conv2D)
Convolution2DTranspose = register_alias("Convolution2DTranspose", Conv2DTranspose)
