"""Sequential: growing a model layer by layer."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.layers.base import Layer


def test_add_calls_and_builds_each_layer_once(monkeypatch):
    calls, builds = collections.Counter(), collections.Counter()
    layer_call, dense_build = Layer.__call__, tp.layers.Dense.build

    def counting_call(self, *args, **kwargs):
        calls[id(self)] += 1
        return layer_call(self, *args, **kwargs)

    def counting_build(self, input_shape):
        builds[id(self)] += 1
        return dense_build(self, input_shape)

    monkeypatch.setattr(Layer, "__call__", counting_call)
    monkeypatch.setattr(tp.layers.Dense, "build", counting_build)
    model = tp.Sequential([tp.Input((1,))])
    layers = [tp.layers.Dense(1, kernel_initializer="ones") for _ in range(3000)]
    for layer in layers:
        model.add(layer)
    assert all(calls[id(layer)] == 1 and builds[id(layer)] == 1 for layer in layers)
    assert sum(calls.values()) == 3000 and sum(builds.values()) == 3000
    assert model.output_shape == (None, 1)
    np.testing.assert_allclose(model.predict(np.ones((2, 1), np.float32), verbose=0), np.ones((2, 1)))


def test_add_after_pop_and_after_a_direct_edit_still_builds_the_whole_stack():
    model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(4), tp.layers.Dense(5)])
    model.pop()
    model.add(tp.layers.Dense(2))
    assert model.output_shape == (None, 2) and [x.shape for x in model.get_weights()][-1] == (2,)
    model.layers.insert(0, tp.layers.Dense(3))  # an edit add does not know about
    model.add(tp.layers.Dense(6))
    assert model.output_shape == (None, 6) and model.layers[0].built


def test_a_one_element_list_is_the_input_and_a_dict_is_refused_as_in_keras():
    x = np.random.default_rng(0).standard_normal((20, 4)).astype(np.float32)
    for model in (tp.Sequential([tp.Input((4,)), tp.layers.Dense(3)]), tp.Sequential([tp.layers.Dense(3)])):
        with pytest.warns(UserWarning, match="takes one input, got a list of one"):
            got = model.predict([x], verbose=0)
        np.testing.assert_allclose(got, model.predict(x, verbose=0), rtol=1e-6)
        assert got.shape == (20, 3)
        with pytest.raises(ValueError, match=r"takes a single tensor input .* dict with keys \['a'\]"):
            model.predict({"a": x}, verbose=0)
        model.compile("sgd", "mse")
        with pytest.warns(UserWarning):
            model.fit([x], x[:, :3], verbose=0)
        with pytest.raises(ValueError, match="dict with keys"):
            model.fit({"a": x}, x[:, :3], verbose=0)
