"""Optimizer update rules as ops: pure functions from (param, slots, grad) to
their new values, so that eager steps and frozen train steps share them (and a GPU
runs each as one kernel per variable).

>>> import tapeflow as tp
>>> p, m, v = tp.ops.optim.adam_update(tp.ones((2,)), tp.zeros((2,)), tp.zeros((2,)),
...                                    tp.ones((2,)), lr=0.1, step=1)
>>> [round(x, 4) for x in p.numpy().tolist()]
[0.9, 0.9]
"""

from __future__ import annotations

import numpy as np

from tapeflow.backends.common import check_distinct, check_index_range
from tapeflow.ops.registry import apply, as_tensor, defop, wrap_host
from tapeflow.tensor import Tensor


def _check_scalars(name: str, scalars: dict) -> None:
    for label, t in scalars.items():
        if tuple(t.shape) != () or t.dtype.kind != "f":
            raise ValueError(f"{name}: {label} must be a float scalar, got shape {t.shape} and dtype {t.dtype}")


def _check_like_param(name: str, param, arrays: dict) -> None:
    for label, t in arrays.items():
        if tuple(t.shape) != tuple(param.shape) or t.dtype is not param.dtype:
            raise ValueError(
                f"{name}: {label} has shape {t.shape} and dtype {t.dtype}, "
                f"the parameter {param.shape} and {param.dtype}"
            )
    if param.dtype.kind != "f":
        raise TypeError(f"{name}: parameters must be floating point, got {param.dtype}")


def _adam_infer(param, m, v, grad, lr, step, **_):
    _check_scalars("adam_update", {"lr": lr, "step": step})
    _check_like_param("adam_update", param, {"m": m, "v": v, "grad": grad})
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
    return apply(_ADAM, ins + _rate_and_step(ins[0], lr, step), _adam_attrs(beta1, beta2, epsilon, epsilon_on_sqrt_v))


def _rate_and_step(param: Tensor, lr, step) -> tuple:
    """`lr` and `step` as scalar tensors: numbers become scalars of the parameter's float dtype
    beside it."""
    npdtype = param.dtype.np if param.dtype.kind == "f" else np.float32
    return tuple(
        t if isinstance(t, Tensor) else wrap_host(np.asarray(float(t), npdtype), param.device) for t in (lr, step)
    )


def _adam_attrs(beta1, beta2, epsilon, epsilon_on_sqrt_v) -> dict:
    return {
        "beta1": float(beta1),
        "beta2": float(beta2),
        "epsilon": float(epsilon),
        "epsilon_on_sqrt_v": bool(epsilon_on_sqrt_v),
    }


def _rate(lr, like):
    """The learning rate as the update multiplies by it: a Python float from a number or a host
    array (rounded to `like`'s dtype in arithmetic), a device scalar in that dtype."""
    return _like_a_float(lr, like) if _on_device(lr) else float(lr)


def _scalars(where, **values) -> tuple:
    """Numbers as float64 scalars beside the parameter (tensors as they are), so that a product
    such as the weight decay's lr * weight_decay is rounded once, as Python's is."""
    return tuple(
        t if isinstance(t, Tensor) else wrap_host(np.asarray(float(t), np.float64), where) for t in values.values()
    )


def _sgd_momentum_infer(param, m, grad, lr, **_):
    _check_scalars("sgd_momentum_update", {"lr": lr})
    _check_like_param("sgd_momentum_update", param, {"m": m, "grad": grad})
    return [(param.shape, param.dtype)] * 2


@defop("sgd_momentum_update", infer=_sgd_momentum_infer, num_outputs=2)
def _SGD_MOMENTUM(param, m, grad, lr, momentum, nesterov=False):
    lr = _rate(lr, param)
    m_new = m * momentum - grad * lr
    p_new = param + (m_new * momentum - grad * lr) if nesterov else param + m_new
    return p_new.astype(param.dtype), m_new.astype(param.dtype)


