"""The cost model against the clock, and the cost-model placer against the greedy rule.

1. Calibrate the cost model on this machine (sgemm peak, memory bandwidth, per-node cost),
   one thread per process: each Dask worker below is one single-threaded device.
2. For the training step of an MLP and of a CNN (forward and gradients, frozen), print the
   simulated step time beside the measured one, with the calibrated model and with the
   model refined by a profile of other runs.
3. On a cluster of two Dask workers (127.0.0.1), calibrate the link between them (values
   of several sizes sent from one worker to the other, against the same graphs kept on one
   worker: the sender's time per value, the latency, how long a value holds the link, the
   bandwidth) and the fixed cost of a step on the stages.
4. For a two-tower network and for the MLP's and the CNN's training steps on the two
   workers, run the greedy placement and the cost-model placement as partitioned graphs
   (a stage actor per worker, values sent worker to worker) and print each one's measured
   step time beside its simulated one, and the transfers.
5. Train the MLP and the CNN with `tp.distributed.Pipeline` (2 stages on the two workers,
   m = 1 and 4 micro-batches, values handed over by actor calls as above) and print the
   measured step time beside the simulated one, the stages' schedule played micro-batch by
   micro-batch (`simulate_pipeline`).

All of 3 to 5 are printed as one table at the end (measured ms, simulated ms and their
ratio, with the calibrated model and with the model refined by a trace of the same steps).

    python bench/placement.py
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import sys
import time

# Run as a script, this file's folder leads sys.path, where bench/distributed.py would shadow
# Dask's `distributed` package: move it to the end.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE] + [HERE]
os.environ["TAPEFLOW_BENCH_THREADS"] = "1"  # one core per device; the workers inherit it

from _harness import median_seconds, pin_threads  # noqa: E402
from _models import tapeflow_model  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

import tapeflow as tp  # noqa: E402
from tapeflow.devices import WorkerDevice  # noqa: E402
from tapeflow.distributed.gradient_graph import trace_gradient_steps  # noqa: E402
from tapeflow.distributed.pipeline.layer_stages import LayerStages, micro_batches  # noqa: E402
from tapeflow.distributed.pipeline.stages import Roles, StageGroup, stage_specs  # noqa: E402
from tapeflow.graph.cost_model import CostModel, calibrate, simulate, simulate_pipeline, value_bytes  # noqa: E402
from tapeflow.graph.partition import partition  # noqa: E402
from tapeflow.graph.placer import place  # noqa: E402
from tapeflow.profiler import Profile  # noqa: E402

DEVICES = ["/worker:0/cpu:0", "/worker:1/cpu:0"]
TIMEOUT = 60.0
HOPS = 4  # values sent at once, to see how much of a transfer's latency the next one waits for
TRANSPORT = "actors"  # as the placed graphs above, whose link is calibrated
WARMUP, STEPS, BLOCK = 2, 9, 3
TOWER_INPUT = (768, 512)  # enough work per node that splitting the towers can pay for the link


def _step_graph(model, x_shape):
    model(np.zeros((1, *x_shape[1:]), np.float32))
    weights = model.trainable_weights

    def step(x, y):
        with tp.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tp.mean(tp.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        return [loss, *tape.gradient(loss, weights)]

    return tp.freeze(step, tp.TensorSpec(x_shape), tp.TensorSpec((x_shape[0],), "int64"))


def _mlp():
    return _step_graph(tapeflow_model("mlp"), (128, 784))


def _cnn():
    return _step_graph(tapeflow_model("cnn", dropout=False), (50, 28, 28, 1))


def _towers(x):
    """Two towers of four layers, each with its own weights, joined at the end. (A stage
    sends its values once its partition has run, so towers sharing one weight made on
    worker 0 would not overlap: the other tower would wait for all of the first.)"""
    wa, wb = tp.ones((512, 512)) * 0.01, tp.ones((512, 512)) * 0.02
    a, b = x, x
    for _ in range(4):
        a = tp.tanh(tp.matmul(a, wa))
        b = tp.tanh(tp.matmul(b, wb))
    return a + b


def _hop(size: int, devices: tuple[str, str], values: int = 1):
    """`values` values of `size` floats made on the first device and read on the second."""

    def hop(x):
        with tp.device(devices[0]):
            hs = [x * (2.0 + i) for i in range(values)]
        with tp.device(devices[1]):
            total = tp.sum(hs[0] * 0.5)
            for h in hs[1:]:
                total = total + tp.sum(h * 0.5)
            return total

    return tp.freeze(hop, tp.TensorSpec((size,)), optimize=False)


class PlacedStages:
    """A placed graph started on the cluster's stage actors (one per device, on the worker
    its name gives, values sent worker to worker), its inputs loaded there once."""

    def __init__(self, cluster, graph, *inputs):
        place(graph)
        devices = list(dict.fromkeys(n.device for n in graph.nodes))
        feeds = {v.name: np.asarray(a) for v, a in zip(graph.inputs, inputs, strict=True)}
        specs = stage_specs({None: graph}, devices, Roles(), None, TIMEOUT)
        workers = [cluster.workers[WorkerDevice.parse(d).worker] for d in devices]
        self.group = StageGroup(cluster, specs, workers, feeds, TIMEOUT, method="bench")
        self.step = 0

    def run(self, steps: int) -> list[float]:
        """Seconds of each of `steps` steps: the longest stage's own time, from its start to
        its last value delivered, without the client's dispatch."""
        times = []
        for _ in range(steps):
            group = self.group
            answers = group.answers([a.run_step(self.step, [None], 0) for a in group.actors], f"step {self.step}")
            times.append(max(a["seconds"] for a in answers))
            self.step += 1
        return times

    def close(self) -> None:
        self.group.close()


