"""Run a graph: a precomputed schedule over array slots, with no tape and no
shape inference at run time.

`Executor(graph, fetches, feeds)` prunes the graph to what the fetches (and
the state writes, when asked) need and binds each node's kernel once
(`OpDef.bound_kernel`, on the node's device); `run(feed_arrays)` then walks the
schedule inside `tapeflow.backends.numerics`. Each value's slot is cleared after its
last reader, so its array can be freed while the rest of the graph runs. A failing node
is reported with its name, op and input shapes. A run given `cancelled` (a function of
no arguments) asks it before each node and stops with `RunCancelled` once it answers
true: how a computation whose result is no longer wanted (a late replica's gradient)
gives its time back. A subclass changes how each node runs by overriding `run_node`.

>>> import numpy as np
>>> from tapeflow.graph.ir import GraphIR
>>> g = GraphIR("sq")
>>> x = g.add_input("x", (2,), "float32")
>>> g.outputs = g.add_node("multiply", [x, x], {}, [((2,), "float32")])
>>> Executor(g, g.outputs, [x]).run([np.array([2.0, 3.0], np.float32)])[0].tolist()
[4.0, 9.0]
"""

from __future__ import annotations

import contextlib
import functools
import math
import operator
import time

import numpy as np

from tapeflow.backends import backend, numerics
from tapeflow.backends.common import PENDING, check_pending, recording_at
from tapeflow.devices import Device, parse_device
from tapeflow.graph.ir import ASSIGN, QUEUE_OPS, READ, SIDE_EFFECT_OPS, GraphError, GraphIR, Value
from tapeflow.ops.profiling import HOOKS
from tapeflow.ops.registry import get_op
from tapeflow.ops.sparse import in_place_rows, sole_owner


class NodeError(RuntimeError):
    """An op failed while a graph ran; names the node, its op and input shapes."""


_ASSIGN, _KERNEL, _MULTI, _IN_PLACE, _CHAIN = 0, 1, 2, 3, 4


class RunCancelled(RuntimeError):
    """A graph run stopped between two nodes because its `cancelled` check said so; state
    writes of the nodes before the stop have happened."""


