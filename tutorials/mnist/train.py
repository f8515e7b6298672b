"""Tutorial: train an MLP and TensorFlow's "Deep MNIST" CNN with Keras-style `model.fit`.

Both models are `tp.Sequential` stacks compiled with Adam, sparse categorical cross-entropy
on logits and accuracy. `model.fit` trains them with a held-out validation set and a
progress bar. The script then measures test accuracy, saves the weights, plots the learning
curves and prints a table of results.

    python tutorials/mnist/train.py                     # Fashion-MNIST, a few minutes on 2 cores
    python tutorials/mnist/train.py --full              # long enough to reach the targets
    python tutorials/mnist/train.py --dataset mnist --full
    python tutorials/mnist/train.py --epochs-cnn 3 --batch-size 64 --out /tmp/run
    python tutorials/mnist/train.py --device xla:0      # or gpu:0: see tp.list_devices()

The default run is kept short for a newcomer on a laptop. It meets the MLP target but stops
the CNN after a fraction of what it needs for its target (see README.md for the numbers).
`--full` trains both models to their targets and exits with status 1 if either misses.

Targets (test accuracy): Fashion-MNIST, MLP 88% and CNN 91%; MNIST, CNN 99.2%.
The data come from `tp.datasets.mnist.load_data`. Fashion-MNIST is the Debian package
`dataset-fashion-mnist`. For MNIST, put its four IDX files in `$TAPEFLOW_DATA`.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import tapeflow as tp

HERE = Path(__file__).resolve().parent
VALIDATION_SIZE = 5000  # held out from the end of the training set
TARGETS = {("fashion", "mlp"): 0.88, ("fashion", "cnn"): 0.91, ("mnist", "cnn"): 0.992}


@dataclass
class Plan:
    """How to train one model: `epochs` passes over the first `train_size` samples."""

    epochs: int
    batch_size: int
    learning_rate: float  # Adam's initial rate, decayed to 5% of it by a cosine schedule
    train_size: int | None = None  # None: all 55,000 training samples


# On 2 cores a training step costs ~6 ms for the MLP (batch 128) and ~165 ms for the CNN
# (batch 50, about 300 samples/s). The default run, about four minutes, gives the CNN
# three passes over a 20,000-sample subset (~3.3 minutes), which reaches ~89%: one pass
# over all 55,000 samples does no better. The CNN needs 3-4 full epochs for 91%.
DEFAULT = {
    "mlp": Plan(epochs=10, batch_size=128, learning_rate=1e-3),
    "cnn": Plan(epochs=3, batch_size=50, learning_rate=2e-3),
}
FULL = {
    "fashion": {
        "mlp": Plan(epochs=20, batch_size=128, learning_rate=1e-3),
        "cnn": Plan(epochs=4, batch_size=50, learning_rate=2e-3),
    },
    "mnist": {
        "mlp": Plan(epochs=20, batch_size=128, learning_rate=1e-3),
        "cnn": Plan(epochs=8, batch_size=50, learning_rate=2e-3),
    },
}


# ------------------------------------------------------------------ models
# Layers get explicit names, which read well in summaries and graphs. save_weights keys each
# weight by its place in the model, so a model built later loads it whatever its layers' names.
def mlp() -> tp.Sequential:
    """784-256-256-10, ReLU, with a little dropout."""
    layers = tp.layers
    return tp.Sequential(
        [
            layers.Flatten(name="flatten"),
            layers.Dense(256, activation="relu", name="hidden1"),
            layers.Dropout(0.2, name="dropout1"),
            layers.Dense(256, activation="relu", name="hidden2"),
            layers.Dropout(0.2, name="dropout2"),
            layers.Dense(10, name="logits"),
        ],
        name="mlp",
    )


def deep_mnist_cnn() -> tp.Sequential:
    """The CNN of TensorFlow's "Deep MNIST for experts": two 5x5 conv + 2x2 max-pool
    stages (32 and 64 filters), a 1024-unit dense layer with dropout 0.5, then logits."""
    layers = tp.layers
    return tp.Sequential(
        [
            layers.Conv2D(32, 5, padding="same", activation="relu", name="conv1"),
            layers.MaxPooling2D(2, name="pool1"),
            layers.Conv2D(64, 5, padding="same", activation="relu", name="conv2"),
            layers.MaxPooling2D(2, name="pool2"),
            layers.Flatten(name="flatten"),
            layers.Dense(1024, activation="relu", name="fc1"),
            layers.Dropout(0.5, name="dropout"),
            layers.Dense(10, name="logits"),
        ],
        name="cnn",
    )


MODELS = {"mlp": ("MLP 784-256-256-10", mlp), "cnn": ("CNN (Deep MNIST)", deep_mnist_cnn)}


# -------------------------------------------------------------------- data
def load(dataset: str):
    """Train, validation and test splits: float32 images [N, 28, 28, 1] in [0, 1], int64 labels."""
    try:
        (x_train, y_train), (x_test, y_test) = tp.datasets.mnist.load_data(dataset)
    except FileNotFoundError as err:
        sys.exit(f"{err}\n(try --dataset fashion: Fashion-MNIST is the default data set)")

    def images(x):
        return (x.astype(np.float32) / 255.0)[..., None]

    cut = len(x_train) - VALIDATION_SIZE
    train = images(x_train[:cut]), y_train[:cut]
    validation = images(x_train[cut:]), y_train[cut:]
    return train, validation, (images(x_test), y_test)


# ---------------------------------------------------------------- training
@dataclass
class Result:
    key: str
    params: int
    epochs: int
    seconds: float
    test_accuracy: float
    target: float | None
    history: dict = field(default_factory=dict)

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.test_accuracy >= self.target


def train(key: str, plan: Plan, dataset: str, data, out: Path, seed: int) -> Result:
    """Build, compile, fit, evaluate and save one model."""
    title, build = MODELS[key]
    (x_train, y_train), validation, (x_test, y_test) = data
    if plan.train_size is not None:
        x_train, y_train = x_train[: plan.train_size], y_train[: plan.train_size]
    print(f"\n=== {title}: {plan.epochs} epochs over {len(x_train):,} samples, batch {plan.batch_size} ===")

    tp.random.seed(seed)  # the initial weights come from the global random stream
    model = build()
    model(x_train[:1])  # builds the weights, so that summary() can count them
    model.summary()
    # Cosine decay of the learning rate reaches a given accuracy in fewer epochs than a
    # constant rate: big steps while far from a minimum, small ones to settle in it.
    steps = plan.epochs * -(-len(x_train) // plan.batch_size)
    learning_rate = tp.optimizers.schedules.CosineDecay(plan.learning_rate, decay_steps=steps, alpha=0.05)
    model.compile(
        optimizer=tp.optimizers.Adam(learning_rate),
        loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    # fit would evaluate the validation set in training-size batches; a Dataset brings its
    # own batching, and inference runs faster on large batches.
    validation = tp.data.Dataset.from_tensor_slices(validation).batch(500)
    start = time.perf_counter()
    history = model.fit(
        x_train,
        y_train,
        batch_size=plan.batch_size,
        epochs=plan.epochs,
        validation_data=validation,
        seed=seed,
    )
    test = model.evaluate(x_test, y_test, batch_size=500, verbose=0, return_dict=True)
    seconds = time.perf_counter() - start
    path = out / f"{dataset}_{key}.weights.h5"
    model.save_weights(path)
    # A fresh model with the saved weights predicts exactly what the trained one does.
    restored = build()
    restored(x_test[:1])
    restored.load_weights(path)
    same = np.array_equal(restored.predict(x_test[:500], batch_size=500), model.predict(x_test[:500], batch_size=500))
    print(f"test accuracy {test['accuracy']:.4f}, test loss {test['loss']:.4f}")
    print(f"weights saved to {path}; reloaded into a fresh model: {'same' if same else 'DIFFERENT'} predictions")
    # Deployment: freeze the inference graph into one file that serves without this script
    # (`tapeflow run <file> --input x.npy`), and check that it predicts what the model does.
    graph_path = out / f"{dataset}_{key}.tfg"
    model.freeze().save(graph_path)
    served = tp.load_graph(graph_path)
    frozen = np.concatenate([served(x_test[i : i + 500]).numpy() for i in range(0, len(x_test), 500)])
    agree = np.mean(np.argmax(frozen, axis=1) == np.argmax(model.predict(x_test, batch_size=500), axis=1))
    print(f"frozen graph saved to {graph_path}: {len(served.nodes)} nodes; agrees with the model on {agree:.2%}")
    return Result(
        key,
        model.count_params(),
        plan.epochs,
        seconds,
        test["accuracy"],
        TARGETS.get((dataset, key)),
        history.history,
    )


# ---------------------------------------------------------------- reports
def plot_curves(results: list[Result], dataset: str, path: Path) -> bool:
    """Loss and accuracy per epoch, train against validation, one column per model; False
    (no plot) where matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(results), figsize=(5.5 * len(results), 7), squeeze=False)
    for col, result in enumerate(results):
        epochs = np.arange(1, len(result.history["loss"]) + 1)
        for row, metric in enumerate(("loss", "accuracy")):
            ax = axes[row, col]
            ax.plot(epochs, result.history[metric], "o-", label="train")
            ax.plot(epochs, result.history[f"val_{metric}"], "s--", label="validation")
            if metric == "accuracy":
                ax.axhline(result.test_accuracy, color="tab:green", lw=1, label=f"test {result.test_accuracy:.2%}")
                if result.target is not None:
                    ax.axhline(result.target, color="tab:red", lw=1, ls=":", label=f"target {result.target:.1%}")
            ax.set_title(f"{MODELS[result.key][0]}: {metric}")
            ax.set_xlabel("epoch")
            ax.set_xticks(epochs)
            ax.grid(alpha=0.3)
            ax.legend()
    fig.suptitle(f"tapeflow on {dataset} (train: dropout on; validation: dropout off)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def print_table(results: list[Result]) -> None:
    header = f"{'model':20s} {'params':>10s} {'epochs':>6s} {'test acc':>9s} {'target':>7s} {'met?':>5s} {'time':>7s}"
    print("\n" + header + "\n" + "-" * len(header))
    for r in results:
        target = "-" if r.target is None else f"{r.target:.1%}"
        met = "-" if r.met is None else ("yes" if r.met else "no")
        print(
            f"{MODELS[r.key][0]:20s} {r.params:>10,d} {r.epochs:>6d} {r.test_accuracy:>9.2%} "
            f"{target:>7s} {met:>5s} {r.seconds:>6.0f}s"
        )


# -------------------------------------------------------------------- main
def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=("fashion", "mnist"), default="fashion")
    parser.add_argument("--full", action="store_true", help="train long enough for the targets; exit 1 on a miss")
    parser.add_argument("--epochs-mlp", type=int, help="epochs for the MLP (overrides the plan)")
    parser.add_argument("--epochs-cnn", type=int, help="epochs for the CNN (overrides the plan)")
    parser.add_argument("--batch-size", type=int, help="batch size for both models (default: MLP 128, CNN 50)")
    parser.add_argument(
        "--train-size", type=int, help="train on the first N training samples (default: CNN 20,000; --full: all)"
    )
    parser.add_argument("--out", type=Path, default=HERE / "out", help="directory for weights and the plot")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", default="mlp,cnn", help="comma-separated subset of: mlp,cnn")
    parser.add_argument("--device", default="cpu", help="where the models live and train: cpu, gpu:N or xla:N")
    args = parser.parse_args(argv)
    try:
        args.device = tp.devices.parse_device(args.device)
    except ValueError as err:
        parser.error(f"--device: {err}")
    for name in ("epochs_mlp", "epochs_cnn", "batch_size", "train_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not args.models or any(m not in MODELS for m in args.models):
        parser.error(f"--models must name some of {sorted(MODELS)}, got {args.models}")
    return args


def plans(args) -> dict[str, Plan]:
    base = FULL[args.dataset] if args.full else DEFAULT
    chosen = {}
    for key in args.models:
        plan = base[key]
        epochs = getattr(args, f"epochs_{key}") or plan.epochs
        size = args.train_size or plan.train_size
        chosen[key] = Plan(epochs, args.batch_size or plan.batch_size, plan.learning_rate, size)
    return chosen


def main(argv=None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"tapeflow {tp.__version__}, {tp.get_num_threads()} threads; data: {args.dataset}; device: {args.device}")
    data = load(args.dataset)
    print(f"train {len(data[0][0]):,}, validation {len(data[1][0]):,}, test {len(data[2][0]):,} images")

    start = time.perf_counter()
    with tp.device(args.device):  # weights, batches and frozen graphs live there
        results = [train(key, plan, args.dataset, data, args.out, args.seed) for key, plan in plans(args).items()]
    plot = args.out / f"{args.dataset}_learning_curves.png"
    plotted = plot_curves(results, args.dataset, plot)
    print_table(results)
    curves = plot if plotted else "not plotted (pip install matplotlib)"
    print(f"\ntotal {time.perf_counter() - start:.0f}s; learning curves: {curves}")

    missed = [MODELS[r.key][0] for r in results if r.met is False]
    if missed:
        mode = "" if args.full else " (a short run: try --full)"
        print(f"below target: {', '.join(missed)}{mode}")
    return 1 if missed and args.full else 0


if __name__ == "__main__":
    sys.exit(main())