def interleaved(cluster, graphs: dict, *inputs, steps: int = STEPS, trace: bool = False) -> tuple[dict, dict]:
    """The median step seconds of each placed graph of `graphs` (see `PlacedStages`), all
    started at once and run in alternating blocks of BLOCK steps (`steps` in all) after
    WARMUP steps, so that the machine's load weighs on each alike; with `trace`, also the
    profile of each graph's steps, recorded on the workers block by block (by graph name)."""
    stages, profiles = {}, {name: Profile() for name in graphs}
    try:
        for name, graph in graphs.items():
            stages[name] = PlacedStages(cluster, graph, *inputs)
            stages[name].run(WARMUP)
        times = {name: [] for name in graphs}
        for _ in range(steps // BLOCK):
            for name, placed in stages.items():
                with tp.profiler.trace(cluster=cluster) if trace else contextlib.nullcontext() as block:
                    times[name] += placed.run(BLOCK)
                profiles[name].events += block.events if trace else []
    finally:
        for placed in stages.values():
            placed.close()
    return {name: statistics.median(t) for name, t in times.items() if t}, profiles


def calibrate_link(cluster, model: CostModel) -> tuple[CostModel, float]:
    """`model` with the latency and bandwidth of a transfer between the two workers (a line
    fitted to the extra time of a value sent from worker 0 to worker 1 over the same graph
    kept on worker 0, for several sizes, less the sender's own time, the mean "send" span
    of a trace of those steps, which becomes its `send_overhead_s`), how long a transfer
    holds the link (`link_busy_s`: what each further value of HOPS sent at once adds), and
    the fixed cost of a step on the stages besides its nodes (the smallest graph kept on
    worker 0)."""
    sizes, crossing, kept, sends = (1 << 12, 1 << 18, 1 << 20, 1 << 22), [], [], []
    for size, values in [*((size, 1) for size in sizes), (sizes[0], HOPS)]:
        graphs = {d[1]: _hop(size, d, values) for d in ((DEVICES[0],) * 2, tuple(DEVICES))}
        measured, profiles = interleaved(cluster, graphs, np.ones(size, np.float32), trace=True)
        sends += [e.duration_ns / 1e9 for e in profiles[DEVICES[1]].events if e.kind == "comm" and e.name == "send"]
        extra = {d: seconds - simulate(graphs[d], model).step_seconds for d, seconds in measured.items()}
        crossing.append(extra[DEVICES[1]] - extra[DEVICES[0]])
        kept.append(extra[DEVICES[0]])
    step = max(kept[0], 0.0)
    seconds_per_byte, latency = np.polyfit([4.0 * n for n in sizes], crossing[: len(sizes)], 1)
    bandwidth = 1.0 / seconds_per_byte if seconds_per_byte > 0 else model.link_bytes_per_s
    if seconds_per_byte <= 0:
        print("the link's time did not grow with the bytes sent: its bandwidth keeps the model's default")
    send = statistics.mean(sends) if sends else 0.0  # the sender's own share of the crossing
    latency = max(float(latency) - send, 0.0)
    # each value after the first of HOPS sent at once adds its send, its bytes and the time it holds the link
    wire = 4.0 * sizes[0] / bandwidth
    busy = (crossing[-1] - crossing[0]) / (HOPS - 1) - send - wire
    linked = {
        "link_latency_s": latency,
        "link_bytes_per_s": float(bandwidth),
        "send_overhead_s": send,
        "link_busy_s": min(max(busy, 0.0), latency),
    }
    return CostModel(**{**model.to_dict(), **linked}), step


def placements(cluster, make, inputs: tuple, linked: CostModel, step_cost: float) -> list[tuple]:
    """The greedy placement and the cost-model placement of the graphs `make()` returns on
    the two workers: each one's row (see `compare_placements`). The cost-model placement
    uses the model refined by a trace of the greedy placement's steps on the workers."""
    graphs = {"greedy": make()}
    place(graphs["greedy"], DEVICES)
    _, profiles = interleaved(cluster, graphs, *inputs, steps=BLOCK, trace=True)
    refined = linked.refine(profiles["greedy"], graphs["greedy"])
    graphs["cost model"] = make()
    place(graphs["cost model"], DEVICES, cost_model=refined)
    measured, profiles = interleaved(cluster, graphs, *inputs, trace=True)
    rows = []
    for rule, graph in graphs.items():
        parts = [[n.name for n in p.graph.nodes] for p in partition(graph).partitions]
        step = simulate(graph, linked, parts)
        tuned_model = linked.refine(profiles[rule], graph)
        tuned = simulate(graph, tuned_model, parts).step_seconds + step_cost
        dataflow = simulate(graph, tuned_model).step_seconds + step_cost
        used = len({n.device for n in graph.nodes})
        rows.append((rule, used, step, measured[rule], step.step_seconds + step_cost, tuned, dataflow))
    return rows


def _update_seconds(model: CostModel, variables: list, micro_batches: int) -> float:
    """The estimated time of a stage's update: each variable's micro-batch gradients
    weighted and summed (two passes each), then the SGD step (one pass), each pass one
    eager op reading two arrays of the variable's size and writing one."""
    passes = 2 * micro_batches + 1
    return sum(passes * (model.overhead_s + 3 * value_bytes(v) / model.bytes_per_s) for v in variables)


def pipeline_rows(cluster, kind: str, batch: int, linked: CostModel, step_cost: float) -> list[tuple]:
    """`tp.distributed.Pipeline` with 2 stages on the two workers, training model `kind`
    on batches of `batch` rows cut into m = 1 and 4 micro-batches: each one's row. The
    step runs on the Pipeline's own stage actors (its `fit` session), timed as the other
    rows are (the longest stage, from its start to its update's end); the simulation plays
    the stages' schedule (`simulate_pipeline`) with the model refined by a trace of the
    measured steps, plus the estimated update of each stage and the step's fixed cost."""
    rng = np.random.default_rng(1)
    shape = (batch, 784) if kind == "mlp" else (batch, 28, 28, 1)
    x = rng.normal(size=shape).astype(np.float32)
    y = rng.integers(0, 10, size=batch).astype(np.int64)
    rows = []
    for m in (1, 4):
        model = tapeflow_model(kind, dropout=False)
        model.compile(optimizer=tp.optimizers.SGD(0.01), loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True))
        model(x[:1], training=False)
        strategy = tp.distributed.Pipeline(cluster, stages=2, micro_batches=m, transport=TRANSPORT, timeout=TIMEOUT)
        session = strategy.start(model, x, y, batch)
        parts_rows = micro_batches(np.arange(batch), m)
        times, profile = [], Profile()
        try:
            session._begin()
            group = session.group
            for k in range(WARMUP + STEPS):
                with tp.profiler.trace(cluster=cluster) if k >= WARMUP else contextlib.nullcontext() as block:
                    answers = group.answers([a.run_step(k, parts_rows, batch) for a in group.actors], f"step {k}")
                if k >= WARMUP:
                    times.append(max(a["seconds"] for a in answers))
                    profile.events += block.events
        finally:
            session.close()
        stages = LayerStages(model, 2, strategy.workers())
        size = len(parts_rows[0])
        graph = trace_gradient_steps(model, x, y, {size}, False, forward=stages.forward)[0][size]
        parts = partition(graph, stages.devices).partitions
        names = [[n.name for n in p.graph.nodes] for p in parts]
        held = {d: [v for p in parts if p.device == d for v in p.graph.state.values()] for d in stages.devices}
        updates = {d: _update_seconds(linked, list({id(v): v for v in vs}.values()), m) for d, vs in held.items()}
        step = simulate_pipeline(graph, linked, names, m, after=updates)
        tuned = simulate_pipeline(graph, linked.refine(profile, graph), names, m, after=updates)
        measured = statistics.median(times)
        rows.append((f"m={m}", 2, step, measured, step.step_seconds + step_cost, tuned.step_seconds + step_cost, None))
    return rows


