"""The `cond`, `while_loop` and `while_loop_grad` ops of frozen graphs: their shape rules,
kernels (which run the branch, condition and body subgraphs a tracer recorded, see
`tapeflow.graph.subgraphs`) and gradients.

Gradients: the VJP of a cond is a cond of the branches' VJPs; the VJP of a
while loop is a `while_loop_grad` node that replays the forward iterations and
runs the body's gradient graph backwards through them (first order only).

>>> import tapeflow as tp
>>> f = tp.function(lambda x: tp.cond(tp.sum(x) > 0, lambda: x * 2.0, lambda: -x))
>>> f(tp.tensor([1.0, 2.0])).numpy().tolist(), f(tp.tensor([-1.0, -2.0])).numpy().tolist()
([2.0, 4.0], [1.0, 2.0])
"""

from __future__ import annotations

import numpy as np

from tapeflow import dtypes
from tapeflow.autodiff import GradientTape
from tapeflow.devices import device
from tapeflow.graph.file_format.codec import MAX_ELEMENTS
from tapeflow.graph.ir import GraphError
from tapeflow.graph.runnable import Graph
from tapeflow.graph.structure import TensorSpec
from tapeflow.graph.subgraphs import merge_branch_specs
from tapeflow.graph.trace import trace
from tapeflow.ops.control import cond
from tapeflow.ops.core import zeros_like
from tapeflow.ops.registry import apply, as_tensor, defop, get_op, wrap_host
from tapeflow.tensor import Tensor, eager_scope


# ------------------------------------------------------------ subgraphs
def run_subgraph(graph: Graph, arrays) -> list:
    """Run a branch or body graph on arrays (its executor is built once)."""
    return graph.execute(list(arrays))


def replay(graph: Graph, inputs) -> list:
    """Apply a graph's nodes as ops to `inputs` (so tapes and tracers see them); its
    constants join them on their device."""
    env = {id(v): t for v, t in zip(graph.inputs, inputs, strict=True)}
    where = inputs[0].device if len(inputs) else graph.device
    for c in graph.constants:
        env[id(c)] = wrap_host(c.data, where)
    for node in graph.nodes:
        op = get_op(node.op)
        outs = apply(op, tuple(env[id(v)] for v in node.inputs), node.public_attrs)
        outs = (outs,) if op.num_outputs == 1 else outs
        env.update((id(v), o) for v, o in zip(node.outputs, outs, strict=True))
    return [env[id(v)] for v in graph.outputs]


def replay_gradient(graph: Graph, inputs, output_grads) -> list:
    """Gradients of the graph's float outputs (weighted by output_grads) with
    respect to its inputs; zeros for unconnected float inputs, None for others."""
    with GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(list(inputs))
        outs = replay(graph, inputs)
    pairs = [(o, g) for o, g in zip(outs, output_grads, strict=True) if o.dtype.kind == "f"]
    if not pairs:
        return [zeros_like(t) if t.dtype.kind == "f" else None for t in inputs]
    grads = tape.gradient(
        [o for o, _ in pairs], list(inputs), output_gradients=[g for _, g in pairs], unconnected_gradients="zero"
    )
    return [g if g is None or isinstance(g, Tensor) else as_tensor(g) for g in grads]


# ------------------------------------------------------------ shape rules
def _fits(shape, declared) -> bool:
    """Whether a shape fits a declared one (None there matches any size)."""
    return len(shape) == len(declared) and all(d is None or s == d for s, d in zip(shape, declared, strict=True))


def _check_subgraph(op: str, name: str, graph, tensors, mapping, captures) -> None:
    """`graph` must be a subgraph taking `tensors` then the captures `mapping` picks."""
    if not isinstance(graph, Graph):
        raise TypeError(f"{op}: {name} must be a graph, got {type(graph).__name__}")
    if not isinstance(mapping, tuple | list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(captures) for i in mapping
    ):
        raise ValueError(f"{op}: the capture map of {name} {mapping!r:.80} must hold indices below {len(captures)}")
    fed = list(tensors) + [captures[i] for i in mapping]
    if len(graph.inputs) != len(fed):
        raise ValueError(f"{op}: {name} takes {len(graph.inputs)} inputs but is fed {len(fed)}")
    for v, t in zip(graph.inputs, fed, strict=True):
        if v.dtype is not t.dtype or not _fits(tuple(t.shape), v.shape):
            raise ValueError(f"{op}: {name} input '{v.name}' is {v.type_string()}, fed {t.dtype.name}{list(t.shape)}")


