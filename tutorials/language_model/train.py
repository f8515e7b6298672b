"""A word-level LSTM language model: TensorFlow's classic PTB tutorial ("small") with `fit`.

    python tutorials/language_model/train.py                     # full softmax, then sampled softmax
    python tutorials/language_model/train.py --max-words 150000  # the first 150k words only
    python tutorials/language_model/train.py --epochs 4 --decay-after 2
    python tutorials/language_model/train.py --variant sampled --num-sampled 512 --epochs 3
    python tutorials/language_model/train.py --replicas 2        # the same run on 2 replicas (Dask), clipped alike

The model reads 20 words and predicts each next one: an Embedding of 200, two LSTM layers
of 200 units, and a softmax over the 10,000 most frequent words of the Wikipedia excerpt
that gensim ships (rarer words become <unk>). Training follows the classic configuration:
batches of 20 windows of 20 steps, no dropout, weights drawn uniformly in [-0.1, 0.1],
plain SGD at learning rate 1.0 with the gradients clipped to a global norm of 5, the loss
summed over the steps and averaged over the batch, and the rate halved every epoch after
`--decay-after` epochs. As in that tutorial, the corpus is laid out as `batch_size`
contiguous streams, each batch continues every stream where the previous one stopped, and
the LSTM layers are stateful: each window starts from the states the previous window of its
stream ended with (truncated backpropagation through time over 20 steps). The states are
zeroed at the start of every epoch and of every evaluation (`ResetStates`).

Two variants share everything but the training loss: the full softmax, and
`tp.nn.sampled_softmax_loss`, which scores the true word against `--num-sampled` words
drawn from a log-uniform (Zipf) distribution instead of all 10,000, as large-vocabulary
models are trained; both are evaluated with the full softmax. The script prints the
validation perplexity per epoch and the test perplexity, text sampled from each model,
the wall time, and plots the curves to `<out>/language_model_perplexity.png`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

import tapeflow as tp

HERE = Path(__file__).resolve().parent
UNK = "<unk>"


# ------------------------------------------------------------------ data
def build_vocabulary(words: list[str], size: int) -> list[str]:
    """The `size - 1` most frequent words and <unk>, ranked by count (<unk> counting every
    other word), so that word ids follow frequency as the log-uniform sampler assumes."""
    counts = Counter(words).most_common()
    kept, rest = counts[: size - 1], counts[size - 1 :]
    ranked = [*kept, (UNK, sum(c for _, c in rest))]
    ranked.sort(key=lambda wc: -wc[1])  # stable: equal counts keep their order
    return [w for w, _ in ranked]


def encode(words: list[str], vocabulary: list[str]) -> np.ndarray:
    index = {w: i for i, w in enumerate(vocabulary)}
    unk = index[UNK]
    return np.fromiter((index.get(w, unk) for w in words), dtype=np.int64, count=len(words))


def windows(ids: np.ndarray, batch_size: int, num_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets) of shape [batches * batch_size, num_steps], targets one word ahead.

    As the PTB reader does, the stream is cut into `batch_size` rows read left to right, so
    row r of batch i+1 continues row r of batch i; `fit` must not shuffle them."""
    length = len(ids) // batch_size
    rows = ids[: batch_size * length].reshape(batch_size, length)
    batches = (length - 1) // num_steps
    if batches < 1:
        raise ValueError(f"{len(ids)} words are too few for batches of {batch_size} x {num_steps + 1}")
    x = np.stack([rows[:, i * num_steps : (i + 1) * num_steps] for i in range(batches)])
    y = np.stack([rows[:, i * num_steps + 1 : (i + 1) * num_steps + 1] for i in range(batches)])
    return x.reshape(-1, num_steps), y.reshape(-1, num_steps)


def load_splits(vocabulary_size: int, max_words: int | None = None):
    """(vocabulary, train, validation, test ids): the excerpt's articles in order, as one
    stream of words, split 80/10/10."""
    words = [w for article in tp.data.text.load_wikipedia_excerpt() for w in article]
    if max_words is not None:
        words = words[:max_words]
    vocabulary = build_vocabulary(words, vocabulary_size)
    ids = encode(words, vocabulary)
    a, b = int(0.8 * len(ids)), int(0.9 * len(ids))
    return vocabulary, ids[:a], ids[a:b], ids[b:]


