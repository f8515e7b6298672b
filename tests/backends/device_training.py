"""Small models and a `fit` on a device, shared by the tests that train on accelerators
(tests/backends/test_xla_backend.py, tests/backends/test_cupy_backend.py)."""

from __future__ import annotations

import numpy as np

import tapeflow as tp


def random_data(shape, classes, n=48, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, *shape)).astype(np.float32), rng.integers(0, classes, n)


def mlp_layers():
    return [tp.Input((8,)), tp.layers.Dense(16, activation="relu"), tp.layers.Dense(3)]


def cnn_layers():
    return [
        tp.Input((8, 8, 1)),
        tp.layers.Conv2D(4, 3, padding="same", activation="relu"),
        tp.layers.MaxPooling2D(2),
        tp.layers.Conv2D(4, 3, activation="relu"),
        tp.layers.Flatten(),
        tp.layers.Dense(3),
    ]


def fit_on(device: str, make_layers, data, jit: bool):
    tp.random.seed(0)
    with tp.device(device):
        model = tp.Sequential(make_layers())
        model.compile(
            optimizer=tp.optimizers.Adam(1e-2),
            loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            jit=jit,
        )
        history = model.fit(*data, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert all(w.device == tp.devices.parse_device(device) for w in model.weights)
    return history.history["loss"], model.get_weights()


def embedding_layers():
    return [tp.Input((5,), dtype="int64"), tp.layers.Embedding(30, 4), tp.layers.Flatten(), tp.layers.Dense(3)]
