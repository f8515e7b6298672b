"""EinsumDense: a dense layer whose product with the kernel is any two-operand einsum
equation ("ab,bc->ac", "abc,cde->abde", "...b,bc->...c"), plus an optional bias on
chosen output axes.

>>> import tapeflow as tp
>>> layer = tp.layers.EinsumDense("abc,cd->abd", output_shape=(None, 4), bias_axes="d")
>>> layer(tp.ones((2, 3, 5))).shape, layer.kernel.shape, layer.bias.shape
((2, 3, 4), (5, 4), (4,))
"""

from __future__ import annotations

import math
import re
import string

from tapeflow.layers.base import (
    InputSpec,
    Layer,
    serialize_constraint,
    serialize_initializer,
    serialize_regularizer,
)
from tapeflow.layers.core import get_activation, serialize_activation
from tapeflow.ops.array import reshape
from tapeflow.ops.core import transpose
from tapeflow.ops.math import matmul
from tapeflow.ops.reduce import sum as reduce_sum

_FORMS = (
    (re.compile(r"^([a-zA-Z]+),([a-zA-Z]+)->([a-zA-Z]+)$"), None),
    (re.compile(r"^\.\.\.([a-zA-Z]+),([a-zA-Z]+)->\.\.\.([a-zA-Z]+)$"), "left"),
    (re.compile(r"^([a-zA-Z]{2,})\.\.\.,([a-zA-Z]+)->([a-zA-Z]+)\.\.\.$"), "right"),
)


def _parse(layer: str, equation: str):
    """(input spec, kernel spec, output spec, where the ellipsis is: None, 'left' or 'right')."""
    for pattern, elided in _FORMS:
        match = pattern.match(equation.replace(" ", "")) if isinstance(equation, str) else None
        if match:
            return (*match.groups(), elided)
    raise ValueError(
        f"{layer}: invalid einsum equation {equation!r}; use the form 'X,Y->Z', '...X,Y->...Z' or 'X...,Y->Z...'"
    )


def expand_ellipsis(equation_parts, ndim: int):
    """The three specs with the ellipsis replaced by fresh letters for an input of rank `ndim`."""
    lhs, rhs, out, elided = equation_parts
    extra = ndim - len(lhs)
    if elided is None or extra <= 0:
        return lhs, rhs, out
    fresh = "".join(c for c in string.ascii_letters if c not in lhs + rhs + out)[:extra]
    if elided == "left":
        return fresh + lhs, rhs, fresh + out
    return lhs + fresh, rhs, out + fresh


def _sum_lonely(spec: str, operand, other: str, out: str):
    """Sum the axes whose letters neither the other operand nor the output has."""
    lonely = tuple(i for i, c in enumerate(spec) if c not in other and c not in out)
    if not lonely:
        return spec, operand
    return "".join(c for i, c in enumerate(spec) if i not in lonely), reduce_sum(operand, lonely)


def contract(lhs: str, rhs: str, out: str, x, kernel):
    """einsum(f"{lhs},{rhs}->{out}", x, kernel) by transposes, reshapes and one batched matmul."""
    lhs, x = _sum_lonely(lhs, x, rhs, out)
    rhs, kernel = _sum_lonely(rhs, kernel, lhs, out)
    sizes = {c: d for c, d in zip(rhs, kernel.shape, strict=True)}
    sizes.update({c: d for c, d in zip(lhs, x.shape, strict=True) if d is not None})
    batch = [c for c in lhs if c in rhs and c in out]
    summed = [c for c in lhs if c in rhs and c not in out]
    left = [c for c in lhs if c not in rhs]
    right = [c for c in rhs if c not in lhs]

    def size(letters):
        return math.prod(sizes[c] for c in letters)

    a = transpose(x, [lhs.index(c) for c in batch + left + summed])
    b = transpose(kernel, [rhs.index(c) for c in batch + summed + right])
    unknown = [c for c in left if c not in sizes]
    left_size = -1 if unknown else size(left)
    a = reshape(a, (size(batch), left_size, size(summed)))
    b = reshape(b, (size(batch), size(summed), size(right)))
    product = matmul(a, b)
    dims = [sizes.get(c, -1) for c in batch + left + right]
    result = reshape(product, tuple(dims))
    order = batch + left + right
    return transpose(result, [order.index(c) for c in out])


