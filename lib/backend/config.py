"""The values of Keras 3's `keras.backend` / `keras.config` settings, and their setters.

`set_floatx` is the default dtype of new layers: it sets tapeflow's global dtype policy to
that dtype, unless a mixed-precision policy is in force. `set_epsilon` changes what
`epsilon()` returns; tapeflow's losses keep Keras's default 1e-7 as a constant.

>>> set_epsilon(1e-5); epsilon()
1e-05
>>> set_epsilon(1e-7)
"""

from __future__ import annotations

import gc
import itertools
from collections import defaultdict

import numpy as np

from tapeflow import dtypes
from tapeflow.layers import base as layer_base
from tapeflow.layers.base import SymbolicTensor
from tapeflow.mixed_precision import policy as dtype_policy

_FLOATX_CHOICES = ("bfloat16", "float16", "float32", "float64")
_DATA_FORMATS = ("channels_last", "channels_first")
_SETTINGS = {"epsilon": 1e-7, "floatx": "float32", "image_data_format": "channels_last"}
_UIDS: defaultdict = defaultdict(itertools.count)


def backend() -> str:
    """The name of the backend running the Keras API: always "tapeflow".

    >>> backend()
    'tapeflow'
    """
    return "tapeflow"


def epsilon() -> float:
    """The fuzz factor Keras adds to avoid dividing by zero (1e-7 by default).

    >>> epsilon()
    1e-07
    """
    return _SETTINGS["epsilon"]


def set_epsilon(value: float) -> None:
    """Set what `epsilon()` returns.

    >>> set_epsilon("a")
    Traceback (most recent call last):
    ...
    TypeError: set_epsilon: value must be a number, got 'a'
    """
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise TypeError(f"set_epsilon: value must be a number, got {value!r}")
    _SETTINGS["epsilon"] = float(value)


def floatx() -> str:
    """The default float dtype, as a string ("float32" unless `set_floatx` changed it).

    >>> floatx()
    'float32'
    """
    return _SETTINGS["floatx"]


def set_floatx(value: str) -> None:
    """Set the default float dtype: one of "bfloat16", "float16", "float32", "float64".

    Layers made afterwards keep their weights and compute in it (unless a mixed-precision
    policy is in force, which `tp.mixed_precision.set_global_policy` sets).

    >>> set_floatx("float8")
    Traceback (most recent call last):
    ...
    ValueError: set_floatx: unknown floatx type 'float8'; expected one of ('bfloat16', 'float16', 'float32', 'float64')
    """
    name = str(value)
    if name not in _FLOATX_CHOICES:
        raise ValueError(f"set_floatx: unknown floatx type {value!r}; expected one of {_FLOATX_CHOICES}")
    _SETTINGS["floatx"] = name
    if not dtype_policy.global_policy().name.startswith("mixed_"):
        dtype_policy.set_global_policy(name)


def image_data_format() -> str:
    """How images are laid out: "channels_last" (NHWC, the default) or "channels_first".

    >>> image_data_format()
    'channels_last'
    """
    return _SETTINGS["image_data_format"]


def set_image_data_format(data_format: str) -> None:
    """Set what `image_data_format()` returns ("channels_last" or "channels_first")."""
    _SETTINGS["image_data_format"] = _checked_format(data_format, "set_image_data_format")


def standardize_data_format(data_format: str | None) -> str:
    """`data_format`, or `image_data_format()` for None, checked.

    >>> standardize_data_format(None), standardize_data_format("Channels_First")
    ('channels_last', 'channels_first')
    """
    return image_data_format() if data_format is None else _checked_format(data_format, "data_format")


def _checked_format(data_format, where: str) -> str:
    name = str(data_format).lower()
    if name not in _DATA_FORMATS:
        raise ValueError(f"{where}: data_format must be one of {_DATA_FORMATS}, got {data_format!r}")
    return name


def standardize_dtype(dtype) -> str:
    """A dtype (a name, a NumPy dtype, a tapeflow DType, None for floatx) as its name.

    >>> standardize_dtype(None), standardize_dtype(np.int32), standardize_dtype(float)
    ('float32', 'int32', 'float32')
    """
    if dtype is None:
        return floatx()
    return dtypes.as_dtype(dtype).name


def is_float_dtype(dtype) -> bool:
    """Whether `dtype` is a floating dtype.

    >>> is_float_dtype("bfloat16"), is_float_dtype("int32")
    (True, False)
    """
    return dtypes.as_dtype(standardize_dtype(dtype)).kind == "f"


def is_int_dtype(dtype) -> bool:
    """Whether `dtype` is an integer dtype.

    >>> is_int_dtype("int64"), is_int_dtype("float16")
    (True, False)
    """
    return dtypes.as_dtype(standardize_dtype(dtype)).kind in "iu"


def is_keras_tensor(x) -> bool:
    """Whether `x` is a symbolic tensor of the functional API (what `tp.Input` returns).

    >>> import tapeflow as tp
    >>> is_keras_tensor(tp.Input((3,))), is_keras_tensor(tp.ones((3,)))
    (True, False)
    """
    return isinstance(x, SymbolicTensor)


def get_uid(prefix: str = "") -> int:
    """1 the first time for `prefix`, then 2, 3, ... (reset by `clear_session`).

    >>> get_uid("doc_uid"), get_uid("doc_uid")
    (1, 2)
    """
    return next(_UIDS[prefix]) + 1


def clear_session(free_memory: bool = True) -> None:
    """Forget the global state Keras forgets: layer-name counters and `get_uid` counts,
    so names start again at "dense"; then collect garbage.

    >>> import tapeflow as tp
    >>> clear_session()
    >>> tp.layers.Dense(1).name
    'dense'
    """
    layer_base._NAME_COUNTS.clear()
    _UIDS.clear()
    if free_memory:
        gc.collect()
