"""Run a graph: a precomputed schedule over array slots, with no tape and no
shape inference at run time.

`Executor(graph, fetches, feeds)` prunes the graph to what the fetches (and
the state writes, when asked) need, resolves each node's kernel once, and
then `run(feed_arrays)` walks the schedule. A failing node is reported with
its name, op and input shapes.

Buffers (with `plan_memory=True`): the first run for each set of feed shapes runs plainly and records
every value's shape and which outputs are views of their inputs; the memory
planner (tapeflow.graph.passes.memory) then gives the outputs of ufunc-style
ops reusable buffers, which later runs with those shapes write into with
`out=`. Fetched values, state writes, feeds, constants and Variables' arrays
never live in (or are overwritten as) a reused buffer.

>>> import numpy as np
>>> from tapeflow.graph.ir import Graph
>>> g = Graph("sq")
>>> x = g.add_input("x", (2,), "float32")
>>> g.outputs = g.add_node("multiply", [x, x], {}, [((2,), "float32")])
>>> Executor(g, g.outputs, [x]).run([np.array([2.0, 3.0], np.float32)])[0].tolist()
[4.0, 9.0]
"""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict

import numpy as np
import scipy.special

from tapeflow._kernels import flush_denormals_enter, flush_denormals_leave
from tapeflow.graph.fused_op import run_program
from tapeflow.graph.ir import ASSIGN, READ, Graph, GraphError, Value
from tapeflow.graph.passes.memory import PlanStep, plan_buffers
from tapeflow.ops.registry import get_op


class NodeError(RuntimeError):
    """An op failed while a graph ran; names the node, its op and input shapes."""


_READ, _ASSIGN, _KERNEL, _MULTI = 0, 1, 2, 3

# Ops that can write their result into a given array, as fn(*arrays, out=..., **attrs).
# All are elementwise, so each may also overwrite an input of the output's size.
OUT_KERNELS = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.true_divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "neg": np.negative,
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sqrt": np.sqrt,
    "square": np.square,
    "abs": np.abs,
    "sigmoid": scipy.special.expit,
    "relu": lambda x, out: np.maximum(x, 0, out=out),
    "fused_elementwise": lambda *arrays, out, program: run_program(arrays, program, out=out),
}

# Ops whose results may be views of their inputs (besides any the first run shows to be).
VIEW_OPS = frozenset(
    {
        "reshape",
        "transpose",
        "identity",
        "stop_gradient",
        "getitem",
        "split",
        "squeeze",
        "expand_dims",
        "broadcast_to",
        "cast",
    }
)

_MAX_PLANS = 8  # feed-shape signatures kept per executor