# ------------------------------------------------------------------ model
class SoftmaxWeights(tp.layers.Layer):
    """The output layer, stored as TensorFlow's sampled losses want it: a [classes, dim]
    matrix and a bias per class; called, it gives the logits of every class."""

    def __init__(self, classes: int, initializer, **kwargs):
        super().__init__(**kwargs)
        self.classes, self.initializer = classes, initializer

    def build(self, input_shape):
        self.kernel = self.add_weight("kernel", (self.classes, input_shape[-1]), self.initializer)
        self.bias = self.add_weight("bias", (self.classes,), self.initializer)

    def call(self, inputs):
        return tp.matmul(inputs, tp.transpose(self.kernel)) + self.bias


class LanguageModel(tp.Model):
    """word ids [batch, steps] -> next-word logits [batch, steps, vocabulary].

    With `num_sampled`, training returns the top LSTM's outputs instead and `compute_loss`
    scores them with `sampled_softmax_loss`; evaluation always uses the full softmax.
    `stateful` LSTM layers carry their states from one call to the next (for the batch size
    of the first call); `reset_states()` zeros them."""

    def __init__(
        self,
        vocabulary_size: int,
        units: int = 200,
        layers: int = 2,
        init_scale: float = 0.1,
        num_sampled: int | None = None,
        stateful: bool = True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        uniform = tp.initializers.RandomUniform(-init_scale, init_scale)
        self.vocabulary_size, self.num_sampled = vocabulary_size, num_sampled
        self.embedding = tp.layers.Embedding(vocabulary_size, units, embeddings_initializer=uniform)
        self.lstms = [
            tp.layers.LSTM(
                units,
                return_sequences=True,
                kernel_initializer=uniform,
                recurrent_initializer=uniform,
                bias_initializer=uniform,
                unit_forget_bias=False,
                stateful=stateful,
            )
            for _ in range(layers)
        ]
        self.softmax = SoftmaxWeights(vocabulary_size, uniform)

    def reset_states(self) -> None:
        """Zero the LSTM layers' states (stateful layers only)."""
        for lstm in self.lstms:
            lstm.reset_states()

    def call(self, ids, training=None):
        h = self.embedding(ids)
        for lstm in self.lstms:
            h = lstm(h)
        if self.num_sampled and training:
            if not self.softmax.built:
                self.softmax.build(h.shape)
            return h
        return self.softmax(h)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The loss of the classic tutorial: cross-entropy summed over the steps, averaged over the batch."""
        steps = y.shape[1]
        if self.num_sampled and training:
            hidden = tp.reshape(y_pred, (-1, y_pred.shape[-1]))
            losses = tp.nn.sampled_softmax_loss(
                self.softmax.kernel,
                self.softmax.bias,
                tp.reshape(y, (-1, 1)),
                hidden,
                self.num_sampled,
                self.vocabulary_size,
            )
        else:
            logits = tp.reshape(y_pred, (-1, self.vocabulary_size))
            losses = tp.nn.sparse_softmax_cross_entropy_with_logits(labels=tp.reshape(y, (-1,)), logits=logits)
        return tp.mean(losses) * float(steps)


class ResetStates(tp.callbacks.Callback):
    """Zero the model's states at the start of every epoch and of every evaluation, so that
    each pass over a split reads its streams from the beginning, from zero state."""

    def on_epoch_begin(self, epoch, logs=None):
        self.model.reset_states()

    def on_test_begin(self, logs=None):
        self.model.reset_states()


def classic_schedule(learning_rate: float, decay_after: int, decay: float = 0.5):
    """The PTB tutorial's rate: constant for `decay_after` epochs, then times `decay` every epoch."""
    return lambda epoch, lr=None: learning_rate * decay ** max(epoch + 1 - decay_after, 0)


def make_model(vocabulary_size: int, num_sampled: int | None, args, sharded: bool = False) -> LanguageModel:
    """The compiled model, with stateful LSTM layers and the gradients clipped to a global
    norm of `max_grad_norm`. `sharded` (replicas) keeps no state: each replica reads only
    part of every batch, so there each window starts from zero state."""
    model = LanguageModel(vocabulary_size, args.units, args.layers, num_sampled=num_sampled, stateful=not sharded)
    model.compile(optimizer=tp.optimizers.SGD(args.learning_rate, global_clipnorm=args.max_grad_norm), jit=True)
    return model


def perplexity(loss: float, steps: int) -> float:
    return float(np.exp(loss / steps))


def evaluate_perplexity(model: LanguageModel, x: np.ndarray, y: np.ndarray, batch_size: int, steps: int) -> float:
    """The perplexity over (x, y), read stream by stream from zero state."""
    return perplexity(model.evaluate(x, y, batch_size=batch_size, verbose=0, callbacks=[ResetStates()]), steps)


# ------------------------------------------------------------------ sampling
def sample_text(model: LanguageModel, vocabulary: list[str], prime: list[str], length: int, seed: int) -> str:
    """`length` words drawn one at a time from the model's softmax, after `prime`: a stateful
    copy of the model for one stream reads the prime, then each word drawn, carrying its states."""
    rng = np.random.default_rng(seed)
    index = {w: i for i, w in enumerate(vocabulary)}
    ids = [index.get(w, index[UNK]) for w in prime]
    reader = LanguageModel(model.vocabulary_size, model.embedding.output_dim, len(model.lstms))
    reader(np.zeros((1, 1), np.int64), training=False)  # build for one stream
    reader.set_weights(model.get_weights())
    reader.reset_states()
    window = np.asarray(ids, dtype=np.int64)[None]
    for _ in range(length):
        logits = reader(window, training=False).numpy()[0, -1].astype(np.float64)
        p = np.exp(logits - logits.max())
        ids.append(int(rng.choice(len(p), p=p / p.sum())))
        window = np.asarray([[ids[-1]]], dtype=np.int64)
    return " ".join(vocabulary[i] for i in ids)


# ------------------------------------------------------------------ training
def train(name: str, num_sampled: int | None, data, args, distribute=None) -> dict:
    vocabulary, (x, y), validation, (x_test, y_test) = data
    tp.random.seed(args.seed)
    model = make_model(len(vocabulary), num_sampled, args, sharded=distribute is not None)
    schedule = classic_schedule(args.learning_rate, args.decay_after)
    callbacks = [tp.callbacks.LearningRateScheduler(schedule), ResetStates()]
    callbacks.append(
        tp.callbacks.LambdaCallback(
            on_epoch_end=lambda epoch, logs: print(
                f"  {name} epoch {epoch + 1}: lr {schedule(epoch):.3g}, train loss {logs['loss']:.1f}, "
                f"validation perplexity {perplexity(logs['val_loss'], args.num_steps):.1f}",
                flush=True,
            )
        )
    )
    steps = len(x) // args.batch_size if args.max_steps is None else min(args.max_steps, len(x) // args.batch_size)
    x, y = x[: steps * args.batch_size], y[: steps * args.batch_size]  # every epoch reads the same first steps
    start = time.perf_counter()
    history = model.fit(
        x,
        y,
        batch_size=args.batch_size,
        epochs=args.epochs,
        shuffle=False,
        validation_data=validation,
        callbacks=callbacks,
        verbose=0,
        distribute=distribute,
    )
    seconds = time.perf_counter() - start
    test = evaluate_perplexity(model, x_test, y_test, args.batch_size, args.num_steps)
    trained_words = args.epochs * steps * args.batch_size * args.num_steps
    result = {
        "name": name,
        "validation": [perplexity(v, args.num_steps) for v in history.history["val_loss"]],
        "test": test,
        "seconds": seconds,
        "words_per_second": trained_words / seconds,
    }
    print(
        f"  {name}: test perplexity {result['test']:.1f}; {args.epochs} epochs in {seconds:.0f} s "
        f"({result['words_per_second']:.0f} words/s)",
        flush=True,
    )
    prime = ["the", "city", "of"]
    print(f"  sampled text: {sample_text(model, vocabulary, prime, args.sample_words, args.seed)}\n", flush=True)
    return result


def plot(results: list[dict], path: Path) -> None:
    # lazily: matplotlib is needed for the plot only
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        epochs = range(1, len(r["validation"]) + 1)
        ax.plot(epochs, r["validation"], marker="o", label=f"{r['name']} (test {r['test']:.0f})")
    ax.set_xticks(range(1, max(len(r["validation"]) for r in results) + 1))
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation perplexity")
    ax.set_title("2 x 200 LSTM language model, Wikipedia excerpt")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", choices=("full", "sampled", "both"), default="both")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--decay-after", type=int, default=1, help="epochs at the full learning rate (default 1)")
    p.add_argument("--max-steps", type=int, help="at most this many batches per epoch (for quick runs)")
    p.add_argument(
        "--max-words", type=int, default=0, help="only the first N words of the corpus (default 0: all 582k)"
    )
    p.add_argument("--vocabulary", type=int, default=10_000)
    p.add_argument("--units", type=int, default=200)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--num-steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--learning-rate", type=float, default=1.0)
    p.add_argument("--max-grad-norm", type=float, default=5.0)
    p.add_argument("--num-sampled", type=int, default=512, help="sampled classes per step (sampled variant)")
    p.add_argument("--sample-words", type=int, default=30, help="words of text to sample from each model")
    p.add_argument("--replicas", type=int, default=1, help="train on this many replicas (DataParallel on Dask)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=HERE / "out")
    args = p.parse_args(argv)
    for name in ("epochs", "decay_after", "vocabulary", "units", "layers", "num_steps", "batch_size", "replicas"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.max_words < 0:
        p.error(f"--max-words must be >= 0, got {args.max_words}")
    if args.max_steps is not None and args.max_steps < 1:
        p.error(f"--max-steps must be >= 1, got {args.max_steps}")
    if args.replicas > 1 and args.batch_size % args.replicas:
        p.error(f"--batch-size {args.batch_size} must be a multiple of --replicas {args.replicas}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        vocabulary, train_ids, valid_ids, test_ids = load_splits(args.vocabulary, args.max_words or None)
    except (ImportError, FileNotFoundError) as err:
        sys.exit(f"train.py: the Wikipedia excerpt is not available ({err}); install gensim")
    split = [windows(ids, args.batch_size, args.num_steps) for ids in (train_ids, valid_ids, test_ids)]
    data = (vocabulary, *split)
    print(
        f"corpus: the Wikipedia excerpt shipped with gensim: {len(train_ids):,} / {len(valid_ids):,} / "
        f"{len(test_ids):,} words (train / validation / test), vocabulary {len(vocabulary):,}",
        flush=True,
    )
    variants = {"full": [("full softmax", None)], "sampled": [("sampled softmax", args.num_sampled)]}
    variants["both"] = variants["full"] + variants["sampled"]
    results = []
    if args.replicas > 1:
        with tp.distributed.Cluster(n_workers=args.replicas, threads_per_worker=1) as cluster:
            strategy = tp.distributed.DataParallel(cluster, replicas=args.replicas)
            print(f"{args.replicas} replicas: the LSTM layers are not stateful (each window starts from zero state)")
            for name, sampled in variants[args.variant]:
                results.append(train(f"{name}, {args.replicas} replicas", sampled, data, args, strategy))
    else:
        for name, sampled in variants[args.variant]:
            results.append(train(name, sampled, data, args))
    print(f"{'variant':32s} {'valid ppl':>10s} {'test ppl':>9s} {'words/s':>8s}")
    for r in results:
        print(f"{r['name']:32s} {r['validation'][-1]:10.1f} {r['test']:9.1f} {r['words_per_second']:8.0f}")
    path = args.out / "language_model_perplexity.png"
    plot(results, path)
    print(f"curves: {path}")
    print(f"wall time: {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
