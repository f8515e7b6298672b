"""Frozen graphs against PyTorch eager and onnxruntime, side by side in one run.

Every measurement runs in its own fresh subprocess, one after another, so the
libraries never share the cores or each other's warm caches:

- training step, frozen (compile(jit=True)'s graph) vs tapeflow eager vs PyTorch
  eager: the MLP 784-256-256-10 (Adam, batch 128) and the Deep-MNIST CNN (batch 50);
- batch-1 MLP inference latency: frozen graph vs PyTorch eager vs onnxruntime;
- peak memory of a CNN training step (resident-set growth during the steps);
- elementwise chains (GELU, LSTM gates, tanh chain): frozen with and without
  elementwise fusion vs PyTorch eager.

    python bench/graph.py [--steps N] [--quick] [--rounds N] [--only train|latency|fusion]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
from _models import tapeflow_model, torch_model

HERE = os.path.dirname(os.path.abspath(__file__))
THREADS = 2


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _data(kind: str, batch: int):
    rng = np.random.default_rng(0)
    if kind == "mlp":
        x = rng.random((batch, 784), dtype=np.float32)
    else:
        x = rng.random((batch, 28, 28, 1), dtype=np.float32)
    return x, rng.integers(0, 10, batch).astype(np.int64)


def _timed(step, steps: int, base: float, warmup: int = 5) -> dict:
    """Median and 10th-percentile step times, and the peak resident set above `base`
    (the process after importing its library, before any model or data existed)."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    times = np.array(times) * 1e3
    return {"ms": float(np.median(times)), "p10": float(np.percentile(times, 10)), "mem": _peak_mib() - base}


# ------------------------------------------------------------ workers
def worker_tapeflow_train(kind: str, batch: int, steps: int, jit: bool) -> dict:
    import tapeflow as tp

    tp.set_num_threads(THREADS)
    base = _rss_mib()
    x, y = _data(kind, batch)
    model = tapeflow_model(kind)
    model.compile(tp.optimizers.Adam(1e-3), tp.losses.SparseCategoricalCrossentropy(from_logits=True), jit=jit)
    tx, ty = tp.tensor(x), tp.tensor(y)
    model(tx[:1])
    if jit:
        model.train_on_batch(x, y)  # trace once
        opt = model.optimizer
        graph = model._frozen()[0].graphs[next(iter(model._frozen()[0].graphs))]
        dtype = model.trainable_weights[0].dtype

        def step():
            opt.iterations += 1
            graph(tx, ty, tp.tensor(1e-3, dtype=dtype), tp.tensor(float(opt.iterations), dtype=dtype))

    else:

        def step():
            model.train_step(tx, ty)

    return _timed(step, steps, base)


def worker_torch_train(kind: str, batch: int, steps: int) -> dict:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    base = _rss_mib()
    x, y = _data(kind, batch)
    net = torch_model(kind)
    tx = torch.from_numpy(x) if kind == "mlp" else torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()
    ty = torch.from_numpy(y)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        F.cross_entropy(net(tx), ty).backward()
        opt.step()

    return _timed(step, steps, base)


def latency_call(lib: str):
    """A function running the batch-1 MLP once in `lib` (frozen, eager, torch or onnx), built in this process."""
    x, _ = _data("mlp", 1)
    if lib == "torch":
        import torch

        torch.set_num_threads(THREADS)
        net = torch_model("mlp").eval()
        tx = torch.from_numpy(x)

        def run():
            with torch.no_grad():
                net(tx)

    else:
        import tapeflow as tp

        tp.set_num_threads(THREADS)
        model = tapeflow_model("mlp")
        model(tp.tensor(x))
        graph = model.freeze()
        if lib == "frozen":

            def run():
                graph(x)

        elif lib == "eager":
            tx = tp.tensor(x)

            def run():
                model(tx, training=False)

        else:
            import onnxruntime as ort

            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "mlp.onnx")
                graph.export_onnx(path)
                options = ort.SessionOptions()
                options.intra_op_num_threads = THREADS
                session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
            name = session.get_inputs()[0].name

            def run():
                session.run(None, {name: x})

    return run


