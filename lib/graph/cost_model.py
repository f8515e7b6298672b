"""A cost model of graph execution: how long a node takes on a device, estimated from its
FLOPs and the bytes it reads and writes with constants measured on this machine
(`calibrate`), optionally scaled per op by a recorded profile (`refine`); and how long a
value takes to cross from one device to another (a latency and a bandwidth per pair).

`simulate(graph, model)` plays a placed graph's step through the model: each device runs
one node at a time in graph order, a node starts once its inputs have arrived, and a value
crosses each link once per destination, one value after the other (`link_busy_s`). The
cost-model placer (`tapeflow.graph.placer`) uses the same rules to choose devices. Given
the graph's partitions, `simulate` plays the step as the partitioned runtime runs it
instead: a partition starts once every value it receives has arrived, and sends its
values one after the other when it ends (its device busy `send_overhead_s` each).
`simulate_pipeline` plays several micro-batches through the partitions in the order the
pipeline's stages run them.

>>> import tapeflow as tp
>>> model = CostModel(flops_per_s=1e10, bytes_per_s=1e10, overhead_s=1e-6)
>>> g = tp.freeze(lambda a, b: tp.matmul(a, b), tp.TensorSpec((100, 100)), tp.TensorSpec((100, 100)))
>>> round(model.node_seconds(g.nodes[0]) * 1e6, 1)   # 2e6 FLOPs at 1e10 FLOP/s, plus the overhead
201.0
>>> simulate(g, model).step_seconds == model.node_seconds(g.nodes[0])
True
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field

import numpy as np

from tapeflow.files.atomic import atomic_file
from tapeflow.graph.ir import GraphIR, Node, Value
from tapeflow.graph.structure import TensorSpec
from tapeflow.graph.trace import freeze
from tapeflow.ops.creation import tensor
from tapeflow.ops.math import matmul

# ops whose FLOPs are those of a matrix product of their first two inputs
_MATMUL_OPS = frozenset({"matmul", "fused_matmul", "batch_matmul"})
# convolutions: FLOPs from the larger of the output and input activations and the filter
_CONV_OPS = frozenset(
    {
        "conv2d",
        "fused_conv2d",
        "conv2d_input_grad",
        "conv2d_filter_grad",
        "conv3d",
        "conv3d_input_grad",
        "conv3d_filter_grad",
        "depthwise_conv2d",
        "depthwise_conv2d_input_grad",
        "depthwise_conv2d_filter_grad",
    }
)
FREE_OPS = frozenset({"read_variable", "reshape", "reshape_like", "identity", "stop_gradient"})


def value_bytes(v: Value) -> int:
    """The bytes a value holds, from its shape (a dynamic dimension counts as 1)."""
    return math.prod(d or 1 for d in v.shape) * v.dtype.np.itemsize


def _elements(v: Value) -> int:
    return math.prod(d or 1 for d in v.shape)


def node_flops(node: Node) -> float:
    """Floating-point operations of one run of `node`: 2·m·n·k for products, two per tap of
    each output position of a convolution (and of its gradients), one per output element
    otherwise."""
    if node.op in _MATMUL_OPS and len(node.inputs) >= 2 and node.outputs:
        a = node.inputs[0].shape
        return 2.0 * _elements(node.outputs[0]) * ((a[-1] or 1) if a else 1)
    if node.op in _CONV_OPS and len(node.inputs) >= 2 and node.outputs:
        if node.op.endswith("_filter_grad"):
            grid, filt = node.inputs[1], node.outputs[0]
        else:  # the forward op's output grid, or the input gradient's incoming gradient
            grid, filt = (
                (node.inputs[0], node.inputs[1])
                if node.op.endswith("_input_grad")
                else node.outputs[:1] + node.inputs[1:2]
            )
        kept = -2 if node.op.startswith("depthwise") else -1  # a depthwise tap reads one channel
        return 2.0 * _elements(grid) * math.prod(d or 1 for d in filt.shape[:kept])
    return float(sum(_elements(v) for v in node.outputs))


def node_bytes(node: Node) -> int:
    """Bytes a node reads and writes."""
    return sum(value_bytes(v) for v in node.inputs) + sum(value_bytes(v) for v in node.outputs)


@dataclass
class CostModel:
    """Seconds per node and per transfer.

    Args:
        flops_per_s: arithmetic rate of a device (this machine's sgemm peak by `calibrate`).
        bytes_per_s: memory bandwidth of a device (a large copy's rate by `calibrate`).
        overhead_s: fixed cost of dispatching one node.
        link_bytes_per_s: bandwidth of a transfer between two devices of different workers.
        link_latency_s: fixed cost of one such transfer.
        link_busy_s: how long one such transfer holds the link besides its bytes, the next
            one waiting (the rest of the latency overlaps it); None: all of the latency.
        local_bytes_per_s: bandwidth between two devices of one worker.
        send_overhead_s: the sender's own time for each value a partition sends to another
            device (encoding it and handing it over), when `simulate` plays partitions.
        op_scale: per op name, a factor on the estimate (`refine` measures them).
        device_speed: per device name, a factor on its rates (2.0: twice as fast).
    """

    flops_per_s: float = 5e10
    bytes_per_s: float = 5e9
    overhead_s: float = 5e-6
    link_bytes_per_s: float = 5e8
    link_latency_s: float = 5e-4
    link_busy_s: float | None = None
    local_bytes_per_s: float = 5e9
    send_overhead_s: float = 0.0
    op_scale: dict = field(default_factory=dict)
    device_speed: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("flops_per_s", "bytes_per_s", "link_bytes_per_s", "local_bytes_per_s"):
            _positive(name, getattr(self, name))
        for name in ("overhead_s", "link_latency_s", "send_overhead_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise ValueError(f"CostModel: {name} must be a finite number >= 0, got {value!r}")
        if self.link_busy_s is not None:
            value = self.link_busy_s
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise ValueError(f"CostModel: link_busy_s must be None or a finite number >= 0, got {value!r}")
        for label, table in (("op_scale", self.op_scale), ("device_speed", self.device_speed)):
            if not isinstance(table, dict):
                raise TypeError(f"CostModel: {label} must be a dict, got {type(table).__name__}")
            for key, value in table.items():
                if not isinstance(key, str):
                    raise TypeError(f"CostModel: {label} keys must be strings, got {key!r}")
                _positive(f"{label}[{key!r}]", value)

    def node_seconds(self, node: Node, device: str | None = None) -> float:
        """The estimated time of one run of `node` on `device` (default: its own)."""
        if node.op in FREE_OPS:
            return 0.0
        speed = self.device_speed.get(device or node.device or "", 1.0)
        compute = node_flops(node) / (self.flops_per_s * speed)
        memory = node_bytes(node) / (self.bytes_per_s * speed)
        return (self.overhead_s + max(compute, memory)) * self.op_scale.get(node.op, 1.0)

    def transfer_seconds(self, nbytes: int, source: str | None, destination: str | None) -> float:
        """The estimated time for `nbytes` to cross from `source` to `destination`."""
        if source == destination or source is None or destination is None:
            return 0.0
        if _worker(source) == _worker(destination):
            return nbytes / self.local_bytes_per_s
        return self.link_latency_s + nbytes / self.link_bytes_per_s

    def refine(self, profile, graph: GraphIR, statistic: str = "mean") -> CostModel:
        """A copy whose `op_scale` makes each op's estimate match its time in a profile
        (`tapeflow.profiler`) of runs of `graph`: each node's mean time over its runs, or
        with `statistic="min"` its shortest (the run least disturbed by other work); and
        whose `send_overhead_s` is the mean (or shortest) of the profile's "send" spans, if
        it has any."""
        if statistic not in ("mean", "min"):
            raise ValueError(f"CostModel.refine: statistic must be 'mean' or 'min', got {statistic!r}")
        by_name = {n.name: n for n in graph.nodes}
        runs: dict = {}
        sends = [e.duration_ns / 1e9 for e in profile.events if e.kind == "comm" and e.name == "send"]
        for event in profile.events:
            node = by_name.get(event.name) if event.kind == "node" else None
            if node is not None and node.op == event.op:
                runs.setdefault(node.name, []).append(event.duration_ns / 1e9)
        measured: dict = {}
        for name, seconds in runs.items():
            node = by_name[name]
            entry = measured.setdefault(node.op, [0.0, 0.0])
            entry[0] += min(seconds) if statistic == "min" else sum(seconds) / len(seconds)
            entry[1] += CostModel.node_seconds(self, node) / self.op_scale.get(node.op, 1.0)
        scale = dict(self.op_scale)
        for op, (seconds, estimate) in measured.items():
            if estimate > 0 and seconds > 0:
                scale[op] = seconds / estimate
        changed: dict = {"op_scale": scale}
        if sends:
            changed["send_overhead_s"] = min(sends) if statistic == "min" else sum(sends) / len(sends)
        return CostModel(**{**self.to_dict(), **changed})

    def to_dict(self) -> dict:
        return {
            "flops_per_s": self.flops_per_s,
            "bytes_per_s": self.bytes_per_s,
            "overhead_s": self.overhead_s,
            "link_bytes_per_s": self.link_bytes_per_s,
            "link_latency_s": self.link_latency_s,
            "link_busy_s": self.link_busy_s,
            "local_bytes_per_s": self.local_bytes_per_s,
            "send_overhead_s": self.send_overhead_s,
            "op_scale": dict(self.op_scale),
            "device_speed": dict(self.device_speed),
        }

    def save(self, path) -> None:
        """Write the model as JSON (atomically)."""
        with atomic_file(path) as tmp, open(tmp, "w") as f:
            json.dump(self.to_dict(), f, indent=1, sort_keys=True)

    @classmethod
    def load(cls, path) -> CostModel:
        """A model saved by `save` (every value is checked; unknown keys are refused)."""
        path = os.fspath(path)
        if os.path.getsize(path) > 1 << 20:
            raise ValueError(f"{path}: a cost model file is a few kilobytes of JSON, this one is larger than 1 MiB")
        with open(path) as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}: not a cost model (invalid JSON: {err})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: not a cost model (expected a JSON object)")
        unknown = set(data) - set(cls().to_dict())
        if unknown:
            raise ValueError(f"{path}: unknown cost model keys {sorted(unknown)}")
        try:
            return cls(**data)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path}: {err}") from None


def _positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"CostModel: {name} must be a finite number > 0, got {value!r}")


def _worker(device: str) -> str:
    return device.split("/")[1] if device.startswith("/") and device.count("/") >= 2 else device


def _best_of(fn, repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def calibrate(repeats: int = 5, size: int = 512) -> CostModel:
    """A cost model with this machine's sgemm rate (a `size`² float32 product through
    tapeflow's kernel), memory bandwidth (adding two 16 MiB vectors) and per-node overhead
    (a frozen chain of small adds); transfers keep their defaults."""
    rng = np.random.default_rng(0)
    a = tensor(rng.normal(size=(size, size)).astype(np.float32))
    matmul(a, a)
    flops = 2.0 * size**3 / _best_of(lambda: matmul(a, a), repeats)
    big = np.ones(1 << 22, np.float32)
    out = np.empty_like(big)
    bandwidth = 3 * big.nbytes / _best_of(lambda: np.add(big, big, out=out), repeats)
    chain = 64

    def adds(x):
        for _ in range(chain):
            x = x + 1.0
        return x

    g = freeze(adds, TensorSpec((4,)), optimize=False)
    x = np.ones(4, np.float32)
    g(x)
    overhead = _best_of(lambda: g(x), repeats) / chain
    return CostModel(flops_per_s=flops, bytes_per_s=bandwidth, overhead_s=overhead)


@dataclass
class SimulatedStep:
    """What `simulate` found: the step's length, each node's start and finish, each
    device's busy time, and the transfers (count and bytes) it needed."""

    step_seconds: float
    start: dict
    finish: dict
    busy: dict
    transfers: int
    transfer_bytes: int


class Simulator:
    """The state of a simulated step: when each device and link is next free, when each
    value is available on each device. `finish_on` asks where a node would finish;
    `run` commits it."""

    def __init__(self, graph: GraphIR, model: CostModel):
        self.graph, self.model = graph, model
        self.device_free: dict = {}
        self.link_free: dict = {}
        self.available: dict = {}  # (id(value), device) -> seconds
        self.made_on: dict = {}  # id(value) -> (device, finish)
        self.sent_at: dict = {}  # id(value) -> when it leaves for other devices, if not at its finish
        self.start: dict = {}
        self.finish: dict = {}
        self.busy: dict = {}
        self.transfers = 0
        self.transfer_bytes = 0

    def _arrival(self, v: Value, device: str, commit: bool) -> float:
        if v.producer is None:
            return 0.0  # graph inputs and constants are where they are needed
        key = (id(v), device)
        if key in self.available:
            return self.available[key]
        source, ready = self.made_on[id(v)]
        if source == device:
            return ready
        ready = self.sent_at.get(id(v), ready)
        seconds = self.model.transfer_seconds(value_bytes(v), source, device)
        link = (source, device)
        begin = max(ready, self.link_free.get(link, 0.0))
        arrival = begin + seconds
        if commit:
            held = seconds
            if self.model.link_busy_s is not None and _worker(source) != _worker(device):
                held += self.model.link_busy_s - self.model.link_latency_s
            self.link_free[link] = begin + held
            self.available[key] = arrival
            self.transfers += 1
            self.transfer_bytes += value_bytes(v)
        return arrival

    def finish_on(self, node: Node, device: str) -> float:
        ready = max([self._arrival(v, device, commit=False) for v in node.inputs], default=0.0)
        return max(ready, self.device_free.get(device, 0.0)) + self.model.node_seconds(node, device)

    def run(self, node: Node, device: str) -> None:
        ready = max([self._arrival(v, device, commit=True) for v in node.inputs], default=0.0)
        begin = max(ready, self.device_free.get(device, 0.0))
        seconds = self.model.node_seconds(node, device)
        end = begin + seconds
        self.device_free[device] = end
        self.busy[device] = self.busy.get(device, 0.0) + seconds
        self.start[node.name], self.finish[node.name] = begin, end
        for v in node.outputs:
            self.made_on[id(v)] = (device, end)

    def send(self, nodes: list, device: str, readers: dict) -> None:
        """The values of a partition of `nodes` that just ran on `device` leave it, one
        after the other, each once per other device reading it (`readers`: the graph's
        consumers), the device busy `send_overhead_s` per value sent."""
        at = self.device_free.get(device, 0.0)
        for node in nodes:
            for v in node.outputs:
                targets = {r.device or str(self.graph.device) for r in readers.get(id(v), ())} - {device}
                at += len(targets) * self.model.send_overhead_s
                self.sent_at[id(v)] = at
        self.busy[device] = self.busy.get(device, 0.0) + at - self.device_free.get(device, 0.0)
        self.device_free[device] = at

    def result(self) -> SimulatedStep:
        return SimulatedStep(
            max(self.finish.values(), default=0.0),
            self.start,
            self.finish,
            self.busy,
            self.transfers,
            self.transfer_bytes,
        )


def simulate(graph: GraphIR, model: CostModel, partitions: list | None = None) -> SimulatedStep:
    """Play one step of a placed graph (every node has a device, or all run on the
    graph's own) through `model`. With `partitions`, lists of node names in an order they
    can run one after the other (`[[n.name for n in p.graph.nodes] for p in
    partition(graph).partitions]`; names the graph lacks, its sends and receives, are
    skipped), each partition waits for every value it receives from another device before
    its first node, and its values leave for other devices when its last node ends."""
    sim = Simulator(graph, model)
    if partitions is None:
        for node in graph.nodes:
            sim.run(node, node.device or str(graph.device))
        return sim.result()
    by_name, readers = {n.name: n for n in graph.nodes}, graph.consumers()
    for names in partitions:
        nodes = [by_name[name] for name in names if name in by_name]
        if not nodes:
            continue
        device = nodes[0].device or str(graph.device)
        members = {id(n) for n in nodes}
        received = [v for n in nodes for v in n.inputs if v.producer is not None and id(v.producer) not in members]
        gate = max([sim._arrival(v, device, commit=True) for v in received], default=0.0)
        sim.device_free[device] = max(sim.device_free.get(device, 0.0), gate)
        for node in nodes:
            sim.run(node, device)
        sim.send(nodes, device, readers)
    return sim.result()


def simulate_pipeline(
    graph: GraphIR, model: CostModel, partitions: list, micro_batches: int, after: dict | None = None
) -> SimulatedStep:
    """Play one pipelined step: `micro_batches` micro-batches of a placed graph (traced at
    the micro-batch size) through its `partitions` (lists of node names, as for `simulate`),
    in the order the pipeline's stages run them: each device takes its partitions in the
    order given and, for each, every micro-batch in turn; one waits until the device is
    free and every value it receives for that micro-batch has arrived, and its values leave
    when it ends. `after` adds seconds at the end of a device's step (by device name: its
    update). `start` and `finish` are keyed by (node name, micro-batch).

    >>> import tapeflow as tp
    >>> model = CostModel(flops_per_s=1e9, bytes_per_s=1e12, overhead_s=0.0, link_latency_s=0.0)
    >>> def f(x):
    ...     with tp.device("/worker:0"):
    ...         h = tp.matmul(x, x)
    ...     with tp.device("/worker:1"):
    ...         return tp.matmul(h, h)
    >>> g = tp.freeze(f, tp.TensorSpec((100, 100)), optimize=False)
    >>> parts = [[n.name] for n in g.nodes]
    >>> one = model.node_seconds(g.nodes[0])   # each matmul, 2 ms; each transfer, 80 us
    >>> sent = model.transfer_seconds(40_000, "/worker:0/cpu:0", "/worker:1/cpu:0")
    >>> step = simulate_pipeline(g, model, parts, micro_batches=4)
    >>> abs(step.step_seconds - (4 * one + sent + one)) < 1e-12   # worker 1 trails worker 0 by one micro-batch
    True
    """
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1:
        raise ValueError(f"simulate_pipeline: micro_batches must be an int >= 1, got {micro_batches!r}")
    after = after or {}
    by_name, readers = {n.name: n for n in graph.nodes}, graph.consumers()
    sims = [Simulator(graph, model) for _ in range(micro_batches)]
    for sim in sims[1:]:  # the micro-batches share the devices and the links
        sim.device_free, sim.link_free, sim.busy = sims[0].device_free, sims[0].link_free, sims[0].busy
    queues: dict = {}  # device -> the (nodes, micro-batch) it runs, in order
    for names in partitions:
        nodes = [by_name[name] for name in names if name in by_name]
        if nodes:
            device = nodes[0].device or str(graph.device)
            queues.setdefault(device, []).extend((nodes, mb) for mb in range(micro_batches))
    for device in after:
        if device not in queues:
            raise ValueError(f"simulate_pipeline: `after` names {device}, where no partition runs")
    heads = dict.fromkeys(queues, 0)
    while any(heads[d] < len(q) for d, q in queues.items()):
        ready = []
        for device, queue in queues.items():
            if heads[device] == len(queue):
                continue
            nodes, mb = queue[heads[device]]
            sim, members = sims[mb], {id(n) for n in nodes}
            received = [v for n in nodes for v in n.inputs if v.producer is not None and id(v.producer) not in members]
            if all(id(v) in sim.made_on for v in received):
                gate = max([sim._arrival(v, device, commit=False) for v in received], default=0.0)
                ready.append((max(gate, sim.device_free.get(device, 0.0)), device, received))
        if not ready:
            raise ValueError(f"simulate_pipeline: the partitions of {graph.name} wait for each other (out of order)")
        _, device, received = min(ready, key=lambda r: r[0])
        nodes, mb = queues[device][heads[device]]
        heads[device] += 1
        sim = sims[mb]
        gate = max([sim._arrival(v, device, commit=True) for v in received], default=0.0)
        sim.device_free[device] = max(sim.device_free.get(device, 0.0), gate)
        for node in nodes:
            sim.run(node, device)
        sim.send(nodes, device, readers)
    free = sims[0].device_free
    for device, seconds in after.items():
        free[device] = free.get(device, 0.0) + seconds
        sims[0].busy[device] = sims[0].busy.get(device, 0.0) + seconds
    return SimulatedStep(
        max(free.values(), default=0.0),
        {(name, mb): t for mb, sim in enumerate(sims) for name, t in sim.start.items()},
        {(name, mb): t for mb, sim in enumerate(sims) for name, t in sim.finish.items()},
        sims[0].busy,
        sum(sim.transfers for sim in sims),
        sum(sim.transfer_bytes for sim in sims),
    )
