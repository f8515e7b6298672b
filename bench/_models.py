"""The tapeflow models the benchmarks train: the MLP 784-256-256-10 and TensorFlow's
"Deep MNIST" CNN (two 5x5 conv + 2x2 max-pool stages, dense 1024, 10 logits)."""

from __future__ import annotations


def tapeflow_model(kind: str, dropout: bool = True):
    """A fresh `tp.Sequential` ("mlp" or "cnn"), seeded; the CNN's dropout (0.5) is optional."""
    import tapeflow as tp

    tp.random.seed(0)
    if kind == "mlp":
        layers = [tp.layers.Dense(256, activation="relu"), tp.layers.Dense(256, activation="relu"), tp.layers.Dense(10)]
    else:
        layers = [
            tp.layers.Conv2D(32, 5, padding="same", activation="relu"),
            tp.layers.MaxPooling2D(2),
            tp.layers.Conv2D(64, 5, padding="same", activation="relu"),
            tp.layers.MaxPooling2D(2),
            tp.layers.Flatten(),
            tp.layers.Dense(1024, activation="relu"),
            *([tp.layers.Dropout(0.5)] if dropout else []),
            tp.layers.Dense(10),
        ]
    return tp.Sequential(layers)
