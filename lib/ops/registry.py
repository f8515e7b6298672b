"""The op registry: every op is one OpDef, and `apply` runs it eagerly.

An OpDef holds the op's shape/dtype rule (`infer`), its NumPy reference
forward, and its VJP written with tapeflow ops. Backends give fast kernels by
op name (see tapeflow.backends); the reference is the fallback and the test oracle,
and calls no compiled code. `OpDef.bound_kernel` is the one lookup of what runs an op,
and `tapeflow.backends.numerics` the one context it runs in, for eager ops, constant
folding and graph runs alike.

>>> from tapeflow.ops import registry
>>> registry.get_op("exp").name
'exp'
"""

from __future__ import annotations

import functools
import threading
import time

import numpy as np

from tapeflow import dtypes
from tapeflow.backends import UnsupportedOpError, backend, numerics
from tapeflow.devices import Device, check_same_device, current_device, parse_device
from tapeflow.ops.profiling import HOOKS
from tapeflow.tensor import TRACING, IndexedSlices, Tensor, Variable


class OpDef:
    """One op: name, shape/dtype rule, NumPy reference forward and VJP."""

    __slots__ = (
        "name",
        "reference",
        "infer",
        "vjp",
        "num_outputs",
        "partial_vjp",
        "stateful",
        "transfer",
        "_by_family",
        "doc",
    )

    def __init__(self, name, reference, infer, vjp, num_outputs, partial_vjp, stateful=False, transfer=False):
        self.name = name
        self.reference = reference
        self.infer = infer
        self.vjp = vjp
        self.num_outputs = num_outputs
        self.partial_vjp = partial_vjp
        self.stateful = stateful  # draws random numbers: never merged, folded or reordered by graph passes
        self.transfer = transfer  # moves its input to attrs["device"]: its reference runs on every backend
        self._by_family = {}
        self.doc = reference.__doc__

    @property
    def differentiable(self) -> bool:
        return self.vjp is not None

    def kernel(self, family: str):
        """The forward kernel for a device family, called as the reference is (the reference
        if the backend has none).

        >>> get_op("exp").kernel("cpu") is get_op("exp").reference
        True
        """
        return (self._by_family.get(family) or self._resolve(family))[0]

    def runs_on(self, family: str) -> bool:
        """Whether the backend of `family` can run this op.

        >>> get_op("exp").runs_on("cpu")
        True
        """
        try:
            self.kernel(family)
        except UnsupportedOpError:
            return False
        return True

    def bound_kernel(self, family: str, attrs: dict):
        """The one way to find what runs this op on a device family: its kernel with `attrs`
        fixed, called with the input arrays only (the backend's `bind_<op>` where it has one).
        Eager ops, constant folding and a graph's executor all run what this gives, so an op
        runs the same kernel in each.

        >>> import numpy as np
        >>> get_op("transpose").bound_kernel("cpu", {"perm": (1, 0)})(np.zeros((2, 3))).shape
        (3, 2)
        """
        kernel, binder = self._by_family.get(family) or self._resolve(family)
        if binder is not None:
            return binder(functools.partial(self.reference, **attrs), **attrs)
        return functools.partial(kernel, **attrs) if attrs else kernel

    def _resolve(self, family: str) -> tuple:
        """(kernel, binder) for `family`, looked up in its backend once."""
        module = backend(family)
        binder = getattr(module, f"bind_{self.name}", None)
        kernel = self.reference if self.transfer else getattr(module, self.name, None)
        refused = self.name in getattr(module, "UNSUPPORTED", ())
        if refused:
            kernel = None  # refused below even where the backend falls back to references
        if kernel is None and self.name in module.RUNS_ON_HOST:
            kernel = _copied_in(self.reference, module)
        if kernel is None:
            if not module.FALLS_BACK_TO_REFERENCE or refused:
                raise UnsupportedOpError(
                    f"{self.name}: the {family} backend cannot run this op, and tapeflow does not move it "
                    f"to the CPU behind your back; run it on the CPU explicitly (tensor.to('cpu'))"
                )
            kernel = self.reference
        self._by_family[family] = (kernel, binder)
        return kernel, binder

    def __repr__(self) -> str:
        return f"OpDef({self.name!r})"


