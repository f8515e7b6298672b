"""Layers that wrap another layer: the Wrapper base, TimeDistributed (the layer applied to
each time step) and SpectralNormalization (the layer's kernel divided by its largest
singular value in training).

>>> import tapeflow as tp
>>> tp.layers.TimeDistributed(tp.layers.Dense(2))(tp.ones((4, 3, 5))).shape
(4, 3, 2)
"""

from __future__ import annotations

from tapeflow import initializers
from tapeflow.layers.base import InputSpec, Layer, call_argument_names, deserialize, serialize
from tapeflow.ops.array import reshape
from tapeflow.ops.core import cast, transpose
from tapeflow.ops.math import matmul, minimum, rsqrt, square, stop_gradient, where
from tapeflow.ops.reduce import sum as reduce_sum


class Wrapper(Layer):
    """The base of layers that add behaviour around one `layer` (saved in the config as
    "layer"); building the wrapper builds the layer.

    Args:
        layer: the wrapped layer.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> class Twice(tp.layers.Wrapper):
    ...     def call(self, x):
    ...         return 2 * self.layer(x)
    >>> Twice(tp.layers.Dense(1, kernel_initializer="ones"))(tp.ones((1, 2))).numpy().tolist()
    [[4.0]]
    """

    def __init__(self, layer, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(layer, Layer):
            raise ValueError(f"{self.name}: layer must be a tapeflow Layer, got {layer!r}")
        self.layer = layer

    def build(self, input_shape=None):
        if not self.layer.built:
            self.layer.build(input_shape)

    def call(self, inputs, *args, **kwargs):
        return self.layer(inputs, *args, **kwargs)

    def get_config(self):
        return {**super().get_config(), "layer": serialize(self.layer)}

    @classmethod
    def from_config(cls, config: dict, custom_objects=None):
        config = dict(config)
        config["layer"] = deserialize(config["layer"], custom_objects)
        return cls(**config)


class TimeDistributed(Wrapper):
    """Apply `layer` to every slice along axis 1 of [batch, time, ...] inputs, with the same
    weights at each step.

    Args:
        layer: the layer applied to each [batch, ...] step.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> td = tp.layers.TimeDistributed(tp.layers.Dense(2, kernel_initializer="ones"))
    >>> td(tp.ones((1, 3, 4))).numpy()[0].tolist()
    [[4.0, 4.0], [4.0, 4.0], [4.0, 4.0]]
    """

    supports_masking = True

    def __init__(self, layer, **kwargs):
        super().__init__(layer, **kwargs)
        self.input_spec = InputSpec(min_ndim=3)

    def build(self, input_shape):
        if len(input_shape) < 3:
            raise ValueError(f"{self.name}: inputs must have at least 3 axes [batch, time, ...], got {input_shape}")
        if not self.layer.built:
            self.layer.build((None, *input_shape[2:]))

    def _step_shape(self, input_shape):
        return self.layer.compute_output_shape((None, *input_shape[2:]))

    def call(self, inputs, training=None, mask=None):
        shape = inputs.shape
        steps = shape[1]
        if steps is None:
            raise ValueError(f"{self.name}: the time axis of the inputs must be known, got shape {shape}")
        rest = shape[2:]
        if None in rest:
            raise ValueError(f"{self.name}: the axes after time must be known, got shape {shape}")
        flat = reshape(inputs, (-1, *rest))
        kwargs = {"training": training}
        if mask is not None and "mask" in call_argument_names(type(self.layer)):
            kwargs["mask"] = reshape(mask, (-1, *mask.shape[2:]))
        out = self.layer(flat, **kwargs)
        return reshape(out, (-1, steps, *out.shape[1:]))

    def compute_output_shape(self, input_shape):
        step = self._step_shape(input_shape)
        return (input_shape[0], input_shape[1], *step[1:])

    def compute_mask(self, inputs, mask=None):
        return mask


def _unit(x, epsilon: float = 1e-7):
    """x divided by its L2 norm over all entries (the norm floored at epsilon)."""
    return x * minimum(rsqrt(reduce_sum(square(x))), 1.0 / epsilon)


class SpectralNormalization(Wrapper):
    """In training, divide the wrapped layer's kernel (or embeddings) by an estimate of its
    largest singular value, found by power iteration with a kept vector `vector_u`; the
    normalized kernel is assigned to the layer, as in Keras.

    Args:
        layer: a layer with a `kernel` (Dense, Conv...) or `embeddings` (Embedding) weight.
        power_iterations: the power iteration steps per training call (> 0).
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> sn = tp.layers.SpectralNormalization(tp.layers.Dense(2, kernel_initializer="ones"), power_iterations=3)
    >>> y = sn(tp.ones((1, 2)), training=True)
    >>> [round(v, 4) for v in sn.layer.kernel.numpy().ravel().tolist()]
    [0.5, 0.5, 0.5, 0.5]
    """

    def __init__(self, layer, power_iterations: int = 1, **kwargs):
        super().__init__(layer, **kwargs)
        if isinstance(power_iterations, bool) or not isinstance(power_iterations, int) or power_iterations <= 0:
            raise ValueError(f"{self.name}: power_iterations must be an int > 0, got {power_iterations!r}")
        self.power_iterations = power_iterations

    def build(self, input_shape):
        super().build(input_shape)
        self.input_spec = InputSpec(min_ndim=1, axes={-1: input_shape[-1]})
        kernel = getattr(self.layer, "kernel", None)
        if kernel is None:
            kernel = getattr(self.layer, "embeddings", None)
        if kernel is None:
            raise ValueError(f"{self.name}: {type(self.layer).__name__} has no attribute 'kernel' nor 'embeddings'")
        self._kernel = kernel
        self.vector_u = self.add_weight(
            "vector_u",
            (1, kernel.shape[-1]),
            initializers.TruncatedNormal(stddev=0.02),
            trainable=False,
            dtype=kernel.dtype,
        )

    @property
    def weights(self):
        """Keras's order: the kernel first, then `vector_u`, then the layer's other weights."""
        weights = super().weights
        kernel = vars(self).get("_kernel")
        return weights if kernel is None else [kernel, *[w for w in weights if w is not kernel]]

    def normalized_weights(self):
        """The new `vector_u` and the kernel divided by its estimated largest singular value."""
        kernel = self._kernel
        matrix = reshape(kernel, (-1, kernel.shape[-1]))
        u = cast(self.vector_u, kernel.dtype)
        for _ in range(self.power_iterations):
            v = _unit(matmul(u, transpose(matrix)))
            u = _unit(matmul(v, matrix))
        u, v = stop_gradient(u), stop_gradient(v)
        sigma = matmul(matmul(v, matrix), transpose(u))
        return u, kernel / reshape(sigma, ())

    def call(self, inputs, training=False):
        if training:
            u, kernel = self.normalized_weights()
            nonzero = reduce_sum(square(self._kernel)) > 0.0  # an all-zero kernel is left as it is
            self.vector_u.assign(where(nonzero, u, self.vector_u))
            self._kernel.assign(where(nonzero, kernel, self._kernel))
        return cast(self.layer(inputs), inputs.dtype)

    def compute_output_shape(self, input_shape):
        return self.layer.compute_output_shape(input_shape)

    def get_config(self):
        return {**super().get_config(), "power_iterations": self.power_iterations}
