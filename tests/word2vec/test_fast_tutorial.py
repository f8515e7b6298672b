"""tutorials/word2vec/fast.py with the command line the issue fixes, on a small corpus file."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tapeflow.word2vec import KeyedVectors

SCRIPT = Path(__file__).resolve().parents[2] / "tutorials" / "word2vec" / "fast.py"
gensim_models = pytest.importorskip("gensim.models")


def small_corpus(path: Path) -> None:
    rng = np.random.default_rng(0)
    topics = [["king", "queen", "royal", "crown", "throne"], ["river", "water", "lake", "boat", "fish"]]
    lines = [" ".join(rng.choice(topics[i % 2], size=12)) for i in range(300)]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_fast_tutorial_trains_saves_and_reports_speed(tmp_path):
    corpus, vectors = tmp_path / "corpus.txt", tmp_path / "vectors.txt"
    small_corpus(corpus)
    flags = "--epochs 3 --threads 2 --dim 16 --window 3 --negative 4 --min-count 2 --seed 5 --sample 0"
    command = [sys.executable, str(SCRIPT), "--corpus", str(corpus), *flags.split()]
    done = subprocess.run(
        [*command, "--save-vectors", str(vectors), "--out", str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-1].startswith("words/s: ") and float(lines[-1].split()[1]) > 0
    assert "nearest neighbours" in done.stdout
    assert len(done.stderr.strip().splitlines()) >= 3  # one progress line per epoch
    theirs = gensim_models.KeyedVectors.load_word2vec_format(str(vectors), binary=False)
    ours = KeyedVectors.load_word2vec_format(vectors)
    assert len(theirs) == len(ours) == 10 and theirs.vector_size == 16
    assert ours.similarity("king", "queen") > ours.similarity("king", "fish")
    assert (tmp_path / "word2vec_pca.png").stat().st_size > 10_000
