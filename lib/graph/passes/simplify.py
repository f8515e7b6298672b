"""Algebraic simplification: rewrite nodes that compute nothing new.

- ``x * 1``, ``1 * x``, ``x + (-0.0)``, ``(-0.0) + x``, ``x - 0.0``, ``x / 1`` become ``x``
  when the result has x's shape and dtype (a broadcasting constant is kept); for integers
  any zero will do. ``x + 0.0`` is kept: it is 0.0 where x is -0.0. ``x * 0`` is kept: it
  is NaN where x is NaN or infinite.
- ``identity``, ``stop_gradient`` and a cast to x's own dtype become ``x``.
- ``transpose(transpose(x))`` becomes one transpose (or ``x``), ``reshape(reshape(x))``
  one reshape (or ``x`` when the shape is x's own).

Rewritten nodes lose their readers; dead-code elimination then drops them.

>>> import tapeflow as tp
>>> g = tp.freeze(lambda x: x * 1.0 - 0.0, tp.TensorSpec((3,)), optimize=False)
>>> AlgebraicSimplification().run(g), g.outputs[0] is g.inputs[0]
(True, True)
"""

from __future__ import annotations

import math

from tapeflow.graph.ir import GraphIR
from tapeflow.graph.passes.rewrite import replace_uses, scalar_value

# op -> (value of a neutral right operand, value of a neutral left operand or None); the sign
# of a float zero counts: -0.0 + x is x for every x, 0.0 + x is not for x = -0.0
_NEUTRAL = {"add": (-0.0, -0.0), "subtract": (0.0, None), "multiply": (1, 1), "divide": (1, None)}
_PASS_THROUGH = ("identity", "stop_gradient")


class AlgebraicSimplification:
    name = "simplify"

    def run(self, graph: GraphIR) -> bool:
        alias: dict[int, object] = {}
        changed = False
        for node in graph.nodes:
            if any(id(v) in alias for v in node.inputs):
                node.inputs = [alias.get(id(v), v) for v in node.inputs]
                changed = True
            out = node.outputs[0] if len(node.outputs) == 1 else None
            if out is None:
                continue
            if node.op in ("transpose", "reshape") and _merge_with_producer(node):
                changed = True
            same = _same_as(node, out)
            if same is not None:
                alias[id(out)] = same
        return replace_uses(graph, alias) or changed


def _same_as(node, out):
    """The value `node` merely passes through, or None."""
    if node.op in _PASS_THROUGH or (node.op == "cast" and node.inputs[0].dtype is out.dtype):
        return node.inputs[0]
    if node.op == "transpose" and tuple(node.attrs["perm"]) == tuple(range(len(out.shape))):
        return node.inputs[0]
    if node.op == "reshape" and _static(out.shape) and node.inputs[0].shape == out.shape:
        return node.inputs[0]
    if node.op in _NEUTRAL:
        right, left = _NEUTRAL[node.op]
        x, y = node.inputs
        if _is(y, right) and _keeps(x, out):
            return x
        if left is not None and _is(x, left) and _keeps(y, out):
            return y
    return None


def _merge_with_producer(node) -> bool:
    """transpose of a transpose, reshape of a reshape: read the inner node's input instead."""
    inner = node.inputs[0].producer
    if inner is None or inner.op != node.op:
        return False
    if node.op == "reshape" and None in tuple(node.attrs["shape"]):
        return False  # None keeps the input's size at its position: a different input means another size
    if node.op == "transpose":
        inner_perm, perm = inner.attrs["perm"], node.attrs["perm"]
        node.attrs = {**node.attrs, "perm": tuple(int(inner_perm[p]) for p in perm)}
    node.inputs = [inner.inputs[0]]
    return True


def _is(v, neutral) -> bool:
    value = scalar_value(v)
    if value is None or isinstance(value, bool) or value != neutral:
        return False
    return not isinstance(value, float) or math.copysign(1.0, value) == math.copysign(1.0, neutral)


def _keeps(x, out) -> bool:
    return x.shape == out.shape and x.dtype is out.dtype


def _static(shape) -> bool:
    return None not in shape