def sgd_momentum_update(param, m, grad, lr, momentum: float = 0.9, nesterov: bool = False) -> tuple[Tensor, Tensor]:
    """One step of SGD with momentum in Keras's form; returns (param, m).

    m = momentum * m - lr * grad, then param + m, or with `nesterov`
    param + (momentum * m - lr * grad). `lr` is a number or a scalar tensor.

    >>> import tapeflow as tp
    >>> p, m = tp.ops.optim.sgd_momentum_update(tp.ones((2,)), tp.ones((2,)), tp.ones((2,)), lr=0.5, momentum=0.5)
    >>> p.numpy().tolist(), m.numpy().tolist()
    ([1.0, 1.0], [0.0, 0.0])
    """
    ins = tuple(as_tensor(t, name="sgd_momentum_update") for t in (param, m, grad))
    attrs = {"momentum": float(momentum), "nesterov": bool(nesterov)}
    return apply(_SGD_MOMENTUM, ins + _scalars(ins[0].device, lr=lr), attrs)


def _rmsprop_infer(param, velocity, grad, lr, *slots, rho, momentum, epsilon, centered):
    _check_scalars("rmsprop_update", {"lr": lr})
    names = ["moment"] * (momentum > 0) + ["average_gradient"] * bool(centered)
    if len(slots) != len(names):
        raise ValueError(
            f"rmsprop_update: momentum={momentum} and centered={centered} take the slots {names}, got {len(slots)}"
        )
    arrays = {"velocity": velocity, "grad": grad, **dict(zip(names, slots, strict=True))}
    _check_like_param("rmsprop_update", param, arrays)
    return [(param.shape, param.dtype)] * (2 + len(slots))


@defop("rmsprop_update", infer=_rmsprop_infer, num_outputs=None)
def _RMSPROP(param, velocity, grad, lr, *slots, rho, momentum, epsilon, centered):
    lr = _rate(lr, param)
    moment = slots[0] if momentum > 0 else None
    v_new = velocity * rho + grad * grad * (1.0 - rho)
    outs = [v_new]
    if centered:
        a_new = slots[-1] * rho + grad * (1.0 - rho)
        denominator = v_new - a_new * a_new + epsilon
    else:
        denominator = v_new + epsilon
    increment = grad * lr / np.sqrt(denominator)
    if moment is not None:
        increment = moment * momentum + increment
        outs.append(increment)
    if centered:
        outs.append(a_new)
    return tuple(a.astype(param.dtype) for a in (param - increment, *outs))


def rmsprop_update(
    param,
    velocity,
    grad,
    lr,
    moment=None,
    average_gradient=None,
    rho: float = 0.9,
    momentum: float = 0.0,
    epsilon: float = 1e-7,
    centered: bool = False,
) -> tuple[Tensor, ...]:
    """One RMSprop step in Keras's form; returns (param, velocity), then the new `moment`
    (with `momentum` > 0) and the new `average_gradient` (with `centered`), each given only then.

    velocity = rho * velocity + (1 - rho) * grad^2; the increment lr * grad / sqrt(velocity + epsilon)
    (centered: sqrt(velocity - average_gradient^2 + epsilon), the average moving as the velocity
    does); with momentum, moment = momentum * moment + increment is the increment; param - increment.

    >>> import tapeflow as tp
    >>> p, v = tp.ops.optim.rmsprop_update(tp.ones((1,)), tp.zeros((1,)), tp.ones((1,)), 0.1, epsilon=0.0)
    >>> [round(x, 4) for x in p.numpy().tolist()], [round(x, 4) for x in v.numpy().tolist()]
    ([0.6838], [0.1])
    """
    has = {"moment": momentum > 0, "average_gradient": bool(centered)}
    for label, value in (("moment", moment), ("average_gradient", average_gradient)):
        if (value is not None) != has[label]:
            raise ValueError(
                f"rmsprop_update: {label} is needed exactly when "
                f"{'momentum > 0' if label == 'moment' else 'centered'} (momentum={momentum}, centered={centered})"
            )
    slots = tuple(s for s in (moment, average_gradient) if s is not None)
    ins = tuple(as_tensor(t, name="rmsprop_update") for t in (param, velocity, grad))
    lr_in = _scalars(ins[0].device, lr=lr)
    slots = tuple(as_tensor(t, name="rmsprop_update") for t in slots)
    attrs = {"rho": float(rho), "momentum": float(momentum), "epsilon": float(epsilon), "centered": bool(centered)}
    return apply(_RMSPROP, ins + lr_in + slots, attrs)


