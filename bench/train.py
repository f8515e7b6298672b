"""Training benchmark: tapeflow's `model.fit` against the same training loop in PyTorch.

    .venv/bin/python bench/train.py             # about a minute on 2 cores
    .venv/bin/python bench/train.py --rounds 5  # more rounds, for a busy machine

Two workloads, with the same data (a Fashion-MNIST slice, random images when the files
are missing), the same threads and the same optimizer:

- the MLP 784-256-256-10 (ReLU), Adam, batch 128;
- TensorFlow's "Deep MNIST" CNN (5x5x32 and 5x5x64 convolutions, each followed by a 2x2
  max-pool, dense 1024 with dropout 0.5, then 10 logits), Adam, batch 50. tapeflow
  runs it on NHWC images and PyTorch on NCHW ones.

Each timed call is one `model.fit` epoch of a few steps (shuffling, batching, loss and
accuracy included), with the step frozen into a graph (`compile`'s default, as Keras's
`run_eagerly=False`) and run eagerly on the tape (`compile(jit=False)`).
On the PyTorch side it is the loop that `fit` stands for: a shuffled
pass that does forward, loss, backward and an Adam step, and keeps a running loss and
accuracy.

Each library trains in a process of its own, one process at a time, so that the two
never share the cores (nor load two OpenMP runtimes into one process). The processes
alternate over several rounds, which spreads slow spells of a shared machine over both.
A process reports its step times and its peak resident set during training, less the
resident set after imports and data. Reported: the median step time over all rounds, the
spread of the per-round medians, and the ratio tapeflow / PyTorch.
Targets: step time at most 1.2x PyTorch's for the MLP and 1.3x for the CNN, and peak
memory at most PyTorch's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import THREADS, pin_threads  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

# name: (batch size, steps per timed call, timed calls per round, step-time target)
WORKLOADS = {
    "mlp": (128, 20, 8, 1.2),
    "cnn": (50, 5, 4, 1.3),
}
WARMUP_CALLS = 2
TITLES = {"mlp": "MLP 784-256-256-10, Adam, batch 128", "cnn": "Deep-MNIST CNN, Adam, batch 50"}
LIBRARIES = ("tapeflow", "tapeflow-eager", "pytorch")


# -------------------------------------------------------------------- data
def load_slice(n: int) -> tuple[np.ndarray, np.ndarray, str]:
    """n images [n, 28, 28] float32 in [0, 1] and int64 labels, and where they came from."""
    try:
        from tapeflow.data.datasets import mnist

        (x, y), _ = mnist.load_data("fashion")
        return (x[:n].astype(np.float32) / 255.0), y[:n].astype(np.int64), "Fashion-MNIST"
    except FileNotFoundError:
        rng = np.random.default_rng(0)
        return rng.random((n, 28, 28), dtype=np.float32), rng.integers(0, 10, n), "random images"


def workload_data(name: str, x: np.ndarray, y: np.ndarray, library: str):
    """The inputs one library's model takes: flat rows for the MLP, NHWC or NCHW images for the CNN."""
    if name == "mlp":
        return x.reshape(len(x), 784), y
    return (x[..., None] if library == "tapeflow" else x[:, None]).copy(), y


# ------------------------------------------------------------------ models
def tapeflow_trainer(name: str, x: np.ndarray, y: np.ndarray, jit="auto"):
    """A function that runs one `model.fit` epoch over (x, y), the step frozen or eager."""
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
        jit=jit,
    )
    batch = WORKLOADS[name][0]
    return lambda: model.fit(x, y, batch_size=batch, epochs=1, verbose=0)


def pytorch_trainer(name: str, x: np.ndarray, y: np.ndarray):
    """A function that runs the PyTorch equivalent of one `model.fit` epoch over (x, y)."""
    import torch
    from _models import torch_model
    from torch import nn

    torch.set_num_threads(THREADS)
    model = torch_model(name)
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


TRAINERS = {
    "tapeflow": tapeflow_trainer,
    "tapeflow-eager": lambda name, x, y: tapeflow_trainer(name, x, y, jit=False),
    "pytorch": pytorch_trainer,
}


# ------------------------------------------------------------------ worker
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


def worker(library: str, name: str, data: str) -> None:
    """Run in a fresh process: train one library on one workload and print a JSON report."""
    ours = library.startswith("tapeflow")
    __import__("tapeflow" if ours else "torch")
    with np.load(data) as arrays:
        x, y = workload_data(name, arrays["x"], arrays["y"], "tapeflow" if ours else library)
    reset = _reset_peak()
    baseline = _status_kb("VmRSS") if reset else _status_kb("VmHWM")
    fit = TRAINERS[library](name, x, y)
    for _ in range(WARMUP_CALLS):
        fit()
    seconds = []
    for _ in range(WORKLOADS[name][2]):
        start = time.perf_counter()
        fit()
        seconds.append(time.perf_counter() - start)
    report = {"seconds": seconds, "baseline_kb": baseline, "peak_kb": _status_kb("VmHWM"), "exact": reset}
    print(json.dumps(report))


