"""Saving and loading: weights files and resumable training checkpoints.

The callback that writes and restores checkpoints during `fit` is
`tp.callbacks.BackupAndRestore` (also reachable as `tp.io.BackupAndRestore`).

>>> import tapeflow as tp
>>> tp.io.checkpoint.WEIGHTS_FORMAT, tp.io.FORMAT_VERSION
('tapeflow-weights', 3)
"""

from tapeflow.io import checkpoint
from tapeflow.io.checkpoint import (
    CHECKPOINT_FORMAT,
    FORMAT_VERSION,
    WEIGHTS_FORMAT,
    CheckpointInfo,
    FileReadError,
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
    "CheckpointInfo",
    "FileReadError",
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