class Executor:
    """A compiled schedule for one (feeds, fetches) choice on a graph."""

    def __init__(self, graph: GraphIR, fetches: list[Value], feeds: list[Value], with_updates: bool = True):
        self.graph = graph
        self.fetches = list(fetches)
        self.feeds = list(feeds)
        self._backend = backend(graph.device.family)
        nodes = _needed_nodes(graph, self.fetches, self.feeds, with_updates)
        devices = _node_devices(graph, nodes)
        self.fetch_devices = [graph.value_device(v) for v in self.fetches]
        # one device of every family the run touches, whose numerics are set around the
        # run (a node on another device of that family switches for its own call)
        entered = {graph.device.family: graph.device}
        for d in devices.values():
            entered.setdefault(d.family, d)
        self._numerics_devices = tuple(entered.values())
        # the base run_node is the kernel call itself: only an override is bound into the steps
        custom_run_node = type(self).run_node is not Executor.run_node
        slot: dict = {}
        constants: dict = {}  # slot -> (constant, the device it is copied to)

        def slot_of(v: Value, device: Device | None = None) -> int:
            if v.kind != "const" or id(v) in fed:
                return slot.setdefault(id(v), len(slot))
            # a constant gets a copy of its own on each device that reads it
            device = device or graph.device
            key = (id(v), device)
            if key not in slot:
                slot[key] = len(slot)
                constants[slot[key]] = (v, device)
            return slot[key]

        fed = {id(v) for v in self.feeds}
        self._feed_slots = [slot_of(v) for v in self.feeds]
        # State reads come first: a read always precedes the writes of its variable.
        self._reads = [(slot_of(n.outputs[0]), graph.state[n.attrs["variable"]]) for n in nodes if n.op == READ]
        steps, reads = [], []
        for node in nodes:
            if node.op == READ:
                continue
            device = devices[id(node)]
            ins = tuple(slot_of(v, device) for v in node.inputs)
            reads.append(ins)
            if node.op == ASSIGN:
                variable = graph.state[node.attrs["variable"]]
                steps.append((_ASSIGN, variable, ins, None, None, node, _conform_on(variable._device)))
                continue
            op = get_op(node.op)
            fn = op.bound_kernel(device.family, _kernel_attrs(graph, node))
            if device != entered[device.family]:
                fn = _switched_to(device, fn)
            outs = tuple(slot_of(v) for v in node.outputs)
            where = graph.value_device(node.outputs[0]) if node.outputs else device
            conform = _conform_on(where)
            dtypes = tuple(v.dtype.np for v in node.outputs)
            if not backend(where.family).HOLDS_NUMPY:  # a kernel's host result is copied in too
                fn = _on_device(fn, conform, dtypes if op.num_outputs != 1 else dtypes[0])
            if not backend(device.family).HOLDS_NUMPY:  # the checks it defers on the device name the node
                fn = _recording_at(node, fn)
            owned = None
            if custom_run_node:
                fn = functools.partial(self.run_node, node, fn)
            else:  # an update of arrays only variables hold writes them in place
                owned = _owned_arrays_target(
                    graph, node, nodes, self.fetches, device.family, _kernel_attrs(graph, node), fn
                )
            if owned is not None:
                single = op.num_outputs == 1
                # the checks an in-place form defers on a device name the node (a host's raise at once)
                failed = None if backend(device.family).HOLDS_NUMPY else _failed_node(node)
                steps.append(
                    (_IN_PLACE, (owned, failed), _arguments(ins), outs[0] if single else outs, dtypes, node, conform)
                )
            elif op.num_outputs != 1:
                steps.append((_MULTI, fn, _arguments(ins), outs, dtypes, node, conform))
            else:
                steps.append((_KERNEL, fn, _arguments(ins), outs[0], dtypes[0], node, conform))
        self._fetch_slots = [slot_of(v) for v in self.fetches]
        self._constants = [(s, backend(d.family).from_host(v.data, d.index)) for s, (v, d) in constants.items()]
        self._size = len(slot)
        keep = set(self._fetch_slots)
        self._steps = _with_frees(steps, reads, keep)
        # the schedule of runs nobody observes node by node: chains of dense layers as one step
        chained, chained_reads = _dense_chains(self._backend, steps, reads, keep)
        self._chained_steps = self._steps if chained is steps else _with_frees(chained, chained_reads, keep)
        # a run making large arrays takes their data from blocks earlier runs gave back (state
        # reads hand out the variables' own arrays)
        reusing = getattr(self._backend, "reusing_blocks", None)
        large = any(_known_bytes(v) >= _LARGE_BYTES for node in nodes if node.op != READ for v in node.outputs)
        self._reusing = reusing if reusing is not None and large else None
        # one device's numerics are set directly, without a context object per run
        (only,) = self._numerics_devices if len(self._numerics_devices) == 1 else (None,)
        self._numerics_of_one = None if only is None else (backend(only.family), only.index)
        # the backend's compiled run loop, for runs nobody observes or cancels
        compiled = getattr(self._backend, "Schedule", None)
        self._schedule = None
        if compiled is not None and self._backend.HOLDS_NUMPY and only is not None:
            kernels = self._numerics_of_one[0]
            enter, leave = functools.partial(kernels.enter_numerics, only.index), kernels.leave_numerics
            if self._reusing is not None:
                enter, leave = _reusing_blocks_too(enter, leave, self._reusing)
            self._schedule = compiled(
                self._size,
                self._feed_slots,
                self._constants,
                self._reads,
                self._chained_steps,
                self._fetch_slots,
                enter=enter,
                leave=leave,
                run_step=_run_step,
                run_layers=_run_layers,
                failed=_failed_step,
                kernel_kind=_KERNEL,
                chain_kind=_CHAIN,
            )

    def run(self, feed_arrays, cancelled=None) -> list[np.ndarray]:
        """Run the schedule on the fed arrays; return the fetched arrays. With `cancelled`,
        raise `RunCancelled` before the first node run after it returns true."""
        schedule = self._schedule
        if schedule is not None and cancelled is None and HOOKS.node is None:
            fetched = schedule.run(feed_arrays)
            if PENDING.flags:  # checks deferred on a device: one read per run
                check_pending(deferrable=True)
            return fetched
        env = [None] * self._size
        if self._backend.HOLDS_NUMPY:
            for s, arr in zip(self._feed_slots, feed_arrays, strict=True):
                env[s] = arr
        else:
            kernels, index = self._backend, self.graph.device.index
            for s, arr in zip(self._feed_slots, feed_arrays, strict=True):
                env[s] = kernels.from_host(arr, index)
        for s, data in self._constants:
            env[s] = data
        for s, var in self._reads:
            env[s] = var._value
        observer = HOOKS.node
        one, reusing = self._numerics_of_one, self._reusing
        if one is not None and reusing is None and observer is None and cancelled is None:
            # the common case, with the fewest Python calls
            device_kernels, index = one
            state = device_kernels.enter_numerics(index)
            try:
                self._run_steps(env, self._chained_steps, None, None)
            finally:
                device_kernels.leave_numerics(state)
        else:
            steps = self._chained_steps if observer is None and cancelled is None else self._steps
            with numerics(*self._numerics_devices), reusing() if reusing is not None else contextlib.nullcontext():
                self._run_steps(env, steps, observer, cancelled)
        if PENDING.flags:  # checks deferred on a device: one read per run
            check_pending(deferrable=True)
        return [env[s] for s in self._fetch_slots]

    def _run_steps(self, env, steps, observer, cancelled) -> None:
        """Run `steps` on the slot list `env`, inside the devices' numerics, each node shown
        to `observer` and `cancelled` asked before each (either may be None)."""
        for step in steps:
            kind, fn, args, out, dtype, node, conform, frees = step
            if cancelled is not None and cancelled():
                raise RunCancelled(f"graph {self.graph.name!r}: run cancelled before node {node.name!r}")
            if observer is not None:
                start = time.perf_counter_ns()
            r = _run_step(env, step)
            if observer is not None:
                observer(self.graph, node, args(env) if kind != _ASSIGN else (env[args[0]],), r, start)
            for i in frees:
                env[i] = None

    def run_node(self, node, kernel, *arrays):
        """The outputs of one node (an array, or a tuple of them for a multi-output op):
        `kernel`, its op's kernel bound to its attrs and device when the executor was built,
        called on its input arrays. Override it to observe or change how each node runs (as
        torch.fx's `Interpreter.run_node`); state reads and writes are not kernel calls and
        do not pass through it. This base method is the kernel call itself, so the run loop
        calls kernels directly; an override is bound into every node's step when the
        executor is built (and no node then writes its inputs in place).

        >>> import numpy as np
        >>> from tapeflow.graph.ir import GraphIR
        >>> class Logged(Executor):
        ...     def run_node(self, node, kernel, *arrays):
        ...         print(node.op, [a.shape for a in arrays])
        ...         return kernel(*arrays)
        >>> g = GraphIR("sq")
        >>> x = g.add_input("x", (2,), "float32")
        >>> g.outputs = g.add_node("multiply", [x, x], {}, [((2,), "float32")])
        >>> Logged(g, g.outputs, [x]).run([np.ones(2, np.float32)])[0].tolist()
        multiply [(2,), (2,)]
        [1.0, 1.0]
        """
        return kernel(*arrays)


