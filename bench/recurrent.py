"""Recurrent training benchmark: tapeflow's `model.fit` of a sentiment-style LSTM or GRU against PyTorch.

Each model trains in tapeflow and in the same training loop in PyTorch.

    .venv/bin/python bench/recurrent.py             # a few minutes on 2 cores
    .venv/bin/python bench/recurrent.py --rounds 3  # more rounds, for a busy machine
    .venv/bin/python bench/recurrent.py --cells gru --libraries tapeflow pytorch

The model is Embedding(10000, 128) -> LSTM(128) (or GRU(128)) -> Dense(1) over sequences of 80
token ids, binary cross-entropy on the logit, Adam, batch 64, with random ids and labels. Each
timed call is one `fit` epoch of a few steps, the step frozen into a graph (`compile`'s default);
on the PyTorch side it is the loop `fit` stands for (nn.Embedding, nn.LSTM or nn.GRU, nn.Linear,
BCEWithLogitsLoss, Adam). Keras's GRU (reset_after=True) is the form of PyTorch's nn.GRU.
"tapeflow-steps" is tapeflow with its recurrent layer run step by step (the path used where the
whole-sequence op does not apply: other activations, dropout while training), for comparison.

Each library trains in a process of its own, one at a time, alternating over the rounds.
Reported, for each cell: the median step time of each library and its ratio to PyTorch's, in wall
time and in CPU time (of all the process's threads, which a busy machine's load disturbs less).
Target: tapeflow's step time at most 0.9x PyTorch's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import THREADS, pin_threads  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

VOCAB, UNITS, STEPS, BATCH = 10000, 128, 80, 64
STEPS_PER_CALL, CALLS, WARMUP_CALLS = 4, 4, 1
LIBRARIES = ("tapeflow", "tapeflow-steps", "pytorch")
CELLS = ("lstm", "gru")
TARGET = 0.9


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    n = BATCH * STEPS_PER_CALL
    return rng.integers(0, VOCAB, (n, STEPS)).astype(np.int64), rng.integers(0, 2, (n, 1)).astype(np.float32)


def tapeflow_trainer(x, y, cell: str, steps: bool = False):
    import tapeflow as tp

    tp.set_num_threads(THREADS)
    recurrent = {"lstm": tp.layers.LSTM, "gru": tp.layers.GRU}[cell]
    if steps:
        recurrent._runs_as_one_op = lambda self, mask: False
    layers = tp.layers
    model = tp.Sequential(
        [tp.Input((STEPS,), dtype="int64"), layers.Embedding(VOCAB, UNITS), recurrent(UNITS), layers.Dense(1)]
    )
    model.compile(optimizer=tp.optimizers.Adam(1e-3), loss=tp.losses.BinaryCrossentropy(from_logits=True))
    return lambda: model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)


def pytorch_trainer(x, y, cell: str):
    import torch
    from torch import nn

    torch.set_num_threads(THREADS)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(VOCAB, UNITS)
            self.recurrent = {"lstm": nn.LSTM, "gru": nn.GRU}[cell](UNITS, UNITS, batch_first=True)
            self.dense = nn.Linear(UNITS, 1)

        def forward(self, ids):
            _, state = self.recurrent(self.embedding(ids))
            h = state[0] if isinstance(state, tuple) else state  # the LSTM's state is (h, c)
            return self.dense(h[-1])

    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), 1e-3, eps=1e-7)
    loss_fn = nn.BCEWithLogitsLoss()
    xs, ys = torch.from_numpy(x), torch.from_numpy(y)

    def epoch():
        order = torch.randperm(len(xs))
        total = torch.zeros(())
        for start in range(0, len(xs), BATCH):
            idx = order[start : start + BATCH]
            optimizer.zero_grad()
            loss = loss_fn(model(xs[idx]), ys[idx])
            loss.backward()
            optimizer.step()
            with torch.no_grad():  # the running loss fit keeps
                total += loss.detach()
        return float(total)

    return epoch


def worker(library: str, cell: str) -> None:
    """Run in a fresh process: train one library and print its step times as JSON."""
    x, y = data()
    if library == "pytorch":
        fit = pytorch_trainer(x, y, cell)
    else:
        fit = tapeflow_trainer(x, y, cell, steps=library == "tapeflow-steps")
    for _ in range(WARMUP_CALLS):
        fit()
    seconds, cpu = [], []
    for _ in range(CALLS):
        start, start_cpu = time.perf_counter(), time.process_time()
        fit()
        seconds.append((time.perf_counter() - start) / STEPS_PER_CALL)
        cpu.append((time.process_time() - start_cpu) / STEPS_PER_CALL)
    print(json.dumps({"step_seconds": seconds, "cpu_seconds": cpu}))


def run_worker(library: str, cell: str) -> dict:
    """One worker process's step times: wall and CPU (all its threads) seconds per step."""
    command = [sys.executable, __file__, "--worker", library, "--cells", cell]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{library} failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def report(cell: str, times: dict, cpu: dict) -> None:
    """Print one cell's table: each library's median step time and its ratio to PyTorch's."""
    print(f"Embedding({VOCAB}, {UNITS}) + {cell.upper()}({UNITS}) + Dense(1), {STEPS} steps, batch {BATCH}, Adam")
    print(f"threads: {THREADS}")
    theirs = statistics.median(times["pytorch"]) if "pytorch" in times else None
    theirs_cpu = statistics.median(cpu["pytorch"]) if "pytorch" in cpu else None
    for lib, seconds in times.items():
        ms, cpu_ms = statistics.median(seconds) * 1e3, statistics.median(cpu[lib]) * 1e3
        ratio = f" ({ms / (theirs * 1e3):5.2f}x pytorch)" if theirs else ""
        cpu_ratio = f" ({cpu_ms / (theirs_cpu * 1e3):5.2f}x)" if theirs_cpu else ""
        print(f"  {lib:16s} wall {ms:8.1f} ms/step{ratio}   cpu {cpu_ms:8.1f} ms/step{cpu_ratio}")
    if theirs and "tapeflow" in times:
        ok = statistics.median(times["tapeflow"]) <= TARGET * theirs
        print(f"  target tapeflow <= {TARGET}x pytorch: {'met' if ok else 'not met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="processes per library")
    parser.add_argument("--libraries", nargs="+", choices=LIBRARIES, default=list(LIBRARIES))
    parser.add_argument("--cells", nargs="+", choices=CELLS, default=list(CELLS), help="recurrent layers to time")
    parser.add_argument("--worker", metavar="LIBRARY", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.cells[0])
        return
    for cell in args.cells:
        times = {lib: [] for lib in args.libraries}
        cpu = {lib: [] for lib in args.libraries}
        for round_ in range(args.rounds):
            order = args.libraries if round_ % 2 == 0 else args.libraries[::-1]
            for lib in order:
                result = run_worker(lib, cell)
                times[lib].extend(result["step_seconds"])
                cpu[lib].extend(result["cpu_seconds"])
        report(cell, times, cpu)


if __name__ == "__main__":
    main()
