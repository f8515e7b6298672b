"""Shared test settings: deterministic seeds and a float64 random helper."""

import numpy as np
import pytest

import tapeflow as tp


@pytest.fixture(autouse=True)
def _seeded():
    tp.random.seed(0)
    yield


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
