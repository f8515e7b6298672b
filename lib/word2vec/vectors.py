"""KeyedVectors: word vectors looked up by word, with cosine neighbours and the word2vec text format.

>>> import numpy as np
>>> kv = KeyedVectors(["cat", "dog", "car"], np.array([[1.0, 0.1], [0.9, 0.2], [-0.1, 1.0]]))
>>> kv.most_similar("cat", topn=1)[0][0], round(kv.similarity("cat", "dog"), 3)
('dog', 0.993)
>>> kv["zebra"]
Traceback (most recent call last):
    ...
KeyError: "word 'zebra' is not in the vocabulary (3 words)"
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from tapeflow.files.atomic import atomic_file


class KeyedVectors:
    """One vector per word (rows of `vectors`, in the order of `words`)."""

    def __init__(self, words: Sequence[str], vectors):
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[0] != len(words):
            raise ValueError(
                f"KeyedVectors: {len(words)} words need a 2-D array of {len(words)} rows, got {vectors.shape}"
            )
        if vectors.dtype.kind != "f":
            raise TypeError(f"KeyedVectors: vectors must be floating point, got {vectors.dtype}")
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        if len(self.index) != len(self.words):
            raise ValueError("KeyedVectors: words must be distinct")
        self.vectors = vectors
        self._unit = None

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word) -> bool:
        return word in self.index

    def __getitem__(self, word: str) -> np.ndarray:
        return self.vectors[self.id(word)]

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]

    def id(self, word: str) -> int:
        """The row of `word`, or a KeyError naming it."""
        try:
            return self.index[word]
        except KeyError:
            raise KeyError(f"word {word!r} is not in the vocabulary ({len(self)} words)") from None

    @property
    def unit_vectors(self) -> np.ndarray:
        """The vectors scaled to unit length (zero rows stay zero), in float64."""
        if self._unit is None:
            v = self.vectors.astype(np.float64)
            norms = np.linalg.norm(v, axis=1, keepdims=True)
            self._unit = v / np.where(norms > 0, norms, 1.0)
        return self._unit

    def similarity(self, a: str, b: str) -> float:
        """The cosine similarity of two words."""
        unit = self.unit_vectors
        return float(unit[self.id(a)] @ unit[self.id(b)])

    def most_similar(
        self,
        positive: str | Iterable[str] = (),
        negative: Iterable[str] = (),
        topn: int = 10,
        restrict_vocab: int | None = None,
    ) -> list[tuple[str, float]]:
        """The `topn` words nearest by cosine to the sum of the unit vectors of `positive`
        minus those of `negative` (3CosAdd), the query words themselves excluded.

        `restrict_vocab` searches only the first (most frequent) words.
        """
        positive = [positive] if isinstance(positive, str) else list(positive)
        negative = [negative] if isinstance(negative, str) else list(negative)
        if not positive and not negative:
            raise ValueError("most_similar: give at least one word")
        unit = self.unit_vectors
        query = sum(unit[self.id(w)] for w in positive) - sum((unit[self.id(w)] for w in negative), np.zeros(self.dim))
        return self.nearest(query, topn, restrict_vocab, exclude=[self.id(w) for w in positive + negative])

    def nearest(
        self, vector, topn: int = 10, restrict_vocab: int | None = None, exclude: Iterable[int] = ()
    ) -> list[tuple[str, float]]:
        """The `topn` words whose vectors are nearest by cosine to `vector`."""
        vector = np.asarray(vector, dtype=np.float64)
        if vector.shape != (self.dim,):
            raise ValueError(f"nearest: expected a vector of shape ({self.dim},), got {vector.shape}")
        limit = len(self) if restrict_vocab is None else min(len(self), int(restrict_vocab))
        norm = np.linalg.norm(vector)
        scores = self.unit_vectors[:limit] @ (vector / norm if norm > 0 else vector)
        for i in exclude:
            if i < limit:
                scores[i] = -np.inf
        top = min(int(topn), limit)
        best = np.argpartition(-scores, top - 1)[:top] if top > 0 else np.array([], dtype=np.int64)
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(self.words[i], float(scores[i])) for i in best if np.isfinite(scores[i])]

    def save_word2vec_format(self, path) -> None:
        """Write the word2vec text format ("<count> <dim>", then "word v1 v2 ..."), atomically.

        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "v.txt")
        >>> KeyedVectors(["a"], np.array([[0.5, -1.0]])).save_word2vec_format(path)
        >>> open(path).read()
        '1 2\\na 0.5 -1\\n'
        """
        for word in self.words:
            if not word or any(ch.isspace() for ch in word):
                raise ValueError(f"save_word2vec_format: word {word!r} is empty or holds whitespace")
        with atomic_file(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
            f.write(f"{len(self)} {self.dim}\n")
            for word, row in zip(self.words, self.vectors, strict=True):
                f.write(word + " " + " ".join(f"{x:.6g}" for x in row) + "\n")

    @classmethod
    def load_word2vec_format(cls, path) -> KeyedVectors:
        """Read the word2vec text format (as written by `save_word2vec_format` or word2vec -binary 0)."""
        with open(path, encoding="utf-8") as f:
            header = f.readline().split()
            if len(header) != 2 or not all(h.isdigit() for h in header):
                raise ValueError(f"load_word2vec_format: {path} does not start with '<count> <dim>'")
            count, dim = int(header[0]), int(header[1])
            words, rows = [], []
            for number, line in enumerate(f, start=2):
                parts = line.rstrip("\n").split(" ")
                if len(parts) != dim + 1:
                    raise ValueError(
                        f"load_word2vec_format: {path} line {number} has {len(parts) - 1} values, expected {dim}"
                    )
                words.append(parts[0])
                rows.append(np.array(parts[1:], dtype=np.float32))
        if len(words) != count:
            raise ValueError(f"load_word2vec_format: {path} announces {count} words but holds {len(words)}")
        return cls(words, np.array(rows, dtype=np.float32).reshape(count, dim))

    def __repr__(self) -> str:
        return f"KeyedVectors({len(self)} words, dim {self.dim})"