def run_worker(library: str, name: str, data: Path) -> dict:
    """One worker process's report; its step times in seconds per step."""
    cmd = [sys.executable, __file__, "--worker", library, name, str(data)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{library} on {name} failed:\n{result.stderr}")
    report = json.loads(result.stdout.strip().splitlines()[-1])
    report["step_seconds"] = [s / WORKLOADS[name][1] for s in report.pop("seconds")]
    return report


# -------------------------------------------------------------------- main
def bench(name: str, data: Path, rounds: int) -> dict:
    """Every round runs both libraries, one after the other; the first alternates between rounds."""
    reports = {lib: [] for lib in LIBRARIES}
    for round_ in range(rounds):
        order = LIBRARIES if round_ % 2 == 0 else LIBRARIES[::-1]
        for lib in order:
            reports[lib].append(run_worker(lib, name, data))
    return reports


def summarize(reports: list[dict]) -> dict:
    steps = [s for r in reports for s in r["step_seconds"]]
    medians = [statistics.median(r["step_seconds"]) for r in reports]
    peak_mb = max(max(r["peak_kb"] - r["baseline_kb"], 0) for r in reports) / 1024
    return {
        "median": statistics.median(steps),
        "rounds": medians,
        "peak_mb": peak_mb,
        "exact": all(r["exact"] for r in reports),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="processes per library and workload")
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--worker", nargs=3, metavar=("LIBRARY", "WORKLOAD", "DATA"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return

    import tapeflow as tp

    n = max(batch * steps for batch, steps, *_ in WORKLOADS.values())
    x, y, source = load_slice(n)
    torch_version = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    ).stdout.strip()
    print(f"threads: {THREADS}; kernels: {', '.join(tp.build_info())}; torch {torch_version}; data: {source}")
    print(f"each library in its own process, {args.rounds} rounds, one process at a time")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.workloads:
            batch, steps = WORKLOADS[name][:2]
            data = Path(tmp) / f"{name}.npz"
            np.savez(data, x=x[: batch * steps], y=y[: batch * steps])
            reports = bench(name, data, args.rounds)
            theirs = summarize(reports["pytorch"])
            rows.append((name, summarize(reports["tapeflow"]), theirs))
            rows.append((f"{name}-eager", summarize(reports["tapeflow-eager"]), theirs))
    print_report(rows)


def print_report(rows) -> None:
    header = (
        f"{'workload':36s} {'tapeflow':>9s} {'pytorch':>9s} {'ratio':>6s} {'target':>7s}  "
        f"{'samples/s tp':>12s} {'pytorch':>8s}  {'peak MiB tp':>11s} {'pytorch':>8s} {'mem ok':>6s}"
    )
    print(header)
    print("-" * len(header))
    for name, ours, theirs in rows:
        batch, target = WORKLOADS[_workload(name)][0], WORKLOADS[_workload(name)][3]
        ratio = ours["median"] / theirs["median"]
        mark = "" if ours["exact"] and theirs["exact"] else "*"
        print(
            f"{_title(name):36s} {ours['median'] * 1e3:7.1f}ms {theirs['median'] * 1e3:7.1f}ms {ratio:5.2f}x "
            f"{'<=' + format(target, '.1f') + 'x':>7s}{' ' if ratio <= target else '!'} "
            f"{batch / ours['median']:12.0f} {batch / theirs['median']:8.0f}  "
            f"{ours['peak_mb']:10.1f}{mark} {theirs['peak_mb']:7.1f}{mark} "
            f"{'yes' if ours['peak_mb'] <= theirs['peak_mb'] else 'no':>6s}"
        )
    print("step times are medians per training step over all rounds; '!' marks a ratio above its target.")
    print("per-round medians (ms/step), to show the noise:")
    for name, ours, theirs in rows:
        ratios = [a / b for a, b in zip(ours["rounds"], theirs["rounds"], strict=True)]
        print(
            f"  {name}: tapeflow {_ms(ours['rounds'])}  pytorch {_ms(theirs['rounds'])}  "
            f"ratio {min(ratios):.2f}-{max(ratios):.2f}x"
        )
    if any(not (ours["exact"] and theirs["exact"]) for _, ours, theirs in rows):
        print("* peak since start-up (this kernel cannot reset VmHWM), so the import peak may hide training's.")


def _workload(row: str) -> str:
    return row.removesuffix("-eager")


def _title(row: str) -> str:
    """The workload's title, shortened for the row of the eager step."""
    return TITLES[row] if row in TITLES else TITLES[_workload(row)].split(",")[0] + ", jit=False"


def _ms(seconds: list[float]) -> str:
    return "/".join(f"{s * 1e3:.1f}" for s in seconds)


if __name__ == "__main__":
    main()
