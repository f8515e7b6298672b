"""Synchronous data-parallel training on Dask against one process, side by side in one run.

    python bench/distributed.py [--quick] [--only stragglers|pipeline|compression|embedding|queues]

Every measurement runs in a fresh subprocess, one after another. A step's time is its
marginal cost: the difference between `fit` epochs of 2k and k steps, divided by k (the
per-epoch work of sending weights out and back and launching replicas is left out, and
reported as the time of a one-step epoch).

- Scaling: the Deep-MNIST CNN (Adam, global batch 50 as in TensorFlow's tutorial, then
  larger): one process with 2 threads against 2 replicas with 1 thread each, on the same
  global batch. Scaling efficiency is the replicas' steps/s over the single process's
  (target >= 0.85). A step moves the same bytes whatever the batch, so the efficiency
  grows with the batch.
- Stragglers: the CNN at global batch 100 on 2 replicas, with a replica slowed 3x (after
  its gradient it computes for twice the unslowed step time more, in small slices that
  stop, as the graph's own run does between nodes, once its step is filled by other
  shards): no backup against one backup worker. Two kinds: one replica, drawn at random
  for the run, slowed every step; and a straggler redrawn at random every step.
  Recovered = (slowed - with backup) / (slowed - unslowed) (target >= 0.5). On 2 cores
  the backup worker's process competes with the replicas for the CPU. (The MLP below is
  no straggler workload: its step is ~2 ms of computing and ~5 ms of exchange.)
- Asynchronous updates: the MLP 784-256-256-10 (Adam, batch 128) with
  `AsyncParameterServer` on 1 and 2 replicas (one update per whole batch, so updates/s
  compare with single-process steps/s), with the mean staleness.
- Overhead: a null model (Dense(1) on one feature, batch 4) per replica count 1, 2, 4.
- Traffic: bytes through the loopback interface per step per replica, against the
  model's parameter bytes (the cluster runs on 127.0.0.1, so all its traffic is there).
- Pipeline: the 4-stage MLP 784-512-512-512-10 (one Dense per stage, batch 256, Adam)
  with `Pipeline(stages=4)` on 2 workers (two stages each) and m = 1, 2, 4, 8
  micro-batches, against one process. Here a step's time is the median over the steps
  of an epoch (the client's timing of each pipeline step; each batch of `fit` in one
  process), which a loaded machine disturbs less than the difference of two epochs.
  The bubble fraction is measured per step as 1 - (mean seconds a stage computed) /
  (step seconds), next to the GPipe ideal (K-1)/(m+K-1), which is the step time's
  excess (m+K-1)/m over no bubble; then float32 against float16 transfers at m = 4:
  bytes crossing between workers per step and the step time.
- Compression: the MNIST tutorial's MLP (784-256-256-10 with dropout) trained for a few
  epochs on Fashion-MNIST in one process and on a 2-stage Pipeline (4 micro-batches)
  with float32, float16 and bfloat16 transfers: test accuracy, bytes between the
  workers per step and the median step.
- Sharded embedding: an embedding-bag model (bags of 8 ids, batch 256, width 16, SGD)
  whose table of 10^5 or 10^6 rows is a `ShardedEmbedding` over 2 workers; each step
  pulls the batch's rows, differentiates in the client and pushes the sparse gradient.
  Steps/s is the median step; bytes per step are the payload (ids and rows) sent and
  received, and the loopback bytes (with Dask's own messages), against the table's size.
  Then the same table in an embedding-bag model trained by `DataParallel` (sparse pushes,
  row-delta answers): mean step time and loopback bytes per step over the last three
  quarters of an epoch.
- Queues: hand-offs through cluster queues against actor calls. The pipeline above at
  m = 4 with `transport="actors"` and `transport="queues"` (median step, as above); and
  the MLP on 2 `DataParallel` replicas reading arrays copied to their workers (the
  default) against dequeuing their shards from a queue on the first worker, which a
  producer task there fills before each epoch (marginal step cost, as above).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.abspath(__file__)
# Run as a script, this file's folder leads sys.path, where this file would shadow Dask's
# `distributed` package: move it to the end.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(HERE)] + [os.path.dirname(HERE)]


def _loopback_bytes() -> int:
    """Bytes sent through the loopback interface (each is also received there: count once)."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[8])
    return 0


