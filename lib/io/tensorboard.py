"""TensorBoard event files, written without TensorFlow or protobuf.

An event file is a sequence of TFRecords, each holding one serialized `Event`
protobuf. This module hand-encodes the few messages the TensorBoard callback needs
(scalars, histograms, and a tapeflow Graph as a GraphDef) with a tiny protobuf encoder, and frames them with the
masked CRC32C checksums that TensorBoard's reader verifies.

>>> import os, tempfile
>>> with tempfile.TemporaryDirectory() as log_dir:
...     with EventFileWriter(log_dir) as writer:
...         writer.add_scalar("loss", 0.25, step=1)
...     [path] = os.listdir(log_dir)
...     records = list(read_records(os.path.join(log_dir, path)))
>>> path.startswith("events.out.tfevents."), len(records)  # the file_version event, then the scalar
(True, 2)
"""

from __future__ import annotations

import os
import socket
import struct
import time
import warnings

import numpy as np

from tapeflow.graph.ir import format_attr
from tapeflow.graph.structure import TensorSpec
from tapeflow.graph.trace import freeze

__all__ = [
    "EventFileWriter",
    "crc32c",
    "masked_crc32c",
    "encode_event",
    "scalar_summary",
    "histogram_summary",
    "graph_def",
    "attr_value",
    "op_graph_def",
    "model_graph_def",
    "read_records",
]

# ------------------------------------------------------------------------ CRC32C


def _crc32c_table() -> tuple[int, ...]:
    """The 256-entry byte table of CRC-32C (Castagnoli, reflected polynomial 0x82F63B78)."""
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return tuple(table)


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C of `data`, the checksum TFRecord framing uses.

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The CRC rotated and offset, as TFRecord stores it (so CRCs of CRCs stay unlikely).

    >>> hex(masked_crc32c(b""))
    '0xa282ead8'
    """
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _tfrecord(data: bytes) -> bytes:
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


def read_records(path) -> list[bytes]:
    """The payloads of the TFRecord file at `path`, each checked against its CRCs."""
    with open(path, "rb") as f:
        blob = f.read()
    records, pos = [], 0
    while pos < len(blob):
        if pos + 12 > len(blob):
            raise ValueError(f"read_records: {path}: truncated record header at byte {pos}")
        header = blob[pos : pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", blob[pos + 8 : pos + 12])
        data = blob[pos + 12 : pos + 12 + length]
        if header_crc != masked_crc32c(header) or len(data) != length or pos + 16 + length > len(blob):
            raise ValueError(f"read_records: {path}: corrupt or truncated record at byte {pos}")
        (data_crc,) = struct.unpack("<I", blob[pos + 12 + length : pos + 16 + length])
        if data_crc != masked_crc32c(data):
            raise ValueError(f"read_records: {path}: data CRC mismatch in the record at byte {pos}")
        records.append(data)
        pos += 16 + length
    return records


# --------------------------------------------------------------- protobuf encoding
# Wire types: 0 varint, 1 fixed 64-bit, 2 length-delimited, 5 fixed 32-bit.


def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # negative int64 values take ten bytes, as in protobuf
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _int_field(field: int, value: int) -> bytes:
    return _key(field, 0) + _varint(int(value))


def _double_field(field: int, value: float) -> bytes:
    return _key(field, 1) + struct.pack("<d", float(value))


def _float_field(field: int, value: float) -> bytes:
    return _key(field, 5) + struct.pack("<f", float(np.float32(value)))


def _bytes_field(field: int, value: bytes | str) -> bytes:
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    return _key(field, 2) + _varint(len(data)) + data


def _packed_doubles(field: int, values) -> bytes:
    return _bytes_field(field, np.asarray(values, dtype="<f8").tobytes())


# ---------------------------------------------------------------------- messages


def encode_event(
    wall_time: float,
    step: int = 0,
    *,
    file_version: str | None = None,
    summary: bytes | None = None,
    graph_def: bytes | None = None,
) -> bytes:
    """An `Event` message carrying one of: a file version, a Summary, or a serialized GraphDef."""
    out = _double_field(1, wall_time) + _int_field(2, step)
    if file_version is not None:
        out += _bytes_field(3, file_version)
    if graph_def is not None:
        out += _bytes_field(4, graph_def)
    if summary is not None:
        out += _bytes_field(5, summary)
    return out


def scalar_summary(tag: str, value: float) -> bytes:
    """A `Summary` with one `simple_value` (stored as float32, as TensorBoard does)."""
    return _bytes_field(1, _bytes_field(1, tag) + _float_field(2, value))


def _histogram_proto(values, bins: int) -> bytes:
    """A `HistogramProto` of the finite entries of `values` in `bins` equal-width buckets."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0:
        return _double_field(1, 0.0) + _double_field(2, 0.0) + _double_field(3, 0.0)
    counts, edges = np.histogram(v, bins=bins)
    return (
        _double_field(1, v.min())
        + _double_field(2, v.max())
        + _double_field(3, v.size)
        + _double_field(4, v.sum())
        + _double_field(5, np.dot(v, v))
        + _packed_doubles(6, edges[1:])  # bucket_limit[i] is the right edge of bucket[i]
        + _packed_doubles(7, counts)
    )


