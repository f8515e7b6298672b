"""tutorials/transformer/text_classification.py end to end: it trains (the loss falls and the
validation accuracy beats chance), and the frozen graph it saves serves the model's
predictions from the `.tfg` and through ONNX."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tutorials" / "transformer" / "text_classification.py"


@pytest.mark.slow
def test_the_transformer_tutorial_learns_and_serves(tmp_path):
    pytest.importorskip("onnxruntime")
    command = [sys.executable, str(SCRIPT), "--epochs", "8", "--seed", "1", "--onnx", "--out", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    losses = [float(v) for v in next(li for li in lines if li.startswith("loss per epoch")).split(":")[1].split(",")]
    assert losses[-1] < losses[0]
    accuracy = float(next(li for li in lines if li.startswith("validation accuracy")).split()[2])
    assert accuracy > 0.7
    assert "predictions match the model" in done.stdout and "onnxruntime predicts the same" in done.stdout
    assert (tmp_path / "transformer.tfg").stat().st_size > 0


def test_reviews_from_a_file_must_be_labelled(tmp_path):
    bad = tmp_path / "reviews.tsv"
    bad.write_text("positive\tgreat film\n")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--texts", str(bad)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0 and "expected '<0 or 1><TAB><text>'" in done.stderr
