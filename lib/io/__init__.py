"""TensorBoard summaries, and the names of weights files and training checkpoints that
`tapeflow.saving` defines (kept here for the scripts that reach them as `tp.io.*`).

`tp.io.save_weights` writes weights keyed by full name (version 3) and
`tp.io.load_weights` matches them by full name; `Model.save_weights` keys them by
structure. Layouts: docs/file-formats.md.

>>> import tapeflow as tp
>>> tp.io.WEIGHTS_FORMAT, tp.io.FORMAT_VERSION
('tapeflow-weights', 3)
"""

from tapeflow.callbacks.backup_and_restore import BackupAndRestore
from tapeflow.files.atomic import remove_temp_files
from tapeflow.files.safe_h5 import FileReadError
from tapeflow.io import tensorboard
from tapeflow.saving import checkpoint
from tapeflow.saving.checkpoint import CheckpointInfo, load_checkpoint, save_checkpoint
from tapeflow.saving.formats import CHECKPOINT_FORMAT, WEIGHTS_FORMAT
from tapeflow.saving.formats import NAMED_WEIGHTS_VERSION as FORMAT_VERSION
from tapeflow.saving.load_report import LoadReport, ShapeMismatch, WeightsMismatchError
from tapeflow.saving.weights import load_weights_by_name as load_weights
from tapeflow.saving.weights import save_weights_by_name as save_weights

__all__ = [
    "CHECKPOINT_FORMAT",
    "FORMAT_VERSION",
    "WEIGHTS_FORMAT",
    "BackupAndRestore",
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
    "tensorboard",
]
