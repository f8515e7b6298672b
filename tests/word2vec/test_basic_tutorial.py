"""tutorials/word2vec/basic.py, the Keras-style model trained by fit, on a small corpus file."""

import subprocess
import sys
from pathlib import Path

import pytest
from test_fast_tutorial import small_corpus

from tapeflow.word2vec import KeyedVectors

SCRIPT = Path(__file__).resolve().parents[2] / "tutorials" / "word2vec" / "basic.py"
gensim_models = pytest.importorskip("gensim.models")


@pytest.mark.slow
def test_basic_tutorial_trains_with_fit_and_reports_speed(tmp_path):
    corpus, vectors = tmp_path / "corpus.txt", tmp_path / "vectors.txt"
    small_corpus(corpus)
    flags = "--epochs 4 --dim 16 --window 3 --negative 4 --min-count 2 --seed 5 --sample 0 --batch-size 256"
    command = [sys.executable, str(SCRIPT), "--corpus", str(corpus), *flags.split()]
    done = subprocess.run(
        [*command, "--save-vectors", str(vectors), "--out", str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-1].startswith("words/s: ") and float(lines[-1].split()[1]) > 0
    assert "nearest neighbours" in done.stdout
    losses = [float(x) for x in next(line for line in lines if line.startswith("loss")).split(":")[1].split(",")]
    assert losses[-1] < losses[0]
    theirs = gensim_models.KeyedVectors.load_word2vec_format(str(vectors), binary=False)
    ours = KeyedVectors.load_word2vec_format(vectors)
    assert len(theirs) == len(ours) == 10 and theirs.vector_size == 16
    assert ours.similarity("king", "queen") > ours.similarity("king", "fish")
    assert (tmp_path / "word2vec_basic_pca.png").stat().st_size > 10_000


def test_basic_tutorial_rejects_a_zero_window():
    done = subprocess.run([sys.executable, str(SCRIPT), "--window", "0"], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "--window must be >= 1" in done.stderr
