"""Dead-code elimination: drop nodes, constants and state nothing needs.

Graph outputs and the ops run for their effect (`SIDE_EFFECT_OPS`: state writes, sends
and queue ops) are the roots; everything they depend on stays.

>>> import tapeflow as tp
>>> g = tp.freeze(lambda x: (x * 2.0, tp.exp(x))[0], tp.TensorSpec((3,)), optimize=False)
>>> DeadCodeElimination().run(g), g.op_counts()
(True, {'multiply': 1})
"""

from __future__ import annotations

from tapeflow.graph.ir import ASSIGN, READ, SIDE_EFFECT_OPS, GraphIR


class DeadCodeElimination:
    name = "dce"

    def run(self, graph: GraphIR) -> bool:
        live: set[int] = set()
        stack = list(graph.outputs)
        for node in graph.nodes:
            if node.op in SIDE_EFFECT_OPS:
                stack.extend(node.inputs)
        while stack:
            v = stack.pop()
            if id(v) in live:
                continue
            live.add(id(v))
            if v.producer is not None:
                live.update(id(o) for o in v.producer.outputs)
                stack.extend(v.producer.inputs)
        nodes = [n for n in graph.nodes if n.op in SIDE_EFFECT_OPS or any(id(o) in live for o in n.outputs)]
        constants = [c for c in graph.constants if id(c) in live]
        used_state = {n.attrs.get("variable") for n in nodes if n.op in (READ, ASSIGN)}
        state = {k: var for k, var in graph.state.items() if k in used_state}
        changed = (len(nodes), len(constants), len(state)) != (len(graph.nodes), len(graph.constants), len(graph.state))
        graph.nodes, graph.constants, graph.state = nodes, constants, state
        return changed
