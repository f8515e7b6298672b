"""Export a frozen inference Graph as an ONNX model, to run it outside tapeflow.

State (read_variable nodes) and captured constants become initializers, graph
inputs become ONNX inputs (a dynamic first dimension is named "batch"), and
each op is lowered by one converter below. Channels-last convolutions and pools
(2-D and 3-D) are wrapped in Transposes to ONNX's channels-first layout, with their
filters transposed at export. The whole-sequence recurrent ops (lstm_sequence, gru_sequence:
the LSTM and GRU layers in inference) become ONNX's LSTM and GRU, unless they carry a mask.
Ops that ONNX has no exact form for (cbrt, expm1, arctan2, the matrix factorizations, ...)
are not exported.
Graphs that write state (training steps) or draw random numbers are refused,
and an op without a converter raises an ExportError naming it and its node.

>>> import tapeflow as tp
>>> g = tp.freeze(lambda x: tp.nn.relu(x) * 2.0, tp.TensorSpec((None, 3)))
>>> {"conv3d", "einsum", "top_k"} <= set(exportable_ops())
True
>>> from tapeflow import _compat
>>> model = to_onnx(g) if _compat.has_onnx else None
>>> [n.op_type for n in model.graph.node] if model is not None else ['Relu', 'Mul']
['Relu', 'Mul']
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from tapeflow import _compat
from tapeflow.graph.ir import ASSIGN, READ, GraphIR, Node, Value
from tapeflow.ops.fused import PRIMITIVES
from tapeflow.ops.registry import get_op
from tapeflow.ops.shapes import axis_geometry, padded_extent

MIN_OPSET = 13
_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min


class ExportError(ValueError):
    """A graph, or one of its nodes, that has no ONNX form."""


def exportable_ops() -> list[str]:
    """Names of the tapeflow ops that export_onnx can lower.

    >>> "conv2d" in exportable_ops()
    True
    """
    return sorted(_CONVERTERS)


def export_onnx(graph: GraphIR, path, opset: int = 17) -> None:
    """Write `graph` to `path` as a checked ONNX model (atomically: a partial
    file never replaces an existing one).

    >>> import os, tempfile
    >>> import tapeflow as tp
    >>> from tapeflow import _compat
    >>> g = tp.freeze(lambda x: tp.tanh(x), tp.TensorSpec((None, 2)))
    >>> path = os.path.join(tempfile.mkdtemp(), "tanh.onnx")
    >>> _ = export_onnx(g, path) if _compat.has_onnx else open(path, "wb").close()
    >>> os.path.exists(path)
    True
    """
    data = to_onnx(graph, opset).SerializeToString()
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, os.stat(path).st_mode & 0o777 if os.path.exists(path) else 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def to_onnx(graph: GraphIR, opset: int = 17):
    """The ONNX ModelProto of `graph`, validated with onnx.checker.

    >>> import tapeflow as tp
    >>> from tapeflow import _compat
    >>> g = tp.freeze(lambda x: tp.sum(x, axis=1), tp.TensorSpec((None, 4)))
    >>> to_onnx(g).graph.node[0].op_type if _compat.has_onnx else "ReduceSum"
    'ReduceSum'
    """
    onnx = _compat.require_onnx()
    newest = onnx.defs.onnx_opset_version()
    if not isinstance(opset, int) or isinstance(opset, bool) or not MIN_OPSET <= opset <= newest:
        raise ValueError(f"export_onnx: opset must be an int in [{MIN_OPSET}, {newest}], got {opset!r}")
    _check_inference_graph(graph)
    model = _Exporter(graph, opset, onnx).model()
    onnx.checker.check_model(model, full_check=True)
    return model


def _check_inference_graph(graph: GraphIR) -> None:
    for node in graph.nodes:
        if node.op == ASSIGN:
            raise ExportError(
                f"export_onnx: graph '{graph.name}' is a training graph: node '{node.name}' (assign_variable) "
                f"writes state '{node.attrs.get('variable')}'; export a graph of the forward pass only "
                "(freeze `lambda x: model(x, training=False)`)"
            )
        if node.op != READ and _stateful(node.op):
            raise ExportError(
                f"export_onnx: graph '{graph.name}' node '{node.name}' runs the random op '{node.op}'; "
                "an exported model must be deterministic (freeze with training=False so that dropout is off)"
            )


def _stateful(op: str) -> bool:
    try:
        return get_op(op).stateful
    except ValueError:  # an unregistered op: the converter lookup reports it
        return False


def _needed(graph: GraphIR) -> list:
    """The nodes the outputs depend on, in graph order."""
    needed: set[int] = set()
    stack = list(graph.outputs)
    while stack:
        node = stack.pop().producer
        if node is not None and id(node) not in needed:
            needed.add(id(node))
            stack.extend(node.inputs)
    return [node for node in graph.nodes if id(node) in needed]


class _Exporter:
    """Builds the ONNX graph: names, initializers and nodes."""

    def __init__(self, graph: GraphIR, opset: int, onnx):
        self.graph = graph
        self.opset = opset
        self.onnx = onnx
        self.nodes: list = []
        self.initializers: dict[str, np.ndarray] = {}
        self.names: dict[int, str] = {}
        self.taken: set[str] = set()
        self.counts: dict[str, int] = {}
        self.scope = graph.name
        self._small: dict[tuple, str] = {}
        self._state: dict[str, str] = {}
        self._derived: dict[tuple, str] = {}

    # ------------------------------------------------------------ names
    def claim(self, name: str) -> str:
        """`name` if it is free, else `name_<n>` for the first free n."""
        if name in self.taken:
            n = self.counts.get(name, 1)
            while f"{name}_{n}" in self.taken:
                n += 1
            self.counts[name] = n + 1
            name = f"{name}_{n}"
        self.taken.add(name)
        return name

    def const(self, array, base: str = "const") -> str:
        """An initializer holding `array` (small ones are shared)."""
        array = np.asarray(array)
        key = (array.dtype.str, array.shape, array.tobytes()) if array.size <= 64 else None
        if key is not None and key in self._small:
            return self._small[key]
        name = self.claim(base)
        self.initializers[name] = array
        if key is not None:
            self._small[key] = name
        return name

    def ints(self, values) -> str:
        return self.const(np.asarray(list(values), dtype=np.int64), "ints")

    def scalar(self, value, dtype) -> str:
        return self.const(np.asarray(value, dtype=dtype), "scalar")

    def emit(self, op_type: str, inputs, out=None, **attrs):
        """Append an ONNX node writing `out` (a name, a list of names, or None for
        a new name); returns its output name (or names, for several)."""
        outs = [self.claim(f"{self.scope}/{op_type}")] if out is None else [out] if isinstance(out, str) else out
        name = self.claim(f"{self.scope}/{op_type}#")
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if len(outs) == 1 else outs

    def finish(self, result: str, out: str) -> None:
        """Make `out` hold `result`: rename the last node's output when it made
        `result`, else copy with an Identity."""
        last = self.nodes[-1] if self.nodes else None
        if last is not None and list(last.output) == [result] and result not in self.initializers:
            last.output[0] = out
        else:
            self.emit("Identity", [result], out)

    def reduce(self, op_type: str, x: str, axes, keepdims: bool, out: str) -> str:
        """A Reduce* node; its axes are an input from opset 18 (ReduceSum: 13)."""
        if op_type == "ReduceSum" or self.opset >= 18:
            return self.emit(op_type, [x, self.ints(axes)], out, keepdims=int(keepdims))
        return self.emit(op_type, [x], out, axes=list(axes), keepdims=int(keepdims))

    def transposed(self, name: str, perm) -> str:
        """`name` with axes permuted: a new initializer for a constant, else a Transpose node."""
        if name in self.initializers:
            key = (name, tuple(perm))
            if key not in self._derived:
                array = np.ascontiguousarray(self.initializers[name].transpose(perm))
                self._derived[key] = self.const(array, f"{name}/transposed")
            return self._derived[key]
        return self.emit("Transpose", [name], perm=list(perm))

    # ------------------------------------------------------------ building
    def model(self):
        helper, graph = self.onnx.helper, self.graph
        inputs = []
        for v in graph.inputs:
            self.names[id(v)] = self.claim(v.name)
            dims = [d if d is not None else "batch" if i == 0 else f"{v.name}_dim{i}" for i, d in enumerate(v.shape)]
            inputs.append(helper.make_tensor_value_info(self.names[id(v)], _elem_type(helper, v), dims))
        for v in graph.constants:
            self.names[id(v)] = self.claim(v.name)
            self.initializers[self.names[id(v)]] = np.asarray(v.data)
        for node in _needed(graph):
            if node.op == READ:
                self.names[id(node.outputs[0])] = self._read(node)
                continue
            self._convert(node)
        outputs = []
        seen: set[str] = set()
        produced = {o for n in self.nodes for o in n.output}
        for i, v in enumerate(graph.outputs):
            name = self.names[id(v)]
            if name not in produced or name in seen:
                name = self.emit("Identity", [name], self.claim(f"output_{i}"))
            seen.add(name)
            outputs.append(helper.make_tensor_value_info(name, _elem_type(helper, v), list(v.shape)))
        used = {i for n in self.nodes for i in n.input} | seen
        tensors = [
            self.onnx.numpy_helper.from_array(np.ascontiguousarray(a).reshape(np.shape(a)), name)  # scalars stay 0-D
            for name, a in self.initializers.items()
            if name in used
        ]
        body = helper.make_graph(self.nodes, graph.name, inputs, outputs, initializer=tensors)
        opsets = [helper.make_opsetid("", self.opset)]
        return helper.make_model(
            body,
            opset_imports=opsets,
            producer_name="tapeflow",
            ir_version=helper.find_min_ir_version_for(opsets),
        )

    def _read(self, node) -> str:
        var = node.attrs["variable"]
        if var not in self._state:
            name = self.claim(var)
            self.initializers[name] = np.asarray(self.graph.state[var].numpy())
            self._state[var] = name
        return self._state[var]

    def _convert(self, node) -> None:
        convert = _CONVERTERS.get(node.op)
        if convert is None:
            raise ExportError(
                f"export_onnx: op '{node.op}' (node '{node.name}' in graph '{self.graph.name}') cannot be "
                f"exported to ONNX; exportable ops: {', '.join(exportable_ops())}"
            )
        ins = [self.names[id(v)] for v in node.inputs]
        outs = [self.claim(v.name) for v in node.outputs]
        self.scope = node.name
        try:
            convert(self, node, outs, *ins)
        except ExportError:
            raise
        except Exception as exc:  # noqa: BLE001 - re-raised with the node named
            raise ExportError(
                f"export_onnx: node '{node.name}' ({node.op}, attrs {node.public_attrs}) could not be "
                f"converted: {type(exc).__name__}: {exc}"
            ) from exc
        for v, name in zip(node.outputs, outs, strict=True):
            self.names[id(v)] = name


def _elem_type(helper, v: Value) -> int:
    return helper.np_dtype_to_tensor_dtype(v.dtype.np)


def _unsupported(node, why: str) -> ExportError:
    return ExportError(f"export_onnx: node '{node.name}' ({node.op}, attrs {node.public_attrs}) {why}")


# ---------------------------------------------------------------- converters
_CONVERTERS: dict = {}


def _converts(*ops):
    def register(fn):
        for op in ops:
            _CONVERTERS[op] = fn
        return fn

    return register


_ONE_TO_ONE = {  # ops with no attrs whose ONNX op computes the same thing
    "neg": "Neg",
    "abs": "Abs",
    "sign": "Sign",
    "exp": "Exp",
    "log": "Log",
    "sqrt": "Sqrt",
    "reciprocal": "Reciprocal",
    "sin": "Sin",
    "cos": "Cos",
    "tanh": "Tanh",
    "sigmoid": "Sigmoid",
    "erf": "Erf",
    "relu": "Relu",
    "softplus": "Softplus",
    "identity": "Identity",
    "stop_gradient": "Identity",
    "logical_not": "Not",
    "logical_and": "And",
    "logical_or": "Or",
    "subtract": "Sub",
    "pow": "Pow",
    "maximum": "Max",
    "minimum": "Min",
    "equal": "Equal",
    "less": "Less",
    "less_equal": "LessOrEqual",
    "greater": "Greater",
    "greater_equal": "GreaterOrEqual",
    "where": "Where",
    "matmul": "MatMul",
    "gather_nd": "GatherND",
    "arcsin": "Asin",
    "arccos": "Acos",
    "arctan": "Atan",
    "arcsinh": "Asinh",
    "arccosh": "Acosh",
    "arctanh": "Atanh",
    "sinh": "Sinh",
    "cosh": "Cosh",
    "tan": "Tan",
    "floor": "Floor",
    "ceil": "Ceil",
    "det": "Det",
}


@_converts(*_ONE_TO_ONE)
def _one_to_one(ex, node, outs, *ins):
    ex.emit(_ONE_TO_ONE[node.op], ins, outs[0])


@_converts("copy_to_device")
def _copy_to_device(ex, node, outs, *ins):
    ex.emit("Identity", ins, outs[0])  # onnxruntime places the whole model itself


@_converts("concat")
def _concat(ex, node, outs, *ins):
    ex.emit("Concat", ins, outs[0], axis=node.attrs["axis"])


@_converts("add", "multiply")
def _add_mul(ex, node, outs, a, b):
    boolean = node.inputs[0].dtype.kind == "b"  # NumPy: + is `or`, * is `and` on bools
    op_type = {"add": ("Add", "Or"), "multiply": ("Mul", "And")}[node.op][boolean]
    ex.emit(op_type, [a, b], outs[0])


@_converts("divide")
def _divide(ex, node, outs, a, b):
    if node.inputs[0].dtype.kind != "f":  # true division of integers gives floats
        to = _elem_type(ex.onnx.helper, node.outputs[0])
        a, b = ex.emit("Cast", [a], to=to), ex.emit("Cast", [b], to=to)
    ex.emit("Div", [a, b], outs[0])


@_converts("not_equal")
def _not_equal(ex, node, outs, a, b):
    ex.emit("Not", [ex.emit("Equal", [a, b])], outs[0])


@_converts("square")
def _square(ex, node, outs, x):
    ex.emit("Mul", [x, x], outs[0])


@_converts("rsqrt")
def _rsqrt(ex, node, outs, x):
    ex.emit("Reciprocal", [ex.emit("Sqrt", [x])], outs[0])


@_converts("log1p")
def _log1p(ex, node, outs, x):
    ex.emit("Log", [ex.emit("Add", [x, ex.scalar(1, node.inputs[0].dtype.np)])], outs[0])


@_converts("clip")
def _clip(ex, node, outs, x):
    dtype = node.inputs[0].dtype.np
    bounds = ["" if b is None else ex.scalar(b, dtype) for b in (node.attrs["lo"], node.attrs["hi"])]
    while bounds and bounds[-1] == "":
        bounds.pop()
    ex.emit("Clip", [x, *bounds], outs[0])


@_converts("cast")
def _cast(ex, node, outs, x):
    ex.emit("Cast", [x], outs[0], to=_elem_type(ex.onnx.helper, node.outputs[0]))


@_converts("full_like")
def _full_like(ex, node, outs, x):
    fill = np.asarray([node.attrs["value"]], dtype=node.outputs[0].dtype.np)
    value = ex.onnx.numpy_helper.from_array(fill)
    ex.emit("ConstantOfShape", [ex.emit("Shape", [x])], outs[0], value=value)


@_converts("fused_elementwise")
def _fused_elementwise(ex, node, outs, *inputs):
    """Unfold the fused program (see tapeflow.ops.fused) into the ONNX nodes of its
    instructions, each converted as the primitive op's own node would be."""
    dtype = node.outputs[0].dtype
    regs: list[str] = []
    uses: list[frozenset] = []  # the inputs each register depends on
    for k, step in enumerate(node.attrs["program"]):
        name, args = step[0], step[1:]
        if name == "input":
            regs.append(inputs[args[0]])
            uses.append(frozenset(args))
            continue
        if name == "const":
            regs.append(ex.scalar(args[0], dtype.np))
            uses.append(frozenset())
            continue
        convert = _CONVERTERS.get(name) if name in PRIMITIVES else None
        if convert is None:
            raise _unsupported(node, f"has the instruction {step!r}, which has no ONNX conversion")
        operands = [Value(f"{node.name}/{k}/{i}", (), dtype) for i in range(len(args))]
        (out,) = instruction = [Value(f"{node.name}/{k}", (), dtype)]
        regs.append(ex.claim(f"{node.name}/{name}"))
        convert(ex, Node(out.name, name, operands, {}, instruction), [regs[-1]], *(regs[a] for a in args))
        uses.append(frozenset().union(*(uses[a] for a in args)))
    result = regs[-1]
    for i in sorted(set(range(len(inputs))) - uses[-1]):  # every input shapes the result, used or not
        result = ex.emit("Expand", [result, ex.emit("Shape", [inputs[i]])])
    ex.finish(result, outs[0])