def worker_latency(lib: str, steps: int) -> dict:
    base = _rss_mib()
    result = _timed(latency_call(lib), steps, base, warmup=50)
    result["ms"] *= 1000  # microseconds
    result["p10"] *= 1000
    return result


# Elementwise chains, written once against a module with tanh/sigmoid (tapeflow or torch).
def _gelu(m, x):
    return 0.5 * x * (1.0 + m.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def _lstm_gates(m, x):
    return m.sigmoid(x) * m.tanh(x + 1.0) + m.sigmoid(x - 1.0) * x


def _tanh_chain(m, x):
    return m.tanh(m.tanh(m.tanh(x * 2.0 + 1.0)))


CHAINS = {"gelu": _gelu, "lstm_gates": _lstm_gates, "tanh_chain": _tanh_chain}
CHAIN_SHAPE = (256, 1024)


def worker_fusion(lib: str, kind: str, steps: int) -> dict:
    x = np.random.default_rng(0).standard_normal(CHAIN_SHAPE).astype(np.float32)
    chain = CHAINS[kind]
    if lib == "torch":
        import torch

        torch.set_num_threads(THREADS)
        tx = torch.from_numpy(x)

        def run():
            with torch.no_grad():
                chain(torch, tx)

    else:
        import tapeflow as tp
        from tapeflow.graph import passes

        tp.set_num_threads(THREADS)
        graph = tp.freeze(lambda t: chain(tp, t), tp.TensorSpec((None, CHAIN_SHAPE[1])), optimize=False)
        passes.optimize(
            graph,
            passes.DEFAULT_PASSES if lib == "fused" else [p for p in passes.DEFAULT_PASSES if p is not passes.FUSION],
        )

        def run():
            graph(x)

    result = _timed(run, steps, _rss_mib(), warmup=5)
    result["ms"] *= 1000  # microseconds
    result["p10"] *= 1000
    return result


def _worker(args) -> dict:
    if args.what == "fusion":
        return worker_fusion(args.lib, args.kind, args.steps)
    if args.what == "train":
        if args.lib == "torch":
            return worker_torch_train(args.kind, args.batch, args.steps)
        return worker_tapeflow_train(args.kind, args.batch, args.steps, jit=args.lib == "frozen")
    return worker_latency(args.lib, args.steps)


# ------------------------------------------------------------ driver
def run_one(what: str, lib: str, kind: str, batch: int, steps: int) -> dict | None:
    cmd = [sys.executable, __file__, "--worker", what, lib, kind, str(batch), str(steps)]
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS)}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        print(f"  {what} {lib} {kind}: failed: {done.stderr.strip().splitlines()[-1:]}", flush=True)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


TRAIN_LIBS = ("frozen", "eager", "torch")
LATENCY_LIBS = ("frozen", "eager", "torch", "onnx")


def rounds_of(what: str, libs: tuple, kind: str, batch: int, steps: int, rounds: int) -> dict:
    """Every round runs each library in its own process, one after another, the order
    reversed every other round, so slow spells of a shared machine fall on all of them."""
    results = {lib: [] for lib in libs}
    for round_ in range(rounds):
        for lib in libs if round_ % 2 == 0 else libs[::-1]:
            results[lib].append(run_one(what, lib, kind, batch, steps))
    return results


def _median(results: list, key: str = "ms") -> float:
    values = [r[key] for r in results if r]
    return float(np.median(values)) if values else float("nan")


def _per_round(results: dict, lib: str, reference: str) -> list[float]:
    return [a["ms"] / b["ms"] for a, b in zip(results[lib], results[reference], strict=True) if a and b]


def _ratio_text(ratios: list[float]) -> str:
    return " ".join(f"{r:.2f}x" for r in ratios) + (f"  (median {np.median(ratios):.2f}x)" if ratios else "")


