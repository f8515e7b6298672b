"""Graph autodiff: append gradient nodes to a graph, reusing each op's VJP.

`gradients(graph, ys, xs)` walks the nodes between `xs` and `ys` in reverse
topological order and calls every op's VJP on traced tensors standing for the
graph's values, so the VJPs' ops are recorded as new nodes of the same graph.
It returns the gradient values (None where `ys` do not depend on an `x`, a
`SparseGradient` of two values where the gradient is an IndexedSlices); add them
to `graph.outputs`, or fetch them with `graph.run`.

>>> import numpy as np
>>> import tapeflow as tp
>>> g = tp.freeze(lambda x: tp.sum(x * x), tp.TensorSpec((3,)), optimize=False)
>>> (dx,) = tp.gradients(g, g.outputs, g.inputs)
>>> g.run({"x": np.array([1.0, 2.0, 3.0], np.float32)}, dx).tolist()
[2.0, 4.0, 6.0]
"""

from __future__ import annotations

from tapeflow.autodiff import backprop
from tapeflow.graph.ir import ASSIGN, READ, GraphError, GraphIR, SparseGradient, Value
from tapeflow.graph.trace import Tracer
from tapeflow.ops.creation import ones_like
from tapeflow.ops.registry import get_op
from tapeflow.tensor import IndexedSlices


class _NodeRecord:
    """A graph node as the reverse-mode walk sees it: its op, attrs and values."""

    __slots__ = ("op", "attrs", "inputs", "outputs")

    def __init__(self, node):
        self.op, self.attrs = get_op(node.op), node.public_attrs
        self.inputs, self.outputs = node.inputs, node.outputs


def gradients(graph: GraphIR, ys, xs, grad_ys=None) -> list:
    """d(sum of ys) / d(xs) as new values of `graph` (weighted by `grad_ys` values if given).

    `ys` and `xs` are values of the graph or their names; `grad_ys` are values of the
    graph shaped like `ys`. Integer values get None.
    """
    by_name = graph.values()
    ys = [graph._resolve(y, by_name, "differentiate") for y in _as_list(ys)]
    xs = [graph._resolve(x, by_name, "differentiate against") for x in _as_list(xs)]
    seeds = None if grad_ys is None else [graph._resolve(g, by_name, "seed with") for g in _as_list(grad_ys)]
    if seeds is not None and len(seeds) != len(ys):
        raise GraphError(f"gradients: {len(seeds)} grad_ys for {len(ys)} ys")

    tracer = Tracer(graph)
    for v in graph.inputs + graph.constants:
        tracer._own.add(id(v))
    for node in graph.nodes:
        tracer._own.update(id(o) for o in node.outputs)
    traced: dict[int, object] = {}

    def t(v: Value):
        hit = traced.get(id(v))
        if hit is None:
            hit = traced[id(v)] = tracer.traced(v)
        return hit

    def vjp_tensors(rec):
        return tuple(t(v) for v in rec.inputs), tuple(t(o) for o in rec.outputs)

    records = [_NodeRecord(node) for node in graph.nodes if node.op not in (READ, ASSIGN)]
    floats = [i for i, y in enumerate(ys) if y.dtype.kind == "f"]
    with tracer:
        seed_tensors = (lambda y: ones_like(t(y))) if seeds is None else [t(seeds[i]) for i in floats]
        grads = backprop(records, [ys[i] for i in floats], seed_tensors, xs, vjp_tensors)
    graph.changed()
    graph.lint()
    return [_graph_gradient(tracer, grads.get(id(x))) for x in xs]


def _graph_gradient(tracer: Tracer, g):
    if g is None:
        return None
    if isinstance(g, IndexedSlices):
        return SparseGradient(tracer.value_of(g.values), tracer.value_of(g.indices), g.dense_shape)
    return tracer.value_of(g)


def _as_list(items) -> list:
    return list(items) if isinstance(items, list | tuple) else [items]
