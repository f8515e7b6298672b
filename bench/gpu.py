"""GPU benchmark: tapeflow on CuPy against PyTorch CUDA, in the same run.

    .venv/bin/python bench/gpu.py              # prints "skipped" without a GPU
    .venv/bin/python bench/gpu.py --steps 50

Four workloads:
- the MLP 784-256-256-10, batch 128, the "Deep MNIST" CNN without dropout, batch 50, and
  Embedding(10000, 128) -> LSTM(128) -> Dense(10) over 80 steps, batch 64 (PyTorch: nn.LSTM,
  which runs cuDNN's): a frozen (tapeflow `tp.function`) or plain (PyTorch) training step on
  random data, Adam;
- word2vec skip-gram with negative sampling (vocabulary 50,000, dimension 128, window 5,
  5 negatives per window, plain SGD), in words per second: tapeflow runs one
  `word2vec_sgns_train` pass (the fused GPU kernel) over a Zipf-distributed corpus of
  4,000,000 words in sentences of 1,000, the tables on gpu:0; PyTorch trains batches of
  4,096 windows (each centre's 10 context rows, masked to its drawn reach, against the
  centre and 5 negatives) with sparse embedding gradients, a window counting as a word.

Each library runs in a process of its own and PyTorch's never imports tapeflow. A timed
block ends by reading a result (the loss, or the pass's counts), so queued GPU work is
included. Reported: median step time (or words/s), the ratio tapeflow / PyTorch of the
time per step (per word for word2vec), and each process's peak of GPU memory held by its
allocator (CuPy's memory pool; PyTorch's `max_memory_reserved`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

WORKLOADS = {"mlp": (128, (28 * 28,)), "cnn": (50, (28, 28, 1)), "lstm": (64, (80,)), "word2vec": (4096, None)}
LSTM_VOCAB, LSTM_UNITS = 10_000, 128
VOCAB, DIM, WINDOW, NEGATIVES = 50_000, 128, 5, 5
CORPUS_WORDS, SENTENCE = 4_000_000, 1_000
STAND_IN_WORDS = 5_000  # without a real GPU (tests run the GPU backend's stand-in), the op's reference walks it


def words_per_step(library: str, kind: str) -> int:
    """Words a timed step trains: a pass over the corpus (tapeflow) or a batch of windows."""
    return CORPUS_WORDS if library == "tapeflow" else WORKLOADS[kind][0]


def zipf_corpus(rng, words: int):
    """(ids, offsets, counts): word r drawn with weight 1 / (r + 1), in sentences of SENTENCE."""
    # lazily, as each library's process imports what it runs
    import numpy as np

    weights = 1.0 / np.arange(1, VOCAB + 1)
    ids = rng.choice(VOCAB, words, p=weights / weights.sum()).astype(np.int32)
    offsets = np.append(np.arange(0, words, SENTENCE), words)
    return ids, offsets, np.bincount(ids, minlength=VOCAB) + 1


def _timed(step, steps: int) -> float:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def tapeflow_step(kind: str):
    """(step, inputs): the frozen training step of the MLP or the CNN on gpu:0, and its batch."""
    import numpy as np
    from _models import tapeflow_model

    import tapeflow as tp

    batch, shape = WORKLOADS[kind]
    rng = np.random.default_rng(0)
    with tp.device("gpu:0"):
        optimizer = tp.optimizers.Adam(1e-3)
        if kind == "lstm":
            tp.random.seed(0)
            layers = [tp.layers.Embedding(LSTM_VOCAB, LSTM_UNITS), tp.layers.LSTM(LSTM_UNITS), tp.layers.Dense(10)]
            model = tp.Sequential([tp.Input(shape, dtype="int64"), *layers])
            x = tp.tensor(rng.integers(0, LSTM_VOCAB, (batch, *shape)))
        else:
            model = tapeflow_model(kind, dropout=False)
            model.build((None, *shape))
            x = tp.tensor(rng.random((batch, *shape), dtype=np.float32))
        variables = model.trainable_weights
        loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
        inputs = (x, tp.tensor(rng.integers(0, 10, batch)))
        optimizer.build(variables)

        @tp.function
        def step(*inputs):
            with tp.GradientTape() as tape:
                loss = loss_fn(inputs[1], model(inputs[0], training=True))
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
            return loss

    return step, inputs


def run_tapeflow(kind: str, steps: int) -> dict:
    """{"seconds": median seconds a step, "peak_bytes": the memory pool's bytes on gpu:0 after
    the steps, or None where there is no pool (the stand-in)}."""
    import numpy as np

    import tapeflow as tp

    if kind == "word2vec":
        seconds = _tapeflow_word2vec(np.random.default_rng(0), steps)
    else:
        step, inputs = tapeflow_step(kind)
        with tp.device("gpu:0"):
            for _ in range(3):
                float(step(*inputs))
            seconds = _timed(lambda: float(step(*inputs)), steps)
    pool = tp.memory_stats("gpu:0")  # the pool keeps what it had at its peak unless freed
    return {"seconds": seconds, "peak_bytes": pool["in_use"] + pool["cached"] if pool else None}


def _tapeflow_word2vec(rng, steps: int) -> float:
    """Seconds per `word2vec_sgns_train` pass over the corpus, the tables kept on gpu:0."""
    # lazily: only the tapeflow process imports tapeflow
    import numpy as np

    import tapeflow as tp
    from tapeflow import _compat
    from tapeflow.ops.skipgram import negative_table, word2vec_sgns_train

    ids, offsets, counts = zipf_corpus(rng, CORPUS_WORDS if _compat.has_gpu else STAND_IN_WORDS)
    with tp.device("gpu:0"):
        tables = [tp.tensor(((rng.random((VOCAB, DIM)) - 0.5) / DIM).astype(np.float32)), tp.zeros((VOCAB, DIM))]
        corpus = [tp.tensor(a) for a in (ids, offsets, np.ones(VOCAB), negative_table(counts))]
        rates = tp.tensor(0.025, dtype="float64"), tp.tensor(0.0001, dtype="float64")
        seed = tp.tensor(1, dtype="int64")

        def one_pass():
            new0, new1, trained = word2vec_sgns_train(*tables, *corpus, *rates, seed, window=WINDOW, negative=NEGATIVES)
            tables[:] = [new0, new1]
            return trained.numpy()

        one_pass()
        return _timed(one_pass, steps)


def run_pytorch(kind: str, steps: int) -> dict:
    import torch

    torch.manual_seed(0)
    batch, shape = WORKLOADS[kind]
    dev = torch.device("cuda")
    if kind == "word2vec":
        seconds = _pytorch_word2vec(torch, batch, steps)
        return {"seconds": seconds, "peak_bytes": torch.cuda.max_memory_reserved()}
    else:
        if kind == "lstm":

            class Net(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embedding = torch.nn.Embedding(LSTM_VOCAB, LSTM_UNITS)
                    self.lstm = torch.nn.LSTM(LSTM_UNITS, LSTM_UNITS, batch_first=True)
                    self.dense = torch.nn.Linear(LSTM_UNITS, 10)

                def forward(self, ids):
                    _, (h, _) = self.lstm(self.embedding(ids))
                    return self.dense(h[-1])

            net = Net()
        elif kind == "mlp":
            net = torch.nn.Sequential(
                torch.nn.Linear(784, 256),
                torch.nn.ReLU(),
                torch.nn.Linear(256, 256),
                torch.nn.ReLU(),
                torch.nn.Linear(256, 10),
            )
        else:
            net = torch.nn.Sequential(
                torch.nn.Conv2d(1, 32, 5, padding=2),
                torch.nn.ReLU(),
                torch.nn.MaxPool2d(2),
                torch.nn.Conv2d(32, 64, 5, padding=2),
                torch.nn.ReLU(),
                torch.nn.MaxPool2d(2),
                torch.nn.Flatten(),
                torch.nn.Linear(7 * 7 * 64, 1024),
                torch.nn.ReLU(),
                torch.nn.Linear(1024, 10),
            )
        net = net.to(dev)
        params = list(net.parameters())
        if kind == "lstm":
            x = torch.randint(0, LSTM_VOCAB, (batch, *shape), device=dev)
        else:
            x = torch.rand((batch, 784) if kind == "mlp" else (batch, 1, 28, 28), device=dev)
        y = torch.randint(0, 10, (batch,), device=dev)

        def loss_of():
            return torch.nn.functional.cross_entropy(net(x), y)

    optimizer = torch.optim.Adam(params, 1e-3)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of()
        loss.backward()
        optimizer.step()
        return loss.item()

    for _ in range(3):
        step()
    return {"seconds": _timed(step, steps), "peak_bytes": torch.cuda.max_memory_reserved()}


def _pytorch_word2vec(torch, batch: int, steps: int) -> float:
    """Seconds per SGD step on `batch` windows: each centre's 2 * WINDOW context rows (those
    beyond its drawn reach masked out) against the centre's and NEGATIVES shared negatives'
    rows, sparse gradients."""
    dev = torch.device("cuda")
    syn0 = torch.nn.Embedding(VOCAB, DIM, sparse=True).to(dev)
    syn1 = torch.nn.Embedding(VOCAB, DIM, sparse=True).to(dev)
    torch.nn.init.zeros_(syn1.weight)
    optimizer = torch.optim.SGD([syn0.weight, syn1.weight], lr=0.025)
    distance = torch.cat([torch.arange(-WINDOW, 0), torch.arange(1, WINDOW + 1)]).abs().to(dev)
    signs = torch.tensor([1.0] + [-1.0] * NEGATIVES, device=dev)

    def step():
        contexts = torch.randint(0, VOCAB, (batch, 2 * WINDOW), device=dev)
        outputs = torch.randint(0, VOCAB, (batch, 1 + NEGATIVES), device=dev)
        mask = distance[None, :] <= torch.randint(1, WINDOW + 1, (batch, 1), device=dev)
        scores = torch.einsum("bcd,bod->bco", syn0(contexts), syn1(outputs))
        loss = -(torch.nn.functional.logsigmoid(scores * signs) * mask[:, :, None]).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.item()

    for _ in range(3):
        step()
    return _timed(step, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--child", nargs=2, metavar=("LIBRARY", "KIND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        library, kind = args.child
        fn = run_tapeflow if library == "tapeflow" else run_pytorch
        print(json.dumps(fn(kind, args.steps)))
        return
    from tapeflow import devices

    reason = devices.gpu_unavailable_reason()
    if reason is not None:
        print(f"bench/gpu.py: skipped, no GPU: {reason}")
        return
    print(f"{'workload':10} {'tapeflow':>14} {'pytorch':>14} {'ratio':>7} {'peak MiB tapeflow / pytorch':>28}")
    for kind in WORKLOADS:
        seconds, peaks = {}, {}
        for library in ("tapeflow", "pytorch"):
            cmd = [sys.executable, __file__, "--steps", str(args.steps), "--child", library, kind]
            result = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
            seconds[library], peaks[library] = result["seconds"], result["peak_bytes"]
        memory = " / ".join("-" if peaks[lib] is None else f"{peaks[lib] / 2**20:.0f}" for lib in seconds)
        if kind == "word2vec":
            rates = {lib: words_per_step(lib, kind) / seconds[lib] for lib in seconds}
            ratio = rates["pytorch"] / rates["tapeflow"]
            shown = [f"{rates[lib]:,.0f} w/s" for lib in ("tapeflow", "pytorch")]
        else:
            ratio = seconds["tapeflow"] / seconds["pytorch"]
            shown = [f"{seconds[lib] * 1e3:.2f} ms" for lib in ("tapeflow", "pytorch")]
        print(f"{kind:10} {shown[0]:>14} {shown[1]:>14} {ratio:6.2f}x {memory:>28}")


if __name__ == "__main__":
    main()