# ------------------------------------------------------------------ reductions
_REDUCE_OPS = {
    "sum": "ReduceSum",
    "max": "ReduceMax",
    "min": "ReduceMin",
    "prod": "ReduceProd",
    "logsumexp": "ReduceLogSumExp",
}


@_converts(*_REDUCE_OPS)
def _reduce(ex, node, outs, x):
    axes, keepdims = node.attrs["axes"], node.attrs["keepdims"]
    if node.inputs[0].dtype.kind == "b":  # a sum of bools counts them
        x = ex.emit("Cast", [x], to=ex.onnx.TensorProto.INT64)
    if not axes:  # NumPy reduces over no axes: the input itself
        ex.emit("Identity", [x], outs[0])
    else:
        ex.reduce(_REDUCE_OPS[node.op], x, axes, keepdims, outs[0])


@_converts("argmax", "argmin")
def _arg_extreme(ex, node, outs, x):
    axis = node.attrs["axis"]
    if axis is None:  # over the flattened tensor
        x, axis = ex.emit("Reshape", [x, ex.ints([-1])]), 0
    op_type = "ArgMax" if node.op == "argmax" else "ArgMin"
    ex.emit(op_type, [x], outs[0], axis=axis, keepdims=0, select_last_index=0)


# ---------------------------------------------------------------- shape ops
@_converts("reshape")
def _reshape(ex, node, outs, x):
    ex.emit("Reshape", [x, ex.ints(_reshape_target(node))], outs[0])


