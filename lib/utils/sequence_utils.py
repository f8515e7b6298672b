"""Padding variable-length sequences into one array, as Keras 3's `pad_sequences`."""

from __future__ import annotations

import numpy as np


def pad_sequences(sequences, maxlen=None, dtype="int32", padding="pre", truncating="pre", value=0.0) -> np.ndarray:
    """Sequences as rows of one `(len(sequences), maxlen, ...)` array: shorter ones padded
    with `value`, longer ones cut, both at the start ("pre") or the end ("post").

    >>> pad_sequences([[1, 2, 3], [4]], maxlen=2).tolist()
    [[2, 3], [0, 4]]
    >>> pad_sequences([[1, 2, 3], [4]], padding="post", truncating="post").tolist()
    [[1, 2, 3], [4, 0, 0]]
    """
    if padding not in ("pre", "post"):
        raise ValueError(f'pad_sequences: padding must be "pre" or "post", got {padding!r}')
    if truncating not in ("pre", "post"):
        raise ValueError(f'pad_sequences: truncating must be "pre" or "post", got {truncating!r}')
    if not hasattr(sequences, "__len__"):
        raise ValueError(f"pad_sequences: sequences must be a list of sequences, got {type(sequences).__name__}")
    lengths, sample_shape = [], None
    for position, seq in enumerate(sequences):
        try:
            lengths.append(len(seq))
        except TypeError as err:
            raise ValueError(
                f"pad_sequences: sequences must be a list of iterables; item {position} is {seq!r}"
            ) from err
        if sample_shape is None and len(seq):
            sample_shape = np.asarray(seq).shape[1:]
    sample_shape = sample_shape or ()
    if maxlen is None:
        maxlen = max(lengths) if lengths else 0
    textual = np.issubdtype(dtype, np.str_) or np.issubdtype(dtype, np.bytes_)
    if isinstance(value, str) and dtype is not object and not textual:
        raise ValueError(f"pad_sequences: dtype {dtype} cannot hold the string value {value!r}; use dtype=object")
    out = np.full((len(lengths), maxlen) + tuple(sample_shape), value, dtype=dtype)
    for position, seq in enumerate(sequences):
        if not len(seq) or maxlen == 0:
            continue
        kept = np.asarray(seq[-maxlen:] if truncating == "pre" else seq[:maxlen], dtype=dtype)
        if kept.shape[1:] != sample_shape:
            raise ValueError(
                f"pad_sequences: sequence {position} has items of shape {kept.shape[1:]}, expected {sample_shape}"
            )
        if padding == "post":
            out[position, : len(kept)] = kept
        else:
            out[position, maxlen - len(kept) :] = kept
    return out
