"""Models: a Layer that can be trained. Build one by subclassing `Model` and writing
`call`, by calling `Model(inputs, outputs)` on symbolic tensors (a `Functional` model),
or by stacking layers with `Sequential`.

>>> import tapeflow as tp
>>> model = tp.Sequential([tp.layers.Dense(4, activation="relu"), tp.layers.Dense(2)])
>>> model(tp.ones((3, 5))).shape
(3, 2)
>>> model.count_params()
34
"""

from __future__ import annotations

import io

from tapeflow.functional import flatten, layer_calls, rebuild, run_layer_calls
from tapeflow.graph.trace import TensorSpec, freeze
from tapeflow.io import checkpoint as weights_io
from tapeflow.layers.base import Layer, SymbolicTensor, _layers_in
from tapeflow.training import Trainer


class Model(Layer, Trainer):
    """Subclass and write `call(inputs, training=None)`; layers set as attributes are tracked.

    >>> import tapeflow as tp
    >>> class TwoLayers(tp.Model):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.hidden = tp.layers.Dense(8, activation="relu")
    ...         self.out = tp.layers.Dense(3)
    ...     def call(self, x, training=None):
    ...         return self.out(self.hidden(x))
    >>> TwoLayers()(tp.ones((2, 4))).shape
    (2, 3)
    """

    def __new__(cls, *args, **kwargs):
        # tp.Model(inputs, outputs) builds a functional model over symbolic tensors.
        if cls is Model and (args or "inputs" in kwargs):
            return Functional.__new__(Functional)
        return super().__new__(cls)

    def freeze(self, *input_specs, optimize: bool = True):
        """The inference graph of this model: dropout off, batch normalization on its
        moving statistics, constants folded; weights stay Variables (graph state).

        `input_specs` default to the shapes and dtypes of the first call's inputs,
        with the batch dimension dynamic.

        >>> import tapeflow as tp
        >>> model = tp.Sequential([tp.layers.Dense(3)])
        >>> _ = model(tp.ones((2, 4)))
        >>> graph = model.freeze()
        >>> [(v.name, v.type_string()) for v in graph.inputs + graph.outputs]
        [('input', 'float32[?,4]'), ('output', 'float32[?,3]')]
        """
        specs = input_specs or self._input_signature
        if not specs:
            raise ValueError(f"{self.name}.freeze: call the model once or pass TensorSpecs for its inputs")

        def inference(*inputs):
            return self(inputs[0] if len(inputs) == 1 else list(inputs), training=False)

        names = ["input"] if len(specs) == 1 else [f"input_{i}" for i in range(len(specs))]
        specs = [s if s.name else TensorSpec(s.shape, s.dtype, name) for s, name in zip(specs, names, strict=True)]

        graph = freeze(inference, *specs, name=self.name, optimize=optimize)
        taken = set(graph.values())
        for i, value in enumerate(graph.outputs):  # named signatures: input(s) and output(s)
            name = "output" if len(graph.outputs) == 1 else f"output_{i}"
            if value.kind == "node" and name not in taken:
                value.name = name
        return graph

    def summary(self, print_fn=print) -> None:
        """Print each layer's name, type, output shape and parameter count."""
        rows = [
            (f"{layer.name} ({type(layer).__name__})", str(shape), f"{layer.count_params():,}")
            for layer, shape in self._summary_rows()
        ]
        widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(_HEADER)]
        line = "  ".join(h.ljust(w) for h, w in zip(_HEADER, widths, strict=True))
        out = io.StringIO()
        print(f'Model: "{self.name}"', file=out)
        print("=" * len(line), file=out)
        print(line, file=out)
        print("-" * len(line), file=out)
        for row in rows:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)), file=out)
        print("=" * len(line), file=out)
        trainable = sum(int(w.size) for w in self.trainable_weights)
        total = self.count_params()
        print(
            f"Total params: {total:,}\nTrainable params: {trainable:,}\nNon-trainable params: {total - trainable:,}",
            file=out,
        )
        print_fn(out.getvalue().rstrip("\n"))

    def save_weights(self, filepath) -> None:
        """Write every weight to an HDF5 file, keyed '<layer name>/<weight name>', atomically.

        The layout is documented in `tapeflow.io.checkpoint`.

        >>> import os, tempfile
        >>> import tapeflow as tp
        >>> model = tp.Sequential([tp.layers.Dense(2, name="out")])
        >>> _ = model(tp.ones((1, 3)))
        >>> model.save_weights(os.path.join(tempfile.mkdtemp(), "w.h5"))
        """
        weights_io.save_weights(self, filepath)

    def load_weights(self, filepath, strict: bool = True) -> weights_io.LoadReport:
        """Load weights by name from `save_weights`' file; returns a `LoadReport`.

        With `strict` (the default), a missing, unexpected or wrongly shaped weight raises
        a ValueError naming every one, before any weight changes; `strict=False` loads
        those that match. Values are cast to each weight's dtype.

        >>> import os, tempfile
        >>> import tapeflow as tp
        >>> model = tp.Sequential([tp.layers.Dense(2, name="out")])
        >>> _ = model(tp.ones((1, 3)))
        >>> path = os.path.join(tempfile.mkdtemp(), "w.h5")
        >>> model.save_weights(path)
        >>> model.load_weights(path).matched
        ('out/kernel', 'out/bias')
        """
        return weights_io.load_weights(self, filepath, strict=strict)

    def _summary_rows(self):
        return [(layer, getattr(layer, "output_shape", "?")) for layer in self._tracked_layers()]

    def _tracked_layers(self):
        return list(_layers_in(vars(self).values()))


