"""Timing helpers shared by the benchmarks: median wall time and a ratio table."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path

THREADS = int(os.environ.get("TAPEFLOW_BENCH_THREADS", "2"))
BLOCK = 5  # calls per alternating block; None times each function in one block


def pin_threads() -> None:
    """Use the same number of threads in every library (call before importing them)."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(THREADS)


def median_seconds(fn, repeats: int = 30, warmup: int = 5) -> float:
    """Median wall time of fn() over `repeats` calls after `warmup` calls."""
    return compare(fn, repeats=repeats, warmup=warmup)[0]


def compare(*fns, repeats: int = 30, warmup: int = 5) -> list[float]:
    """Median wall time of each function, measured in alternating blocks of BLOCK calls.

    Alternating spreads any drift in machine load over all of them alike.
    """
    block = BLOCK or repeats
    for fn in fns:
        for _ in range(warmup):
            fn()
    times = [[] for _ in fns]
    for _ in range(max(1, repeats // block)):
        for fn, bucket in zip(fns, times, strict=True):
            for _ in range(block):
                start = time.perf_counter()
                fn()
                bucket.append(time.perf_counter() - start)
    return [statistics.median(bucket) for bucket in times]


def print_table(rows, reference: str) -> None:
    """rows: (workload, tapeflow seconds, reference seconds)."""
    header = f"{'workload':44s} {'tapeflow':>11s} {reference:>11s} {'ratio':>7s}"
    print(header)
    print("-" * len(header))
    for name, ours, theirs in rows:
        print(f"{name:44s} {ours * 1e3:9.3f}ms {theirs * 1e3:9.3f}ms {ours / theirs:6.2f}x")


# ------------------------------------------------------- subprocess peers
BENCH_PYTHON = Path(__file__).resolve().parent.parent / ".venv-bench" / "bin" / "python"


def bench_python() -> str | None:
    """The interpreter of the reference systems' environment (`make bench-env`), or None where it is missing."""
    return str(BENCH_PYTHON) if BENCH_PYTHON.exists() else None


def run_json(cmd: list[str]) -> dict:
    """Run one worker process and return the JSON object on the last line of its output."""
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def alternate(commands: dict[str, list[str]], rounds: int) -> dict[str, list[dict]]:
    """Each system's worker once per round, one process at a time; every other round runs them in reverse order."""
    names = list(commands)
    reports = {name: [] for name in names}
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            reports[name].append(run_json(commands[name]))
    return reports


def round_ratio(ours: list[float], theirs: list[float]) -> float:
    """The median over rounds of ours / theirs, each a per-round median time."""
    return statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
