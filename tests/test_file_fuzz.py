"""Byte-mutated files of every kind tapeflow writes: each load must end, within a few
seconds, either with exactly the content of the original file or with a ValueError
that names the file. A worker process (tests/file_fuzz_worker.py) does the loads, so a
hang or a crash fails the test instead of stopping it.

A larger campaign runs by hand, against this tree or any other (``--pythonpath``)::

    python tests/test_file_fuzz.py --count 3000 --mode single
    python tests/test_file_fuzz.py --count 3000 --mode random --pythonpath /path/to/other/pkg
    python tests/test_file_fuzz.py --count 3000 --maker /path/to/older/pkg    # files an older version wrote
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import random
import subprocess
import sys
import tempfile
import threading

import pytest

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "file_fuzz_worker.py")
KINDS = ("graph", "weights", "named_weights", "model", "checkpoint")
# the same files as written by tapeflow before checksums (format versions 1 and 2)
LEGACY_ORIGINALS = os.path.join(os.path.dirname(WORKER), "io", "legacy", "fuzz")
LOAD_TIMEOUT_S = 10.0
STARTUP_TIMEOUT_S = 300.0  # generous on a busy machine; a sound load takes milliseconds


def _package_root() -> str:
    import tapeflow

    return os.path.dirname(os.path.dirname(os.path.abspath(tapeflow.__file__)))


class Worker:
    """A worker process; `ask` returns its reply, or None if it hung (then it is killed)."""

    def __init__(self, pythonpath: str):
        env = {**os.environ, "PYTHONPATH": pythonpath, "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen(
            [sys.executable, WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.replies: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:  # importing tapeflow on a busy machine is not part of any load's time
            ready = self.replies.get(timeout=STARTUP_TIMEOUT_S)
        except queue.Empty:
            ready = None
        if ready != {"ready": True}:
            self.close()
            raise RuntimeError(f"the fuzz worker did not start (with PYTHONPATH={pythonpath})")

    def _read(self) -> None:
        for line in self.process.stdout:
            self.replies.put(json.loads(line))
        self.replies.put(None)  # the process ended

    def ask(self, request: dict, timeout: float):
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        try:
            reply = self.replies.get(timeout=timeout)
        except queue.Empty:
            self.close()
            return "hang"
        return "crash" if reply is None else reply

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def mutate(data: bytes, rng: random.Random, mode: str) -> bytes:
    """One damaged copy: "single" sets one byte to another value; "random" also zeroes
    pairs, flips bits, overwrites short runs and truncates."""
    out = bytearray(data)
    choice = "byte" if mode == "single" else rng.choice(["byte", "zero2", "bits", "run", "truncate"])
    at = rng.randrange(len(out))
    if choice == "byte":
        out[at] = (out[at] + rng.randrange(1, 256)) % 256
    elif choice == "zero2":
        out[at : at + 2] = b"\0\0"[: len(out) - at]
    elif choice == "bits":
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)
    elif choice == "run":
        n = min(rng.randint(2, 16), len(out) - at)
        out[at : at + n] = bytes(rng.randrange(256) for _ in range(n))
    else:
        del out[max(at, 1) :]
    return bytes(out)


def campaign(
    count: int,
    mode: str,
    seed: int,
    pythonpath: str,
    kinds=KINDS,
    directory: str | None = None,
    maker: str | None = None,
    originals: str | None = None,
) -> dict:
    """Counts of outcomes per kind, with a few examples of each bad outcome. The original
    files are those in `originals`, or written by the tapeflow at `maker` (by default the
    one that loads them)."""
    own = tempfile.TemporaryDirectory() if directory is None else None
    directory = own.name if own else directory
    if originals is not None:
        paths = {kind: os.path.join(originals, f"{kind}.h5") for kind in kinds}
    else:
        writer = Worker(maker or pythonpath)
        try:
            paths = writer.ask({"make": directory}, timeout=120)
        finally:
            writer.close()
    worker = Worker(pythonpath)
    try:
        assert isinstance(paths, dict), f"the worker could not write the original files: {paths}"
        results = {}
        for kind in kinds:
            reference = worker.ask({"kind": kind, "path": paths[kind]}, timeout=120)
            assert reference["outcome"] == "loaded", reference
            original = open(paths[kind], "rb").read()
            rng = random.Random(f"{seed}-{kind}")
            counts, examples = collections.Counter(), collections.defaultdict(list)
            seen = set()
            for i in range(count):
                data = original
                while data == original or data in seen:  # zeroing zeros, say, changes nothing
                    data = mutate(original, rng, mode)
                seen.add(data)
                path = os.path.join(directory, f"mutant-{kind}-{i}.h5")
                with open(path, "wb") as f:
                    f.write(data)
                reply = worker.ask({"kind": kind, "path": path}, timeout=LOAD_TIMEOUT_S)
                if reply in ("hang", "crash"):
                    outcome, detail = reply, path
                    worker.close()
                    worker = Worker(pythonpath)
                elif reply["outcome"] == "loaded":
                    outcome = "same" if reply["detail"] == reference["detail"] else "different"
                    detail = path
                else:
                    outcome, detail = reply["outcome"], reply["detail"]
                counts[outcome] += 1
                if outcome not in ("same", "refused"):
                    examples[outcome].append(detail)
                    os.rename(path, path + f".{outcome}")  # kept for a look when `directory` is given
                else:
                    os.remove(path)
            results[kind] = {"counts": dict(counts), "examples": {k: v[:3] for k, v in examples.items()}}
        return results
    finally:
        worker.close()
        if own:
            own.cleanup()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["single", "random"])
@pytest.mark.parametrize("version", ["current", "before checksums"])
def test_every_mutated_file_loads_identically_or_is_refused_naming_the_file(mode, version):
    originals = LEGACY_ORIGINALS if version == "before checksums" else None
    results = campaign(count=100, mode=mode, seed=1, pythonpath=_package_root(), originals=originals)
    for kind, result in results.items():
        counts = result["counts"]
        # files without checksums can only be checked for structure: a changed value loads
        bad_outcomes = ("hang", "crash", "raw") if originals else ("hang", "crash", "different", "raw")
        bad = {k: counts.get(k, 0) for k in bad_outcomes}
        assert not any(bad.values()), (kind, bad, result["examples"])
        assert counts.get("refused", 0) > 0 and sum(counts.values()) == 100, (kind, counts)


def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="mutations per kind")
    parser.add_argument("--mode", choices=["single", "random"], default="single")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pythonpath", default=None, help="the directory holding the tapeflow package to test")
    parser.add_argument("--maker", default=None, help="the tapeflow package that writes the originals (default: same)")
    parser.add_argument("--originals", default=None, help="a directory of original files (default: written anew)")
    parser.add_argument("--keep", default=None, help="a directory to keep the bad mutants in")
    args = parser.parse_args()
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    pythonpath = args.pythonpath or _package_root()
    results = campaign(
        args.count, args.mode, args.seed, pythonpath, directory=args.keep, maker=args.maker, originals=args.originals
    )
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    _main()
