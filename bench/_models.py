"""The models the benchmarks train, in tapeflow and in PyTorch: the MLP 784-256-256-10
and TensorFlow's "Deep MNIST" CNN (two 5x5 conv + 2x2 max-pool stages, dense 1024, 10
logits). Each library is imported inside its function, so a reference process that
imports this module never imports tapeflow."""

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


def torch_model(kind: str, dropout: bool = True):
    """The same MLP or CNN in PyTorch (the CNN takes NCHW images); the dropout is optional."""
    from torch import nn

    if kind == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(
        *(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2)),
        *(nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2)),
        *(nn.Flatten(), nn.Linear(3136, 1024), nn.ReLU()),
        *([nn.Dropout(0.5)] if dropout else []),
        nn.Linear(1024, 10),
    )
