"""Optimizer update rules as ops: pure functions from (param, slots, grad) to
their new values, so that eager steps and frozen train steps share them.

>>> import tapeflow as tp
>>> p, m, v = tp.ops.optim.adam_update(tp.ones((2,)), tp.zeros((2,)), tp.zeros((2,)),
...                                    tp.ones((2,)), lr=0.1, step=1)
>>> [round(x, 4) for x in p.numpy().tolist()]
[0.9, 0.9]
"""

from __future__ import annotations

import numpy as np

from tapeflow.ops.registry import apply, as_tensor, defop, wrap_host
from tapeflow.tensor import Tensor


def _adam_infer(param, m, v, grad, lr, step, **_):
    for label, t in (("lr", lr), ("step", step)):
        if tuple(t.shape) != () or t.dtype.kind != "f":
            raise ValueError(f"adam_update: {label} must be a float scalar, got shape {t.shape} and dtype {t.dtype}")
    for label, t in (("m", m), ("v", v), ("grad", grad)):
        if tuple(t.shape) != tuple(param.shape) or t.dtype is not param.dtype:
            raise ValueError(
                f"adam_update: {label} has shape {t.shape} and dtype {t.dtype}, "
                f"the parameter {param.shape} and {param.dtype}"
            )
    if param.dtype.kind != "f":
        raise TypeError(f"adam_update: parameters must be floating point, got {param.dtype}")
    return [(param.shape, param.dtype)] * 3


@defop("adam_update", infer=_adam_infer, num_outputs=3)
def _ADAM(param, m, v, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    if not _on_device(lr) and not _on_device(step):  # numbers or host arrays
        lr, step = float(lr), float(step)
        correct1, correct2 = 1.0 - beta1**step, 1.0 - beta2**step
    else:  # scalars on a device stay there: reading them would stall it at every step
        step = step.astype(np.float64)
        lr, correct1, correct2 = (_like_a_float(s, param) for s in (lr, 1.0 - beta1**step, 1.0 - beta2**step))
    if epsilon_on_sqrt_v:
        epsilon = epsilon / np.sqrt(1.0 - beta2**step)
    m_new = beta1 * m + (1.0 - beta1) * grad
    v_new = beta2 * v + (1.0 - beta2) * grad * grad
    m_hat = m_new / correct1
    v_hat = v_new / correct2
    p_new = param - lr * m_hat / (np.sqrt(v_hat) + epsilon)
    return p_new.astype(param.dtype), m_new.astype(param.dtype), v_new.astype(param.dtype)


def _on_device(value) -> bool:
    return hasattr(value, "astype") and not isinstance(value, np.ndarray | np.generic)


def _like_a_float(scalar, like):
    """A 0-d device scalar in the dtype of `like`: what a Python float becomes in arithmetic
    with the array `like`, so that a device step computes what the host step does."""
    return scalar.astype(like.dtype)


def adam_update(
    param,
    m,
    v,
    grad,
    lr,
    step,
    beta1: float = 0.9,
    beta2: float = 0.999,
    epsilon: float = 1e-7,
    epsilon_on_sqrt_v: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """One Adam step (Kingma and Ba, with bias correction); returns (param, m, v).

    `lr` and `step` (counted from 1) are numbers or scalar tensors; as tensors they
    are inputs of a frozen train step, so one graph serves every step. `epsilon`
    is added to sqrt(v_hat), after bias correction (the paper's and torch's form),
    or with `epsilon_on_sqrt_v` to sqrt(v) before it (Keras's form).
    """
    if not isinstance(step, Tensor) and step < 1:
        raise ValueError(f"adam_update: step must be >= 1, got {step}")
    ins = tuple(as_tensor(t, name="adam_update") for t in (param, m, v, grad))
    npdtype = ins[0].dtype.np if ins[0].dtype.kind == "f" else np.float32
    where = ins[0].device  # a number becomes a scalar beside the parameter
    scalars = tuple(t if isinstance(t, Tensor) else wrap_host(np.asarray(float(t), npdtype), where) for t in (lr, step))
    attrs = {
        "beta1": float(beta1),
        "beta2": float(beta2),
        "epsilon": float(epsilon),
        "epsilon_on_sqrt_v": bool(epsilon_on_sqrt_v),
    }
    return apply(_ADAM, ins + scalars, attrs)