def _reshape_target(node) -> list[int]:
    """The ONNX Reshape shape: the static result, or the op's shape attr with
    None (keep the input's dimension) as ONNX's 0, which means the same."""
    dst, shape = node.outputs[0].shape, node.attrs["shape"]
    if None not in dst:
        return list(dst)
    if 0 in shape:
        raise _unsupported(node, f"reshapes to {shape}: a 0 dimension beside a dynamic one has no ONNX form")
    return [0 if d is None else d for d in shape]


@_converts("transpose")
def _transpose(ex, node, outs, x):
    ex.emit("Transpose", [x], outs[0], perm=list(node.attrs["perm"]))


@_converts("broadcast_to")
def _broadcast_to(ex, node, outs, x):
    ex.emit("Expand", [x, ex.ints(node.attrs["shape"])], outs[0])


@_converts("split")
def _split(ex, node, outs, x):
    ex.emit("Split", [x, ex.ints(node.attrs["sizes"])], outs, axis=node.attrs["axis"])


@_converts("pad")
def _pad(ex, node, outs, x):
    pairs = node.attrs["paddings"]
    pads = ex.ints([a for a, _ in pairs] + [b for _, b in pairs])
    value = ex.scalar(node.attrs["constant_value"], node.inputs[0].dtype.np)
    ex.emit("Pad", [x, pads, value], outs[0], mode="constant")


@_converts("tile")
def _tile(ex, node, outs, x):
    ex.emit("Tile", [x, ex.ints(node.attrs["multiples"])], outs[0])


@_converts("gather")
def _gather(ex, node, outs, x, indices):
    ex.emit("Gather", [x, indices], outs[0], axis=node.attrs["axis"])


@_converts("one_hot")
def _one_hot(ex, node, outs, indices):
    # Compared with a range rather than ONNX OneHot, which counts negative indices from the end.
    a = node.attrs
    dtype = node.outputs[0].dtype.np
    span = ex.const(np.arange(a["depth"], dtype=node.inputs[0].dtype.np), "range")
    hot = ex.emit("Equal", [ex.emit("Unsqueeze", [indices, ex.ints([-1])]), span])
    ex.emit("Where", [hot, ex.scalar(a["on_value"], dtype), ex.scalar(a["off_value"], dtype)], outs[0])


@_converts("getitem")
def _getitem(ex, node, outs, x):
    """Basic indexing (ints, slices, None, Ellipsis) as Slice + Squeeze +
    Unsqueeze, and one integer array (with ints beside it) as a Gather."""
    rank = node.inputs[0].ndim
    items = _expand_ellipsis(node, node.attrs["index"], rank)
    arrays = [i for i, item in enumerate(items) if isinstance(item, np.ndarray)]
    if arrays:
        if len(arrays) > 1 or items[arrays[0]].dtype.kind == "b":
            raise _unsupported(node, "indexes with a bool mask or several integer arrays, which has no ONNX form")
        advanced = [i for i, item in enumerate(items) if isinstance(item, np.ndarray | int)]
        if advanced != list(range(advanced[0], advanced[-1] + 1)):
            raise _unsupported(node, "mixes an integer array with ints apart from it (NumPy moves those axes)")
    bounds: list[tuple] = []  # (axis, start, end, step) of each Slice
    gather_axis = None
    kept: list[str] = []  # after the Gather: one letter per axis, 'i' for those an int index removes
    final: list[str] = []  # the output: 'n' where None inserts an axis
    axis = 0
    for item in items:
        if item is None:
            final.append("n")
            continue
        if isinstance(item, np.ndarray):
            gather_axis, gather_index = axis, item
            kept += ["g"] * item.ndim
            final += ["g"] * item.ndim
        elif isinstance(item, int):
            bounds.append((axis, item, item + 1 if item != -1 else _INT64_MAX, 1))
            kept.append("i")
        else:
            if item != slice(None):
                step = 1 if item.step is None else item.step
                first = item.start if item.start is not None else 0 if step > 0 else _INT64_MAX
                last = item.stop if item.stop is not None else _INT64_MAX if step > 0 else _INT64_MIN
                bounds.append((axis, first, last, step))
            kept.append("s")
            final.append("s")
        axis += 1
    kept += ["s"] * (rank - axis)
    final += ["s"] * (rank - axis)
    if bounds:
        axes, starts, ends, steps = zip(*bounds, strict=True)
        x = ex.emit("Slice", [x, ex.ints(starts), ex.ints(ends), ex.ints(axes), ex.ints(steps)])
    if gather_axis is not None:
        x = ex.emit("Gather", [x, ex.const(gather_index, "index")], axis=gather_axis)
    squeezed = [i for i, k in enumerate(kept) if k == "i"]
    if squeezed:
        x = ex.emit("Squeeze", [x, ex.ints(squeezed)])
    inserted = [i for i, k in enumerate(final) if k == "n"]
    if inserted:
        x = ex.emit("Unsqueeze", [x, ex.ints(inserted)])
    ex.finish(x, outs[0])


@_converts("getitem_grad")
def _getitem_grad(ex, node, outs, g, *like):
    """`g` scattered into zeros at the flat positions that the same index picks from an
    iota of the indexed shape (converted as getitem); repeated array indices add up."""
    shape, index = node.attrs["shape"], node.attrs["index"]
    if like:  # the shape is known when the graph runs
        count = ex.emit("Range", [ex.scalar(0, np.int64), ex.emit("Size", [like[0]]), ex.scalar(1, np.int64)])
        iota = ex.emit("Reshape", [count, ex.emit("Shape", [like[0]])])
    else:
        iota = ex.const(np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape), "iota")
    indexed = Value(f"{node.name}/indexed", node.inputs[1].shape if like else shape, "int64")
    picked = Value(f"{node.name}/positions", node.inputs[0].shape, "int64")
    positions = ex.claim(picked.name)
    _getitem(ex, Node(picked.name, "getitem", [indexed], {"index": index}, [picked]), [positions], iota)
    adds = _has_array(index)
    if adds:
        _needs_opset(ex, node, 16, "ScatterElements with reduction='add', for repeated indices")
    flat = ex.ints([-1])
    zeros = _full_of(ex, node, ex.emit("Reshape", [iota, flat]), 0)
    updates = [ex.emit("Reshape", [positions, flat]), ex.emit("Reshape", [g, flat])]
    dx = ex.emit("ScatterElements", [zeros, *updates], axis=0, **({"reduction": "add"} if adds else {}))
    ex.emit("Reshape", [dx, ex.emit("Shape", [iota])], outs[0])


def _has_array(index) -> bool:
    return any(isinstance(i, np.ndarray) and i.ndim > 0 for i in index)


def _expand_ellipsis(node, index: tuple, rank: int) -> list:
    consumed = sum(1 for i in index if i is not None and i is not Ellipsis)
    out: list = []
    for item in index:
        if item is Ellipsis:
            out += [slice(None)] * (rank - consumed)
        elif isinstance(item, np.ndarray) and item.ndim == 0 and item.dtype.kind in "iu":
            out.append(int(item))
        else:
            out.append(item)
    return out


