"""The graph file format's name and version, and the typed JSON its attributes are written in.

A node attribute may be any of a small closed set of Python values (numbers, strings,
tuples, dicts, dtypes, slices, arrays, random generators, subgraphs). `AttrCodec` writes
each as plain JSON or a one-key typed object and reads it back, checking every value it
decodes: nothing from a file is ever imported, evaluated or unpickled. The format itself is
described in docs/file-formats.md ("Graph files (.tfg)").

>>> codec = AttrCodec()
>>> text = codec.encode((1, float("inf"), slice(None, 2, None)), "example")
>>> text
{'tuple': [1, {'float': 'inf'}, {'slice': [None, 2, None]}]}
>>> codec.decode(text, "example")
(1, inf, slice(None, 2, None))
"""

from __future__ import annotations

import math

import numpy as np

from tapeflow import dtypes
from tapeflow.devices import is_local_name
from tapeflow.files.safe_h5 import FileReadError
from tapeflow.graph.ir import GraphError, GraphIR, Value
from tapeflow.ops import random as random_ops

FORMAT = "tapeflow-graph"
FORMAT_VERSION = 2
CHECKSUMS_SINCE = 2  # files of this version on hold a CRC-32 of every dataset and of the root attributes
MAX_ELEMENTS = 2**31  # the most elements a declared shape may hold
INLINE_ARRAY_LIMIT = 256  # attr arrays up to this size are kept in the JSON, larger ones as datasets
_ATTR_DTYPES = frozenset(
    ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64"]
)


class GraphFileError(GraphError, FileReadError):
    """A graph file that cannot be read: missing, damaged, hostile or of an unknown version."""


class AttrCodec:
    """Typed JSON for node attributes; collects the arrays and generators they refer to."""

    def __init__(self, generators: list | None = None, read_subgraph=None):
        self.arrays: dict[str, np.ndarray] = {}  # dataset path -> array, filled while encoding
        self.generators = [] if generators is None else generators  # the non-global random streams
        # read_subgraph(description, codec, datasets, where) -> the subgraph, checked and built
        self.read_subgraph = read_subgraph
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
        if isinstance(value, GraphIR):
            return {"graph": self._encode_subgraph(value, where)}
        raise GraphError(
            f"{where}: values of type {type(value).__name__} ({value!r:.60}) cannot be stored in a graph file"
        )

    def describe_graph(self, graph: GraphIR, where: str) -> dict:
        """The JSON description of `graph` (state excepted); constants go to datasets."""
        graph.lint()
        constants = []
        for v in graph.constants:
            path = self.store("constants", np.asarray(v.data))
            constants.append(array_spec(v.name, self.arrays[path], path, where))
        nodes = []
        for node in graph.nodes:
            here = f"{where}: node '{node.name}' ({node.op})"
            nodes.append(
                {
                    "name": node.name,
                    "op": node.op,
                    "inputs": [v.name for v in node.inputs],
                    "attrs": {k: self.encode(a, f"{here} attr '{k}'") for k, a in node.attrs.items()},
                    "outputs": [value_spec(v) for v in node.outputs],
                }
            )
            if node.device is not None:
                nodes[-1]["device"] = node.device
        where_run = {"device": str(graph.device)} if any(is_local_name(n.device) for n in graph.nodes) else {}
        return {
            "name": graph.name,
            **where_run,
            "inputs": [value_spec(v) for v in graph.inputs],
            "constants": constants,
            "nodes": nodes,
            "outputs": [v.name for v in graph.outputs],
            "output_structure": graph.output_structure,
        }

    def _encode_subgraph(self, graph: GraphIR, where: str) -> dict:
        if graph.state:
            raise GraphError(f"{where}: a subgraph with its own state ({sorted(graph.state)}) cannot be saved")
        return self.describe_graph(graph, f"{where} subgraph '{graph.name}'")

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
        check_type(body, list, where, "a tuple body")
        return tuple(self.decode(v, where, datasets) for v in body)

    def _decode_dict(self, body, where, datasets):
        check_type(body, list, where, "a dict body")
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
        return checked_dtype(body, where)

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
        dtype = attr_dtype(body[0], where)
        value = self.decode(body[1], where, datasets)
        if not _suits(value, dtype):
            raise GraphFileError(f"{where}: scalar value {value!r:.40} does not suit dtype {dtype}")
        return _checked_array(value, dtype, (), where)[()]

    def _decode_array(self, body, where, datasets):
        if not isinstance(body, dict) or set(body) not in ({"dtype", "shape", "data"}, {"dtype", "shape", "dataset"}):
            raise GraphFileError(f"{where}: an array needs 'dtype', 'shape' and 'data' or 'dataset', got {body!r:.80}")
        dtype = attr_dtype(body["dtype"], where)
        shape = checked_shape(body["shape"], where, dynamic=False)
        if "dataset" in body:
            return datasets.read(body["dataset"], shape, dtype, where, prefix="attr_arrays/")
        data = body["data"]
        check_type(data, list, where, "array data")
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
        check_type(body, dict, where, "a subgraph")
        if body.get("state", []) != [] or "generators" in body:
            raise GraphFileError(f"{where}: a subgraph holds no state or generators of its own")
        return self.read_subgraph(body, self, datasets, where)


