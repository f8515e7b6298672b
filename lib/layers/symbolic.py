"""Symbolic tensors of the functional API, as Keras 3's KerasTensors: a shape (None for sizes
known only later) and a dtype, no value. Calling a layer on them records a layer call; an op
on them (an operator, slicing, `tp.concat`, `tp.nn.relu` ...) records an op node, its
`Operation`. `tp.Model(inputs, outputs)` follows these records back to its inputs.

>>> import tapeflow as tp
>>> x = tp.Input((4,))
>>> y = tp.concat([x[:, ::-1], 2.0 * x], axis=1)
>>> y.shape, type(y.history[0]).__name__, y.history[0].name
((None, 8), 'Operation', 'concat')
"""

from __future__ import annotations

from tapeflow import dtypes, tree
from tapeflow.ops.registry import OpDef, apply
from tapeflow.ops.shapes import as_dims
from tapeflow.tensor import TracedTensor


class SymbolicTensor(TracedTensor):
    """A placeholder with a shape (None for unknown sizes) and a dtype, but no value.

    `Input` makes one; calling a layer on one builds the layer and returns another,
    whose `history` is (layer, positional arguments, keyword arguments): the links a
    functional Model follows. Ops applied to one record an `Operation` the same way.

    >>> import tapeflow as tp
    >>> x = tp.layers.Input(shape=(784,))
    >>> y = tp.layers.Dense(10)(x)
    >>> y.shape, y.dtype, type(y.history[0]).__name__
    ((None, 10), tapeflow.float32, 'Dense')
    """

    __eq__ = object.__eq__  # identity, as KerasTensors compare (they are kept in lists and dicts)
    __hash__ = object.__hash__

    def __init__(self, shape, dtype="float32", name: str | None = None, history=None, index: int = 0):
        super().__init__(as_dims("Input", shape, unknown=True), dtypes.as_dtype(dtype))
        self.input_layer = None  # the InputLayer that made this model input, if any
        self.name = name
        self.history = history
        self.index = index  # which output, in `tree.flatten` order, of the call in `history`

    def symbolic_apply(self, op: OpDef, inputs: tuple, attrs: dict):
        """What `op` on `inputs` (this tensor among them) gives: symbolic outputs, from the
        op's shape rule, of a new `Operation` node (called by the op registry's `apply`)."""
        specs = op.infer(*inputs, **attrs)
        history = (Operation(op, attrs), tuple(inputs), {})
        names = [f"{op.name}/output"] if len(specs) == 1 else [f"{op.name}/output_{i}" for i in range(len(specs))]
        outputs = tuple(
            SymbolicTensor(shape, dtype, name, history, i)
            for i, (name, (shape, dtype)) in enumerate(zip(names, specs, strict=True))
        )
        return outputs[0] if op.num_outputs == 1 else outputs

    def _escape(self, what: str):
        raise TypeError(
            f"{what} of the symbolic tensor {self.name!r} (shape {self.shape}, dtype {self.dtype.name}): a "
            "functional model's tensors have no values while it is defined; use tapeflow ops on them, or put "
            "the Python code in a Layer's call()"
        )

    def __repr__(self) -> str:
        return f"<SymbolicTensor shape={self.shape} dtype={self.dtype.name} name={self.name}>"


class Operation:
    """An op applied to symbolic tensors: a node of a functional model beside its layer calls,
    saved as the op's name and attributes (Keras 3 records its ops as operation nodes).

    >>> import tapeflow as tp
    >>> x = tp.Input((3,))
    >>> node, args, _ = (x + 1.0).history
    >>> node.name, node(tp.ones((1, 3)), args[1]).numpy().tolist()
    ('add', [[2.0, 2.0, 2.0]])
    """

    def __init__(self, op: OpDef, attrs: dict):
        self.op = op
        self.attrs = dict(attrs)

    @property
    def name(self) -> str:
        return self.op.name

    def __call__(self, *inputs):
        return apply(self.op, tuple(inputs), self.attrs)

    def __repr__(self) -> str:
        return f"<Operation {self.op.name} {self.attrs}>"


def symbolic_leaves(structure) -> list[SymbolicTensor]:
    """The symbolic tensors in a nested structure of arguments, in `tree.flatten` order.

    >>> import tapeflow as tp
    >>> x = tp.Input((2,))
    >>> symbolic_leaves(((x, 3), {"mask": [x, None]})) == [x, x]
    True
    """
    return [leaf for leaf in tree.flatten(structure) if isinstance(leaf, SymbolicTensor)]
