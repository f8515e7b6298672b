"""Convolutional LSTMs: an LSTM whose input and recurrent transforms are convolutions, run
over sequences of 1-D, 2-D or 3-D frames ([batch, time, *spatial, channels], or
[batch, time, channels, *spatial] with data_format="channels_first").

The kernels are [*kernel_size, channels, 4 * filters] and [*kernel_size, filters, 4 * filters]
with the gates i, f, c, o in that order, as Keras's.

>>> import tapeflow as tp
>>> tp.layers.ConvLSTM2D(4, 3, padding="same")(tp.ones((2, 3, 5, 5, 2))).shape
(2, 5, 5, 4)
"""

from __future__ import annotations

from tapeflow import initializers
from tapeflow.layers.base import (
    InputSpec,
    Layer,
    serialize_constraint,
    serialize_initializer,
    serialize_regularizer,
)
from tapeflow.layers.conv import data_format_of, ints, output_sizes, padding_mode
from tapeflow.layers.core import get_activation, serialize_activation
from tapeflow.layers.recurrent import KeptStates
from tapeflow.ops import nn
from tapeflow.ops.array import concat, expand_dims, reshape, split, stack
from tapeflow.ops.core import full_like, transpose, zeros_like
from tapeflow.ops.creation import ones
from tapeflow.ops.math import cast, where
from tapeflow.ops.nn.conv3d import conv3d
from tapeflow.ops.registry import as_tensor
from tapeflow.ops.shapes import as_int


def _conv(x, kernel, rank: int, strides, padding: str, dilations):
    """A channels-last convolution of rank 1, 2 or 3 (rank 1 runs as a height-1 image)."""
    if rank == 3:
        return conv3d(x, kernel, strides, padding, dilations)
    if rank == 2:
        return nn.conv2d(x, kernel, strides, padding, dilations)
    image = reshape(x, (-1, 1, *x.shape[1:]))  # -1, not None: the leading axis is batch * time
    y = nn.conv2d(image, expand_dims(kernel, 0), (1, *strides), padding, (1, *dilations))
    return reshape(y, (-1, *y.shape[2:]))


class _ConvLSTMCell(Layer):
    """The weights and the one-step update of a convolutional LSTM (channels last)."""

    def __init__(self, rank: int, filters: int, kernel_size, strides, padding, dilation_rate, **kwargs):
        settings = {k: kwargs.pop(k) for k in _CELL_SETTINGS}
        super().__init__(**kwargs)
        self.settings = settings
        self.rank = rank
        self.filters = filters
        self.kernel_size = kernel_size
        self.strides = strides
        self.padding = padding
        self.dilation_rate = dilation_rate
        self.activation = get_activation(self.settings["activation"])
        self.recurrent_activation = get_activation(self.settings["recurrent_activation"])

    def build(self, input_shape):
        s = self.settings
        width = 4 * self.filters
        self.kernel = self.add_weight(
            "kernel",
            (*self.kernel_size, input_shape[-1], width),
            s["kernel_initializer"],
            s["kernel_regularizer"],
            constraint=s["kernel_constraint"],
        )
        self.recurrent_kernel = self.add_weight(
            "recurrent_kernel",
            (*self.kernel_size, self.filters, width),
            s["recurrent_initializer"],
            s["recurrent_regularizer"],
            constraint=s["recurrent_constraint"],
        )
        self.bias = None
        if s["use_bias"]:
            self.bias = self.add_weight(
                "bias", (width,), self._bias_init(), s["bias_regularizer"], constraint=s["bias_constraint"]
            )

    def _bias_init(self):
        base = initializers.get(self.settings["bias_initializer"])
        if not self.settings["unit_forget_bias"]:
            return base

        def forget_bias_ones(shape, dtype):
            f = self.filters
            return concat([base((f,), dtype), ones((f,), dtype), base((2 * f,), dtype)], axis=0)

        return forget_bias_ones

    def project(self, frames):
        """The input convolution (and bias) of [n, *spatial, channels] frames."""
        y = _conv(frames, self.kernel, self.rank, self.strides, self.padding.upper(), self.dilation_rate)
        return y + self.bias if self.bias is not None else y

    def step(self, projected, h, c):
        z = projected + _conv(h, self.recurrent_kernel, self.rank, (1,) * self.rank, "SAME", (1,) * self.rank)
        zi, zf, zc, zo = split(z, 4, axis=-1)
        act, gate = self.activation, self.recurrent_activation
        c = gate(zf) * c + gate(zi) * act(zc)
        return gate(zo) * act(c), c