def compare_placements(model: CostModel) -> None:
    """Steps 3 to 5 of the module docstring. The cost-model placement uses the model
    refined by a trace of the greedy placement's steps recorded on the workers
    (`tp.profiler.trace(cluster=...)`): their own speed under this machine's load. The
    simulated times are the calibrated model's, and the model refined by the trace of the
    measured steps themselves (each node's mean time): two workers that share the cores
    of one busy machine slow each other down, which only such a trace shows; what is left
    to the simulation is the schedule, the transfers and the step's fixed cost. Both play
    the step as the stages run it, partition by partition (a partition waits for all it
    receives); "node by node" is the refined model's step as the placer plays it, each
    node starting as soon as its own inputs are there."""
    with tp.distributed.Cluster(n_workers=2, memory_limit="2GiB") as cluster:
        cluster.client.wait_for_workers(2, timeout=TIMEOUT)
        began = time.perf_counter()
        linked, step_cost = calibrate_link(cluster, model)
        print(
            f"\nlink between the workers: {linked.send_overhead_s * 1e3:.2f} ms to send a value, then "
            f"{linked.link_latency_s * 1e3:.2f} ms latency ({linked.link_busy_s * 1e3:.2f} ms holding the link), "
            f"{linked.link_bytes_per_s / 1e6:.0f} MB/s; a step on the stages costs {step_cost * 1e3:.2f} ms "
            f"besides its nodes ({time.perf_counter() - began:.0f} s to calibrate)"
        )
        rng = np.random.default_rng(0)
        x = rng.normal(size=TOWER_INPUT).astype(np.float32)
        mnist = rng.normal(size=(128, 784)).astype(np.float32), rng.integers(0, 10, size=128).astype(np.int64)
        images = rng.normal(size=(50, 28, 28, 1)).astype(np.float32), rng.integers(0, 10, size=50).astype(np.int64)
        towers = functools.partial(tp.freeze, _towers, tp.TensorSpec(TOWER_INPUT), optimize=False)
        sections = {
            "two towers": lambda: placements(cluster, towers, (x,), linked, step_cost),
            "mlp step": lambda: placements(cluster, _mlp, mnist, linked, step_cost),
            "cnn step": lambda: placements(cluster, _cnn, images, linked, step_cost),
            "mlp pipeline": lambda: pipeline_rows(cluster, "mlp", 128, linked, step_cost),
            "cnn pipeline": lambda: pipeline_rows(cluster, "cnn", 48, linked, step_cost),  # 4 equal micro-batches
        }
        results = {}
        for name, run in sections.items():
            began = time.perf_counter()
            results[name] = run()
            print(f"{name}: {time.perf_counter() - began:.0f} s", flush=True)
        load = os.getloadavg()
        print(
            f"(the two workers share this machine's {os.cpu_count()} cores, at a load average of "
            f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f})"
        )
        print(
            f"{'on 2 workers':<14} {'placement':<10} {'devices':>7} {'transfers':>9} {'MB moved':>8} "
            f"{'measured ms':>11} {'simulated ms':>12} {'ratio':>5} {'refined ms':>10} {'ratio':>5} "
            f"{'node by node ms':>15}"
        )
        for name, rows in results.items():
            for rule, used, step, measured, simulated, tuned, dataflow in rows:
                node_by_node = "" if dataflow is None else f"{dataflow * 1e3:.2f}"
                print(
                    f"{name:<14} {rule:<10} {used:>7} {step.transfers:>9} {step.transfer_bytes / 1e6:>8.2f} "
                    f"{measured * 1e3:>11.2f} {simulated * 1e3:>12.2f} {simulated / measured:>5.2f} "
                    f"{tuned * 1e3:>10.2f} {tuned / measured:>5.2f} {node_by_node:>15}"
                )


