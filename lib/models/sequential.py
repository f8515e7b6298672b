"""Sequential: a model that stacks layers, each taking the previous one's output."""

from __future__ import annotations

import warnings

from tapeflow.graph.trace import TensorSpec
from tapeflow.layers.base import Input, InputLayer, Layer, SymbolicTensor, deserialize, serialize
from tapeflow.models.model import Model
from tapeflow.serialization import custom_object_scope


class Sequential(Model):
    """A plain stack of layers, each feeding the next.

    Declare the input first, with `tp.Input(shape)` (or a `tp.layers.InputLayer`, or
    `input_shape=` on the first layer), and the model is built at construction, as in
    Keras: its weights exist, so `summary()`, `get_weights()`, `count_params()` and
    `freeze()` work before any call. Without one, the layers are built on the first call
    (or by `build(input_shape)`). The input is not listed in `layers`.

    Args:
        layers: the layers, in order; the first may be a `tp.Input(...)` or an `InputLayer`.
        name: the model's name.
        trainable: whether its weights are trained.

    >>> import tapeflow as tp
    >>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)])
    >>> model.add(tp.layers.Activation("softmax"))
    >>> [type(layer).__name__ for layer in model.layers], model.count_params()
    (['Dense', 'Activation'], 8)
    """

    def __init__(self, layers=None, name: str | None = None, trainable: bool = True):
        super().__init__(name=name, trainable=trainable)
        self._init_arguments = ((), {})  # the layers live in `self.layers` only, so `pop` drops them
        self.layers: list[Layer] = []
        self._input_layer: InputLayer | None = None
        for layer in layers or []:
            self.add(layer)

    def add(self, layer: Layer) -> None:
        """Append a layer; a model with a declared input builds the new layer at once.

        The first entry may instead be a `tp.Input(...)` tensor or an `InputLayer`."""
        if isinstance(layer, SymbolicTensor) and layer.input_layer is not None:
            layer = layer.input_layer
        if isinstance(layer, InputLayer):
            if self.layers or self._input_layer is not None:
                raise ValueError(
                    f"Sequential.add: {self.name}: an input ({layer.name}) can only be the first entry; "
                    f"the model already has {[x.name for x in self.layers] or [self._input_layer.name]}"
                )
            self._input_layer = layer
            return
        if not isinstance(layer, Layer):
            raise ValueError(f"Sequential.add: expected a tp.layers.Layer or a tp.Input, got {type(layer).__name__}")
        if not self.layers and self._input_layer is None and layer._input_shape_arg is not None:
            self._input_layer = InputLayer(shape=layer._input_shape_arg)
        self.layers.append(layer)
        if self._input_layer is None:
            return
        io = vars(self).get("_symbolic_io")
        if (
            self.built
            and io is not None
            and io[0] is self._input_layer.output
            and vars(self).get("_symbolic_count") == len(self.layers) - 1
        ):
            self._symbolic_io = (io[0], layer(io[1]))  # only the new layer is called: add stays linear
            self._symbolic_count = len(self.layers)
        else:
            self.build(self._input_layer.batch_shape)

    def __call__(self, *args, **kwargs):
        if args:
            args = (self._one_input(args[0]), *args[1:])
        return super().__call__(*args, **kwargs)

    def _one_input(self, inputs):
        """The single input a stack takes: a one-element list or tuple is unwrapped, with a
        warning, and a dict is refused, as in Keras."""
        if isinstance(inputs, list | tuple) and len(inputs) == 1:
            warnings.warn(
                f"Sequential model '{self.name}' takes one input, got a list of one; using its element",
                UserWarning,
                stacklevel=3,
            )
            return inputs[0]
        if isinstance(inputs, dict):
            raise ValueError(
                f"Sequential model '{self.name}' takes a single tensor input (the structure it expects), "
                f"got a dict with keys {sorted(map(str, inputs))}"
            )
        return inputs

    def pop(self, rebuild: bool = True) -> Layer:
        """Remove the last layer and return it; with `rebuild` (the default), a model with a
        declared input is built again, so its symbolic output is the new last layer's.

        >>> import tapeflow as tp
        >>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2), tp.layers.Dense(4)])
        >>> model.pop().units, model.output.shape
        (4, (None, 2))
        """
        if not self.layers:
            raise ValueError(f"Sequential.pop: {self.name} has no layers to remove")
        layer = self.layers.pop()
        vars(self).pop("_symbolic_io", None)
        self.built = False
        if rebuild and self.layers and self._input_layer is not None:
            self.build(self._input_layer.batch_shape)
        return layer

    def build(self, input_shape=None):
        """Build every layer for inputs of `input_shape` (batch axis first) by a symbolic pass;
        without an argument, for the declared input."""
        if input_shape is None:
            if self._input_layer is None:
                raise ValueError(f"{self.name}.build: give an input_shape; the model declares no input")
            input_shape = self._input_layer.batch_shape
        dtype = self._input_layer.dtype if self._input_layer is not None else self.dtype
        declared = self._input_layer
        if declared is not None and tuple(declared.batch_shape) == tuple(input_shape):
            x = declared.output
        else:
            x = Input(batch_shape=input_shape, dtype=dtype)
        start = x
        for layer in self.layers:
            x = layer(x)
        self._symbolic_io = (start, x)
        self._symbolic_count = len(self.layers)
        self._input_signature = [TensorSpec((None, *tuple(input_shape)[1:]), dtype)]
        self._build_input_shape = tuple(input_shape)

    @property
    def inputs(self) -> list:
        """The symbolic input, in a list, once the model has one (an `Input` first, or `build`).

        >>> import tapeflow as tp
        >>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)])
        >>> [t.shape for t in model.inputs], [t.shape for t in model.outputs]
        ([(None, 3)], [(None, 2)])
        """
        return [self._symbolic("inputs")[0]]

    @property
    def outputs(self) -> list:
        """The symbolic output, in a list, once the model has an input (see `inputs`)."""
        return [self._symbolic("outputs")[1]]

    @property
    def input(self):
        """The symbolic input (see `inputs`)."""
        return self._symbolic("input")[0]

    @property
    def output(self):
        """The symbolic output (see `inputs`)."""
        return self._symbolic("output")[1]

    @property
    def input_shape(self) -> tuple:
        """The symbolic input's shape (see `inputs`)."""
        return tuple(self._symbolic("input shape")[0].shape)

    @property
    def output_shape(self) -> tuple:
        """The symbolic output's shape (see `inputs`).

        >>> import tapeflow as tp
        >>> tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)]).output_shape
        (None, 2)
        """
        return tuple(self._symbolic("output shape")[1].shape)

    def _symbolic(self, what: str) -> tuple:
        io = vars(self).get("_symbolic_io")
        if io is None or not self.layers:
            raise AttributeError(f"Sequential model '{self.name}' has no defined {what} yet.")
        return io

    def _call_symbolic(self, inputs, *args, **kwargs):
        # Called on a symbolic input (inside a functional model): build every layer now.
        if not self.built and isinstance(inputs, SymbolicTensor) and self._input_layer is None:
            self._input_layer = InputLayer(batch_shape=inputs.shape, dtype=inputs.dtype)
            self.build(inputs.shape)
        return super()._call_symbolic(inputs, *args, **kwargs)

    def _maybe_build(self, input_shape) -> None:
        # Called on data first: the layers build on their own first calls, inside call().
        if not self.built:
            self.built = True
            if isinstance(input_shape, tuple) and input_shape:
                input_shape = (None, *input_shape[1:])  # any batch size, as a declared input has
            self._build_input_shape = input_shape

    def call(self, inputs, training=None, mask=None):
        """Each layer in turn; masks travel as in Keras: a layer whose `call` takes `mask`
        gets the previous layer's, and a layer's output mask is its `compute_mask`'s when it
        supports masking (none otherwise)."""
        x = inputs
        for layer in self.layers:
            kwargs = {"training": training} if mask is None else {"training": training, "mask": mask}
            y = layer(x, **kwargs)
            mask = layer.compute_mask(x, mask) if layer.supports_masking else None
            x = y
        return x

    def _summary_rows(self):
        rows, shape = [], getattr(self, "_build_input_shape", None)
        shape = None if shape is None else (None, *tuple(shape)[1:])
        for layer in self.layers:
            shape = layer.compute_output_shape(shape) if shape is not None else "?"
            rows.append((layer, shape))
        return rows

    def get_config(self) -> dict:
        """The layers' configs, and the input (Keras' "build_input_shape") if the model is built."""
        shape = getattr(self, "_build_input_shape", None) if self.built else None
        dtype = self._input_layer.dtype if self._input_layer is not None else self.dtype
        if self._input_layer is None and self._input_signature:  # built by a first call: its input's dtype
            dtype = self._input_signature[0].dtype
        return {
            "name": self.name,
            "trainable": self.trainable,
            "layers": [serialize(layer) for layer in self.layers],
            "build_input_shape": None if shape is None else list(shape),
            "input_dtype": dtype.name,
        }

    @classmethod
    def from_config(cls, config: dict, custom_objects: dict | None = None):
        if custom_objects:
            with custom_object_scope(custom_objects):
                return cls.from_config(config)
        config = dict(config)
        layers = [deserialize(c) for c in config.pop("layers", [])]
        shape, dtype = config.pop("build_input_shape", None), config.pop("input_dtype", "float32")
        if shape is not None:
            layers = [InputLayer(batch_shape=shape, dtype=dtype), *layers]
        return cls(layers, **config)