def _reusing_blocks_too(enter, leave, reusing):
    """`enter` and `leave` of a run's numerics, with the backend's `reusing` context (array data
    from blocks earlier runs gave back) entered inside them."""

    def enter_both():
        state = enter()
        blocks = reusing()
        try:
            blocks.__enter__()
        except BaseException:
            leave(state)
            raise
        return state, blocks

    def leave_both(states):
        state, blocks = states
        try:
            blocks.__exit__(None, None, None)
        finally:
            leave(state)

    return enter_both, leave_both


def _run_step(env, step):
    """Run one step of a schedule on the slot list `env`; its result (an array, or a
    tuple of them for a multi-output node)."""
    kind, fn, args, out, dtype, node, conform, _ = step
    if kind == _KERNEL:
        r = env[out] = _kernel_result(env, fn, args, dtype, node, conform)
    elif kind == _CHAIN:
        chain, layers = fn
        r = chain(*args(env))
        env[out] = r if r is not None else _run_layers(env, layers)
    elif kind == _IN_PLACE:
        r = _write_in_place(env, args, fn, node)
        if type(out) is tuple:
            for s, one in zip(out, r, strict=True):
                env[s] = one
        else:
            env[out] = r
    elif kind == _MULTI:
        try:
            r = fn(*args(env))
        except Exception as exc:  # noqa: BLE001 - re-raised with the node named
            raise _node_error(node, list(args(env)), exc) from exc
        for s, one, d in zip(out, r, dtype, strict=True):
            env[s] = one if type(one) is np.ndarray and one.dtype == d else conform(one, d)
    else:
        if PENDING.flags:  # checks deferred on a device pass before any variable changes
            check_pending(deferrable=True)
        r = fn._value = conform(env[args[0]], fn.dtype.np)
    return r


