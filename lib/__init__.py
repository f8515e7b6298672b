"""tapeflow: eager tensors that record a tape, and graphs frozen from them.

>>> import tapeflow as tp
>>> x = tp.tensor([[1.0, 2.0]])
>>> with tp.GradientTape() as tape:
...     tape.watch(x)
...     y = tp.sum(x * x)
>>> tape.gradient(y, x).numpy().tolist()
[[2.0, 4.0]]
"""

from tapeflow import (
    activations,
    backend,
    callbacks,
    config,
    constraints,
    data,
    distributed,
    initializers,
    io,
    layers,
    losses,
    metrics,
    mixed_precision,
    ops,
    optimizers,
    profiler,
    queue,
    regularizers,
    saving,
    serialization,
    tree,
    utils,
    word2vec,
)
from tapeflow.autodiff import GradientTape, TapeError, custom_gradient, grad, jvp, value_and_grad
from tapeflow.backends import UnsupportedOpError, device_stats, memory_stats
from tapeflow.backends.numpy_backend import build_info, get_num_threads, set_num_threads
from tapeflow.data import datasets
from tapeflow.devices import Device, DeviceMismatchError, device, list_devices
from tapeflow.dlpack import from_dlpack
from tapeflow.dtypes import (
    DType,
    as_dtype,
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    int32,
    int64,
    result_type,
)
from tapeflow.graph import FreezeError, Graph, TensorSpec, freeze, gradients, load_graph
from tapeflow.graph.function import function
from tapeflow.layers import Input
from tapeflow.models import Model, Sequential
from tapeflow.ops import *  # noqa: F403 - the op namespace is the public API
from tapeflow.ops import nn, random
from tapeflow.ops.registry import get_op
from tapeflow.optimizers import schedules
from tapeflow.tensor import IndexedSlices, Tensor, Variable

__version__ = "0.1.0"

# keras.ops names that differentiate: defined by the autodiff stage, which comes after ops
ops.custom_gradient = custom_gradient
ops.jvp = ops.linalg.jvp = jvp
