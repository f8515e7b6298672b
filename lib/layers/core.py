"""Core layers: Dense, Activation, Dropout, Flatten, Reshape, and activations by name.

>>> import tapeflow as tp
>>> layer = tp.layers.Dense(4, activation="relu")
>>> layer(tp.ones((2, 3))).shape
(2, 4)
"""

from __future__ import annotations

import math

from tapeflow import activations, serialization
from tapeflow.layers.base import (
    InputSpec,
    Layer,
    serialize_constraint,
    serialize_initializer,
    serialize_regularizer,
)
from tapeflow.ops import nn
from tapeflow.ops.array import reshape, transpose
from tapeflow.ops.math import matmul
from tapeflow.ops.random import Generator, global_generator
from tapeflow.ops.shapes import as_int

# -------------------------------------------------------------- activations
linear = activations.linear
softmax = activations.softmax
ACTIVATIONS = activations.BUILTINS


def get_activation(identifier):
    """An activation function from a name, a callable, or None (linear), by `tp.activations.get`.

    >>> import tapeflow as tp
    >>> get_activation("relu")(tp.tensor([-1.0, 1.0])).numpy().tolist()
    [0.0, 1.0]
    """
    if identifier is not None and not isinstance(identifier, str | dict) and not callable(identifier):
        raise TypeError(f"activation must be a name or a callable, got {identifier!r}")
    return activations.get(identifier)


def serialize_activation(fn):
    """The name of a built-in activation, the registered name of a function registered with
    `tp.saving.register_serializable`, or the callable itself otherwise.

    >>> serialize_activation(get_activation(None))
    'linear'
    """
    for name, known in ACTIVATIONS.items():
        if fn is known:
            return name
    return serialization.registered_name(fn) or fn


def _check_positive(layer: str, label: str, value) -> int:
    return as_int(layer, label, value, low=1)