def _with_frees(steps: list, reads: list, keep: set) -> list:
    """The steps, each with the slots to clear after it: a value's slot is cleared after its
    last reader runs (fetched values, in `keep`, are kept; after the last step the whole list
    goes, so it clears none)."""
    last: dict[int, int] = {}
    for i, ins in enumerate(reads):
        for s in ins:
            last[s] = i
    frees: list[list[int]] = [[] for _ in steps]
    for s, i in last.items():
        if s not in keep and i + 1 < len(steps):
            frees[i].append(s)
    return [(*step, tuple(f)) for step, f in zip(steps, frees, strict=True)]


def _dense_chains(kernels, steps: list, reads: list, keep: set) -> tuple[list, list]:
    """(steps, reads) with each run of two or more dense layers (`fused_matmul` kernels), each
    fed only by the one before it, as one step of the backend's `dense_chain`, which takes
    the first layer's input and every layer's weights and biases and gives the last
    layer's output. The same lists where the backend has no such kernel or no run is found."""
    dense_chain = getattr(kernels, "dense_chain", None)
    if dense_chain is None:
        return steps, reads
    readers: dict[int, int] = {}
    for ins in reads:
        for s in ins:
            readers[s] = readers.get(s, 0) + 1

    def is_layer(i: int) -> bool:
        return steps[i][0] == _KERNEL and steps[i][5].op == "fused_matmul" and len(reads[i]) == 3

    def feeds_next(i: int) -> bool:
        out = steps[i][3]
        return is_layer(i + 1) and reads[i + 1][0] == out and readers[out] == 1 and out not in keep

    chained, chained_reads, i = [], [], 0
    while i < len(steps):
        end = i
        if is_layer(i):
            while end + 1 < len(steps) and end - i + 1 < kernels.DENSE_CHAIN_MAX and feeds_next(end):
                end += 1
        chain = dense_chain([step[1] for step in steps[i : end + 1]]) if end > i else None
        if chain is None:
            chained.append(steps[i])
            chained_reads.append(reads[i])
            i += 1
            continue
        layers = steps[i : end + 1]
        slots = (reads[i][0], *(s for ins in reads[i : end + 1] for s in ins[1:]))
        inner = tuple(step[3] for step in layers[:-1])
        last = layers[-1]
        chained.append((_CHAIN, (chain, tuple(layers)), _arguments(slots), last[3], last[4], last[5], last[6]))
        chained_reads.append(slots + inner)  # the layers' own outputs are cleared after it too
        i = end + 1
    if len(chained) == len(steps):
        return steps, reads
    return chained, chained_reads


def _run_layers(env, layers) -> np.ndarray:
    """The last output of dense layers run one by one, as kernel steps (a chain's inputs that
    its one-call kernel does not take)."""
    for _, fn, args, out, dtype, node, conform in layers:
        r = env[out] = _kernel_result(env, fn, args, dtype, node, conform)
    return r


def _failed_step(env, step, exc) -> Exception:
    """The error a kernel step's failure is raised as: a NodeError naming its node."""
    return _node_error(step[5], list(step[2](env)), exc)


def _kernel_result(env, fn, args, dtype, node, conform) -> np.ndarray:
    """A kernel step's output: `fn` on its arguments' arrays, as an array of `dtype` on its
    device, or the node's error."""
    try:
        r = fn(*args(env))
    except Exception as exc:  # noqa: BLE001 - re-raised with the node named
        raise _node_error(node, list(args(env)), exc) from exc
    if type(r) is not np.ndarray or (r.dtype is not dtype and r.dtype != dtype):
        r = conform(r, dtype)
    return r


# Arrays from this size up are worth a kept block (smaller ones the C allocator keeps itself).
_LARGE_BYTES = 1 << 18


