"""Reading graph files, which may come from anyone: every part is checked before use.

Loading never executes code from the file (no pickle, no eval, no import by name): ops
are looked up in the op registry, every node is checked by re-running its shape rule,
every dataset against its declared shape, dtype and checksum, and the file is read
through `tapeflow.files.safe_h5`. A file that fails a check raises `GraphFileError`
naming the file and the entry. docs/file-formats.md describes the layout.

>>> import io
>>> import tapeflow as tp
>>> buffer = io.BytesIO()
>>> tp.freeze(lambda x: x * 3.0, tp.TensorSpec((2,))).save(buffer)
>>> load_graph(io.BytesIO(buffer.getvalue())).op_counts()
{'multiply': 1}
"""

from __future__ import annotations

import inspect
import json
import os

import numpy as np

from tapeflow import dtypes
from tapeflow.devices import canonical_placement, is_local_name, local_device_name, parse_device
from tapeflow.files.safe_h5 import H5Reader, unique_object
from tapeflow.graph.file_format.codec import (
    CHECKSUMS_SINCE,
    FORMAT,
    FORMAT_VERSION,
    AttrCodec,
    GraphFileError,
    check_type,
    checked_dtype,
    checked_shape,
    is_file_object,
    str_field,
)
from tapeflow.graph.ir import ASSIGN, READ, GraphError, GraphIR, Node, Value
from tapeflow.ops import random as random_ops
from tapeflow.ops.registry import get_op
from tapeflow.tensor import TracedTensor, Variable

_MAX_JSON_BYTES = 1 << 30


