"""Run a graph: a precomputed schedule over array slots, with no tape and no
shape inference at run time.

`Executor(graph, fetches, feeds)` prunes the graph to what the fetches (and
the state writes, when asked) need, resolves each node's kernel once, and
then `run(feed_arrays)` walks the schedule. A failing node is reported with
its name, op and input shapes.

>>> import numpy as np
>>> from tapeflow.graph.ir import Graph
>>> g = Graph("sq")
>>> x = g.add_input("x", (2,), "float32")
>>> g.outputs = g.add_node("multiply", [x, x], {}, [((2,), "float32")])
>>> Executor(g, g.outputs, [x]).run([np.array([2.0, 3.0], np.float32)])[0].tolist()
[4.0, 9.0]
"""

from __future__ import annotations

import numpy as np

from tapeflow._kernels import flush_denormals_enter, flush_denormals_leave
from tapeflow.graph.ir import ASSIGN, READ, Graph, GraphError, Value
from tapeflow.ops.registry import get_op


class NodeError(RuntimeError):
    """An op failed while a graph ran; names the node, its op and input shapes."""


_READ, _ASSIGN, _KERNEL = 0, 1, 2


class Executor:
    """A compiled schedule for one (feeds, fetches) choice on a graph."""

    def __init__(self, graph: Graph, fetches: list[Value], feeds: list[Value], with_updates: bool = True):
        self.graph = graph
        self.fetches = list(fetches)
        self.feeds = list(feeds)
        nodes = _needed_nodes(graph, self.fetches, self.feeds, with_updates)
        slot: dict[int, int] = {}

        def slot_of(v: Value) -> int:
            key = id(v)
            if key not in slot:
                slot[key] = len(slot)
            return slot[key]

        self._feed_slots = [slot_of(v) for v in self.feeds]
        fed = {id(v) for v in self.feeds}
        self._constants = [(slot_of(v), v.data) for v in graph.constants if id(v) not in fed]
        self._steps = []
        for node in nodes:
            ins = tuple(slot_of(v) for v in node.inputs)
            outs = tuple(slot_of(v) for v in node.outputs)
            if node.op == READ:
                self._steps.append((_READ, graph.state[node.attrs["variable"]], ins, outs, node))
            elif node.op == ASSIGN:
                self._steps.append((_ASSIGN, graph.state[node.attrs["variable"]], ins, outs, node))
            else:
                op = get_op(node.op)
                attrs = {k: a for k, a in node.attrs.items() if not k.startswith("_")}
                multi = op.num_outputs != 1
                self._steps.append((_KERNEL, (op.kernel("cpu"), attrs, multi), ins, outs, node))
        self._fetch_slots = [slot_of(v) for v in self.fetches]
        self._size = len(slot)

    def run(self, feed_arrays) -> list[np.ndarray]:
        """Run the schedule on the fed arrays; return the fetched arrays."""
        env = [None] * self._size
        for s, arr in zip(self._feed_slots, feed_arrays, strict=True):
            env[s] = arr
        for s, data in self._constants:
            env[s] = data
        flush = flush_denormals_enter()
        try:
            for kind, what, ins, outs, node in self._steps:
                if kind == _KERNEL:
                    kernel, attrs, multi = what
                    try:
                        result = kernel(*[env[i] for i in ins], **attrs)
                    except Exception as exc:  # noqa: BLE001 - re-raised with the node named
                        raise _node_error(node, [env[i] for i in ins], exc) from exc
                    if multi:
                        for s, r, v in zip(outs, result, node.outputs, strict=True):
                            env[s] = r if type(r) is np.ndarray and r.dtype == v.dtype.np else _conform(r, v)
                    else:
                        v = node.outputs[0]
                        env[outs[0]] = (
                            result if type(result) is np.ndarray and result.dtype == v.dtype.np else _conform(result, v)
                        )
                elif kind == _READ:
                    env[outs[0]] = what._value
                else:
                    what._value = _as_state(env[ins[0]], what)
        finally:
            flush_denormals_leave(flush)
        return [env[s] for s in self._fetch_slots]


def _conform(array, value) -> np.ndarray:
    return np.asarray(array, dtype=value.dtype.np)


def _as_state(array, variable) -> np.ndarray:
    array = np.asarray(array)
    if array.dtype != variable._value.dtype:
        array = array.astype(variable._value.dtype)
    return array


def _node_error(node, arrays, exc) -> NodeError:
    shapes = ", ".join(f"{a.dtype}{list(np.shape(a))}" if hasattr(a, "dtype") else type(a).__name__ for a in arrays)
    return NodeError(f"node '{node.name}' ({node.op}) with inputs ({shapes}) failed: {type(exc).__name__}: {exc}")


def _needed_nodes(graph: Graph, fetches, feeds, with_updates: bool) -> list:
    """The nodes the fetches depend on (stopping at fed values), in graph order;
    with `with_updates`, also every state write and what it needs."""
    fed = {id(v) for v in feeds}
    roots = list(fetches)
    needed: set[int] = set()
    if with_updates:
        for node in graph.nodes:
            if node.op == ASSIGN:
                needed.add(id(node))
                roots.extend(node.inputs)
    stack = [v for v in roots if id(v) not in fed]
    while stack:
        v = stack.pop()
        node = v.producer
        if node is None or id(node) in needed:
            continue
        needed.add(id(node))
        stack.extend(u for u in node.inputs if id(u) not in fed)
    for v in fetches:
        if v.kind == "input" and id(v) not in fed:
            raise GraphError(f"{graph.name}: fetch '{v.name}' is a graph input, so it must be fed")
    missing = []
    for node in graph.nodes:
        if id(node) in needed:
            missing.extend(v.name for v in node.inputs if v.kind == "input" and id(v) not in fed)
    if missing:
        raise GraphError(
            f"{graph.name}: the fetches need inputs {sorted(set(missing))}, which are not fed; "
            f"fed: {[v.name for v in feeds]}"
        )
    return [node for node in graph.nodes if id(node) in needed]


def check_feed(graph_name: str, value: Value, array) -> np.ndarray:
    """`array` as the fed value, or a ValueError naming the value, shapes and dtypes."""
    if hasattr(array, "_value") and array._value is not None:
        array = array._value
    array = np.asarray(array)
    want = value.dtype.np
    if array.dtype != want:
        if np.can_cast(array.dtype, want, casting="same_kind") or array.dtype.kind in "iub" and want.kind in "iu":
            array = array.astype(want)
        else:
            raise TypeError(f"{graph_name}: feed '{value.name}' expects {value.dtype.name}, got {array.dtype}")
    if array.ndim != len(value.shape) or any(d is not None and d != a for d, a in zip(value.shape, array.shape)):
        raise ValueError(f"{graph_name}: feed '{value.name}' expects shape {value.type_string()}, got {array.shape}")
    return array

