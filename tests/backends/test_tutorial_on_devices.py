"""The MNIST tutorial with `--device`: on every accelerator this process has, and on gpu:0,
which is the GPU backend with NumPy standing in for CuPy where no GPU exists. A short run
(one epoch of the MLP over 1,000 images) that trains, saves and reloads the weights, and
serves the frozen graph."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tutorials" / "mnist" / "train.py"
FASHION = os.environ.get("TAPEFLOW_DATA", "/usr/share/datasets/fashion-mnist")

pytestmark = pytest.mark.skipif(not os.path.isdir(FASHION), reason="needs Fashion-MNIST (dataset-fashion-mnist)")


def test_the_mnist_tutorial_runs_on_a_device(accelerator, tmp_path, capsys, monkeypatch):
    device = accelerator
    spec = importlib.util.spec_from_file_location("mnist_tutorial", SCRIPT)
    tutorial = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, tutorial)  # its dataclasses look their module up
    spec.loader.exec_module(tutorial)
    argv = ["--models", "mlp", "--epochs-mlp", "1", "--train-size", "1000", "--out", str(tmp_path)]
    assert tutorial.main([*argv, "--device", device]) == 0
    out = capsys.readouterr().out
    assert f"device: {device}" in out
    assert "reloaded into a fresh model: same predictions" in out
    assert "agrees with the model on 100.00%" in out
    row = next(line for line in out.splitlines() if line.startswith("MLP 784-256-256-10"))
    accuracy = float(row.split()[4].rstrip("%")) / 100
    assert 0.4 < accuracy <= 1.0  # one epoch over 1,000 images: well above chance (0.1)
