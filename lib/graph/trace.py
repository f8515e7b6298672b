"""Freezing: run a function on traced tensors and turn what it did into a Graph.

While a tracer is active, every op records a node instead of running, with
output shapes from the op's shape rule. Tensor arguments become graph inputs,
concrete tensors used along the way become constants, and Variables become
graph state: the first use reads the variable, `assign*` writes it, and later
uses see the value written (so the program's order is kept).

Python code in the function runs once, at trace time: prints, appends to
lists and other side effects happen while freezing, not when the graph runs.

Traced tensors live on devices as eager ones do: graph inputs on the graph's device,
a variable's reads on the variable's, an op's outputs where its inputs are, and
`x.to(device)` records a transfer node. A node that runs on another device than the
graph's records it, and inputs from two devices are a `DeviceMismatchError`, as eagerly.

>>> import tapeflow as tp
>>> g = tp.freeze(lambda x: tp.nn.relu(x) * 2.0, tp.TensorSpec((None, 3), "float32"))
>>> g(tp.tensor([[-1.0, 0.5, 2.0]])).numpy().tolist()
[[0.0, 1.0, 4.0]]
"""

from __future__ import annotations

import inspect

from tapeflow import tree
from tapeflow.devices import check_same_device, current_device, current_placement, is_local_name
from tapeflow.graph import passes
from tapeflow.graph.ir import ASSIGN, READ, Value
from tapeflow.graph.runnable import Graph
from tapeflow.graph.structure import TensorSpec, flatten_structure
from tapeflow.graph.subgraphs import record_cond, record_while
from tapeflow.ops import registry
from tapeflow.ops.math import add, subtract
from tapeflow.tensor import TRACING, FreezeError, Tensor, TracedTensor, Variable, user_frame


class Tracer:
    """Records ops into `graph`. A nested tracer (for a branch or loop body)
    captures values of its parent's graph as extra inputs."""

    def __init__(self, graph: Graph, parent: Tracer | None = None):
        self.graph = graph
        self.parent = parent
        self._own: set[int] = set()
        self._constants: dict[int, tuple] = {}
        self._current: dict[int, TracedTensor] = {}
        self._state_names: dict[int, str] = {}
        self.captures: list[tuple[TracedTensor, Value]] = []
        self._captured: dict[int, Value] = {}

    # ------------------------------------------------------------ activation
    def __enter__(self) -> Tracer:
        self._saved = TRACING.tracer
        TRACING.tracer = self
        return self

    def __exit__(self, *exc) -> None:
        TRACING.tracer = self._saved

    # ------------------------------------------------------------ values
    def traced(self, value: Value) -> TracedTensor:
        self._own.add(id(value))
        tensor = TracedTensor(value.shape, value.dtype, value)
        tensor._device = self.graph.value_device(value)
        return tensor

    def add_input(self, name: str, shape, dtype) -> TracedTensor:
        return self.traced(self.graph.add_input(name, shape, dtype))

    def value_of(self, t) -> Value:
        """The graph value standing for tensor `t` (capturing it if needed)."""
        if isinstance(t, TracedTensor):
            if id(t.ref) in self._own:
                return t.ref
            return self._capture(t)
        if isinstance(t, Variable):
            return self.value_of(self.read(t))
        if isinstance(t, Tensor):
            hit = self._constants.get(id(t))
            if hit is None:
                hit = (t, self.graph.add_constant(t._host()))  # graph constants are host arrays
                self._own.add(id(hit[1]))
                self._constants[id(t)] = hit
            return hit[1]
        raise TypeError(f"freeze: expected a tensor, got {type(t).__name__}")

    def _capture(self, t: TracedTensor) -> Value:
        if self.parent is None:
            raise FreezeError(
                f"freeze: tensor {t!r} belongs to another traced function; it was kept from an earlier "
                f"trace (at {user_frame()}); pass it as an argument instead"
            )
        hit = self._captured.get(id(t.ref))
        if hit is None:
            hit = self.graph.add_input(f"capture_{len(self.captures)}", t.shape, t.dtype)
            self._own.add(id(hit))
            self._captured[id(t.ref)] = hit
            self.captures.append((t, hit))
        return hit

    # ------------------------------------------------------------ state
    def state_name(self, var: Variable) -> str:
        name = self._state_names.get(id(var))
        if name is None:
            name, n = var.name, 0
            while name in self.graph.state:
                n += 1
                name = f"{var.name}_{n}"
            self.graph.state[name] = var
            self._state_names[id(var)] = name
        return name

    def read(self, var: Variable) -> TracedTensor:
        """The traced current value of `var` (a read node on first use)."""
        current = self._current.get(id(var))
        if current is not None:
            return current
        if self.parent is not None:
            current = self.traced(self._capture(self.parent.read(var)))
        else:
            name = self.state_name(var)
            device = self.device_for_node(var._device)
            (value,) = self.graph.add_node(
                READ, [], {"variable": name}, [(var.shape, var.dtype)], name="read", device=device
            )
            current = self.traced(value)
        self._current[id(var)] = current
        return current

    def assign(self, var: Variable, value, mode: str) -> Variable:
        """Record `var.assign*(value)` as a state write."""
        if self.parent is not None:
            raise FreezeError(
                f"Variable.{mode} of '{var.name}' inside a tp.cond branch or tp.while_loop body at {user_frame()}: "
                "return the new value from the branch and assign it outside"
            )
        value = registry.as_tensor(value, dtype=var.dtype if not isinstance(value, Tensor) else None, name=mode)
        if value.dtype is not var.dtype:
            raise TypeError(f"Variable.{mode}: variable '{var.name}' has dtype {var.dtype}, value has {value.dtype}")
        if tuple(value.shape) != tuple(var.shape):
            raise ValueError(f"Variable.{mode}: variable '{var.name}' has shape {var.shape}, value has {value.shape}")
        check_same_device(f"Variable.{mode} of '{var.name}'", (var, value))
        if mode == "assign_add":
            value = add(self.read(var), value)
        elif mode == "assign_sub":
            value = subtract(self.read(var), value)
        new = self.value_of(value)
        self.graph.add_node(
            ASSIGN,
            [new],
            {"variable": self.state_name(var)},
            [],
            name="assign",
            device=self.device_for_node(var._device),
        )
        self._current[id(var)] = value if isinstance(value, TracedTensor) else self.traced(new)
        return var

    # ------------------------------------------------------------ control flow
    def cond(self, pred, true_fn, false_fn):
        """Record `tp.cond` on a traced predicate: a cond node holding both branches."""
        return record_cond(self, pred, true_fn, false_fn)

    def while_loop(self, cond_fn, body, loop_vars: list, maximum_iterations):
        """Record `tp.while_loop` on traced values: a while_loop node holding cond and body."""
        return record_while(self, cond_fn, body, loop_vars, maximum_iterations)

    # ------------------------------------------------------------ node devices
    def device_for_node(self, runs_on) -> str | None:
        """The device name a node recorded now carries: a worker device where one is
        placing nodes (see `tapeflow.devices.current_placement`), else `runs_on` where that
        is not the graph's device, else None."""
        worker = current_placement(_device_of)
        if worker is not None or runs_on == self.graph.device:
            return worker
        return str(runs_on)

    # ------------------------------------------------------------ ops
    def apply(self, op, inputs: tuple, attrs: dict):
        if op.name == "custom_gradient":  # the forward ops are traced already; only tapes need it
            outputs = tuple(self.traced(self.value_of(o)) for o in attrs["outputs"])
            registry.notify_recorders(op, inputs, attrs, outputs)
            return outputs
        values = [self.value_of(t) for t in inputs]
        specs = op.infer(*inputs, **attrs)
        runs_on = check_same_device(op.name, inputs) if inputs else current_device()
        outs = self.graph.add_node(op.name, values, attrs, specs, device=self.device_for_node(runs_on))
        outputs = tuple(self.traced(v) for v in outs)
        registry.notify_recorders(op, inputs, attrs, outputs)
        return outputs[0] if op.num_outputs == 1 else outputs


