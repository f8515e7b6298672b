"""Writing graph files: a graph, its state and its constants in one versioned HDF5 file.

A saved graph runs with nothing but tapeflow and the file (docs/file-formats.md
describes its layout); a write to a path is atomic, so a failed save never leaves a
half-written file behind.

>>> import io
>>> import tapeflow as tp
>>> buffer = io.BytesIO()
>>> save_graph(tp.freeze(lambda x: x + 1.0, tp.TensorSpec((2,))), buffer)
>>> tp.load_graph(io.BytesIO(buffer.getvalue()))(tp.ones((2,))).numpy().tolist()
[2.0, 2.0]
"""

from __future__ import annotations

import json

import h5py
import numpy as np

from tapeflow import dtypes
from tapeflow.files.atomic import atomic_h5
from tapeflow.files.safe_h5 import write_array, write_attrs, write_manifest
from tapeflow.graph.file_format.codec import FORMAT, FORMAT_VERSION, AttrCodec, array_spec, is_file_object
from tapeflow.graph.ir import GraphError, GraphIR


def save_graph(graph: GraphIR, path) -> None:
    """Write `graph`, its state (current Variable values) and constants to one HDF5 file,
    or to a writable binary file object (an `io.BytesIO` gives the file's bytes).

    Writing to a path is atomic: a temp file beside `path` replaces it only once
    complete, so a failed save leaves any earlier file as it was.

    >>> import os, tempfile
    >>> import tapeflow as tp
    >>> g = tp.freeze(lambda x: x * 2.0, tp.TensorSpec((2,)))
    >>> tmp = tempfile.TemporaryDirectory()
    >>> save_graph(g, os.path.join(tmp.name, "double.tfg"))
    >>> tp.load_graph(os.path.join(tmp.name, "double.tfg"))(tp.tensor([1.0, 2.0])).numpy().tolist()
    [2.0, 4.0]
    >>> tmp.cleanup()
    >>> import io
    >>> buffer = io.BytesIO()
    >>> save_graph(g, buffer)
    >>> tp.load_graph(io.BytesIO(buffer.getvalue()))(tp.tensor([1.0, 2.0])).numpy().tolist()
    [2.0, 4.0]
    """
    where = f"save_graph({graph.name})"
    codec = AttrCodec()
    meta = codec.describe_graph(graph, where)
    meta["state"] = []
    for name, var in graph.state.items():
        array = np.asarray(var.numpy())
        spec = array_spec(name, array, codec.store("state", array), where)
        meta["state"].append(spec | {"trainable": bool(var.trainable)})
    meta["generators"] = [g.get_state() for g in codec.generators]
    arrays = codec.arrays
    try:
        text = json.dumps(meta, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as err:
        raise GraphError(f"{where}: the graph description is not JSON ({err})") from None
    arrays["graph_json"] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    if is_file_object(path):
        with h5py.File(path, "w") as f:
            _write(f, arrays)
    else:
        with atomic_h5(path) as f:
            _write(f, arrays)


def _write(f: h5py.File, arrays: dict) -> None:
    write_attrs(f, {"format": FORMAT, "format_version": FORMAT_VERSION})
    for key, array in arrays.items():
        bits = array.dtype == dtypes.bfloat16.np  # HDF5 has no bfloat16: its uint16 bits are written
        write_array(f, key, array.view(np.uint16) if bits else array)
    write_manifest(f)
