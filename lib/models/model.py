"""Model, a Layer that can be trained, and Functional, a model over symbolic tensors (`tp.Model(inputs, outputs)`)."""

from __future__ import annotations

import io

from tapeflow import saving, tree
from tapeflow.graph.trace import TensorSpec, freeze
from tapeflow.layers.base import Input, Layer, SymbolicTensor, _layers_in, deserialize, serialize
from tapeflow.models.layer_graph import layer_calls, run_layer_calls
from tapeflow.saving.load_report import LoadReport
from tapeflow.trainers.trainer import Trainer


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
        return super().__new__(cls, *args, **kwargs)

    @classmethod
    def from_config(cls, config: dict):
        if cls is Model and "calls" in config:  # tp.Model.from_config of a functional model's config
            return Functional.from_config(config)
        return cls(**config)

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

    def compile(self, optimizer="rmsprop", loss=None, metrics=None, **kwargs) -> None:
        """See `tapeflow.training.Trainer.compile`; the arguments are kept for `save`."""
        super().compile(optimizer, loss, metrics, **kwargs)
        self._compile_arguments = {"loss": loss, "metrics": metrics, **kwargs}

    def save(self, filepath) -> None:
        """Write the whole model to one file, atomically: architecture (config), weights, and
        if compiled, the compile arguments and the optimizer's state. `tp.models.load_model`
        reads it back without running any code from it. The layout is documented in
        docs/file-formats.md; any file name works, ".keras" is the customary one.

        >>> import os, tempfile
        >>> import tapeflow as tp
        >>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)])
        >>> model.save(os.path.join(tempfile.mkdtemp(), "m.keras"))
        """
        saving.save_model(self, filepath)

    def save_weights(self, filepath) -> None:
        """Write every weight to an HDF5 file, keyed by its place in the model, atomically.

        The layout is documented in docs/file-formats.md.

        >>> import os, tempfile
        >>> import tapeflow as tp
        >>> model = tp.Sequential([tp.layers.Dense(2, name="out")])
        >>> _ = model(tp.ones((1, 3)))
        >>> model.save_weights(os.path.join(tempfile.mkdtemp(), "w.h5"))
        """
        saving.save_weights(self, filepath)

    def load_weights(self, filepath, strict: bool = True, by_name: bool = False) -> LoadReport:
        """Load weights from `save_weights`' file, matched by structure (each layer's place
        in the model, as Keras 3 does), or by their full names with `by_name=True`; a file
        of the older name-keyed layout loads by name. Returns a `LoadReport`.

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
        ('layers/dense/kernel', 'layers/dense/bias')
        """
        return saving.load_weights(self, filepath, strict=strict, by_name=by_name)

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
        self._input_structure = inputs
        self._output_structure = outputs
        self._model_inputs = tree.flatten(inputs)
        self._model_outputs = tree.flatten(outputs)
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
        # Every layer was built by its symbolic call: the model is built at construction.
        self.built = True
        shapes = [t.shape for t in self._model_inputs]
        self._build_input_shape = shapes[0] if len(shapes) == 1 else shapes

    @property
    def output_names(self) -> list[str]:
        """Each output's name, as Keras 3 gives them: its key for a dict of outputs, else the
        name of the layer that computes it ("_1", "_2", ... on a repeat). Losses, metrics
        and their log entries ("<name>_loss") for several outputs use these names.

        >>> import tapeflow as tp
        >>> x = tp.Input((3,))
        >>> tp.Model(x, [tp.layers.Dense(1, name="price")(x), tp.layers.Dense(2, name="kind")(x)]).output_names
        ['price', 'kind']
        """
        if isinstance(self._output_structure, dict):
            return sorted(self._output_structure)
        names: list[str] = []
        for t in self._model_outputs:
            name = t.history[0].name if t.history else (t.name or "output")
            base, n = name, 0
            while name in names:
                n += 1
                name = f"{base}_{n}"
            names.append(name)
        return names

    def call(self, inputs, training=None):
        given = tree.flatten(inputs)
        if len(given) != len(self._model_inputs):
            raise ValueError(f"{self.name}: expected {len(self._model_inputs)} inputs, got {len(given)}")
        outputs = run_layer_calls(self._calls, self._model_inputs, self._model_outputs, given, training)
        structure = self._output_structure
        return tree.pack_sequence_as(list(structure) if isinstance(structure, tuple) else structure, outputs)

    def _summary_rows(self):
        return [(layer, used[0].shape if used else "?") for layer, _, _, used in self._calls]

    def get_config(self) -> dict:
        """The inputs, each distinct layer's config, the calls between them (shared layers
        are called more than once) and the outputs: Keras' functional config, with tensors
        named by position ({"input": i} or {"call": c, "output": j})."""
        refs = {id(t): {"input": i} for i, t in enumerate(self._model_inputs)}
        calls = []
        for c, (layer, args, kwargs, used) in enumerate(self._calls):
            for out in used:
                refs[id(out)] = {"call": c, "output": out.index}
            calls.append(
                {
                    "layer": next(i for i, known in enumerate(self.layers) if known is layer),
                    "args": _map_tensors(lambda t: refs[id(t)], args),
                    "kwargs": dict(kwargs),
                }
            )
        return {
            "name": self.name,
            "trainable": self.trainable,
            "inputs": [
                {"name": t.name, "batch_shape": list(t.shape), "dtype": t.dtype.name} for t in self._model_inputs
            ],
            "input_structure": _map_tensors(lambda t: refs[id(t)], self._input_structure),
            "layers": [serialize(layer) for layer in self.layers],
            "calls": calls,
            "outputs": _map_tensors(lambda t: refs[id(t)], self._output_structure),
        }

    @classmethod
    def from_config(cls, config: dict):
        where = f"{cls.__name__}.from_config"
        try:
            inputs = [Input(batch_shape=i["batch_shape"], dtype=i["dtype"], name=i["name"]) for i in config["inputs"]]
            layers = [deserialize(c) for c in config["layers"]]
            values: dict = {}

            def tensor(ref):
                if not isinstance(ref, dict):
                    raise ValueError(f"{where}: a tensor reference must be a dict, got {ref!r}")
                if "input" in ref:
                    return inputs[ref["input"]]
                return values[(ref["call"], ref["output"])]

            for c, call in enumerate(config["calls"]):
                result = layers[call["layer"]](_map_refs(tensor, call["args"]), **call.get("kwargs", {}))
                for j, out in enumerate(result if isinstance(result, list) else [result]):
                    values[(c, j)] = out
            input_structure = _map_refs(
                tensor, config.get("input_structure", [{"input": i} for i in range(len(inputs))])
            )
            outputs = _map_refs(tensor, config["outputs"])
        except (KeyError, IndexError, TypeError) as err:
            raise ValueError(f"{where}: malformed functional config ({type(err).__name__}: {err})") from None
        return cls(input_structure, outputs, name=config.get("name"), trainable=config.get("trainable", True))


def _map_tensors(fn, structure):
    """fn(tensor) for one symbolic tensor or each in a list, tuple or dict of them."""
    if isinstance(structure, dict):
        return {k: fn(v) for k, v in structure.items()}
    if isinstance(structure, list | tuple):
        return [fn(v) for v in structure]
    return fn(structure)


def _map_refs(fn, structure):
    """The inverse of `_map_tensors` over references: a ref is a dict with "input" or "call"."""
    if isinstance(structure, dict) and ("input" in structure or "call" in structure):
        return fn(structure)
    if isinstance(structure, dict):
        return {k: fn(v) for k, v in structure.items()}
    if isinstance(structure, list):
        return [fn(v) for v in structure]
    raise ValueError(
        f"Functional.from_config: expected a tensor reference or a list or dict of them, got {structure!r}"
    )