# ------------------------------------------------------- convolution, pooling
def _channels_first(rank: int) -> list[int]:
    return [0, rank - 1, *range(1, rank - 1)]


def _channels_last(rank: int) -> list[int]:
    return [0, *range(2, rank), 1]


def _filter_to_onnx(rank: int) -> list[int]:
    """Spatial..., in, out (HWIO, DHWIO) to out, in, spatial... (OIHW, OIDHW)."""
    return [rank - 1, rank - 2, *range(rank - 2)]


def _window_geometry(node, sizes, kernel, strides, padding, dilations) -> tuple[list, list, list]:
    """(pads before, pads after, tail) per spatial axis of a tapeflow window op: the
    padding the windows reach (the odd 'SAME' cell goes last, as in TensorFlow) and the
    input cells past the last window, which a transposed convolution gives back as zeros."""
    pairs = [(0, 0)] * len(sizes) if isinstance(padding, str) else [tuple(p) for p in padding]
    before, after, tail = [], [], []
    for size, k, s, d, pair in zip(sizes, kernel, strides, dilations, pairs, strict=True):
        if size is None:
            raise _unsupported(node, "has a spatial size unknown at export, which its padding depends on")
        out, first = axis_geometry(node.op, size, k, s, d, padding, pair)
        reach = (out - 1) * s + (k - 1) * d + 1
        before.append(first)
        after.append(padded_extent(size, out, k, s, d, first) - size - first)
        tail.append(max(size + first - reach, 0))
    return before, after, tail


@_converts("conv2d", "fused_conv2d", "conv3d", "depthwise_conv2d")
def _conv(ex, node, outs, x, w, bias=None):
    """Channels-last conv2d/conv3d (with the bias and relu of fused_conv2d) and depthwise
    conv2d as ONNX's channels-first Conv between Transposes."""
    a, rank = node.attrs, node.inputs[0].ndim
    kernel = node.inputs[1].shape[: rank - 2]
    before, after, _ = _window_geometry(
        node, node.inputs[0].shape[1:-1], kernel, a["strides"], a["padding"], a["dilations"]
    )
    w, group = _filter(ex, node, w)
    operands = [ex.emit("Transpose", [x], perm=_channels_first(rank)), w] + ([bias] if bias is not None else [])
    conv = dict(kernel_shape=list(kernel), strides=list(a["strides"]), dilations=list(a["dilations"]), group=group)
    y = _activate(ex, node, ex.emit("Conv", operands, pads=before + after, **conv))
    ex.emit("Transpose", [y], outs[0], perm=_channels_last(rank))


def _filter(ex, node, w: str) -> tuple[str, int]:
    """The ONNX weight of a convolution's filter, and its group count. A depthwise filter
    (kh, kw, C, multiplier) is one group per input channel: (C * multiplier, 1, kh, kw)."""
    rank = node.inputs[1].ndim
    if not node.op.startswith("depthwise"):
        return ex.transposed(w, _filter_to_onnx(rank)), 1
    kh, kw, channels, multiplier = node.inputs[1].shape
    grouped = (kh, kw, 1, channels * multiplier)
    if w in ex.initializers:
        w = ex.const(ex.initializers[w].reshape(grouped), f"{w}/grouped")
    else:
        w = ex.emit("Reshape", [w, ex.ints(grouped)])
    return ex.transposed(w, _filter_to_onnx(rank)), channels


@_converts("conv2d_input_grad", "conv3d_input_grad", "depthwise_conv2d_input_grad")
def _conv_transpose(ex, node, outs, dy, w):
    """The gradient of a convolution for its input (conv2d_transpose) as ONNX ConvTranspose:
    the padding cropped, and the input cells no window reached padded back as zeros."""
    a, rank = node.attrs, node.inputs[0].ndim
    kernel = node.inputs[1].shape[: rank - 2]
    before, after, tail = _window_geometry(node, a["input_size"], kernel, a["strides"], a["padding"], a["dilations"])
    w, group = _filter(ex, node, w)
    operands = [ex.emit("Transpose", [dy], perm=_channels_first(rank)), w]
    conv = dict(kernel_shape=list(kernel), strides=list(a["strides"]), dilations=list(a["dilations"]), group=group)
    y = ex.emit("ConvTranspose", operands, pads=before + after, output_padding=tail, **conv)
    ex.emit("Transpose", [y], outs[0], perm=_channels_last(rank))


@_converts("fused_matmul")
def _fused_matmul(ex, node, outs, a, w, bias):
    ex.finish(_activate(ex, node, ex.emit("Add", [ex.emit("MatMul", [a, w]), bias])), outs[0])


def _activate(ex, node, y: str) -> str:
    """The activation a fused layer op applies after its bias."""
    activation = node.attrs.get("activation", "linear")
    if activation == "linear":
        return y
    if activation == "relu":
        return ex.emit("Relu", [y])
    raise _unsupported(node, f"applies the activation {activation!r}, which has no ONNX conversion")


@_converts("max_pool2d", "avg_pool2d", "max_pool3d", "avg_pool3d")
def _pool(ex, node, outs, x):
    a, rank = node.attrs, node.inputs[0].ndim
    ones = (1,) * (rank - 2)
    before, after, _ = _window_geometry(node, node.inputs[0].shape[1:-1], a["ksize"], a["strides"], a["padding"], ones)
    average = node.op.startswith("avg")
    extra = {"count_include_pad": 0} if average else {}  # padded cells are not counted
    nchw = ex.emit("Transpose", [x], perm=_channels_first(rank))
    window = dict(kernel_shape=list(a["ksize"]), strides=list(a["strides"]), pads=before + after, **extra)
    y = ex.emit("AveragePool" if average else "MaxPool", [nchw], **window)
    ex.emit("Transpose", [y], outs[0], perm=_channels_last(rank))


# ------------------------------------------------- elementwise beyond one-to-one
def _needs_opset(ex, node, opset: int, why: str) -> None:
    if ex.opset < opset:
        raise _unsupported(node, f"needs opset {opset} or newer ({why}); export with opset={opset}")


def _full_of(ex, node, like: str, value) -> str:
    """A tensor shaped as `like` holding `value` in the node's output dtype."""
    fill = ex.onnx.numpy_helper.from_array(np.asarray([value], dtype=node.outputs[0].dtype.np))
    return ex.emit("ConstantOfShape", [ex.emit("Shape", [like])], value=fill)


@_converts("isnan", "isinf", "isfinite")
def _predicate(ex, node, outs, x):
    dtype = node.inputs[0].dtype
    if dtype.kind != "f":  # integers and bools are always finite numbers
        ex.finish(_full_of(ex, node, x, node.op == "isfinite"), outs[0])
        return
    if dtype.bits < 32:  # IsInf takes 16-bit floats from opset 20 only; widening is exact
        x = ex.emit("Cast", [x], to=ex.onnx.TensorProto.FLOAT)
    if node.op == "isnan":
        ex.emit("IsNaN", [x], outs[0])
    elif node.op == "isinf":
        ex.emit("IsInf", [x], outs[0])
    else:
        ex.emit("Not", [ex.emit("Or", [ex.emit("IsNaN", [x]), ex.emit("IsInf", [x])])], outs[0])


@_converts("signbit")
def _signbit(ex, node, outs, x):
    if node.inputs[0].dtype.kind == "f":  # -0.0 and a negative NaN have no ONNX test
        raise _unsupported(node, "reads the sign bit of floats, which ONNX cannot (-0.0 and negative NaNs)")
    if node.inputs[0].dtype.kind == "b":
        ex.finish(_full_of(ex, node, x, False), outs[0])
    else:
        ex.emit("Less", [x, ex.scalar(0, node.inputs[0].dtype.np)], outs[0])


@_converts("trunc")
def _trunc(ex, node, outs, x):
    # s * floor(s * x) with s = -1 where x < 0: no Where, which may drop the sign of a zero
    dtype = node.inputs[0].dtype.np
    sign = _unit_sign(ex, dtype, ex.emit("Less", [x, ex.scalar(0, dtype)]))
    ex.emit("Mul", [sign, ex.emit("Floor", [ex.emit("Mul", [sign, x])])], outs[0])


def _unit_sign(ex, dtype, negative: str) -> str:
    """-1.0 where `negative`, else 1.0."""
    return ex.emit("Where", [negative, ex.scalar(-1, dtype), ex.scalar(1, dtype)])


