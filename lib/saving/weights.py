"""Weights files: the one HDF5 format every model's weights are written in and read from.

A weight is stored under its place in the model (its structural key, "layers/dense/kernel"),
so the same architecture built again loads the file even when its automatic layer names
differ; the file also records each weight's full name, for `by_name=True`. Files keyed by
name (versions 1 and 3, still written by `tp.io.save_weights`), training checkpoints and
model files load too. Layouts and versions: docs/file-formats.md.

>>> import os, tempfile
>>> import tapeflow as tp
>>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2, name="head")])
>>> path = os.path.join(tempfile.mkdtemp(), "w.weights.h5")
>>> save_weights(model, path)
>>> load_weights(model, path).matched
('layers/dense/kernel', 'layers/dense/bias')
>>> load_weights(model, path, by_name=True).matched
('head/kernel', 'head/bias')
"""

from __future__ import annotations

import json
import os

import h5py
import numpy as np

from tapeflow.files.atomic import atomic_h5
from tapeflow.files.safe_h5 import H5Reader, write_array, write_attrs, write_manifest, write_text
from tapeflow.saving.formats import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_VERSIONS,
    MODEL_FORMAT,
    MODEL_VERSIONS,
    NAMED_WEIGHTS_VERSION,
    WEIGHTS_FORMAT,
    WEIGHTS_VERSION,
    WEIGHTS_VERSIONS,
    keyed_by_name,
)
from tapeflow.saving.load_report import LoadReport, ShapeMismatch, WeightsMismatchError, mismatch_error
from tapeflow.saving.weight_keys import check_paths, weight_paths, weights_by_name

__all__ = [
    "load_weights",
    "load_weights_by_name",
    "match_weights",
    "named_mismatch",
    "read_structured_weights",
    "save_weights",
    "save_weights_by_name",
    "structured_mismatch",
    "weight_arrays",
    "write_arrays",
]


# ------------------------------------------------------------------ writing
def weight_arrays(weights: dict) -> dict[str, np.ndarray]:
    """The value of each weight of `weights` ({key: Variable}) as a NumPy array, same keys."""
    return {key: np.asarray(var.numpy()) for key, var in weights.items()}


def write_arrays(group: h5py.Group, arrays: dict) -> None:
    """One checksummed dataset per array, at its key under `group`."""
    for name, value in arrays.items():
        write_array(group, name, value)


def save_weights(model, path) -> None:
    """Write `model`'s weights keyed by structure, atomically (what `Model.save_weights` does).

    >>> import os, tempfile
    >>> import tapeflow as tp
    >>> model = tp.Sequential([tp.Input((2,)), tp.layers.Dense(3)])
    >>> save_weights(model, os.path.join(tempfile.mkdtemp(), "w.weights.h5"))
    """
    where = "save_weights"
    by_key = weight_paths(model, where)
    arrays, names = weight_arrays(by_key), {key: var.name for key, var in by_key.items()}
    with atomic_h5(path) as f:
        write_attrs(f, {"format": WEIGHTS_FORMAT, "version": WEIGHTS_VERSION})
        write_arrays(f.create_group("weights"), arrays)
        write_text(f, "names", json.dumps(names))
        write_manifest(f)


def save_weights_by_name(model, path) -> None:
    """Write `model`'s weights keyed by full name (version 3), atomically: the layout of
    `tp.io.save_weights`, for programs that read weights files by name. Layers must have
    unique names.

    >>> import os, tempfile
    >>> import tapeflow as tp
    >>> model = tp.Sequential([tp.layers.Dense(3, name="d")])
    >>> _ = model(tp.ones((1, 2)))
    >>> save_weights_by_name(model, os.path.join(tempfile.mkdtemp(), "w.h5"))
    """
    where = "save_weights"
    named = weights_by_name(model, where)
    check_paths(named, where)
    arrays = weight_arrays(named)
    with atomic_h5(path) as f:
        write_attrs(f, {"format": WEIGHTS_FORMAT, "version": NAMED_WEIGHTS_VERSION})
        write_arrays(f, arrays)
        write_manifest(f)


# ------------------------------------------------------------------ reading
def match_weights(reader: H5Reader, targets: dict, datasets: dict, checked: bool) -> tuple[LoadReport, dict]:
    """The report, and the matched values cast to each target's dtype (read only when the
    shapes fit; a value the cast would change is refused); `datasets` are keyed like `targets`."""
    matched, mismatched, values = [], [], {}
    for name, var in targets.items():
        dataset = datasets.get(name)
        if dataset is None:
            continue
        if tuple(dataset.shape) != tuple(var.shape):
            mismatched.append(ShapeMismatch(name, tuple(dataset.shape), tuple(var.shape)))
            continue
        matched.append(name)
        values[name] = reader.array(dataset, checked, dtype=var.dtype.np)
    report = LoadReport(
        matched=tuple(matched),
        missing=tuple(name for name in targets if name not in datasets),
        unexpected=tuple(sorted(name for name in datasets if name not in targets)),
        mismatched=tuple(mismatched),
    )
    return report, values