def load_graph(path, graph_class: type = GraphIR, read_data: bool = True) -> GraphIR:
    """Read a graph file written by `save_graph` (a path, or a readable binary file object
    such as `io.BytesIO(data)`) as a `graph_class` (tapeflow.graph.runnable's for
    `tp.load_graph`); its state becomes new Variables.

    Without `read_data`, the graph is read to be described, not run: state tensors become
    `StateSpec`s and constants read-only zeros of their declared shape, and neither is read
    from the file (array attributes still are: shape rules may need them).

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
    if is_file_object(path):
        where = f"load_graph(<{type(path).__name__}>)"
    else:
        path = os.fspath(path)
        where = f"load_graph({path!r})"
    with H5Reader(path, where, error=GraphFileError, missing=GraphFileError) as reader:
        try:
            return _read(reader, where, graph_class, read_data)
        except RecursionError:
            raise GraphFileError(f"{where}: the graph description is nested too deeply") from None


class _Stored:
    """The datasets of an open graph file, read on request with their declared shape and dtype."""

    def __init__(self, reader: H5Reader, checked: bool, read_data: bool = True):
        self.reader = reader
        self.checked = checked
        self.read_data = read_data
        self.datasets = reader.datasets(reader.file)

    def read(self, path, shape: tuple, dtype: np.dtype, where: str, prefix: str) -> np.ndarray:
        """The dataset's data; without `read_data`, state and constants are not read: a
        read-only array of zeros of the shape stands in (it takes no memory)."""
        if not isinstance(path, str) or not path.startswith(prefix) or path not in self.datasets:
            raise GraphFileError(f"{where}: dataset {path!r:.80} is missing (expected one under '{prefix}')")
        ds = self.datasets[path]
        bits = dtype == dtypes.bfloat16.np  # written as its uint16 bits
        if tuple(ds.shape) != tuple(shape) or ds.dtype != (np.dtype(np.uint16) if bits else dtype):
            raise GraphFileError(
                f"{where}: dataset '{path}' is {ds.dtype}{list(ds.shape)}, but the graph declares {dtype}{list(shape)}"
            )
        if not self.read_data and prefix in ("state/", "constants/"):
            return np.broadcast_to(np.zeros((), dtype), shape)
        data = self.reader.array(ds, self.checked).reshape(shape)
        return data.view(dtype) if bits else data


class StateSpec:
    """The name, shape, dtype and trainability of a state tensor whose data was not read
    (a graph loaded only to be described).

    >>> StateSpec("w", (2, 3), dtypes.float32, True).shape
    (2, 3)
    """

    def __init__(self, name: str, shape: tuple, dtype: dtypes.DType, trainable: bool):
        self.name, self.shape, self.dtype, self.trainable = name, shape, dtype, trainable

    def __repr__(self) -> str:
        return f"StateSpec({self.name!r}, {list(self.shape)}, {self.dtype.name})"


def _read(reader: H5Reader, where: str, graph_class: type, read_data: bool = True) -> GraphIR:
    store = _Stored(reader, _check_header(reader, where), read_data)
    meta = _read_json(store, where)
    check_type(meta, dict, where, "the graph description")
    generators = [
        _restore_generator(s, f"{where}: generator {i}") for i, s in enumerate(_list(meta, "generators", where))
    ]
    graph = graph_class(str_field(meta, "name", where), _graph_device(meta, where))
    for i, spec in enumerate(_list(meta, "state", where)):
        name, shape, dtype = _typed_spec(spec, f"{where}: state {i}", dynamic=False)
        if name in graph.state:
            raise GraphFileError(f"{where}: state name '{name}' is used twice")
        trainable = spec.get("trainable", True)
        check_type(trainable, bool, f"{where}: state '{name}'", "'trainable'")
        data = store.read(spec.get("dataset"), shape, dtype.np, f"{where}: state '{name}'", "state/")
        if read_data:
            graph.state[name] = Variable(data, trainable=trainable, name=name)
        else:
            graph.state[name] = StateSpec(name, shape, dtype, trainable)
    _read_graph(meta, AttrCodec(generators, _subgraph_reader(graph_class)), store, graph, where)
    if not read_data:
        return graph
    for node in graph.nodes:  # a variable lives where the nodes that use it run
        if node.op in (READ, ASSIGN):
            var = graph.state[node.attrs["variable"]]
            home = graph.node_device(node)
            if var._device != home:
                graph.state[node.attrs["variable"]] = Variable(var.to(home), trainable=var.trainable, name=var.name)
    return graph


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


def _graph_device(meta: dict, where: str):
    """The device a graph whose nodes name devices of their own was saved on (it runs
    there again); None, for the current device, when the file names none."""
    name = meta.get("device")
    if name is None:
        return None
    check_type(name, str, where, "'device'")
    try:
        return parse_device(name)
    except ValueError as err:
        raise GraphFileError(f"{where}: the graph runs on {name!r}, which this process cannot use: {err}") from None


def _subgraph_reader(graph_class: type):
    """How the codec reads a subgraph attribute (a `cond` branch, a loop body): checked as a
    whole graph is, made as a `graph_class`."""

    def read(meta: dict, codec: AttrCodec, datasets: _Stored, where: str) -> GraphIR:
        graph = graph_class(str_field(meta, "name", where))
        return _read_graph(meta, codec, datasets, graph, f"{where} subgraph")

    return read


def _read_graph(meta: dict, codec: AttrCodec, datasets: _Stored, graph: GraphIR, where: str) -> GraphIR:
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
        check_type(name, str, f"{where}: output {i}", "a value name")
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
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=unique_object)
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
    spec, i: int, values: dict, declared: set, codec: AttrCodec, datasets, graph: GraphIR, where: str
) -> Node:
    check_type(spec, dict, f"{where}: node {i}", "a node")
    name = str_field(spec, "name", f"{where}: node {i}")
    op_name = str_field(spec, "op", f"{where}: node '{name}'")
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
        check_type(ref, str, f"{here} input {j}", "a value name")
        if ref not in values:
            why = "is defined only later (a cycle, or nodes out of order)" if ref in declared else "is not defined"
            raise GraphFileError(f"{here}: input {j} '{ref}' {why}")
        inputs.append(values[ref])
    raw_attrs = spec.get("attrs", {})
    check_type(raw_attrs, dict, here, "'attrs'")
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


def _check_state_node(node: Node, graph: GraphIR, here: str) -> None:
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
        check_type(body, list, where, "an output structure list")
        for s in body:
            _check_structure(s, count, where, depth + 1)
    elif tag == "dict":
        check_type(body, list, where, "an output structure dict")
        for item in body:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                raise bad
            _check_structure(item[1], count, where, depth + 1)
    elif tag != "none" or body is not None:
        raise bad
    return spec


# ------------------------------------------------------------------ JSON checks
def _list(obj: dict, key: str, where: str) -> list:
    value = obj.get(key)
    check_type(value, list, where, f"'{key}'")
    return value


def _device(name, where: str) -> str | None:
    """A node's device name (of this process or of a worker), checked and made canonical;
    None when the node has none. Whether the device exists is checked when the graph runs."""
    if name is None:
        return None
    check_type(name, str, where, "'device'")
    try:
        return local_device_name(name) if is_local_name(name) else canonical_placement(name)
    except ValueError as err:
        raise GraphFileError(f"{where}: {err}") from None


def _typed_spec(spec, where: str, dynamic: bool) -> tuple[str, tuple, dtypes.DType]:
    check_type(spec, dict, where, "a value")
    name = str_field(spec, "name", where)
    return (
        name,
        checked_shape(spec.get("shape"), f"{where} '{name}'", dynamic),
        checked_dtype(spec.get("dtype"), f"{where} '{name}'"),
    )
