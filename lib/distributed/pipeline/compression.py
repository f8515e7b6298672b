"""Lossy compression of the float32 tensors that cross between workers (the TensorFlow
white paper, section 5.5): converted to 16 bits before sending, back to float32 after
receiving. Other dtypes, and `compression=None`, pass unchanged.

- "float16": IEEE half precision (10 mantissa bits, values up to 65504). Relative
  error at most 2**-11 from 6.1e-5 to 65504; below, an absolute error of at most
  2**-25 (magnitudes under about 3e-8 become 0).
- "bfloat16": the upper 16 bits of the float32, rounded to nearest even (7 mantissa
  bits, float32's range). Relative error at most 2**-8.

>>> import numpy as np
>>> x = np.array([1.0, 3.14159, -2e-3], np.float32)
>>> sent = encode(x, "bfloat16")
>>> sent.dtype.name, sent.nbytes * 2 == x.nbytes
('uint16', True)
>>> bool(np.abs(decode(sent, "bfloat16") - x).max() < 0.01)
True
>>> decode(encode(x, "float16"), "float16").dtype.name
'float32'
"""

from __future__ import annotations

import numpy as np

COMPRESSIONS = (None, "float16", "bfloat16")
RELATIVE_ERROR = {None: 0.0, "float16": 2.0**-11, "bfloat16": 2.0**-8}


def check_compression(compression, owner: str) -> str | None:
    """`compression` if it is one of COMPRESSIONS, else a ValueError naming `owner`."""
    if compression not in COMPRESSIONS:
        raise ValueError(f"{owner}: compression must be one of {list(COMPRESSIONS)}, got {compression!r}")
    return compression


def encode(array: np.ndarray, compression: str | None) -> np.ndarray:
    """What is sent for `array`: 16 bits per element for float32 under a compression."""
    array = np.asarray(array)
    if compression is None or array.dtype != np.float32:
        return array
    if compression == "float16":
        return array.astype(np.float16)
    bits = np.ascontiguousarray(array).view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    nan = np.isnan(array)
    halves = (rounded >> np.uint32(16)).astype(np.uint16)
    if nan.any():  # rounding must not carry a NaN's payload into the exponent
        halves[nan] = np.uint16(0x7FC0)
    return halves


def decode(payload: np.ndarray, compression: str | None, dtype: str = "float32") -> np.ndarray:
    """The array of `dtype` that a received `payload` stands for (itself when not compressed)."""
    if compression is None or dtype != "float32":
        return payload
    if compression == "float16":
        return payload.astype(np.float32)
    return (payload.astype(np.uint32) << np.uint32(16)).view(np.float32)


def sent_dtype(dtype: str, compression: str | None) -> str:
    """The dtype of what is sent for a value of `dtype` under `compression`.

    >>> sent_dtype("float32", "bfloat16"), sent_dtype("float32", "float16"), sent_dtype("int64", "float16")
    ('uint16', 'float16', 'int64')
    """
    if compression is None or dtype != "float32":
        return dtype
    return "float16" if compression == "float16" else "uint16"
