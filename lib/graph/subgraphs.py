"""How a tracer records `tp.cond` and `tp.while_loop`: branches, loop conditions and
bodies are traced into subgraphs, and one `cond` or `while_loop` node holds them (the
ops themselves, their kernels and gradients, are in `tapeflow.graph.control`).

>>> import tapeflow as tp
>>> g = tp.freeze(lambda x: tp.while_loop(lambda v: tp.sum(v) < 10.0, lambda v: v * 2.0, x), tp.TensorSpec((2,)))
>>> [node.op for node in g.nodes]
['while_loop']
>>> g(tp.tensor([1.0, 2.0])).numpy().tolist()
[4.0, 8.0]
"""

from __future__ import annotations

from tapeflow.graph.runnable import Graph
from tapeflow.graph.structure import flatten_structure, rebuild_structure
from tapeflow.ops.registry import apply, as_tensor, get_op
from tapeflow.tensor import Tensor


def trace_subgraph(parent, fn, args, name: str):
    """Trace fn(*args) as a subgraph nested in `parent`'s; returns (graph, captured outer tensors)."""
    graph = Graph(name)
    tracer = type(parent)(graph, parent=parent)  # a tracer of the same kind, one level down
    inner = [tracer.add_input(f"arg{i}", a.shape, a.dtype) for i, a in enumerate(args)]
    with tracer:
        result = fn(*inner)
        leaves, structure = flatten_structure(result)
        graph.outputs = [tracer.value_of(x if isinstance(x, Tensor) else as_tensor(x, name=name)) for x in leaves]
    graph.output_structure = structure
    graph.lint()
    return graph, [outer for outer, _ in tracer.captures]


def _union(*capture_lists):
    union, index = [], {}
    maps = []
    for caps in capture_lists:
        m = []
        for t in caps:
            key = id(t.ref)
            if key not in index:
                index[key] = len(union)
                union.append(t)
            m.append(index[key])
        maps.append(tuple(m))
    return union, maps


def merge_branch_specs(a: Graph, b: Graph) -> tuple:
    """The (shape, dtype name) of each output of a cond whose branches are `a` and `b`: a
    dimension the branches disagree on is unknown (None)."""
    if len(a.outputs) != len(b.outputs) or str(a.output_structure) != str(b.output_structure):
        raise ValueError(
            f"cond: the branches return different structures ({len(a.outputs)} and {len(b.outputs)} tensors)"
        )
    specs = []
    for i, (x, y) in enumerate(zip(a.outputs, b.outputs, strict=True)):
        if x.dtype is not y.dtype or len(x.shape) != len(y.shape):
            raise ValueError(
                f"cond: output {i} is {x.type_string()} in true_fn but {y.type_string()} in false_fn; "
                "both branches must give the same dtype and rank"
            )
        specs.append((tuple(p if p == q else None for p, q in zip(x.shape, y.shape, strict=True)), x.dtype.name))
    return tuple(specs)


def record_cond(tracer, pred, true_fn, false_fn):
    """Record a `cond` node in `tracer`'s graph; returns what the branches return."""
    then_graph, then_caps = trace_subgraph(tracer, true_fn, [], "cond_true")
    else_graph, else_caps = trace_subgraph(tracer, false_fn, [], "cond_false")
    specs = merge_branch_specs(then_graph, else_graph)
    union, (then_map, else_map) = _union(then_caps, else_caps)
    attrs = {
        "then_graph": then_graph,
        "else_graph": else_graph,
        "then_map": then_map,
        "else_map": else_map,
        "output_specs": specs,
        "structure": then_graph.output_structure,
    }
    outs = apply(get_op("cond"), (pred, *union), attrs)
    return rebuild_structure(then_graph.output_structure, list(outs))


def record_while(tracer, cond_fn, body, values, maximum_iterations):
    """Record a `while_loop` node in `tracer`'s graph; returns the final loop variables."""
    cond_graph, cond_caps = trace_subgraph(tracer, cond_fn, values, "while_cond")
    if len(cond_graph.outputs) != 1 or cond_graph.outputs[0].dtype.kind != "b":
        raise TypeError("while_loop: cond must return one bool tensor")
    body_graph, body_caps = trace_subgraph(tracer, body, values, "while_body")
    if len(body_graph.outputs) != len(values):
        raise ValueError(f"while_loop: body returned {len(body_graph.outputs)} values for {len(values)} loop variables")
    for i, (v, o) in enumerate(zip(values, body_graph.outputs, strict=True)):
        if o.dtype is not v.dtype or tuple(o.shape) != tuple(v.shape):
            raise ValueError(
                f"while_loop: loop variable {i} enters as {v.dtype.name}{list(v.shape)} but the body returns "
                f"{o.type_string()}; a loop variable must keep its shape and dtype"
            )
    union, (cond_map, body_map) = _union(cond_caps, body_caps)
    attrs = {
        "cond_graph": cond_graph,
        "body_graph": body_graph,
        "cond_map": cond_map,
        "body_map": body_map,
        "n_vars": len(values),
        "maximum_iterations": maximum_iterations,
        "output_specs": tuple((tuple(v.shape), v.dtype.name) for v in values),
    }
    return list(apply(get_op("while_loop"), (*values, *union), attrs))
