"""Keras 3's `keras.utils`: data helpers (one-hot labels, padding, datasets from arrays
and folders, splitting), images, files, progress bars, model drawing, seeding, and the
serialization registry.

>>> import tapeflow as tp
>>> tp.utils.to_categorical([1, 0], 2).tolist()
[[0.0, 1.0], [1.0, 0.0]]
>>> tp.utils.pad_sequences([[1], [2, 3]]).tolist()
[[0, 1], [2, 3]]
"""

from tapeflow.backend.config import clear_session, is_keras_tensor, standardize_dtype
from tapeflow.data.py_dataset import PyDataset
from tapeflow.saving.object_registration import custom_object_scope, register_keras_serializable
from tapeflow.serialization import registered_name as get_registered_name
from tapeflow.trainers.data_adapter import pack_x_y_sample_weight, unpack_x_y_sample_weight
from tapeflow.utils.dataset_utils import split_dataset
from tapeflow.utils.file_utils import get_file
from tapeflow.utils.image_dataset_utils import image_dataset_from_directory
from tapeflow.utils.image_utils import array_to_img, img_to_array, load_img, save_img
from tapeflow.utils.model_visualization import model_to_dot, plot_model
from tapeflow.utils.numerical_utils import normalize, to_categorical
from tapeflow.utils.progbar import Progbar
from tapeflow.utils.rng_utils import set_random_seed
from tapeflow.utils.sequence_utils import pad_sequences
from tapeflow.utils.serialization_utils import deserialize_keras_object, serialize_keras_object
from tapeflow.utils.text_dataset_utils import text_dataset_from_directory
from tapeflow.utils.timeseries_dataset_utils import timeseries_dataset_from_array

Sequence = PyDataset  # Keras's older name
CustomObjectScope = custom_object_scope

__all__ = [
    "CustomObjectScope",
    "Progbar",
    "PyDataset",
    "Sequence",
    "array_to_img",
    "clear_session",
    "custom_object_scope",
    "deserialize_keras_object",
    "get_file",
    "get_registered_name",
    "image_dataset_from_directory",
    "img_to_array",
    "is_keras_tensor",
    "load_img",
    "model_to_dot",
    "normalize",
    "pack_x_y_sample_weight",
    "pad_sequences",
    "plot_model",
    "register_keras_serializable",
    "save_img",
    "serialize_keras_object",
    "set_random_seed",
    "split_dataset",
    "standardize_dtype",
    "text_dataset_from_directory",
    "timeseries_dataset_from_array",
    "to_categorical",
    "unpack_x_y_sample_weight",
]
