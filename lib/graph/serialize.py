"""Saved graphs: one versioned HDF5 file holding the graph, its weights and constants.

A saved graph runs with nothing but tapeflow and the file. Loading never executes
code from the file: there is no pickle, no eval and no import by name; ops are looked
up in the op registry, and every node is checked by re-running its shape rule (for
`cond` and `while_loop`, the rule re-derives the output specs from the subgraphs, so an
edited `output_specs` is refused). The file is read through `tapeflow._h5safe`.

File layout (format "tapeflow-graph", version 2; the `.tfg` suffix is conventional):

- root attributes `format` = "tapeflow-graph" (a fixed-length string), `format_version`
  = 2 and `crc32` (of the other two);
- `graph_json`: a uint8 dataset holding UTF-8 JSON with the graph's name, inputs
  (name, shape with null for a dynamic dimension, dtype), constants and state
  (name, shape, dtype, dataset), nodes (name, op, input value names, attrs,
  outputs with name, shape and dtype, and, for a placed node, its device: a worker's
  such as "/worker:1/cpu:0", or one of the process's such as "xla:0") in topological
  order, the graph's device where a node names one of the process's, output value names,
  the output structure and the saved random generators;
- `state/<i>`, `constants/<i>` and `attr_arrays/<i>`: numeric datasets;
- `manifest`: JSON text listing every dataset. Each dataset has a `crc32` attribute, the
  CRC-32 of its bytes, checked when it is read.

Version 1 files (no checksums or manifest; `format` a variable-length string) still load.

Attributes use a typed JSON encoding: null, booleans, ints, finite floats, strings
and lists are themselves; every other value is a one-key object naming its type:
`{"tuple": [...]}`, `{"dict": [[key, value], ...]}`, `{"float": "nan" | "inf" | "-inf"}`,
`{"dtype": "float32"}`, `{"slice": [start, stop, step]}`, `{"ellipsis": true}`,
`{"scalar": [dtype, value]}` (a NumPy scalar), `{"array": {"dtype", "shape", "data" |
"dataset"}}` and `{"generator": "global" | index}` (a random stream: the global one,
or one restored from its saved state).

>>> import os, tempfile
>>> import tapeflow as tp
>>> w = tp.Variable(tp.ones((3, 2)), name="w")
>>> g = tp.freeze(lambda x: tp.nn.relu(x @ w), tp.TensorSpec((None, 3)))
>>> tmp = tempfile.TemporaryDirectory()
>>> g.save(os.path.join(tmp.name, "relu.tfg"))
>>> loaded = tp.load_graph(os.path.join(tmp.name, "relu.tfg"))
>>> loaded(tp.ones((1, 3))).numpy().tolist()
[[3.0, 3.0]]
>>> tmp.cleanup()
"""

from __future__ import annotations

import inspect
import json
import math
import os

import h5py
import numpy as np

from tapeflow import dtypes
from tapeflow._files import atomic_h5
from tapeflow._h5safe import FileReadError, H5Reader, write_array, write_attrs, write_manifest
from tapeflow.devices import canonical_placement, is_local_name, local_device_name, parse_device
from tapeflow.graph.ir import ASSIGN, READ, Graph, GraphError, Node, Value
from tapeflow.ops import random as random_ops
from tapeflow.ops.registry import get_op
from tapeflow.tensor import TracedTensor, Variable

FORMAT = "tapeflow-graph"
FORMAT_VERSION = 2
CHECKSUMS_SINCE = 2  # files of this version on hold a CRC-32 of every dataset and of the root attributes
MAX_ELEMENTS = 2**31  # the most elements a declared shape may hold
INLINE_ARRAY_LIMIT = 256  # attr arrays up to this size are kept in the JSON, larger ones as datasets
_MAX_JSON_BYTES = 1 << 30
_ATTR_DTYPES = frozenset(
    ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64"]
)


class GraphFileError(GraphError, FileReadError):
    """A graph file that cannot be read: missing, damaged, hostile or of an unknown version."""