def _device_of(tensors) -> str | None:
    """The worker device of the node that made the first of `tensors` that a node placed on
    a worker made (a device of this process follows from a node's inputs instead)."""
    for t in tensors:
        producer = getattr(getattr(t, "ref", t), "producer", None)
        if producer is not None and producer.device is not None and not is_local_name(producer.device):
            return producer.device
    return None


def _input_names(fn, count: int) -> list[str]:
    try:
        params = [
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"arg{i}" for i in range(count)]


def trace(fn, args: tuple, kwargs: dict | None = None, name: str | None = None) -> Graph:
    """Trace `fn(*args, **kwargs)`: TensorSpecs (at any depth) become graph inputs,
    everything else is passed to `fn` as it is."""
    kwargs = kwargs or {}
    graph = Graph(name or getattr(fn, "__name__", "graph").replace("<lambda>", "lambda"))
    tracer = Tracer(graph)
    names = _input_names(fn, len(args))

    def bind(obj, label):
        """`obj` with each TensorSpec in it a new graph input, in `tapeflow.tree` order."""
        bound = []
        for path, leaf in tree.flatten_with_path(obj):
            if isinstance(leaf, TensorSpec):
                leaf = tracer.add_input(leaf.name or "_".join([label, *map(str, path)]), leaf.shape, leaf.dtype)
            bound.append(leaf)
        return tree.pack_sequence_as(obj, bound)

    traced_args = tuple(bind(a, n) for a, n in zip(args, names, strict=True))
    traced_kwargs = {k: bind(v, k) for k, v in kwargs.items()}
    with tracer:
        result = fn(*traced_args, **traced_kwargs)
        leaves, structure = flatten_structure(result)
        leaves = [leaf if isinstance(leaf, Tensor) else registry.as_tensor(leaf, name="freeze") for leaf in leaves]
    outputs = []
    for leaf in leaves:
        outputs.append(tracer.value_of(leaf) if not isinstance(leaf, Variable) else tracer.value_of(tracer.read(leaf)))
    graph.outputs = outputs
    graph.output_structure = structure
    graph.lint()
    return graph


def freeze(fn, *specs, name: str | None = None, optimize: bool = True, **kwargs) -> Graph:
    """Freeze `fn` into a Graph: one TensorSpec (or nested structure of them) per
    tensor argument; other positional and keyword arguments are fixed Python values.
    The graph is optimized by the default passes unless `optimize=False`.

    >>> import tapeflow as tp
    >>> g = tp.freeze(lambda a, b: a @ b, tp.TensorSpec((2, 3)), tp.TensorSpec((3, 4)))
    >>> [v.type_string() for v in g.outputs]
    ['float32[2,4]']
    """
    graph = trace(fn, specs, kwargs, name=name)
    if optimize:
        passes.optimize(graph)
    return graph
