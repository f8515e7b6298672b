"""The `tapeflow` command on graph files saved here: inspect, run, and its errors."""

import os
import subprocess
import sys

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def mlp_file(tmp_path):
    """A saved MLP graph and the eager model it came from."""
    model = tp.Sequential([tp.layers.Dense(6, activation="relu"), tp.layers.Dense(3)])
    model(np.zeros((1, 4), np.float32))
    path = tmp_path / "mlp.tfg"
    tp.freeze(lambda x: model(x, training=False), tp.TensorSpec((None, 4))).save(path)
    return path, model


def test_inspect_prints_signatures_counts_and_text(mlp_file, capsys):
    path, model = mlp_file
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    graph = tp.load_graph(path)
    assert "inputs:  x: float32[?,4]" in out
    assert f"outputs: {graph.outputs[0].name}: float32[?,3]" in out
    assert f"nodes:   {len(graph.nodes)}" in out
    for op, count in graph.op_counts().items():
        assert any(line.split() == [op, str(count)] for line in out.splitlines()), op
    n_params = sum(w.numpy().size for w in model.weights)
    assert f"parameters: {n_params} in 4 state tensors" in out
    assert str(graph) in out


def test_run_writes_the_models_output(mlp_file, tmp_path, rng):
    path, model = mlp_file
    x = rng.standard_normal((5, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(path), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]) == 0
    y = np.load(tmp_path / "y.npy", allow_pickle=False)
    np.testing.assert_allclose(y, model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_run_several_inputs_and_outputs(tmp_path, rng):
    graph = tp.freeze(lambda a, b: (a + b, a * b, tp.sum(a)), tp.TensorSpec((2, 3)), tp.TensorSpec((2, 3)))
    graph.save(tmp_path / "two.tfg")
    a, b = rng.standard_normal((2, 2, 3)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    args = ["run", str(tmp_path / "two.tfg"), "--input", str(tmp_path / "a.npy"), "--input", str(tmp_path / "b.npy")]
    assert main([*args, "--output", str(tmp_path / "y.npy")]) == 0
    for i, want in enumerate((a + b, a * b, a.sum())):
        np.testing.assert_allclose(np.load(tmp_path / f"y_{i}.npy"), want, rtol=1e-6)


def test_errors_exit_nonzero_with_a_message(mlp_file, tmp_path, capsys):
    path, _ = mlp_file
    (tmp_path / "junk.tfg").write_text("not a graph")
    np.save(tmp_path / "wrong.npy", np.zeros((2, 5), np.float32))
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    cases = [
        (["inspect", str(tmp_path / "junk.tfg")], "not an HDF5 file"),
        (["inspect", str(tmp_path / "missing.tfg")], "no such file"),
        (["run", str(path)], "takes 1 inputs"),
        (["run", str(path), "--input", str(tmp_path / "wrong.npy")], "expects shape float32[?,4]"),
        (["run", str(path), "--input", str(tmp_path / "objects.npy")], "not a plain .npy array"),
        (["run", str(path), "--input", str(tmp_path / "absent.npy")], "absent.npy"),
    ]
    for argv, message in cases:
        assert main(argv) == 1, argv
        err = capsys.readouterr().err
        assert f"tapeflow {argv[0]}: error:" in err and message in err, (argv, err)
    with pytest.raises(SystemExit) as usage:
        main(["frobnicate"])
    assert usage.value.code == 2


def test_module_entry_point_in_a_subprocess(mlp_file, tmp_path, rng):
    path, model = mlp_file
    x = rng.standard_normal((3, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    python = os.path.join(ROOT, ".venv", "bin", "python")
    python = python if os.path.exists(python) else sys.executable
    done = subprocess.run(
        [python, "-m", "tapeflow.cli", "run", str(path), "--input", "x.npy", "--output", "y.npy"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), model(x).numpy(), rtol=1e-5, atol=1e-6)
    failed = subprocess.run(
        [python, "-m", "tapeflow.cli", "inspect", "nothing.tfg"], cwd=tmp_path, capture_output=True, text=True
    )
    assert failed.returncode == 1 and "no such file" in failed.stderr


@pytest.mark.timeout(120)
def test_run_refuses_a_fifo_as_input_or_output_instead_of_blocking(mlp_file, tmp_path):
    path, _ = mlp_file
    os.mkfifo(tmp_path / "pipe")
    np.save(tmp_path / "x.npy", np.zeros((2, 4), np.float32))
    python = os.path.join(ROOT, ".venv", "bin", "python")
    python = python if os.path.exists(python) else sys.executable
    for flags, what in ((["--input", "pipe"], "--input"), (["--input", "x.npy", "--output", "pipe"], "--output")):
        done = subprocess.run(
            [python, "-m", "tapeflow.cli", "run", str(path), *flags],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1, done.stderr
        assert f"tapeflow run: error: {what}: 'pipe' is not a regular file" in done.stderr, done.stderr
