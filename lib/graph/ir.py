"""The graph IR: values (typed, shaped edges), nodes and the GraphIR that holds them.

This module is a data structure only: it knows nothing about concrete ops (a node
names its op and keeps its attributes; the executor and passes give those names
meaning) and nothing about running (`tp.Graph`, in tapeflow.graph.runnable, adds that).
Graph state (Variables) is read by `read_variable` nodes and written by
`assign_variable` nodes, kept in program order. A graph belongs to a device, whose
backend runs it; a node that runs on another device of this process names it ("xla:0"),
and values reach it through `copy_to_device` nodes, the graph's explicit transfers.

>>> g = GraphIR("double")
>>> x = g.add_input("x", (None, 3), "float32")
>>> y = g.add_node("add", [x, x], {}, [((None, 3), "float32")])[0]
>>> g.outputs = [y]
>>> print(g)
graph double(x: float32[?,3]) -> (float32[?,3])
  %add_0 = add(x, x) : float32[?,3]
  return %add_0
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tapeflow import dtypes
from tapeflow.devices import Device, current_device, is_local_name

READ = "read_variable"
ASSIGN = "assign_variable"
COPY = "copy_to_device"  # the one op whose output lives on another device than its input
# a queue op names its queue by the `queue` attr; the graph's `queues` binds that name to a queue
QUEUE_OPS = frozenset(
    {
        "queue_enqueue",
        "queue_enqueue_many",
        "queue_dequeue",
        "queue_dequeue_many",
        "queue_dequeue_up_to",
        "queue_close",
        "queue_size",
    }
)
SIDE_EFFECT_OPS = frozenset({ASSIGN, "send"}) | QUEUE_OPS  # run for their effect: never pruned


class GraphError(ValueError):
    """A malformed graph (found by `GraphIR.lint`) or a bad feed or fetch."""


class Value:
    """One edge: a graph input, a captured constant, or a node's output."""

    __slots__ = ("name", "shape", "dtype", "kind", "producer", "index", "data")

    def __init__(self, name, shape, dtype, kind="node", producer=None, index=0, data=None):
        self.name = name
        self.shape = tuple(shape)
        self.dtype = dtypes.as_dtype(dtype)
        self.kind = kind  # "input" | "const" | "node"
        self.producer = producer
        self.index = index
        self.data = data  # the array of a constant

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def type_string(self) -> str:
        dims = ",".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.dtype.name}[{dims}]"

    def __repr__(self) -> str:
        return f"Value({self.name}: {self.type_string()})"


@dataclass(frozen=True)
class SparseGradient:
    """A sparse gradient among a graph's values (what an IndexedSlices is in a graph):
    rows `indices` of a tensor of `dense_shape` hold `values`. `tp.Graph.run` fetches it as
    a `tp.IndexedSlices`."""

    values: Value
    indices: Value
    dense_shape: tuple


class Node:
    """One op application: `outputs = op(*inputs, **attrs)`, placed on `device`: a device of
    this process ("xla:0") where that is not the graph's, a worker device name such as
    "/worker:1/cpu:0", or None where nothing placed it."""

    __slots__ = ("name", "op", "inputs", "attrs", "outputs", "device")

    def __init__(self, name, op, inputs, attrs, outputs, device: str | None = None):
        self.name = name
        self.op = op
        self.inputs = list(inputs)
        self.attrs = dict(attrs)
        self.outputs = list(outputs)
        self.device = device

    @property
    def public_attrs(self) -> dict:
        """The attrs the op takes; names starting with "_" are notes for passes and tools."""
        return {k: a for k, a in self.attrs.items() if not k.startswith("_")}

    def __repr__(self) -> str:
        return f"Node({self.name}: {self.op})"


