"""Core-engine benchmark: tapeflow against PyTorch eager, same shapes, same threads, one run.

    make bench            # or: .venv/bin/python bench/core.py

Prints the median time of each workload in both libraries and the ratio
tapeflow / PyTorch (below 1.0 means tapeflow is faster). By default the two run in
alternating blocks of five calls, so that both see the same machine; `--sequential`
times all of one library's calls, then all of the other's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402
from _harness import THREADS, compare, pin_threads, print_table  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tapeflow as tp  # noqa: E402

torch.set_num_threads(THREADS)
tp.set_num_threads(THREADS)
RNG = np.random.default_rng(0)


def _pair(shape):
    arr = RNG.standard_normal(shape).astype(np.float32)
    return tp.tensor(arr), torch.from_numpy(arr.copy())


def bench_matmul():
    (a, ta), (b, tb) = _pair((128, 784)), _pair((784, 256))
    return compare(lambda: tp.matmul(a, b), lambda: ta @ tb, repeats=200)


def bench_conv():
    x, tx = _pair((50, 14, 14, 32))
    w, tw = _pair((5, 5, 32, 64))
    tx = tx.permute(0, 3, 1, 2).contiguous().requires_grad_()
    tw = tw.permute(3, 2, 0, 1).contiguous().requires_grad_()

    def ours():
        with tp.GradientTape() as tape:
            tape.watch([x, w])
            y = tp.nn.conv2d(x, w, 1, "SAME")
        tape.gradient(y, [x, w])

    def theirs():
        y = torch.nn.functional.conv2d(tx, tw, padding=2)
        y.backward(torch.ones_like(y))
        tx.grad = tw.grad = None

    return compare(ours, theirs, repeats=20)


def bench_pool():
    x, tx = _pair((50, 28, 28, 32))
    tx = tx.permute(0, 3, 1, 2).contiguous().requires_grad_()

    def ours():
        with tp.GradientTape() as tape:
            tape.watch(x)
            y = tp.nn.max_pool2d(x, 2, 2, "SAME")
        tape.gradient(y, x)

    def theirs():
        y = torch.nn.functional.max_pool2d(tx, 2, 2)
        y.backward(torch.ones_like(y))
        tx.grad = None

    return compare(ours, theirs, repeats=50)


def bench_conv3d():
    x, tx = _pair((8, 16, 16, 16, 16))
    w, tw = _pair((3, 3, 3, 16, 32))
    tx = tx.permute(0, 4, 1, 2, 3).contiguous().requires_grad_()
    tw = tw.permute(4, 3, 0, 1, 2).contiguous().requires_grad_()

    def ours():
        with tp.GradientTape() as tape:
            tape.watch([x, w])
            y = tp.nn.conv3d(x, w, 1, "SAME")
        tape.gradient(y, [x, w])

    def theirs():
        y = torch.nn.functional.conv3d(tx, tw, padding=1)
        y.backward(torch.ones_like(y))
        tx.grad = tw.grad = None

    return compare(ours, theirs, repeats=10)


def bench_pool3d():
    x, tx = _pair((8, 16, 16, 16, 32))
    tx = tx.permute(0, 4, 1, 2, 3).contiguous().requires_grad_()

    def ours():
        with tp.GradientTape() as tape:
            tape.watch(x)
            y = tp.nn.max_pool3d(x, 2, 2, "SAME")
        tape.gradient(y, x)

    def theirs():
        y = torch.nn.functional.max_pool3d(tx, 2, 2)
        y.backward(torch.ones_like(y))
        tx.grad = None

    return compare(ours, theirs, repeats=30)


def bench_depthwise():
    x, tx = _pair((16, 32, 32, 64))
    w, tw = _pair((3, 3, 64, 1))
    tx = tx.permute(0, 3, 1, 2).contiguous().requires_grad_()
    tw = tw.reshape(3, 3, 64).permute(2, 0, 1).unsqueeze(1).contiguous().requires_grad_()

    def ours():
        with tp.GradientTape() as tape:
            tape.watch([x, w])
            y = tp.nn.depthwise_conv2d(x, w, 1, "SAME")
        tape.gradient(y, [x, w])

    def theirs():
        y = torch.nn.functional.conv2d(tx, tw, padding=1, groups=64)
        y.backward(torch.ones_like(y))
        tx.grad = tw.grad = None

    return compare(ours, theirs, repeats=30)


def bench_xent():
    logits, tlogits = _pair((128, 10))
    tlogits.requires_grad_()
    labels = RNG.integers(0, 10, 128)
    ours_labels, their_labels = tp.tensor(labels), torch.from_numpy(labels)

    def ours():
        with tp.GradientTape() as tape:
            tape.watch(logits)
            loss = tp.mean(tp.nn.sparse_softmax_cross_entropy_with_logits(labels=ours_labels, logits=logits))
        tape.gradient(loss, logits)

    def theirs():
        loss = torch.nn.functional.cross_entropy(tlogits, their_labels)
        loss.backward()
        tlogits.grad = None

    return compare(ours, theirs, repeats=300)


def _mlp_weights():
    shapes = [(784, 256), (256, 256), (256, 10)]
    return [(RNG.standard_normal(s) * np.sqrt(2.0 / s[0])).astype(np.float32) for s in shapes]


def bench_mlp():
    weights = _mlp_weights()
    x_np = RNG.random((128, 784), dtype=np.float32)
    y_np = RNG.integers(0, 10, 128)
    x, y = tp.tensor(x_np), tp.tensor(y_np)
    params = []
    for i, w in enumerate(weights):
        params += [tp.Variable(w, name=f"w{i}"), tp.Variable(np.zeros(w.shape[1], np.float32), name=f"b{i}")]
    assert all(p.dtype == tp.float32 for p in params), "the MLP must train in float32, as PyTorch's does"
    opt = tp.optimizers.Adam(1e-3)

    def ours():
        with tp.GradientTape() as tape:
            h = tp.nn.relu(x @ params[0] + params[1])
            h = tp.nn.relu(h @ params[2] + params[3])
            logits = h @ params[4] + params[5]
            loss = tp.mean(tp.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        opt.apply_gradients(zip(tape.gradient(loss, params), params, strict=True))

    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    )
    topt = torch.optim.Adam(model.parameters(), 1e-3)
    tx, ty = torch.from_numpy(x_np), torch.from_numpy(y_np)

    def theirs():
        topt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(tx), ty)
        loss.backward()
        topt.step()

    return compare(ours, theirs, repeats=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", action="store_true", help="time each library in one block")
    if parser.parse_args().sequential:
        _harness.BLOCK = None
    print(f"threads: {THREADS}; kernels: {', '.join(tp.build_info())}; torch {torch.__version__}")
    rows = [
        ("matmul 128x784 @ 784x256", *bench_matmul()),
        ("conv2d fwd+bwd 50x14x14x32 * 5x5x32x64 SAME", *bench_conv()),
        ("max_pool2d fwd+bwd 50x28x28x32 2x2/2", *bench_pool()),
        ("conv3d fwd+bwd 8x16x16x16x16 * 3x3x3x16x32 SAME", *bench_conv3d()),
        ("max_pool3d fwd+bwd 8x16x16x16x32 2x2x2/2", *bench_pool3d()),
        ("depthwise conv2d fwd+bwd 16x32x32x64 * 3x3x64x1 SAME", *bench_depthwise()),
        ("sparse softmax xent fwd+bwd 128x10", *bench_xent()),
        ("MLP 784-256-256-10 Adam step, batch 128", *bench_mlp()),
    ]
    print_table(rows, "pytorch")


if __name__ == "__main__":
    main()
