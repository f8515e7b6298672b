"""DLPack import: a tapeflow tensor over memory that another library (torch, NumPy, JAX,
CuPy on the host) owns, without a copy. Export is `Tensor.__dlpack__`.

>>> import numpy as np
>>> import tapeflow as tp
>>> source = np.arange(3.0)
>>> t = tp.from_dlpack(source)
>>> t.numpy().tolist(), np.shares_memory(t.numpy(), source)
([0.0, 1.0, 2.0], True)
"""

from __future__ import annotations

import numpy as np

from tapeflow import dtypes
from tapeflow.tensor import Tensor

_HOST_DEVICES = {1: "CPU", 3: "CUDA host (pinned)"}
_DEVICE_NAMES = {2: "CUDA", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI", 10: "ROCm", 13: "CUDA managed"}


def from_dlpack(x, copy: bool | None = None) -> Tensor:
    """A tensor over the memory of `x`, any object with `__dlpack__` in host memory.

    The tensor shares that memory (with `copy=None` or `False`), so a change the producer
    makes in place shows through it; `copy=True` takes a private copy. tapeflow never writes
    to it. Data on an accelerator must be moved to the host first (`t.cpu()` in torch).

    Args:
        x: a DLPack producer: a torch tensor, a NumPy array, a JAX or CuPy array on the host.
        copy: True to copy, False to refuse a copy, None (the default) to share when possible.

    >>> import numpy as np
    >>> import tapeflow as tp
    >>> tp.from_dlpack(np.arange(4).reshape(2, 2), copy=True).shape
    (2, 2)
    """
    if not hasattr(x, "__dlpack__") or not hasattr(x, "__dlpack_device__"):
        raise TypeError(
            f"from_dlpack: expected an object with __dlpack__ and __dlpack_device__ (a torch, NumPy, JAX or "
            f"CuPy array), got {type(x).__name__}; pass the array itself, not a DLPack capsule"
        )
    kind, index = x.__dlpack_device__()
    if int(kind) not in _HOST_DEVICES:
        where = _DEVICE_NAMES.get(int(kind), f"DLPack device type {int(kind)}")
        raise ValueError(
            f"from_dlpack: the data lives on {where}:{index}; tapeflow tensors live in host memory, so copy "
            "it to the CPU first (for torch: t.cpu())"
        )
    try:
        array = np.from_dlpack(x, copy=copy)
    except (BufferError, RuntimeError, TypeError, ValueError) as err:
        raise ValueError(f"from_dlpack: {type(x).__name__} could not be exported: {err}") from None
    if array.dtype not in dtypes._BY_NP:
        raise TypeError(f"from_dlpack: dtype {array.dtype} has no tapeflow dtype")
    view = array.view()
    view.flags.writeable = False
    return Tensor(view)