@_converts("round_half_even")
def _round_half_even(ex, node, outs, x):
    """NumPy's round: x * 10**d rounded half to even (ONNX Round), then / 10**d; for a
    negative d, / 10**-d then * 10**-d. Integers go through float64 as in NumPy, and 16-bit
    floats through float32, rounded back to 16 bits after each step as NumPy's half ops do."""
    decimals, dtype = node.attrs["decimals"], node.inputs[0].dtype
    if dtype.kind != "f" and decimals >= 0:
        ex.emit("Identity", [x], outs[0])
        return
    if decimals == 0:
        ex.emit("Round", [x], outs[0])
        return
    to_type = ex.onnx.helper.np_dtype_to_tensor_dtype
    work = np.dtype(np.float64) if dtype.kind != "f" else np.dtype(np.float32) if dtype.bits < 32 else dtype.np
    scale = ex.scalar(np.asarray(10.0 ** abs(decimals), dtype.np if dtype.kind == "f" else work), work)
    if work != dtype.np:
        x = ex.emit("Cast", [x], to=to_type(work))
    into, back = ("Mul", "Div") if decimals > 0 else ("Div", "Mul")
    y = ex.emit(into, [x, scale])
    if dtype.kind == "f" and work != dtype.np:
        y = ex.emit("Cast", [ex.emit("Cast", [y], to=to_type(dtype.np))], to=to_type(work))
    y = ex.emit(back, [ex.emit("Round", [y]), scale])
    if work != dtype.np:
        y = ex.emit("Cast", [y], to=_elem_type(ex.onnx.helper, node.outputs[0]))
    ex.finish(y, outs[0])


def _is_negative(ex, dtype, x: str) -> str:
    """x < 0, counting -0.0 (whose reciprocal is -inf) as negative."""
    zero = ex.scalar(0, dtype)
    return ex.emit("Or", [ex.emit("Less", [x, zero]), ex.emit("Less", [ex.emit("Reciprocal", [x]), zero])])


def _float_floor_mod_div(ex, node, a: str, b: str, out: str) -> None:
    """NumPy's float modulo and floor division (npy_divmod), step by step: the C fmod,
    moved to the divisor's side, and the quotient of what remains rounded to the nearest
    integer (so that 1 // 0.1 is 9.0, as in NumPy). Both results carry the sign NumPy
    gives them (also on zeros: set by multiplying |result| by +-1, as ONNX has no copysign);
    a zero divisor gives NaN for modulo and a / b for floor division."""
    dtype = node.inputs[0].dtype.np
    zero, one, half = (ex.scalar(v, dtype) for v in (0.0, 1.0, 0.5))
    rest = ex.emit("Mod", [a, b], fmod=1)
    b_negative = ex.emit("Less", [b, zero])
    other_side = ex.emit("Xor", [b_negative, ex.emit("Less", [rest, zero])])
    moved = ex.emit("And", [ex.emit("Not", [ex.emit("Equal", [rest, zero])]), other_side])
    if node.op == "mod":  # the result has the divisor's sign
        mod = ex.emit("Where", [moved, ex.emit("Add", [rest, b]), rest])
        ex.emit("Mul", [ex.emit("Abs", [mod]), _unit_sign(ex, dtype, b_negative)], out)
        return
    div = ex.emit("Div", [ex.emit("Sub", [a, rest]), b])
    div = ex.emit("Sub", [div, ex.emit("Cast", [moved], to=ex.onnx.helper.np_dtype_to_tensor_dtype(dtype))])
    floor = ex.emit("Floor", [div])
    up = ex.emit("Greater", [ex.emit("Sub", [div, floor]), half])
    floor = ex.emit("Add", [floor, ex.emit("Where", [up, one, zero])])
    quotient = ex.emit("Div", [a, b])  # the result has the sign of a / b
    signed = ex.emit("Mul", [ex.emit("Abs", [floor]), _unit_sign(ex, dtype, _is_negative(ex, dtype, quotient))])
    ex.emit("Where", [ex.emit("Equal", [b, zero]), quotient, signed], out)


@_converts("mod", "floor_divide")
def _floor_mod_div(ex, node, outs, a, b):
    if node.inputs[0].dtype.kind == "f":
        _float_floor_mod_div(ex, node, a, b, outs[0])
        return
    if node.op == "mod":  # ONNX's integer Mod takes the divisor's sign, as NumPy's does
        ex.emit("Mod", [a, b], outs[0], fmod=0)
        return
    zero = ex.scalar(0, node.inputs[0].dtype.np)  # the truncated quotient, less one where the remainder
    rest = ex.emit("Mod", [a, b], fmod=1)  # is not zero and has the other sign than b
    other_side = ex.emit("Xor", [ex.emit("Less", [rest, zero]), ex.emit("Less", [b, zero])])
    late = ex.emit("And", [ex.emit("Not", [ex.emit("Equal", [rest, zero])]), other_side])
    late = ex.emit("Cast", [late], to=_elem_type(ex.onnx.helper, node.outputs[0]))
    ex.emit("Sub", [ex.emit("Div", [a, b]), late], outs[0])


@_converts("fmod")
def _fmod(ex, node, outs, a, b):
    ex.emit("Mod", [a, b], outs[0], fmod=1)


_BITWISE = {
    "bitwise_and": ("And", "BitwiseAnd"),
    "bitwise_or": ("Or", "BitwiseOr"),
    "bitwise_xor": ("Xor", "BitwiseXor"),
}


@_converts(*_BITWISE, "bitwise_invert")
def _bitwise(ex, node, outs, *ins):
    logical, bitwise = _BITWISE.get(node.op, ("Not", "BitwiseNot"))
    if node.inputs[0].dtype.kind == "b":
        ex.emit(logical, ins, outs[0])
        return
    _needs_opset(ex, node, 18, f"{bitwise} on integers")
    ex.emit(bitwise, ins, outs[0])


@_converts("relu_grad")
def _relu_grad(ex, node, outs, g, y):
    positive = ex.emit("Greater", [y, ex.scalar(0, node.inputs[1].dtype.np)])
    ex.emit("Where", [positive, g, ex.scalar(0, node.inputs[0].dtype.np)], outs[0])


@_converts("relu_bias_grad")
def _relu_bias_grad(ex, node, outs, g, y):
    positive = ex.emit("Greater", [y, ex.scalar(0, node.inputs[1].dtype.np)])
    ex.emit("Where", [positive, g, ex.scalar(0, node.inputs[0].dtype.np)], outs[0])
    leading = list(range(len(node.inputs[0].shape) - 1))
    if leading:
        ex.reduce("ReduceSum", outs[0], leading, False, outs[1])
    else:
        ex.emit("Identity", [outs[0]], outs[1])


@_converts("reshape_like")
def _reshape_like(ex, node, outs, x, like):
    ex.emit("Reshape", [x, ex.emit("Shape", [like])], outs[0])


# -------------------------------------------------- scans, sorting, gathering
@_converts("cumsum")
def _cumsum(ex, node, outs, x):
    axis = ex.const(np.asarray(node.attrs["axis"], dtype=np.int64), "axis")
    ex.emit("CumSum", [x, axis], outs[0], exclusive=0, reverse=int(node.attrs["reverse"]))


@_converts("cumprod")
def _cumprod(ex, node, outs, x):
    """Running products one step at a time along the axis, as NumPy multiplies (ONNX has no
    CumProd): a Mul per entry, so the axis length must be known at export."""
    axis = node.attrs["axis"]
    n = node.inputs[0].shape[axis]
    if n is None:
        raise _unsupported(node, "runs along an axis of a length unknown at export")
    if n <= 1:
        ex.emit("Identity", [x], outs[0])
        return
    parts = ex.emit("Split", [x, ex.ints([1] * n)], [ex.claim(f"{node.name}/part") for _ in range(n)], axis=axis)
    running = [parts[0]]
    for part in parts[1:]:
        running.append(ex.emit("Mul", [running[-1], part]))
    ex.emit("Concat", running, outs[0], axis=axis)


@_converts("einsum")
def _einsum(ex, node, outs, *xs):
    ex.emit("Einsum", xs, outs[0], equation=",".join(node.attrs["terms"]) + "->" + node.attrs["output"])


def _axis_length(ex, node, x: str, axis: int) -> str:
    """The length of `axis` of input 0 as a 1-D int64 tensor (read at run time if dynamic)."""
    n = node.inputs[0].shape[axis]
    return ex.ints([n]) if n is not None else ex.emit("Gather", [ex.emit("Shape", [x]), ex.ints([axis])])


