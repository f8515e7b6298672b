"""The helper team batch-1 dense layers and chains of them run on: the bits of one thread on
any thread count, shared by Python threads, started again in a forked child, and working
when OpenMP is told not to spin."""

from __future__ import annotations

import itertools
import os
import select
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tapeflow import _kernels as K

WIDTHS = (784, 256, 256, 10)


@pytest.fixture
def idle_cores():
    """Threads as asked, whatever else runs on the machine; the thread count restored after."""
    old_busy, old_threads = K.set_cores_busy(False), K.get_num_threads()
    yield
    K.set_cores_busy(old_busy)
    K.set_num_threads(old_threads)


def _layers(seed: int, widths=WIDTHS) -> tuple[K.DenseChain, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    params = []
    for k, n in itertools.pairwise(widths):
        w = rng.standard_normal((k, n)) / np.sqrt(k)
        params += [w.astype(np.float32), rng.standard_normal(n).astype(np.float32)]
    return K.DenseChain([True] * (len(widths) - 2) + [False]), params


def _rows(count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, WIDTHS[0])).astype(np.float32) for _ in range(count)]


def test_any_thread_count_gives_the_bits_of_one_thread(idle_cores):
    chain, params = _layers(1)
    x = _rows(1)[0]
    K.set_num_threads(1)
    alone, layer = chain(x, *params), K.dense(x, params[0], params[1], True)
    for count in (2, 4, 3, 2, 5, 2):  # helpers beyond a call's count sit that call out
        K.set_num_threads(count)
        for _ in range(3):
            assert chain(x, *params).tobytes() == alone.tobytes()
            assert K.dense(x, params[0], params[1], True).tobytes() == layer.tobytes()
    expected = x.astype(np.float64)
    for w, b, relu in zip(params[::2], params[1::2], (True, True, False), strict=True):
        expected = expected @ w + b
        expected = np.maximum(expected, 0) if relu else expected
    np.testing.assert_allclose(alone, expected, rtol=1e-4, atol=1e-4)


def test_python_threads_calling_at_once_share_the_team(idle_cores):
    """Calls from several Python threads at once (one holds the team, the others take
    OpenMP's threads) each give the bits of one thread."""
    chain, params = _layers(2)
    rows = _rows(24, seed=2)
    K.set_num_threads(1)
    expected = [chain(x, *params).tobytes() for x in rows]
    K.set_num_threads(2)

    def run(i: int) -> bool:
        return all(chain(rows[i], *params).tobytes() == expected[i] for _ in range(200))

    with ThreadPoolExecutor(6) as pool:
        assert all(pool.map(run, range(len(rows)), timeout=120))


def test_a_forked_child_starts_helpers_of_its_own(idle_cores):
    """A child forked after the team started has none of its helpers: its calls start new
    ones instead of waiting for threads that do not exist."""
    chain, params = _layers(3)
    x = _rows(1, seed=3)[0]
    K.set_num_threads(2)
    expected = chain(x, *params).tobytes()  # the parent's team is running
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer with the chain's bytes, or nothing
        try:
            os.close(read_end)
            got = b"".join(chain(x, *params).tobytes() for _ in range(20))
            os.write(write_end, got)
        finally:
            os._exit(0)
    os.close(write_end)
    received = b""
    try:
        while len(received) < 20 * len(expected):
            ready, _, _ = select.select([read_end], [], [], 60)
            assert ready, "the forked child's chain did not finish in 60 s"
            part = os.read(read_end, 1 << 16)
            if not part:
                break
            received += part
    finally:
        os.close(read_end)
        if os.waitpid(pid, os.WNOHANG) == (0, 0):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert received == expected * 20


def test_with_openmp_told_not_to_spin_the_team_sleeps_between_calls():
    """With OMP_WAIT_POLICY=passive the helpers do not spin: calls apart in time still give
    the bits of one thread."""
    code = (
        "import time, numpy as np\n"
        "from tapeflow import _kernels as K\n"
        "K.set_cores_busy(False)\n"
        "rng = np.random.default_rng(0)\n"
        "x = rng.standard_normal((1, 784)).astype(np.float32)\n"
        "w = rng.standard_normal((784, 256)).astype(np.float32); b = np.zeros(256, np.float32)\n"
        "K.set_num_threads(1); alone = K.dense(x, w, b, True).tobytes()\n"
        "K.set_num_threads(2)\n"
        "for _ in range(50):\n"
        "    assert K.dense(x, w, b, True).tobytes() == alone\n"
        "    time.sleep(0.002)\n"
        "print('ok')\n"
    )
    env = {**os.environ, "OMP_WAIT_POLICY": "passive"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