# ================================================================== attrs
class _AttrCodec:
    """Typed JSON for node attributes; collects the arrays and generators they refer to."""

    def __init__(self, generators: list | None = None, graph_class: type = Graph):
        self.arrays: dict[str, np.ndarray] = {}  # dataset path -> array, filled while encoding
        self.generators = [] if generators is None else generators  # the non-global random streams
        self.graph_class = graph_class  # what decoded subgraphs are made as
        self._generator_index: dict[int, int] = {}
        self._counts: dict[str, int] = {}

    def store(self, group: str, array: np.ndarray) -> str:
        """Keep `array` for the dataset `<group>/<n>`; returns that path."""
        n = self._counts[group] = self._counts.get(group, -1) + 1
        path = f"{group}/{n}"
        self.arrays[path] = array
        return path

    # ------------------------------------------------------------ encoding
    def encode(self, value, where: str):
        if value is None or isinstance(value, bool | str):
            return value
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"float": _nonfinite_name(value)}
        if isinstance(value, list):
            return [self.encode(v, where) for v in value]
        if isinstance(value, tuple):
            return {"tuple": [self.encode(v, where) for v in value]}
        if isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise GraphError(f"{where}: dict keys must be strings, got {sorted(map(repr, value))}")
            return {"dict": [[k, self.encode(v, where)] for k, v in value.items()]}
        if isinstance(value, dtypes.DType):
            return {"dtype": value.name}
        if isinstance(value, slice):
            parts = (value.start, value.stop, value.step)
            if not all(p is None or isinstance(p, int | np.integer) and not isinstance(p, bool) for p in parts):
                raise GraphError(f"{where}: only slices of ints and None can be saved, got {value!r}")
            return {"slice": [None if p is None else int(p) for p in parts]}
        if value is Ellipsis:
            return {"ellipsis": True}
        if isinstance(value, np.generic):
            dtype = _numeric_dtype(value.dtype, where)
            return {"scalar": [dtype.name, self.encode(value.item(), where)]}
        if isinstance(value, np.ndarray):
            return {"array": self._encode_array(value, where)}
        if isinstance(value, random_ops.Generator):
            return {"generator": self._encode_generator(value)}
        if isinstance(value, Graph):
            return {"graph": self._encode_subgraph(value, where)}
        raise GraphError(
            f"{where}: values of type {type(value).__name__} ({value!r:.60}) cannot be stored in a graph file"
        )

    def graph_meta(self, graph: Graph, where: str) -> dict:
        """The JSON description of `graph` (state excepted); constants go to datasets."""
        graph.lint()
        constants = []
        for v in graph.constants:
            path = self.store("constants", np.asarray(v.data))
            constants.append(_array_spec(v.name, self.arrays[path], path, where))
        nodes = []
        for node in graph.nodes:
            here = f"{where}: node '{node.name}' ({node.op})"
            nodes.append(
                {
                    "name": node.name,
                    "op": node.op,
                    "inputs": [v.name for v in node.inputs],
                    "attrs": {k: self.encode(a, f"{here} attr '{k}'") for k, a in node.attrs.items()},
                    "outputs": [_value_spec(v) for v in node.outputs],
                }
            )
            if node.device is not None:
                nodes[-1]["device"] = node.device
        where_run = {"device": str(graph.device)} if any(is_local_name(n.device) for n in graph.nodes) else {}
        return {
            "name": graph.name,
            **where_run,
            "inputs": [_value_spec(v) for v in graph.inputs],
            "constants": constants,
            "nodes": nodes,
            "outputs": [v.name for v in graph.outputs],
            "output_structure": graph.output_structure,
        }

    def _encode_subgraph(self, graph: Graph, where: str) -> dict:
        if graph.state:
            raise GraphError(f"{where}: a subgraph with its own state ({sorted(graph.state)}) cannot be saved")
        return self.graph_meta(graph, f"{where} subgraph '{graph.name}'")

    def _encode_array(self, array: np.ndarray, where: str) -> dict:
        dtype = _numeric_dtype(array.dtype, where)
        spec = {"dtype": dtype.name, "shape": list(array.shape)}
        if array.size <= INLINE_ARRAY_LIMIT:
            spec["data"] = [self.encode(x, where) for x in array.ravel().tolist()]
        else:
            spec["dataset"] = self.store("attr_arrays", np.ascontiguousarray(array, dtype=dtype.newbyteorder("<")))
        return spec

    def _encode_generator(self, generator) -> str | int:
        if generator is random_ops.global_generator():
            return "global"
        index = self._generator_index.get(id(generator))
        if index is None:
            index = self._generator_index[id(generator)] = len(self.generators)
            self.generators.append(generator)
        return index

    # ------------------------------------------------------------ decoding
    def decode(self, data, where: str, datasets=None):
        if data is None or isinstance(data, bool | str | int):
            return data
        if isinstance(data, float):
            return data
        if isinstance(data, list):
            return [self.decode(v, where, datasets) for v in data]
        if not isinstance(data, dict) or len(data) != 1:
            raise GraphFileError(
                f"{where}: an attribute must be a JSON value or a one-key typed object, got {data!r:.80}"
            )
        ((tag, body),) = data.items()
        decoder = _DECODERS.get(tag)
        if decoder is None:
            raise GraphFileError(
                f"{where}: unknown attribute type {tag!r}; this tapeflow reads {sorted(_DECODERS)} (nothing else is "
                "ever imported or unpickled)"
            )
        return decoder(self, body, where, datasets)

    def _decode_tuple(self, body, where, datasets):
        _check_type(body, list, where, "a tuple body")
        return tuple(self.decode(v, where, datasets) for v in body)

    def _decode_dict(self, body, where, datasets):
        _check_type(body, list, where, "a dict body")
        out = {}
        for item in body:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                raise GraphFileError(f"{where}: a dict entry must be [string key, value], got {item!r:.80}")
            out[item[0]] = self.decode(item[1], where, datasets)
        return out

    def _decode_float(self, body, where, datasets):
        if body not in ("nan", "inf", "-inf"):
            raise GraphFileError(f"{where}: a tagged float must be 'nan', 'inf' or '-inf', got {body!r:.80}")
        return float(body)

    def _decode_dtype(self, body, where, datasets):
        return _dtype(body, where)

    def _decode_slice(self, body, where, datasets):
        if not (isinstance(body, list) and len(body) == 3):
            raise GraphFileError(f"{where}: a slice must be [start, stop, step], got {body!r:.80}")
        for part in body:
            if part is not None and (not isinstance(part, int) or isinstance(part, bool)):
                raise GraphFileError(f"{where}: slice parts must be ints or null, got {body!r:.80}")
        if body[2] == 0:
            raise GraphFileError(f"{where}: a slice step cannot be zero")
        return slice(*body)

    def _decode_ellipsis(self, body, where, datasets):
        if body is not True:
            raise GraphFileError(f"{where}: an ellipsis is written {{'ellipsis': true}}, got {body!r:.80}")
        return Ellipsis

    def _decode_scalar(self, body, where, datasets):
        if not (isinstance(body, list) and len(body) == 2):
            raise GraphFileError(f"{where}: a scalar must be [dtype, value], got {body!r:.80}")
        dtype = _np_dtype(body[0], where)
        value = self.decode(body[1], where, datasets)
        if not _suits(value, dtype):
            raise GraphFileError(f"{where}: scalar value {value!r:.40} does not suit dtype {dtype}")
        return _checked_array(value, dtype, (), where)[()]

    def _decode_array(self, body, where, datasets):
        if not isinstance(body, dict) or set(body) not in ({"dtype", "shape", "data"}, {"dtype", "shape", "dataset"}):
            raise GraphFileError(f"{where}: an array needs 'dtype', 'shape' and 'data' or 'dataset', got {body!r:.80}")
        dtype = _np_dtype(body["dtype"], where)
        shape = _shape(body["shape"], where, dynamic=False)
        if "dataset" in body:
            return datasets.read(body["dataset"], shape, dtype, where, prefix="attr_arrays/")
        data = body["data"]
        _check_type(data, list, where, "array data")
        if len(data) != math.prod(shape):
            raise GraphFileError(f"{where}: array of shape {shape} has {len(data)} values")
        values = [self.decode(v, where, datasets) for v in data]
        if not all(_suits(v, dtype) for v in values):
            raise GraphFileError(f"{where}: array values do not suit dtype {dtype}")
        return _checked_array(values, dtype, shape, where)

    def _decode_generator(self, body, where, datasets):
        if body == "global":
            return random_ops.global_generator()
        if not isinstance(body, int) or isinstance(body, bool) or not 0 <= body < len(self.generators):
            raise GraphFileError(
                f"{where}: generator must be 'global' or an index below {len(self.generators)}, got {body!r:.40}"
            )
        return self.generators[body]

    def _decode_graph(self, body, where, datasets):
        _check_type(body, dict, where, "a subgraph")
        if body.get("state", []) != [] or "generators" in body:
            raise GraphFileError(f"{where}: a subgraph holds no state or generators of its own")
        return _read_graph(body, self, datasets, self.graph_class(_str(body, "name", where)), f"{where} subgraph")


