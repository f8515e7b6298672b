"""Models: a Layer that can be trained. Build one by subclassing `Model` and writing
`call`, or stack layers with `Sequential`.

>>> import tapeflow as tp
>>> model = tp.Sequential([tp.layers.Dense(4, activation="relu"), tp.layers.Dense(2)])
>>> model(tp.ones((3, 5))).shape
(3, 2)
>>> model.count_params()
34
"""

from __future__ import annotations

import io

from tapeflow.layers.base import Layer, _layers_in
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

    def _summary_rows(self):
        return [(layer, getattr(layer, "output_shape", "?")) for layer in self._tracked_layers()]

    def _tracked_layers(self):
        return list(_layers_in(vars(self).values()))


_HEADER = ("Layer (type)", "Output shape", "Params")


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

    def compute_output_shape(self, input_shape):
        shape = tuple(input_shape)
        for layer in self.layers:
            shape = layer.compute_output_shape(shape)
        return shape

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