def _copied_in(reference, module):
    """The reference run on the host, its inputs copied out and its results copied to the
    backend's device (random draws, so that one seed gives the same numbers on every device)."""

    def kernel(*arrays, **attrs):
        host = [a if isinstance(a, np.ndarray | np.generic) else module.to_host(a) for a in arrays]
        out = reference(*host, **attrs)
        return tuple(module.from_host(o) for o in out) if isinstance(out, tuple) else module.from_host(out)

    return kernel


_REGISTRY: dict[str, OpDef] = {}


def defop(
    name: str,
    *,
    infer,
    vjp=None,
    num_outputs: int = 1,
    partial_vjp: bool = False,
    stateful: bool = False,
    transfer: bool = False,
):
    """Register the decorated NumPy reference forward as op `name`.

    `infer(*inputs, **attrs)` sees objects with `.shape` and `.dtype` and
    returns a list of (shape, dtype), raising a clear error for bad input.
    `num_outputs` is None for ops whose output count depends on attrs (split).
    `vjp(grads, inputs, outputs, **attrs)` gets one gradient per output (None
    where unconnected) and returns one gradient (or None) per input. With
    `partial_vjp=True` it also gets `needs`, one bool per input, and may skip
    the gradients nobody asked for (worth it when each costs a matmul).
    `stateful` ops (random draws) give a new result on every run. A `transfer` op copies
    its input from the device it lives on to the device named by its `device` attr; its
    reference does the copy through the two backends, whatever they are.
    """

    def wrap(reference):
        if name in _REGISTRY:
            raise ValueError(f"op {name!r} is already registered")
        _REGISTRY[name] = OpDef(name, reference, infer, vjp, num_outputs, partial_vjp, stateful, transfer)
        return _REGISTRY[name]

    return wrap


def get_op(name: str) -> OpDef:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown op {name!r}") from None


