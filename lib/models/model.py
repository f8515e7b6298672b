"""Model, a Layer that can be trained, and Functional, a model over symbolic tensors (`tp.Model(inputs, outputs)`)."""

from __future__ import annotations

import functools
import io
import json

from tapeflow import saving, tree
from tapeflow.graph.trace import TensorSpec, freeze
from tapeflow.layers.base import Input, InputLayer, Layer, SymbolicTensor, deserialize, layers_in, serialize
from tapeflow.models.layer_graph import (
    describe_calls,
    layer_calls,
    map_refs,
    map_tensors,
    replay_calls,
    run_layer_calls,
)
from tapeflow.saving.load_report import LoadReport
from tapeflow.serialization import custom_object_scope
from tapeflow.trainers.model_inputs import standardize_inputs
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

    def __init__(self, *args, **kwargs):
        # A subclass whose constructor hands (inputs, outputs) on is a functional model
        # with the subclass's overrides (train_step, compute_loss ...), as in Keras.
        if _functional_arguments(args, kwargs) and not isinstance(self, Functional):
            self.__class__ = _functional_subclass(type(self))
            Functional.__init__(self, *args, **kwargs)
            return
        super().__init__(*args, **kwargs)

    @classmethod
    def from_config(cls, config: dict, custom_objects: dict | None = None):
        """The model a `get_config()` dict describes; `custom_objects` maps the names of
        user classes and functions in it to them, as in Keras.

        >>> import tapeflow as tp
        >>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)])
        >>> again = tp.Sequential.from_config(model.get_config())
        >>> again.count_params() == model.count_params()
        True
        """
        with custom_object_scope(custom_objects):
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

    def to_json(self, **kwargs) -> str:
        """The model's architecture as a JSON string (`tp.models.model_from_json` reads it);
        `kwargs` go to `json.dumps`.

        >>> import tapeflow as tp
        >>> tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)]).to_json()[:26]
        '{"class_name": "Sequential'
        """
        return json.dumps(serialize(self), **kwargs)

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

    @property
    def layers(self) -> list:
        """The layers the model holds directly, in the order they were set (a Sequential's
        stack; a functional model's InputLayers, then its layers in call order).

        >>> import tapeflow as tp
        >>> class Two(tp.Model):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.hidden, self.head = tp.layers.Dense(3), tp.layers.Dense(1)
        ...     def call(self, x):
        ...         return self.head(self.hidden(x))
        >>> [type(layer).__name__ for layer in Two().layers]
        ['Dense', 'Dense']
        """
        held = vars(self).get("layers")
        return held if held is not None else self._tracked_layers()

    @layers.setter
    def layers(self, value) -> None:
        vars(self)["layers"] = value

    def get_layer(self, name: str | None = None, index: int | None = None):
        """One of `layers`, by name or by index (exactly one of them), as Keras's.

        >>> import tapeflow as tp
        >>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2, name="out")])
        >>> model.get_layer("out").units, model.get_layer(index=0).name
        (2, 'out')
        >>> model.get_layer("missing")
        Traceback (most recent call last):
        ...
        ValueError: get_layer: no layer named 'missing' in sequential...; its layers: ['out']
        """
        if (name is None) == (index is None):
            raise ValueError(f"get_layer: give a layer name or an index (one of them), got {name=}, {index=}")
        layers = self.layers
        if index is not None:
            if isinstance(index, bool) or not isinstance(index, int) or not -len(layers) <= index < len(layers):
                raise ValueError(f"get_layer: index {index!r} is out of range: {self.name} has {len(layers)} layers")
            return layers[index]
        for layer in layers:
            if layer.name == name:
                return layer
        raise ValueError(f"get_layer: no layer named {name!r} in {self.name}; its layers: {[la.name for la in layers]}")

    def _summary_rows(self):
        return [(layer, getattr(layer, "output_shape", "?")) for layer in self._tracked_layers()]

    def _tracked_layers(self):
        return list(layers_in(vars(self).values()))


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
                raise ValueError(f"Model: inputs and outputs must be symbolic tensors, got {type(t).__name__}")
        # Frozen without an eager call first, the model takes its symbolic inputs' specs.
        self._input_signature = [TensorSpec(t.shape, t.dtype) for t in self._model_inputs]
        self._calls = layer_calls(self._model_inputs, self._model_outputs)
        self.layers = [t.input_layer for t in self._model_inputs if t.input_layer is not None]  # first, as in Keras
        for layer, *_ in self._calls:
            if isinstance(layer, Layer) and all(layer is not seen for seen in self.layers):
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
        given = standardize_inputs(self._input_structure, self._model_inputs, inputs, self.name)
        outputs = run_layer_calls(self._calls, self._model_inputs, self._model_outputs, given, training)
        structure = self._output_structure
        return tree.pack_sequence_as(list(structure) if isinstance(structure, tuple) else structure, outputs)

    @property
    def input(self):
        """The symbolic inputs as given to the constructor (one tensor, a list or a dict)."""
        return self._input_structure

    @property
    def output(self):
        """The symbolic outputs as given to the constructor (one tensor, a list or a dict)."""
        return self._output_structure

    @property
    def inputs(self) -> list:
        """The symbolic inputs, a flat list.

        >>> import tapeflow as tp
        >>> a, b = tp.Input((3,), name="a"), tp.Input((2,), name="b")
        >>> model = tp.Model([a, b], tp.layers.Dense(1)(tp.layers.Concatenate()([a, b])))
        >>> [t.name for t in model.inputs], [t.shape for t in model.outputs]
        (['a', 'b'], [(None, 1)])
        """
        return list(self._model_inputs)

    @property
    def outputs(self) -> list:
        """The symbolic outputs, a flat list."""
        return list(self._model_outputs)

    def _graph_layers(self) -> list:
        """The layers the calls use, without the InputLayers (a config's "layers")."""
        return [layer for layer in self.layers if not isinstance(layer, InputLayer)]

    def _summary_rows(self):
        inputs = [(layer, layer.batch_shape) for layer in self.layers if isinstance(layer, InputLayer)]
        return inputs + [
            (layer, used[0].shape if used else "?") for layer, _, _, used in self._calls if isinstance(layer, Layer)
        ]

    def get_config(self) -> dict:
        """The inputs, each distinct layer's config, the calls between them (shared layers
        are called more than once; op nodes by op name and attributes, with every argument)
        and the outputs: Keras' functional config, with tensors named by position ({"input":
        i} or {"call": c, "output": j})."""
        calls, refs = describe_calls(self._calls, self._model_inputs, self._graph_layers())
        return {
            "name": self.name,
            "trainable": self.trainable,
            "inputs": [
                {"name": t.name, "batch_shape": list(t.shape), "dtype": t.dtype.name} for t in self._model_inputs
            ],
            "input_structure": map_tensors(lambda t: refs[id(t)], self._input_structure),
            "layers": [serialize(layer) for layer in self._graph_layers()],
            "calls": calls,
            "outputs": map_tensors(lambda t: refs[id(t)], self._output_structure),
        }

    @classmethod
    def from_config(cls, config: dict, custom_objects: dict | None = None):
        if custom_objects:
            with custom_object_scope(custom_objects):
                return cls.from_config(config)
        where = f"{cls.__name__}.from_config"
        try:
            inputs = [Input(batch_shape=i["batch_shape"], dtype=i["dtype"], name=i["name"]) for i in config["inputs"]]
            layers = [deserialize(c) for c in config["layers"]]
            tensor = replay_calls(config["calls"], inputs, layers, where)
            input_structure = map_refs(
                tensor, config.get("input_structure", [{"input": i} for i in range(len(inputs))])
            )
            outputs = map_refs(tensor, config["outputs"])
        except (KeyError, IndexError, TypeError) as err:
            raise ValueError(f"{where}: malformed functional config ({type(err).__name__}: {err})") from None
        return cls(input_structure, outputs, name=config.get("name"), trainable=config.get("trainable", True))


def _functional_arguments(args: tuple, kwargs: dict) -> bool:
    """Whether constructor arguments name a functional model's inputs and outputs."""
    return len(args) == 2 or (len(args) == 1 and "outputs" in kwargs) or {"inputs", "outputs"} <= kwargs.keys()


@functools.cache
def _functional_subclass(cls: type) -> type:
    """`cls` with Functional's graph behind its own methods (same name and module)."""
    return type(cls.__name__, (cls, Functional), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
