"""The cost model against the clock, and the cost-model placer against the greedy rule.

1. Calibrate the cost model on this machine (sgemm peak, memory bandwidth, per-node cost).
2. For the training step of an MLP and of a CNN (forward and gradients, frozen), print the
   simulated step time beside the measured one, with the calibrated model and with the
   model refined by a profile of other runs.
3. For a two-tower network on two workers, print the simulated step time of the greedy
   placement beside the cost-model placement's, with the transfers each needs.

    python bench/placement.py
"""

from __future__ import annotations

from _harness import median_seconds, pin_threads
from _models import tapeflow_model

pin_threads()

import numpy as np  # noqa: E402

import tapeflow as tp  # noqa: E402
from tapeflow.graph.cost_model import calibrate, simulate  # noqa: E402
from tapeflow.graph.placer import place  # noqa: E402


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
    w = tp.ones((512, 512)) * 0.01
    a, b = x, x
    for _ in range(4):
        a = tp.tanh(tp.matmul(a, w))
        b = tp.tanh(tp.matmul(b, w))
    return a + b


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
    devices = ["/worker:0/cpu:0", "/worker:1/cpu:0"]
    print(f"\n{'two towers on 2 workers':<24} {'simulated ms':>13} {'transfers':>10} {'MB moved':>9}")
    for rule in ("greedy", "cost model"):
        graph = tp.freeze(_towers, tp.TensorSpec((256, 512)), optimize=False)
        place(graph, devices, cost_model=model if rule == "cost model" else None)
        step = simulate(graph, model)
        print(f"{rule:<24} {step.step_seconds * 1e3:>13.2f} {step.transfers:>10} {step.transfer_bytes / 1e6:>9.2f}")


if __name__ == "__main__":
    main()