@_converts("top_k")
def _top_k(ex, node, outs, x):
    """The op's order: the stable ascending sort of -x (so NaNs come last and ties by
    index), which sorted=False keeps too; the values are read back from x."""
    names = [ex.claim(f"{node.name}/negated"), ex.claim(f"{node.name}/indices")]
    _, indices = ex.emit("TopK", [ex.emit("Neg", [x]), ex.ints([node.attrs["k"]])], names, axis=-1, largest=0, sorted=1)
    ex.emit("GatherElements", [x, indices], outs[0], axis=-1)
    ex.emit("Cast", [indices], outs[1], to=ex.onnx.TensorProto.INT32)


@_converts("sort", "argsort")
def _sort(ex, node, outs, x):
    axis = node.attrs["axis"]
    names = [outs[0] if node.op == "sort" else ex.claim(f"{node.name}/values"), ex.claim(f"{node.name}/indices")]
    _, indices = ex.emit("TopK", [x, _axis_length(ex, node, x, axis)], names, axis=axis, largest=0, sorted=1)
    if node.op == "argsort":
        ex.emit("Cast", [indices], outs[0], to=ex.onnx.TensorProto.INT32)


@_converts("take_along_axis")
def _take_along_axis(ex, node, outs, x, indices):
    ex.emit("GatherElements", [x, indices], outs[0], axis=node.attrs["axis"])


@_converts("put_along_axis_add")
def _put_along_axis_add(ex, node, outs, x, indices, updates):
    _needs_opset(ex, node, 16, "ScatterElements with reduction='add'")
    ex.emit("ScatterElements", [x, indices, updates], outs[0], axis=node.attrs["axis"], reduction="add")


@_converts("scatter_nd_add")
def _scatter_nd_add(ex, node, outs, x, indices, updates):
    _needs_opset(ex, node, 16, "ScatterND with reduction='add'")
    coords = ex.emit("Cast", [indices], to=ex.onnx.TensorProto.INT64)
    ex.emit("ScatterND", [x, coords, updates], outs[0], reduction="add")


@_converts("scatter_add")
def _scatter_add(ex, node, outs, x, indices, updates):
    """Along `axis` as ScatterND on the tensor with that axis moved first: the updates'
    index axes lead, each index one coordinate."""
    _needs_opset(ex, node, 16, "ScatterND with reduction='add'")
    axis, rank, k = node.attrs["axis"], node.inputs[0].ndim, node.inputs[1].ndim
    to_front = [axis, *range(axis), *range(axis + 1, rank)]
    rows = [*range(axis, axis + k), *range(axis), *range(axis + k, rank - 1 + k)]
    coords = ex.emit("Unsqueeze", [ex.emit("Cast", [indices], to=ex.onnx.TensorProto.INT64), ex.ints([-1])])
    moved = ex.emit("Transpose", [x], perm=to_front)
    y = ex.emit("ScatterND", [moved, coords, ex.emit("Transpose", [updates], perm=rows)], reduction="add")
    ex.emit("Transpose", [y], outs[0], perm=[int(i) for i in np.argsort(to_front)])


@_converts("scatter_update")
def _scatter_update(ex, node, outs, x, indices, updates):
    # The op takes distinct indices, so the order ScatterND writes them in does not matter.
    coords = ex.emit("Unsqueeze", [ex.emit("Cast", [indices], to=ex.onnx.TensorProto.INT64), ex.ints([-1])])
    ex.emit("ScatterND", [x, coords, updates], outs[0])


@_converts("searchsorted")
def _searchsorted(ex, node, outs, sequence, values):
    """Counts of the entries before each value (ascending input, so this is the binary
    search's answer), with NumPy's order for NaN: after every number."""
    v = ex.emit("Unsqueeze", [values, ex.ints([-1])])
    if node.attrs["side"] == "left":  # entries < v
        before = ex.emit("Less", [sequence, v])
        nan_first, nan_second = v, sequence
    else:  # entries a with not v < a
        before, nan_first, nan_second = ex.emit("Less", [v, sequence]), sequence, v
    if node.inputs[0].dtype.kind == "f":  # x < NaN holds for every number x
        number_below_nan = ex.emit(
            "And", [ex.emit("IsNaN", [nan_first]), ex.emit("Not", [ex.emit("IsNaN", [nan_second])])]
        )
        before = ex.emit("Or", [before, number_below_nan])
    if node.attrs["side"] == "right":
        before = ex.emit("Not", [before])
    count = ex.reduce("ReduceSum", ex.emit("Cast", [before], to=ex.onnx.TensorProto.INT64), [-1], False, None)
    ex.emit("Cast", [count], outs[0], to=ex.onnx.TensorProto.INT32)


@_converts("unravel_index")
def _unravel_index(ex, node, outs, indices):
    shape = node.attrs["shape"]
    flat = ex.emit("Cast", [indices], to=ex.onnx.TensorProto.INT64)
    for axis, out in enumerate(outs):  # (i // stride) % size; the op refuses indices out of range
        stride = int(np.prod(shape[axis + 1 :], dtype=np.int64))
        coord = ex.emit("Div", [flat, ex.scalar(stride, np.int64)]) if stride != 1 else flat
        coord = ex.emit("Mod", [coord, ex.scalar(shape[axis], np.int64)]) if axis else coord
        ex.emit("Cast", [coord], out, to=ex.onnx.TensorProto.INT32)


@_converts("sparse_softmax_cross_entropy_with_logits")
def _sparse_xent(ex, node, outs, logits, labels):
    """The loss and its gradient (softmax - one hot), computed as the op's reference does."""
    shifted = ex.emit("Sub", [logits, ex.reduce("ReduceMax", logits, [1], True, None)])
    lse = ex.emit("Log", [ex.reduce("ReduceSum", ex.emit("Exp", [shifted]), [1], True, None)])
    rows = ex.emit("Unsqueeze", [ex.emit("Cast", [labels], to=ex.onnx.TensorProto.INT64), ex.ints([1])])
    picked = ex.emit("GatherElements", [shifted, rows], axis=1)
    ex.emit("Squeeze", [ex.emit("Sub", [lse, picked]), ex.ints([1])], outs[0])
    classes = ex.const(np.arange(node.inputs[0].shape[1], dtype=np.int64), "range")
    hot = ex.emit("Cast", [ex.emit("Equal", [rows, classes])], to=_elem_type(ex.onnx.helper, node.outputs[1]))
    ex.emit("Sub", [ex.emit("Exp", [ex.emit("Sub", [shifted, lse])]), hot], outs[1])


_SEGMENT_REDUCTIONS = {"segment_sum": "add", "segment_prod": "mul", "segment_max": "max", "segment_min": "min"}
_SEGMENT_START = {"segment_sum": 0.0, "segment_prod": 1.0, "segment_max": -np.inf, "segment_min": np.inf}


@_converts(*_SEGMENT_REDUCTIONS)
def _segment(ex, node, outs, data, ids):
    """ScatterND with a reduction into one row per segment plus one for the ids out of
    range, in float64 as the op's reference accumulates."""
    reduction = _SEGMENT_REDUCTIONS[node.op]
    _needs_opset(ex, node, 18 if reduction in ("max", "min") else 16, f"ScatterND with reduction='{reduction}'")
    n = node.attrs["num_segments"]
    ids = ex.emit("Cast", [ids], to=ex.onnx.TensorProto.INT64)
    inside = ex.emit(
        "And",
        [ex.emit("GreaterOrEqual", [ids, ex.scalar(0, np.int64)]), ex.emit("Less", [ids, ex.scalar(n, np.int64)])],
    )
    rows = ex.emit("Unsqueeze", [ex.emit("Where", [inside, ids, ex.scalar(n, np.int64)]), ex.ints([-1])])
    rest = ex.emit("Slice", [ex.emit("Shape", [data]), ex.ints([1]), ex.ints([_INT64_MAX])])
    start = ex.onnx.numpy_helper.from_array(np.asarray([_SEGMENT_START[node.op]], np.float64))
    table = ex.emit("ConstantOfShape", [ex.emit("Concat", [ex.ints([n + 1]), rest], axis=0)], value=start)
    wide = ex.emit("Cast", [data], to=ex.onnx.TensorProto.DOUBLE)
    table = ex.emit("ScatterND", [table, rows, wide], reduction=reduction)
    table = ex.emit("Slice", [table, ex.ints([0]), ex.ints([n]), ex.ints([0])])
    ex.emit("Cast", [table], outs[0], to=_elem_type(ex.onnx.helper, node.outputs[0]))