class Executor:
    """A compiled schedule for one (feeds, fetches) choice on a graph.

    With `plan_memory=True`, runs reuse planned output buffers (see the module
    docstring); off by default, as it has not yet measured faster on the CPU.
    """

    def __init__(
        self,
        graph: Graph,
        fetches: list[Value],
        feeds: list[Value],
        with_updates: bool = True,
        plan_memory: bool = False,
    ):
        self.graph = graph
        self.fetches = list(fetches)
        self.feeds = list(feeds)
        self.plan_memory = plan_memory
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
        self._escaping = set(self._fetch_slots)
        self._escaping.update(s for kind, _, ins, _, _ in self._steps if kind == _ASSIGN for s in ins)
        self._plans: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._plain = None

    def run(self, feed_arrays) -> list[np.ndarray]:
        """Run the schedule on the fed arrays; return the fetched arrays."""
        feed_arrays = list(feed_arrays)
        env = [None] * self._size
        for s, arr in zip(self._feed_slots, feed_arrays, strict=True):
            env[s] = arr
        for s, data in self._constants:
            env[s] = data
        if not self.plan_memory or not self._lock.acquire(blocking=False):  # busy in another thread: run plainly
            self._run_plain(env)
            return [env[s] for s in self._fetch_slots]
        try:
            key = tuple((np.shape(a), getattr(a, "dtype", None)) for a in feed_arrays)
            steps = self._plans.get(key)
            if steps is None:
                seen: dict = {}
                self._execute(env, self._steps, seen)
                self._plans[key] = self._planned_steps(seen)
                if len(self._plans) > _MAX_PLANS:
                    self._plans.popitem(last=False)
            else:
                self._plans.move_to_end(key)
                self._execute(env, steps)
            return [env[s] for s in self._fetch_slots]
        finally:
            self._lock.release()

    def _compile_plain(self) -> None:
        """The plain schedule, lean: state reads first (a read always precedes the writes of
        its variable), then kernels with their attributes and argument slots bound, and state writes."""
        self._reads = [(outs[0], what) for kind, what, ins, outs, node in self._steps if kind == _READ]
        self._plain, reads = [], []
        for kind, what, ins, outs, node in self._steps:
            if kind in (_KERNEL, _ASSIGN):
                reads.append(ins)
            if kind == _KERNEL:
                _, attrs, multi = what
                fn = get_op(node.op).bound_kernel("cpu", attrs)
                args = _arguments(ins)
                if multi:
                    dtypes = tuple(v.dtype.np for v in node.outputs)
                    self._plain.append((_MULTI, fn, args, outs, dtypes, node))
                else:
                    self._plain.append((_KERNEL, fn, args, outs[0], node.outputs[0].dtype.np, node))
            elif kind == _ASSIGN:
                self._plain.append((_ASSIGN, what, ins, None, None, node))
        # Liveness: after its last reader runs, a value's slot is cleared, so that the
        # array can be freed while the rest of the graph runs (fetched values are kept).
        last: dict[int, int] = {}
        for i, ins in enumerate(reads):
            for s in ins:
                last[s] = i
        keep = set(self._fetch_slots)
        frees: list[list[int]] = [[] for _ in self._plain]
        for s, i in last.items():
            if s not in keep:
                frees[i].append(s)
        self._plain = [(*step, tuple(f)) for step, f in zip(self._plain, frees, strict=True)]

    def _run_plain(self, env: list) -> None:
        if self._plain is None:
            self._compile_plain()
        for s, var in self._reads:
            env[s] = var._value
        flush = flush_denormals_enter()
        try:
            for kind, fn, args, out, dtype, node, frees in self._plain:
                if kind == _KERNEL:
                    try:
                        r = fn(*args(env))
                    except Exception as exc:  # noqa: BLE001 - re-raised with the node named
                        raise _node_error(node, list(args(env)), exc) from exc
                    if type(r) is not np.ndarray or (r.dtype is not dtype and r.dtype != dtype):
                        r = np.asarray(r, dtype=dtype)
                    env[out] = r
                elif kind == _MULTI:
                    try:
                        results = fn(*args(env))
                    except Exception as exc:  # noqa: BLE001 - re-raised with the node named
                        raise _node_error(node, list(args(env)), exc) from exc
                    for s, r, d in zip(out, results, dtype, strict=True):
                        env[s] = r if type(r) is np.ndarray and r.dtype == d else np.asarray(r, dtype=d)
                else:
                    fn._value = _as_state(env[args[0]], fn)
                for i in frees:
                    env[i] = None
        finally:
            flush_denormals_leave(flush)

    def _execute(self, env: list, steps: list, seen: dict | None = None) -> None:
        """Walk `steps`; with `seen`, record for each kernel step its arrays' shapes and aliases."""
        flush = flush_denormals_enter()
        try:
            for kind, what, ins, outs, node in steps:
                if kind == _KERNEL:
                    kernel, attrs, multi = what
                    arrays = [env[i] for i in ins]
                    try:
                        result = kernel(*arrays, **attrs)
                    except Exception as exc:  # noqa: BLE001 - re-raised with the node named
                        raise _node_error(node, arrays, exc) from exc
                    results = result if multi else (result,)
                    for s, r, v in zip(outs, results, node.outputs, strict=True):
                        env[s] = r if type(r) is np.ndarray and r.dtype == v.dtype.np else _conform(r, v)
                    if seen is not None:
                        seen[id(node)] = _observe(node, arrays, [env[s] for s in outs])
                elif kind == _READ:
                    env[outs[0]] = what._value
                else:
                    what._value = _as_state(env[ins[0]], what)
        finally:
            flush_denormals_leave(flush)

    def _planned_steps(self, seen: dict) -> list:
        """The schedule with reusable output buffers, from what the first run `seen`."""
        plan_steps, aliases = [], {}
        for kind, _, ins, outs, node in self._steps:
            spec = None
            if kind == _KERNEL:
                in_shapes, out_shapes, views = seen[id(node)]
                aliases.update((s, [ins[k] for k in found]) for s, found in zip(outs, views, strict=True) if found)
                if _can_write_out(node):
                    spec = (out_shapes[0], node.outputs[0].dtype.name)
            plan_steps.append(PlanStep(ins, outs, spec, in_place=spec is not None))
        plan = plan_buffers(plan_steps, self._escaping, aliases)
        flat = [np.empty(size, dtype) for size, dtype in plan.buffers]
        steps = []
        for step in self._steps:
            kind, what, ins, outs, node = step
            if kind != _KERNEL or outs[0] not in plan.buffer_of:
                steps.append(step)
                continue
            in_shapes, out_shapes, _ = seen[id(node)]
            out = flat[plan.buffer_of[outs[0]]].reshape(out_shapes[0])
            planned = _WithOut(OUT_KERNELS[node.op], what[0], what[1], out, in_shapes)
            steps.append((kind, (planned, {}, False), ins, outs, node))
        return steps


