"""Fold a bias add and a relu into the matmul or conv2d before them.

`matmul(x, w) + b` (b one-dimensional, over the last axis) and
`conv2d(x, w) + b`, each optionally followed by relu, become one
`fused_matmul` / `fused_conv2d` node when the intermediate values have no
other reader. Used for inference graphs (`model.freeze()`).

>>> import tapeflow as tp
>>> w, b = tp.ones((3, 2)), tp.zeros((2,))
>>> g = tp.freeze(lambda x: tp.nn.relu(x @ w + b), tp.TensorSpec((None, 3)), optimize=False)
>>> BiasActivationFusion().run(g), g.op_counts()
(True, {'fused_matmul': 1})
"""

from __future__ import annotations

from tapeflow.graph.ir import GraphIR
from tapeflow.graph.passes.rewrite import consumer_counts, replace_uses

_PRODUCTS = {"matmul": "fused_matmul", "conv2d": "fused_conv2d"}


class BiasActivationFusion:
    name = "bias_activation_fusion"

    def run(self, graph: GraphIR) -> bool:
        users = graph.consumers()
        counts = consumer_counts(graph)
        removed: set[int] = set()
        moved: dict[int, object] = {}  # the fused node takes the place of the last node it absorbs
        replacements = {}
        for node in graph.nodes:
            if node.op not in _PRODUCTS or id(node) in removed:
                continue
            product = node.outputs[0]
            if counts.get(id(product), 0) != 1 or len(users.get(id(product), ())) != 1:
                continue
            add = users[id(product)][0]
            if add.op != "add" or len(add.inputs) != 2 or add.device != node.device:
                continue
            bias = add.inputs[1] if add.inputs[0] is product else add.inputs[0]
            if bias is product or len(bias.shape) != 1 or bias.dtype is not product.dtype:
                continue
            if bias.shape[0] is None or bias.shape[0] != product.shape[-1] or add.outputs[0].shape != product.shape:
                continue
            if node.op == "matmul" and len(node.inputs[1].shape) != 2:
                continue
            tail, activation = add, "linear"
            summed = add.outputs[0]
            after = users.get(id(summed), ())
            if (
                counts.get(id(summed), 0) == 1
                and len(after) == 1
                and after[0].op == "relu"
                and after[0].device == node.device
            ):
                tail, activation = after[0], "relu"
            node.op = _PRODUCTS[node.op]
            node.inputs = [*node.inputs, bias]
            node.attrs = {**node.attrs, "activation": activation}
            replacements[id(tail.outputs[0])] = product
            removed.update({id(node), id(add), id(tail)})
            moved[id(tail)] = node
            product.shape = tail.outputs[0].shape
        if not replacements:
            return False
        graph.nodes = [moved.get(id(n), n) for n in graph.nodes if id(n) in moved or id(n) not in removed]
        replace_uses(graph, replacements)
        return True
