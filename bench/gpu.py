"""GPU benchmark: tapeflow on CuPy against PyTorch CUDA, in the same run.

    .venv/bin/python bench/gpu.py              # prints "skipped" without a GPU
    .venv/bin/python bench/gpu.py --steps 50

Three workloads, each a frozen (tapeflow `tp.function`) or plain (PyTorch) training step
on random data of MNIST's shapes, Adam:
- the MLP 784-256-256-10, batch 128;
- the "Deep MNIST" CNN without dropout, batch 50;
- a word2vec skip-gram step with 5 negative samples (vocabulary 50,000, dimension 128,
  1,024 centre words a step), reported in words per second.

Each library runs in a process of its own and PyTorch's never imports tapeflow. A timed
block ends by reading the loss, so queued GPU work is included. Reported: median step
time (or words/s) and the ratio tapeflow / PyTorch; the issue's target is 1.3x.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

WORKLOADS = {"mlp": (128, (28 * 28,)), "cnn": (50, (28, 28, 1)), "word2vec": (1024, None)}
VOCAB, DIM, NEGATIVES = 50_000, 128, 5


def _timed(step, steps: int) -> float:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_tapeflow(kind: str, steps: int) -> float:
    import numpy as np
    from _models import tapeflow_model

    import tapeflow as tp

    batch, shape = WORKLOADS[kind]
    rng = np.random.default_rng(0)
    with tp.device("gpu:0"):
        optimizer = tp.optimizers.Adam(1e-3)
        if kind == "word2vec":
            centre_vectors = tp.Variable(rng.uniform(-0.01, 0.01, (VOCAB, DIM)).astype(np.float32), name="centre")
            context_vectors = tp.Variable(np.zeros((VOCAB, DIM), np.float32), name="context")
            variables = [centre_vectors, context_vectors]
            centres = tp.tensor(rng.integers(0, VOCAB, batch))
            contexts = tp.tensor(rng.integers(0, VOCAB, (batch, 1 + NEGATIVES)))
            signs = tp.tensor(np.array([1.0] + [-1.0] * NEGATIVES, np.float32))

            def loss_of(inputs):
                c, ctx = inputs
                scores = tp.sum(
                    tp.nn.embedding_lookup(centre_vectors, c)[:, None, :]
                    * tp.nn.embedding_lookup(context_vectors, ctx),
                    axis=2,
                )
                return -tp.mean(tp.log(tp.sigmoid(scores * signs)))

            inputs = (centres, contexts)
        else:
            model = tapeflow_model(kind, dropout=False)
            model.build((None, *shape))
            variables = model.trainable_weights
            loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
            inputs = (tp.tensor(rng.random((batch, *shape), dtype=np.float32)), tp.tensor(rng.integers(0, 10, batch)))

            def loss_of(inputs):
                return loss_fn(inputs[1], model(inputs[0], training=True))

        optimizer.build(variables)

        @tp.function
        def step(*inputs):
            with tp.GradientTape() as tape:
                loss = loss_of(inputs)
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
            return loss

        for _ in range(3):
            float(step(*inputs))
        return _timed(lambda: float(step(*inputs)), steps)


def run_pytorch(kind: str, steps: int) -> float:
    import torch

    torch.manual_seed(0)
    batch, shape = WORKLOADS[kind]
    dev = torch.device("cuda")
    if kind == "word2vec":
        centre = torch.nn.Embedding(VOCAB, DIM).to(dev)
        context = torch.nn.Embedding(VOCAB, DIM).to(dev)
        params = [*centre.parameters(), *context.parameters()]
        c = torch.randint(0, VOCAB, (batch,), device=dev)
        ctx = torch.randint(0, VOCAB, (batch, 1 + NEGATIVES), device=dev)
        signs = torch.tensor([1.0] + [-1.0] * NEGATIVES, device=dev)

        def loss_of():
            scores = (centre(c)[:, None, :] * context(ctx)).sum(2)
            return -torch.nn.functional.logsigmoid(scores * signs).mean()

    else:
        if kind == "mlp":
            net = torch.nn.Sequential(
                torch.nn.Linear(784, 256),
                torch.nn.ReLU(),
                torch.nn.Linear(256, 256),
                torch.nn.ReLU(),
                torch.nn.Linear(256, 10),
            )
        else:
            net = torch.nn.Sequential(
                torch.nn.Conv2d(1, 32, 5, padding=2),
                torch.nn.ReLU(),
                torch.nn.MaxPool2d(2),
                torch.nn.Conv2d(32, 64, 5, padding=2),
                torch.nn.ReLU(),
                torch.nn.MaxPool2d(2),
                torch.nn.Flatten(),
                torch.nn.Linear(7 * 7 * 64, 1024),
                torch.nn.ReLU(),
                torch.nn.Linear(1024, 10),
            )
        net = net.to(dev)
        params = list(net.parameters())
        x = torch.rand((batch, 784) if kind == "mlp" else (batch, 1, 28, 28), device=dev)
        y = torch.randint(0, 10, (batch,), device=dev)

        def loss_of():
            return torch.nn.functional.cross_entropy(net(x), y)

    optimizer = torch.optim.Adam(params, 1e-3)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of()
        loss.backward()
        optimizer.step()
        return loss.item()

    for _ in range(3):
        step()
    return _timed(step, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--child", nargs=2, metavar=("LIBRARY", "KIND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        library, kind = args.child
        fn = run_tapeflow if library == "tapeflow" else run_pytorch
        print(json.dumps(fn(kind, args.steps)))
        return
    from tapeflow import devices

    reason = devices.gpu_unavailable_reason()
    if reason is not None:
        print(f"bench/gpu.py: skipped, no GPU: {reason}")
        return
    print(f"{'workload':10} {'tapeflow':>14} {'pytorch':>14} {'ratio':>7}")
    for kind, (batch, _) in WORKLOADS.items():
        seconds = {}
        for library in ("tapeflow", "pytorch"):
            cmd = [sys.executable, __file__, "--steps", str(args.steps), "--child", library, kind]
            seconds[library] = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        ratio = seconds["tapeflow"] / seconds["pytorch"]
        if kind == "word2vec":
            shown = [f"{batch / seconds[lib]:,.0f} w/s" for lib in ("tapeflow", "pytorch")]
        else:
            shown = [f"{seconds[lib] * 1e3:.2f} ms" for lib in ("tapeflow", "pytorch")]
        print(f"{kind:10} {shown[0]:>14} {shown[1]:>14} {ratio:6.2f}x")


if __name__ == "__main__":
    main()