def main() -> None:
    model = calibrate()
    print(
        f"calibrated: sgemm peak {model.flops_per_s / 1e9:.1f} GFLOP/s, memory {model.bytes_per_s / 1e9:.1f} GB/s, "
        f"{model.overhead_s * 1e6:.1f} us per node"
    )
    rng = np.random.default_rng(0)
    print(f"{'step':<6} {'measured ms':>12} {'simulated ms':>13} {'ratio':>6} {'refined ms':>11} {'ratio':>6}")
    for name, graph in (("mlp", _mlp()), ("cnn", _cnn())):
        x = rng.normal(size=graph.inputs[0].shape).astype(np.float32)
        y = rng.integers(0, 10, size=graph.inputs[1].shape).astype(np.int64)
        measured = median_seconds(lambda g=graph, x=x, y=y: g(x, y), repeats=20, warmup=3)
        with tp.profiler.trace() as profile:
            for _ in range(5):
                graph(x, y)
        refined = model.refine(profile, graph)
        simulated, tuned = simulate(graph, model).step_seconds, simulate(graph, refined).step_seconds
        print(
            f"{name:<6} {measured * 1e3:>12.2f} {simulated * 1e3:>13.2f} {simulated / measured:>6.2f} "
            f"{tuned * 1e3:>11.2f} {tuned / measured:>6.2f}"
        )
    compare_placements(model)


if __name__ == "__main__":
    main()
