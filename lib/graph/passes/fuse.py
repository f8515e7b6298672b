"""Elementwise fusion: a chain of float elementwise ops becomes one `fused_elementwise` node.

A producer joins its reader's group when it is elementwise, has that one reader
(and is not a graph output), works in the group's float dtype and sits on its device. The fused
node takes the chain's outside inputs; 0-d float constants are folded into its
program. See tapeflow.ops.fused for the program format.

>>> import tapeflow as tp
>>> g = tp.freeze(lambda x: tp.tanh(tp.exp(x) * 2.0), tp.TensorSpec((3,)), optimize=False)
>>> ElementwiseFusion().run(g), g.op_counts()
(True, {'fused_elementwise': 1})
"""

from __future__ import annotations

from tapeflow.graph.ir import GraphIR, Node
from tapeflow.graph.passes.rewrite import consumer_counts
from tapeflow.ops import shapes
from tapeflow.ops.fused import PRIMITIVES, check_program

FUSED = "fused_elementwise"


class ElementwiseFusion:
    name = "fuse"

    def run(self, graph: GraphIR) -> bool:
        counts = consumer_counts(graph)
        position = {id(n): i for i, n in enumerate(graph.nodes)}
        taken: set[int] = set()
        fused: dict[int, Node] = {}  # id(root node) -> its replacement
        for root in reversed(graph.nodes):
            if id(root) in taken or not _fusible(root):
                continue
            group = _grow(root, counts, taken)
            if len(group) < 2:
                continue
            group.sort(key=lambda n: position[id(n)])
            node = _fuse(graph, group)
            if node is not None:
                taken.update(id(n) for n in group)
                fused[id(root)] = node
        if not fused:
            return False
        graph.nodes = [fused.get(id(n), n) for n in graph.nodes if id(n) not in taken or id(n) in fused]
        return True


def _fusible(node) -> bool:
    if node.op not in PRIMITIVES and node.op != FUSED or len(node.outputs) != 1:
        return False
    dtype = node.outputs[0].dtype
    return dtype.kind == "f" and all(v.dtype is dtype for v in node.inputs)


def _grow(root, counts, taken) -> list:
    """The root and every producer that can fold into it, reached through single-reader values."""
    group, stack = [root], [root]
    dtype = root.outputs[0].dtype
    while stack:
        node = stack.pop()
        for v in node.inputs:
            p = v.producer
            if p is None or id(p) in taken or p in group or counts.get(id(v), 0) != 1:
                continue
            if _fusible(p) and v.dtype is dtype and p.device == root.device:
                group.append(p)
                stack.append(p)
    return group


def _inlinable(v) -> bool:
    return v.kind == "const" and v.data.ndim == 0


def _fuse(graph: GraphIR, group: list):
    """A fused node computing the group's last node, or None when its inputs would not give that shape."""
    root_out = group[-1].outputs[0]
    inside = {id(n.outputs[0]) for n in group}
    program: list[tuple] = []
    reg: dict[int, int] = {}  # id(value) -> register
    inputs: list = []

    def register_of(v) -> int:
        if id(v) not in reg:
            if _inlinable(v):
                program.append(("const", float(v.data)))
            else:
                program.append(("input", len(inputs)))
                inputs.append(v)
            reg[id(v)] = len(program) - 1
        return reg[id(v)]

    for node in group:
        args = [register_of(v) if id(v) not in inside else reg[id(v)] for v in node.inputs]
        if node.op == FUSED:
            local = []
            for ins in node.attrs["program"]:
                if ins[0] == "input":
                    local.append(args[ins[1]])
                    continue
                program.append(ins if ins[0] == "const" else (ins[0], *(local[a] for a in ins[1:])))
                local.append(len(program) - 1)
            reg[id(node.outputs[0])] = local[-1]
        else:
            program.append((node.op, *args))
            reg[id(node.outputs[0])] = len(program) - 1
    if not inputs or shapes.broadcast(FUSED, *(v.shape for v in inputs)) != root_out.shape:
        return None
    if program[-1][0] in ("input", "const"):
        return None
    program_t = tuple(program)
    check_program(program_t, len(inputs))
    node = Node(graph.unique_name("fused"), FUSED, inputs, {"program": program_t}, [root_out], group[-1].device)
    root_out.producer, root_out.index = node, 0
    return node