def format_attr(value) -> str:
    """A short, readable form of an attribute for printing."""
    if isinstance(value, np.ndarray):
        return f"array{value.shape}"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, str):  # a name or rendezvous key: shown whole
        return repr(value)
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class GraphIR:
    """A dataflow graph: inputs, nodes in a topological order, outputs and state.

    `state` maps each state name to its Variable (or, for a loaded graph, to a
    Variable created from the file). `queues` binds the queue names of queue ops to
    queues: the live queues a traced function used, or those given to `tp.load_graph`.
    `output_structure` rebuilds the traced function's return value from the flat outputs.
    `device` is where the graph runs (the current device when it was made).
    """

    def __init__(self, name: str = "graph", device: Device | None = None):
        self.name = name
        self.device = device or current_device()
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.nodes: list[Node] = []
        self.constants: list[Value] = []
        self.state: dict = {}
        self.queues: dict = {}  # queue name -> the queue its queue ops use when the graph runs
        self.output_structure = None
        self._names: dict[str, int] = {}

    # ------------------------------------------------------------ building
    def unique_name(self, base: str) -> str:
        n = self._names.get(base, 0)
        while True:
            name = f"{base}_{n}"
            n += 1
            if name not in self._names:
                break
        self._names[base] = n
        self._names[name] = 0
        return name

    def add_input(self, name: str, shape, dtype) -> Value:
        if name in self._names:
            name = self.unique_name(name)
        else:
            self._names[name] = 0
        value = Value(name, shape, dtype, kind="input")
        self.inputs.append(value)
        self.changed()
        return value

    def add_constant(self, array: np.ndarray, name: str = "const") -> Value:
        array = np.asarray(array)
        value = Value(self.unique_name(name), array.shape, dtypes._BY_NP[array.dtype], kind="const", data=array)
        self.constants.append(value)
        self.changed()
        return value

    def add_node(
        self, op: str, inputs, attrs, output_specs, name: str | None = None, device: str | None = None
    ) -> list[Value]:
        """Append a node; `output_specs` is a list of (shape, dtype). Returns its outputs."""
        node = Node(self.unique_name(name or op), op, inputs, attrs, [], device)
        for i, (shape, dtype) in enumerate(output_specs):
            vname = node.name if len(output_specs) == 1 else f"{node.name}:{i}"
            node.outputs.append(Value(vname, shape, dtype, producer=node, index=i))
        self.nodes.append(node)
        self.changed()
        return node.outputs

    def changed(self) -> None:
        """Call after editing the graph: subclasses drop what they derived from it."""

    # ------------------------------------------------------------ queries
    def values(self) -> dict[str, Value]:
        """Every value by name."""
        out = {v.name: v for v in self.inputs}
        out.update((v.name, v) for v in self.constants)
        for node in self.nodes:
            out.update((v.name, v) for v in node.outputs)
        return out

    def consumers(self) -> dict[int, list[Node]]:
        """id(value) -> the nodes that read it."""
        users: dict[int, list[Node]] = {}
        for node in self.nodes:
            for v in node.inputs:
                users.setdefault(id(v), []).append(node)
        return users

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.op] = counts.get(node.op, 0) + 1
        return dict(sorted(counts.items()))

    def node_device(self, node: Node) -> Device:
        """The device of this process that runs `node`: the one it names, else the graph's
        (a worker device name places the node on a worker, not here)."""
        name = node.device
        return Device.named(name) if name is not None and is_local_name(name) else self.device

    def value_device(self, value: Value) -> Device:
        """The device of this process a value lives on: a transfer's output on the device it
        copies to, another node's output where the node runs, the rest on the graph's."""
        node = value.producer
        if node is None:
            return self.device
        if node.op == COPY:
            return Device.named(node.attrs["device"])
        return self.node_device(node)

    def parameter_count(self) -> int:
        return int(sum(int(np.prod(v.shape)) for v in self.state.values()))

    def _resolve(self, key, by_name: dict, role: str) -> Value:
        if isinstance(key, Value):
            return key
        ref = getattr(key, "ref", None)
        if isinstance(ref, Value):
            return ref
        if isinstance(key, str):
            found = by_name.get(key.lstrip("%"))
            if found is not None:
                return found
            near = sorted(by_name)[:12]
            raise GraphError(f"{self.name}: no value named {key!r} to {role}; values include {near}")
        raise TypeError(f"{self.name}: a {role} must be a value name or a Value, got {type(key).__name__}")

    # ------------------------------------------------------------ checking
    def lint(self) -> None:
        """Check the graph's structure; raise GraphError naming the first problem.

        Every node input must be defined before use, names must be unique,
        outputs must exist, and state reads and writes must name known state.
        """
        defined: set[int] = set()
        names: set[str] = set()
        for v in self.inputs + self.constants:
            if v.name in names:
                raise GraphError(f"{self.name}: value name '{v.name}' is used twice")
            names.add(v.name)
            defined.add(id(v))
            if v.kind == "const" and (v.data is None or tuple(v.data.shape) != v.shape):
                raise GraphError(f"{self.name}: constant '{v.name}' has no data of shape {v.shape}")
        for node in self.nodes:
            for i, v in enumerate(node.inputs):
                if id(v) not in defined:
                    raise GraphError(
                        f"{self.name}: node '{node.name}' ({node.op}) input {i} '{v.name}' is not defined before it"
                    )
            if node.op in (READ, ASSIGN) and node.attrs.get("variable") not in self.state:
                raise GraphError(f"{self.name}: node '{node.name}' names unknown state {node.attrs.get('variable')!r}")
            for v in node.outputs:
                if v.name in names:
                    raise GraphError(f"{self.name}: value name '{v.name}' is used twice")
                if v.producer is not node:
                    raise GraphError(f"{self.name}: value '{v.name}' does not point back to node '{node.name}'")
                names.add(v.name)
                defined.add(id(v))
        for i, v in enumerate(self.outputs):
            if id(v) not in defined:
                raise GraphError(f"{self.name}: output {i} '{v.name}' is not computed by the graph")

    # ------------------------------------------------------------ display
    def __str__(self) -> str:
        args = ", ".join(f"{v.name}: {v.type_string()}" for v in self.inputs)
        rets = ", ".join(v.type_string() for v in self.outputs)
        lines = [f"graph {self.name}({args}) -> ({rets})"]
        for name, var in self.state.items():
            dims = ",".join(str(d) for d in var.shape)
            lines.append(f"  state {name}: {var.dtype.name}[{dims}]")
        for v in self.constants:
            lines.append(f"  const %{v.name} : {v.type_string()}")
        for node in self.nodes:
            ins = ", ".join(_ref(v) for v in node.inputs)
            attrs = ", ".join(f"{k}={format_attr(a)}" for k, a in node.public_attrs.items())
            head = f"{node.op}[{attrs}]" if attrs else node.op
            where = f"  @ {node.device}" if node.device else ""
            if node.outputs:
                outs = ", ".join(f"%{v.name}" for v in node.outputs)
                types = ", ".join(v.type_string() for v in node.outputs)
                lines.append(f"  {outs} = {head}({ins}) : {types}{where}")
            else:
                lines.append(f"  {head}({ins}){where}")
        lines.append("  return " + ", ".join(_ref(v) for v in self.outputs))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.inputs)} inputs, {len(self.nodes)} nodes, {len(self.outputs)} outputs>"

    def to_dot(self) -> str:
        """The graph in Graphviz dot syntax (render with `dot -Tpng`); placed nodes are
        boxed in one cluster per device."""
        lines = [f'digraph "{self.name}" {{', "  rankdir=TB;", '  node [fontname="Helvetica", fontsize=10];']
        for v in self.inputs:
            lines.append(f'  "{v.name}" [shape=invhouse, label="{v.name}\\n{v.type_string()}"];')
        for v in self.constants:
            lines.append(f'  "{v.name}" [shape=note, label="const\\n{v.type_string()}"];')
        devices = list(dict.fromkeys(n.device for n in self.nodes if n.device))
        for i, dev in enumerate(devices):
            lines.append(f'  subgraph "cluster_{i}" {{ label="{dev}"; style=dashed;')
            lines.extend(f'    "{n.name}";' for n in self.nodes if n.device == dev)
            lines.append("  }")
        for node in self.nodes:
            lines.append(f'  "{node.name}" [shape=box, label="{node.op}\\n{node.name}"];')
            for v in node.inputs:
                src = v.producer.name if v.producer is not None else v.name
                lines.append(f'  "{src}" -> "{node.name}" [label="{v.type_string()}"];')
        for i, v in enumerate(self.outputs):
            src = v.producer.name if v.producer is not None else v.name
            lines.append(f'  "output_{i}" [shape=house];')
            lines.append(f'  "{src}" -> "output_{i}";')
        lines.append("}")
        return "\n".join(lines)


def _ref(v: Value) -> str:
    return v.name if v.kind == "input" else f"%{v.name}"