def _model(kind: str, batch: int | None = None):
    """(model, input shape, batch) of a workload; the CNN without dropout."""
    from _models import tapeflow_model

    import tapeflow as tp

    if kind == "null":
        return tp.Sequential([tp.layers.Dense(1)]), (1,), 4
    if kind == "mlp4":
        tp.random.seed(0)
        layers = [tp.layers.Dense(512, activation="relu") for _ in range(3)] + [tp.layers.Dense(10)]
        return tp.Sequential(layers), (784,), batch or 256
    features, default = ((28, 28, 1), 50) if kind == "cnn" else ((784,), 128)
    return tapeflow_model(kind, dropout=False), features, batch or default


def _epoch_seconds(kind: str, steps: int, distribute, repeats: int, batch: int | None) -> tuple[float, int, int]:
    """(best wall time of a `steps`-step epoch after a warm-up epoch, loopback bytes of the
    last epoch, parameter bytes)."""
    import tapeflow as tp

    model, features, batch = _model(kind, batch)
    rng = np.random.default_rng(0)
    x = rng.random((steps * batch, *features), dtype=np.float32)
    if kind == "null":
        y, loss = rng.standard_normal((steps * batch, 1)).astype(np.float32), "mse"
    else:
        y, loss = rng.integers(0, 10, steps * batch), tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=tp.optimizers.Adam(1e-3), loss=loss)
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False, distribute=distribute)
    best, traffic = float("inf"), 0
    for _ in range(repeats):
        before, start = _loopback_bytes(), time.perf_counter()
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False, distribute=distribute)
        best = min(best, time.perf_counter() - start)
        traffic = _loopback_bytes() - before
    return best, traffic, sum(w.nbytes for w in model.get_weights())


def _measure(kind: str, steps: int, distribute, repeats: int, after_long=None, batch: int | None = None) -> dict:
    """Per-step cost, one-step epoch, traffic per step and parameter bytes; `after_long(result)`
    adds what the strategy recorded of the 2k-step epoch."""
    short, _, _ = _epoch_seconds(kind, steps, distribute, repeats, batch)
    long, traffic, params = _epoch_seconds(kind, 2 * steps, distribute, repeats, batch)
    result = {"step": (long - short) / steps, "traffic_per_step": traffic / (2 * steps), "params": params}
    if after_long is not None:
        after_long(result)
    result["epoch1"] = _epoch_seconds(kind, 1, distribute, repeats, batch)[0]
    return result


def _produce(q, rows: int, features: tuple, batch: int) -> int:
    """Enqueue `rows` random (x, label) rows, a batch at a time (a producer task)."""
    rng = np.random.default_rng(rows)
    for _ in range(0, rows, batch):
        q.enqueue_many([rng.random((batch, *features), dtype=np.float32), rng.integers(0, 10, batch)], timeout=120)
    return rows