_HEADER = ("Layer (type)", "Output shape", "Params")


class Functional(Model):
    """A model defined by the layer calls between its symbolic inputs and outputs.

    >>> import tapeflow as tp
    >>> a, b = tp.layers.Input(shape=(3,)), tp.layers.Input(shape=(2,))
    >>> h = tp.layers.Concatenate()([tp.layers.Dense(4)(a), b])
    >>> model = tp.Model(inputs=[a, b], outputs=[tp.layers.Dense(1)(h), h])
    >>> [y.shape for y in model([tp.ones((5, 3)), tp.ones((5, 2))])]
    [(5, 1), (5, 6)]
    """

    def __init__(self, inputs, outputs, name: str | None = None, **kwargs):
        super().__init__(name=name, **kwargs)
        self._output_structure = outputs
        self._model_inputs = flatten(inputs)
        self._model_outputs = flatten(outputs)
        for t in self._model_inputs + self._model_outputs:
            if not isinstance(t, SymbolicTensor):
                raise TypeError(f"Model: inputs and outputs must be symbolic tensors, got {type(t).__name__}")
        # Frozen without an eager call first, the model takes its symbolic inputs' specs.
        self._input_signature = [TensorSpec(t.shape, t.dtype) for t in self._model_inputs]
        self._calls = layer_calls(self._model_inputs, self._model_outputs)
        self.layers = []
        for layer, *_ in self._calls:
            if all(layer is not seen for seen in self.layers):
                self.layers.append(layer)

    def call(self, inputs, training=None):
        given = flatten(inputs)
        if len(given) != len(self._model_inputs):
            raise ValueError(f"{self.name}: expected {len(self._model_inputs)} inputs, got {len(given)}")
        outputs = run_layer_calls(self._calls, self._model_inputs, self._model_outputs, given, training)
        return rebuild(self._output_structure, outputs)

    def _summary_rows(self):
        return [(layer, used[0].shape if used else "?") for layer, _, _, used in self._calls]


class Sequential(Model):
    """A plain stack of layers, each feeding the next.

    >>> import tapeflow as tp
    >>> model = tp.Sequential([tp.layers.Dense(2)])
    >>> model.add(tp.layers.Activation("softmax"))
    >>> [type(layer).__name__ for layer in model.layers]
    ['Dense', 'Activation']
    """

    def __init__(self, layers=None, name: str | None = None):
        super().__init__(name=name)
        self.layers: list[Layer] = []
        for layer in layers or []:
            self.add(layer)

    def add(self, layer: Layer) -> None:
        if not isinstance(layer, Layer):
            raise TypeError(f"Sequential.add: expected a tp.layers.Layer, got {type(layer).__name__}")
        self.layers.append(layer)

    def call(self, inputs, training=None):
        x = inputs
        for layer in self.layers:
            x = layer(x, training=training)
        return x

    def _summary_rows(self):
        rows, shape = [], getattr(self, "_build_input_shape", None)
        shape = None if shape is None else (None, *tuple(shape)[1:])
        for layer in self.layers:
            shape = layer.compute_output_shape(shape) if shape is not None else "?"
            rows.append((layer, shape))
        return rows

    def get_config(self) -> dict:
        return {
            "name": self.name,
            "layers": [{"class_name": type(layer).__name__, "config": layer.get_config()} for layer in self.layers],
        }
