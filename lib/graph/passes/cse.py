"""Common-subexpression elimination: one node for each distinct computation.

Two nodes merge when they have the same op, the same inputs, equal attrs and one device;
constants merge when dtype, shape and bytes agree. Random ops, state writes,
and state reads separated by a write to the same variable are never merged.

>>> import tapeflow as tp
>>> g = tp.freeze(lambda x: tp.exp(x) + tp.exp(x), tp.TensorSpec((3,)), optimize=False)
>>> CommonSubexpressionElimination().run(g), g.op_counts()
(True, {'add': 1, 'exp': 1})
"""

from __future__ import annotations

import hashlib

from tapeflow.graph.ir import ASSIGN, READ, GraphIR
from tapeflow.graph.passes.rewrite import attr_key
from tapeflow.ops.registry import get_op


class CommonSubexpressionElimination:
    name = "cse"

    def run(self, graph: GraphIR) -> bool:
        same: dict[int, object] = {}  # id(value) -> the value that replaces it
        by_bytes: dict[tuple, object] = {}
        constants = []
        for c in graph.constants:
            key = (c.dtype.name, c.shape, hashlib.sha256(c.data.tobytes()).digest())
            kept = by_bytes.setdefault(key, c)
            if kept is c:
                constants.append(c)
            else:
                same[id(c)] = kept
        seen: dict[tuple, object] = {}
        writes: dict[str, int] = {}  # variable -> how many writes so far
        nodes = []
        for node in graph.nodes:
            node.inputs = [same.get(id(v), v) for v in node.inputs]
            if node.op == ASSIGN:
                writes[node.attrs["variable"]] = writes.get(node.attrs["variable"], 0) + 1
                nodes.append(node)
                continue
            if node.op == READ:
                key = (READ, node.attrs["variable"], writes.get(node.attrs["variable"], 0))
            elif get_op(node.op).stateful:
                nodes.append(node)
                continue
            else:
                key = (node.op, tuple(id(v) for v in node.inputs), attr_key(node.attrs), node.device)
            kept = seen.setdefault(key, node)
            if kept is node:
                nodes.append(node)
            else:
                same.update((id(a), b) for a, b in zip(node.outputs, kept.outputs, strict=True))
        graph.outputs = [same.get(id(v), v) for v in graph.outputs]
        changed = len(nodes) != len(graph.nodes) or len(constants) != len(graph.constants)
        graph.nodes, graph.constants = nodes, constants
        return changed
