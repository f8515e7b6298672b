"""Partitioning: cut a placed graph into runnable pieces, one device each, joined by
send/recv pairs (the TensorFlow white paper, section 3.2.2).

Every node is placed first (`tapeflow.graph.placer`, which keeps the user's devices).
A node's rank is the largest number of device changes on a path from a graph input to
it, raised as far as its readers allow (so a variable's read joins the partition that
uses it); the nodes of one device and one rank form a partition. Every edge between two
partitions goes to a higher rank, so the partitions form an acyclic graph, and
`Partitioning.partitions` lists them in an order they can run in one after the other
(rank, then device). A device may hold several partitions (the forward and the
backward pass of a pipeline stage); values between them stay on the device.

Each edge that crosses devices becomes one `Transfer` under a rendezvous key
"<source device>;<destination device>;<value>", unique per value and destination: a
`send` node (tapeflow.ops.transfer) in the partition that makes the value and a `recv`
node in the first partition of the other device that reads it. A value read by several
nodes, or several partitions, of another device crosses once and is kept there. In a
partition's graph, a value of an earlier partition of its device, or a graph input, is
an input named as the value it stands for, and a value a later partition of its device
or the caller needs is an output: the partition is an ordinary `tp.Graph` that runs,
saves and ships as any other, sharing the original's Variables, and its sends and recvs
talk to the rendezvous its runner gives it. Moving values from the sends of one device
to the recvs of another is the runtime's job: `Partitioning.run` does it in one
process; the Dask pipeline (`tapeflow.distributed.pipeline.stages`) between workers.

>>> import numpy as np
>>> import tapeflow as tp
>>> def f(x):
...     with tp.device("/worker:0"):
...         h = tp.exp(x)
...     with tp.device("/worker:1"):
...         return h * h + h
>>> cut = partition(tp.freeze(f, tp.TensorSpec((2,)), optimize=False))
>>> [(p.device, len(p.graph.nodes)) for p in cut.partitions]
[('/worker:0/cpu:0', 2), ('/worker:1/cpu:0', 3)]
>>> [t.key for t in cut.transfers]
['/worker:0/cpu:0;/worker:1/cpu:0;exp_0']
>>> [n.op for n in cut.partitions[0].graph.nodes], [n.op for n in cut.partitions[1].graph.nodes]
(['exp', 'send'], ['recv', 'multiply', 'add'])
>>> x = np.array([0.0, 1.0], np.float32)
>>> np.allclose(cut.run(x)[0], np.exp(x) ** 2 + np.exp(x))
True
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tapeflow.graph.executor import check_feed
from tapeflow.graph.ir import GraphError, GraphIR, Node, Value
from tapeflow.graph.placer import place
from tapeflow.graph.runnable import Graph
from tapeflow.ops.transfer import rendezvous


@dataclass(frozen=True)
class Transfer:
    """One value crossing from device `source` to device `destination` under `key`."""

    key: str
    value: str
    source: str
    destination: str
    shape: tuple
    dtype: str

    @property
    def nbytes(self) -> int:
        """The bytes the value holds (a dynamic dimension counted as 1)."""
        return int(np.prod([d or 1 for d in self.shape], dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass
class Partition:
    """The nodes of one device and rank as a runnable graph: `graph` takes the values
    named by its inputs' names and computes those its outputs name; `recvs` are the
    transfers its recv nodes take (it is the first on its device to read them), `sends`
    those its send nodes give."""

    index: int
    device: str
    rank: int
    graph: Graph
    recvs: list[Transfer] = field(default_factory=list)
    sends: list[Transfer] = field(default_factory=list)

    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self.graph.inputs]

    @property
    def output_names(self) -> list[str]:
        return [v.name for v in self.graph.outputs]


class Partitioning:
    """The partitions of `graph` in an order to run them, the transfers between them, and
    where the graph's outputs come from (`outputs`: value names)."""

    def __init__(self, graph: GraphIR, partitions: list[Partition], transfers: list[Transfer]):
        self.graph = graph
        self.partitions = partitions
        self.transfers = transfers
        self.outputs = [v.name for v in graph.outputs]
        self.inputs = [v.name for v in graph.inputs]

    @property
    def devices(self) -> list[str]:
        """The devices, in the order of their first partition."""
        return list(dict.fromkeys(p.device for p in self.partitions))

    def run(self, *inputs) -> list[np.ndarray]:
        """Run the partitions one after the other in this process, passing each transfer
        from its send to its recv; returns the graph's outputs (and runs its state writes)."""
        if len(inputs) != len(self.graph.inputs):
            raise GraphError(f"{self.graph.name}: expected {len(self.graph.inputs)} inputs, got {len(inputs)}")
        feeds = {v.name: check_feed(self.graph.name, v, a) for v, a in zip(self.graph.inputs, inputs, strict=True)}
        stores: dict[str, dict[str, np.ndarray]] = {d: dict(feeds) for d in self.devices}
        table: dict[str, np.ndarray] = {}  # one process: every device's sends and recvs share it
        for part in self.partitions:
            store = stores[part.device]
            with rendezvous(table):
                results = part.graph.execute([store[name] for name in part.input_names])
            store.update(zip(part.output_names, results, strict=True))
        made = {name: p.device for p in self.partitions for name in p.output_names}
        return [stores[made.get(name, self.devices[0])][name] for name in self.outputs]

    def __str__(self) -> str:
        lines = [f"partitioning of {self.graph.name}: {len(self.partitions)} partitions on {self.devices}"]
        for part in self.partitions:
            lines.append(f"partition {part.index} on {part.device} (rank {part.rank})")
            lines += ["  " + line for line in str(part.graph).splitlines()]
        return "\n".join(lines)

    def to_dot(self) -> str:
        """Graphviz dot text: one cluster per partition, each send joined to its recv by a
        dashed edge."""
        lines = [f'digraph "{self.graph.name}_partitions" {{', '  node [fontname="Helvetica", fontsize=10];']
        ends: dict[str, dict[str, str]] = {}  # key -> {"send": dot id, "recv": dot id}
        for part in self.partitions:
            lines.append(f'  subgraph "cluster_{part.index}" {{ label="{part.index}: {part.device}";')
            for node in part.graph.nodes:
                here = f"{part.index}:{node.name}"
                if node.op in ("send", "recv"):
                    ends.setdefault(node.attrs["key"], {})[node.op] = here
                    lines.append(f'    "{here}" [shape=cds, label="{node.op}\\n{node.name}"];')
                else:
                    lines.append(f'    "{here}" [shape=box, label="{node.op}\\n{node.name}"];')
                for v in node.inputs:
                    if v.producer is not None:
                        lines.append(f'    "{part.index}:{v.producer.name}" -> "{here}";')
            lines.append("  }")
        for t in self.transfers:
            pair = ends[t.key]
            lines.append(f'  "{pair["send"]}" -> "{pair["recv"]}" [style=dashed, label="{t.shape}"];')
        lines.append("}")
        return "\n".join(lines)


