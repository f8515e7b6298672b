"""Keras 3's `keras.backend`: the global numeric settings a Keras script reads and sets.

Two folders have similar names on purpose: `backends/` holds the device families that run
kernels (NumPy, CuPy, XLA), while this package is the Keras-facing `tp.backend` namespace
of configuration functions, whose name Keras scripts use.

>>> import tapeflow as tp
>>> tp.backend.backend(), tp.backend.floatx(), tp.backend.epsilon(), tp.backend.image_data_format()
('tapeflow', 'float32', 1e-07, 'channels_last')
"""

from tapeflow.backend.config import (
    backend,
    clear_session,
    epsilon,
    floatx,
    get_uid,
    image_data_format,
    is_float_dtype,
    is_int_dtype,
    is_keras_tensor,
    set_epsilon,
    set_floatx,
    set_image_data_format,
    standardize_data_format,
    standardize_dtype,
)
from tapeflow.dtypes import result_type

__all__ = [
    "backend",
    "clear_session",
    "epsilon",
    "floatx",
    "get_uid",
    "image_data_format",
    "is_float_dtype",
    "is_int_dtype",
    "is_keras_tensor",
    "result_type",
    "set_epsilon",
    "set_floatx",
    "set_image_data_format",
    "standardize_data_format",
    "standardize_dtype",
]