def all_ops() -> list[OpDef]:
    """Every registered op, sorted by name."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


class _Recording(threading.local):
    """Per-thread list of objects with record(op, inputs, attrs, outputs): the
    active GradientTapes and the variable-access probes of custom_gradient."""

    def __init__(self):
        self.recorders: list = []
        self.autocast = None  # the compute dtype float32 trainable Variables are read in (mixed precision)


_STATE = _Recording()


def push_recorder(recorder) -> None:
    _STATE.recorders.append(recorder)


def pop_recorder(recorder) -> None:
    recorders = _STATE.recorders
    for i in range(len(recorders) - 1, -1, -1):
        if recorders[i] is recorder:
            del recorders[i]
            return


class paused_recording:
    """Context in which the given recorders (default: all) record nothing."""

    def __init__(self, *recorders):
        self._only = recorders

    def __enter__(self):
        self._saved = _STATE.recorders
        if self._only:
            _STATE.recorders = [r for r in self._saved if all(r is not o for o in self._only)]
        else:
            _STATE.recorders = []

    def __exit__(self, *exc):
        _STATE.recorders = self._saved


def apply(op: OpDef, inputs: tuple, attrs: dict):
    """Run `op` on tensors now; return a Tensor, or a tuple for multi-output ops.

    While a function is being frozen, the tracer records the op instead; on the symbolic
    tensors of a functional model, the tensor records it (its `symbolic_apply`). The op's
    shape rule runs once per signature (input types, shapes and dtypes, plain attrs): a
    signature that passed it once passes it again.
    """
    state = _STATE
    if state.autocast is not None and op.name != "cast":
        inputs = _autocast(inputs, state.autocast)
    tracer = TRACING.tracer
    if tracer is not None:
        return tracer.apply(op, inputs, attrs)
    arrays, key, device, mixed = [], [op], inputs[0]._device if inputs else None, False
    for t in inputs:
        array = t._value
        if array is None:
            if hasattr(t, "symbolic_apply"):  # a functional model's symbolic tensor
                return t.symbolic_apply(op, inputs, attrs)
            key = None
        elif key is not None:
            key += (type(t), array.shape, array.dtype)
        if t._device is not device:
            mixed = True
        arrays.append(array)
    if key is not None:
        key = _attrs_key(key, attrs) if attrs else tuple(key)
    specs = None if key is None else _INFERRED.get(key)
    if specs is None:
        specs = op.infer(*inputs, **attrs)
        if key is not None:
            if len(_INFERRED) >= _INFERRED_LIMIT:
                _INFERRED.clear()
            _INFERRED[key] = specs
    if mixed:
        device = check_same_device(op.name, inputs)
    elif device is None:
        device = current_device()
    kernel, binder = op._by_family.get(device.family) or op._resolve(device.family)
    observer = HOOKS.op
    if observer is not None:
        start = time.perf_counter_ns()
    entered = numerics.enter(device)
    try:
        if binder is None:  # what bound_kernel gives, called without fixing attrs for one call
            out = kernel(*arrays, **attrs)
        else:
            out = op.bound_kernel(device.family, attrs)(*arrays)
    finally:
        numerics.leave(entered)
    single = op.num_outputs == 1
    if single:
        out = (out,)
    elif len(out) != len(specs):
        raise RuntimeError(f"{op.name}: kernel returned {len(out)} outputs, expected {len(specs)}")
    kernels = entered[0]
    if op.transfer:
        device = parse_device(attrs["device"])
        kernels = backend(device.family)
    if kernels.HOLDS_NUMPY and single and len(specs) == 1:
        outputs = (_to_tensor(out[0], specs[0][1].np, device),)
    elif kernels.HOLDS_NUMPY:
        outputs = tuple([_to_tensor(a, spec[1].np, device) for a, spec in zip(out, specs, strict=True)])
    else:
        outputs = tuple(
            Tensor._wrap(kernels.conform(a, s[1].np, device.index), device) for a, s in zip(out, specs, strict=True)
        )
    if observer is not None:
        observer(op.name, inputs, outputs, device, start)
    recorders = state.recorders
    if recorders and op.vjp is not None:
        for recorder in tuple(recorders):
            recorder.record(op, inputs, attrs, outputs)
    return outputs[0] if single else outputs


# The outputs' (shape, dtype) of each op by signature, for ops run eagerly: `_attrs_key`
# says which attrs a signature can hold.
_INFERRED: dict[tuple, list] = {}
_INFERRED_LIMIT = 4096
_PLAIN = frozenset({bool, int, float, str, type(None)})


def _attrs_key(key: list, attrs: dict) -> tuple | None:
    """`key` followed by `attrs` as a tuple, or None when an attr is not a plain value (a
    number, string, None, or a tuple of ints) to remember a shape rule's result under.

    >>> _attrs_key(["op"], {"axes": (0, 1), "keepdims": True})
    ('op', 'axes', <class 'tuple'>, (0, 1), 'keepdims', <class 'bool'>, True)
    >>> _attrs_key(["op"], {"perm": [1, 0]}) is None
    True
    """
    for name, value in attrs.items():
        kind = type(value)
        if kind is tuple:
            for item in value:
                if type(item) is not int:
                    return None
        elif kind not in _PLAIN:
            return None
        key += (name, kind, value)
    return tuple(key)


class autocast_scope:
    """Context in which ops read float32 trainable Variables in `dtype` (through a cast op,
    so gradients reach the float32 variable): how a mixed-precision layer computes.

    >>> import tapeflow as tp
    >>> w = tp.Variable([1.0, 2.0])
    >>> with autocast_scope(tp.float16):
    ...     (w * 2).dtype
    tapeflow.float16
    """

    def __init__(self, dtype):
        self._dtype = None if dtype is None else dtypes.as_dtype(dtype)

    def __enter__(self):
        self._saved = _STATE.autocast
        _STATE.autocast = self._dtype

    def __exit__(self, *exc):
        _STATE.autocast = self._saved


def autocast_operand(value):
    """`value`, read in the autocast dtype when it is a float32 trainable Variable and a
    mixed-precision layer is computing (for op wrappers that promote operands first)."""
    dtype = _STATE.autocast
    if dtype is None or not isinstance(value, Variable) or not value.trainable or value.dtype is not dtypes.float32:
        return value
    return apply(_REGISTRY["cast"], (value,), {"dtype": dtype.name})


def _autocast(inputs: tuple, dtype) -> tuple:
    out = None
    for i, t in enumerate(inputs):
        if isinstance(t, Variable) and t.trainable and t.dtype is dtypes.float32:
            if out is None:
                out = list(inputs)
            out[i] = apply(_REGISTRY["cast"], (t,), {"dtype": dtype.name})
    return inputs if out is None else tuple(out)


def notify_recorders(op: OpDef, inputs: tuple, attrs: dict, outputs: tuple) -> None:
    """Tell the active tapes about an op (used by the tracer for traced ops)."""
    if op.vjp is not None:
        for recorder in tuple(_STATE.recorders):
            recorder.record(op, inputs, attrs, outputs)


def _to_tensor(array, npdtype, device) -> Tensor:
    if type(array) is not np.ndarray or (array.dtype is not npdtype and array.dtype != npdtype):
        array = np.asarray(array, dtype=npdtype)
    t = _new_tensor(Tensor)
    t._value = array
    t._device = device
    return t


_new_tensor = object.__new__


# ----------------------------------------------------------------- inputs
def as_tensor(value, dtype=None, name: str = "op") -> Tensor:
    """A Tensor from a tensor, array, scalar or nested list.

    Python floats default to float32 and Python ints to int64; a NumPy array
    keeps its dtype. An IndexedSlices is densified.
    """
    if isinstance(value, Tensor):
        if dtype is not None and value.dtype is not dtypes.as_dtype(dtype):
            raise TypeError(f"{name}: expected dtype {dtypes.as_dtype(dtype)}, got {value.dtype}")
        return value
    if isinstance(value, IndexedSlices):
        return as_tensor(value.to_dense(), dtype, name)
    if dtype is not None:
        npd = dtypes.as_dtype(dtype).np
        arr = _host_array(value, npd, name)
    else:
        arr = _host_array(value, None, name)
        if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
            raise ValueError(f"{name}: uint64 value {arr.max()} does not fit int64, tapeflow's widest integer type")
        if not isinstance(value, np.ndarray | np.generic):
            if arr.dtype == np.float64:
                arr = arr.astype(np.float32)
            elif arr.dtype.kind in "iu":
                arr = arr.astype(np.int64)
        if arr.dtype not in dtypes._BY_NP:
            if arr.dtype.kind == "u" or arr.dtype in (np.int8, np.int16):
                arr = arr.astype(np.int64)
            else:
                raise TypeError(f"{name}: unsupported dtype {arr.dtype} for an input of type {type(value).__name__}")
    return wrap_host(arr)


def _host_array(value, npdtype, name: str) -> np.ndarray:
    """np.asarray(value, npdtype), with ragged nested lists and integers too wide for `npdtype`
    reported in `name`'s words."""
    try:
        return np.asarray(value) if npdtype is None else np.asarray(value, dtype=npdtype)
    except OverflowError as exc:
        raise OverflowError(f"{name}: a value does not fit {np.dtype(npdtype).name} ({exc})") from None
    except ValueError as exc:
        ragged = _ragged_lengths(value)
        if ragged is None:
            raise
        depth, lengths = ragged
        shown = ", ".join(map(str, lengths[:10])) + (", ..." if len(lengths) > 10 else "")
        raise ValueError(
            f"{name}: ragged nested sequence: the sequences at depth {depth} have lengths [{shown}]; "
            "a tensor needs equal lengths at each depth (pad them first, e.g. with tp.utils.pad_sequences)"
        ) from exc


