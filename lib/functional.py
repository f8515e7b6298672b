"""Functional models: `tp.Model(inputs, outputs)` over a graph of layer calls made on
symbolic `tp.layers.Input` tensors, with any number of inputs and outputs.

>>> import tapeflow as tp
>>> a, b = tp.layers.Input(shape=(3,)), tp.layers.Input(shape=(2,))
>>> h = tp.layers.Concatenate()([tp.layers.Dense(4)(a), b])
>>> model = tp.Model(inputs=[a, b], outputs=[tp.layers.Dense(1)(h), h])
>>> [y.shape for y in model([tp.ones((5, 3)), tp.ones((5, 2))])]
[(5, 1), (5, 6)]
"""

from __future__ import annotations

from tapeflow.graph.trace import TensorSpec
from tapeflow.layers.base import SymbolicTensor
from tapeflow.models import Model


def _flatten(structure) -> list:
    if isinstance(structure, dict):
        return [structure[k] for k in sorted(structure)]
    if isinstance(structure, list | tuple):
        return list(structure)
    return [structure]


def _rebuild(structure, values: list):
    if isinstance(structure, dict):
        return dict(zip(sorted(structure), values, strict=True))
    if isinstance(structure, list | tuple):
        return list(values)
    return values[0]


class _Node:
    """One layer call of the graph: its layer, symbolic inputs, kwargs and outputs."""

    __slots__ = ("layer", "inputs", "kwargs", "outputs")

    def __init__(self, history):
        self.layer, self.inputs, self.kwargs = history
        self.outputs: list[SymbolicTensor] = []


class Functional(Model):
    """A model defined by the layer calls between its symbolic inputs and outputs."""

    def __init__(self, inputs, outputs, name: str | None = None, **kwargs):
        super().__init__(name=name, **kwargs)
        self._input_structure, self._output_structure = inputs, outputs
        self._model_inputs = _flatten(inputs)
        self._model_outputs = _flatten(outputs)
        for t in self._model_inputs + self._model_outputs:
            if not isinstance(t, SymbolicTensor):
                raise TypeError(f"Model: inputs and outputs must be symbolic tensors, got {type(t).__name__}")
        # Frozen without an eager call first, the model takes its symbolic inputs' specs.
        self._input_signature = [TensorSpec(t.shape, t.dtype) for t in self._model_inputs]
        self._nodes = self._topological_nodes()
        self.layers = []
        for node in self._nodes:
            if all(node.layer is not seen for seen in self.layers):
                self.layers.append(node.layer)

    def _topological_nodes(self) -> list[_Node]:
        """Every layer call the outputs depend on, each after the calls it consumes (no recursion)."""
        inputs = {id(t) for t in self._model_inputs}
        nodes: dict[int, _Node] = {}
        order: list[_Node] = []
        stack = [(t, False) for t in reversed(self._model_outputs)]
        done: set[int] = set()
        while stack:
            tensor, expanded = stack.pop()
            if id(tensor) in inputs or id(tensor) in done:
                continue
            if tensor.history is None:
                raise ValueError(f"Model: output depends on {tensor.name}, which is not among the model's inputs")
            key = id(tensor.history)
            node = nodes.get(key)
            if node is None:
                node = nodes[key] = _Node(tensor.history)
            if expanded:
                done.add(id(tensor))
                if all(o is not tensor for o in node.outputs):
                    node.outputs.append(tensor)
                if all(n is not node for n in order):
                    order.append(node)
                continue
            stack.append((tensor, True))
            for parent in reversed(_flatten(node.inputs)):
                stack.append((parent, False))
        return order

    def call(self, inputs, training=None):
        given = _flatten(inputs)
        if len(given) != len(self._model_inputs):
            raise ValueError(f"{self.name}: expected {len(self._model_inputs)} inputs, got {len(given)}")
        values = {id(sym): value for sym, value in zip(self._model_inputs, given, strict=True)}
        for node in self._nodes:
            args = _rebuild(node.inputs, [values[id(t)] for t in _flatten(node.inputs)])
            result = node.layer(args, **{"training": training, **node.kwargs})
            for out in node.outputs:
                values[id(out)] = result[out.index] if isinstance(result, list | tuple) else result
        return _rebuild(self._output_structure, [values[id(t)] for t in self._model_outputs])

    def compute_output_shape(self, input_shape):
        shapes = [tuple(t.shape) for t in self._model_outputs]
        return _rebuild(self._output_structure, shapes)

    def _summary_rows(self):
        return [(node.layer, node.outputs[0].shape if node.outputs else "?") for node in self._nodes]
