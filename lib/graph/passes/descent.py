"""Fold a plain gradient descent step into the product that makes its gradient.

A training step's update `param - gradient * lr` (a `fused_elementwise` program, as
ElementwiseFusion leaves it), whose gradient is a 2-D `matmul` that nothing else reads,
becomes one `sgd_matmul_update(param, a, b, lr)` node. A dense layer's weight gradient is
such a product: on a CPU the update is then one gemm that reads and writes the weight once,
where the product wrote the gradient and the update read it back with the weight.

>>> import numpy as np
>>> import tapeflow as tp
>>> w = tp.Variable(np.ones((3, 2), np.float32))
>>> def step(x, g):
...     w.assign(w - tp.matmul(tp.transpose(x, (1, 0)), g) * 0.1)
...     return w
>>> graph = tp.freeze(step, tp.TensorSpec((4, 3)), tp.TensorSpec((4, 2)))
>>> graph.op_counts()["sgd_matmul_update"]
1
"""

from __future__ import annotations

import numpy as np

from tapeflow.graph.ir import GraphIR
from tapeflow.graph.passes.rewrite import consumer_counts


def descent_roles(program: tuple, shapes: list) -> tuple | None:
    """(gradient, rate, param) of a program that computes `param - gradient * rate`, given
    its inputs' shapes: the gradient's and param's input positions, and the rate as
    ("input", position) of a scalar input or ("const", value); None for any other program.

    >>> descent_roles((("input", 0), ("input", 1), ("multiply", 0, 1), ("input", 2), ("subtract", 3, 2)),
    ...               [(3, 2), (), (3, 2)])
    (0, ('input', 1), 2)
    >>> descent_roles((("input", 0), ("const", 0.5), ("multiply", 0, 1), ("input", 1), ("subtract", 3, 2)),
    ...               [(3, 2), (3, 2)])
    (0, ('const', 0.5), 1)
    """
    if len(program) != 5:
        return None
    last, inputs = program[-1], {k: ins[1] for k, ins in enumerate(program) if ins[0] == "input"}
    if last[0] != "subtract" or last[1] not in inputs or last[2] in inputs or len(inputs) != len(shapes):
        return None
    product, param = program[last[2]], inputs[last[1]]
    if product[0] != "multiply" or len(product) != 3:
        return None
    for g, r in ((product[1], product[2]), (product[2], product[1])):
        if g not in inputs or inputs[g] == param or tuple(shapes[inputs[g]]) != tuple(shapes[param]):
            continue
        if program[r][0] == "const":
            rate = program[r]
        elif r in inputs and inputs[r] not in (param, inputs[g]) and tuple(shapes[inputs[r]]) == ():
            rate = ("input", inputs[r])
        else:
            continue
        if len(shapes) == (3 if rate[0] == "input" else 2):
            return inputs[g], rate, param
    return None


class ProductDescentFusion:
    name = "product_descent_fusion"

    def run(self, graph: GraphIR) -> bool:
        counts = consumer_counts(graph)
        absorbed: set[int] = set()
        for node in graph.nodes:
            if node.op != "fused_elementwise":
                continue
            roles = descent_roles(node.attrs["program"], [v.shape for v in node.inputs])
            if roles is None:
                continue
            gradient, param = node.inputs[roles[0]], node.inputs[roles[2]]
            product = gradient.producer
            if (
                product is None
                or product.op != "matmul"
                or product.attrs
                or product.device != node.device
                or counts.get(id(gradient), 0) != 1
                or any(v.shape is None or len(v.shape) != 2 for v in product.inputs)
                or tuple(node.outputs[0].shape) != tuple(param.shape)
            ):
                continue
            a, b = product.inputs
            kind, rate = roles[1]
            if kind == "input":
                rate = node.inputs[rate]
            else:
                rate = graph.add_constant(np.array(rate, param.dtype.np))
            node.op = "sgd_matmul_update"
            node.inputs = [param, a, b, rate]
            node.attrs = {}
            absorbed.add(id(product))
        if not absorbed:
            return False
        graph.nodes = [n for n in graph.nodes if id(n) not in absorbed]
        return True
