"""Export a frozen inference Graph as an ONNX model, to run it outside tapeflow.

State (read_variable nodes) and captured constants become initializers, graph
inputs become ONNX inputs (a dynamic first dimension is named "batch"), and
each op is lowered by one converter below. NHWC convolutions and pools are
wrapped in Transposes to ONNX's NCHW, with their filters transposed at export.
Graphs that write state (training steps) or draw random numbers are refused,
and an op without a converter raises an ExportError naming it and its node.

>>> import tapeflow as tp
>>> g = tp.freeze(lambda x: tp.nn.relu(x) * 2.0, tp.TensorSpec((None, 3)))
>>> sorted(exportable_ops())[:3]
['abs', 'add', 'argmax']
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
from tapeflow.ops.shapes import conv_geometry, padded_extent

MIN_OPSET = 13
_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min
_TO_NCHW, _TO_NHWC, _HWIO_TO_OIHW = (0, 3, 1, 2), (0, 2, 3, 1), (3, 2, 0, 1)


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
            self.onnx.numpy_helper.from_array(np.ascontiguousarray(a), name)
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
def _window_pads(node, in_shape, kernel, strides, padding, dilations) -> dict:
    """ONNX pads for a tapeflow window op on an NHWC input."""
    if padding == "VALID":
        return {"pads": [0, 0, 0, 0]}
    if padding == "SAME":  # the odd padding cell goes last, as in TensorFlow
        h, w = in_shape[1:3]
        oh, ow, top, left = conv_geometry(node.op, h, w, *kernel, strides, padding, dilations)
        bottom = padded_extent(h, oh, kernel[0], strides[0], dilations[0], top) - h - top
        right = padded_extent(w, ow, kernel[1], strides[1], dilations[1], left) - w - left
        return {"pads": [top, left, bottom, right]}
    (top, bottom), (left, right) = padding
    return {"pads": [top, left, bottom, right]}


@_converts("conv2d", "fused_conv2d")
def _conv2d(ex, node, outs, x, w, bias=None):
    """NHWC conv2d (with the bias and relu of fused_conv2d) as NCHW Conv between Transposes."""
    a = node.attrs
    kernel = node.inputs[1].shape[:2]
    pads = _window_pads(node, node.inputs[0].shape, kernel, a["strides"], a["padding"], a["dilations"])
    operands = [ex.emit("Transpose", [x], perm=list(_TO_NCHW)), ex.transposed(w, _HWIO_TO_OIHW)]
    conv = dict(kernel_shape=list(kernel), strides=list(a["strides"]), dilations=list(a["dilations"]), **pads)
    y = _activate(ex, node, ex.emit("Conv", operands + ([bias] if bias is not None else []), **conv))
    ex.emit("Transpose", [y], outs[0], perm=list(_TO_NHWC))


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


@_converts("max_pool2d", "avg_pool2d")
def _pool(ex, node, outs, x):
    a = node.attrs
    pads = _window_pads(node, node.inputs[0].shape, a["ksize"], a["strides"], a["padding"], (1, 1))
    extra = {"count_include_pad": 0} if node.op == "avg_pool2d" else {}  # padded cells are not counted
    op_type = "MaxPool" if node.op == "max_pool2d" else "AveragePool"
    nchw = ex.emit("Transpose", [x], perm=list(_TO_NCHW))
    y = ex.emit(op_type, [nchw], kernel_shape=list(a["ksize"]), strides=list(a["strides"]), **pads, **extra)
    ex.emit("Transpose", [y], outs[0], perm=list(_TO_NHWC))
