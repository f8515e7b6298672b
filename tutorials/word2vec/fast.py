"""Tutorial: word2vec at full speed with the fused skip-gram kernel (`tp.word2vec.Word2Vec`).

Skip-gram with negative sampling, as in the original word2vec tool: the threads walk the
corpus themselves, subsample it, and update both embedding tables without locks. Each
window shares one set of negative samples, so its update is a few small dense products.

    python tutorials/word2vec/fast.py                          # the Wikipedia excerpt gensim ships
    python tutorials/word2vec/fast.py --corpus text8           # text8 (downloaded once, with a checksum)
    python tutorials/word2vec/fast.py --corpus my.txt --epochs 10 --threads 4 --dim 200 \\
        --window 8 --negative 10 --min-count 3 --seed 7 --save-vectors vectors.txt

A corpus file is plain text: whitespace-separated tokens on one line or many (each line a
sentence). The script prints the nearest neighbours of a few words, the WordSim353 and
SimLex-999 correlations and the analogy accuracy (when gensim's test data is installed),
saves a 2-D PCA plot of frequent words to PNG, and ends with the line `words/s: N`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import tapeflow as tp

HERE = Path(__file__).resolve().parent
PROBES = ("king", "france", "war", "music", "computer", "river", "three", "philosophy")


def load_corpus(corpus: str | None) -> tuple[list[list[str]], str]:
    """Sentences of the chosen corpus, and its name."""
    if corpus is None:
        return tp.data.text.load_wikipedia_excerpt(), "the Wikipedia excerpt shipped with gensim"
    if corpus == "text8":
        return tp.data.text.load_text8(download=True), "text8"
    return tp.data.text.load_text_file(corpus), corpus


def print_neighbours(wv: tp.word2vec.KeyedVectors, words=PROBES, topn: int = 6) -> None:
    probes = [w for w in words if w in wv] or wv.words[100:105]
    print("\nnearest neighbours (cosine):")
    for word in probes:
        near = ", ".join(f"{w} {s:.2f}" for w, s in wv.most_similar(word, topn=topn))
        print(f"  {word:12s} {near}")


def print_scores(wv: tp.word2vec.KeyedVectors) -> dict:
    """Word-pair correlations and analogy accuracy on gensim's shipped test sets."""
    try:
        path = tp.word2vec.gensim_data_file
        pairs = {
            name: tp.word2vec.evaluate_word_pairs(wv, path(f))
            for name, f in (("WordSim353", "wordsim353.tsv"), ("SimLex-999", "simlex999.txt"))
        }
        analogies = tp.word2vec.evaluate_analogies(wv, path("questions-words.txt"))
    except (ImportError, FileNotFoundError, ValueError) as err:
        print(f"\nevaluation skipped: {err}")
        return {}
    print("\nevaluation:")
    for name, r in pairs.items():
        print(
            f"  {name:11s} Spearman {r['spearman']:.3f}  Pearson {r['pearson']:.3f}  "
            f"({r['pairs']} pairs, {r['oov_ratio']:.1f}% OOV)"
        )
    print(
        f"  analogies   3CosAdd accuracy {analogies['accuracy']:.1%}  ({analogies['correct']}/{analogies['total']}, "
        f"{analogies['oov_ratio']:.1f}% of questions OOV)"
    )
    return {"wordsim353": pairs["WordSim353"]["spearman"], "analogy": analogies["accuracy"]}


def plot_pca(wv: tp.word2vec.KeyedVectors, path: Path, first: int = 30, count: int = 120) -> None:
    """The words ranked first..first+count by frequency, projected on their 2 principal axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = first if len(wv) >= first + 20 else 0  # small vocabularies: from the top
    words = wv.words[first : first + count]
    vectors = wv.unit_vectors[first : first + count]
    centered = vectors - vectors.mean(axis=0)
    _, _, axes = np.linalg.svd(centered, full_matrices=False)
    xy = centered @ axes[:2].T
    fig, ax = plt.subplots(figsize=(11, 9))
    ax.scatter(xy[:, 0], xy[:, 1], s=8, color="tab:blue")
    for (x, y), word in zip(xy, words, strict=True):
        ax.annotate(word, (x, y), fontsize=8, xytext=(2, 2), textcoords="offset points")
    ax.set_title(f"word2vec (tapeflow): PCA of frequent words {first + 1}-{first + len(words)}")
    ax.set_xlabel("principal axis 1")
    ax.set_ylabel("principal axis 2")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", help="a plain-text file, or 'text8' (default: the Wikipedia excerpt)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--negative", type=int, default=5)
    parser.add_argument("--min-count", type=int, default=5)
    parser.add_argument("--sample", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--save-vectors", type=Path, help="write the vectors here, in the word2vec text format")
    parser.add_argument("--out", type=Path, default=HERE / "out", help="directory for the PCA plot")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    sentences, name = load_corpus(args.corpus)
    print(f"corpus: {name}: {sum(map(len, sentences)):,} words in {len(sentences):,} sentences")
    model = tp.word2vec.Word2Vec(
        dim=args.dim,
        window=args.window,
        negative=args.negative,
        min_count=args.min_count,
        sample=args.sample,
        epochs=args.epochs,
        threads=args.threads,
        seed=args.seed,
    )
    model.train(sentences)
    wv = model.wv
    print(f"vocabulary: {len(wv):,} words (min count {args.min_count}); {args.threads} threads, {args.epochs} epochs")
    report(wv, args, "word2vec_pca.png", model.words_per_second)
    return 0


def report(wv: tp.word2vec.KeyedVectors, args: argparse.Namespace, plot_name: str, words_per_second: float) -> None:
    """Neighbours, scores, the PCA plot, the saved vectors, and `words/s: N` as the last line."""
    print_neighbours(wv)
    print_scores(wv)
    args.out.mkdir(parents=True, exist_ok=True)
    plot = args.out / plot_name
    plot_pca(wv, plot)
    print(f"\nPCA plot: {plot}")
    if args.save_vectors is not None:
        wv.save_word2vec_format(args.save_vectors)
        print(f"vectors: {args.save_vectors}")
    print(f"words/s: {words_per_second:.0f}")


if __name__ == "__main__":
    sys.exit(main())