@_converts("dft")
def _dft(ex, node, outs, real, imag):
    """A DFT over several axes as one ONNX DFT per axis, on [..., 2] pairs in float64 (as
    the op's reference computes); the inverse scales each axis by 1/n, together 1/N."""
    _needs_opset(ex, node, 17, "DFT")
    rank = node.inputs[0].ndim
    pairs = ex.emit("Concat", [ex.emit("Unsqueeze", [part, ex.ints([-1])]) for part in (real, imag)], axis=-1)
    pairs = ex.emit("Cast", [pairs], to=ex.onnx.TensorProto.DOUBLE)
    for axis in sorted({a % rank for a in node.attrs["axes"]}):
        if ex.opset >= 20:  # the axis became an input
            pairs = ex.emit(
                "DFT", [pairs, "", ex.const(np.asarray(axis, np.int64), "axis")], inverse=int(node.attrs["inverse"])
            )
        else:
            pairs = ex.emit("DFT", [pairs], axis=axis, inverse=int(node.attrs["inverse"]))
    to = _elem_type(ex.onnx.helper, node.outputs[0])
    for i, out in enumerate(outs):
        part = ex.emit("Gather", [pairs, ex.scalar(i, np.int64)], axis=-1)
        ex.emit("Cast", [part], out, to=to)


def _quantile_points(n: int, q: float, method: str) -> tuple:
    """(index,) of a discrete method, or (previous, next, gamma) of an interpolating one,
    worked out in float64 by NumPy's formulas for n values (numpy.quantile)."""
    where = (n - 1) * np.float64(q)
    if method in ("lower", "higher", "nearest"):
        return (int({"lower": np.floor, "higher": np.ceil, "nearest": np.around}[method](where)),)
    if method == "midpoint":
        where = 0.5 * (np.floor(where) + np.ceil(where))
    previous = -1 if where >= n - 1 else int(np.floor(where))
    gamma = where - previous
    if method == "midpoint":
        gamma = np.float64(0.0 if where % 1 == 0 else 0.5)
    return previous, -1 if previous == -1 else previous + 1, float(gamma)


@_converts("quantile")
def _quantile(ex, node, outs, x):
    """numpy.quantile step by step: the reduced axes sorted (NaNs last) as one, the values
    at the points each q falls between, and NumPy's two-sided lerp, in float32 for a single
    q (NumPy's weak scalar) and in float64 for several; a NaN in a row gives NaN."""
    a, dtype = node.attrs, node.inputs[0].dtype
    if a["ignore_nan"]:
        raise _unsupported(node, "ignores NaNs: where its points fall depends on the NaN count, known only at run time")
    if dtype.bits < 32:
        raise _unsupported(node, "interpolates 16-bit floats, which NumPy rounds after each step; cast to float32")
    axes, rank = a["axes"], node.inputs[0].ndim
    sizes = [node.inputs[0].shape[i] for i in axes]
    if None in sizes or 0 in sizes:
        raise _unsupported(node, "reduces axes of a size unknown at export or empty")
    n = int(np.prod(sizes))
    kept = [i for i in range(rank) if i not in axes]
    rows = ex.emit("Reshape", [ex.emit("Transpose", [x], perm=kept + list(axes)), ex.ints([0] * len(kept) + [n])])
    names = [ex.claim(f"{node.name}/sorted"), ex.claim(f"{node.name}/order")]
    ordered, _ = ex.emit("TopK", [rows, ex.ints([n])], names, axis=-1, largest=0, sorted=1)

    def at(index: int) -> str:
        return ex.emit("Gather", [ordered, ex.scalar(index, np.int64)], axis=-1)

    last = at(-1)
    wide = ex.onnx.TensorProto.DOUBLE
    results = []
    for q in a["qs"]:
        points = _quantile_points(n, q, a["method"])
        if len(points) == 1:
            value = at(points[0])
        else:
            low, high = at(points[0]), at(points[1])
            gamma, weak = points[2], a["scalar_q"]
            diff = ex.emit("Sub", [high, low])
            if not weak and dtype.np != np.float64:  # a float64 gamma widens the lerp
                low, high, diff = (ex.emit("Cast", [t], to=wide) for t in (low, high, diff))
            work = dtype.np if weak else np.float64
            if gamma >= 0.5:
                value = ex.emit("Sub", [high, ex.emit("Mul", [diff, ex.scalar(1 - gamma, work)])])
            else:
                value = ex.emit("Add", [low, ex.emit("Mul", [diff, ex.scalar(gamma, work)])])
            if not weak and dtype.np != np.float64:
                value = ex.emit("Cast", [value], to=_elem_type(ex.onnx.helper, node.outputs[0]))
        results.append(ex.emit("Where", [ex.emit("IsNaN", [last]), last, value]))
    y = (
        results[0]
        if a["scalar_q"]
        else ex.emit("Concat", [ex.emit("Unsqueeze", [r, ex.ints([0])]) for r in results], axis=0)
    )
    if a["keepdims"]:
        y = ex.emit("Unsqueeze", [y, ex.ints([i + (0 if a["scalar_q"] else 1) for i in axes])])
    ex.finish(y, outs[0])


# ------------------------------------------------ gradients of pools (saliency)
@_converts("avg_pool2d_grad", "avg_pool3d_grad")
def _avg_pool_grad(ex, node, outs, dy):
    """dy over each window's count of real cells, spread back over the window by a
    transposed convolution of ones, one group per channel."""
    a, rank = node.attrs, node.inputs[0].ndim
    sizes, channels = a["input_size"], node.inputs[0].shape[-1]
    if channels is None:
        raise _unsupported(node, "has a channel count unknown at export")
    ones = (1,) * (rank - 2)
    before, after, tail = _window_geometry(node, sizes, a["ksize"], a["strides"], a["padding"], ones)
    counts = np.ones((1,), dtype=node.inputs[0].dtype.np)
    for size, k, s, first, out in zip(sizes, a["ksize"], a["strides"], before, node.inputs[0].shape[1:-1], strict=True):
        start = np.arange(out) * s - first  # the real cells of each window along this axis
        counts = np.multiply.outer(counts, np.minimum(start + k, size) - np.maximum(start, 0))
    counts = counts.astype(node.inputs[0].dtype.np)[..., None]
    scaled = ex.emit("Transpose", [ex.emit("Div", [dy, ex.const(counts, "counts")])], perm=_channels_first(rank))
    window = ex.const(np.ones((channels, 1, *a["ksize"]), dtype=node.inputs[0].dtype.np), "window")
    conv = dict(kernel_shape=list(a["ksize"]), strides=list(a["strides"]), group=channels)
    y = ex.emit("ConvTranspose", [scaled, window], pads=before + after, output_padding=tail, **conv)
    ex.emit("Transpose", [y], outs[0], perm=_channels_last(rank))


@_converts("max_pool2d_grad", "max_pool3d_grad")
def _max_pool_grad(ex, node, outs, x, dy):
    """dy added at the first maximum of each window: MaxPool's Indices (flat positions in
    the channels-first input, the first of equal maxima) as a ScatterElements."""
    _needs_opset(ex, node, 16, "ScatterElements with reduction='add'")
    a, rank = node.attrs, node.inputs[0].ndim
    ones = (1,) * (rank - 2)
    before, after, _ = _window_geometry(node, node.inputs[0].shape[1:-1], a["ksize"], a["strides"], a["padding"], ones)
    nchw = ex.emit("Transpose", [x], perm=_channels_first(rank))
    window = dict(kernel_shape=list(a["ksize"]), strides=list(a["strides"]), pads=before + after)
    names = [ex.claim(f"{node.name}/pooled"), ex.claim(f"{node.name}/argmax")]
    _, where = ex.emit("MaxPool", [nchw], names, **window)
    flat = ex.ints([-1])
    grads = ex.emit("Reshape", [ex.emit("Transpose", [dy], perm=_channels_first(rank)), flat])
    zeros = _full_of(ex, node, ex.emit("Reshape", [nchw, flat]), 0)
    dx = ex.emit("ScatterElements", [zeros, ex.emit("Reshape", [where, flat]), grads], axis=0, reduction="add")
    dx = ex.emit("Reshape", [dx, ex.emit("Shape", [nchw])])
    ex.emit("Transpose", [dx], outs[0], perm=_channels_last(rank))


# ------------------------------------------------------------------ recurrent
# ONNX's LSTM and GRU apply their own input weights W to X. The sequence ops take the input
# projection already made (xp = inputs @ kernel + bias, exported as its own MatMul and Add), so
# X is xp, time-major, and W is a permutation matrix: exact (a product by one and a sum of
# zeros), at the cost of one [4 * units]-wide GEMM over the whole sequence, outside the steps.
# ONNX orders the LSTM's gates i, o, f, c where tapeflow (and Keras) order them i, f, c, o; the
# GRU's gates z, r, h are in the same order in both. A sequence op with a mask (ONNX's
# sequence_lens only drops trailing steps), or in a dtype onnxruntime's LSTM and GRU do not run
# (float64, bfloat16), is written out step by step instead.
_LSTM_GATES = (0, 3, 1, 2)  # for each ONNX gate, the tapeflow gate block it reads
_GRU_GATES = (0, 1, 2)
_ONNX_RECURRENT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


