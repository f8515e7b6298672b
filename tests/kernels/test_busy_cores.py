"""Kernels keep small work on the calling thread while every core of the machine is busy."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from tapeflow import _kernels as K


@pytest.fixture
def two_threads():
    old = K.get_num_threads()
    K.set_num_threads(2)
    yield
    K.set_num_threads(old)


@pytest.fixture
def reading_the_machine():
    old = K.set_cores_busy(None)
    yield
    K.set_cores_busy(old)


def test_small_work_stays_on_one_thread_while_the_cores_are_busy(two_threads):
    gemm = K._modules["gemm"]
    old = K.set_cores_busy(False)
    try:
        assert gemm._threads_for_work(1 << 20, 1 << 16) == 2
        assert gemm._threads_for_work(1 << 10, 1 << 16) == 1
        K.set_cores_busy(True)
        assert gemm._threads_for_work(1 << 20, 1 << 16) == 1
        assert gemm._threads_for_work(1 << 26, 1 << 16) == 2  # large work still splits
        assert all(module._cores_busy() for module in K._modules.values())
    finally:
        K.set_cores_busy(old)


@pytest.mark.parametrize("busy", [False, True])
def test_results_do_not_depend_on_how_busy_the_machine_is(two_threads, busy):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 400)).astype(np.float32)
    b = rng.standard_normal((400, 500)).astype(np.float32)
    x = rng.standard_normal((4, 16, 16, 8)).astype(np.float32)
    w = rng.standard_normal((3, 3, 8, 16)).astype(np.float32)
    old = K.set_cores_busy(busy)
    try:
        product = K.matmul(a, b)
        row = K.dense(a[:1], b, np.zeros(500, np.float32), True)
        conv = K.conv2d_forward(x, w, 1, 1, 1, 1, 1, 1, 16, 16)
    finally:
        K.set_cores_busy(old)
    np.testing.assert_allclose(product, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(row, np.maximum(a[:1].astype(np.float64) @ b, 0), rtol=1e-4, atol=1e-3)
    reference = K.conv2d_forward(x.astype(np.float64), w.astype(np.float64), 1, 1, 1, 1, 1, 1, 16, 16)
    np.testing.assert_allclose(conv, reference, rtol=1e-4, atol=1e-4)


def test_a_machine_full_of_busy_processes_reads_as_busy(reading_the_machine):
    spinners = [
        subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 30\nwhile time.time() < end: pass"])
        for _ in range(2 * (os.cpu_count() or 1) + 1)
    ]
    try:
        deadline = time.monotonic() + 20
        seen = False
        while time.monotonic() < deadline and not seen:
            seen = K.cores_busy()
            time.sleep(0.06)
        assert seen, "every core ran a busy process, but the kernels never read the machine as busy"
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait(timeout=10)