def _ragged_lengths(value) -> tuple[int, list] | None:
    """(depth, lengths) of the first level of nested lists/tuples whose lengths differ (a
    scalar among sequences counts as length None), or None when `value` is not ragged.

    >>> _ragged_lengths([[1, 2], [3]]), _ragged_lengths([[1], 2]), _ragged_lengths([[1], [2]])
    ((1, [2, 1]), (1, [1, None]), None)
    """
    level, depth = [value], 0
    while True:
        lengths = [len(v) if isinstance(v, list | tuple) or np.ndim(v) > 0 else None for v in level]
        if depth and len(set(lengths)) > 1:
            return depth, lengths
        if lengths[0] is None:
            return None
        level, depth = [item for v in level for item in v], depth + 1
        if not level:
            return None


def wrap_host(array: np.ndarray, device=None) -> Tensor:
    """A tensor of a host array, copied to `device` (default: the current device) when that
    device does not hold NumPy arrays.

    >>> wrap_host(np.zeros(2), "cpu").device
    Device('cpu:0')
    """
    if device is None:
        device = current_device()
    elif not isinstance(device, Device):  # a Device object is one a tensor already lives on
        device = parse_device(device)
    kernels = backend(device.family)
    if not kernels.HOLDS_NUMPY:
        array = kernels.from_host(array, device.index)
    return Tensor._wrap(array, device)