def _known_bytes(value: Value) -> int:
    """The size of a value's array, its unknown dimensions taken as 1."""
    return math.prod(d or 1 for d in value.shape) * value.dtype.np.itemsize if value.shape is not None else 0


def _kernel_attrs(graph: GraphIR, node) -> dict:
    """The attrs a node's kernel is bound to: its public attrs, except that a queue op's
    `queue` (a name) becomes the queue the graph binds to that name."""
    attrs = node.public_attrs
    if node.op not in QUEUE_OPS:
        return attrs
    name = attrs["queue"]
    queue = graph.queues.get(name)
    if queue is None:
        raise GraphError(
            f"{graph.name}: node '{node.name}' ({node.op}) uses queue {name!r}, which is bound to no queue; "
            f"load the graph with tp.load_graph(path, queues={{{name!r}: queue}})"
        )
    return {**attrs, "queue": queue}


def _node_devices(graph: GraphIR, nodes) -> dict[int, Device]:
    """id(node) -> the device of this process that runs it, each checked to exist here (and
    so is the device a transfer copies to)."""
    found = {}
    for node in nodes:
        try:
            found[id(node)] = parse_device(graph.node_device(node))
            if node.outputs:
                parse_device(graph.value_device(node.outputs[0]))
        except ValueError as err:
            raise GraphError(f"{graph.name}: node '{node.name}' ({node.op}) cannot run: {err}") from None
    return found


def _conform_on(device: Device):
    """The backend's `conform` for results that live on `device`."""
    return functools.partial(backend(device.family).conform, index=device.index)


def _on_device(fn, conform, dtypes):
    """`fn` with its result (a tuple of them where `dtypes` is a tuple) made arrays of the
    output device: a kernel on an accelerator may give a host array, which the run loop
    would otherwise take as final."""
    if isinstance(dtypes, tuple):
        return lambda *arrays: tuple(conform(r, d) for r, d in zip(fn(*arrays), dtypes, strict=True))
    return lambda *arrays: conform(fn(*arrays), dtypes)


def _recording_at(node, fn):
    """`fn` with the checks it defers on a device failing as the node would on the host."""
    failed = _failed_node(node)

    def run(*arrays):
        with recording_at(failed):
            return fn(*arrays)

    return run


def _failed_node(node):
    """The node's error for a check of its inputs that failed on a device (read later)."""
    shapes = [_StaticShape(v) for v in node.inputs]
    return lambda exc: _node_error(node, shapes, exc)


class _StaticShape:
    """A graph value's dtype and shape, standing for its array in an error message."""

    def __init__(self, value: Value):
        self.dtype = value.dtype.np
        self.shape = tuple(value.shape)


def _switched_to(device: Device, fn):
    """`fn` run with the numerics of `device` (a device of a family the run entered for
    another index), restoring them after."""

    def run(*arrays):
        with numerics(device):
            return fn(*arrays)

    return run


# Ops that give new values of arrays they are given (a scatter, an optimizer step), with the form
# that writes those arrays themselves: op name -> (how many leading inputs are such arrays, each
# the same-numbered output's; that form, from the backend's family and the node's attrs).
_IN_PLACE_FORMS = {
    "scatter_update": (1, lambda family, attrs: in_place_rows),
    "sparse_adam_update": (3, lambda family, attrs: _bound(backend(family), "sparse_adam_update_in_place", attrs)),
    "adam_update": (3, lambda family, attrs: _bound(backend(family), "adam_update_in_place", attrs)),
    "adamw_update": (3, lambda family, attrs: _bound(backend(family), "adamw_update_in_place", attrs)),
    "sgd_momentum_update": (2, lambda family, attrs: _bound(backend(family), "sgd_momentum_update_in_place", attrs)),
    "sgd_matmul_update": (1, lambda family, attrs: _bound(backend(family), "sgd_matmul_update_in_place", attrs)),
}


def _bound(module, name: str, attrs: dict):
    fn = getattr(module, name, None)
    return None if fn is None else functools.partial(fn, **attrs)