class EinsumDense(Layer):
    """activation(einsum(equation, inputs, kernel) + bias): a dense layer over any axes.

    Args:
        equation: a two-operand einsum equation "input,kernel->output" ("ab,bc->ac"); an
            ellipsis may stand for leading ("...b,bc->...c") or trailing axes.
        output_shape: the output's shape without the batch axis (an int for one axis); None
            for sizes taken from the input.
        activation: applied to the output (a name, a callable, or None).
        bias_axes: the output letters the bias spans ("d"), or None for no bias.
        kernel_initializer: initializer of the kernel. Default "glorot_uniform".
        bias_initializer: initializer of the bias. Default "zeros".
        kernel_regularizer: regularizer of the kernel.
        bias_regularizer: regularizer of the bias.
        kernel_constraint: constraint of the kernel (a name such as "max_norm", a constraint, or
            None), applied after each optimizer update.
        bias_constraint: constraint of the bias.
        lora_rank: not supported (None only).
        lora_alpha: not supported (None only).
        gptq_unpacked_column_size: not supported (None only; tapeflow does not quantize layers).
        quantization_config: not supported (None only; tapeflow does not quantize layers).
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`,
            `activity_regularizer`).

    >>> import tapeflow as tp
    >>> layer = tp.layers.EinsumDense("ab,bc->ac", output_shape=2, kernel_initializer="ones")
    >>> layer(tp.ones((1, 3))).numpy().tolist()
    [[3.0, 3.0]]
    """

    def __init__(
        self,
        equation,
        output_shape,
        activation=None,
        bias_axes=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        lora_rank=None,
        lora_alpha=None,
        gptq_unpacked_column_size=None,
        quantization_config=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for key, value in (
            ("gptq_unpacked_column_size", gptq_unpacked_column_size),
            ("quantization_config", quantization_config),
        ):
            if value is not None:
                raise NotImplementedError(
                    f"{self.name}: {key} is not supported (tapeflow does not quantize layers); pass None"
                )
        self._parts = _parse(self.name, equation)
        self.equation = equation
        self.partial_output_shape = (output_shape,) if isinstance(output_shape, int) else tuple(output_shape)
        self.activation = get_activation(activation)
        if bias_axes is not None and any(c not in self._parts[2] for c in bias_axes):
            raise ValueError(f"{self.name}: bias_axes {bias_axes!r} must be letters of the output {self._parts[2]!r}")
        self.bias_axes = bias_axes
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
        self.kernel_regularizer = kernel_regularizer
        self.bias_regularizer = bias_regularizer
        self.kernel_constraint = kernel_constraint
        self.bias_constraint = bias_constraint
        if lora_rank is not None or lora_alpha is not None:
            raise NotImplementedError(f"{self.name}: LoRA (lora_rank, lora_alpha) is not supported")

    def _full_output_shape(self, input_shape) -> tuple:
        lhs, _, out = expand_ellipsis(self._parts, len(input_shape))
        given = [input_shape[0], *self.partial_output_shape]
        if self._parts[3] == "left":
            given = [input_shape[0], *input_shape[1 : len(input_shape) - len(self._parts[0])], *given[1:]]
        elif self._parts[3] == "right":
            given = given + list(input_shape[len(self._parts[0]) :])
        if len(given) != len(out):
            raise ValueError(
                f"{self.name}: output_shape {self.partial_output_shape} does not fit the output {out!r} of "
                f"{self.equation!r} for inputs of shape {input_shape}"
            )
        for i, c in enumerate(out):
            if c in lhs:
                size = input_shape[lhs.index(c)]
                if given[i] is not None and size is not None and given[i] != size:
                    raise ValueError(
                        f"{self.name}: input and output shapes differ at the shared axis {c!r}: {size} and {given[i]}"
                    )
                given[i] = size if given[i] is None else given[i]
        return tuple(given)

    def build(self, input_shape):
        lhs, rhs, out = expand_ellipsis(self._parts, len(input_shape))
        if len(lhs) != len(input_shape):
            raise ValueError(f"{self.name}: the input spec {lhs!r} does not fit inputs of shape {input_shape}")
        full = self._full_output_shape(input_shape)
        kernel_shape = []
        for c in rhs:
            if c in out:
                kernel_shape.append(full[out.index(c)])
            elif c in lhs:
                kernel_shape.append(input_shape[lhs.index(c)])
            else:
                raise ValueError(f"{self.name}: kernel axis {c!r} appears in neither the input nor the output")
        if None in kernel_shape:
            raise ValueError(f"{self.name}: the kernel shape {kernel_shape} must be known from the input and output")
        self.kernel = self.add_weight(
            "kernel",
            tuple(kernel_shape),
            self.kernel_initializer,
            self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.bias = None
        if self.bias_axes is not None:
            spec = self._parts[2]
            first = min(spec.find(c) for c in self.bias_axes)
            offset = len(out) - len(spec) if self._parts[3] == "left" else 0
            bias_shape = [full[offset + i] if c in self.bias_axes else 1 for i, c in enumerate(spec) if i >= first]
            if self._parts[3] == "right":
                bias_shape += [1] * (len(out) - len(spec))
            self.bias = self.add_weight(
                "bias", tuple(bias_shape), self.bias_initializer, self.bias_regularizer, constraint=self.bias_constraint
            )
        self.input_spec = InputSpec(ndim=len(input_shape))

    def call(self, inputs):
        lhs, rhs, out = expand_ellipsis(self._parts, inputs.ndim)
        y = contract(lhs, rhs, out, inputs, self.kernel)
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y)

    def compute_output_shape(self, input_shape):
        return self._full_output_shape(tuple(input_shape))

    def get_config(self):
        return {
            **super().get_config(),
            "output_shape": self.partial_output_shape,
            "equation": self.equation,
            "activation": serialize_activation(self.activation),
            "bias_axes": self.bias_axes,
            "kernel_initializer": serialize_initializer(self.kernel_initializer),
            "bias_initializer": serialize_initializer(self.bias_initializer),
            "kernel_regularizer": serialize_regularizer(self.kernel_regularizer),
            "bias_regularizer": serialize_regularizer(self.bias_regularizer),
            "activity_regularizer": serialize_regularizer(self.activity_regularizer),
            "kernel_constraint": serialize_constraint(self.kernel_constraint),
            "bias_constraint": serialize_constraint(self.bias_constraint),
            "quantization_config": None,
        }