def _gate_rows(units: int, gates: tuple) -> np.ndarray:
    """The rows of a tapeflow [gates * units] axis, in ONNX's gate order."""
    return np.concatenate([np.arange(g * units, (g + 1) * units) for g in gates])


def _read_outputs(ex, node) -> set[int]:
    """The indices of `node`'s outputs that the exported graph reads (its outputs included)."""
    ids = {id(v): i for i, v in enumerate(node.outputs)}
    reads = [v for other in _needed(ex.graph) for v in other.inputs] + list(ex.graph.outputs)
    return {ids[id(v)] for v in reads if id(v) in ids}


def _recurrent(ex, node, outs, xp, states, kernel, op_type: str, gates: tuple, bias=None, **attrs):
    """Emit `node` (lstm_sequence or gru_sequence, without a mask) as ONNX's `op_type`, one direction."""
    read = _read_outputs(ex, node)
    units, dtype = node.inputs[len(states) + 1].shape[0], node.inputs[0].dtype.np  # the recurrent kernel's rows
    rows = _gate_rows(units, gates)
    w = ex.const(np.eye(len(rows), dtype=dtype)[rows][None], f"{node.name}/W")
    if kernel in ex.initializers:
        r = ex.const(np.ascontiguousarray(ex.initializers[kernel].T[rows][None]), f"{node.name}/R")
    else:
        r = ex.emit("Gather", [ex.transposed(kernel, (1, 0)), ex.ints(rows)], axis=0)
        r = ex.emit("Unsqueeze", [r, ex.ints([0])])
    b = ""
    if bias is not None:  # ONNX's B is [Wb; Rb]: the input bias is already in xp
        zeros = ex.const(np.zeros(len(rows), dtype=dtype), f"{node.name}/Wb")
        b = ex.emit("Unsqueeze", [ex.emit("Concat", [zeros, bias], axis=0), ex.ints([0])])
    x = ex.emit("Transpose", [xp], perm=[1, 0, 2])  # ONNX's X is [time, batch, features]
    initial = [ex.emit("Unsqueeze", [s, ex.ints([0])]) for s in states]  # [directions, batch, units]
    names = [ex.claim(f"{node.name}/Y") if 0 in read else ""]
    names += [ex.claim(f"{node.name}/Y_{k}") for k in ("h", "c")[: len(states)]]
    direction = "reverse" if node.attrs["go_backwards"] else "forward"
    found = ex.emit(op_type, [x, w, r, b, "", *initial], names, hidden_size=units, direction=direction, **attrs)
    for k, state in enumerate(found[1:], start=1):
        ex.emit("Squeeze", [state, ex.ints([0])], outs[k])
    if 0 in read:  # Y: [time, directions, batch, units] in input order; ours run in step order
        y = ex.emit("Squeeze", [found[0], ex.ints([1])])
        if node.attrs["go_backwards"]:
            y = ex.emit("Slice", [y, ex.ints([-1]), ex.ints([_INT64_MIN]), ex.ints([0]), ex.ints([-1])])
        ex.emit("Transpose", [y], outs[0], perm=[1, 0, 2])


def _unrolled(ex, node, outs, xp, states, mask, step) -> None:
    """Emit `node` step by step: `step(x_t, states) -> (output, new_states)` emits one step."""
    steps = node.inputs[0].shape[1]
    xs = ex.emit("Split", [xp, ex.ints([1] * steps)], [ex.claim(f"{node.name}/x") for _ in range(steps)], axis=1)
    xs = [xs] if steps == 1 else xs
    keeps = [None] * steps
    if mask:
        keeps = ex.emit(
            "Split", [mask[0], ex.ints([1] * steps)], [ex.claim(f"{node.name}/keep") for _ in range(steps)], axis=1
        )
        keeps = [keeps] if steps == 1 else keeps  # each [batch, 1]: broadcasts over the units
    output, outputs = _full_of(ex, node, states[0], 0) if mask else None, []
    order = range(steps - 1, -1, -1) if node.attrs["go_backwards"] else range(steps)
    for t in order:
        new_output, new_states = step(ex.emit("Squeeze", [xs[t], ex.ints([1])]), states)
        if mask:
            new_output = ex.emit("Where", [keeps[t], new_output, output])
            new_states = [ex.emit("Where", [keeps[t], n, o]) for n, o in zip(new_states, states, strict=True)]
        output, states = new_output, new_states
        outputs.append(ex.emit("Unsqueeze", [output, ex.ints([1])]))
    ex.emit("Concat", outputs, outs[0], axis=1)
    for name, state in zip(outs[1:], states, strict=False):
        ex.emit("Identity", [state], name)


def _fits_onnx_recurrent(ex, node, mask) -> bool:
    """Whether the sequence op becomes ONNX's LSTM or GRU (else it is unrolled); its saved
    activations, which those do not give, must be unread."""
    if _read_outputs(ex, node) & set(range(3 if node.op == "lstm_sequence" else 2, len(node.outputs))):
        raise _unsupported(node, "has its saved gate activations read (a gradient), which ONNX cannot give")
    return not mask and node.inputs[0].dtype.np in _ONNX_RECURRENT_DTYPES


@_converts("lstm_sequence")
def _lstm_sequence(ex, node, outs, xp, h0, c0, kernel, *mask):
    if _fits_onnx_recurrent(ex, node, mask):
        return _recurrent(ex, node, outs, xp, [h0, c0], kernel, "LSTM", _LSTM_GATES)
    units = node.inputs[3].shape[0]

    def step(x, states):
        h, c = states
        z = ex.emit("Add", [x, ex.emit("MatMul", [h, kernel])])
        i, f, g, o = ex.emit("Split", [z, ex.ints([units] * 4)], [ex.claim(f"{node.name}/z") for _ in range(4)], axis=1)
        i, f, g, o = ex.emit("Sigmoid", [i]), ex.emit("Sigmoid", [f]), ex.emit("Tanh", [g]), ex.emit("Sigmoid", [o])
        c = ex.emit("Add", [ex.emit("Mul", [f, c]), ex.emit("Mul", [i, g])])
        h = ex.emit("Mul", [o, ex.emit("Tanh", [c])])
        return h, [h, c]

    _unrolled(ex, node, outs, xp, [h0, c0], mask, step)


@_converts("gru_sequence")
def _gru_sequence(ex, node, outs, xp, h0, kernel, bias, *mask):
    reset_after = node.attrs["reset_after"]
    if _fits_onnx_recurrent(ex, node, mask):
        linear = int(reset_after)
        return _recurrent(ex, node, outs, xp, [h0], kernel, "GRU", _GRU_GATES, bias=bias, linear_before_reset=linear)
    units = node.inputs[2].shape[0]
    one = ex.scalar(1, node.inputs[0].dtype.np)

    def parts(x, sizes):
        return ex.emit("Split", [x, ex.ints(sizes)], [ex.claim(f"{node.name}/part") for _ in sizes], axis=-1)

    kernel_zr, kernel_h = parts(kernel, [2 * units, units])
    bias_zr, bias_h = parts(bias, [2 * units, units])

    def step(x, states):
        (h,) = states
        xz, xr, xh = parts(x, [units] * 3)
        if reset_after:
            rz, rr, rh = parts(ex.emit("Add", [ex.emit("MatMul", [h, kernel]), bias]), [units] * 3)
            r = ex.emit("Sigmoid", [ex.emit("Add", [xr, rr])])
            candidate = ex.emit("Add", [xh, ex.emit("Mul", [r, rh])])
        else:
            rz, rr = parts(ex.emit("Add", [ex.emit("MatMul", [h, kernel_zr]), bias_zr]), [units] * 2)
            r = ex.emit("Sigmoid", [ex.emit("Add", [xr, rr])])
            reset = ex.emit("MatMul", [ex.emit("Mul", [r, h]), kernel_h])
            candidate = ex.emit("Add", [ex.emit("Add", [xh, reset]), bias_h])
        z = ex.emit("Sigmoid", [ex.emit("Add", [xz, rz])])
        candidate = ex.emit("Tanh", [candidate])
        h = ex.emit("Add", [ex.emit("Mul", [z, h]), ex.emit("Mul", [ex.emit("Sub", [one, z]), candidate])])
        return h, [h]

    _unrolled(ex, node, outs, xp, [h0], mask, step)
