"""Training benchmark: tapeflow's `model.fit` against the same training loop in PyTorch.

    .venv/bin/python bench/train.py               # about a minute on 2 cores
    .venv/bin/python bench/train.py --sequential  # all of one library's calls, then the other's

Two workloads, with the same data (a Fashion-MNIST slice, random images when the files
are missing), the same threads and the same optimizer:

- the MLP 784-256-256-10 (ReLU), Adam, batch 128;
- TensorFlow's "Deep MNIST" CNN (5x5x32 and 5x5x64 convolutions, each followed by a 2x2
  max-pool, dense 1024 with dropout 0.5, then 10 logits), Adam, batch 50. tapeflow
  runs it on NHWC images and PyTorch on NCHW ones.

Each timed call is one `model.fit` epoch of a few steps (shuffling, batching, loss and
accuracy included). On the PyTorch side it is the loop that `fit` stands for: a shuffled
pass that does forward, loss, backward and an Adam step, and keeps a running loss and
accuracy. The two run in one process, in alternating blocks. Peak memory is measured in a
fresh subprocess for each library and workload: the peak resident set during training,
less the resident set after imports and data.
Targets: step time at most 1.2x PyTorch's for the MLP and 1.3x for the CNN, and peak
memory at most PyTorch's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402
from _harness import THREADS, compare, pin_threads  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

# name: (batch size, steps per timed call, timed calls, step-time target, steps in the memory run)
WORKLOADS = {
    "mlp": (128, 20, 20, 1.2, 20),
    "cnn": (50, 5, 10, 1.3, 6),
}
TITLES = {"mlp": "MLP 784-256-256-10, Adam, batch 128", "cnn": "Deep-MNIST CNN, Adam, batch 50"}
LIBRARIES = ("tapeflow", "pytorch")


# -------------------------------------------------------------------- data
def load_slice(n: int) -> tuple[np.ndarray, np.ndarray, str]:
    """n images [n, 28, 28] float32 in [0, 1] and int64 labels, and where they came from."""
    try:
        from tapeflow.data.datasets import mnist

        (x, y), _ = mnist.load_data("fashion")
        return (x[:n].astype(np.float32) / 255.0), y[:n].astype(np.int64), "Fashion-MNIST"
    except FileNotFoundError:
        return (*random_slice(n), "random images")


def random_slice(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.random((n, 28, 28), dtype=np.float32), rng.integers(0, 10, n)


def workload_data(name: str, x: np.ndarray, y: np.ndarray, library: str):
    """The inputs one library's model takes: flat rows for the MLP, NHWC or NCHW images for the CNN."""
    if name == "mlp":
        return x.reshape(len(x), 784), y
    return (x[..., None] if library == "tapeflow" else x[:, None]).copy(), y