def histogram_summary(tag: str, values, bins: int = 30) -> bytes:
    """A `Summary` with one histogram (`histo`) of `values`; NaN and infinities are left out."""
    if int(bins) < 1:
        raise ValueError(f"histogram_summary: bins must be >= 1, got {bins!r}")
    return _bytes_field(1, _bytes_field(1, tag) + _bytes_field(5, _histogram_proto(values, int(bins))))


def graph_def(nodes) -> bytes:
    """A `GraphDef` from (name, op, inputs) or (name, op, inputs, attrs) tuples: one `NodeDef`
    each, `inputs` naming other nodes (`node:i` for output i > 0), `attrs` mapping names to
    encoded `AttrValue`s (see `attr_value`).

    >>> len(graph_def([("dense", "Dense", []), ("dense_1", "Dense", ["dense"])])) > 0
    True
    """
    out = b""
    for name, op, inputs, *rest in nodes:
        node = _bytes_field(1, name) + _bytes_field(2, op) + b"".join(_bytes_field(3, i) for i in inputs)
        for key, value in sorted((rest[0] if rest else {}).items()):
            node += _bytes_field(5, _bytes_field(1, key) + _bytes_field(2, value))  # map<string, AttrValue> entry
        out += _bytes_field(1, node)
    return out


# TensorFlow's DataType enum values for tapeflow's dtypes.
_DATA_TYPES = {"float16": 19, "float32": 1, "float64": 2, "int32": 3, "int64": 9, "bool": 10}


def _shape_proto(shape) -> bytes:
    """A `TensorShapeProto`; a dynamic (None) dimension has size -1."""
    return b"".join(_bytes_field(2, _int_field(1, -1 if d is None else d)) for d in shape)