class _WithOut:
    """A kernel call that writes into a reused buffer, or runs the plain kernel if shapes differ."""

    __slots__ = ("fn", "kernel", "attrs", "out", "in_shapes")

    def __init__(self, fn, kernel, attrs, out, in_shapes):
        self.fn, self.kernel, self.attrs, self.out, self.in_shapes = fn, kernel, attrs, out, in_shapes

    def __call__(self, *arrays):
        if tuple(a.shape for a in arrays) != self.in_shapes:
            return self.kernel(*arrays, **self.attrs)
        return self.fn(*arrays, out=self.out, **self.attrs)


def _can_write_out(node) -> bool:
    if node.op not in OUT_KERNELS or len(node.outputs) != 1:
        return False
    dtype = node.outputs[0].dtype
    return dtype.kind == "f" and all(v.dtype is dtype for v in node.inputs)


def _observe(node, arrays, results) -> tuple:
    """(input shapes, output shapes, per output: the input positions it may share memory with)."""
    view_op = node.op in VIEW_OPS
    views = []
    for r in results:
        found = [
            k for k, a in enumerate(arrays) if isinstance(a, np.ndarray) and (view_op or np.may_share_memory(r, a))
        ]
        views.append(found)
    return tuple(np.shape(a) for a in arrays), [np.shape(r) for r in results], views


def _arguments(slots: tuple):
    """A function of the slot list giving the arrays in `slots`, as a tuple."""
    if len(slots) == 1:
        (slot,) = slots
        return lambda env: (env[slot],)
    return operator.itemgetter(*slots) if slots else lambda env: ()


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
    if type(array) is np.ndarray and array.dtype is value.dtype.np:  # the common case, checked without copies
        shape = array.shape
        if shape == value.shape:
            return array
        if len(shape) == len(value.shape):
            for want_dim, dim in zip(value.shape, shape):  # noqa: B905 - equal lengths checked above
                if want_dim is not None and want_dim != dim:
                    break
            else:
                return array
    if hasattr(array, "_value") and array._value is not None:
        array = array._value
    array = np.asarray(array)
    want = value.dtype.np
    if array.dtype != want:
        # floats to any float, integers to any integer or float; bool only to bool
        if array.dtype.kind + want.kind in ("ff", "ii", "iu", "ui", "uu", "if", "uf"):
            array = array.astype(want)
        else:
            raise TypeError(f"{graph_name}: feed '{value.name}' expects {value.dtype.name}, got {array.dtype}")
    if array.ndim != len(value.shape) or any(
        d is not None and d != a for d, a in zip(value.shape, array.shape, strict=True)
    ):
        raise ValueError(f"{graph_name}: feed '{value.name}' expects shape {value.type_string()}, got {array.shape}")
    return array