def transfer_key(source: str, destination: str, value: str) -> str:
    """The rendezvous key of `value` sent from `source` to `destination`."""
    return f"{source};{destination};{value}"


def partition(graph: GraphIR, devices=None) -> Partitioning:
    """Place `graph`'s unplaced nodes (`tapeflow.graph.placer.place`, on `devices` if given)
    and cut it into partitions (see the module docstring). A malformed graph (a cycle, a
    use before definition) raises GraphError naming the node."""
    graph.lint()
    place(graph, devices)
    ranks: dict[int, int] = {}
    for node in graph.nodes:
        ranks[id(node)] = max(
            (ranks[id(v.producer)] + (v.producer.device != node.device) for v in node.inputs if v.producer),
            default=0,
        )
    readers = graph.consumers()
    for node in reversed(graph.nodes):  # as late as its readers allow: reads join the partition using them
        limits = [ranks[id(r)] - (r.device != node.device) for v in node.outputs for r in readers.get(id(v), ())]
        if limits:
            ranks[id(node)] = max(ranks[id(node)], min(limits))
    order = list(dict.fromkeys(n.device for n in graph.nodes))
    keys = sorted({(ranks[id(n)], n.device) for n in graph.nodes}, key=lambda k: (k[0], order.index(k[1])))
    index_of = {key: i for i, key in enumerate(keys)}
    members: list[list[Node]] = [[] for _ in keys]
    where: dict[int, int] = {}  # id(value) -> the partition that makes it
    for node in graph.nodes:
        i = index_of[(ranks[id(node)], node.device)]
        members[i].append(node)
        where.update((id(v), i) for v in node.outputs)
    outputs, recvs, sends, transfers = _cut(graph, members, where, [device for _, device in keys])
    parts = [
        Partition(
            i,
            device,
            rank,
            _subgraph(graph, f"{graph.name}/{i}", members[i], outputs[i], recvs[i], sends[i]),
            recvs[i],
            sends[i],
        )
        for i, (rank, device) in enumerate(keys)
    ]
    return Partitioning(graph, parts, transfers)


