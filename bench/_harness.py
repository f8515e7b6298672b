"""Timing helpers shared by the benchmarks: median wall time and a ratio table."""

from __future__ import annotations

import os
import statistics
import time

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