# ------------------------------------------------------------------ models
def tapeflow_trainer(name: str, x: np.ndarray, y: np.ndarray):
    """A function that runs one `model.fit` epoch over (x, y)."""
    import tapeflow as tp

    tp.set_num_threads(THREADS)
    layers = tp.layers
    if name == "mlp":
        stack = [layers.Dense(256, activation="relu"), layers.Dense(256, activation="relu"), layers.Dense(10)]
    else:
        stack = [
            layers.Conv2D(32, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(2),
            layers.Conv2D(64, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(2),
            layers.Flatten(),
            layers.Dense(1024, activation="relu"),
            layers.Dropout(0.5),
            layers.Dense(10),
        ]
    model = tp.Sequential(stack)
    model.compile(
        optimizer=tp.optimizers.Adam(1e-3),
        loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    batch = WORKLOADS[name][0]
    return lambda: model.fit(x, y, batch_size=batch, epochs=1, verbose=0)


def pytorch_trainer(name: str, x: np.ndarray, y: np.ndarray):
    """A function that runs the PyTorch equivalent of one `model.fit` epoch over (x, y)."""
    import torch
    from torch import nn

    torch.set_num_threads(THREADS)
    if name == "mlp":
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    else:
        model = nn.Sequential(
            nn.Conv2d(1, 32, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(64 * 7 * 7, 1024),
            nn.ReLU(),
            nn.Dropout(0.5),
            nn.Linear(1024, 10),
        )
    optimizer = torch.optim.Adam(model.parameters(), 1e-3, eps=1e-7)
    xs, ys = torch.from_numpy(x), torch.from_numpy(y)
    batch = WORKLOADS[name][0]
    model.train()

    def epoch():
        order = torch.randperm(len(xs))
        total_loss, correct = torch.zeros(()), torch.zeros((), dtype=torch.int64)
        for start in range(0, len(xs), batch):
            idx = order[start : start + batch]
            xb, yb = xs[idx], ys[idx]
            optimizer.zero_grad()
            logits = model(xb)
            loss = nn.functional.cross_entropy(logits, yb)
            loss.backward()
            optimizer.step()
            with torch.no_grad():  # the running metrics fit keeps
                total_loss += loss.detach() * len(yb)
                correct += (logits.argmax(1) == yb).sum()
        return float(total_loss) / len(xs), int(correct) / len(xs)

    return epoch


TRAINERS = {"tapeflow": tapeflow_trainer, "pytorch": pytorch_trainer}


# ------------------------------------------------------------------ memory
def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> bool:
    """Reset VmHWM to the current resident set (Linux >= 4.0); False if not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def memory_worker(library: str, name: str) -> None:
    """Run in a fresh process: print the peak resident set of training above the baseline."""
    batch, steps = WORKLOADS[name][0], WORKLOADS[name][4]
    # Random images: the values do not change the memory, and loading Fashion-MNIST would
    # import tapeflow into PyTorch's process.
    x, y = workload_data(name, *random_slice(batch * steps), library)
    __import__("tapeflow" if library == "tapeflow" else "torch")
    reset = _reset_peak()
    baseline = _status_kb("VmRSS") if reset else _status_kb("VmHWM")
    TRAINERS[library](name, x, y)()
    peak = _status_kb("VmHWM")
    print(json.dumps({"baseline_kb": baseline, "peak_kb": peak, "exact": reset}))


def peak_memory_mb(library: str, name: str) -> tuple[float, bool]:
    """Training's peak resident set above the post-import baseline, in MiB, from a subprocess."""
    cmd = [sys.executable, __file__, "--memory-worker", library, name]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    report = json.loads(out.strip().splitlines()[-1])
    return max(report["peak_kb"] - report["baseline_kb"], 0) / 1024, report["exact"]


# -------------------------------------------------------------------- main
def bench(name: str, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Median seconds per step of tapeflow and PyTorch on one workload."""
    batch, steps, calls, _, _ = WORKLOADS[name]
    x, y = x[: batch * steps], y[: batch * steps]
    fits = [TRAINERS[lib](name, *workload_data(name, x, y, lib)) for lib in LIBRARIES]
    seconds = compare(*fits, repeats=calls, warmup=2)
    return seconds[0] / steps, seconds[1] / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", action="store_true", help="time each library in one block")
    parser.add_argument("--memory-worker", nargs=2, metavar=("LIBRARY", "WORKLOAD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_worker:
        memory_worker(*args.memory_worker)
        return
    if args.sequential:
        _harness.BLOCK = None

    import torch

    import tapeflow as tp

    n = max(batch * steps for batch, steps, *_ in WORKLOADS.values())
    x, y, source = load_slice(n)
    print(f"threads: {THREADS}; kernels: {', '.join(tp.build_info())}; torch {torch.__version__}; data: {source}")
    rows = []
    for name in WORKLOADS:
        ours, theirs = bench(name, x, y)
        memory = [peak_memory_mb(lib, name) for lib in LIBRARIES]
        rows.append((name, ours, theirs, memory))
    print_report(rows)


def print_report(rows) -> None:
    header = (
        f"{'workload':36s} {'tapeflow':>10s} {'pytorch':>10s} {'ratio':>6s} {'target':>7s}  "
        f"{'samples/s tp':>12s} {'pytorch':>8s}  {'peak MiB tp':>11s} {'pytorch':>8s} {'mem ok':>6s}"
    )
    print(header)
    print("-" * len(header))
    for name, ours, theirs, ((mem_ours, exact_ours), (mem_theirs, exact_theirs)) in rows:
        batch, target = WORKLOADS[name][0], WORKLOADS[name][3]
        ratio = ours / theirs
        mark = "" if exact_ours and exact_theirs else "*"
        print(
            f"{TITLES[name]:36s} {ours * 1e3:8.1f}ms {theirs * 1e3:8.1f}ms {ratio:5.2f}x "
            f"{'<=' + format(target, '.1f') + 'x':>7s}{' ' if ratio <= target else '!'} "
            f"{batch / ours:12.0f} {batch / theirs:8.0f}  "
            f"{mem_ours:10.1f}{mark} {mem_theirs:7.1f}{mark} {'yes' if mem_ours <= mem_theirs else 'no':>6s}"
        )
    print("step times are medians per training step; '!' marks a ratio above its target.")
    if any(not (a[1] and b[1]) for *_, (a, b) in rows):
        print("* peak since start-up (this kernel cannot reset VmHWM), so the import peak may hide training's.")


if __name__ == "__main__":
    main()
