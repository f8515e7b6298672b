"""The cost model against the clock, and the cost-model placer against the greedy rule.

1. Calibrate the cost model on this machine (sgemm peak, memory bandwidth, per-node cost),
   one thread per process: each Dask worker below is one single-threaded device.
2. For the training step of an MLP and of a CNN (forward and gradients, frozen), print the
   simulated step time beside the measured one, with the calibrated model and with the
   model refined by a profile of other runs.
3. On a cluster of two Dask workers (127.0.0.1), calibrate the link between them (values
   of several sizes sent from one worker to the other, against the same graphs kept on one
   worker) and the fixed cost of a step on the stages.
4. For a two-tower network on the two workers, run the greedy placement and the cost-model
   placement as partitioned graphs (a stage actor per worker, values sent worker to worker)
   and print each one's measured step time beside its simulated one, and the transfers.

    python bench/placement.py
"""

from __future__ import annotations

import contextlib
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
from tapeflow.distributed.pipeline.stages import Roles, StageGroup, stage_specs  # noqa: E402
from tapeflow.graph.cost_model import CostModel, calibrate, simulate  # noqa: E402
from tapeflow.graph.partition import partition  # noqa: E402
from tapeflow.graph.placer import place  # noqa: E402
from tapeflow.profiler import Profile  # noqa: E402

DEVICES = ["/worker:0/cpu:0", "/worker:1/cpu:0"]
TIMEOUT = 60.0
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


def _hop(size: int, devices: tuple[str, str]):
    """A value of `size` floats made on the first device and read on the second."""

    def hop(x):
        with tp.device(devices[0]):
            h = x * 2.0
        with tp.device(devices[1]):
            return tp.sum(h * 0.5)

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
    kept on worker 0, for several sizes), and the fixed cost of a step on the stages
    besides its nodes (the smallest graph kept on worker 0)."""
    sizes, crossing, kept = (1 << 12, 1 << 18, 1 << 20, 1 << 22), [], []
    for size in sizes:
        graphs = {d[1]: _hop(size, d) for d in ((DEVICES[0],) * 2, tuple(DEVICES))}
        measured, _ = interleaved(cluster, graphs, np.ones(size, np.float32))
        extra = {d: seconds - simulate(graphs[d], model).step_seconds for d, seconds in measured.items()}
        crossing.append(extra[DEVICES[1]] - extra[DEVICES[0]])
        kept.append(extra[DEVICES[0]])
    step = max(kept[0], 0.0)
    seconds_per_byte, latency = np.polyfit([4.0 * n for n in sizes], crossing, 1)
    bandwidth = 1.0 / seconds_per_byte if seconds_per_byte > 0 else model.link_bytes_per_s
    if seconds_per_byte <= 0:
        print("the link's time did not grow with the bytes sent: its bandwidth keeps the model's default")
    linked = {"link_latency_s": max(float(latency), 0.0), "link_bytes_per_s": float(bandwidth)}
    return CostModel(**{**model.to_dict(), **linked}), step


def compare_placements(model: CostModel) -> None:
    """Steps 3 and 4 of the module docstring. The cost-model placement uses the model
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
            f"\nlink between the workers: {linked.link_latency_s * 1e3:.2f} ms latency, "
            f"{linked.link_bytes_per_s / 1e6:.0f} MB/s; a step on the stages costs {step_cost * 1e3:.2f} ms "
            f"besides its nodes ({time.perf_counter() - began:.0f} s to calibrate)"
        )
        x = np.random.default_rng(0).normal(size=TOWER_INPUT).astype(np.float32)
        graphs = {"greedy": tp.freeze(_towers, tp.TensorSpec(TOWER_INPUT), optimize=False)}
        place(graphs["greedy"], DEVICES)
        _, profiles = interleaved(cluster, graphs, x, steps=BLOCK, trace=True)
        refined = linked.refine(profiles["greedy"], graphs["greedy"])
        graphs["cost model"] = tp.freeze(_towers, tp.TensorSpec(TOWER_INPUT), optimize=False)
        place(graphs["cost model"], DEVICES, cost_model=refined)
        measured, profiles = interleaved(cluster, graphs, x, trace=True)
        load = os.getloadavg()[0]
        print(f"(the two workers share this machine's {os.cpu_count()} cores, at a load average of {load:.1f})")
        print(
            f"{'two towers on 2 workers':<24} {'devices':>7} {'transfers':>9} {'MB moved':>8} {'measured ms':>11} "
            f"{'simulated ms':>12} {'ratio':>5} {'refined ms':>10} {'ratio':>5} {'node by node ms':>15}"
        )
        for rule, graph in graphs.items():
            parts = [[n.name for n in p.graph.nodes] for p in partition(graph).partitions]
            step = simulate(graph, linked, parts)
            simulated = step.step_seconds + step_cost
            tuned_model = linked.refine(profiles[rule], graph)
            tuned = simulate(graph, tuned_model, parts).step_seconds + step_cost
            dataflow = simulate(graph, tuned_model).step_seconds + step_cost
            used = len({n.device for n in graph.nodes})
            print(
                f"{rule:<24} {used:>7} {step.transfers:>9} {step.transfer_bytes / 1e6:>8.2f} "
                f"{measured[rule] * 1e3:>11.2f} {simulated * 1e3:>12.2f} {simulated / measured[rule]:>5.2f} "
                f"{tuned * 1e3:>10.2f} {tuned / measured[rule]:>5.2f} {dataflow * 1e3:>15.2f}"
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