def _owned_arrays_target(graph: GraphIR, node, nodes, fetches, family: str, attrs: dict, kernel):
    """(the in-place form of a node that has one, and for each input position it may write, the
    position and the Variable that holds the array there, or None): an array that is a
    variable's read value, read by no later node and not fetched, whose new value the node's
    output writes back to that variable. None where no array is such, or the backend has no
    in-place form. A fused elementwise program writes into the first such input of its
    result's shape and dtype; the other ops into their leading inputs."""
    later = nodes[nodes.index(node) + 1 :]

    def owner(table: Value, result: Value) -> str | None:
        reader = table.producer
        name = reader.attrs["variable"] if reader is not None and reader.op == READ else None
        if (
            name is None
            or any(f is table for f in fetches)
            or sum(t is table for t in node.inputs) > 1
            or any(table in n.inputs for n in later)
            or not any(n.op == ASSIGN and n.attrs["variable"] == name and result in n.inputs for n in later)
        ):
            return None
        return name

    if node.op == "fused_elementwise":
        into = getattr(backend(family), "fused_elementwise_into", None)
        result = node.outputs[0]
        for position, table in enumerate(node.inputs):
            if into is not None and table.shape == result.shape and table.dtype == result.dtype:
                name = owner(table, result)
                if name is not None:
                    in_place = into(kernel, position)
                    return None if in_place is None else (in_place, ((position, graph.state[name]),))
        return None
    writer = _IN_PLACE_FORMS.get(node.op)
    if writer is None:
        return None
    count, in_place_form = writer
    owners: list = []
    for table, result in zip(node.inputs[:count], node.outputs, strict=True):
        name = owner(table, result)
        owners.append(None if name in owners else name)
    in_place = in_place_form(family, attrs) if any(owners) else None
    if in_place is None:
        return None
    return in_place, tuple((i, None if name is None else graph.state[name]) for i, name in enumerate(owners))


def _write_in_place(env, args, target, node):
    """Run a node's in-place form on the arrays of the variables it writes, where nothing else
    holds them (their env slot, the variable and the arguments here), and on copies of the
    other arrays it writes."""
    (in_place, written), failed = target
    arrays = list(args(env))
    try:
        for i, variable in written:
            if variable is None or arrays[i] is not variable._value or not sole_owner(arrays[i], holders=3):
                arrays[i] = arrays[i].copy()
        if failed is None:
            return in_place(*arrays)
        with recording_at(failed):
            return in_place(*arrays)
    except Exception as exc:  # noqa: BLE001 - re-raised with the node named
        raise _node_error(node, list(args(env)), exc) from exc


def _arguments(slots: tuple):
    """A function of the slot list giving the arrays in `slots`, as a tuple."""
    if len(slots) == 1:
        (slot,) = slots
        return lambda env: (env[slot],)
    return operator.itemgetter(*slots) if slots else lambda env: ()


def _node_error(node, arrays, exc) -> Exception:
    """A NodeError naming the node; an error whose class sets `keeps_type_in_graphs` (a
    queue's OutOfRangeError, which ends a loop) is raised as its own type, the node named."""
    shapes = ", ".join(f"{a.dtype}{list(np.shape(a))}" if hasattr(a, "dtype") else type(a).__name__ for a in arrays)
    if getattr(exc, "keeps_type_in_graphs", False):
        return type(exc)(f"node '{node.name}' ({node.op}): {exc}")
    return NodeError(f"node '{node.name}' ({node.op}) with inputs ({shapes}) failed: {type(exc).__name__}: {exc}")


def _needed_nodes(graph: GraphIR, fetches, feeds, with_updates: bool) -> list:
    """The nodes the fetches depend on (stopping at fed values), in graph order;
    with `with_updates`, also every state write and send and what they need."""
    fed = {id(v) for v in feeds}
    roots = list(fetches)
    needed: set[int] = set()
    if with_updates:
        for node in graph.nodes:
            if node.op in SIDE_EFFECT_OPS:  # state writes and sends
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
        if type(array._value) is not np.ndarray:  # an accelerator's array stays where it is
            return _check_device_feed(graph_name, value, array)
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


def _check_device_feed(graph_name: str, value: Value, tensor):
    if tensor.dtype is not value.dtype:
        raise TypeError(f"{graph_name}: feed '{value.name}' expects {value.dtype.name}, got {tensor.dtype.name}")
    if len(tensor.shape) != len(value.shape) or any(
        d is not None and d != a for d, a in zip(value.shape, tensor.shape, strict=True)
    ):
        raise ValueError(f"{graph_name}: feed '{value.name}' expects shape {value.type_string()}, got {tensor.shape}")
    return tensor._value