def attr_value(value) -> bytes:
    """An encoded `AttrValue` for a bool, int, float, string, dtype name, shape or list of ints.

    Dtypes are given as ("dtype", name), shapes as ("shape", dims) and lists of shapes as
    ("shapes", [dims, ...]); anything else is stored as its text.

    >>> list(attr_value(("dtype", "float32")))  # field 6 (type) = DT_FLOAT
    [48, 1]
    """
    if isinstance(value, tuple) and len(value) == 2 and value[0] in ("dtype", "shape", "shapes"):
        kind, body = value
        if kind == "dtype":
            return _int_field(6, _DATA_TYPES.get(str(body), 0))
        if kind == "shape":
            return _bytes_field(7, _shape_proto(body))
        return _bytes_field(1, b"".join(_bytes_field(7, _shape_proto(s)) for s in body))
    if isinstance(value, bool | np.bool_):
        return _int_field(5, int(value))
    if isinstance(value, int | np.integer):
        return _int_field(3, int(value))
    if isinstance(value, float | np.floating):
        return _float_field(4, value)
    if isinstance(value, tuple | list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return _bytes_field(1, b"".join(_int_field(3, v) for v in value))
    return _bytes_field(2, value if isinstance(value, str) else format_attr(value))


def op_graph_def(graph) -> bytes:
    """A `GraphDef` of a tapeflow Graph: every input, constant, state tensor and node, with
    its dtype and `_output_shapes`, so that TensorBoard draws the dataflow and shows shapes.

    State tensors become `VariableV2` nodes named by their state name; their reads and writes
    are placed under that name (`dense/kernel/read`), so TensorBoard groups them by layer.

    >>> import tapeflow as tp
    >>> g = tp.freeze(lambda x: tp.nn.relu(x), tp.TensorSpec((None, 3)))
    >>> b"Placeholder" in op_graph_def(g) and b"relu_0" in op_graph_def(g)
    True
    """
    taken: set[str] = set()

    def unique(name: str) -> str:
        base, n = name, 0
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        taken.add(name)
        return name

    def typed(values) -> dict:
        attrs = {"_output_shapes": attr_value(("shapes", [v.shape for v in values]))}
        if values:
            attrs["dtype"] = attr_value(("dtype", values[0].dtype.name))
        return attrs

    nodes, node_of = [], {}  # node_of: id(producer) or id(value) -> GraphDef node name

    def ref(value) -> str:
        if value.producer is None:
            return node_of[id(value)]
        name = node_of[id(value.producer)]
        return name if value.index == 0 else f"{name}:{value.index}"

    for v in graph.inputs:
        node_of[id(v)] = unique(v.name)
        nodes.append((node_of[id(v)], "Placeholder", [], {**typed([v]), "shape": attr_value(("shape", v.shape))}))
    for v in graph.constants:
        node_of[id(v)] = unique(v.name)
        nodes.append((node_of[id(v)], "Const", [], typed([v])))
    state_node = {}
    for name, var in graph.state.items():
        state_node[name] = unique(name)
        attrs = {
            "_output_shapes": attr_value(("shapes", [tuple(var.shape)])),
            "dtype": attr_value(("dtype", var.dtype.name)),
            "shape": attr_value(("shape", tuple(var.shape))),
        }
        nodes.append((state_node[name], "VariableV2", [], attrs))
    for node in graph.nodes:
        attrs = {k: attr_value(a) for k, a in node.public_attrs.items() if k != "variable"}
        attrs.update(typed(node.outputs))
        inputs = [ref(v) for v in node.inputs]
        variable = node.attrs.get("variable") if node.op in ("read_variable", "assign_variable") else None
        if variable in state_node:
            suffix = "read" if node.op == "read_variable" else "assign"
            name = unique(f"{state_node[variable]}/{suffix}")
            inputs.insert(0, state_node[variable])
        else:
            name = unique(node.name)
        node_of[id(node)] = name
        nodes.append((name, node.op, inputs, attrs))
    return graph_def(nodes)


def model_graph_def(model, layer_nodes) -> bytes:
    """The model's frozen inference graph as a `GraphDef`; when the model cannot be frozen
    (not built yet, or its call does not trace), its layer graph from `layer_nodes` instead."""
    graph, why = _inference_graph(model)
    if graph is None:
        warnings.warn(f"TensorBoard: writing the layer graph of {model.name}, not its op graph: {why}", stacklevel=3)
        return graph_def(layer_nodes)
    return op_graph_def(graph)


def _inference_graph(model):
    """(the model's inference Graph, None) or (None, the reason it could not be frozen)."""
    freeze_model = getattr(model, "freeze", None)
    if callable(freeze_model):
        try:
            return freeze_model(), None
        except (TypeError, ValueError) as err:
            return None, err
    shape = getattr(model, "_build_input_shape", None)
    if not isinstance(shape, tuple) or not shape:
        return None, "the model is not built"
    why = None
    for spec in ((None, *shape[1:]), shape):  # a dynamic batch first
        try:
            return freeze(lambda x: model(x, training=False), TensorSpec(spec, model.dtype), name=model.name), None
        except (TypeError, ValueError) as err:  # FreezeError is a TypeError
            why = err
    return None, why


# ------------------------------------------------------------------------ writer


class EventFileWriter:
    """Appends events to a new `events.out.tfevents.<time>.<host>` file in `log_dir`.

    The file starts with the `brain.Event:2` version record that TensorBoard expects.
    Writes are buffered; call `flush()` to make them visible and `close()` when done.
    """

    def __init__(self, log_dir, filename_suffix: str = ""):
        self.log_dir = os.fspath(log_dir)
        os.makedirs(self.log_dir, exist_ok=True)
        base = os.path.join(
            self.log_dir, f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}{filename_suffix}"
        )
        for n in range(1000):  # two writers started in the same second get distinct files
            self.path = base if n == 0 else f"{base}.{n}"
            try:
                self._file = open(self.path, "xb")  # closed by close()
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(f"EventFileWriter: could not create a new event file next to {base}")
        self.add_event(encode_event(time.time(), file_version="brain.Event:2"))

    def add_event(self, event: bytes) -> None:
        """Append one serialized `Event`."""
        if self._file is None:
            raise ValueError(f"EventFileWriter: {self.path} is closed")
        self._file.write(_tfrecord(event))

    def add_summary(self, summary: bytes, step: int, wall_time: float | None = None) -> None:
        self.add_event(encode_event(time.time() if wall_time is None else wall_time, step, summary=summary))

    def add_scalar(self, tag: str, value: float, step: int, wall_time: float | None = None) -> None:
        self.add_summary(scalar_summary(tag, value), step, wall_time)

    def add_histogram(self, tag: str, values, step: int, bins: int = 30, wall_time: float | None = None) -> None:
        self.add_summary(histogram_summary(tag, values, bins), step, wall_time)

    def add_graph(self, graph, step: int = 0) -> None:
        """Append a graph: a tapeflow Graph, or a serialized `GraphDef` (see `graph_def`)."""
        data = graph if isinstance(graph, bytes) else op_graph_def(graph)
        self.add_event(encode_event(time.time(), step, graph_def=data))

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> EventFileWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
