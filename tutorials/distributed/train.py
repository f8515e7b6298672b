"""Distributed training on Dask: the Fashion-MNIST CNN on replicas in worker processes.

    python tutorials/distributed/train.py [--train-rows N] [--epochs E] [--out DIR]

Four runs of the same model on the same data, one after another:

1. one process (2 threads): the reference;
2. 2 synchronous replicas (`DataParallel`), checkpointing, with one worker process
   killed mid-training: training goes on and ends at the right step;
3. 2 synchronous replicas plus 1 backup worker, with replica 0 slowed 3x: each step
   applies the first 2 shards to arrive, so the straggler is dropped;
4. 2 asynchronous replicas (`AsyncParameterServer`): no barrier, staleness reported.

It prints steps/s and test accuracy per run, and plots the validation accuracy per
epoch to `<out>/distributed_curves.png`. Worker processes are spawned, so everything
runs under the `__main__` guard. The default run takes about 3 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import tapeflow as tp

HERE = Path(__file__).resolve().parent


def cnn() -> tp.Sequential:
    """TensorFlow's "Deep MNIST" CNN without dropout (so replicas compute what one process does)."""
    layers = tp.layers
    return tp.Sequential(
        [
            layers.Conv2D(32, 5, padding="same", activation="relu", name="conv1"),
            layers.MaxPooling2D(2, name="pool1"),
            layers.Conv2D(64, 5, padding="same", activation="relu", name="conv2"),
            layers.MaxPooling2D(2, name="pool2"),
            layers.Flatten(name="flatten"),
            layers.Dense(1024, activation="relu", name="fc1"),
            layers.Dense(10, name="logits"),
        ],
        name="cnn",
    )


def load(train_rows: int, test_rows: int):
    """Float32 images [N, 28, 28, 1] in [0, 1] and int64 labels: train, validation, test."""
    (x, y), (x_test, y_test) = tp.datasets.mnist.load_data("fashion")
    x, x_test = (x.astype(np.float32) / 255.0)[..., None], (x_test.astype(np.float32) / 255.0)[..., None]
    validation = (x[-test_rows:], y[-test_rows:])
    return (x[:train_rows], y[:train_rows]), validation, (x_test[:test_rows], y_test[:test_rows])


@dataclass
class Run:
    name: str
    steps_per_second: float
    test_accuracy: float
    history: dict = field(default_factory=dict)
    notes: str = ""


def fit(name: str, data, args, distribute=None, callbacks=(), notes=lambda strategy: "") -> Run:
    (x, y), validation, (x_test, y_test) = data
    tp.random.seed(args.seed)
    model = cnn()
    model.compile(
        optimizer=tp.optimizers.Adam(1e-3),
        loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    start = time.perf_counter()
    history = model.fit(
        x,
        y,
        batch_size=args.batch_size,
        epochs=args.epochs,
        validation_data=validation,
        callbacks=list(callbacks),
        verbose=0,
        distribute=distribute,
    )
    seconds = time.perf_counter() - start
    steps = args.epochs * (len(x) // args.batch_size)
    accuracy = model.evaluate(x_test, y_test, verbose=0, return_dict=True)["accuracy"]
    run = Run(name, steps / seconds, accuracy, history.history, notes(distribute))
    print(f"  {name}: {run.steps_per_second:.1f} steps/s, test accuracy {accuracy:.4f} {run.notes}", flush=True)
    return run


class KillWorkerAt(tp.callbacks.Callback):
    """Kill one worker process (SIGKILL) once training reaches `batch` of epoch `epoch`."""

    def __init__(self, cluster, epoch: int, batch: int):
        super().__init__()
        self.cluster, self.epoch, self.batch, self._epoch = cluster, epoch, batch, 0
        self.killed = None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.killed is None and (self._epoch, batch) == (self.epoch, self.batch):
            address, pid = sorted(self.cluster.client.run(os.getpid).items())[-1]
            self.killed = address
            print(f"    killing the worker at {address} (Dask logs the calls that were in flight to it)", flush=True)
            threading.Thread(target=os.kill, args=(pid, signal.SIGKILL), daemon=True).start()


def plot(runs: list[Run], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for run in runs:
        accuracy = run.history.get("val_accuracy", [])
        ax.plot(range(1, len(accuracy) + 1), accuracy, marker="o", label=run.name)
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation accuracy")
    ax.set_title("Fashion-MNIST CNN: one process vs replicas on Dask")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-rows", type=int, default=8000, help="training images (default 8000)")
    parser.add_argument("--test-rows", type=int, default=2000, help="validation and test images (default 2000)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE / "out")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        data = load(args.train_rows, args.test_rows)
    except FileNotFoundError as err:
        sys.exit(f"{err}\n(install Debian's dataset-fashion-mnist, or set TAPEFLOW_DATA)")
    print(f"Fashion-MNIST CNN, {args.train_rows} training images, {args.epochs} epochs, batch {args.batch_size}")
    runs = []
    tp.set_num_threads(2)
    runs.append(fit("1 process", data, args))
    tp.set_num_threads(1)
    checkpoints = Path(tempfile.mkdtemp(prefix="tapeflow-distributed-"))
    steps_per_epoch = args.train_rows // args.batch_size
    with tp.distributed.Cluster(n_workers=3, threads_per_worker=1) as cluster:
        killer = KillWorkerAt(cluster, epoch=1, batch=steps_per_epoch // 2)
        sync = tp.distributed.DataParallel(
            cluster, replicas=2, checkpoint_dir=checkpoints, checkpoint_every_steps=steps_per_epoch // 4
        )
        runs.append(
            fit(
                "2 replicas, a worker killed",
                data,
                args,
                sync,
                [killer],
                lambda s: f"(killed {killer.killed}; checkpoints in {checkpoints})",
            )
        )
    with tp.distributed.Cluster(n_workers=3, threads_per_worker=1) as cluster:
        delay = 2 * 1 / runs[1].steps_per_second  # replica 0 takes three times a step
        backup = tp.distributed.DataParallel(cluster, replicas=2, backup_workers=1, straggler_delay={0: delay})
        runs.append(
            fit(
                "2 + 1 backup, 3x straggler",
                data,
                args,
                backup,
                notes=lambda s: f"({sum(len(r.dropped) for r in s.steps)} late shards dropped)",
            )
        )
        asynchronous = tp.distributed.AsyncParameterServer(cluster, replicas=2)
        runs.append(fit("2 async replicas", data, args, asynchronous))
    print(f"\n{'run':32s} {'steps/s':>8s} {'test acc':>9s}")
    for run in runs:
        print(f"{run.name:32s} {run.steps_per_second:8.1f} {run.test_accuracy:9.4f}")
    path = args.out / "distributed_curves.png"
    plot(runs, path)
    print(f"curves: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
