"""bench/convnets.py's networks: the Keras-style definition builds in tapeflow with the parameter
count of the PyTorch definition, at image sizes small enough for a quick test."""

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import tapeflow as tp

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _convnets():
    """bench/convnets.py as a module, leaving the environment (its thread settings) and the
    import path (bench/ holds a `distributed.py`) as they were."""
    environment, path = dict(os.environ), list(sys.path)
    spec = importlib.util.spec_from_file_location("bench_convnets", BENCH / "convnets.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        os.environ.clear()
        os.environ.update(environment)
        sys.path[:] = path
    return module


convnets = _convnets()

# name: the smallest convenient image side, and the parameters at the paper's size (224, 231 for Overfeat)
SIZES = {"alexnet": 64, "overfeat": 71, "vgg": 32, "googlenet": 32}
FULL_SIZE_PARAMETERS = {"alexnet": 61_100_840, "overfeat": 145_920_872, "vgg": 132_863_336, "googlenet": 6_998_552}


def _torch_parameters(name, image=None):
    torch = pytest.importorskip("torch")
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        return sum(p.numel() for p in convnets.torch_model(name, image).parameters())


@pytest.mark.parametrize("name", list(SIZES))
def test_tapeflow_and_pytorch_definitions_have_the_same_parameters(name):
    model = convnets.keras_model(tp, name, SIZES[name])
    assert model.count_params() == _torch_parameters(name, SIZES[name])
    out = model(np.zeros((1, SIZES[name], SIZES[name], 3), np.float32))
    assert tuple(out.shape) == (1, convnets.CLASSES)


@pytest.mark.parametrize("name", list(SIZES))
def test_pytorch_definitions_at_full_size_have_the_known_counts(name):
    assert _torch_parameters(name) == FULL_SIZE_PARAMETERS[name]


def test_final_feature_map_sizes_at_full_size():
    assert [convnets.final_size(name, convnets.MODELS[name][0]) for name in SIZES] == [6, 6, 7, 1]


def test_an_unknown_model_is_refused():
    with pytest.raises(ValueError, match="unknown model"):
        convnets.keras_model(tp, "resnet", 32)
