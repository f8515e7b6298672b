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

from tapeflow.ops.registry import apply, as_tensor, defop
from tapeflow.tensor import Tensor


def _adam_infer(param, m, v, grad, **_):
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
def _ADAM(param, m, v, grad, lr, beta1, beta2, epsilon, step):
    m_new = beta1 * m + (1.0 - beta1) * grad
    v_new = beta2 * v + (1.0 - beta2) * grad * grad
    m_hat = m_new / (1.0 - beta1**step)
    v_hat = v_new / (1.0 - beta2**step)
    p_new = param - lr * m_hat / (np.sqrt(v_hat) + epsilon)
    return p_new.astype(param.dtype), m_new.astype(param.dtype), v_new.astype(param.dtype)


def adam_update(
    param, m, v, grad, lr: float, step: int, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-7
) -> tuple[Tensor, Tensor, Tensor]:
    """One Adam step (Kingma and Ba, with bias correction); returns (param, m, v).

    `epsilon` is added to sqrt(v_hat), after bias correction (the paper's and
    torch's form); tp.optimizers.Adam passes epsilon / sqrt(1 - beta2**step)
    to get Keras's form, epsilon added to sqrt(v).
    """
    if step < 1:
        raise ValueError(f"adam_update: step must be >= 1, got {step}")
    ins = tuple(as_tensor(t, name="adam_update") for t in (param, m, v, grad))
    attrs = {
        "lr": float(lr),
        "beta1": float(beta1),
        "beta2": float(beta2),
        "epsilon": float(epsilon),
        "step": int(step),
    }
    return apply(_ADAM, ins, attrs)
