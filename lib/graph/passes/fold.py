"""Constant folding: evaluate, once, the nodes whose inputs are all constants, and the nodes
whose result depends only on their inputs' shapes and dtypes (`full_like`) where those are
static (a gradient's seed, `ones_like(loss) / batch`, folds to a constant).

Random ops and state reads and writes are never folded, nor are nodes whose
outputs would exceed `max_elements` (a folded constant is stored in the graph).

>>> import tapeflow as tp
>>> g = tp.freeze(lambda: tp.ones((3,)) * 2.0 + 1.0, optimize=False)
>>> ConstantFolding().run(g), g.op_counts(), g.outputs[0].data.tolist()
(True, {}, [3.0, 3.0, 3.0])
"""

from __future__ import annotations

import math

import numpy as np

from tapeflow.backends import backend, numerics
from tapeflow.devices import CPU
from tapeflow.graph.ir import ASSIGN, READ, GraphIR
from tapeflow.graph.passes.rewrite import replace_uses
from tapeflow.ops.registry import get_op

# ops whose outputs depend on their inputs' shapes and dtypes alone, never on their values
_SHAPE_ONLY = frozenset({"full_like"})


class ConstantFolding:
    name = "fold"

    def __init__(self, max_elements: int = 1_000_000):
        self.max_elements = max_elements

    def run(self, graph: GraphIR) -> bool:
        folded: dict[int, object] = {}
        kept = []
        for node in graph.nodes:
            node.inputs = [folded.get(id(v), v) for v in node.inputs]
            kept.append(node)
            if node.op in (READ, ASSIGN) or not node.outputs:
                continue
            shape_only = node.op in _SHAPE_ONLY and all(None not in v.shape for v in node.inputs)
            if not shape_only and any(v.kind != "const" for v in node.inputs):
                continue
            op = get_op(node.op)
            if op.stateful or op.transfer or any(None in v.shape for v in node.outputs):
                continue
            if sum(math.prod(v.shape) for v in node.outputs) > self.max_elements:
                continue
            try:
                result = _evaluate(op, graph.node_device(node), node, shape_only)
            except Exception:  # noqa: BLE001 - left in place: the executor reports it with the node named
                continue
            results = (result,) if op.num_outputs == 1 else tuple(result)
            to_host = backend(graph.node_device(node).family).to_host  # constants are host arrays
            for v, r in zip(node.outputs, results, strict=True):
                r = r if isinstance(r, np.ndarray | np.generic | int | float | bool) else to_host(r)
                data = np.array(r, dtype=v.dtype.np, copy=True)  # never a view of another constant
                if data.shape != v.shape:
                    raise ValueError(
                        f"fold: node '{node.name}' ({node.op}) gave shape {data.shape}, expected {v.shape}"
                    )
                folded[id(v)] = graph.add_constant(data, name=f"{node.name}_folded")
            kept.pop()
        graph.nodes = kept
        replace_uses(graph, folded)
        return bool(folded)


def _evaluate(op, device, node, shape_only: bool = False):
    """The node's outputs, computed as the executor would: same kernel, same numerics (so a
    subnormal result is flushed exactly as it would be at run time). A `shape_only` node's
    kernel gets zeros of its inputs' shapes and dtypes (on the host)."""
    family = CPU.family if shape_only else device.family
    kernel = op.bound_kernel(family, node.public_attrs)
    arrays = [np.zeros(v.shape, v.dtype.np) for v in node.inputs] if shape_only else [v.data for v in node.inputs]
    with numerics(device), np.errstate(all="ignore"):
        return kernel(*arrays)