def _cut(graph: GraphIR, members: list, where: dict, devices: list[str]):
    """(outputs, recvs, sends, transfers): per partition, the values it gives to later
    partitions of its device or to the caller, the transfers it receives and those it
    sends; and all transfers, one per value and destination device, in partition order."""
    count = len(members)
    outputs: list[dict[int, Value]] = [{} for _ in range(count)]
    recvs: list[list[Transfer]] = [[] for _ in range(count)]
    sends: list[list[Transfer]] = [[] for _ in range(count)]
    transfers: dict[str, Transfer] = {}
    received: dict[str, int] = {}  # transfer key -> the partition that receives it
    for i, nodes in enumerate(members):
        for node in nodes:
            for v in node.inputs:
                j = where.get(id(v))
                if j is None or j == i:
                    continue  # a graph input or constant, or a value of this partition
                if devices[j] == devices[i]:
                    outputs[j][id(v)] = v  # kept on the device for a later partition
                    continue
                key = transfer_key(devices[j], devices[i], v.name)
                if key not in transfers:
                    transfers[key] = Transfer(key, v.name, devices[j], devices[i], v.shape, v.dtype.name)
                    sends[j].append(transfers[key])
                    recvs[i].append(transfers[key])
                    received[key] = i
                elif received[key] != i:
                    outputs[received[key]][id(v)] = v  # received once, kept for this later partition
    for v in graph.outputs:
        if id(v) in where:
            outputs[where[id(v)]][id(v)] = v
    return [list(o.values()) for o in outputs], recvs, sends, list(transfers.values())


def _subgraph(graph: GraphIR, name: str, nodes: list[Node], outputs: list[Value], recvs, sends) -> Graph:
    """A runnable graph of `nodes` (copied, keeping names and devices) giving `outputs`: a
    value of another device named by one of `recvs` comes from a recv node, any other
    value from outside is an input (constants are copied in), and a send node gives each
    value of `sends` to the rendezvous."""
    sub = Graph(name, graph.device)
    device = nodes[0].device
    mapped: dict[int, Value] = {}
    received = {t.value: t for t in recvs}

    def outside(v: Value) -> Value:
        if id(v) in mapped:
            return mapped[id(v)]
        t = received.get(v.name)
        if t is not None:
            attrs = {"key": t.key, "shape": tuple(v.shape), "dtype": v.dtype.name}
            node = Node(sub.unique_name("recv"), "recv", [], attrs, [], device)
            node.outputs.append(Value(v.name, v.shape, v.dtype, producer=node, index=0))
            sub.nodes.append(node)
            mapped[id(v)] = node.outputs[0]
        else:
            copy = Value(v.name, v.shape, v.dtype, kind="const" if v.kind == "const" else "input", data=v.data)
            (sub.constants if v.kind == "const" else sub.inputs).append(copy)
            sub._names[v.name] = 0
            mapped[id(v)] = copy
        return mapped[id(v)]

    by_name: dict[str, Value] = {}
    for node in nodes:
        inputs = [outside(v) for v in node.inputs]
        copy = Node(node.name, node.op, inputs, node.attrs, [], node.device)
        for v in node.outputs:
            out = Value(v.name, v.shape, v.dtype, producer=copy, index=v.index)
            copy.outputs.append(out)
            mapped[id(v)] = by_name[v.name] = out
        sub.nodes.append(copy)
        sub._names[node.name] = 0
        if "variable" in node.attrs and node.attrs["variable"] in graph.state:
            sub.state[node.attrs["variable"]] = graph.state[node.attrs["variable"]]
    for t in sends:
        sub.nodes.append(Node(sub.unique_name("send"), "send", [by_name[t.value]], {"key": t.key}, [], device))
    sub.outputs = [mapped[id(v)] for v in outputs]
    sub.lint()
    return sub
