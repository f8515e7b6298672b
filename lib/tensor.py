"""Tensor (an immutable value) and Variable (mutable state).

A tensor is a NumPy array plus the device it lives on. It holds no math: the
operator dunders call the ops that `tapeflow.ops` binds here (see OPERATORS).

>>> import tapeflow as tp
>>> x = tp.tensor([[1.0, 2.0]])
>>> (x * 2).numpy().tolist(), x.shape, x.dtype
([[2.0, 4.0]], (1, 2), tapeflow.float32)
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np

from tapeflow import dtypes
from tapeflow.backends import backend
from tapeflow.backends.common import check_pending
from tapeflow.devices import CPU, current_device, parse_device

# The ops behind Tensor's operators and methods. This module comes before tapeflow.ops in
# the import order (ops are written on Tensors), so it cannot import them; tapeflow.ops
# hands them over once, through `bind_operators`, at the end of its own import.
OPERATORS = frozenset(
    {
        *("add", "subtract", "multiply", "divide", "pow", "matmul", "neg", "abs"),
        *("less", "less_equal", "greater", "greater_equal", "equal", "not_equal"),
        *("logical_and", "logical_or", "logical_not", "getitem", "reshape", "transpose"),
        *("sum", "mean", "max", "min", "argmax", "cast", "exp", "log", "sqrt"),
        *("copy_to_device", "write_rows", "indexed_slices_to_dense"),
    }
)
_ops = None  # the namespace bind_operators was given


class FreezeError(TypeError):
    """A traced value was needed as a concrete Python value while freezing."""


class _Tracing(threading.local):
    """The tracer recording ops on this thread (None when running eagerly)."""

    def __init__(self):
        self.tracer = None


TRACING = _Tracing()
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def user_frame() -> str:
    """'file:line' of the innermost caller outside the tapeflow package."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_PACKAGE_DIR + os.sep):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


class eager_scope:
    """Context in which ops run eagerly even inside a freeze (used to create
    weights and optimizer slots the first time a traced function runs)."""

    def __enter__(self):
        self._saved = TRACING.tracer
        TRACING.tracer = None

    def __exit__(self, *exc):
        TRACING.tracer = self._saved


def freeze_error(what: str, shape, dtype) -> FreezeError:
    """The error for a traced value that escapes into Python."""
    return FreezeError(
        f"{what} of a traced tensor (shape {shape}, dtype {dtype}) at {user_frame()}: while freezing, "
        "tensors have no values yet, so Python cannot branch or loop on them; use tp.cond or "
        "tp.while_loop for data-dependent control flow, or pass the value as a Python argument"
    )


def bind_operators(namespace) -> None:
    """Give Tensor's operators and methods their ops: `namespace` holds one function per
    name in OPERATORS. Called once, by tapeflow.ops as the last step of its import, so any
    `import tapeflow...` that creates tensors finds them bound."""
    missing = sorted(name for name in OPERATORS if not callable(getattr(namespace, name, None)))
    if missing:
        raise TypeError(f"bind_operators: no function for {missing}")
    global _ops
    _ops = namespace


