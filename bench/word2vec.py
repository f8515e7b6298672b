"""word2vec against gensim: training speed and vector quality, side by side in one run.

    python bench/word2vec.py [--rounds 3] [--threads 2,1]

Skip-gram, negative sampling 5, dimension 100, window 5, min_count 5, sample 1e-3,
5 epochs, on the Wikipedia excerpt that the gensim wheel ships (cleaned by
tp.data.text.load_wikipedia_excerpt and written once to a temporary file, one article
per line, which both libraries then read). Every run is a fresh process: tapeflow's
`Word2Vec`, or gensim's `Word2Vec` in a process that never imports tapeflow. For each
thread count the runs alternate over the rounds, with one seed per round for both; the
speed figure is the median of the per-round ratios of words/s (corpus tokens per second
of training, as gensim counts them). Both sets of vectors are scored here by the same
evaluation (tp.word2vec, which matches gensim's own): WordSim353 Spearman and 3CosAdd
analogy accuracy on questions-words.txt.

A last part times one epoch of the fused op three ways on the same tables: the kernel
called directly (in place), the op called eagerly, and the op inside a frozen graph that
assigns its outputs to Variables.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SETTINGS = {"dim": 100, "window": 5, "negative": 5, "min_count": 5, "sample": 1e-3, "epochs": 5}
TARGETS = {2: 1.5, 1: 1.2}


# ------------------------------------------------------------------ workers (one process each)
def run_tapeflow(corpus: str, threads: int, seed: int, vectors: str) -> dict:
    import tapeflow as tp

    sentences = tp.data.text.load_text_file(corpus)
    model = tp.word2vec.Word2Vec(threads=threads, seed=seed, verbose=False, **SETTINGS)
    model.train(sentences)
    model.wv.save_word2vec_format(vectors)
    return {"words_per_second": model.words_per_second, "vocab": len(model.wv)}


def run_gensim(corpus: str, threads: int, seed: int, vectors: str) -> dict:
    from gensim.models import Word2Vec

    with open(corpus, encoding="utf-8") as f:
        sentences = [line.split() for line in f]
    s = SETTINGS
    model = Word2Vec(
        vector_size=s["dim"],
        window=s["window"],
        negative=s["negative"],
        min_count=s["min_count"],
        sample=s["sample"],
        sg=1,
        hs=0,
        workers=threads,
        seed=seed,
    )
    model.build_vocab(sentences)
    start = time.perf_counter()
    model.train(sentences, total_examples=len(sentences), epochs=s["epochs"])
    seconds = time.perf_counter() - start
    model.wv.save_word2vec_format(vectors)
    return {"words_per_second": model.corpus_total_words * s["epochs"] / seconds, "vocab": len(model.wv)}


def run_frozen(corpus: str, threads: int, repeats: int = 5) -> dict:
    """Seconds per epoch of the fused step: kernel in place, eager op, frozen graph."""
    import numpy as np

    import tapeflow as tp
    from tapeflow._kernels import sgns_train
    from tapeflow.ops.skipgram import negative_table, word2vec_sgns_train

    sentences = tp.data.text.load_text_file(corpus)
    vocab = tp.data.text.Vocabulary.build(sentences, min_count=SETTINGS["min_count"])
    c = vocab.encode(sentences)
    keep, cum = vocab.keep_probabilities(SETTINGS["sample"]), negative_table(vocab.counts)
    rng = np.random.default_rng(0)
    syn0 = ((rng.random((len(vocab), SETTINGS["dim"])) - 0.5) / SETTINGS["dim"]).astype(np.float32)
    syn1 = np.zeros_like(syn0)
    w, k = SETTINGS["window"], SETTINGS["negative"]
    v0, v1 = tp.Variable(syn0.copy(), name="syn0"), tp.Variable(syn1.copy(), name="syn1")

    def step(ids, offsets, seed):
        new0, new1, counts = word2vec_sgns_train(v0, v1, ids, offsets, keep, cum, 0.025, 0.02, seed, w, k, threads)
        v0.assign(new0)
        v1.assign(new1)
        return counts

    specs = (tp.TensorSpec((None,), "int32"), tp.TensorSpec((None,), "int64"), tp.TensorSpec((), "int64"))
    graph = tp.freeze(step, *specs)
    tables, in_place = [syn0.copy(), syn1.copy()], (syn0.copy(), syn1.copy())

    def direct():
        sgns_train(in_place[0], in_place[1], c.ids, c.offsets, keep, cum, w, k, 0.025, 0.02, 1, threads)

    def eager():
        out = word2vec_sgns_train(tables[0], tables[1], c.ids, c.offsets, keep, cum, 0.025, 0.02, 1, w, k, threads)
        tables[0], tables[1] = out[0].numpy(), out[1].numpy()

    def frozen():
        graph(c.ids, c.offsets, np.int64(1))

    times = {"direct": [], "eager": [], "frozen": []}
    for fn in (direct, eager, frozen):  # warm up
        fn()
    for _ in range(repeats):
        for name, fn in (("direct", direct), ("eager", eager), ("frozen", frozen)):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


WORKERS = {"tapeflow": run_tapeflow, "gensim": run_gensim}


def spawn(kind: str, corpus: str, threads: int, seed: int, vectors: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1")
    args = [sys.executable, __file__, "--worker", kind, "--corpus", corpus, "--threads", str(threads)]
    args += ["--seed", str(seed), "--vectors", vectors]
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ the comparison
def score(vectors: str) -> tuple[float, float]:
    import tapeflow as tp

    kv = tp.word2vec.KeyedVectors.load_word2vec_format(vectors)
    path = tp.word2vec.gensim_data_file
    pairs = tp.word2vec.evaluate_word_pairs(kv, path("wordsim353.tsv"))
    analogies = tp.word2vec.evaluate_analogies(kv, path("questions-words.txt"))
    return pairs["spearman"], analogies["accuracy"]


def compare(corpus: str, thread_counts: list[int], rounds: int, tmp: str) -> dict:
    results = {}
    for threads in thread_counts:
        rows = []
        for r in range(rounds):
            order = ("tapeflow", "gensim") if r % 2 == 0 else ("gensim", "tapeflow")
            row = {}
            for kind in order:
                vectors = os.path.join(tmp, f"{kind}-{threads}-{r}.txt")
                row[kind] = spawn(kind, corpus, threads, r + 1, vectors)
                row[kind]["wordsim353"], row[kind]["analogy"] = score(vectors)
            rows.append(row)
            ratio = row["tapeflow"]["words_per_second"] / row["gensim"]["words_per_second"]
            print(
                f"  {threads} thread(s), round {r + 1}: tapeflow {row['tapeflow']['words_per_second']:,.0f} words/s, "
                f"gensim {row['gensim']['words_per_second']:,.0f} words/s, ratio {ratio:.2f}",
                flush=True,
            )
        results[threads] = rows
    return results


def report(results: dict, frozen: dict | None) -> None:
    med = statistics.median
    print("\nword2vec, skip-gram: " + ", ".join(f"{k} {v}" for k, v in SETTINGS.items()))
    header = (
        f"{'threads':>7s} {'tapeflow w/s':>13s} {'gensim w/s':>11s} {'ratio':>6s} {'target':>6s}"
        f" {'WS353 tf':>9s} {'WS353 gs':>9s} {'analogy tf':>10s} {'analogy gs':>10s}"
    )
    print(header + "\n" + "-" * len(header))
    for threads, rows in results.items():
        ratio = med(r["tapeflow"]["words_per_second"] / r["gensim"]["words_per_second"] for r in rows)

        def m(kind, key, rows=rows):
            return med(r[kind][key] for r in rows)

        print(
            f"{threads:7d} {m('tapeflow', 'words_per_second'):13,.0f} {m('gensim', 'words_per_second'):11,.0f} "
            f"{ratio:5.2f}x {TARGETS.get(threads, 0):5.1f}x {m('tapeflow', 'wordsim353'):9.3f} "
            f"{m('gensim', 'wordsim353'):9.3f} {m('tapeflow', 'analogy'):10.1%} {m('gensim', 'analogy'):10.1%}"
        )
    print("(medians over rounds; the ratio is the median of per-round ratios; targets: WS353 >= gensim - 0.01,")
    print(" analogy >= gensim - 1 point)")
    if frozen:
        print("\nfused step, one epoch, median seconds:")
        for name in ("direct", "eager", "frozen"):
            print(f"  {name:7s} {frozen[name]:.3f} s   ({frozen[name] / frozen['direct']:.2f}x the direct call)")
        print("  (direct: the kernel in place; eager: the op, which returns new tables; frozen: the op in a graph")
        print("   assigning them to Variables; target: frozen within 1.1x of direct)")


def write_corpus(path: str) -> int:
    import tapeflow as tp

    sentences = tp.data.text.load_wikipedia_excerpt()
    with open(path, "w", encoding="utf-8") as f:
        for sentence in sentences:
            f.write(" ".join(sentence) + "\n")
    return sum(map(len, sentences))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="2,1", help="comma-separated thread counts")
    parser.add_argument("--worker", choices=(*WORKERS, "frozen"), help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--vectors", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    thread_counts = [int(t) for t in args.threads.split(",")]
    if args.worker == "frozen":
        print(json.dumps(run_frozen(args.corpus, thread_counts[0])))
        return 0
    if args.worker:
        print(json.dumps(WORKERS[args.worker](args.corpus, thread_counts[0], args.seed, args.vectors)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "wiki.txt")
        words = write_corpus(corpus)
        print(f"corpus: the gensim-shipped Wikipedia excerpt, {words:,} words; {os.cpu_count()} CPUs", flush=True)
        results = compare(corpus, thread_counts, args.rounds, tmp)
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        done = subprocess.run(
            [sys.executable, __file__, "--worker", "frozen", "--corpus", corpus, "--threads", str(thread_counts[0])],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        frozen = json.loads(done.stdout.strip().splitlines()[-1])
    report(results, frozen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