_DECODERS = {
    "tuple": AttrCodec._decode_tuple,
    "dict": AttrCodec._decode_dict,
    "float": AttrCodec._decode_float,
    "dtype": AttrCodec._decode_dtype,
    "slice": AttrCodec._decode_slice,
    "ellipsis": AttrCodec._decode_ellipsis,
    "scalar": AttrCodec._decode_scalar,
    "array": AttrCodec._decode_array,
    "generator": AttrCodec._decode_generator,
    "graph": AttrCodec._decode_graph,
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


# ------------------------------------------------------------------ checked JSON fields
def check_type(value, kind, where: str, what: str) -> None:
    """A GraphFileError unless the JSON `value` is a `kind` (a bool never counts as an int)."""
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise GraphFileError(f"{where}: {what} must be a {kind.__name__}, got {type(value).__name__} {value!r:.60}")


def str_field(obj: dict, key: str, where: str) -> str:
    """`obj[key]`, which must be a non-empty string."""
    value = obj.get(key)
    check_type(value, str, where, f"'{key}'")
    if not value:
        raise GraphFileError(f"{where}: '{key}' must not be empty")
    return value


def checked_dtype(name, where: str) -> dtypes.DType:
    """The tapeflow dtype a file names (looked up by name, never parsed)."""
    if not isinstance(name, str) or name not in dtypes._BY_NAME:
        raise GraphFileError(f"{where}: dtype {name!r:.40} is not one of {sorted(dtypes._BY_NAME)}")
    return dtypes._BY_NAME[name]


def attr_dtype(name, where: str) -> np.dtype:
    """A numeric NumPy dtype for attr arrays and scalars (named, never parsed from a type string)."""
    if not isinstance(name, str) or name not in _ATTR_DTYPES:
        raise GraphFileError(f"{where}: array dtype {name!r:.40} is not one of {sorted(_ATTR_DTYPES)}")
    return np.dtype(name)


def checked_shape(shape, where: str, dynamic: bool) -> tuple:
    """A declared shape: non-negative ints (or null, where `dynamic`), within MAX_ELEMENTS."""
    check_type(shape, list, where, "a shape")
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


# ------------------------------------------------------------------ specs and file targets
def is_file_object(target) -> bool:
    return hasattr(target, "read") or hasattr(target, "write")


def value_spec(v: Value) -> dict:
    return {"name": v.name, "shape": list(v.shape), "dtype": v.dtype.name}


def array_spec(name: str, array: np.ndarray, dataset: str, where: str) -> dict:
    if array.dtype not in dtypes._BY_NP:
        raise GraphError(f"{where}: '{name}' has dtype {array.dtype}, which tapeflow graphs do not hold")
    return {"name": name, "shape": list(array.shape), "dtype": dtypes._BY_NP[array.dtype].name, "dataset": dataset}