class Tensor:
    """An immutable n-dimensional value with a dtype and a device."""

    __slots__ = ("_value", "_device", "__weakref__")
    __array_priority__ = 100

    def __init__(self, value, device=None):
        arr = np.asarray(value)
        if arr.dtype not in dtypes._BY_NP:
            raise TypeError(f"Tensor: unsupported dtype {arr.dtype}")
        self._value = arr
        self._device = CPU if device is None else device

    @classmethod
    def _wrap(cls, array: np.ndarray, device=CPU) -> Tensor:
        """Wrap a kernel's output without checks (internal fast path)."""
        t = object.__new__(Tensor)
        t._value = array
        t._device = device
        return t

    # ----- metadata -----
    @property
    def shape(self) -> tuple:
        shape = self._value.shape
        return shape if type(shape) is tuple else tuple(shape)

    @property
    def dtype(self) -> dtypes.DType:
        try:
            return dtypes._BY_NP[self._value.dtype]
        except (KeyError, TypeError):  # an accelerator's array
            return dtypes._BY_NP[backend(self._device.family).dtype_of(self._value)]

    @property
    def device(self):
        return self._device

    @property
    def ndim(self) -> int:
        return len(self._value.shape)

    @property
    def size(self) -> int:
        value = self._value
        return value.size if type(value) is np.ndarray else int(np.prod(value.shape, dtype=np.int64))

    def _host(self) -> np.ndarray:
        """The value as a NumPy array (a copy from the device for an accelerator)."""
        value = self._value
        if type(value) is np.ndarray:
            return value
        check_pending(deferrable=True)  # an id or label found out of range on the device raises here
        return backend(self._device.family).to_host(value)

    # ----- conversion -----
    def numpy(self) -> np.ndarray:
        """A read-only NumPy view of the value (copied to the host from an accelerator)."""
        view = self._host().view()
        view.flags.writeable = False
        return view

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            return arr.astype(dtype)
        if copy:
            return arr.copy()
        return arr

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export the value through DLPack (`torch.from_dlpack(t)`, `np.from_dlpack(t)`).

        The consumer gets its own copy of the value: some consumers (torch) ignore DLPack's
        read-only flag, so shared memory would let them change an immutable tensor. Nothing
        done to the export changes this tensor; `copy=False` raises a BufferError. A Variable
        exports its current value: a later `assign` leaves the export as it was.

        >>> import numpy as np
        >>> import tapeflow as tp
        >>> np.from_dlpack(tp.tensor([1.0, 2.0])).tolist()
        [1.0, 2.0]
        """
        if copy is False:
            raise BufferError(
                "Tensor.__dlpack__: a tensor is exported as a copy (a consumer could write to shared memory), "
                "and copy=False forbids one"
            )
        private = np.array(self.numpy(), copy=True)
        if max_version is None or tuple(max_version)[0] < 1:
            return private.__dlpack__(stream=stream, dl_device=dl_device)
        return private.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(DLPack device type, device id): (1, 0), the host CPU."""
        return self.numpy().__dlpack_device__()

    def to(self, device) -> Tensor:
        """This tensor on `device`: itself when it is there already, else a copy (the only
        way a tensor changes device; tapes and frozen graphs record it as a
        `copy_to_device` op, whose gradient is copied back).

        >>> import tapeflow as tp
        >>> tp.ones((2,)).to("cpu").device
        Device('cpu:0')
        """
        dev = parse_device(device)
        if dev == self._device:
            return self
        return _ops.copy_to_device(self, dev)

    def item(self):
        return self._host().item()

    def tolist(self):
        return self._host().tolist()

    def __repr__(self) -> str:
        body = np.array2string(self._host(), separator=", ", prefix="Tensor(")
        where = "" if self._device is CPU or self._device == CPU else f", device={self._device}"
        return f"Tensor({body}, shape={self.shape}, dtype={self.dtype.name}{where})"

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(
                f"bool: the truth value of a tensor of shape {self.shape} is ambiguous; "
                "reduce it first (tp.max, tp.min) or index one element"
            )
        return bool(self._host())

    def _scalar(self, kind: str):
        if self.size != 1:
            raise TypeError(
                f"{kind}: only a tensor with one element converts to a Python {kind}, got shape {self.shape}"
            )
        return self._host().item()

    def __float__(self) -> float:
        return float(self._scalar("float"))

    def __int__(self) -> int:
        return int(self._scalar("int"))

    def __index__(self) -> int:
        if self.dtype.kind != "i" or self.ndim != 0:
            raise TypeError(f"__index__: only a scalar integer tensor can be an index, got {self.dtype} {self.shape}")
        return int(self._host())

    def __len__(self) -> int:
        if not self._value.shape:
            raise TypeError("len: a scalar tensor has no length")
        return self._value.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    __hash__ = object.__hash__

    # ----- operators (each one calls an op) -----
    def __add__(self, other):
        return _ops.add(self, other)

    def __radd__(self, other):
        return _ops.add(other, self)

    def __sub__(self, other):
        return _ops.subtract(self, other)

    def __rsub__(self, other):
        return _ops.subtract(other, self)

    def __mul__(self, other):
        return _ops.multiply(self, other)

    def __rmul__(self, other):
        return _ops.multiply(other, self)

    def __truediv__(self, other):
        return _ops.divide(self, other)

    def __rtruediv__(self, other):
        return _ops.divide(other, self)

    def __pow__(self, other):
        return _ops.pow(self, other)

    def __rpow__(self, other):
        return _ops.pow(other, self)

    def __matmul__(self, other):
        return _ops.matmul(self, other)

    def __rmatmul__(self, other):
        return _ops.matmul(other, self)

    def __neg__(self):
        return _ops.neg(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _ops.abs(self)

    def __lt__(self, other):
        return _ops.less(self, other)

    def __le__(self, other):
        return _ops.less_equal(self, other)

    def __gt__(self, other):
        return _ops.greater(self, other)

    def __ge__(self, other):
        return _ops.greater_equal(self, other)

    def __eq__(self, other):
        return _ops.equal(self, other)

    def __ne__(self, other):
        return _ops.not_equal(self, other)

    def __and__(self, other):
        return _ops.logical_and(self, other)

    def __or__(self, other):
        return _ops.logical_or(self, other)

    def __invert__(self):
        return _ops.logical_not(self)

    def __getitem__(self, index):
        return _ops.getitem(self, index)

    # ----- method forms of common ops -----
    def reshape(self, *shape):
        return _ops.reshape(self, shape[0] if len(shape) == 1 else shape)

    def transpose(self, perm=None):
        return _ops.transpose(self, perm)

    @property
    def T(self):
        return _ops.transpose(self)

    def sum(self, axis=None, keepdims=False):
        return _ops.sum(self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        return _ops.mean(self, axis, keepdims)

    def max(self, axis=None, keepdims=False):
        return _ops.max(self, axis, keepdims)

    def min(self, axis=None, keepdims=False):
        return _ops.min(self, axis, keepdims)

    def argmax(self, axis=None):
        return _ops.argmax(self, axis)

    def astype(self, dtype):
        return _ops.cast(self, dtype)

    def exp(self):
        return _ops.exp(self)

    def log(self):
        return _ops.log(self)

    def sqrt(self):
        return _ops.sqrt(self)

    def abs(self):
        return _ops.abs(self)


class Variable(Tensor):
    """Mutable state, such as a weight: read like a tensor, changed by assign*.

    Trainable variables are watched by every GradientTape automatically. A variable
    lives on the device current when it is made (or the device of its initial tensor).

    >>> import tapeflow as tp
    >>> v = tp.Variable(tp.zeros((2,)), name="v")
    >>> _ = v.assign_add(tp.ones((2,)))
    >>> v.numpy().tolist()
    [1.0, 1.0]
    """

    __slots__ = ("name", "trainable", "constraint")

    def __init__(self, initial_value, trainable: bool = True, name: str | None = None, dtype=None, constraint=None):
        if callable(initial_value):
            initial_value = initial_value()
        device = initial_value._device if isinstance(initial_value, Tensor) else current_device()
        if isinstance(initial_value, Tensor):
            arr = initial_value._host()
        else:
            arr = np.asarray(initial_value)
            if arr.dtype == np.float64 and not isinstance(initial_value, np.ndarray):
                arr = arr.astype(np.float32)
        if dtype is not None:
            arr = arr.astype(dtypes.as_dtype(dtype).np)
        super().__init__(np.array(arr, copy=True))
        if device != CPU:
            self._value = backend(device.family).from_host(self._value, device.index)
            self._device = device
        self.name = name or "Variable"
        self.trainable = bool(trainable)
        self.constraint = constraint  # a callable the optimizer applies after each update, or None

    def _checked(self, value, method: str):
        if isinstance(value, Tensor) and value._device is not self._device and value._device != self._device:
            raise ValueError(
                f"Variable.{method}: variable '{self.name}' lives on {self._device}, the value on {value._device}; "
                f"move it explicitly with .to({str(self._device)!r})"
            )
        if type(self._value) is not np.ndarray:
            return self._checked_on_device(value, method)
        arr = value._value if isinstance(value, Tensor) else np.asarray(value)
        if arr.shape != self._value.shape:
            raise ValueError(
                f"Variable.{method}: variable '{self.name}' has shape {self.shape}, value has shape {arr.shape}"
            )
        if arr.dtype != self._value.dtype:
            if isinstance(value, Tensor):
                raise TypeError(
                    f"Variable.{method}: variable '{self.name}' has dtype {self.dtype}, value has dtype {value.dtype}"
                )
            arr = arr.astype(self._value.dtype)
        return arr

    def _checked_on_device(self, value, method: str):
        kernels = backend(self._device.family)
        if isinstance(value, Tensor):
            if value.dtype != self.dtype:
                raise TypeError(
                    f"Variable.{method}: variable '{self.name}' has dtype {self.dtype}, value has dtype {value.dtype}"
                )
            arr = value._value
        else:
            arr = kernels.from_host(np.asarray(value, dtype=self.dtype.np), self._device.index)
        if tuple(arr.shape) != self.shape:
            raise ValueError(
                f"Variable.{method}: variable '{self.name}' has shape {self.shape}, value has shape {tuple(arr.shape)}"
            )
        return kernels.conform(arr, self.dtype.np, self._device.index)

    def assign(self, value) -> Variable:
        """Replace the value (same shape and dtype)."""
        if TRACING.tracer is not None:
            return TRACING.tracer.assign(self, value, "assign")
        arr = self._checked(value, "assign")
        # A tensor's array is never written in place, so it can be shared.
        self._value = arr if isinstance(value, Tensor) or type(arr) is not np.ndarray else np.array(arr, copy=True)
        return self

    def assign_add(self, delta) -> Variable:
        """Add `delta` to the value."""
        if TRACING.tracer is not None:
            return TRACING.tracer.assign(self, delta, "assign_add")
        self._value = self._value + self._checked(delta, "assign_add")
        return self

    def assign_sub(self, delta) -> Variable:
        """Subtract `delta` from the value."""
        if TRACING.tracer is not None:
            return TRACING.tracer.assign(self, delta, "assign_sub")
        self._value = self._value - self._checked(delta, "assign_sub")
        return self

    def scatter_update(self, sparse_delta: IndexedSlices) -> Variable:
        """Replace the rows `sparse_delta.indices` by `sparse_delta.values` (repeated rows:
        the last wins). Only those rows are written: in place when nothing else holds the
        variable's array (a tape, a tensor read from it, a NumPy view), on a copy otherwise.

        >>> import tapeflow as tp
        >>> v = tp.Variable(tp.zeros((3, 2)))
        >>> _ = v.scatter_update(tp.IndexedSlices(tp.ones((1, 2)), [2], (3, 2)))
        >>> v.numpy().tolist()
        [[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]]
        """
        return _ops.write_rows(self, sparse_delta, "update")

    def scatter_add(self, sparse_delta: IndexedSlices) -> Variable:
        """Add `sparse_delta.values` to the rows `sparse_delta.indices` (repeats sum), as
        `scatter_update` writes them."""
        return _ops.write_rows(self, sparse_delta, "add")

    def scatter_sub(self, sparse_delta: IndexedSlices) -> Variable:
        """Subtract `sparse_delta.values` from the rows `sparse_delta.indices` (repeats sum)."""
        return _ops.write_rows(self, sparse_delta, "sub")

    def read_value(self) -> Tensor:
        """The current value as an immutable tensor."""
        if TRACING.tracer is not None:
            return TRACING.tracer.read(self)
        return Tensor._wrap(self._value, self._device)

    def numpy(self) -> np.ndarray:
        if TRACING.tracer is not None:
            raise freeze_error(f"numpy() of Variable '{self.name}'", self.shape, self.dtype)
        return super().numpy()

    def _scalar(self, kind: str):
        if TRACING.tracer is not None:
            raise freeze_error(f"{kind}() of Variable '{self.name}'", self.shape, self.dtype)
        return super()._scalar(kind)

    def __repr__(self) -> str:
        body = np.array2string(self._host(), separator=", ", prefix="Variable(")
        return f"Variable('{self.name}', {body}, shape={self.shape}, dtype={self.dtype.name})"


class IndexedSlices:
    """A sparse stand-in for a dense tensor of shape `dense_shape`: rows `indices` of
    its first axis hold `values`, the other rows are zero, and repeated indices add up.

    The gradient of `gather` (axis 0) and of `embedding_lookup` is an IndexedSlices, so
    an embedding's gradient costs the rows a batch touches, not the whole table.
    Optimizers apply it to those rows only; `np.asarray`, `numpy()`, `tp.convert_to_tensor`
    and any op that takes it as an input densify it.

    >>> import tapeflow as tp
    >>> g = tp.IndexedSlices(tp.ones((2, 2)), [0, 0], (3, 2))
    >>> np.asarray(g).tolist()
    [[2.0, 2.0], [0.0, 0.0], [0.0, 0.0]]
    """

    __array_priority__ = 100

    def __init__(self, values, indices, dense_shape):
        self.values = values if isinstance(values, Tensor) else Tensor(values)
        self.indices = indices if isinstance(indices, Tensor) else Tensor(np.asarray(indices, dtype=np.int64))
        self.dense_shape = tuple(None if d is None else int(d) for d in dense_shape)
        if self.indices.dtype.kind != "i" or len(self.indices.shape) != 1:
            raise TypeError(
                f"IndexedSlices: indices must be a 1-D integer tensor, got shape {self.indices.shape} "
                f"and dtype {self.indices.dtype}"
            )
        if not self.dense_shape or tuple(self.values.shape[1:]) != self.dense_shape[1:]:
            raise ValueError(
                f"IndexedSlices: values of shape {self.values.shape} do not fit rows of dense_shape {self.dense_shape}"
            )

    @property
    def shape(self) -> tuple:
        return self.dense_shape

    @property
    def dtype(self) -> dtypes.DType:
        return self.values.dtype

    @property
    def device(self):
        return self.values.device

    @property
    def ndim(self) -> int:
        return len(self.dense_shape)

    def to_dense(self) -> Tensor:
        """The dense tensor (rows scattered into zeros; recorded by tapes like any op)."""
        return _ops.indexed_slices_to_dense(self)

    def numpy(self) -> np.ndarray:
        return self.to_dense().numpy()

    def __array__(self, dtype=None, copy=None):
        return self.to_dense().__array__(dtype, copy)

    def __repr__(self) -> str:
        shapes = f"indices={self.indices.shape}, values={self.values.shape}"
        return f"IndexedSlices({shapes}, dense_shape={self.dense_shape})"


class TracedTensor(Tensor):
    """A symbolic tensor inside a freeze: a shape (None for a dynamic dimension),
    a dtype and the graph value it stands for, but no data."""

    __slots__ = ("_shape", "_dtype", "ref")

    def __init__(self, shape, dtype, ref=None):
        self._value = None
        self._device = CPU
        self._shape = tuple(shape)
        self._dtype = dtypes.as_dtype(dtype)
        self.ref = ref

    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def dtype(self) -> dtypes.DType:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self):
        if any(d is None for d in self._shape):
            return None
        return int(np.prod(self._shape, dtype=np.int64))

    def _escape(self, what: str):
        raise freeze_error(what, self._shape, self._dtype.name)

    def numpy(self):
        self._escape("numpy()")

    def __array__(self, dtype=None, copy=None):
        self._escape("conversion to a NumPy array")

    def item(self):
        self._escape("item()")

    def tolist(self):
        self._escape("tolist()")

    def __bool__(self):
        self._escape("bool()")

    def _scalar(self, kind: str):
        self._escape(f"{kind}()")

    def __index__(self):
        self._escape("use as an index")

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len: a scalar tensor has no length")
        if self._shape[0] is None:
            self._escape("len() of a dynamic dimension")
        return self._shape[0]

    def __repr__(self) -> str:
        dims = ", ".join("?" if d is None else str(d) for d in self._shape)
        name = getattr(self.ref, "name", "?")
        return f"TracedTensor({name}, shape=({dims}), dtype={self._dtype.name})"