def training(rounds: int, steps_override: int | None, quick: bool) -> dict:
    print("\ntraining step (Adam); times are medians over the rounds")
    print(f"{'workload':<22}{'frozen':>12}{'eager':>12}{'torch':>12}{'frozen/torch':>14}{'eager/torch':>13}")
    memory = {}
    per_round = {}
    for kind, batch, steps in (("mlp", 128, 200), ("cnn", 50, 20)):
        steps = steps_override or (max(steps // 10, 3) if quick else steps)
        res = rounds_of("train", TRAIN_LIBS, kind, batch, steps, rounds)
        if kind == "cnn":
            memory = res
        ms = {lib: _median(res[lib]) for lib in TRAIN_LIBS}
        per_round[kind] = _per_round(res, "frozen", "torch")
        print(
            f"{kind + f' batch {batch}':<22}{ms['frozen']:>10.2f}ms{ms['eager']:>10.2f}ms{ms['torch']:>10.2f}ms"
            f"{ms['frozen'] / ms['torch']:>13.2f}x{ms['eager'] / ms['torch']:>12.2f}x",
            flush=True,
        )
    for kind, ratios in per_round.items():
        print(f"  {kind} frozen / torch per round: {_ratio_text(ratios)}")
    return memory


def latency(rounds: int, steps: int) -> None:
    print("\nbatch-1 MLP inference latency (median of each process's calls, then of the rounds)")
    res = rounds_of("latency", LATENCY_LIBS, "mlp", 1, steps, rounds)
    us = {lib: _median(res[lib]) for lib in LATENCY_LIBS}
    for lib in LATENCY_LIBS:
        rounds_text = " ".join(f"{r['ms']:.1f}" if r else "failed" for r in res[lib])
        print(f"  {lib:<8}{us[lib]:>9.1f} us   (frozen / this: {us['frozen'] / us[lib]:.2f}x)   rounds: {rounds_text}")
    print(f"  frozen / onnxruntime per round: {_ratio_text(_per_round(res, 'frozen', 'onnx'))}")


FUSION_LIBS = ("fused", "unfused", "torch")


def fusion(rounds: int, steps: int) -> None:
    print(f"\nelementwise chains on float32{list(CHAIN_SHAPE)}: frozen graph with and without fusion, PyTorch eager")
    print(f"{'chain':<14}{'fused':>12}{'unfused':>12}{'torch':>12}{'fused/unfused':>15}{'fused/torch':>13}")
    for kind in CHAINS:
        res = rounds_of("fusion", FUSION_LIBS, kind, 1, steps, rounds)
        us = {lib: _median(res[lib]) for lib in FUSION_LIBS}
        print(
            f"{kind:<14}{us['fused']:>10.0f}us{us['unfused']:>10.0f}us{us['torch']:>10.0f}us"
            f"{us['fused'] / us['unfused']:>14.2f}x{us['fused'] / us['torch']:>12.2f}x",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=None, help="timed steps per training workload")
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, default=None, help="processes per library and workload (default 5)")
    parser.add_argument("--only", choices=("train", "latency", "fusion"), help="run only one kind of workload")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        what, lib, kind, batch, steps = args.worker
        ns = argparse.Namespace(what=what, lib=lib, kind=kind, batch=int(batch), steps=int(steps))
        print(json.dumps(_worker(ns)))
        return

    quick = args.quick
    print(f"tapeflow frozen graphs vs PyTorch eager and onnxruntime ({THREADS} threads, one process per measurement)")
    memory = {}
    if args.only in (None, "train"):
        memory = training(args.rounds or (1 if quick else 5), args.steps, quick)
    if args.only in (None, "latency"):
        latency(args.rounds or (1 if quick else 5), 300 if quick else 3000)
    if args.only in (None, "fusion"):
        fusion(args.rounds or (1 if quick else 3), 20 if quick else 200)
    if memory:
        print("\npeak memory of CNN training (resident set above the imported library, MiB, median over rounds)")
        for lib in TRAIN_LIBS:
            print(f"  {lib:<8}{_median(memory[lib], 'mem'):>9.1f}")


if __name__ == "__main__":
    main()
