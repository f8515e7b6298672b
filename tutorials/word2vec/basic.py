"""word2vec, the readable version: a Keras-style skip-gram model (an Embedding and an
output layer scored by `tp.nn.nce_loss`) trained with `fit`, as TensorFlow's
word2vec_basic did.

    python tutorials/word2vec/basic.py                       # the Wikipedia excerpt gensim ships
    python tutorials/word2vec/basic.py --corpus my.txt --epochs 3 --dim 50 --window 4 \\
        --negative 5 --min-count 3 --seed 7 --save-vectors vectors.txt

Each training example is a (center word, context word) pair within a dynamic window.
The model maps a center word to its vector. The loss scores that vector against the
context word's output vector (target 1) and against `--negative` noise words (target 0)
drawn from the unigram distribution raised to 3/4 and shared by the step's pairs; with
the expected counts set to one, `nce_loss` is word2vec's negative sampling. Both tables
get sparse gradients (the rows of the step's words only), and the step, frozen by
`compile(jit=True)`, updates those rows in place, so a step costs its batch, not the
vocabulary. The script prints nearest neighbours and word-similarity and analogy scores,
saves a PCA plot of frequent words, and ends with `words/s: N` (corpus words per second
of training, counted as gensim counts them).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import tapeflow as tp
from tapeflow.data import text

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from fast import load_corpus, report  # noqa: E402 - the same reports as fast.py


class NoiseContrastive(tp.layers.Layer):
    """The output side of skip-gram: a vector and a bias per context word."""

    def __init__(self, vocab_size: int, dim: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.dim = vocab_size, dim

    def build(self, input_shape):
        self.kernel = self.add_weight("weights", (self.vocab_size, self.dim), "zeros")
        self.bias = self.add_weight("biases", (self.vocab_size,), "zeros")

    def call(self, inputs):
        return inputs


class SkipGram(tp.Model):
    """center word ids -> their vectors; `nce` holds the context side the loss uses."""

    def __init__(self, vocab_size: int, dim: int, **kwargs):
        super().__init__(**kwargs)
        self.embedding = tp.layers.Embedding(
            vocab_size, dim, embeddings_initializer=tp.initializers.RandomUniform(-0.5 / dim, 0.5 / dim)
        )
        self.nce = NoiseContrastive(vocab_size, dim)
        self.nce.build(None)

    def call(self, centers, training=None):
        return self.embedding(centers)


class NCELoss(tp.losses.Loss):
    """nce_loss of (context ids, center vectors) against the model's output layer, summed
    over the batch (each pair counts as one word2vec update)."""

    def __init__(self, output: NoiseContrastive, num_sampled: int, unigrams, seed: int):
        super().__init__(name="nce", reduction="sum")
        self.output, self.num_sampled, self.unigrams, self.seed = output, num_sampled, unigrams, seed

    def call(self, contexts, vectors):
        labels = tp.reshape(contexts, (-1, 1))
        vocab_size = len(self.unigrams)
        sampled, true_count, noise_count = tp.random.fixed_unigram_candidate_sampler(
            labels, 1, self.num_sampled, False, vocab_size, distortion=0.75, unigrams=self.unigrams, seed=self.seed
        )
        # Expected counts of one drop NCE's log-probability correction: negative sampling.
        noise = (sampled, tp.ones_like(true_count), tp.ones_like(noise_count))
        weights, biases = self.output.kernel, self.output.bias
        return tp.nn.nce_loss(weights, biases, labels, vectors, self.num_sampled, vocab_size, sampled_values=noise)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", help="a plain-text file, or 'text8' (default: the Wikipedia excerpt)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--negative", type=int, default=5, help="noise words per step, shared by its pairs")
    p.add_argument("--min-count", type=int, default=5)
    p.add_argument("--sample", type=float, default=1e-3, help="subsampling threshold of frequent words")
    p.add_argument("--batch-size", type=int, default=4096, help="skip-gram pairs per step")
    p.add_argument("--learning-rate", type=float, default=0.2, help="Adagrad's learning rate")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--save-vectors", type=Path, help="write the vectors here, in the word2vec text format")
    p.add_argument("--out", type=Path, default=HERE / "out", help="directory for the PCA plot")
    args = p.parse_args(argv)
    for name in ("epochs", "dim", "window", "negative", "min_count", "batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    tp.random.seed(args.seed)
    sentences, name = load_corpus(args.corpus)
    vocab = text.Vocabulary.build(sentences, min_count=args.min_count)
    if len(vocab) == 0:
        sys.exit(f"basic.py: no word occurs {args.min_count} times or more; lower --min-count")
    corpus = vocab.encode(sentences)
    print(f"corpus: {name}: {sum(map(len, sentences)):,} words in {len(sentences):,} sentences")
    batches = text.skipgram_dataset(
        corpus, args.window, args.batch_size, keep=vocab.keep_probabilities(args.sample), seed=args.seed
    )
    # Full batches only: the frozen step is traced once per batch shape, and an epoch's last,
    # shorter batch (a different size every epoch) would cost a new trace each time.
    pairs = tp.data.Dataset.from_generator(lambda: (b for b in batches if len(b[0]) == args.batch_size))

    model = SkipGram(len(vocab), args.dim)
    # A step's loss sums over its pairs, and every pair pushes the step's few noise
    # words: Adagrad's per-row step sizes keep those rows from overshooting.
    model.compile(
        optimizer=tp.optimizers.Adagrad(args.learning_rate, initial_accumulator_value=1e-3),
        loss=NCELoss(model.nce, args.negative, vocab.counts.astype(np.float64).tolist(), args.seed),
        jit=True,
    )
    start = time.perf_counter()
    history = model.fit(pairs, epochs=args.epochs, verbose=0)
    seconds = time.perf_counter() - start
    losses = ", ".join(f"{x:.0f}" for x in history.history["loss"])
    print(f"vocabulary: {len(vocab):,} words (min count {args.min_count}); {args.epochs} epochs in {seconds:.1f} s")
    print(f"loss per step, by epoch: {losses}")

    wv = tp.word2vec.KeyedVectors(vocab.words, model.embedding.embeddings.numpy())
    # Raw corpus words (before subsampling) per second of training, as gensim counts them.
    report(wv, args, "word2vec_basic_pca.png", sum(map(len, sentences)) * args.epochs / seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
