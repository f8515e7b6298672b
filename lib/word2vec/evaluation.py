"""Intrinsic evaluation of word vectors: word-pair similarity and analogies, as gensim reports them.

The test sets are those the gensim wheel ships (`wordsim353.tsv`, `simlex999.txt`,
`questions-words.txt`); `gensim_data_file(name)` finds them. Words are compared
case-insensitively and only among the `restrict_vocab` most frequent words (300,000,
gensim's default). Pairs or questions with a word outside that vocabulary are skipped and
reported as `oov_ratio`, in percent, the way gensim logs them.

>>> import numpy as np, os, tempfile
>>> from tapeflow.word2vec import KeyedVectors
>>> kv = KeyedVectors(["a", "b", "c"], np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]]))
>>> path = os.path.join(tempfile.mkdtemp(), "pairs.tsv")
>>> _ = open(path, "w").write("# w1\\tw2\\tscore\\na\\tb\\t9\\na\\tc\\t1\\nb\\tc\\t5\\na\\tzz\\t3\\n")
>>> r = evaluate_word_pairs(kv, path)
>>> round(r["spearman"], 3), r["pairs"], r["oov_ratio"]
(1.0, 3, 25.0)
"""

from __future__ import annotations

import numpy as np

from tapeflow import _compat
from tapeflow.word2vec.vectors import KeyedVectors

RESTRICT_VOCAB = 300_000


def gensim_data_file(name: str):
    """The path of one of gensim's shipped test files, e.g. "wordsim353.tsv"."""
    return _compat.gensim_test_data() / name


def _lookup(kv: KeyedVectors, restrict_vocab: int) -> dict[str, int]:
    """Lowercased word -> row, over the first `restrict_vocab` words (the first spelling wins)."""
    table: dict[str, int] = {}
    for i, word in enumerate(kv.words[:restrict_vocab]):
        table.setdefault(word.lower(), i)
    return table


def evaluate_word_pairs(kv: KeyedVectors, path, restrict_vocab: int = RESTRICT_VOCAB) -> dict:
    """Pearson and Spearman correlation of cosine similarity with human scores.

    Reads lines "word1<TAB>word2<TAB>score" ('#' starts a comment line). Returns a dict
    with pearson, spearman, pairs (scored) and oov_ratio (percent of pairs skipped).
    """
    table = _lookup(kv, restrict_vocab)
    unit = kv.unit_vectors
    model, human, oov = [], [], 0
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if line.startswith("#") or not line.strip():
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3:
                raise ValueError(f"evaluate_word_pairs: {path} line {number} is not 'word1<TAB>word2<TAB>score'")
            a, b = table.get(parts[0].lower()), table.get(parts[1].lower())
            if a is None or b is None:
                oov += 1
                continue
            model.append(float(unit[a] @ unit[b]))
            human.append(float(parts[2]))
    total = len(model) + oov
    if len(model) < 2:
        raise ValueError(f"evaluate_word_pairs: fewer than 2 of the {total} pairs in {path} are in the vocabulary")
    return {
        "pearson": _pearson(human, model),
        "spearman": _pearson(_ranks(human), _ranks(model)),
        "pairs": len(model),
        "oov_ratio": 100.0 * oov / total,
    }


def _pearson(a, b) -> float:
    return float(np.corrcoef(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))[0, 1])


def _ranks(values) -> np.ndarray:
    """Ranks from 0, ties sharing their average rank (Spearman's correlation is Pearson's on these)."""
    _, inverse, counts = np.unique(np.asarray(values), return_inverse=True, return_counts=True)
    first = np.cumsum(counts) - counts
    return (first + (counts - 1) / 2.0)[inverse]


def evaluate_analogies(kv: KeyedVectors, path, restrict_vocab: int = RESTRICT_VOCAB, batch: int = 1024) -> dict:
    """Accuracy on "a b c d" questions (a is to b as c is to d) by 3CosAdd.

    The answer is the word nearest to b - a + c (unit vectors) among the first
    `restrict_vocab` words, a, b and c excluded. Lines starting with ':' open a section.
    Returns accuracy (fraction of questions answered), correct, total (questions with all
    four words known), oov_ratio (percent skipped) and per-section accuracies.
    """
    table = _lookup(kv, restrict_vocab)
    questions, sections, names, oov = [], [], [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith(":"):
                names.append(line[1:].strip())
                continue
            words = line.lower().split()
            if len(words) != 4:
                continue
            ids = [table.get(w) for w in words]
            if any(i is None for i in ids):
                oov += 1
                continue
            questions.append(ids)
            sections.append(len(names) - 1)
    total = len(questions)
    if total == 0:
        return {"accuracy": 0.0, "correct": 0, "total": 0, "oov_ratio": 100.0 if oov else 0.0, "sections": {}}
    q = np.array(questions, dtype=np.int64)
    unit = kv.unit_vectors[: max(table.values()) + 1]
    hits = np.zeros(total, dtype=bool)
    for start in range(0, total, batch):
        part = q[start : start + batch]
        scores = (unit[part[:, 1]] - unit[part[:, 0]] + unit[part[:, 2]]) @ unit.T
        rows = np.arange(part.shape[0])
        for k in range(3):
            scores[rows, part[:, k]] = -np.inf
        hits[start : start + batch] = scores.argmax(axis=1) == part[:, 3]
    section_ids = np.array(sections)
    per_section = {names[s]: float(hits[section_ids == s].mean()) for s in sorted(set(sections)) if s >= 0}
    return {
        "accuracy": float(hits.mean()),
        "correct": int(hits.sum()),
        "total": total,
        "oov_ratio": 100.0 * oov / (total + oov),
        "sections": per_section,
    }
