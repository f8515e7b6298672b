"""Shared test settings: deterministic seeds, a float64 random helper, and the accelerators
the device tests run on. Keras, the oracle of the Keras-layer tests, runs on its torch
backend."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from strict_arrays import stand_in_gpu  # noqa: E402

import tapeflow as tp  # noqa: E402

ACCELERATORS = ["gpu:0", *(str(d) for d in tp.list_devices() if d.family == "xla")]

# Kernels choose their threads by the size of their work alone here, however busy the machine
# running the tests is, so that every run takes the same code paths (tests/kernels/test_busy_cores.py
# checks the busy machine's choice).
tp._kernels.set_cores_busy(False)


@pytest.fixture(autouse=True)
def _seeded():
    tp.random.seed(0)
    yield


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """The kernels' thread count for one test, one and two threads."""
    before = tp.get_num_threads()
    tp.set_num_threads(request.param)
    yield request.param
    tp.set_num_threads(before)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(params=ACCELERATORS)
def accelerator(request, monkeypatch):
    """Each accelerator's name: gpu:0 (a real GPU, or where there is none the stand-in that
    holds StrictArrays) and every XLA device."""
    return stand_in_gpu(monkeypatch) if request.param == "gpu:0" else request.param
