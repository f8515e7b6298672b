"""The distributed tutorial runs end to end on a few hundred Fashion-MNIST images: one
process, replicas with a worker killed, a backup under a straggler and async replicas,
then the table and the plot."""

import os
import subprocess
import sys

import pytest

from tapeflow import _compat

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "tutorials", "distributed", "train.py")
FASHION = os.environ.get("TAPEFLOW_DATA", "/usr/share/datasets/fashion-mnist")

pytestmark = [
    pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]"),
    pytest.mark.skipif(not os.path.isdir(FASHION), reason="needs Fashion-MNIST (Debian's dataset-fashion-mnist)"),
    pytest.mark.timeout(240),
]


def test_the_distributed_tutorial_runs_end_to_end(tmp_path):
    command = [sys.executable, SCRIPT, "--train-rows", "400", "--test-rows", "100", "--epochs", "2"]
    done = subprocess.run([*command, "--out", str(tmp_path)], capture_output=True, text=True, timeout=220)
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout.split("\nrun ")[1].splitlines()[1:5]
    names = ["1 process", "2 replicas, a worker killed", "2 + 1 backup, 3x straggler", "2 async replicas"]
    for line, name in zip(table, names, strict=True):
        assert line.startswith(name)
        steps_per_second, accuracy = map(float, line[len(name) :].split())
        assert steps_per_second > 0 and 0.0 <= accuracy <= 1.0
    assert "killed tcp://127.0.0.1" in done.stdout
    assert (tmp_path / "distributed_curves.png").stat().st_size > 10_000
