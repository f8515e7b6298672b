"""Saving and loading: weights files, whole-model files, training checkpoints, and the
registry that lets configs name user classes. Layouts: docs/file-formats.md.

>>> import os, tempfile
>>> import tapeflow as tp
>>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)])
>>> path = os.path.join(tempfile.mkdtemp(), "w.weights.h5")
>>> tp.saving.save_weights(model, path)
>>> tp.saving.load_weights(model, path)
LoadReport(matched=2)
"""

from tapeflow.files.atomic import remove_temp_files
from tapeflow.files.safe_h5 import FileReadError
from tapeflow.saving.checkpoint import CheckpointInfo, load_checkpoint, save_checkpoint
from tapeflow.saving.formats import CHECKPOINT_FORMAT, MODEL_FORMAT, WEIGHTS_FORMAT
from tapeflow.saving.load_report import LoadReport, ShapeMismatch, WeightsMismatchError
from tapeflow.saving.model_file import load_model, save_model
from tapeflow.saving.object_registration import (
    custom_object_scope,
    register_keras_serializable,
    register_serializable,
    registered_name,
)
from tapeflow.saving.weight_keys import weight_paths
from tapeflow.saving.weights import load_weights, save_weights

__all__ = [
    "CHECKPOINT_FORMAT",
    "CheckpointInfo",
    "FileReadError",
    "LoadReport",
    "MODEL_FORMAT",
    "ShapeMismatch",
    "WEIGHTS_FORMAT",
    "WeightsMismatchError",
    "custom_object_scope",
    "load_checkpoint",
    "load_model",
    "load_weights",
    "register_keras_serializable",
    "register_serializable",
    "registered_name",
    "remove_temp_files",
    "save_checkpoint",
    "save_model",
    "save_weights",
    "weight_paths",
]