def read_structured_weights(reader: H5Reader, checked: bool, by_key: dict, where: str, by_name: bool = False):
    """(report, values by structural key) for the `weights` group of an open weights or
    model file, matched by structure, or through the file's `names` by full name."""
    datasets = reader.datasets(reader.group(reader.file, "weights"), "weights/")
    if not by_name:
        return match_weights(reader, by_key, datasets, checked)
    names = reader.json(reader.file, "names", checked)
    if not isinstance(names, dict) or not all(isinstance(v, str) for v in names.values()):
        raise reader.fail("'names' must map keys to weight names")
    datasets = {names.get(key, key): d for key, d in datasets.items()}
    named = {var.name: var for var in by_key.values()}
    if len(named) != len(by_key):
        raise ValueError(f"{where}: weights of the model share names; match them by structure instead")
    report, values = match_weights(reader, named, datasets, checked)
    key_of = {var.name: key for key, var in by_key.items()}
    return report, {key_of[name]: value for name, value in values.items()}


def named_mismatch(where: str, report: LoadReport, advice: str) -> WeightsMismatchError:
    """The error of a strict load by full name (a file keyed by name, or a checkpoint)."""
    matched_by = (
        "names '<layer name>/<weight name>'; layers named automatically (dense, dense_1, ...) are named in "
        "creation order, so pass name= to layers whose files travel"
    )
    return mismatch_error(where, report, matched_by, advice)


def structured_mismatch(where: str, report: LoadReport, by_name: bool = False) -> WeightsMismatchError:
    """The error of a strict load from a file keyed by structure (a weights or model file)."""
    how = "full names" if by_name else "place in the model ('<layer path>/<weight>')"
    other = "" if by_name else ", or by_name=True to match them by their full names"
    return mismatch_error(where, report, how, f"Pass strict=False to load those that match{other}.")


def _read_named_weights(reader: H5Reader, fmt: str, checked: bool, named: dict) -> tuple[LoadReport, dict]:
    group = reader.file if fmt == WEIGHTS_FORMAT else reader.group(reader.file, "weights")
    return match_weights(reader, named, reader.datasets(group), checked)


def _load(model, path, formats: dict, strict: bool, by_name: bool) -> LoadReport:
    where = f"load_weights({os.fspath(path)!r})"
    with H5Reader(path, where) as reader:
        fmt, version, checked = reader.header(formats)
        named_layout = keyed_by_name(fmt, version)
        if named_layout:
            targets = weights_by_name(model, where)
            report, values = _read_named_weights(reader, fmt, checked, targets)
        else:
            targets = weight_paths(model, where)
            report, values = read_structured_weights(reader, checked, targets, where, by_name)
    if strict and not report.ok:
        if named_layout:
            raise named_mismatch(where, report, "Pass strict=False to load the weights that match.")
        raise structured_mismatch(where, report, by_name)
    for key, value in values.items():
        targets[key].assign(value)
    return report


def load_weights(model, path, strict: bool = True, by_name: bool = False) -> LoadReport:
    """Load weights into `model`, matched by structure (or by full name with `by_name`).

    With `strict`, a missing, unexpected or wrongly shaped weight raises a
    `WeightsMismatchError` naming every one, and no weight changes; otherwise the weights
    that match are loaded. A file keyed by name (`tp.io.save_weights`, or a checkpoint)
    loads by name; a model file (`Model.save`) gives its weights.

    >>> import os, tempfile
    >>> import tapeflow as tp
    >>> small = tp.Sequential([tp.Input((2,)), tp.layers.Dense(3)])
    >>> path = os.path.join(tempfile.mkdtemp(), "w.weights.h5")
    >>> save_weights(small, path)
    >>> big = tp.Sequential([tp.Input((2,)), tp.layers.Dense(3), tp.layers.Dense(1)])
    >>> load_weights(big, path, strict=False)
    LoadReport(matched=2, missing=['layers/dense_1/kernel', 'layers/dense_1/bias'])
    """
    formats = {WEIGHTS_FORMAT: WEIGHTS_VERSIONS, MODEL_FORMAT: MODEL_VERSIONS, CHECKPOINT_FORMAT: CHECKPOINT_VERSIONS}
    return _load(model, path, formats, strict, by_name)


def load_weights_by_name(model, path, strict: bool = True) -> LoadReport:
    """Load weights matched by full name from a weights file (any version) or the weights
    of a checkpoint: what `tp.io.load_weights` does.

    >>> import os, tempfile
    >>> import tapeflow as tp
    >>> small = tp.Sequential([tp.layers.Dense(3, name="a")])
    >>> _ = small(tp.ones((1, 2)))
    >>> path = os.path.join(tempfile.mkdtemp(), "w.h5")
    >>> save_weights_by_name(small, path)
    >>> big = tp.Sequential([tp.layers.Dense(3, name="a"), tp.layers.Dense(1, name="b")])
    >>> _ = big(tp.ones((1, 2)))
    >>> load_weights_by_name(big, path, strict=False)
    LoadReport(matched=2, missing=['b/kernel', 'b/bias'])
    """
    formats = {WEIGHTS_FORMAT: WEIGHTS_VERSIONS, CHECKPOINT_FORMAT: CHECKPOINT_VERSIONS}
    return _load(model, path, formats, strict, by_name=True)
