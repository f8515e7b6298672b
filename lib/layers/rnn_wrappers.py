"""Wrappers around recurrent layers: `Bidirectional` runs a copy of an RNN forwards and
another backwards over the same sequence and merges their outputs.

>>> import tapeflow as tp
>>> layer = tp.layers.Bidirectional(tp.layers.LSTM(4, return_sequences=True))
>>> layer(tp.ones((2, 5, 3))).shape, [w.shape for w in layer.weights][:3]
((2, 5, 8), [(3, 16), (4, 16), (16,)])
"""

from __future__ import annotations

from tapeflow.layers.base import Layer, deserialize, serialize
from tapeflow.ops.array import concat
from tapeflow.ops.core import expand_dims, zeros_like
from tapeflow.ops.math import cast, where
from tapeflow.ops.registry import as_tensor

_MERGE_MODES = ("concat", "sum", "mul", "ave", None)


def _renamed_copy(layer: Layer, prefix: str, **changes) -> Layer:
    """A fresh, unbuilt layer from `layer`'s config, named `prefix` + its name."""
    config = serialize(layer)
    config["config"] = {**config["config"], "name": prefix + layer.name.removeprefix(prefix), **changes}
    return deserialize(config)


class Bidirectional(Layer):
    """Run `layer` (an RNN such as LSTM, GRU or SimpleRNN) over the sequence forwards and
    a copy of it backwards, and merge the two outputs.

    The forward layer is a copy of `layer` named "forward_<name>", the backward one a
    copy with go_backwards=True named "backward_<name>" (or `backward_layer`). With
    return_sequences, the backward outputs are put back in time order before merging.
    The weights are the forward layer's, then the backward layer's. With return_state,
    the result is [output, *forward_states, *backward_states] (merge_mode=None:
    [forward_output, backward_output, *states]). `call` takes `mask`, `training` and
    `initial_state` (the forward states, then the backward states). A stateful `layer`
    makes both copies stateful: `states` and `reset_state()` cover the two.

    Args:
        layer: the recurrent layer to run in both directions (it is copied, not used).
        merge_mode: how to merge the two outputs: "concat" (along the last axis), "sum", "mul",
            "ave", or None (return both in a list).
        weights: initial weights (forward layer's, then backward layer's), set when the layer is built.
        backward_layer: the layer to run backwards (it must have go_backwards=True and the same
            return_sequences and return_state as `layer`); a copy of `layer` by default.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (as the first layer of a Sequential).

    >>> import tapeflow as tp
    >>> layer = tp.layers.Bidirectional(tp.layers.GRU(3), merge_mode="sum")
    >>> layer(tp.ones((2, 4, 5))).shape, layer.backward_layer.go_backwards
    ((2, 3), True)
    """

    def __init__(self, layer, merge_mode="concat", weights=None, backward_layer=None, **kwargs):
        super().__init__(**kwargs)
        self._init_arguments = ((), {})  # hold only the copies, so the weights are forward's then backward's
        for what, value in (("layer", layer), ("backward_layer", backward_layer)):
            if value is not None and not isinstance(value, Layer):
                raise TypeError(f"{self.name}: {what} must be a tp.layers.Layer, got {value!r}")
            if value is not None and not hasattr(value, "go_backwards"):
                raise TypeError(f"{self.name}: {what} must be a recurrent layer (with go_backwards), got {value!r}")
        if layer is None:
            raise TypeError(f"{self.name}: layer must be a tp.layers.Layer, got None")
        if merge_mode not in _MERGE_MODES:
            raise ValueError(f"{self.name}: merge_mode must be one of {list(_MERGE_MODES)}, got {merge_mode!r}")
        self.forward_layer = _renamed_copy(layer, "forward_")
        if backward_layer is None:
            backward_layer = _renamed_copy(layer, "backward_", go_backwards=True)
        self.backward_layer = backward_layer
        self._check_pair()
        self.merge_mode = merge_mode
        self.return_sequences = bool(layer.return_sequences)
        self.return_state = bool(layer.return_state)
        self.stateful = bool(getattr(layer, "stateful", False))
        self._initial_weights = list(weights) if weights is not None else None
        self.input_spec = layer.input_spec

    def _check_pair(self) -> None:
        forward, backward = self.forward_layer, self.backward_layer
        if forward.go_backwards == backward.go_backwards:
            raise ValueError(
                f"{self.name}: the forward and backward layers must differ in go_backwards, "
                f"both have go_backwards={forward.go_backwards}"
            )
        for attr in ("return_sequences", "return_state", "stateful"):
            if getattr(forward, attr, False) != getattr(backward, attr, False):
                raise ValueError(
                    f"{self.name}: the forward and backward layers must have the same {attr}, got "
                    f"{getattr(forward, attr, False)} (forward) and {getattr(backward, attr, False)} (backward)"
                )

    def build(self, input_shape):
        for layer in (self.forward_layer, self.backward_layer):
            if not layer.built:
                layer.build(input_shape)
        if self._initial_weights is not None:
            weights, self._initial_weights = self._initial_weights, None
            self.set_weights(weights)

    def call(self, inputs, mask=None, training=None, initial_state=None):
        forward_state = backward_state = None
        if initial_state is not None:
            states = list(initial_state) if isinstance(initial_state, list | tuple) else [initial_state]
            if len(states) % 2:
                raise ValueError(
                    f"{self.name}: initial_state must hold the forward states then the backward states "
                    f"(an even count), got {len(states)} tensors"
                )
            forward_state, backward_state = states[: len(states) // 2], states[len(states) // 2 :]
        y = self.forward_layer(inputs, mask=mask, training=training, initial_state=forward_state)
        y_rev = self.backward_layer(inputs, mask=mask, training=training, initial_state=backward_state)
        states = []
        if self.return_state:
            states = [*y[1:], *y_rev[1:]]
            y, y_rev = y[0], y_rev[0]
        if self.return_sequences:
            y_rev = y_rev[:, ::-1]
            if mask is not None:  # as Keras: masked steps output zeros in both directions
                keep = expand_dims(cast(as_tensor(mask, name=self.name), "bool"), -1)
                y, y_rev = where(keep, y, zeros_like(y)), where(keep, y_rev, zeros_like(y_rev))
        output = self._merge(y, y_rev)
        if not self.return_state:
            return output
        return [*output, *states] if self.merge_mode is None else [output, *states]

    @property
    def states(self):
        """The kept states of a stateful pair: the forward layer's, then the backward layer's
        (None until both are built, or when the layers are not stateful)."""
        forward, backward = getattr(self.forward_layer, "states", None), getattr(self.backward_layer, "states", None)
        return (*forward, *backward) if forward and backward else None

    def reset_state(self) -> None:
        """Zero the kept states of both stateful layers (an AttributeError when they are not stateful)."""
        if not self.stateful:
            raise AttributeError(f"{self.name}: reset_state needs stateful layers (stateful=True)")
        self.forward_layer.reset_state()
        self.backward_layer.reset_state()

    def reset_states(self) -> None:
        """`reset_state` under its older name, which Keras 3 keeps."""
        self.reset_state()

    def _merge(self, y, y_rev):
        if self.merge_mode == "concat":
            return concat([y, y_rev], axis=-1)
        if self.merge_mode == "sum":
            return y + y_rev
        if self.merge_mode == "ave":
            return (y + y_rev) * 0.5
        if self.merge_mode == "mul":
            return y * y_rev
        return [y, y_rev]

    def compute_output_shape(self, input_shape):
        shape = self.forward_layer.compute_output_shape(input_shape)
        states = []
        if self.return_state:
            shape, states = shape[0], list(shape[1:])
        shape = tuple(shape)
        if self.merge_mode == "concat":
            shape = shape[:-1] + (None if shape[-1] is None else 2 * shape[-1],)
        outputs = [shape, shape] if self.merge_mode is None else [shape]
        if not self.return_state and self.merge_mode is not None:
            return shape
        return outputs + states + states

    def compute_mask(self, inputs, mask=None):
        if isinstance(mask, list | tuple):
            mask = mask[0]
        out = mask if self.return_sequences else None
        outputs = [out, out] if self.merge_mode is None else [out]
        if not self.return_state:
            return outputs if self.merge_mode is None else out
        count = len(self.forward_layer.compute_output_shape((None, None, 1))) - 1
        return outputs + [None] * (2 * count)

    def get_config(self):
        return {
            **super().get_config(),
            "merge_mode": self.merge_mode,
            "layer": serialize(self.forward_layer),
            "backward_layer": serialize(self.backward_layer),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["layer"] = deserialize(config["layer"])
        if config.get("backward_layer") is not None:
            config["backward_layer"] = deserialize(config["backward_layer"])
        return cls(**config)