def _queue_epoch_seconds(kind: str, steps: int, distribute, repeats: int) -> float:
    """Best wall time of a `steps`-step epoch (after a warm-up epoch) whose replicas dequeue
    their shards from a queue on the cluster's first worker, filled before each epoch."""
    import tapeflow as tp

    model, features, batch = _model(kind)
    model.compile(optimizer=tp.optimizers.Adam(1e-3), loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    cluster = distribute.cluster
    q = tp.queue.FIFOQueue(steps * batch, ["float32", "int64"], shapes=[features, ()], cluster=cluster)
    best = float("inf")
    for attempt in range(repeats + 1):
        filled = cluster.client.submit(_produce, q, steps * batch, features, batch, workers=[q.worker], pure=False)
        filled.result(timeout=300)
        start = time.perf_counter()
        model.fit(q, batch_size=batch, steps_per_epoch=steps, epochs=1, verbose=0, distribute=distribute)
        best = best if attempt == 0 else min(best, time.perf_counter() - start)
    return best


def _median_batch_seconds(kind: str, steps: int) -> dict:
    """{"step": the median time of a `fit` batch in this process}, over an epoch of `steps`
    batches after a warm-up epoch (the pipeline section's reference)."""
    import tapeflow as tp

    class BatchTimer(tp.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seconds, self.started = [], 0.0

        def on_train_batch_begin(self, batch, logs=None):
            self.started = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.seconds.append(time.perf_counter() - self.started)

    model, features, batch = _model(kind)
    rng = np.random.default_rng(0)
    x, y = rng.random((steps * batch, *features), dtype=np.float32), rng.integers(0, 10, steps * batch)
    model.compile(optimizer=tp.optimizers.Adam(1e-3), loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False)
    timer = BatchTimer()
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False, callbacks=[timer])
    return {"step": float(np.median(timer.seconds))}


def _embedding_steps(rows: int, steps: int, width: int = 16, batch: int = 256, bag: int = 8) -> dict:
    """Median step seconds and bytes per step of the sharded embedding-bag model."""
    import tapeflow as tp

    rng = np.random.default_rng(0)
    table = rng.standard_normal((rows, width)).astype(np.float32)
    kernel, bias = tp.Variable(rng.standard_normal((width, 1)).astype(np.float32)), tp.Variable(np.zeros(1, np.float32))
    optimizer = tp.optimizers.SGD(0.05)
    with (
        tp.distributed.Cluster(n_workers=2, threads_per_worker=1) as cluster,
        tp.distributed.ShardedEmbedding(cluster, table, optimizer) as sharded,
    ):
        seconds, payload, loopback = [], [], []
        for _ in range(steps):
            ids, y = rng.integers(0, rows, (batch, bag)), rng.standard_normal((batch, 1)).astype(np.float32)
            start, moved, wire = time.perf_counter(), sharded.bytes_moved, _loopback_bytes()
            unique, inverse, pulled = sharded.pull(ids)
            rows_var = tp.Variable(pulled)
            with tp.GradientTape() as tape:
                bags = tp.mean(tp.nn.embedding_lookup(rows_var, inverse), axis=1)
                loss = tp.mean(tp.square(tp.matmul(bags, kernel) + bias - y))
            grad_rows, *grads = tape.gradient(loss, [rows_var, kernel, bias])
            optimizer.apply_gradients(zip(grads, [kernel, bias], strict=True))
            sharded.push(unique, grad_rows, step=optimizer.iterations)
            seconds.append(time.perf_counter() - start)
            payload.append(sharded.bytes_moved - moved)
            loopback.append(_loopback_bytes() - wire)
    return {
        "step": float(np.median(seconds[1:])),
        "payload": float(np.mean(payload)),
        "loopback": float(np.median(loopback[1:])),
        "table": float(table.nbytes),
    }


def _data_parallel_embedding(rows: int, steps: int, width: int = 16, batch: int = 256, bag: int = 8) -> dict:
    """Mean step seconds and loopback bytes per step over the last three quarters of an
    epoch (as the client reports steps), of an embedding-bag model trained by
    `DataParallel` on 2 replicas."""
    import tapeflow as tp

    rng = np.random.default_rng(0)
    tp.random.seed(0)
    layers = [
        tp.Input((bag,), dtype="int64"),
        tp.layers.Embedding(rows, width),
        tp.layers.Flatten(),
        tp.layers.Dense(1),
    ]
    model = tp.Sequential(layers)
    model.compile(optimizer=tp.optimizers.Adam(1e-3), loss="mse")
    x, y = rng.integers(0, rows, (steps * batch, bag)), rng.standard_normal((steps * batch, 1)).astype("f4")
    marks = []

    class Record(tp.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            marks.append((time.perf_counter(), _loopback_bytes()))

    record = Record()
    with tp.distributed.Cluster(n_workers=2, threads_per_worker=1) as cluster:
        strategy = tp.distributed.DataParallel(cluster, replicas=2, timeout=300)
        model.fit(x, y, batch_size=batch, verbose=0, shuffle=False, callbacks=[record], distribute=strategy)
    first, last = np.array(marks[len(marks) // 4]), np.array(marks[-1])  # past the first steps
    per_step = (last - first) / (len(marks) - 1 - len(marks) // 4)  # the client reports steps in bursts: no median
    return {
        "step": float(per_step[0]),
        "loopback": float(per_step[1]),
        "table": rows * width * 4.0,
    }


def _tutorial_model_accuracy(compression: str, rows: int, epochs: int) -> dict:
    """Train the MNIST tutorial's MLP (with its dropout) on `rows` Fashion-MNIST images for
    `epochs`: in this process (compression "one-process") or on a 2-stage `Pipeline` with
    4 micro-batches and the given transfer compression; test accuracy, the median step and
    the bytes crossing between the workers per step."""
    import tapeflow as tp

    path = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tutorials", "mnist", "train.py")
    spec = importlib.util.spec_from_file_location("mnist_tutorial", path)
    tutorial = sys.modules["mnist_tutorial"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tutorial)

    (x, y), _, (x_test, y_test) = tutorial.load("fashion")
    tp.random.seed(0)
    model = tutorial.mlp()
    model.compile(tp.optimizers.Adam(1e-3), tp.losses.SparseCategoricalCrossentropy(from_logits=True), ["accuracy"])
    result = {}
    if compression == "one-process":
        model.fit(x[:rows], y[:rows], batch_size=128, epochs=epochs, verbose=0, seed=0)
    else:
        with tp.distributed.Cluster(n_workers=2, threads_per_worker=1) as cluster:
            strategy = tp.distributed.Pipeline(
                cluster, stages=2, micro_batches=4, compression=None if compression == "float32" else compression
            )
            model.fit(x[:rows], y[:rows], batch_size=128, epochs=epochs, verbose=0, seed=0, distribute=strategy)
            result["step"] = float(np.median([s.seconds for s in strategy.steps]))
            result["between"] = float(np.mean([s.bytes_between_workers for s in strategy.steps]))
    result["accuracy"] = float(model.evaluate(x_test, y_test, batch_size=500, verbose=0, return_dict=True)["accuracy"])
    return result


def compression(rows: int, epochs: int) -> None:
    """The compression section: the tutorial model's accuracy with 16-bit transfers."""
    print(
        f"\ncompression: the MNIST tutorial's MLP 784-256-256-10 (dropout 0.2), Adam, batch 128, "
        f"{epochs} epochs on {rows:,} Fashion-MNIST images;\n  Pipeline of 2 stages on 2 workers, 4 micro-batches; "
        "test accuracy on the 10,000 test images"
    )
    print("  transfers      test accuracy   bytes between workers per step   ms/step")
    for kind in ("one-process", "float32", "float16", "bfloat16"):
        r = run(mode="tutorial", compression=kind, rows=rows, steps=epochs)
        between = f"{r['between'] / 1e6:10.3f} MB" if "between" in r else f"{'-':>13s}"
        step = f"{r['step'] * 1e3:8.1f}" if "step" in r else f"{'-':>8s}"
        print(f"  {kind:12s}  {100 * r['accuracy']:12.2f} %   {between:>30s}   {step}")


def embedding(steps: int) -> None:
    """The sharded-embedding section (see the module docstring)."""
    print("\nsharded embedding: embedding-bag, bags of 8, batch 256, width 16, SGD, table over 2 workers")
    print("  table rows  table MB  steps/s  payload KB/step  loopback KB/step")
    for rows in (10**5, 10**6):
        r = run(mode="embedding", rows=rows, steps=steps)
        print(
            f"  {rows:10d}  {r['table'] / 1e6:8.1f}  {1 / r['step']:7.1f}  {r['payload'] / 1e3:15.1f}"
            f"  {r['loopback'] / 1e3:16.1f}"
        )
    print("  the same model, Flatten + Dense(1), Adam, with DataParallel on 2 replicas (table in 2 row blocks):")
    print("  table rows  table MB  steps/s  loopback KB/step (mean over the last 3/4 of an epoch)")
    for rows in (10**5, 10**6):
        r = run(mode="dp-embedding", rows=rows, steps=steps)
        print(f"  {rows:10d}  {r['table'] / 1e6:8.1f}  {1 / r['step']:7.1f}  {r['loopback'] / 1e3:16.1f}")


def worker(args) -> dict:
    """One measurement, in this process: `single` (threads) or `dist` (replicas, backups, delay)."""
    import tapeflow as tp

    if args.mode == "single-median":
        tp.set_num_threads(args.threads)
        return _median_batch_seconds(args.kind, args.steps)
    if args.mode == "single":
        tp.set_num_threads(args.threads)
        return _measure(args.kind, args.steps, None, args.repeats, batch=args.batch)
    tp.set_num_threads(1)
    if args.mode == "tutorial":
        return _tutorial_model_accuracy(args.compression, args.rows, args.steps)
    if args.mode == "embedding":
        return _embedding_steps(args.rows, args.steps)
    if args.mode == "dp-embedding":
        return _data_parallel_embedding(args.rows, args.steps)
    if args.mode == "pipe":
        with tp.distributed.Cluster(n_workers=2, threads_per_worker=1) as cluster:
            strategy = tp.distributed.Pipeline(
                cluster,
                stages=4,
                micro_batches=args.micro,
                compression=args.compression or None,
                transport=args.transport,
            )

            def pipeline_figures(result):
                result["bubble"] = float(np.median([s.bubble_fraction for s in strategy.steps]))
                result["step"] = float(np.median([s.seconds for s in strategy.steps]))  # robust to load
                result["between"] = float(np.mean([s.bytes_between_workers for s in strategy.steps]))

            return _measure(args.kind, args.steps, strategy, args.repeats, pipeline_figures, args.batch)
    workers = args.replicas + args.backups
    with tp.distributed.Cluster(n_workers=workers, threads_per_worker=1) as cluster:
        if args.mode == "dist-queue":
            strategy = tp.distributed.DataParallel(cluster, replicas=args.replicas)
            short = _queue_epoch_seconds(args.kind, args.steps, strategy, args.repeats)
            long = _queue_epoch_seconds(args.kind, 2 * args.steps, strategy, args.repeats)
            return {"step": (long - short) / args.steps}
        if args.mode == "async":
            strategy = tp.distributed.AsyncParameterServer(cluster, replicas=args.replicas)

            def staleness(result):
                result["staleness"] = float(np.mean([s.staleness for s in strategy.steps]))

            return _measure(args.kind, args.steps, strategy, args.repeats, staleness)
        strategy = tp.distributed.DataParallel(
            cluster,
            replicas=args.replicas,
            backup_workers=args.backups,
            straggler_delay={args.slowed: args.delay} if args.slowed >= 0 and args.delay else None,
            random_straggler_delay=args.delay if args.slowed < 0 else 0.0,
        )

        def dropped(result):
            result["dropped_per_step"] = sum(len(s.dropped) for s in strategy.steps) / max(1, len(strategy.steps))

        return _measure(args.kind, args.steps, strategy, args.repeats, dropped if args.backups else None, args.batch)


def run(**kw) -> dict:
    argv = [sys.executable, HERE, "--worker"] + [f"--{k}={v}" for k, v in kw.items()]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"measurement {kw} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def stragglers(repeats: int, steps: int) -> None:
    """The stragglers section: the CNN at global batch 100 on 2 replicas, a replica slowed 3x."""
    kw = dict(mode="dist", kind="cnn", replicas=2, steps=steps, repeats=repeats, batch=100)
    plain = run(backups=0, **kw)
    delay = 2 * plain["step"]
    print("stragglers: Deep-MNIST CNN, Adam, global batch 100, 2 replicas, a replica slowed 3x")
    print(f"  no straggler               {plain['step'] * 1e3:8.1f} ms/step")
    drawn = int(np.random.default_rng().integers(2))
    for name, slowed_replica in ((f"replica {drawn} (drawn at random)", drawn), ("redrawn every step", -1)):
        slowed = run(backups=0, delay=delay, slowed=slowed_replica, **kw)
        backed = run(backups=1, delay=delay, slowed=slowed_replica, **kw)
        recovered = (slowed["step"] - backed["step"]) / max(1e-9, slowed["step"] - plain["step"])
        print(f"  straggler {name}:")
        print(f"    no backup                {slowed['step'] * 1e3:8.1f} ms/step")
        print(
            f"    1 backup                 {backed['step'] * 1e3:8.1f} ms/step"
            f"  ({backed.get('dropped_per_step', 0):.2f} shards dropped per step)"
        )
        print(f"    recovered {recovered:.2f} of the slowdown (target >= 0.5)")
    print()


def main(quick: bool) -> None:
    repeats = 1 if quick else 3
    cnn_steps, mlp_steps, null_steps = (6, 10, 20) if quick else (20, 30, 100)
    print("synchronous data-parallel on a Dask LocalCluster (worker processes, 127.0.0.1) vs one process")
    print("times are marginal per-step costs (epochs of 2k minus k steps); best of", repeats, "repeats\n")

    print("scaling: Deep-MNIST CNN, Adam (target efficiency >= 0.85)")
    print("  global batch  1 process, 2 threads   2 replicas, 1 thread each   efficiency")
    dist = None
    for batch in (50, 100, 200) if not quick else (50,):
        steps = max(3, cnn_steps * 50 // batch)
        single = run(mode="single", kind="cnn", threads=2, steps=steps, repeats=repeats, batch=batch)
        spread = run(mode="dist", kind="cnn", replicas=2, backups=0, steps=steps, repeats=repeats, batch=batch)
        dist = dist or spread
        print(
            f"  {batch:12d}  {single['step'] * 1e3:7.1f} ms/step {1 / single['step']:6.1f}/s"
            f"   {spread['step'] * 1e3:7.1f} ms/step {1 / spread['step']:6.1f}/s"
            f"        {single['step'] / spread['step']:.2f}"
        )
    print()

    stragglers(repeats, cnn_steps // 2)
    alone = run(mode="single", kind="mlp", threads=2, steps=mlp_steps, repeats=repeats)
    plain = run(mode="dist", kind="mlp", replicas=2, backups=0, steps=mlp_steps, repeats=repeats)

    print("asynchronous parameter server: MLP 784-256-256-10, Adam, one update per batch of 128")
    print(f"  1 process, 2 threads       {1 / alone['step']:8.0f} updates/s")
    for replicas in (1, 2):
        r = run(mode="async", kind="mlp", replicas=replicas, backups=0, steps=mlp_steps, repeats=repeats)
        print(
            f"  {replicas} async replica(s)         {1 / r['step']:8.0f} updates/s  mean staleness {r['staleness']:.2f}"
        )
    print()

    print("overhead: null model (Dense(1), batch 4)")
    base = run(mode="single", kind="null", threads=1, steps=null_steps, repeats=repeats)
    rows = [("1 process", base)]
    for replicas in (1, 2, 4):
        r = run(mode="dist", kind="null", replicas=replicas, backups=0, steps=null_steps, repeats=repeats)
        rows.append((f"{replicas} replica(s)", r))
    for name, r in rows:
        print(f"  {name:26s} {r['step'] * 1e3:8.2f} ms/step  one-step epoch {r['epoch1'] * 1e3:7.1f} ms")

    print("\ntraffic: loopback bytes per step per replica (2 replicas) against parameter bytes")
    for name, r in (("CNN", dist), ("MLP", plain)):
        per_replica = r["traffic_per_step"] / 2
        print(
            f"  {name}: {per_replica / 1e6:7.2f} MB per step per replica, parameters {r['params'] / 1e6:6.2f} MB"
            f" ({per_replica / r['params']:.2f}x)"
        )

    pipeline(repeats, mlp_steps)
    compression(10_000 if quick else 30_000, 1 if quick else 3)
    embedding(null_steps)
    queues(repeats, mlp_steps)


def queues(repeats: int, steps: int, rounds: int = 3) -> None:
    """The queues section: hand-offs through cluster queues against actor calls. The two
    ways alternate for `rounds` rounds (a subprocess each) and the best of each is shown,
    so that a change of the machine's load falls on both alike."""
    print("\nqueues against actor calls (best of", rounds, "alternating rounds)")
    print("  pipeline: MLP 784-512-512-512-10, 4 stages on 2 workers, batch 256, m = 4 micro-batches")
    best: dict = {}
    for _ in range(rounds):
        for transport in ("actors", "queues"):
            r = run(mode="pipe", kind="mlp4", micro=4, transport=transport, steps=steps, repeats=repeats)
            if transport not in best or r["step"] < best[transport]["step"]:
                best[transport] = r
    print("  transport   ms/step  bubble")
    for transport, r in best.items():
        print(f"  {transport:9s}  {r['step'] * 1e3:8.1f}  {r['bubble']:6.2f}")
    print(f"  queues / actors: {best['queues']['step'] / best['actors']['step']:.2f}x the step time")
    print("  data input: MLP 784-256-256-10, Adam, batch 128, DataParallel on 2 replicas (marginal step cost)")
    kw = dict(kind="mlp", replicas=2, backups=0, steps=steps, repeats=repeats)
    fed = {"dist": [], "dist-queue": []}
    for _ in range(rounds):
        for mode in fed:
            fed[mode].append(run(mode=mode, **kw)["step"])
    arrays, queued = min(fed["dist"]), min(fed["dist-queue"])
    print(f"  arrays copied to the workers   {arrays * 1e3:8.1f} ms/step")
    print(f"  shards dequeued from a queue   {queued * 1e3:8.1f} ms/step")
    print(f"  queue / arrays: {queued / arrays:.2f}x the step time")


def pipeline(repeats: int, steps: int) -> None:
    """The pipeline section (see the module docstring)."""
    stages = 4
    print("\npipeline: MLP 784-512-512-512-10, one Dense per stage, Adam, batch 256, 2 workers (2 stages each)")
    alone = run(mode="single-median", kind="mlp4", threads=2, steps=steps, repeats=repeats)
    print(f"  1 process, 2 threads   {alone['step'] * 1e3:8.1f} ms/step")
    print("  micro-batches  ms/step  1 process / pipeline  bubble measured  ideal (K-1)/(m+K-1)  (m+K-1)/m")
    by_m = {}
    for m in (1, 2, 4, 8):
        r = by_m[m] = run(mode="pipe", kind="mlp4", micro=m, compression="", steps=steps, repeats=repeats)
        ideal = (stages - 1) / (m + stages - 1)
        print(
            f"  {m:13d}  {r['step'] * 1e3:7.1f}  {alone['step'] / r['step']:20.2f}  {r['bubble']:15.2f}"
            f"  {ideal:19.2f}  {(m + stages - 1) / m:9.2f}"
        )
    half = run(mode="pipe", kind="mlp4", micro=4, compression="float16", steps=steps, repeats=repeats)
    full = by_m[4]
    print("  transfers at m = 4      bytes between workers per step   ms/step")
    print(f"  float32                 {full['between'] / 1e6:21.3f} MB   {full['step'] * 1e3:7.1f}")
    print(
        f"  float16                 {half['between'] / 1e6:21.3f} MB   {half['step'] * 1e3:7.1f}"
        f"   ({half['between'] / full['between']:.2f}x the bytes)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer steps and one repeat (a smoke run)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for name, kind in (("mode", str), ("kind", str), ("threads", int), ("replicas", int), ("backups", int)):
        parser.add_argument(f"--{name}", type=kind, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=3, help=argparse.SUPPRESS)
    parser.add_argument("--delay", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--slowed", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--micro", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--compression", type=str, default="", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--transport", type=str, default="queues", help=argparse.SUPPRESS)
    sections = ["stragglers", "pipeline", "compression", "embedding", "queues"]
    parser.add_argument("--only", choices=sections, help="run one section only")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
    elif args.only == "stragglers":
        stragglers(1 if args.quick else 3, 3 if args.quick else 10)
    elif args.only == "pipeline":
        pipeline(1 if args.quick else 3, 10 if args.quick else 30)
    elif args.only == "compression":
        compression(10_000 if args.quick else 30_000, 1 if args.quick else 3)
    elif args.only == "embedding":
        embedding(20 if args.quick else 100)
    elif args.only == "queues":
        queues(1 if args.quick else 3, 10 if args.quick else 30)
    else:
        main(args.quick)
