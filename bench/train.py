"""Training benchmark: tapeflow's `model.fit`, `train_on_batch` and eager GradientTape step
against the same training in PyTorch and in Keras 3 on JAX.

    .venv/bin/python bench/train.py                       # both workloads, every system
    .venv/bin/python bench/train.py --workloads mlp       # the MLP alone
    .venv/bin/python bench/train.py --rounds 5            # more rounds, for a busy machine
    .venv/bin/python bench/train.py --systems tapeflow keras-jax

Two workloads, with the same data (a Fashion-MNIST slice, random images when the files
are missing), the same threads and the same optimizer:

- the MNIST tutorial's MLP: 784-256-256-10 (ReLU), dropout 0.2 after each hidden layer,
  Adam, batch 128;
- TensorFlow's "Deep MNIST" CNN (5x5x32 and 5x5x64 convolutions, each followed by a 2x2
  max-pool, dense 1024 with dropout 0.5, then 10 logits), Adam, batch 50. tapeflow and
  Keras run it on NHWC images and PyTorch on NCHW ones.

The systems, each timed over one pass of a few batches per call:

- tapeflow: one `model.fit` epoch (shuffling, batching, loss and accuracy included), the
  step frozen into a graph (`compile`'s default, as Keras's `run_eagerly=False`);
- tapeflow-tob: `model.train_on_batch` on each batch in turn (the frozen step, without
  fit's loop);
- tapeflow-tape: the eager step a user writes: forward pass, loss, `tp.GradientTape`
  gradients and `optimizer.apply_gradients`, on the tape;
- tapeflow-eager: one `model.fit` epoch with `compile(jit=False)`;
- pytorch: the loop that `fit` stands for: a shuffled pass doing forward, loss, backward
  and an Adam step, keeping a running loss and accuracy;
- keras-jax, keras-jax-tob: Keras 3 on JAX, `model.fit` and `train_on_batch`; keras-tf: Keras 3
  on TensorFlow (oneDNN), `model.fit` (all in the bench-only environment `.venv-bench`; left
  out where it is missing).

Each system trains in a process of its own, one process at a time, pinned to as many cores
as threads, so that two never share the cores (nor load two OpenMP runtimes into one
process). The processes alternate over several rounds, which spreads slow spells of a
shared machine over all of them. A process reports its step times and its peak resident
set during training, less the resident set after imports and data. Reported: the median
step time over all rounds, the per-round medians, and each system's ratio to PyTorch's
and to Keras-on-JAX's `fit`, all measured in the same run.
Targets for tapeflow's `fit`: at most 0.9x Keras-on-JAX's `fit` for the MLP and 0.85x
Keras-on-TensorFlow's for the CNN; at most 1.2x PyTorch's step for the MLP and 1.3x for the
CNN; peak memory at most PyTorch's (for the CNN at most 0.6x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import THREADS, bench_python, pin_threads  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

# name: (batch size, steps per timed call, timed calls per round)
WORKLOADS = {
    "mlp": (128, 20, 8),
    "cnn": (50, 5, 4),
}
# tapeflow fit's step-time targets against each peer, and its peak memory's against PyTorch's
TARGETS = {"mlp": {"pytorch": 1.2, "keras-jax": 0.9}, "cnn": {"pytorch": 1.3, "keras-tf": 0.85}}
MEMORY_TARGETS = {"mlp": 1.0, "cnn": 0.6}
WARMUP_CALLS = 2
TITLES = {
    "mlp": "MLP 784-256-256-10 with dropout, Adam, batch 128",
    "cnn": "Deep-MNIST CNN, Adam, batch 50",
}
SYSTEMS = (
    "tapeflow",
    "tapeflow-tob",
    "tapeflow-tape",
    "tapeflow-eager",
    "pytorch",
    "keras-jax",
    "keras-jax-tob",
    "keras-tf",
)
KERAS = ("keras-jax", "keras-jax-tob", "keras-tf")


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


def workload_data(name: str, x: np.ndarray, y: np.ndarray, system: str):
    """The inputs one system's model takes: flat rows for the MLP, NHWC or NCHW images for the CNN."""
    if name == "mlp":
        return x.reshape(len(x), 784), y
    return (x[:, None] if system == "pytorch" else x[..., None]).copy(), y