# -------------------------------------------------------------------- Dense
class Dense(Layer):
    """activation(inputs @ kernel + bias) on the last axis; the kernel is [in, units].

    Args:
        units: the size of the output's last axis.
        activation: applied to the output (a name such as "relu", a callable, or None for linear).
        use_bias: whether to add a bias.
        kernel_initializer: initializer of the kernel [in, units] (a name or an initializer).
            Default "glorot_uniform".
        bias_initializer: initializer of the bias [units]. Default "zeros".
        kernel_regularizer: regularizer of the kernel (a name such as "l2", a regularizer, or None).
        bias_regularizer: regularizer of the bias.
        kernel_constraint: constraint of the kernel (a name such as "max_norm", a constraint, or
            None), applied after each optimizer update.
        bias_constraint: constraint of the bias.
        quantization_config: None only (tapeflow does not quantize layers).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> dense = tp.layers.Dense(2, kernel_initializer="ones", use_bias=False)
    >>> dense(tp.ones((1, 3))).numpy().tolist()
    [[3.0, 3.0]]
    """

    supports_masking = True  # a mask passes through, as in Keras

    def __init__(
        self,
        units: int,
        activation=None,
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        quantization_config=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if quantization_config is not None:
            raise NotImplementedError(
                f"{self.name}: quantization_config is not supported (tapeflow does not quantize layers); pass None"
            )
        self.units = _check_positive(self.name, "units", units)
        self.activation = get_activation(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
        self.kernel_regularizer = kernel_regularizer
        self.bias_regularizer = bias_regularizer
        self.kernel_constraint = kernel_constraint
        self.bias_constraint = bias_constraint
        self.input_spec = InputSpec(min_ndim=2)

    def build(self, input_shape):
        in_dim = input_shape[-1]
        if in_dim is None:
            raise ValueError(f"{self.name}: the last axis of the input must be known, got shape {input_shape}")
        self.kernel = self.add_weight(
            "kernel",
            (in_dim, self.units),
            self.kernel_initializer,
            self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                "bias", (self.units,), self.bias_initializer, self.bias_regularizer, constraint=self.bias_constraint
            )
        self.input_spec = InputSpec(min_ndim=2, axes={-1: in_dim})

    def call(self, inputs):
        y = matmul(inputs, self.kernel)
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y)

    def get_config(self):
        return {
            **super().get_config(),
            "units": self.units,
            "activation": serialize_activation(self.activation),
            "use_bias": self.use_bias,
            "kernel_initializer": serialize_initializer(self.kernel_initializer),
            "bias_initializer": serialize_initializer(self.bias_initializer),
            "kernel_regularizer": serialize_regularizer(self.kernel_regularizer),
            "bias_regularizer": serialize_regularizer(self.bias_regularizer),
            "kernel_constraint": serialize_constraint(self.kernel_constraint),
            "bias_constraint": serialize_constraint(self.bias_constraint),
            "quantization_config": None,
        }


# --------------------------------------------------------------- Activation
class Activation(Layer):
    """Apply an activation given by name or as a callable.

    Args:
        activation: a name ("relu", "sigmoid", "tanh", "softmax", "gelu", "elu", "leaky_relu",
            "softplus", "linear"), a registered function, or a callable.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.Activation("relu")(tp.tensor([[-1.0, 2.0]])).numpy().tolist()
    [[0.0, 2.0]]
    """

    supports_masking = True

    def __init__(self, activation, **kwargs):
        super().__init__(**kwargs)
        self.activation = get_activation(activation)

    def call(self, inputs):
        return self.activation(inputs)

    def get_config(self):
        return {**super().get_config(), "activation": serialize_activation(self.activation)}


# ------------------------------------------------------------------ Dropout
class Dropout(Layer):
    """In training, zero each input with probability `rate` and scale the rest by 1/(1 - rate);
    at inference, pass inputs through. The layer owns its random stream (`seed`).

    Args:
        rate: the fraction of inputs to zero, in [0, 1).
        noise_shape: the shape of the keep/drop mask (None entries take the input's size), to drop
            whole rows or channels; None drops each value independently.
        seed: the seed of the layer's own random stream (None draws one from `tp.random`'s global
            stream).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> drop = tp.layers.Dropout(0.5, seed=0)
    >>> drop(tp.ones((2, 2))).numpy().tolist()
    [[1.0, 1.0], [1.0, 1.0]]
    >>> sorted(set(drop(tp.ones((100,)), training=True).numpy().tolist()))
    [0.0, 2.0]
    """

    supports_masking = True

    def __init__(self, rate: float, noise_shape=None, seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= float(rate) < 1.0:
            raise ValueError(f"{self.name}: rate must be in [0, 1), got {rate}")
        self.rate = float(rate)
        self.noise_shape = None if noise_shape is None else tuple(noise_shape)
        self.seed = seed
        # Without a seed, draw one from the global stream so that tp.random.seed() makes
        # dropout reproducible, as it does data shuffling.
        self.generator = Generator(seed if seed is not None else int(global_generator().numpy.integers(2**63)))

    def call(self, inputs, training=None):
        if not training or self.rate == 0.0:
            return inputs
        noise_shape = None
        if self.noise_shape is not None:
            if len(self.noise_shape) != inputs.ndim:
                raise ValueError(f"{self.name}: noise_shape {self.noise_shape} does not fit input shape {inputs.shape}")
            noise_shape = tuple(d if n is None else n for n, d in zip(self.noise_shape, inputs.shape, strict=True))
        return nn.dropout(inputs, self.rate, training=True, rng=self.generator, noise_shape=noise_shape)

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "noise_shape": self.noise_shape, "seed": self.seed}


# ---------------------------------------------------------- Flatten, Reshape
class Flatten(Layer):
    """Flatten every axis but the batch axis.

    Args:
        data_format: "channels_last" (the default; also None) or "channels_first", whose
            channels axis moves last before flattening, so that both orders give the same features.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.Flatten()(tp.ones((2, 3, 4))).shape
    (2, 12)
    """

    def __init__(self, data_format=None, **kwargs):
        super().__init__(**kwargs)
        if data_format not in (None, "channels_last", "channels_first"):
            raise ValueError(
                f"{self.name}: data_format must be 'channels_last' or 'channels_first', got {data_format!r}"
            )
        self.data_format = data_format or "channels_last"
        self.input_spec = InputSpec(min_ndim=1)

    def call(self, inputs):
        if self.data_format == "channels_first" and inputs.ndim > 2:
            inputs = transpose(inputs, (0, *range(2, inputs.ndim), 1))
        rest = inputs.shape[1:]  # a known size rather than -1, which reshape cannot resolve beside an unknown batch
        return reshape(inputs, (inputs.shape[0], -1 if None in rest else math.prod(rest)))

    def get_config(self):
        return {**super().get_config(), "data_format": self.data_format}


class Reshape(Layer):
    """Reshape every axis but the batch axis to `target_shape` (one entry may be -1).

    Args:
        target_shape: the new shape of each example (without the batch axis); one entry may be -1.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> tp.layers.Reshape((3, -1))(tp.ones((2, 12))).shape
    (2, 3, 4)
    """

    def __init__(self, target_shape, **kwargs):
        super().__init__(**kwargs)
        self.target_shape = tuple(as_int(self.name, "each dimension of target_shape", d, low=-1) for d in target_shape)
        if self.target_shape.count(-1) > 1 or any(d < -1 or d == 0 for d in self.target_shape):
            raise ValueError(
                f"{self.name}: target_shape must hold positive sizes and at most one -1, got {target_shape}"
            )

    def call(self, inputs):
        rest, target = inputs.shape[1:], self.target_shape
        if None not in rest:  # resolve the -1 here: with an unknown batch size, reshape cannot
            size, known = math.prod(rest), math.prod(d for d in target if d != -1)
            if (-1 in target and size % known) or (-1 not in target and size != known):
                raise ValueError(
                    f"{self.name}: cannot reshape input of shape {tuple(inputs.shape)} to target shape {target} "
                    f"({size} values per example)"
                )
            target = tuple(size // known if d == -1 else d for d in target)
        return reshape(inputs, (inputs.shape[0], *target))

    def get_config(self):
        return {**super().get_config(), "target_shape": self.target_shape}
