"""Recurrent layers: cells (one time step) and `RNN`, which runs a cell over a sequence.

SimpleRNN, LSTM and GRU are RNNs over their cells, with Keras' gate orders and
weight layouts: LSTM kernels are [input, 4 * units] in gate order i, f, c, o; GRU
kernels are [input, 3 * units] in order z, r, h, with reset_after=True by default
(bias [2, 3 * units]: input bias, then recurrent bias).

Inputs are [batch, time, features]. A `mask` of shape [batch, time] (True = real
step) makes masked steps carry the previous state and output forward, as Keras.
With `stateful=True` a layer starts each call from the final states of the previous one
(see `KeptStates`).

>>> import tapeflow as tp
>>> lstm = tp.layers.LSTM(8, return_sequences=True)
>>> lstm(tp.ones((2, 5, 3))).shape, [w.shape for w in lstm.weights]
((2, 5, 8), [(3, 32), (8, 32), (32,)])
"""

from __future__ import annotations

import numpy as np

from tapeflow import activations, initializers
from tapeflow.layers.base import (
    InputSpec,
    Layer,
    deserialize,
    serialize,
    serialize_constraint,
    serialize_initializer,
    serialize_regularizer,
    snake_case,
)
from tapeflow.layers.core import get_activation, serialize_activation
from tapeflow.ops import nn
from tapeflow.ops.array import concat, expand_dims, reshape, split, stack
from tapeflow.ops.creation import full_like, ones, zeros, zeros_like
from tapeflow.ops.math import cast, matmul, stop_gradient, where
from tapeflow.ops.nn.recurrent import gru_sequence, lstm_sequence
from tapeflow.ops.random import Generator, global_generator
from tapeflow.ops.registry import as_tensor, get_op
from tapeflow.ops.shapes import as_int
from tapeflow.tensor import Variable, eager_scope