# ------------------------------------------------------------------ models
def keras_style_model(keras, name: str):
    """The workload's network in a Keras-style API: `keras` is tapeflow itself or Keras 3."""
    layers = keras.layers
    if name == "mlp":
        stack = [
            layers.Input((784,)),
            layers.Dense(256, activation="relu"),
            layers.Dropout(0.2),
            layers.Dense(256, activation="relu"),
            layers.Dropout(0.2),
            layers.Dense(10),
        ]
    else:
        stack = [
            layers.Input((28, 28, 1)),
            layers.Conv2D(32, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(2),
            layers.Conv2D(64, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(2),
            layers.Flatten(),
            layers.Dense(1024, activation="relu"),
            layers.Dropout(0.5),
            layers.Dense(10),
        ]
    return keras.Sequential(stack)


def _batches(x: np.ndarray, y: np.ndarray, batch: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(x[i : i + batch], y[i : i + batch]) for i in range(0, len(x), batch)]


def tapeflow_trainer(name: str, x: np.ndarray, y: np.ndarray, mode: str = "fit"):
    """A function that runs one pass over (x, y): a `model.fit` epoch (the step frozen, or
    eager for mode "eager"), `train_on_batch` per batch ("tob"), or the eager GradientTape
    step per batch ("tape")."""
    # lazily: a worker process loads only the system it times
    import tapeflow as tp

    tp.set_num_threads(THREADS)
    tp.random.seed(0)
    model = keras_style_model(tp, name)
    loss = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=tp.optimizers.Adam(1e-3), loss=loss, metrics=["accuracy"], jit=mode != "eager")
    batch = WORKLOADS[name][0]
    if mode in ("fit", "eager"):
        return lambda: model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
    batches = _batches(x, y, batch)
    if mode == "tob":
        return lambda: [model.train_on_batch(xb, yb) for xb, yb in batches]
    optimizer, variables = model.optimizer, model.trainable_weights
    tensors = [(tp.tensor(xb), tp.tensor(yb)) for xb, yb in batches]

    def tape_pass():
        for xb, yb in tensors:
            with tp.GradientTape() as tape:
                value = loss(yb, model(xb, training=True))
            optimizer.apply_gradients(zip(tape.gradient(value, variables), variables, strict=True))
        return float(value)

    return tape_pass


def keras_trainer(name: str, x: np.ndarray, y: np.ndarray, mode: str = "fit", backend: str = "jax"):
    """Keras 3 on JAX or TensorFlow: a function that runs one `model.fit` epoch, or `train_on_batch` per batch."""
    os.environ["KERAS_BACKEND"] = backend
    if backend == "tensorflow":
        # lazily: a worker process loads only the system it times
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(THREADS)
        tf.config.threading.set_inter_op_parallelism_threads(THREADS)
    # lazily: as above
    import keras

    keras.utils.set_random_seed(0)
    model = keras_style_model(keras, name)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    batch = WORKLOADS[name][0]
    if mode == "fit":
        return lambda: model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
    batches = _batches(x, y, batch)
    return lambda: [model.train_on_batch(xb, yb) for xb, yb in batches]


def pytorch_trainer(name: str, x: np.ndarray, y: np.ndarray):
    """A function that runs the PyTorch equivalent of one `model.fit` epoch over (x, y)."""
    # lazily: a worker process loads only the system it times
    import torch
    from _models import torch_model
    from torch import nn

    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    if name == "mlp":
        model = nn.Sequential(
            *(nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.2)),
            *(nn.Linear(256, 256), nn.ReLU(), nn.Dropout(0.2)),
            nn.Linear(256, 10),
        )
    else:
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
    "tapeflow-tob": lambda name, x, y: tapeflow_trainer(name, x, y, mode="tob"),
    "tapeflow-tape": lambda name, x, y: tapeflow_trainer(name, x, y, mode="tape"),
    "tapeflow-eager": lambda name, x, y: tapeflow_trainer(name, x, y, mode="eager"),
    "pytorch": pytorch_trainer,
    "keras-jax": keras_trainer,
    "keras-jax-tob": lambda name, x, y: keras_trainer(name, x, y, mode="tob"),
    "keras-tf": lambda name, x, y: keras_trainer(name, x, y, backend="tensorflow"),
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