def _check_declared(op: str, output_specs, computed) -> list:
    """The computed output specs, once the node's declared `output_specs` agree with them."""
    try:
        declared = tuple((tuple(shape), dtypes.as_dtype(d).name) for shape, d in output_specs)
    except (TypeError, ValueError):
        raise ValueError(f"{op}: output_specs {output_specs!r:.120} must list (shape, dtype) pairs") from None
    if declared != tuple(computed):
        raise ValueError(
            f"{op}: output_specs {declared!r:.200} disagree with what the subgraphs compute {tuple(computed)!r:.200}"
        )
    return [(shape, dtypes.as_dtype(d)) for shape, d in computed]


# ------------------------------------------------------------ cond
def _cond_infer(pred, *captures, then_graph, else_graph, then_map, else_map, output_specs, **_):
    if pred.dtype.kind != "b" or tuple(pred.shape) not in ((), (1,)):
        raise TypeError(f"cond: the predicate must be a scalar bool, got {pred.dtype.name}{list(pred.shape)}")
    _check_subgraph("cond", "then_graph", then_graph, [], then_map, captures)
    _check_subgraph("cond", "else_graph", else_graph, [], else_map, captures)
    return _check_declared("cond", output_specs, merge_branch_specs(then_graph, else_graph))


def _cond_vjp(gs, inputs, outputs, then_graph, else_graph, then_map, else_map, output_specs, structure):
    pred, caps = inputs[0], inputs[1:]
    gs = [g if g is not None else zeros_like(o) for g, o in zip(gs, outputs, strict=True)]
    wanted = [j for j, c in enumerate(caps) if c.dtype.kind == "f"]
    if not wanted:
        return [None] * len(inputs)

    def branch(graph, mapping):
        def fn():
            grads = replay_gradient(graph, [caps[i] for i in mapping], gs)
            out = []
            for j in wanted:
                total = None
                for k, i in enumerate(mapping):
                    if i == j and grads[k] is not None:
                        total = grads[k] if total is None else total + grads[k]
                out.append(total if total is not None else zeros_like(caps[j]))
            return tuple(out)

        return fn

    result = cond(pred, branch(then_graph, then_map), branch(else_graph, else_map))
    result = result if isinstance(result, tuple) else (result,)
    grads = [None] * len(inputs)
    for j, g in zip(wanted, result, strict=True):
        grads[1 + j] = g
    return grads


@defop("cond", infer=_cond_infer, vjp=_cond_vjp, num_outputs=None)
def _COND(pred, *captures, then_graph, else_graph, then_map, else_map, output_specs, structure):
    graph, mapping = (then_graph, then_map) if bool(pred) else (else_graph, else_map)
    return tuple(run_subgraph(graph, [captures[i] for i in mapping]))


# ------------------------------------------------------------ while
def _loop(cond_graph, body_graph, cond_map, body_map, max_iter, values, caps, trajectory=None):
    i = 0
    while max_iter is None or i < max_iter:
        (flag,) = run_subgraph(cond_graph, list(values) + [caps[j] for j in cond_map])
        if not bool(flag):  # a scalar, read where it lives
            break
        if trajectory is not None:
            trajectory.append(values)
        values = run_subgraph(body_graph, list(values) + [caps[j] for j in body_map])
        i += 1
        for k, value in enumerate(values):
            if np.size(value) > MAX_ELEMENTS:
                raise GraphError(
                    f"while_loop: loop variable {k} grew to shape {list(np.shape(value))} after {i} iterations, "
                    f"past the cap of {MAX_ELEMENTS} elements"
                )
    return values


def _while_infer(*inputs, n_vars, cond_graph, body_graph, cond_map, body_map, maximum_iterations, output_specs):
    if not isinstance(n_vars, int) or isinstance(n_vars, bool) or not 0 < n_vars <= len(inputs):
        raise ValueError(f"while_loop: n_vars must be an int in [1, {len(inputs)}], got {n_vars!r:.40}")
    _check_iterations(maximum_iterations)
    values, caps = inputs[:n_vars], inputs[n_vars:]
    _check_subgraph("while_loop", "cond_graph", cond_graph, values, cond_map, caps)
    _check_subgraph("while_loop", "body_graph", body_graph, values, body_map, caps)
    flag = cond_graph.outputs
    if len(flag) != 1 or flag[0].dtype.kind != "b" or flag[0].shape not in ((), (1,)):
        raise TypeError("while_loop: cond_graph must return one scalar bool")
    if len(body_graph.outputs) != n_vars or any(
        o.dtype is not v.dtype or not _fits(o.shape, tuple(v.shape))
        for o, v in zip(body_graph.outputs, values, strict=True)
    ):
        raise ValueError("while_loop: body_graph must return the loop variables' shapes and dtypes")
    return _check_declared("while_loop", output_specs, [(tuple(v.shape), v.dtype.name) for v in values])


