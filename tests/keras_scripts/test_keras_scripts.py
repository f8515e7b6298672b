"""Public Keras 3 examples and guides, rewritten small with synthetic data, run end to end on
tapeflow (`import tapeflow as keras`) and, as the reference, on Keras itself (`import keras`,
torch backend).

Each script prints a last line `KERAS_SCRIPT_RESULT {"losses": [...]}` with its loss per
epoch: the run passes when the script exits with 0, every loss is finite and, where it
trained for more than one epoch, the last loss is below the first. A script that does not
run on tapeflow yet is an expected failure (strict) with the missing feature as the reason.
"""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SCRIPTS = sorted(path.stem for path in (HERE / "scripts").glob("*.py"))
TIMEOUT_S = 240
RESULT_TAG = "KERAS_SCRIPT_RESULT"

# Scripts that fail on tapeflow today, with what they are missing.
EXPECTED_FAILURES: dict[str, str] = {}


def as_keras(source: str) -> str:
    """The same script with Keras in tapeflow's place."""
    source = re.sub(r"^import tapeflow as keras$", "import keras", source, flags=re.MULTILINE)
    return re.sub(r"^from tapeflow import ", "from keras import ", source, flags=re.MULTILINE)


class ScriptServer:
    """A process that has imported `library` once and runs each script in a forked child."""

    def __init__(self, library: str):
        env = dict(os.environ, KERAS_BACKEND="torch")
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "script_server.py"), library],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        ready = self.process.stdout.readline().strip()
        if ready != "ready":
            raise RuntimeError(f"the {library} script server did not start (it said {ready!r})")

    def run(self, script: Path, folder: Path) -> int:
        self.process.stdin.write(f"{script}\t{folder}\t{TIMEOUT_S}\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the script server stopped while running {script.name}")
        return int(answer)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def servers():
    started = {}

    def server_for(library: str) -> ScriptServer:
        if library not in started:
            started[library] = ScriptServer(library)
        return started[library]

    yield server_for
    for server in started.values():
        server.close()


def run_script(name: str, library: str, server_for, folder: Path) -> tuple[int, str]:
    source = (HERE / "scripts" / f"{name}.py").read_text()
    script = folder / f"{name}.py"
    script.write_text(as_keras(source) if library == "keras" else source)
    status = server_for(library).run(script, folder)
    return status, (folder / "output.txt").read_text()


def losses_of(output: str) -> list[float]:
    lines = [line for line in output.splitlines() if line.startswith(RESULT_TAG + " ")]
    assert lines, f"the script printed no {RESULT_TAG} line"
    return json.loads(lines[-1][len(RESULT_TAG) + 1 :])["losses"]


def cases():
    for name in SCRIPTS:
        reason = EXPECTED_FAILURES.get(name)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        yield pytest.param(name, "tapeflow", marks=marks, id=f"{name}-tapeflow")
        yield pytest.param(name, "keras", id=f"{name}-keras-reference")


@pytest.mark.parametrize(("name", "library"), list(cases()))
def test_script_runs_and_learns(name, library, servers, tmp_path):
    status, output = run_script(name, library, servers, tmp_path)
    assert status == 0, f"{name} on {library} exited with {status}:\n{output[-4000:]}"
    losses = losses_of(output)
    assert losses and all(math.isfinite(v) for v in losses), losses
    if len(losses) > 1:
        assert losses[-1] < losses[0], f"{name} on {library}: the loss did not fall: {losses}"


def test_suite_is_complete_and_consistent():
    assert len(SCRIPTS) >= 30
    assert set(EXPECTED_FAILURES) <= set(SCRIPTS), set(EXPECTED_FAILURES) - set(SCRIPTS)
    for name in SCRIPTS:
        source = (HERE / "scripts" / f"{name}.py").read_text()
        assert source.startswith("# Exercises keras.io "), f"{name}: no header naming its example"
        assert re.search(r"^import tapeflow as keras$", source, flags=re.MULTILINE), name
        assert "tapeflow" not in as_keras(source).replace('"tapeflow"', ""), f"{name}: a tapeflow import is left"
        assert RESULT_TAG in source, name


def test_as_keras_rewrites_only_the_imports():
    source = "import tapeflow as keras\nfrom tapeflow import layers, ops\nx = 'import tapeflow as keras'\n"
    assert as_keras(source) == "import keras\nfrom keras import layers, ops\nx = 'import tapeflow as keras'\n"