_DECODERS = {
    "tuple": _AttrCodec._decode_tuple,
    "dict": _AttrCodec._decode_dict,
    "float": _AttrCodec._decode_float,
    "dtype": _AttrCodec._decode_dtype,
    "slice": _AttrCodec._decode_slice,
    "ellipsis": _AttrCodec._decode_ellipsis,
    "scalar": _AttrCodec._decode_scalar,
    "array": _AttrCodec._decode_array,
    "generator": _AttrCodec._decode_generator,
    "graph": _AttrCodec._decode_graph,
}


def _nonfinite_name(x: float) -> str:
    return "nan" if math.isnan(x) else "inf" if x > 0 else "-inf"


def _suits(value, dtype: np.dtype) -> bool:
    """Whether a decoded JSON value is a valid element of `dtype` (bools for bool, ints for integers)."""
    if dtype.kind == "b":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    return isinstance(value, int) if dtype.kind in "iu" else isinstance(value, int | float)


def _numeric_dtype(dtype: np.dtype, where: str) -> np.dtype:
    dtype = dtype.newbyteorder("=")
    if dtype.name not in _ATTR_DTYPES:
        raise GraphError(f"{where}: only arrays of {sorted(_ATTR_DTYPES)} can be saved, got dtype {dtype}")
    return dtype