# -------------------------------------------------------------------- cells
class _Cell(Layer):
    """One recurrent step. `project` applies the input kernel (and input bias) to any
    number of steps at once; `step` adds the recurrent part for one step and returns
    (output, new_states). `call(inputs, states)` is both, for a single step."""

    _gates = 1

    def __init__(
        self,
        units: int,
        activation="tanh",
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.kernel_constraint = kernel_constraint
        self.recurrent_constraint = recurrent_constraint
        self.bias_constraint = bias_constraint
        self.units = as_int(self.name, "units", units, low=1)
        self.dropout = _rate(self.name, "dropout", dropout)
        self.recurrent_dropout = _rate(self.name, "recurrent_dropout", recurrent_dropout)
        self.seed = seed
        # Without a seed, draw one from the global stream so that tp.random.seed() makes runs repeat.
        self.generator = Generator(seed if seed is not None else int(global_generator().numpy.integers(2**63)))
        self._sequence = None  # while a sequence runs: {"training": bool, mask kind: the mask drawn for it}
        self.activation = get_activation(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = kernel_initializer
        self.recurrent_initializer = recurrent_initializer
        self.bias_initializer = bias_initializer
        self.kernel_regularizer = kernel_regularizer
        self.recurrent_regularizer = recurrent_regularizer
        self.bias_regularizer = bias_regularizer

    @property
    def state_size(self) -> list[int]:
        return [self.units]

    def build(self, input_shape):
        input_dim = input_shape[-1]
        if input_dim is None:
            raise ValueError(f"{self.name}: the feature axis of the input must be known, got shape {input_shape}")
        width = self._gates * self.units
        self.kernel = self.add_weight(
            "kernel",
            (input_dim, width),
            self.kernel_initializer,
            self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.recurrent_kernel = self.add_weight(
            "recurrent_kernel",
            (self.units, width),
            self.recurrent_initializer,
            self.recurrent_regularizer,
            constraint=self.recurrent_constraint,
        )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                "bias", self._bias_shape(), self._bias_init(), self.bias_regularizer, constraint=self.bias_constraint
            )
        self.input_spec = InputSpec(min_ndim=2, axes={-1: input_dim})

    def _bias_shape(self) -> tuple:
        return (self._gates * self.units,)

    def _bias_init(self):
        return self.bias_initializer

    def begin_sequence(self, training) -> None:
        """Start a sequence: dropout masks drawn from here on hold for every step until
        `end_sequence` (one mask per sequence, as Keras's RNN cells keep them)."""
        self._sequence = {"training": bool(training)}

    def end_sequence(self) -> None:
        self._sequence = None

    def _dropout_mask(self, kind: str, like, rate: float):
        """The sequence's mask of 0 and 1 / (1 - rate) shaped as `like` ([batch, size]),
        or None outside training or at rate 0."""
        if self._sequence is None or not self._sequence["training"] or rate == 0.0:
            return None
        if kind not in self._sequence:
            self._sequence[kind] = nn.dropout(full_like(like, 1.0), rate, training=True, rng=self.generator)
        return self._sequence[kind]

    def _dropped_inputs(self, inputs):
        """The inputs ([batch, features] or [batch, time, features]) times the input mask."""
        mask = self._dropout_mask("inputs", inputs if inputs.ndim == 2 else inputs[:, 0, :], self.dropout)
        if mask is None:
            return inputs
        return inputs * (mask if inputs.ndim == 2 else expand_dims(mask, 1))

    def _recurrent(self, h):
        """The previous output as the recurrent matmuls read it: times the recurrent mask."""
        mask = self._dropout_mask("recurrent", h, self.recurrent_dropout)
        return h if mask is None else h * mask

    def project(self, inputs):
        y = matmul(self._dropped_inputs(inputs), self.kernel)
        return y + self.bias if self.bias is not None else y

    def step(self, projected, states):
        raise NotImplementedError

    def call(self, inputs, states, training=None):
        own = self._sequence is None  # called on its own, one step: masks for this call only
        if own:
            self.begin_sequence(training)
        try:
            return self.step(self.project(inputs), list(states))
        finally:
            if own:
                self.end_sequence()

    def compute_output_shape(self, input_shape):  # `call` also needs the states, which a shape does not give
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self):
        return {
            **super().get_config(),
            "units": self.units,
            "activation": serialize_activation(self.activation),
            "use_bias": self.use_bias,
            "kernel_initializer": serialize_initializer(self.kernel_initializer),
            "recurrent_initializer": serialize_initializer(self.recurrent_initializer),
            "bias_initializer": serialize_initializer(self.bias_initializer),
            "kernel_regularizer": serialize_regularizer(self.kernel_regularizer),
            "recurrent_regularizer": serialize_regularizer(self.recurrent_regularizer),
            "bias_regularizer": serialize_regularizer(self.bias_regularizer),
            "kernel_constraint": serialize_constraint(self.kernel_constraint),
            "recurrent_constraint": serialize_constraint(self.recurrent_constraint),
            "bias_constraint": serialize_constraint(self.bias_constraint),
            "dropout": self.dropout,
            "recurrent_dropout": self.recurrent_dropout,
            "seed": self.seed,
        }


def _rate(owner: str, argument: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < 1.0:
        raise ValueError(f"{owner}: {argument} must be a number in [0, 1), got {value!r}")
    return float(value)


class SimpleRNNCell(_Cell):
    """One step of a fully connected RNN: h = activation(x @ kernel + h @ recurrent_kernel + bias).
    `call(inputs, states)` returns (output, new_states).

    Args:
        units: the size of the output and of each state.
        activation: the output activation (a name or a callable; None is linear). Default "tanh".
        use_bias: whether the cell adds a bias.
        kernel_initializer: initializer of the input kernel [features, units] (a name or an
            initializer). Default "glorot_uniform".
        recurrent_initializer: initializer of the recurrent kernel [units, units]. Default "orthogonal".
        bias_initializer: initializer of the bias. Default "zeros".
        kernel_regularizer: regularizer of the input kernel (a name, a regularizer or None).
        recurrent_regularizer: regularizer of the recurrent kernel.
        bias_regularizer: regularizer of the bias.
        kernel_constraint: constraint of the input kernel, applied after each optimizer update.
        recurrent_constraint: constraint of the recurrent kernel.
        bias_constraint: constraint of the bias.
        dropout: the fraction of the inputs' features dropped while training (one mask per
            sequence, shared by the gates).
        recurrent_dropout: the fraction of the previous output dropped where the recurrent
            kernel reads it while training (one mask per sequence).
        seed: the seed of the dropout masks' random stream.
        **kwargs: the base layer's arguments: `name`, `trainable` and `dtype` (floating, "float32" by default).

    >>> import tapeflow as tp
    >>> cell = tp.layers.SimpleRNNCell(4)
    >>> out, states = cell(tp.ones((2, 3)), [tp.zeros((2, 4))])
    >>> out.shape, len(states)
    ((2, 4), 1)
    """

    def step(self, projected, states):
        h = self.activation(projected + matmul(self._recurrent(states[0]), self.recurrent_kernel))
        return h, [h]


class _GatedCell(_Cell):
    def __init__(self, units: int, activation, recurrent_activation, **kwargs):
        super().__init__(units, activation, **kwargs)
        self.recurrent_activation = get_activation(recurrent_activation)

    def get_config(self):
        return {**super().get_config(), "recurrent_activation": serialize_activation(self.recurrent_activation)}


class LSTMCell(_GatedCell):
    """Long short-term memory step; gates i, f, c, o in that order along the kernel's
    columns. With unit_forget_bias (default) the forget-gate bias starts at one.
    `call(inputs, [h, c])` returns (output, [h, c]).

    Args:
        units: the size of the output and of each state.
        activation: the output activation (a name or a callable; None is linear). Default "tanh".
        recurrent_activation: the gates' activation. Default "sigmoid".
        use_bias: whether the cell adds a bias.
        kernel_initializer: initializer of the input kernel [features, 4 * units] (a name or an
            initializer). Default "glorot_uniform".
        recurrent_initializer: initializer of the recurrent kernel [units, 4 * units]. Default "orthogonal".
        bias_initializer: initializer of the bias. Default "zeros".
        unit_forget_bias: start the forget gate's bias at one (added to bias_initializer's values).
        kernel_regularizer: regularizer of the input kernel (a name, a regularizer or None).
        recurrent_regularizer: regularizer of the recurrent kernel.
        bias_regularizer: regularizer of the bias.
        kernel_constraint: constraint of the input kernel, applied after each optimizer update.
        recurrent_constraint: constraint of the recurrent kernel.
        bias_constraint: constraint of the bias.
        dropout: the fraction of the inputs' features dropped while training (one mask per
            sequence, shared by the gates).
        recurrent_dropout: the fraction of the previous output dropped where the recurrent
            kernel reads it while training (one mask per sequence).
        seed: the seed of the dropout masks' random stream.
        **kwargs: the base layer's arguments: `name`, `trainable` and `dtype` (floating, "float32" by default).

    >>> import tapeflow as tp
    >>> cell = tp.layers.LSTMCell(4)
    >>> out, (h, c) = cell(tp.ones((2, 3)), [tp.zeros((2, 4)), tp.zeros((2, 4))])
    >>> cell.bias.numpy().tolist()[4:8]
    [1.0, 1.0, 1.0, 1.0]
    """

    _gates = 4

    def __init__(
        self,
        units: int,
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
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(
            units,
            activation,
            recurrent_activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint,
            dropout=dropout,
            recurrent_dropout=recurrent_dropout,
            seed=seed,
            **kwargs,
        )
        self.unit_forget_bias = bool(unit_forget_bias)

    @property
    def state_size(self) -> list[int]:
        return [self.units, self.units]

    def _bias_init(self):
        if not self.unit_forget_bias:
            return self.bias_initializer
        base = initializers.get(self.bias_initializer)

        def forget_bias_ones(shape, dtype):
            u = self.units
            return concat([base((u,), dtype), ones((u,), dtype), base((2 * u,), dtype)], axis=0)

        return forget_bias_ones

    def step(self, projected, states):
        h, c = states
        z = projected + matmul(self._recurrent(h), self.recurrent_kernel)
        zi, zf, zc, zo = split(z, 4, axis=-1)
        act, gate = self.activation, self.recurrent_activation
        c = gate(zf) * c + gate(zi) * act(zc)
        h = gate(zo) * act(c)
        return h, [h, c]

    def get_config(self):
        return {**super().get_config(), "unit_forget_bias": self.unit_forget_bias}


class GRUCell(_GatedCell):
    """Gated recurrent unit step; gates z (update), r (reset), h (candidate) in that order.

    reset_after=True (the Keras and cuDNN form) applies the reset gate after the
    recurrent matmul and keeps separate input and recurrent biases: bias is
    [2, 3 * units]. reset_after=False applies it before, with one bias [3 * units].
    `call(inputs, [h])` returns (output, [h]).

    Args:
        units: the size of the output and of each state.
        activation: the output activation (a name or a callable; None is linear). Default "tanh".
        recurrent_activation: the gates' activation. Default "sigmoid".
        use_bias: whether the cell adds a bias.
        kernel_initializer: initializer of the input kernel [features, 3 * units] (a name or an
            initializer). Default "glorot_uniform".
        recurrent_initializer: initializer of the recurrent kernel [units, 3 * units]. Default "orthogonal".
        bias_initializer: initializer of the bias. Default "zeros".
        kernel_regularizer: regularizer of the input kernel (a name, a regularizer or None).
        recurrent_regularizer: regularizer of the recurrent kernel.
        bias_regularizer: regularizer of the bias.
        kernel_constraint: constraint of the input kernel, applied after each optimizer update.
        recurrent_constraint: constraint of the recurrent kernel.
        bias_constraint: constraint of the bias.
        dropout: the fraction of the inputs' features dropped while training (one mask per
            sequence, shared by the gates).
        recurrent_dropout: the fraction of the previous output dropped where the recurrent
            kernel reads it while training (one mask per sequence).
        seed: the seed of the dropout masks' random stream.
        reset_after: apply the reset gate after the recurrent matmul (Keras' and cuDNN's form, with
            separate input and recurrent biases, bias [2, 3 * units]); False applies it before (bias
            [3 * units]).
        **kwargs: the base layer's arguments: `name`, `trainable` and `dtype` (floating, "float32" by default).

    >>> import tapeflow as tp
    >>> cell = tp.layers.GRUCell(4)
    >>> out, _ = cell(tp.ones((2, 3)), [tp.zeros((2, 4))])
    >>> out.shape, cell.bias.shape
    ((2, 4), (2, 12))
    """

    _gates = 3

    def __init__(
        self,
        units: int,
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
        reset_after: bool = True,
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(
            units,
            activation,
            recurrent_activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint,
            dropout=dropout,
            recurrent_dropout=recurrent_dropout,
            seed=seed,
            **kwargs,
        )
        self.reset_after = bool(reset_after)

    def _bias_shape(self) -> tuple:
        return (2, 3 * self.units) if self.reset_after else (3 * self.units,)

    def project(self, inputs):
        y = matmul(self._dropped_inputs(inputs), self.kernel)
        if self.bias is None:
            return y
        return y + (self.bias[0] if self.reset_after else self.bias)

    def step(self, projected, states):
        h = states[0]
        xz, xr, xh = split(projected, 3, axis=-1)
        gate = self.recurrent_activation
        read = self._recurrent(h)
        if self.reset_after:
            rec = matmul(read, self.recurrent_kernel)
            if self.bias is not None:
                rec = rec + self.bias[1]
            rz, rr, rh = split(rec, 3, axis=-1)
            z, r = gate(xz + rz), gate(xr + rr)
            candidate = self.activation(xh + r * rh)
        else:
            kernel_zr, kernel_h = split(self.recurrent_kernel, [2 * self.units, self.units], axis=-1)
            rz, rr = split(matmul(read, kernel_zr), 2, axis=-1)
            z, r = gate(xz + rz), gate(xr + rr)
            candidate = self.activation(xh + matmul(r * read, kernel_h))
        h = z * h + (1.0 - z) * candidate
        return h, [h]

    def get_config(self):
        return {**super().get_config(), "reset_after": self.reset_after}


def _state_sizes(cell) -> list[int]:
    size = cell.state_size
    return list(size) if isinstance(size, list | tuple) else [size]


def _output_size(cell) -> int:
    size = getattr(cell, "output_size", None)
    return size if size is not None else _state_sizes(cell)[0]


class StackedRNNCells(Layer):
    """Several cells run one after another within each step: each cell's output is the
    next one's input. Its `state_size` is the cells' state sizes in one flat list, and
    `call(inputs, states)` takes and returns the states in that order.

    Args:
        cells: the cells, first to last (each a Layer with `state_size` and
            `call(inputs, states) -> (output, new_states)`).
        **kwargs: the base layer's arguments: `name`, `trainable` and `dtype` (floating, "float32" by default).

    >>> import tapeflow as tp
    >>> cells = tp.layers.StackedRNNCells([tp.layers.LSTMCell(4), tp.layers.GRUCell(3)])
    >>> cells.state_size, tp.layers.RNN(cells)(tp.ones((2, 5, 6))).shape
    ([4, 4, 3], (2, 3))
    """

    def __init__(self, cells, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(cells, list | tuple) or not cells:
            raise ValueError(f"{self.name}: cells must be a non-empty list of cells, got {cells!r}")
        for cell in cells:
            if not (isinstance(cell, Layer) and hasattr(cell, "state_size")):
                raise TypeError(f"{self.name}: every cell must be a Layer with a state_size, got {cell!r}")
        self.cells = list(cells)

    @property
    def state_size(self) -> list[int]:
        return [size for cell in self.cells for size in _state_sizes(cell)]

    @property
    def output_size(self) -> int:
        return _output_size(self.cells[-1])

    def build(self, input_shape):
        batch = input_shape[0]
        for cell in self.cells:
            if not cell.built:
                cell.build(tuple(input_shape))
            input_shape = (batch, _output_size(cell))

    def begin_sequence(self, training) -> None:
        for cell in self.cells:
            if hasattr(cell, "begin_sequence"):
                cell.begin_sequence(training)

    def end_sequence(self) -> None:
        for cell in self.cells:
            if hasattr(cell, "end_sequence"):
                cell.end_sequence()

    def call(self, inputs, states):
        states, new_states, start = list(states), [], 0
        want = len(self.state_size)
        if len(states) != want:
            raise ValueError(f"{self.name}: expected {want} states (sizes {self.state_size}), got {len(states)}")
        for cell in self.cells:
            count = len(_state_sizes(cell))
            inputs, cell_states = cell(inputs, states[start : start + count])
            new_states.extend(cell_states if isinstance(cell_states, list | tuple) else [cell_states])
            start += count
        return inputs, new_states

    def compute_output_shape(self, input_shape):  # `call` also needs the states, which a shape does not give
        return tuple(input_shape[:-1]) + (self.output_size,)

    def get_config(self):
        return {**super().get_config(), "cells": [serialize(cell) for cell in self.cells]}

    @classmethod
    def from_config(cls, config):
        return cls(**{**config, "cells": [deserialize(c) for c in config["cells"]]})


# ----------------------------------------------------------------- stateful
class KeptStates:
    """Keras's `stateful=True` for a recurrent layer: the final states of each call are
    kept in non-trainable variables (`states`, one per state, made at build time for the
    input's batch size) and are the next call's initial states. Assignments inside a
    frozen step run with it, so consecutive batches of `fit(shuffle=False)` carry state.
    The variables are not weights: `weights` and saved weights leave them out, as Keras's.

    A layer using it calls `_init_kept_states` in `__init__` and `_build_kept_states` in
    `build`, and defines `_kept_state_shapes(input_shape)` (the states' shapes, batch first).

    >>> import tapeflow as tp
    >>> lstm = tp.layers.LSTM(2, stateful=True)
    >>> first = lstm(tp.ones((1, 3, 1))).numpy()
    >>> bool((lstm(tp.ones((1, 3, 1))).numpy() != first).any()), [s.shape for s in lstm.states]
    (True, [(1, 2), (1, 2)])
    >>> lstm.reset_state()
    >>> bool((lstm(tp.ones((1, 3, 1))).numpy() == first).all())
    True
    """

    def _init_kept_states(self, stateful) -> None:
        self.stateful = bool(stateful)
        self.states = None  # the state variables, once a stateful layer is built

    def _kept_state_shapes(self, input_shape) -> list[tuple]:
        raise NotImplementedError

    def _build_kept_states(self, input_shape) -> None:
        if not self.stateful:
            return
        if self.states is not None:
            self.reset_state()
            return
        if input_shape[0] is None:
            raise ValueError(
                f"{self.name}: with stateful=True the batch size must be static (give it with "
                f"tp.Input(batch_shape=...)); found dynamic batch size: input shape {tuple(input_shape)}"
            )
        with eager_scope():  # also on a first call inside a freeze
            self.states = [
                Variable(
                    np.zeros(shape, self.dtype.np), trainable=False, name=f"{self.name}/rnn_state", dtype=self.dtype
                )
                for shape in self._kept_state_shapes(input_shape)
            ]

    def _kept_initial_states(self, batch, initial_state):
        """The initial states of a call: `initial_state` when given, else the kept states
        (for a stateful layer, whose batch size must be the one it was built for)."""
        if not self.stateful or self.states is None:
            return initial_state
        expected = self.states[0].shape[0]
        if batch is not None and batch != expected:
            raise ValueError(
                f"{self.name}: the layer is stateful, so the batch size of the input sequences must be the "
                f"batch size of its states: expected {expected}, received {batch}"
            )
        if initial_state is not None:
            return initial_state
        return [state.read_value() for state in self.states]

    def _keep_states(self, states) -> None:
        """Store a stateful call's final states (no gradient flows into the next call)."""
        if not self.stateful or self.states is None:
            return
        for variable, state in zip(self.states, states, strict=True):
            state = stop_gradient(state)
            variable.assign(state if state.dtype == variable.dtype else cast(state, variable.dtype))

    def reset_state(self) -> None:
        """Set the kept states of a stateful layer to zeros (nothing to do otherwise)."""
        for variable in self.states or ():
            variable.assign(zeros_like(variable.read_value()))

    def reset_states(self) -> None:
        """`reset_state` under its older name, which Keras 3 keeps."""
        self.reset_state()


# ---------------------------------------------------------------------- RNN
class RNN(KeptStates, Layer):
    """Run `cell` over the time axis of [batch, time, features] inputs.

    Returns the last output ([batch, units]), or every output ([batch, time, units])
    with return_sequences; with return_state, a list [output, *final_states].
    `call` takes `mask` ([batch, time] bools; False steps keep the previous state and
    output) and `initial_state` (a list of [batch, size] tensors, zeros by default).
    Any layer with `state_size` and `call(inputs, states) -> (output, new_states)`
    can be the cell.

    Args:
        cell: the cell run at each step (SimpleRNNCell, LSTMCell, GRUCell or your own), or a list
            of cells, which run stacked (see `StackedRNNCells`).
        return_sequences: return the output of every step ([batch, time, units]) instead of the last.
        return_state: also return the final states: a list [output, *states].
        go_backwards: run over the time axis in reverse (outputs come in reversed order).
        zero_output_for_mask: output zeros at masked steps with return_sequences (by default a
            masked step repeats the previous output).
        unroll: accepted for Keras's sake: the steps are always unrolled.
        stateful: keep each call's final states (per sample) as the next call's initial states,
            in non-trainable variables made for the batch size the layer is built with (which
            must be known); `reset_state()` zeros them (see `KeptStates`).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (as the first layer of a Sequential).

    >>> import tapeflow as tp
    >>> rnn = tp.layers.RNN(tp.layers.GRUCell(4), return_state=True)
    >>> out, h = rnn(tp.ones((2, 5, 3)))
    >>> out.shape, h.shape
    ((2, 4), (2, 4))
    """

    def __init__(
        self,
        cell,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        stateful: bool = False,
        unroll: bool = False,
        zero_output_for_mask: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if isinstance(cell, list | tuple):
            cell = StackedRNNCells(cell, dtype=self.dtype_policy.name)
        if cell is not None and not (hasattr(cell, "state_size") and isinstance(cell, Layer)):
            raise TypeError(f"{self.name}: cell must be a Layer with a state_size, got {cell!r}")
        self.cell = cell
        self.return_sequences = bool(return_sequences)
        self.return_state = bool(return_state)
        self.go_backwards = bool(go_backwards)
        self._init_kept_states(stateful)
        self.unroll = bool(unroll)  # the steps are always unrolled when frozen: accepted either way
        self.zero_output_for_mask = bool(zero_output_for_mask)
        self.input_spec = InputSpec(ndim=3)

    @property
    def _state_sizes(self) -> list[int]:
        return _state_sizes(self.cell)

    @property
    def _output_size(self) -> int:
        return _output_size(self.cell)

    def build(self, input_shape):
        features = input_shape[-1]
        if features is None:
            raise ValueError(f"{self.name}: the feature axis of the input must be known, got shape {input_shape}")
        if not self.cell.built:
            self.cell.build((input_shape[0], features))
        self.input_spec = InputSpec(ndim=3, axes={-1: features})
        self._build_kept_states(input_shape)

    def _kept_state_shapes(self, input_shape) -> list[tuple]:
        return [(input_shape[0], size) for size in self._state_sizes]

    def call(self, inputs, mask=None, training=None, initial_state=None):
        batch, steps = inputs.shape[0], inputs.shape[1]
        if steps == 0:
            raise ValueError(f"{self.name}: the input has no time steps (shape {inputs.shape})")
        initial_state = self._kept_initial_states(batch, initial_state)
        states = self._initial_states(batch, initial_state, inputs)
        begin = getattr(self.cell, "begin_sequence", None)
        if begin is None:
            return self._run(inputs, mask, states)
        begin(training)
        try:
            return self._run(inputs, mask, states)
        finally:
            self.cell.end_sequence()

    def _run(self, inputs, mask, states):
        """The layer's output for the sequence from `states` (keeping the final states when stateful)."""
        result, states = self._sequence(inputs, mask, states)
        self._keep_states(states)
        return [result, *states] if self.return_state else result

    def _sequence(self, inputs, mask, states) -> tuple:
        """(the outputs, every step's or the last one's; the final states), step by step."""
        batch, steps = inputs.shape[0], inputs.shape[1]
        project = getattr(self.cell, "project", None)
        if project is not None:
            xs, step = split(project(inputs), steps, axis=1), self.cell.step
        else:  # a plain Keras-style cell: call it once per step
            xs, step = split(inputs, steps, axis=1), self.cell
        masks = self._step_masks(mask, batch, steps)
        order = range(steps - 1, -1, -1) if self.go_backwards else range(steps)
        output, outputs = zeros((batch, self._output_size), self.dtype.name) if masks else None, []
        for t in order:
            x_t = reshape(xs[t], (batch, xs[t].shape[-1]))
            new_output, new_states = step(x_t, states)
            if not isinstance(new_states, list | tuple):  # a cell with one state may return it bare
                new_states = [new_states]
            if masks:
                keep = masks[t]
                new_output = where(keep, new_output, output)
                new_states = [where(keep, n, o) for n, o in zip(new_states, states, strict=True)]
            output, states = new_output, list(new_states)
            outputs.append(
                where(masks[t], output, zeros_like(output)) if masks and self.zero_output_for_mask else output
            )
        # the last step's output, zeros where it is masked under zero_output_for_mask (as Keras)
        result = stack(outputs, axis=1) if self.return_sequences else outputs[-1]
        return result, states

    def _initial_states(self, batch: int, initial_state, inputs=None) -> list:
        sizes = self._state_sizes
        if initial_state is None and batch is None:  # frozen with a dynamic batch: zeros shaped from the input
            column = full_like(inputs[:, 0, :1], 0.0)
            return [column + zeros((1, s), self.dtype.name) for s in sizes]
        if initial_state is None:
            return [zeros((batch, s), self.dtype.name) for s in sizes]
        given = list(initial_state) if isinstance(initial_state, list | tuple) else [initial_state]
        given = [self._convert_input(s) for s in given]
        want = [(batch, s) for s in sizes]
        if [tuple(s.shape) for s in given] != want:
            raise ValueError(
                f"{self.name}: initial_state must be {len(want)} tensors of shapes {want}, "
                f"got {[tuple(s.shape) for s in given]}"
            )
        return given

    def _step_masks(self, mask, batch: int, steps: int) -> list:
        if mask is None:
            return []
        return split(self._checked_mask(mask, batch, steps), steps, axis=1)  # each [batch, 1]: broadcasts over units

    def _checked_mask(self, mask, batch: int, steps: int):
        """`mask` as a bool [batch, time] tensor, or a ValueError naming its shape."""
        mask = as_tensor(mask, name=self.name)
        if tuple(mask.shape) != (batch, steps):
            raise ValueError(f"{self.name}: mask must have shape {(batch, steps)} (batch, time), got {mask.shape}")
        return mask if mask.dtype.kind == "b" else cast(mask, "bool")

    def compute_output_shape(self, input_shape):  # `call` unrolls the steps: an unknown count cannot be traced
        batch, steps = input_shape[0], input_shape[1]
        units = self._output_size
        output = (batch, steps, units) if self.return_sequences else (batch, units)
        if self.return_state:
            return [output] + [(batch, s) for s in self._state_sizes]
        return output

    def compute_mask(self, inputs, mask=None):
        out = mask if self.return_sequences else None
        return [out] + [None] * len(self._state_sizes) if self.return_state else out

    def get_config(self):
        return {
            **super().get_config(),
            "cell": serialize(self.cell),
            "return_sequences": self.return_sequences,
            "return_state": self.return_state,
            "go_backwards": self.go_backwards,
            "stateful": self.stateful,
            "unroll": self.unroll,
            "zero_output_for_mask": self.zero_output_for_mask,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**{**config, "cell": deserialize(config["cell"])})


class _CellRNN(RNN):
    """An RNN that makes its own cell from keyword arguments and flattens the cell's
    configuration into its own (as Keras' SimpleRNN, LSTM and GRU do)."""

    _cell_class: type = _Cell

    def __init__(
        self,
        units: int,
        *,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        stateful: bool = False,
        unroll: bool = False,
        zero_output_for_mask: bool = False,
        name: str | None = None,
        trainable: bool = True,
        dtype=None,
        input_shape=None,
        activity_regularizer=None,
        use_cudnn="auto",
        **cell_kwargs,
    ):
        super().__init__(
            None,
            return_sequences,
            return_state,
            go_backwards,
            stateful,
            unroll,
            zero_output_for_mask,
            name=name,
            trainable=trainable,
            dtype=dtype,
            input_shape=input_shape,
            activity_regularizer=activity_regularizer,
        )
        if use_cudnn not in ("auto", False):
            raise NotImplementedError(
                f"{self.name}: use_cudnn={use_cudnn!r}: tapeflow has no cuDNN kernels; pass 'auto'"
            )
        cell_name = f"{self.name}/{snake_case(self._cell_class.__name__)}"
        self.cell = self._cell_class(
            units, name=cell_name, trainable=trainable, dtype=self.dtype_policy.name, **cell_kwargs
        )
        self.units = self.cell.units

    def get_config(self):
        config = super().get_config()
        cell_config = config.pop("cell")["config"]
        for key in ("name", "trainable", "dtype"):
            cell_config.pop(key)
        return {**config, **cell_config, "activity_regularizer": serialize_regularizer(self.activity_regularizer)}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    _sequence_op: str | None = None  # the op that runs a whole sequence of this layer's cell

    def _runs_as_one_op(self, mask) -> bool:
        """Whether the whole sequence can run as one `_sequence_op`: with Keras's default
        activations, no zeroed outputs under a mask, and no dropout while training (dropout
        is off in inference, where the op exports to ONNX as its LSTM or GRU)."""
        cell = self.cell
        sequence = cell._sequence
        return (
            self._sequence_op is not None
            and sequence is not None
            and type(cell) is self._cell_class
            and cell.activation is activations.tanh
            and cell.recurrent_activation is activations.sigmoid
            and not (sequence["training"] and (cell.dropout or cell.recurrent_dropout))
            and not (mask is not None and self.zero_output_for_mask)
        )

    def _runs_fused_here(self, mask, inputs) -> bool:
        """`_runs_as_one_op`, on a device whose backend runs the sequence op."""
        return self._runs_as_one_op(mask) and get_op(self._sequence_op).runs_on(inputs.device.family)


def _in_dtype_of(projected, value):
    """`value` in the dtype of the projected inputs (the compute dtype under a mixed precision policy)."""
    return value if value is None or value.dtype == projected.dtype else cast(value, projected.dtype)


class SimpleRNN(_CellRNN):
    """A fully connected RNN over [batch, time, features] inputs:
    h_t = activation(x_t @ kernel + h_{t-1} @ recurrent_kernel + bias).

    `call(inputs, mask=None, initial_state=None, training=None)`: see `RNN`.

    Args:
        units: the size of the output and of each state.
        activation: the output activation (a name or a callable; None is linear). Default "tanh".
        use_bias: whether the cell adds a bias.
        kernel_initializer: initializer of the input kernel [features, units] (a name or an
            initializer). Default "glorot_uniform".
        recurrent_initializer: initializer of the recurrent kernel [units, units]. Default "orthogonal".
        bias_initializer: initializer of the bias. Default "zeros".
        kernel_regularizer: regularizer of the input kernel (a name, a regularizer or None).
        recurrent_regularizer: regularizer of the recurrent kernel.
        bias_regularizer: regularizer of the bias.
        kernel_constraint: constraint of the input kernel, applied after each optimizer update.
        recurrent_constraint: constraint of the recurrent kernel.
        bias_constraint: constraint of the bias.
        dropout: the fraction of the inputs' features dropped while training (one mask per
            sequence, shared by the gates).
        recurrent_dropout: the fraction of the previous output dropped where the recurrent
            kernel reads it while training (one mask per sequence).
        seed: the seed of the dropout masks' random stream.
        return_sequences: return the output of every step ([batch, time, units]) instead of the last.
        return_state: also return the final states: a list [output, *states].
        go_backwards: run over the time axis in reverse (outputs come in reversed order).
        zero_output_for_mask: output zeros at masked steps with return_sequences (by default a
            masked step repeats the previous output).
        unroll: accepted for Keras's sake: the steps are always unrolled.
        stateful: keep each call's final states (per sample) as the next call's initial states,
            in non-trainable variables made for the batch size the layer is built with (which
            must be known); `reset_state()` zeros them (see `KeptStates`).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (as the first layer of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.SimpleRNN(4, activation="relu")(tp.ones((2, 5, 3))).shape
    (2, 4)
    """

    _cell_class = SimpleRNNCell

    def __init__(
        self,
        units: int,
        activation="tanh",
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
        seed: int | None = None,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        stateful: bool = False,
        unroll: bool = False,
        zero_output_for_mask: bool = False,
        **kwargs,
    ):
        super().__init__(
            units,
            return_sequences=return_sequences,
            return_state=return_state,
            go_backwards=go_backwards,
            activation=activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint,
            dropout=dropout,
            recurrent_dropout=recurrent_dropout,
            seed=seed,
            stateful=stateful,
            unroll=unroll,
            zero_output_for_mask=zero_output_for_mask,
            **kwargs,
        )


class LSTM(_CellRNN):
    """Long short-term memory over [batch, time, features] inputs; the states are [h, c]
    and the gates i, f, c, o lie in that order along the kernels' columns.

    `call(inputs, mask=None, initial_state=None, training=None)`: see `RNN`.

    Args:
        units: the size of the output and of each state.
        activation: the output activation (a name or a callable; None is linear). Default "tanh".
        recurrent_activation: the gates' activation. Default "sigmoid".
        use_bias: whether the cell adds a bias.
        kernel_initializer: initializer of the input kernel [features, 4 * units] (a name or an
            initializer). Default "glorot_uniform".
        recurrent_initializer: initializer of the recurrent kernel [units, 4 * units]. Default "orthogonal".
        bias_initializer: initializer of the bias. Default "zeros".
        unit_forget_bias: start the forget gate's bias at one (added to bias_initializer's values).
        kernel_regularizer: regularizer of the input kernel (a name, a regularizer or None).
        recurrent_regularizer: regularizer of the recurrent kernel.
        bias_regularizer: regularizer of the bias.
        kernel_constraint: constraint of the input kernel, applied after each optimizer update.
        recurrent_constraint: constraint of the recurrent kernel.
        bias_constraint: constraint of the bias.
        dropout: the fraction of the inputs' features dropped while training (one mask per
            sequence, shared by the gates).
        recurrent_dropout: the fraction of the previous output dropped where the recurrent
            kernel reads it while training (one mask per sequence).
        seed: the seed of the dropout masks' random stream.
        return_sequences: return the output of every step ([batch, time, units]) instead of the last.
        return_state: also return the final states: a list [output, *states].
        go_backwards: run over the time axis in reverse (outputs come in reversed order).
        zero_output_for_mask: output zeros at masked steps with return_sequences (by default a
            masked step repeats the previous output).
        unroll: accepted for Keras's sake: the steps are always unrolled.
        stateful: keep each call's final states (per sample) as the next call's initial states,
            in non-trainable variables made for the batch size the layer is built with (which
            must be known); `reset_state()` zeros them (see `KeptStates`).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (as the first layer of a Sequential).

    >>> import tapeflow as tp
    >>> out, h, c = tp.layers.LSTM(4, return_state=True)(tp.ones((2, 5, 3)))
    >>> bool((out.numpy() == h.numpy()).all()), c.shape
    (True, (2, 4))
    """

    _cell_class = LSTMCell
    _sequence_op = "lstm_sequence"

    def __init__(
        self,
        units: int,
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
        seed: int | None = None,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        stateful: bool = False,
        unroll: bool = False,
        zero_output_for_mask: bool = False,
        **kwargs,
    ):
        super().__init__(
            units,
            return_sequences=return_sequences,
            return_state=return_state,
            go_backwards=go_backwards,
            activation=activation,
            recurrent_activation=recurrent_activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            unit_forget_bias=unit_forget_bias,
            kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint,
            dropout=dropout,
            recurrent_dropout=recurrent_dropout,
            seed=seed,
            stateful=stateful,
            unroll=unroll,
            zero_output_for_mask=zero_output_for_mask,
            **kwargs,
        )

    def _sequence(self, inputs, mask, states) -> tuple:
        if not self._runs_fused_here(mask, inputs):
            return super()._sequence(inputs, mask, states)
        batch, steps = inputs.shape[0], inputs.shape[1]
        checked = None if mask is None else self._checked_mask(mask, batch, steps)
        projected = self.cell.project(inputs)
        h0, c0 = states
        ys, h, c = lstm_sequence(
            projected,
            _in_dtype_of(projected, h0),
            _in_dtype_of(projected, c0),
            _in_dtype_of(projected, self.cell.recurrent_kernel),
            checked,
            go_backwards=self.go_backwards,
        )
        # Unmasked, the last output is the final h; masked, it is the last step's output.
        result = ys if self.return_sequences else (h if mask is None else ys[:, -1, :])
        return result, [h, c]


class GRU(_CellRNN):
    """Gated recurrent unit over [batch, time, features] inputs (reset_after=True by
    default, as Keras); the gates z, r, h lie in that order along the kernels' columns.

    `call(inputs, mask=None, initial_state=None, training=None)`: see `RNN`.

    Args:
        units: the size of the output and of each state.
        activation: the output activation (a name or a callable; None is linear). Default "tanh".
        recurrent_activation: the gates' activation. Default "sigmoid".
        use_bias: whether the cell adds a bias.
        kernel_initializer: initializer of the input kernel [features, 3 * units] (a name or an
            initializer). Default "glorot_uniform".
        recurrent_initializer: initializer of the recurrent kernel [units, 3 * units]. Default "orthogonal".
        bias_initializer: initializer of the bias. Default "zeros".
        kernel_regularizer: regularizer of the input kernel (a name, a regularizer or None).
        recurrent_regularizer: regularizer of the recurrent kernel.
        bias_regularizer: regularizer of the bias.
        kernel_constraint: constraint of the input kernel, applied after each optimizer update.
        recurrent_constraint: constraint of the recurrent kernel.
        bias_constraint: constraint of the bias.
        dropout: the fraction of the inputs' features dropped while training (one mask per
            sequence, shared by the gates).
        recurrent_dropout: the fraction of the previous output dropped where the recurrent
            kernel reads it while training (one mask per sequence).
        seed: the seed of the dropout masks' random stream.
        reset_after: apply the reset gate after the recurrent matmul (Keras' and cuDNN's form, with
            separate input and recurrent biases, bias [2, 3 * units]); False applies it before (bias
            [3 * units]).
        return_sequences: return the output of every step ([batch, time, units]) instead of the last.
        return_state: also return the final states: a list [output, *states].
        go_backwards: run over the time axis in reverse (outputs come in reversed order).
        zero_output_for_mask: output zeros at masked steps with return_sequences (by default a
            masked step repeats the previous output).
        unroll: accepted for Keras's sake: the steps are always unrolled.
        stateful: keep each call's final states (per sample) as the next call's initial states,
            in non-trainable variables made for the batch size the layer is built with (which
            must be known); `reset_state()` zeros them (see `KeptStates`).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (as the first layer of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.GRU(4, return_sequences=True, go_backwards=True)(tp.ones((2, 5, 3))).shape
    (2, 5, 4)
    """

    _cell_class = GRUCell
    _sequence_op = "gru_sequence"

    def __init__(
        self,
        units: int,
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
        reset_after: bool = True,
        seed: int | None = None,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        stateful: bool = False,
        unroll: bool = False,
        zero_output_for_mask: bool = False,
        **kwargs,
    ):
        super().__init__(
            units,
            return_sequences=return_sequences,
            return_state=return_state,
            go_backwards=go_backwards,
            activation=activation,
            recurrent_activation=recurrent_activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer,
            reset_after=reset_after,
            kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint,
            dropout=dropout,
            recurrent_dropout=recurrent_dropout,
            seed=seed,
            stateful=stateful,
            unroll=unroll,
            zero_output_for_mask=zero_output_for_mask,
            **kwargs,
        )

    def _sequence(self, inputs, mask, states) -> tuple:
        if not self._runs_fused_here(mask, inputs):
            return super()._sequence(inputs, mask, states)
        batch, steps = inputs.shape[0], inputs.shape[1]
        checked = None if mask is None else self._checked_mask(mask, batch, steps)
        cell = self.cell
        projected = cell.project(inputs)
        recurrent_bias = cell.bias[1] if cell.bias is not None and cell.reset_after else None
        ys, h = gru_sequence(
            projected,
            _in_dtype_of(projected, states[0]),
            _in_dtype_of(projected, cell.recurrent_kernel),
            _in_dtype_of(projected, recurrent_bias),
            checked,
            reset_after=cell.reset_after,
            go_backwards=self.go_backwards,
        )
        # Unmasked, the last output is the final h; masked, it is the last step's output.
        result = ys if self.return_sequences else (h if mask is None else ys[:, -1, :])
        return result, [h]