def _adagrad_infer(param, accumulator, grad, lr, **_):
    _check_scalars("adagrad_update", {"lr": lr})
    _check_like_param("adagrad_update", param, {"accumulator": accumulator, "grad": grad})
    return [(param.shape, param.dtype)] * 2


@defop("adagrad_update", infer=_adagrad_infer, num_outputs=2)
def _ADAGRAD(param, accumulator, grad, lr, epsilon):
    lr = _rate(lr, param)
    a_new = accumulator + grad * grad
    p_new = param - grad * lr / np.sqrt(a_new + epsilon)
    return p_new.astype(param.dtype), a_new.astype(param.dtype)


def adagrad_update(param, accumulator, grad, lr, epsilon: float = 1e-7) -> tuple[Tensor, Tensor]:
    """One Adagrad step in Keras's form; returns (param, accumulator):
    accumulator + grad^2, then param - lr * grad / sqrt(accumulator + epsilon).

    >>> import tapeflow as tp
    >>> p, a = tp.ops.optim.adagrad_update(tp.ones((1,)), tp.zeros((1,)), tp.full((1,), 3.0), 0.1, epsilon=0.0)
    >>> [round(x, 4) for x in p.numpy().tolist()], a.numpy().tolist()
    ([0.9], [9.0])
    """
    ins = tuple(as_tensor(t, name="adagrad_update") for t in (param, accumulator, grad))
    return apply(_ADAGRAD, ins + _scalars(ins[0].device, lr=lr), {"epsilon": float(epsilon)})


def _adamw_infer(param, m, v, grad, lr, step, **_):
    _check_scalars("adamw_update", {"lr": lr, "step": step})
    _check_like_param("adamw_update", param, {"m": m, "v": v, "grad": grad})
    return [(param.shape, param.dtype)] * 3