def _pin_cores() -> None:
    """Keep this process on THREADS cores (where the machine has more), as every system is."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) > THREADS:
        os.sched_setaffinity(0, cores[:THREADS])


def worker(system: str, name: str, data: str) -> None:
    """Run in a fresh process: train one system on one workload and print a JSON report."""
    _pin_cores()
    with np.load(data) as arrays:
        x, y = workload_data(name, arrays["x"], arrays["y"], system)
    reset = _reset_peak()
    baseline = _status_kb("VmRSS") if reset else _status_kb("VmHWM")
    run = TRAINERS[system](name, x, y)
    for _ in range(WARMUP_CALLS):
        run()
    seconds = []
    for _ in range(WORKLOADS[name][2]):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    report = {"seconds": seconds, "baseline_kb": baseline, "peak_kb": _status_kb("VmHWM"), "exact": reset}
    print(json.dumps(report))


def run_worker(system: str, name: str, data: Path) -> dict:
    """One worker process's report; its step times in seconds per step."""
    python = bench_python() if system in KERAS else sys.executable
    cmd = [python, __file__, "--worker", system, name, str(data)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{system} on {name} failed:\n{result.stderr[-4000:]}")
    report = json.loads(result.stdout.strip().splitlines()[-1])
    report["step_seconds"] = [s / WORKLOADS[name][1] for s in report.pop("seconds")]
    return report


# -------------------------------------------------------------------- main
def bench(name: str, data: Path, rounds: int, systems: list[str]) -> dict:
    """Every round runs every system, one after the other; the order reverses every other round."""
    reports = {system: [] for system in systems}
    for round_ in range(rounds):
        for system in systems if round_ % 2 == 0 else systems[::-1]:
            reports[system].append(run_worker(system, name, data))
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
    parser.add_argument("--rounds", type=int, default=3, help="processes per system and workload")
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS), help="the systems to time")
    parser.add_argument("--worker", nargs=3, metavar=("SYSTEM", "WORKLOAD", "DATA"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return

    # lazily: the parent process reads the data and the build facts; each worker imports only its own system
    import tapeflow as tp

    systems = list(args.systems)
    if bench_python() is None and any(s in KERAS for s in systems):
        print("Keras on JAX and TensorFlow left out: .venv-bench is missing (make bench-env builds it)")
        systems = [s for s in systems if s not in KERAS]
    n = max(batch * steps for batch, steps, _ in WORKLOADS.values())
    x, y, source = load_slice(n)
    versions = [f"{THREADS} threads", f"kernels: {', '.join(tp.build_info())}"]
    if "pytorch" in systems:
        versions.append("torch " + _version(sys.executable, "torch"))
    if any(s in KERAS for s in systems):
        versions.append(
            f"keras {_version(bench_python(), 'keras')} on jax {_version(bench_python(), 'jax')}"
            f" and tensorflow {_version(bench_python(), 'tensorflow')}"
        )
    print(f"{'; '.join(versions)}; data: {source}")
    print(f"each system in its own process, {args.rounds} rounds, one process at a time")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.workloads:
            batch, steps = WORKLOADS[name][:2]
            data = Path(tmp) / f"{name}.npz"
            np.savez(data, x=x[: batch * steps], y=y[: batch * steps])
            reports = bench(name, data, args.rounds, systems)
            results[name] = {system: summarize(r) for system, r in reports.items()}
    for name, summaries in results.items():
        print_report(name, summaries)


def _version(python: str, module: str) -> str:
    code = f"import {module}; print({module}.__version__)"
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    return subprocess.run([python, "-c", code], capture_output=True, text=True, env=env).stdout.strip() or "?"


def print_report(name: str, summaries: dict) -> None:
    batch = WORKLOADS[name][0]
    torch_ = summaries.get("pytorch")
    peers = [p for p in ("pytorch", "keras-jax", "keras-tf") if p in summaries]
    print(f"\n{TITLES[name]} (ms per training step)")
    header = f"{'system':15s} {'ms/step':>8s} {'samples/s':>10s} {'peak MiB':>9s}" + "".join(
        f" {'/' + p:>10s}" for p in peers
    )
    print(header)
    print("-" * len(header))
    for system, ours in summaries.items():
        mark = "" if ours["exact"] else "*"
        ratios = "".join(f" {ours['median'] / summaries[p]['median']:9.2f}x" for p in peers)
        rate = batch / ours["median"]
        print(f"{system:15s} {ours['median'] * 1e3:8.2f} {rate:10.0f} {ours['peak_mb']:8.1f}{mark}{ratios}")
    fit = summaries.get("tapeflow")
    if fit is not None:
        for reference, target in TARGETS[name].items():
            if reference in summaries:
                ratio = fit["median"] / summaries[reference]["median"]
                verdict = "met" if ratio <= target else "missed"
                print(f"target: tapeflow fit <= {target}x {reference}: {ratio:.2f}x, {verdict}")
        if torch_ is not None:
            share = fit["peak_mb"] / max(torch_["peak_mb"], 1e-9)
            limit = MEMORY_TARGETS[name]
            print(f"target: peak memory <= {limit}x PyTorch's: {share:.2f}x, {'met' if share <= limit else 'missed'}")
    print("per-round medians (ms/step), to show the noise:")
    for system, ours in summaries.items():
        print(f"  {system}: {_ms(ours['rounds'])}")
    if any(not s["exact"] for s in summaries.values()):
        print("* peak since start-up (this kernel cannot reset VmHWM), so the import peak may hide training's.")


def _ms(seconds: list[float]) -> str:
    return "/".join(f"{s * 1e3:.2f}" for s in seconds)


if __name__ == "__main__":
    main()