def _checked_array(values, dtype: np.dtype, shape: tuple, where: str) -> np.ndarray:
    try:
        return np.array(values, dtype=dtype).reshape(shape)
    except (ValueError, TypeError, OverflowError) as err:
        raise GraphFileError(f"{where}: values do not fit dtype {dtype}: {err}") from None


def _restore_generator(state, where: str):
    if not (
        isinstance(state, dict)
        and state.get("bit_generator") == "PCG64"
        and isinstance(state.get("state"), dict)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in state["state"].values())
        and all(
            isinstance(state.get(k), int) and not isinstance(state.get(k), bool) for k in ("has_uint32", "uinteger")
        )
    ):
        raise GraphFileError(f"{where}: a saved generator must be a PCG64 state of ints, got {state!r:.120}")
    generator = random_ops.Generator(None)
    try:
        generator.set_state(state)
    except (ValueError, TypeError, KeyError, OverflowError) as err:
        raise GraphFileError(f"{where}: invalid PCG64 state: {err}") from None
    return generator


# ================================================================== saving
def save_graph(graph: Graph, path) -> None:
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
    codec = _AttrCodec()
    meta = codec.graph_meta(graph, where)
    meta["state"] = []
    for name, var in graph.state.items():
        array = np.asarray(var.numpy())
        spec = _array_spec(name, array, codec.store("state", array), where)
        meta["state"].append(spec | {"trainable": bool(var.trainable)})
    meta["generators"] = [g.get_state() for g in codec.generators]
    arrays = codec.arrays
    try:
        text = json.dumps(meta, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as err:
        raise GraphError(f"{where}: the graph description is not JSON ({err})") from None
    arrays["graph_json"] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    if _is_file_object(path):
        with h5py.File(path, "w") as f:
            _write(f, arrays)
    else:
        with atomic_h5(path) as f:
            _write(f, arrays)


def _write(f: h5py.File, arrays: dict) -> None:
    write_attrs(f, {"format": FORMAT, "format_version": FORMAT_VERSION})
    for key, array in arrays.items():
        write_array(f, key, array)
    write_manifest(f)


def _is_file_object(target) -> bool:
    return hasattr(target, "read") or hasattr(target, "write")


def _value_spec(v: Value) -> dict:
    return {"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name}


def _array_spec(name: str, array: np.ndarray, dataset: str, where: str) -> dict:
    if array.dtype not in dtypes._BY_NP:
        raise GraphError(f"{where}: '{name}' has dtype {array.dtype}, which tapeflow graphs do not hold")
    return {"name": name, "shape": list(array.shape), "dtype": dtypes._BY_NP[array.dtype].name, "dataset": dataset}


# ================================================================== loading
def load_graph(path, graph_class: type = Graph) -> Graph:
    """Read a graph file written by `save_graph` (a path, or a readable binary file object
    such as `io.BytesIO(data)`) as a `graph_class` (tapeflow.graph.runnable's for
    `tp.load_graph`); its state becomes new Variables.

    Every part of the file is checked before use (see the module docstring);
    problems raise GraphFileError naming the file and the offending entry.

    >>> import os, tempfile
    >>> import tapeflow as tp
    >>> v = tp.Variable(tp.zeros((2,)), name="v")
    >>> g = tp.freeze(lambda x: v + x, tp.TensorSpec((2,)))
    >>> tmp = tempfile.TemporaryDirectory()
    >>> g.save(os.path.join(tmp.name, "g.tfg"))
    >>> list(load_graph(os.path.join(tmp.name, "g.tfg")).state)
    ['v']
    >>> tmp.cleanup()
    """
    if _is_file_object(path):
        where = f"load_graph(<{type(path).__name__}>)"
    else:
        path = os.fspath(path)
        where = f"load_graph({path!r})"
    with H5Reader(path, where, error=GraphFileError, missing=GraphFileError) as reader:
        try:
            return _read(reader, where, graph_class)
        except RecursionError:
            raise GraphFileError(f"{where}: the graph description is nested too deeply") from None


class _Stored:
    """The datasets of an open graph file, read on request with their declared shape and dtype."""

    def __init__(self, reader: H5Reader, checked: bool):
        self.reader = reader
        self.checked = checked
        self.datasets = reader.datasets(reader.file)

    def read(self, path, shape: tuple, dtype: np.dtype, where: str, prefix: str) -> np.ndarray:
        if not isinstance(path, str) or not path.startswith(prefix) or path not in self.datasets:
            raise GraphFileError(f"{where}: dataset {path!r:.80} is missing (expected one under '{prefix}')")
        ds = self.datasets[path]
        if tuple(ds.shape) != tuple(shape) or ds.dtype != dtype:
            raise GraphFileError(
                f"{where}: dataset '{path}' is {ds.dtype}{list(ds.shape)}, but the graph declares {dtype}{list(shape)}"
            )
        return self.reader.array(ds, self.checked).reshape(shape)


def _read(reader: H5Reader, where: str, graph_class: type) -> Graph:
    store = _Stored(reader, _check_header(reader, where))
    meta = _read_json(store, where)
    _check_type(meta, dict, where, "the graph description")
    generators = [
        _restore_generator(s, f"{where}: generator {i}") for i, s in enumerate(_list(meta, "generators", where))
    ]
    graph = graph_class(_str(meta, "name", where), _graph_device(meta, where))
    for i, spec in enumerate(_list(meta, "state", where)):
        name, shape, dtype = _typed_spec(spec, f"{where}: state {i}", dynamic=False)
        if name in graph.state:
            raise GraphFileError(f"{where}: state name '{name}' is used twice")
        trainable = spec.get("trainable", True)
        _check_type(trainable, bool, f"{where}: state '{name}'", "'trainable'")
        data = store.read(spec.get("dataset"), shape, dtype.np, f"{where}: state '{name}'", "state/")
        graph.state[name] = Variable(data, trainable=trainable, name=name)
    _read_graph(meta, _AttrCodec(generators, graph_class), store, graph, where)
    for node in graph.nodes:  # a variable lives where the nodes that use it run
        if node.op in (READ, ASSIGN):
            var = graph.state[node.attrs["variable"]]
            home = graph.node_device(node)
            if var._device != home:
                graph.state[node.attrs["variable"]] = Variable(var.to(home), trainable=var.trainable, name=var.name)
    return graph


def _graph_device(meta: dict, where: str):
    """The device a graph whose nodes name devices of their own was saved on (it runs
    there again); None, for the current device, when the file names none."""
    name = meta.get("device")
    if name is None:
        return None
    _check_type(name, str, where, "'device'")
    try:
        return parse_device(name)
    except ValueError as err:
        raise GraphFileError(f"{where}: the graph runs on {name!r}, which this process cannot use: {err}") from None


def _read_graph(meta: dict, codec: _AttrCodec, datasets: _Stored, graph: Graph, where: str) -> Graph:
    """Fill `graph` (its state already read) with the inputs, constants, nodes and outputs of `meta`."""
    values: dict[str, Value] = {}
    declared = _declared_names(meta)

    def define(value: Value, what: str) -> None:
        if value.name in values:
            raise GraphFileError(f"{where}: value name '{value.name}' ({what}) is used twice")
        values[value.name] = value
        graph._names[value.name] = 0

    for i, spec in enumerate(_list(meta, "inputs", where)):
        name, shape, dtype = _typed_spec(spec, f"{where}: input {i}", dynamic=True)
        define(Value(name, shape, dtype, kind="input"), "an input")
        graph.inputs.append(values[name])
    for i, spec in enumerate(_list(meta, "constants", where)):
        name, shape, dtype = _typed_spec(spec, f"{where}: constant {i}", dynamic=False)
        data = datasets.read(spec.get("dataset"), shape, dtype.np, f"{where}: constant '{name}'", "constants/")
        define(Value(name, shape, dtype, kind="const", data=data), "a constant")
        graph.constants.append(values[name])
    node_names: set[str] = set()
    for i, spec in enumerate(_list(meta, "nodes", where)):
        node = _read_node(spec, i, values, declared, codec, datasets, graph, where)
        if node.name in node_names:
            raise GraphFileError(f"{where}: node name '{node.name}' is used twice")
        node_names.add(node.name)
        graph._names[node.name] = 0
        graph.nodes.append(node)
        for v in node.outputs:
            define(v, f"an output of node '{node.name}'")
    for i, name in enumerate(_list(meta, "outputs", where)):
        _check_type(name, str, f"{where}: output {i}", "a value name")
        if name not in values:
            raise GraphFileError(f"{where}: output {i} names value '{name}', which the graph does not define")
        graph.outputs.append(values[name])
    graph.output_structure = _check_structure(meta.get("output_structure"), len(graph.outputs), where)
    try:
        graph.lint()
    except GraphError as err:
        raise GraphFileError(f"{where}: {err}") from None
    return graph


def _check_header(reader: H5Reader, where: str) -> bool:
    """Check the format and version; returns whether the file holds checksums."""
    attrs = reader.attrs(reader.file, checked=False, legacy_text=True)
    fmt, version = attrs.get("format"), attrs.get("format_version")
    if fmt != FORMAT:
        raise GraphFileError(f"{where}: not a {FORMAT} file (its 'format' attribute is {fmt!r:.80})")
    if isinstance(version, bool | np.bool_) or not isinstance(version, int | np.integer) or version < 1:
        raise GraphFileError(f"{where}: invalid 'format_version' {version!r:.40}")
    if version > FORMAT_VERSION:
        raise GraphFileError(
            f"{where}: the file is {FORMAT} version {int(version)}, written by a newer tapeflow; "
            f"this tapeflow reads version {FORMAT_VERSION}"
        )
    checked = version >= CHECKSUMS_SINCE
    if checked:
        reader.header({FORMAT: {version: True}}, version_key="format_version")
    return checked


def _read_json(store: _Stored, where: str):
    ds = store.datasets.get("graph_json")
    if ds is None:
        raise GraphFileError(f"{where}: the 'graph_json' dataset is missing")
    if ds.dtype != np.uint8 or ds.ndim != 1 or ds.shape[0] > _MAX_JSON_BYTES:
        raise GraphFileError(f"{where}: 'graph_json' must be a 1-D uint8 dataset, got {ds.dtype}{ds.shape}")
    data = store.reader.array(ds, store.checked)
    try:
        text = data.tobytes().decode("utf-8")
        return json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise GraphFileError(f"{where}: 'graph_json' is not valid UTF-8 JSON: {err}") from None


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON; non-finite floats are written as {{'float': 'nan'}}")


def _declared_names(meta: dict) -> set[str]:
    """Every value name the file defines (to tell a forward reference from an undefined one)."""
    names = set()
    for node in meta.get("nodes") if isinstance(meta.get("nodes"), list) else []:
        for out in node.get("outputs", []) if isinstance(node, dict) and isinstance(node.get("outputs"), list) else []:
            if isinstance(out, dict) and isinstance(out.get("name"), str):
                names.add(out["name"])
    return names


def _read_node(
    spec, i: int, values: dict, declared: set, codec: _AttrCodec, datasets, graph: Graph, where: str
) -> Node:
    _check_type(spec, dict, f"{where}: node {i}", "a node")
    name = _str(spec, "name", f"{where}: node {i}")
    op_name = _str(spec, "op", f"{where}: node '{name}'")
    here = f"{where}: node '{name}' ({op_name})"
    opdef = None
    if op_name not in (READ, ASSIGN):
        try:
            opdef = get_op(op_name)
        except ValueError:
            raise GraphFileError(
                f"{here}: unknown op {op_name!r}; this tapeflow has no such op in its registry "
                "(ops are looked up by name, nothing is imported)"
            ) from None
    inputs = []
    for j, ref in enumerate(_list(spec, "inputs", here)):
        _check_type(ref, str, f"{here} input {j}", "a value name")
        if ref not in values:
            why = "is defined only later (a cycle, or nodes out of order)" if ref in declared else "is not defined"
            raise GraphFileError(f"{here}: input {j} '{ref}' {why}")
        inputs.append(values[ref])
    raw_attrs = spec.get("attrs", {})
    _check_type(raw_attrs, dict, here, "'attrs'")
    attrs = {k: codec.decode(v, f"{here} attr '{k}'", datasets) for k, v in raw_attrs.items()}
    outputs = []
    node = Node(name, op_name, inputs, attrs, [], _device(spec.get("device"), here))
    for j, out in enumerate(_list(spec, "outputs", here)):
        vname, shape, dtype = _typed_spec(out, f"{here} output {j}", dynamic=True)
        outputs.append(Value(vname, shape, dtype, producer=node, index=j))
    node.outputs = outputs
    if opdef is None:
        _check_state_node(node, graph, here)
    else:
        _check_infer(opdef, node, here)
    return node


def _check_state_node(node: Node, graph: Graph, here: str) -> None:
    if set(node.attrs) != {"variable"} or not isinstance(node.attrs["variable"], str):
        raise GraphFileError(f"{here}: attrs must be exactly {{'variable': <state name>}}, got {node.attrs!r:.80}")
    var = graph.state.get(node.attrs["variable"])
    if var is None:
        raise GraphFileError(f"{here}: names unknown state {node.attrs['variable']!r}; state: {sorted(graph.state)}")
    value = node.outputs[0] if node.op == READ and len(node.outputs) == 1 and not node.inputs else None
    if node.op == ASSIGN and len(node.inputs) == 1 and not node.outputs:
        value = node.inputs[0]
    if value is None:
        raise GraphFileError(
            f"{here}: {READ} takes no inputs and gives one output, {ASSIGN} takes one input and gives none; "
            f"got {len(node.inputs)} inputs, {len(node.outputs)} outputs"
        )
    if value.shape != tuple(var.shape) or value.dtype is not var.dtype:
        raise GraphFileError(
            f"{here}: state '{node.attrs['variable']}' is {var.dtype.name}{list(var.shape)}, "
            f"the node has {value.type_string()}"
        )


def _check_infer(opdef, node: Node, here: str) -> None:
    """Re-run the op's shape rule on the declared input types; the outputs must match."""
    stand_ins = [TracedTensor(v.shape, v.dtype) for v in node.inputs]
    public = node.public_attrs
    _check_attr_names(opdef, len(node.inputs), public, here)
    try:
        specs = opdef.infer(*stand_ins, **public)
    except Exception as err:  # noqa: BLE001 - any failure of the rule on file data is a bad file
        raise GraphFileError(
            f"{here}: the op rejects inputs ({', '.join(v.type_string() for v in node.inputs)}) "
            f"with attrs {sorted(public)}: {type(err).__name__}: {err}"
        ) from None
    got = [(tuple(s), dtypes.as_dtype(d)) for s, d in specs]
    declared = [(v.shape, v.dtype) for v in node.outputs]
    if got != declared:
        show = ", ".join(f"{d.name}{list(s)}" for s, d in got)
        raise GraphFileError(
            f"{here}: declares outputs ({', '.join(v.type_string() for v in node.outputs)}), "
            f"but the op's shape rule gives ({show})"
        )


def _check_attr_names(opdef, n_inputs: int, attrs: dict, here: str) -> None:
    """The attrs must be parameters of the op's forward (a ufunc takes none), so that no
    unexpected keyword from the file reaches a kernel."""
    reference = opdef.reference
    if isinstance(reference, np.ufunc):
        if attrs:
            raise GraphFileError(f"{here}: the op takes no attrs, got {sorted(attrs)}")
        return
    try:
        signature = inspect.signature(reference)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*range(n_inputs), **attrs)
    except TypeError as err:
        raise GraphFileError(
            f"{here}: {n_inputs} inputs and attrs {sorted(attrs)} do not fit the op's parameters {signature}: {err}"
        ) from None


def _check_structure(spec, count: int, where: str, depth: int = 0):
    """An output structure as `flatten_structure` describes it, with leaves in range."""
    if spec is None and depth == 0:
        return None
    bad = GraphFileError(f"{where}: invalid output structure {spec!r:.80}")
    if not isinstance(spec, dict) or len(spec) != 1 or depth > 100:
        raise bad
    ((tag, body),) = spec.items()
    if tag == "leaf":
        if not isinstance(body, int) or isinstance(body, bool) or not 0 <= body < count:
            raise bad
    elif tag in ("list", "tuple"):
        _check_type(body, list, where, "an output structure list")
        for s in body:
            _check_structure(s, count, where, depth + 1)
    elif tag == "dict":
        _check_type(body, list, where, "an output structure dict")
        for item in body:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                raise bad
            _check_structure(item[1], count, where, depth + 1)
    elif tag != "none" or body is not None:
        raise bad
    return spec


# ------------------------------------------------------------------ JSON checks
def _check_type(value, kind, where: str, what: str) -> None:
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise GraphFileError(f"{where}: {what} must be a {kind.__name__}, got {type(value).__name__} {value!r:.60}")


def _str(obj: dict, key: str, where: str) -> str:
    value = obj.get(key)
    _check_type(value, str, where, f"'{key}'")
    if not value:
        raise GraphFileError(f"{where}: '{key}' must not be empty")
    return value


def _list(obj: dict, key: str, where: str) -> list:
    value = obj.get(key)
    _check_type(value, list, where, f"'{key}'")
    return value


def _device(name, where: str) -> str | None:
    """A node's device name (of this process or of a worker), checked and made canonical;
    None when the node has none. Whether the device exists is checked when the graph runs."""
    if name is None:
        return None
    _check_type(name, str, where, "'device'")
    try:
        return local_device_name(name) if is_local_name(name) else canonical_placement(name)
    except ValueError as err:
        raise GraphFileError(f"{where}: {err}") from None


def _dtype(name, where: str) -> dtypes.DType:
    if not isinstance(name, str) or name not in dtypes._BY_NAME:
        raise GraphFileError(f"{where}: dtype {name!r:.40} is not one of {sorted(dtypes._BY_NAME)}")
    return dtypes._BY_NAME[name]


def _np_dtype(name, where: str) -> np.dtype:
    """A numeric NumPy dtype for attr arrays and scalars (named, never parsed from a type string)."""
    if not isinstance(name, str) or name not in _ATTR_DTYPES:
        raise GraphFileError(f"{where}: array dtype {name!r:.40} is not one of {sorted(_ATTR_DTYPES)}")
    return np.dtype(name)


def _shape(shape, where: str, dynamic: bool) -> tuple:
    _check_type(shape, list, where, "a shape")
    for d in shape:
        if d is None and dynamic:
            continue
        if not isinstance(d, int) or isinstance(d, bool):
            raise GraphFileError(f"{where}: shape {shape!r:.80} must hold ints{' or null' if dynamic else ''}")
        if d < 0:
            raise GraphFileError(f"{where}: shape {shape!r:.80} has a negative dimension")
    if len(shape) > 64 or math.prod(d or 1 for d in shape) > MAX_ELEMENTS:
        raise GraphFileError(f"{where}: shape {shape!r:.80} is too large (at most {MAX_ELEMENTS} elements, 64 dims)")
    return tuple(shape)


def _typed_spec(spec, where: str, dynamic: bool) -> tuple[str, tuple, dtypes.DType]:
    _check_type(spec, dict, where, "a value")
    name = _str(spec, "name", where)
    return name, _shape(spec.get("shape"), f"{where} '{name}'", dynamic), _dtype(spec.get("dtype"), f"{where} '{name}'")