def _check_iterations(maximum_iterations) -> None:
    if maximum_iterations is not None and (
        not isinstance(maximum_iterations, int) or isinstance(maximum_iterations, bool) or maximum_iterations < 0
    ):
        raise ValueError(f"while_loop: maximum_iterations must be an int >= 0 or None, got {maximum_iterations!r:.40}")


def _while_vjp(gs, inputs, outputs, **attrs):
    gs = [g if g is not None else zeros_like(o) for g, o in zip(gs, outputs, strict=True)]
    grads = apply(_WHILE_GRAD, tuple(inputs) + tuple(gs), {**attrs, "body_grad_graph": _body_gradient_graph(attrs)})
    return [g if t.dtype.kind == "f" else None for g, t in zip(grads, inputs, strict=True)]


@defop("while_loop", infer=_while_infer, vjp=_while_vjp, num_outputs=None)
def _WHILE(*inputs, cond_graph, body_graph, cond_map, body_map, n_vars, maximum_iterations, output_specs):
    values, caps = list(inputs[:n_vars]), inputs[n_vars:]
    return tuple(_loop(cond_graph, body_graph, cond_map, body_map, maximum_iterations, values, caps))


def _body_gradient_graph(attrs) -> Graph:
    """A standalone graph: (loop vars, body captures, output grads) -> grads of the body inputs."""
    body = attrs["body_graph"]
    specs = [TensorSpec(v.shape, v.dtype) for v in body.inputs]
    out_specs = [TensorSpec(v.shape, v.dtype) for v in body.outputs]

    def body_grad(inputs, out_grads):
        grads = replay_gradient(body, inputs, out_grads)
        return [g if g is not None else zeros_like(t) for g, t in zip(grads, inputs, strict=True)]

    # a standalone graph, not part of the one being traced, on the device the body runs on
    with eager_scope(), device(body.device):
        return trace(body_grad, (specs, out_specs), name="while_body_grad")


def _while_grad_infer(*inputs, n_vars, body_grad_graph, **attrs):
    if not isinstance(n_vars, int) or isinstance(n_vars, bool) or not 0 < n_vars < len(inputs):
        raise ValueError(f"while_loop_grad: n_vars must be an int in [1, {len(inputs)}), got {n_vars!r:.40}")
    forward = inputs[: len(inputs) - n_vars]
    _while_infer(*forward, n_vars=n_vars, **attrs)
    if (
        not isinstance(body_grad_graph, Graph)
        or len(body_grad_graph.inputs) != n_vars + len(attrs["body_map"]) + n_vars
    ):
        raise ValueError("while_loop_grad: body_grad_graph must take the loop variables, captures and gradients")
    return [(t.shape, t.dtype) for t in forward]


@defop("while_loop_grad", infer=_while_grad_infer, num_outputs=None)
def _WHILE_GRAD(
    *inputs, cond_graph, body_graph, cond_map, body_map, n_vars, maximum_iterations, output_specs, body_grad_graph
):
    n_in = len(inputs) - n_vars
    values, caps, out_grads = list(inputs[:n_vars]), inputs[n_vars:n_in], list(inputs[n_in:])
    trajectory: list = []
    _loop(cond_graph, body_graph, cond_map, body_map, maximum_iterations, values, caps, trajectory)
    cap_grads = [np.zeros_like(c) for c in caps]
    g_vars = out_grads
    for step_values in reversed(trajectory):
        body_caps = [caps[j] for j in body_map]
        res = run_subgraph(body_grad_graph, list(step_values) + body_caps + g_vars)
        g_vars = list(res[:n_vars])
        for k, j in enumerate(body_map):
            cap_grads[j] = cap_grads[j] + res[n_vars + k]
    return tuple(g_vars) + tuple(cap_grads)
