"""Sum a layer's bias gradient while its relu gradient is made.

A training step's relu layer (a `fused_conv2d` or `fused_matmul` with relu, or a bias add and
a relu) masks its incoming gradient with `relu_grad` and sums the result over every axis but
the last for its bias (`sum`, with or without the kept axes). The two become one
`relu_bias_grad` node, whose second output is that sum: one pass over the gradient instead
of a second pass that reads it back.

>>> import numpy as np
>>> import tapeflow as tp
>>> b = tp.Variable(np.zeros(3, np.float32))
>>> def step(x):
...     with tp.GradientTape() as tape:
...         loss = tp.sum(tp.nn.relu(x + b) ** 2)
...     return tape.gradient(loss, b)
>>> counts = tp.freeze(step, tp.TensorSpec((4, 3))).op_counts()
>>> counts.get("relu_bias_grad"), counts.get("relu_grad"), counts.get("sum")
(1, None, None)
"""

from __future__ import annotations

from tapeflow.graph.ir import GraphIR, Value
from tapeflow.graph.passes.rewrite import replace_uses


class ReluBiasGradFusion:
    name = "relu_bias_grad"

    def run(self, graph: GraphIR) -> bool:
        users = graph.consumers()
        replacements: dict[int, Value] = {}
        reshapes: dict[int, object] = {}  # relu_grad node -> the reshape to place after it
        dropped: set[int] = set()
        for node in graph.nodes:
            if node.op != "relu_grad" or len(node.outputs) != 1:
                continue
            gz = node.outputs[0]
            rank = len(gz.shape)
            if rank < 1 or gz.shape[-1] is None:
                continue
            total = next((n for n in users.get(id(gz), ()) if _sums_all_but_last(n, gz, node.device)), None)
            if total is None:
                continue
            node.op = "relu_bias_grad"
            bias = Value(f"{node.name}:1", (gz.shape[-1],), gz.dtype, producer=node, index=1)
            node.outputs.append(bias)
            out = total.outputs[0]
            if tuple(out.shape) == tuple(bias.shape):
                replacements[id(out)] = bias
            else:  # the kept axes: a reshape of the sums
                (kept,) = graph.add_node(
                    "reshape", [bias], {"shape": tuple(out.shape)}, [(out.shape, out.dtype)], device=node.device
                )
                reshapes[id(node)] = graph.nodes.pop()
                replacements[id(out)] = kept
            dropped.add(id(total))
        if not replacements:
            return False
        nodes = []
        for n in graph.nodes:
            if id(n) in dropped:
                continue
            nodes.append(n)
            if id(n) in reshapes:
                nodes.append(reshapes[id(n)])
        graph.nodes = nodes
        replace_uses(graph, replacements)
        graph.changed()
        return True


def _sums_all_but_last(node, value: Value, device) -> bool:
    """Whether `node` sums `value` over every axis but the last, on `device`."""
    axes = node.attrs.get("axes")
    rank = len(value.shape)
    return (
        node.op == "sum"
        and node.device == device
        and node.inputs[0] is value
        and axes is not None
        and sorted(a % rank for a in axes) == list(range(rank - 1))
    )
