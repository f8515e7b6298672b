"""Tutorial 00: tensors, tapes, and training Fashion-MNIST by hand.

This tutorial uses only the core of tapeflow: tensors, `tp.Variable`, `tp.GradientTape`
and an SGD update that we write ourselves. It has no layers, no optimizer objects and no
`model.fit`. Part 1 shows what a tape records and how `tape.gradient` walks that record
backwards. Parts 2 and 3 use the same mechanism to train two classifiers on the real
Fashion-MNIST data: softmax regression, then a two-layer perceptron.

Run it (each epoch prints its loss, test accuracy and elapsed time):

    python tutorials/00_tensors_and_tapes.py
    python tutorials/00_tensors_and_tapes.py --epochs-mlp 10 --batch-size 64

It needs the Fashion-MNIST IDX files: `apt-get install dataset-fashion-mnist`, or
`--data DIR` for a directory holding them. The script exits with status 1 if a model
misses its target test accuracy (84% for softmax regression, 87% for the perceptron).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import tapeflow as tp

TARGETS = {"softmax regression": 0.84, "MLP 784-256-10": 0.87}
CLASSES = "T-shirt trouser pullover dress coat sandal shirt sneaker bag ankle-boot".split()


# ---------------------------------------------------------------------------
# Part 1. What a tape records, and how the gradient walks it backwards.
# ---------------------------------------------------------------------------
def part1_tapes() -> None:
    """A tiny expression, differentiated by the tape and by hand."""
    print("Part 1: tensors and tapes")

    # A tensor is an immutable array with a dtype and a device. Arithmetic on tensors
    # runs right away ("eagerly"), just as with NumPy.
    x = tp.tensor([[1.0, 2.0], [3.0, 4.0]])
    print(f"  x @ x = {(x @ x).numpy().tolist()}, shape {x.shape}, dtype {x.dtype.name}")

    # A Variable is a tensor you may change in place with assign / assign_add /
    # assign_sub: it holds the state of a model, such as its weights.
    a = tp.Variable(2.0, name="a")
    b = tp.Variable(-3.0, name="b")
    c = tp.Variable(10.0, name="c")
    f = tp.Variable(-2.0, name="f")

    # Inside `with tp.GradientTape()`, every op that reads a watched tensor (trainable
    # Variables are watched automatically; other tensors need `tape.watch(t)`) appends
    # one record to the tape: (op, its inputs, its attributes, its outputs). The block
    # below appends five records, in this order:
    #     e    = multiply(a, b)    # -6
    #     d    = add(e, c)         #  4
    #     L    = multiply(d, f)    # -8
    #     y    = multiply(a, a)    #  4   (a is read a second time)
    #     loss = add(L, y)         # -4
    # That list is all a tape is: no graph objects, no per-value closures.
    with tp.GradientTape() as tape:
        e = a * b
        d = e + c
        loss = d * f + a * a

    # tape.gradient(loss, sources) starts from d loss / d loss = 1 and visits the records
    # in *reverse* order. Reverse execution order is a topological order for free: by the
    # time a record is reached, every record that consumed its outputs has already pushed
    # its share back, so the gradient of each output is complete.
    # For each record, the op's VJP (vector-Jacobian product) turns the gradient g of the
    # output into gradients of the inputs:
    #     add(u, v):        du += g,      dv += g
    #     multiply(u, v):   du += g * v,  dv += g * u
    # "+=" matters: `a` feeds two ops, so its gradient is the sum over both paths.
    # The same walk by hand, from the last record to the first:
    #     loss = add(L, y)       dL = 1,          dy = 1
    #     y = multiply(a, a)     da += 1*a + 1*a = 4
    #     L = multiply(d, f)     dd = f = -2,     df = d = 4
    #     d = add(e, c)          de = dd = -2,    dc = dd = -2
    #     e = multiply(a, b)     da += de*b = 6 (so da = 10),   db = de*a = -4
    grads = tape.gradient(loss, [a, b, c, f])
    by_tape = [float(g) for g in grads]
    by_hand = [2 * 2.0 + (-2.0) * (-3.0), -2.0 * 2.0, -2.0, 4.0]
    print(f"  loss = {float(loss)}; d loss / d[a, b, c, f] by tape {by_tape}, by hand {by_hand}")
    assert by_tape == by_hand

    # The VJPs are themselves tapeflow ops, so an outer tape can record the backward
    # pass of an inner one. That gives second derivatives: d2/dt2 of t**3 is 6t.
    t = tp.tensor(3.0)
    with tp.GradientTape() as outer:
        outer.watch(t)
        with tp.GradientTape() as inner:
            inner.watch(t)
            cube = t * t * t
        slope = inner.gradient(cube, t)  # 3t^2 = 27, recorded by `outer`
    print(f"  d/dt t^3 = {float(slope)}, d2/dt2 t^3 = {float(outer.gradient(slope, t))} at t = 3")
    # A tape is used once: after `gradient` it frees its records (persistent=True keeps them).


# ---------------------------------------------------------------------------
# Part 2. Data: Fashion-MNIST as float tensors in [0, 1].
# ---------------------------------------------------------------------------
def load_fashion(path: str | None) -> tuple:
    """Train and test tensors: images flattened to 784 floats in [0, 1], int64 labels."""
    (x_train, y_train), (x_test, y_test) = tp.datasets.mnist.load_data("fashion", path=path)

    def images(x):  # uint8 [N, 28, 28] -> float32 [N, 784], scaled to [0, 1]
        return tp.tensor(x.reshape(len(x), 28 * 28), dtype="float32") / 255.0

    return (images(x_train), tp.tensor(y_train)), (images(x_test), tp.tensor(y_test))


# ---------------------------------------------------------------------------
# Part 3. Models are functions of Variables; training is tape + SGD.
# ---------------------------------------------------------------------------
def softmax_regression(rng: tp.random.Generator):
    """logits = x W + b: one linear map from 784 pixels to 10 class scores.

    Zero initial weights are fine here (the loss is convex), so `rng` goes unused.
    """
    w = tp.Variable(tp.zeros((784, 10)), name="W")
    b = tp.Variable(tp.zeros((10,)), name="b")
    return [w, b], lambda x: x @ w + b


def mlp(rng: tp.random.Generator, hidden: int = 256):
    """logits = relu(x W1 + b1) W2 + b2, with He-scaled random initial weights.

    Zero weights would do for softmax regression, but here every hidden unit would then
    get the same gradient and stay identical to its neighbours: random init breaks the tie.
    """
    w1 = tp.Variable(rng.normal((784, hidden), stddev=math.sqrt(2 / 784)), name="W1")
    b1 = tp.Variable(tp.zeros((hidden,)), name="b1")
    w2 = tp.Variable(rng.normal((hidden, 10), stddev=math.sqrt(1 / hidden)), name="W2")
    b2 = tp.Variable(tp.zeros((10,)), name="b2")
    return [w1, b1, w2, b2], lambda x: tp.nn.relu(x @ w1 + b1) @ w2 + b2


def mean_loss(forward, x, labels) -> tp.Tensor:
    """Average cross-entropy of softmax(forward(x)) against the integer labels."""
    logits = forward(x)
    return tp.mean(tp.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def accuracy(forward, x, labels) -> float:
    """Fraction of examples whose highest logit is the true class."""
    hits = tp.equal(tp.argmax(forward(x), axis=1), labels)
    return float(tp.mean(tp.cast(hits, "float32")))


def train(name, params, forward, train_data, test_data, epochs, args, rng) -> float:
    """Minibatch SGD with momentum and a cosine learning-rate decay; returns test accuracy.

    Each step: sample a batch, record the forward pass on a tape, ask the tape for
    d loss / d param, and move each parameter a little against its gradient:
        velocity = momentum * velocity - lr * gradient
        param    = param + velocity
    The learning rate falls from --lr to 0 along half a cosine, so that the last
    epochs average out the noise of small batches.
    """
    x, y = train_data
    n = len(x)
    steps_per_epoch = math.ceil(n / args.batch_size)
    total_steps = epochs * steps_per_epoch
    velocity = [tp.zeros_like(p) for p in params]
    print(
        f"{name}: {sum(p.size for p in params)} parameters, {epochs} epochs of "
        f"{steps_per_epoch} steps (batch {args.batch_size}, lr {args.lr}, "
        f"momentum {args.momentum})"
    )
    start = time.perf_counter()
    step = 0
    for epoch in range(1, epochs + 1):
        order = tp.random.shuffle(tp.arange(n), generator=rng)  # a new order every epoch
        loss_sum = 0.0
        for first in range(0, n, args.batch_size):
            batch = order[first : first + args.batch_size]
            xb, yb = tp.gather(x, batch), tp.gather(y, batch)
            with tp.GradientTape() as tape:  # records only this step's forward pass
                loss = mean_loss(forward, xb, yb)
            grads = tape.gradient(loss, params)
            lr = args.lr * 0.5 * (1 + math.cos(math.pi * step / total_steps))
            for i, (param, grad) in enumerate(zip(params, grads, strict=True)):
                velocity[i] = args.momentum * velocity[i] - lr * grad
                param.assign_add(velocity[i])
            loss_sum += float(loss) * len(batch)
            step += 1
        print(
            f"  epoch {epoch:2d}/{epochs}  train loss {loss_sum / n:.4f}  "
            f"test accuracy {accuracy(forward, *test_data):.2%}  "
            f"{time.perf_counter() - start:5.1f} s"
        )
    return accuracy(forward, *test_data)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs-softmax", type=int, default=8)
    parser.add_argument("--epochs-mlp", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--lr", type=float, default=0.05, help="peak learning rate")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--data",
        default=None,
        metavar="PATH",
        help="directory with the Fashion-MNIST IDX files (default: search $TAPEFLOW_DATA, "
        "~/.tapeflow/datasets/fashion, then Debian's package)",
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    part1_tapes()

    print("\nPart 2: data")
    try:
        train_data, test_data = load_fashion(args.data)
    except FileNotFoundError as err:  # the message says where it looked and how to get the files
        print(err, file=sys.stderr)
        return 2
    counts = tp.sum(tp.one_hot(train_data[1], 10), axis=0).numpy().astype(int).tolist()
    print(
        f"  train {train_data[0].shape}, test {test_data[0].shape}; "
        f"examples per class: {dict(zip(CLASSES, counts, strict=True))}"
    )

    print("\nPart 3: training")
    models = [
        ("softmax regression", softmax_regression, args.epochs_softmax),
        ("MLP 784-256-10", mlp, args.epochs_mlp),
    ]
    results = {}
    for offset, (name, build, epochs) in enumerate(models):
        rng = tp.random.Generator(args.seed + offset)  # one stream for init and shuffling
        params, forward = build(rng)
        results[name] = train(name, params, forward, train_data, test_data, epochs, args, rng)

    print(f"\nTest accuracy (total time {time.perf_counter() - began:.1f} s):")
    for name, acc in results.items():
        verdict = "met" if acc >= TARGETS[name] else "MISSED"
        print(f"  {name:20s} {acc:.2%}  (target {TARGETS[name]:.0%}: {verdict})")
    return 0 if all(acc >= TARGETS[name] for name, acc in results.items()) else 1


if __name__ == "__main__":
    sys.exit(main())