_CELL_SETTINGS = (
    "activation",
    "recurrent_activation",
    "use_bias",
    "kernel_initializer",
    "recurrent_initializer",
    "bias_initializer",
    "unit_forget_bias",
    "kernel_regularizer",
    "recurrent_regularizer",
    "bias_regularizer",
    "kernel_constraint",
    "recurrent_constraint",
    "bias_constraint",
)


class _ConvLSTM(KeptStates, Layer):
    rank = 2

    def __init__(
        self,
        filters: int,
        kernel_size,
        strides=1,
        padding: str = "valid",
        data_format=None,
        dilation_rate=1,
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        unit_forget_bias: bool = True,
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
        seed=None,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        stateful: bool = False,
        unroll: bool = False,
        zero_output_for_mask: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        filters = as_int(self.name, "filters", filters, low=1)
        kernel_size = ints(self.name, "kernel_size", kernel_size, self.rank)
        strides = ints(self.name, "strides", strides, self.rank)
        padding = padding_mode(self.name, padding)
        dilation_rate = ints(self.name, "dilation_rate", dilation_rate, self.rank)
        if max(strides) > 1 and max(dilation_rate) > 1:
            raise ValueError(
                f"{self.name}: strides > 1 cannot be combined with dilation_rate > 1, "
                f"got strides={strides} and dilation_rate={dilation_rate}"
            )
        for label, rate in (("dropout", dropout), ("recurrent_dropout", recurrent_dropout)):
            if rate:
                raise NotImplementedError(f"{self.name}: {label}={rate!r} is not supported (only 0.0)")
        self.data_format = data_format_of(self.name, data_format)
        self.dropout, self.recurrent_dropout, self.seed = 0.0, 0.0, seed
        self._init_kept_states(stateful)
        self.return_sequences = bool(return_sequences)
        self.return_state = bool(return_state)
        self.go_backwards = bool(go_backwards)
        self.unroll = bool(unroll)  # the steps are always unrolled
        self.zero_output_for_mask = bool(zero_output_for_mask)
        self.cell = _ConvLSTMCell(
            self.rank,
            filters,
            kernel_size,
            strides,
            padding,
            dilation_rate,
            activation=activation,
            recurrent_activation=recurrent_activation,
            use_bias=bool(use_bias),
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            unit_forget_bias=bool(unit_forget_bias),
            kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint,
            name=f"{self.name}/conv_lstm_cell",
            trainable=self.trainable,
            dtype=self.dtype_policy.name,
        )
        self.input_spec = InputSpec(ndim=self.rank + 3)

    @property
    def filters(self) -> int:
        return self.cell.filters

    @property
    def kernel_size(self) -> tuple:
        return self.cell.kernel_size

    def _frames_last(self, inputs):
        """[batch, time, *spatial, channels] whatever the data format."""
        if self.data_format == "channels_last":
            return inputs
        return transpose(inputs, (0, 1, *range(3, self.rank + 3), 2))

    def _from_last(self, y, time_axis: bool):
        if self.data_format == "channels_last":
            return y
        lead = 2 if time_axis else 1
        return transpose(y, (*range(lead), len(y.shape) - 1, *range(lead, len(y.shape) - 1)))

    def _spatial(self, input_shape) -> tuple:
        shape = tuple(input_shape)
        return shape[2:-1] if self.data_format == "channels_last" else shape[3:]

    def build(self, input_shape):
        channel_axis = -1 if self.data_format == "channels_last" else 2
        channels = input_shape[channel_axis]
        if channels is None or None in self._spatial(input_shape):
            raise ValueError(f"{self.name}: the channel and spatial axes of the input must be known, got {input_shape}")
        self.cell.build((None, *self._spatial(input_shape), channels))
        self.input_spec = InputSpec(ndim=self.rank + 3, axes={channel_axis: channels})
        self._build_kept_states(input_shape)

    def _kept_state_shapes(self, input_shape) -> list[tuple]:
        frame = self.compute_output_shape((input_shape[0], 1, *tuple(input_shape)[2:]))
        shape = frame[1] if self.return_state else frame
        return [tuple(shape)[:1] + tuple(shape)[-(self.rank + 1) :]] * 2

    def call(self, inputs, mask=None, training=None, initial_state=None):
        x = self._frames_last(inputs)
        batch, steps, *spatial, channels = x.shape
        if steps is None or steps == 0:
            raise ValueError(f"{self.name}: the time axis must be known and non-empty, got shape {inputs.shape}")
        initial_state = self._kept_initial_states(batch, initial_state)
        frames = reshape(x, (-1, *spatial, channels))
        projected = self.cell.project(frames)
        projected = reshape(projected, (-1, steps, *projected.shape[1:]))
        xs = split(projected, steps, axis=1)
        h, c = self._initial_states(initial_state, xs[0])
        masks = self._step_masks(mask, batch, steps)
        order = range(steps - 1, -1, -1) if self.go_backwards else range(steps)
        outputs = []
        for t in order:
            new_h, new_c = self.cell.step(reshape(xs[t], (-1, *xs[t].shape[2:])), h, c)
            if masks:
                new_h, new_c = where(masks[t], new_h, h), where(masks[t], new_c, c)
            h, c = new_h, new_c
            outputs.append(where(masks[t], h, zeros_like(h)) if masks and self.zero_output_for_mask else h)
        if self.return_sequences:
            result = self._from_last(stack(outputs, axis=1), True)
        else:  # the last output: zeros where the last step is masked with zero_output_for_mask, as Keras's
            result = self._from_last(outputs[-1], False)
        h, c = self._from_last(h, False), self._from_last(c, False)
        self._keep_states([h, c])
        return [result, h, c] if self.return_state else result

    def _initial_states(self, initial_state, first):
        zero = full_like(first[:, 0, ..., : self.cell.filters], 0.0)
        if initial_state is None:
            return zero, zero
        given = list(initial_state) if isinstance(initial_state, list | tuple) else [initial_state]
        given = [self._convert_input(s) for s in given]
        want = tuple(self._from_last(zero, False).shape)
        if len(given) != 2 or any(tuple(s.shape)[1:] != want[1:] for s in given):
            raise ValueError(
                f"{self.name}: initial_state must be 2 tensors [h, c] of shape {want}, "
                f"got {[tuple(s.shape) for s in given]}"
            )
        return [self._frames_last_state(s) for s in given]

    def _frames_last_state(self, state):
        if self.data_format == "channels_last":
            return state
        return transpose(state, (0, *range(2, self.rank + 2), 1))

    def _step_masks(self, mask, batch, steps: int) -> list:
        if mask is None:
            return []
        mask = as_tensor(mask, name=self.name)
        if len(mask.shape) != 2 or mask.shape[1] != steps:
            raise ValueError(f"{self.name}: mask must have shape (batch, {steps}), got {mask.shape}")
        if mask.dtype.kind != "b":
            mask = cast(mask, "bool")
        column = (1,) * (self.rank + 1)
        return [reshape(m, (-1, *column)) for m in split(mask, steps, axis=1)]

    def compute_output_shape(self, input_shape):  # the steps are unrolled: shapes come from the geometry
        batch, steps = input_shape[0], input_shape[1]
        cell = self.cell
        out = output_sizes(
            self.name, self._spatial(input_shape), cell.kernel_size, cell.strides, cell.padding, cell.dilation_rate
        )
        frame = (*out, cell.filters) if self.data_format == "channels_last" else (cell.filters, *out)
        output = (batch, steps, *frame) if self.return_sequences else (batch, *frame)
        return [output, (batch, *frame), (batch, *frame)] if self.return_state else output

    def compute_mask(self, inputs, mask=None):
        out = mask if self.return_sequences else None
        return [out, None, None] if self.return_state else out

    def get_config(self):
        cell = self.cell
        s = cell.settings
        return {
            **super().get_config(),
            "filters": cell.filters,
            "kernel_size": cell.kernel_size,
            "strides": cell.strides,
            "padding": cell.padding,
            "data_format": self.data_format,
            "dilation_rate": cell.dilation_rate,
            "activation": serialize_activation(cell.activation),
            "recurrent_activation": serialize_activation(cell.recurrent_activation),
            "use_bias": s["use_bias"],
            "kernel_initializer": serialize_initializer(s["kernel_initializer"]),
            "recurrent_initializer": serialize_initializer(s["recurrent_initializer"]),
            "bias_initializer": serialize_initializer(s["bias_initializer"]),
            "unit_forget_bias": s["unit_forget_bias"],
            "kernel_regularizer": serialize_regularizer(s["kernel_regularizer"]),
            "recurrent_regularizer": serialize_regularizer(s["recurrent_regularizer"]),
            "bias_regularizer": serialize_regularizer(s["bias_regularizer"]),
            "activity_regularizer": serialize_regularizer(self.activity_regularizer),
            "kernel_constraint": serialize_constraint(s["kernel_constraint"]),
            "recurrent_constraint": serialize_constraint(s["recurrent_constraint"]),
            "bias_constraint": serialize_constraint(s["bias_constraint"]),
            "dropout": self.dropout,
            "recurrent_dropout": self.recurrent_dropout,
            "seed": self.seed,
            "return_sequences": self.return_sequences,
            "return_state": self.return_state,
            "go_backwards": self.go_backwards,
            "stateful": self.stateful,
            "unroll": self.unroll,
            "zero_output_for_mask": self.zero_output_for_mask,
        }


_ARGS = """
    Args:
        filters: the number of output channels (of h and c).
        kernel_size: the window of both convolutions ({n}).
        strides: the input convolution's step ({n}); the recurrent one has stride 1. Default 1.
        padding: "valid" or "same" (either case), of the input convolution; the recurrent one is "same".
        data_format: "channels_last" (the default, also None) or "channels_first".
        dilation_rate: the input convolution's tap spacing ({n}). Default 1.
        activation: of the candidate cell and the output. Default "tanh".
        recurrent_activation: of the gates. Default "sigmoid".
        use_bias: whether to add a bias [4 * filters].
        kernel_initializer: initializer of the input kernel. Default "glorot_uniform".
        recurrent_initializer: initializer of the recurrent kernel. Default "orthogonal".
        bias_initializer: initializer of the bias. Default "zeros".
        unit_forget_bias: start the forget gate's bias at one (added to bias_initializer's values).
        kernel_regularizer: regularizer of the input kernel (a name, a regularizer or None).
        recurrent_regularizer: regularizer of the recurrent kernel.
        bias_regularizer: regularizer of the bias.
        kernel_constraint: constraint of the input kernel (a name such as "max_norm", a constraint
            or None), applied after each optimizer update.
        recurrent_constraint: constraint of the recurrent kernel.
        bias_constraint: constraint of the bias.
        dropout: must be 0 (dropout of the inputs is not supported).
        recurrent_dropout: must be 0 (dropout of the states is not supported).
        seed: kept in the config (there is no dropout to seed).
        return_sequences: return h at every step instead of the last.
        return_state: also return the final states: a list [output, h, c].
        go_backwards: run over the time axis in reverse (outputs come in reversed order).
        stateful: keep each call's final [h, c] as the next call's initial states, in
            non-trainable variables made for the batch size the layer is built with (which must be
            known); `reset_state()` zeros them.
        unroll: kept in the config; the steps are always unrolled.
        zero_output_for_mask: output zeros at masked steps (by default a masked step repeats the
            previous output); without return_sequences, the output is zeros when the last step is
            masked, as in Keras.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    `call(inputs, mask=None, training=None, initial_state=None)`: `mask` is [batch, time]
    (False steps keep the previous states); `initial_state` is [h, c] in the output's layout.
"""


class ConvLSTM1D(_ConvLSTM):
    __doc__ = (
        """A convolutional LSTM over sequences of 1-D frames: [batch, time, steps, channels]
    in, [batch, out_steps, filters] out (or every step with return_sequences).
"""
        + _ARGS.format(n="an int or a tuple of one")
        + """
    >>> import tapeflow as tp
    >>> tp.layers.ConvLSTM1D(3, 2, return_sequences=True)(tp.ones((2, 4, 6, 2))).shape
    (2, 4, 5, 3)
    """
    )

    rank = 1


class ConvLSTM2D(_ConvLSTM):
    __doc__ = (
        """A convolutional LSTM over sequences of images: [batch, time, rows, cols, channels]
    in, [batch, out_rows, out_cols, filters] out (or every step with return_sequences).
"""
        + _ARGS.format(n="an int or a pair")
        + """
    >>> import tapeflow as tp
    >>> out, h, c = tp.layers.ConvLSTM2D(3, 3, return_state=True)(tp.ones((2, 4, 5, 5, 2)))
    >>> out.shape, c.shape
    ((2, 3, 3, 3), (2, 3, 3, 3))
    """
    )


class ConvLSTM3D(_ConvLSTM):
    __doc__ = (
        """A convolutional LSTM over sequences of volumes: [batch, time, d, h, w, channels]
    in, [batch, d', h', w', filters] out (or every step with return_sequences).
"""
        + _ARGS.format(n="an int or three")
        + """
    >>> import tapeflow as tp
    >>> tp.layers.ConvLSTM3D(2, 2, padding="same")(tp.ones((1, 3, 3, 3, 3, 1))).shape
    (1, 3, 3, 3, 2)
    """
    )

    rank = 3