@defop("adamw_update", infer=_adamw_infer, num_outputs=3)
def _ADAMW(param, m, v, grad, lr, step, weight_decay, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    decay = _like_a_float((lr if _on_device(lr) else np.asarray(lr)) * weight_decay, param)
    decayed = (param - param * decay).astype(param.dtype)
    return _ADAM.reference(decayed, m, v, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v)


def adamw_update(
    param,
    m,
    v,
    grad,
    lr,
    step,
    weight_decay: float = 0.004,
    beta1: float = 0.9,
    beta2: float = 0.999,
    epsilon: float = 1e-7,
    epsilon_on_sqrt_v: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """One AdamW step (decoupled weight decay): param - param * (lr * weight_decay), then the
    Adam step of `adam_update` on it; returns (param, m, v). lr * weight_decay is computed in
    the float type of `lr` (float64 for a number), then rounded to the parameter's dtype.

    >>> import tapeflow as tp
    >>> p, m, v = tp.ops.optim.adamw_update(tp.ones((1,)), tp.zeros((1,)), tp.zeros((1,)), tp.zeros((1,)),
    ...                                     lr=0.1, step=1, weight_decay=0.5)
    >>> [round(x, 4) for x in p.numpy().tolist()]
    [0.95]
    """
    if not isinstance(step, Tensor) and step < 1:
        raise ValueError(f"adamw_update: step must be >= 1, got {step}")
    ins = tuple(as_tensor(t, name="adamw_update") for t in (param, m, v, grad))
    attrs = {
        "weight_decay": float(weight_decay),
        "beta1": float(beta1),
        "beta2": float(beta2),
        "epsilon": float(epsilon),
        "epsilon_on_sqrt_v": bool(epsilon_on_sqrt_v),
    }
    return apply(_ADAMW, ins + _scalars(ins[0].device, lr=lr, step=step), attrs)


def _sparse_adam_infer(param, m, v, indices, grad, lr, step, **_):
    _check_scalars("sparse_adam_update", {"lr": lr, "step": step})
    _check_like_param("sparse_adam_update", param, {"m": m, "v": v})
    if indices.dtype.kind != "i" or len(indices.shape) != 1:
        raise TypeError(
            f"sparse_adam_update: indices must be a 1-D integer tensor, got shape {indices.shape} and {indices.dtype}"
        )
    rows_shape = (indices.shape[0], *param.shape[1:])
    if len(param.shape) < 1 or tuple(grad.shape) != rows_shape or grad.dtype is not param.dtype:
        raise ValueError(
            f"sparse_adam_update: gradient rows of shape {grad.shape} and dtype {grad.dtype} for "
            f"{indices.shape[0]} indices into a parameter of shape {param.shape} and dtype {param.dtype}"
        )
    return [(param.shape, param.dtype)] * 3


@defop("sparse_adam_update", infer=_sparse_adam_infer, num_outputs=3)
def _SPARSE_ADAM(param, m, v, indices, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v=False):
    rows = distinct_rows("sparse_adam_update", indices, param.shape[0])
    old = [np.take(t, rows, axis=0) for t in (param, m, v)]
    new = _ADAM.reference(*old, grad, lr, step, beta1, beta2, epsilon, epsilon_on_sqrt_v)
    outs = []
    for table, part in zip((param, m, v), new, strict=True):
        out = table.copy()
        out[rows] = part
        outs.append(out)
    return tuple(outs)


def distinct_rows(name: str, indices, num_rows: int):
    """`indices` into the rows of a table of `num_rows`, negative ones counted from the end,
    checked to be in range and distinct (an update of a repeated row would depend on order)."""
    rows = check_index_range(name, indices, num_rows, 0)
    rows = np.where(rows < 0, rows + num_rows, rows)
    check_distinct(name, rows)
    return rows


def sparse_adam_update(
    param,
    m,
    v,
    indices,
    grad,
    lr,
    step,
    beta1: float = 0.9,
    beta2: float = 0.999,
    epsilon: float = 1e-7,
    epsilon_on_sqrt_v: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """The Adam step of `adam_update` on the rows `indices` (distinct) of param, m and v, with
    `grad` holding one gradient row per index; the other rows stay as they are (lazy Adam).
    Returns (param, m, v). A frozen train step updates a variable's rows in place when nothing
    else holds its array, so a step costs the rows it touches, not the table.

    >>> import tapeflow as tp
    >>> p, m, v = tp.ops.optim.sparse_adam_update(tp.ones((3, 1)), tp.zeros((3, 1)), tp.zeros((3, 1)), [2],
    ...                                           tp.ones((1, 1)), lr=0.1, step=1)
    >>> [round(x, 4) for x in p.numpy().ravel().tolist()]
    [1.0, 1.0, 0.9]
    """
    if not isinstance(step, Tensor) and step < 1:
        raise ValueError(f"sparse_adam_update: step must be >= 1, got {step}")
    ins = tuple(as_tensor(t, name="sparse_adam_update") for t in (param, m, v, indices, grad))
    attrs = _adam_attrs(beta1, beta2, epsilon, epsilon_on_sqrt_v)
    return apply(_SPARSE_ADAM, ins + _rate_and_step(ins[0], lr, step), attrs)
