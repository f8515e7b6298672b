"""OpenBLAS keeps the thread count SciPy, NumPy and the user gave it: tapeflow never sets it
(its gemms call a private single-threaded copy of OpenBLAS where one loads, and otherwise
read the shared count at each call)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import _kernels as K

threadpoolctl = pytest.importorskip("threadpoolctl")

pytestmark = pytest.mark.skipif(K._gemm._blas_num_threads() is None, reason="OpenBLAS threads cannot be controlled")


def _scipy_blas_threads() -> int:
    """The thread count of the OpenBLAS that scipy.linalg (and tapeflow's gemms) call."""
    return K._gemm._blas_num_threads()


def _some_kernel_calls():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 200))
    K.matmul(a, a.T)  # a 2-D product split over the OpenMP threads
    K.matmul(a[:1], a.T)  # one row
    K.matmul(np.stack([a, a]), np.stack([a.T, a.T]))  # batched
    K.dense(a, a.T, np.ones(300), True)
    x, w = rng.standard_normal((2, 9, 9, 3)), rng.standard_normal((3, 3, 3, 4))
    y = K.conv2d_forward(x, w, 1, 1, 1, 1, 1, 1, 9, 9)
    K.conv2d_backward_input(y, w, 9, 9, 1, 1, 1, 1, 1, 1)
    K.conv2d_backward_filter(x, y, 3, 3, 1, 1, 1, 1, 1, 1)
    tp.matmul(tp.ones((64, 64)), tp.ones((64, 64)))


@pytest.mark.parametrize("user_threads", [1, 2, 3])
def test_kernels_give_back_the_thread_count_they_found(user_threads):
    with threadpoolctl.threadpool_limits(limits=user_threads, user_api="blas"):
        assert _scipy_blas_threads() == user_threads
        _some_kernel_calls()
        assert _scipy_blas_threads() == user_threads
        assert K._gemm._blas_calls_running() == 0


def test_concurrent_and_failing_calls_restore_the_thread_count():
    """Overlapping calls from several Python threads (each releases the GIL inside) and a call
    that raises all end with OpenBLAS as it was."""
    with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: _some_kernel_calls(), range(8)))
        with pytest.raises(ValueError):
            K.matmul(np.ones((2, 3)), np.ones((2, 3)))
        assert _scipy_blas_threads() == 3
        assert K._gemm._blas_calls_running() == K._conv._blas_calls_running() == 0


def test_scipy_keeps_its_threads_after_importing_and_using_tapeflow():
    """scipy.linalg.solve on 3000x3000 lost its second core once tapeflow was imported: the
    import and the kernel calls now leave every BLAS library's thread count as it was."""
    code = textwrap.dedent(
        """
        import numpy as np, scipy.linalg, threadpoolctl
        threadpoolctl.threadpool_limits(limits=2, user_api="blas")
        def counts():
            return {i["filepath"]: i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"}
        before = counts()
        import tapeflow as tp
        after_import = counts()
        tp.nn.conv2d(tp.ones((1, 8, 8, 2)), tp.ones((3, 3, 2, 2)), 1, "SAME")
        tp.matmul(tp.ones((200, 200)), tp.ones((200, 200)))
        scipy.linalg.solve(np.eye(50) * 2.0, np.ones(50))
        print(before == after_import == counts(), before)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    same, counts = out.stdout.split(" ", 1)
    assert same == "True", out.stdout
    assert "2" in counts  # the limit took effect: there was something to keep
