"""Every op, defined once, grouped by family; this package binds the
operators of Tensor to them. The primitives the families share (cast, reshape,
sum, full_like ...) are defined in `core`, which every family imports.

>>> from tapeflow import ops
>>> len(ops.registry.all_ops()) > 50
True
"""

from __future__ import annotations

from types import SimpleNamespace

from tapeflow import tensor as _tensor
from tapeflow.ops import (
    array,
    control,
    creation,
    fused,
    keras_names,
    math,
    nn,
    optim,
    random,
    reduce,
    registry,
    skipgram,
    sparse,
    transfer,
)
from tapeflow.ops.array import (
    broadcast_to,
    concat,
    expand_dims,
    flatten,
    gather,
    gather_nd,
    getitem,
    pad,
    scatter_add,
    scatter_nd_add,
    split,
    squeeze,
    tile,
)
from tapeflow.ops.control import cond, while_loop
from tapeflow.ops.creation import (
    constant,
    eye,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    tensor,
    zeros,
    zeros_like,
)
from tapeflow.ops.keras_names import (
    arange,
    concatenate,
    convert_to_numpy,
    convert_to_tensor,
    cumsum,
    matmul,
    maximum,
    minimum,
    one_hot,
    relu,
    reshape,
    shape,
    softmax,
    stack,
    transpose,
    where,
)
from tapeflow.ops.math import (
    abs,
    add,
    cast,
    clip,
    cos,
    divide,
    equal,
    erf,
    exp,
    greater,
    greater_equal,
    identity,
    less,
    less_equal,
    log,
    log1p,
    logical_and,
    logical_not,
    logical_or,
    multiply,
    neg,
    not_equal,
    pow,
    reciprocal,
    rsqrt,
    sigmoid,
    sign,
    sin,
    sqrt,
    square,
    stop_gradient,
    subtract,
    tanh,
)
from tapeflow.ops.reduce import argmax, argmin, logsumexp, max, mean, min, prod, std, sum, var
from tapeflow.ops.sparse import scatter_update
from tapeflow.ops.transfer import copy_to_device

_tensor.bind_operators(
    SimpleNamespace(
        add=add,
        subtract=subtract,
        multiply=multiply,
        divide=divide,
        pow=pow,
        matmul=math.matmul,
        neg=neg,
        abs=abs,
        less=less,
        less_equal=less_equal,
        greater=greater,
        greater_equal=greater_equal,
        equal=equal,
        not_equal=not_equal,
        logical_and=logical_and,
        logical_or=logical_or,
        logical_not=logical_not,
        getitem=getitem,
        reshape=array.reshape,
        transpose=array.transpose,
        sum=sum,
        mean=mean,
        max=max,
        min=min,
        argmax=argmax,
        cast=cast,
        exp=exp,
        log=log,
        sqrt=sqrt,
        copy_to_device=copy_to_device,
        write_rows=sparse.write_rows,
        indexed_slices_to_dense=sparse.indexed_slices_to_dense,
    )
)

__all__ = [name for name in dir() if not name.startswith("_")]
