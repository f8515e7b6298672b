"""Saving and loading: weights files, resumable training checkpoints, and `BackupAndRestore`.

`BackupAndRestore` is a callback, defined with the training loop it drives
(`tapeflow.training`), which comes after this package; it is imported on first use.

>>> import tapeflow as tp
>>> tp.io.checkpoint.WEIGHTS_FORMAT, tp.io.FORMAT_VERSION
('tapeflow-weights', 1)
"""

from tapeflow.io import checkpoint
from tapeflow.io.checkpoint import (
    CHECKPOINT_FORMAT,
    FORMAT_VERSION,
    WEIGHTS_FORMAT,
    CheckpointInfo,
    LoadReport,
    ShapeMismatch,
    WeightsMismatchError,
    load_checkpoint,
    load_weights,
    remove_temp_files,
    save_checkpoint,
    save_weights,
)

__all__ = [
    "CHECKPOINT_FORMAT",
    "FORMAT_VERSION",
    "WEIGHTS_FORMAT",
    "BackupAndRestore",
    "CheckpointInfo",
    "LoadReport",
    "ShapeMismatch",
    "WeightsMismatchError",
    "checkpoint",
    "load_checkpoint",
    "load_weights",
    "remove_temp_files",
    "save_checkpoint",
    "save_weights",
]


def __getattr__(name: str):
    if name == "BackupAndRestore":
        from tapeflow.training import BackupAndRestore

        return BackupAndRestore
    raise AttributeError(f"module 'tapeflow.io' has no attribute {name!r}")
