"""`tp.activations`, as `keras.activations`: activation functions with Keras's names and
arguments, and `get` / `serialize` / `deserialize` between them and their names. Layers
resolve their `activation=` argument through `get`.

>>> import tapeflow as tp
>>> tp.activations.get("relu")(tp.tensor([-1.0, 2.0])).numpy().tolist()
[0.0, 2.0]
>>> tp.activations.serialize(tp.activations.gelu)
'gelu'
"""

from __future__ import annotations

from tapeflow import serialization
from tapeflow.ops import keras_names, math, nn
from tapeflow.ops.registry import as_tensor
from tapeflow.tensor import Tensor

__all__ = [
    "celu",
    "glu",
    "hard_shrink",
    "hard_silu",
    "hard_swish",
    "hard_tanh",
    "log_sigmoid",
    "log_softmax",
    "mish",
    "soft_shrink",
    "sparse_plus",
    "sparse_sigmoid",
    "sparsemax",
    "squareplus",
    "tanh_shrink",
    "threshold",
    "elu",
    "exponential",
    "gelu",
    "hard_sigmoid",
    "leaky_relu",
    "linear",
    "relu",
    "relu6",
    "selu",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "softsign",
    "swish",
    "tanh",
    "get",
    "serialize",
    "deserialize",
]

_SELU_ALPHA = 1.6732632423543772
_SELU_SCALE = 1.0507009873554805


def _float(name: str, x) -> Tensor:
    x = as_tensor(x, name=name)
    return x if x.dtype.kind == "f" else math.cast(x, "float32")


def relu(x, negative_slope=0.0, max_value=None, threshold=0.0) -> Tensor:
    """max(x, 0); with `threshold`, x above it and 0 below; `max_value` caps the result and
    `negative_slope` scales what lies below the threshold.

    >>> import tapeflow as tp
    >>> tp.activations.relu(tp.tensor([-2.0, 1.0, 8.0]), negative_slope=0.5, max_value=6.0).numpy().tolist()
    [-1.0, 1.0, 6.0]
    """
    x = _float("relu", x)
    if negative_slope == 0.0 and max_value is None and threshold == 0.0:
        return nn.relu(x)
    above = math.greater(x, threshold)
    out = math.where(above, x, 0.0)
    if max_value is not None:
        out = math.minimum(out, float(max_value))
    if negative_slope != 0.0:
        out = out - float(negative_slope) * nn.relu(float(threshold) - x)
    return out


def leaky_relu(x, negative_slope=0.2) -> Tensor:
    """x for x > 0, negative_slope * x otherwise.

    >>> import tapeflow as tp
    >>> tp.activations.leaky_relu(tp.tensor([-1.0, 2.0]), negative_slope=0.5).numpy().tolist()
    [-0.5, 2.0]
    """
    return nn.leaky_relu(_float("leaky_relu", x), negative_slope)


def relu6(x) -> Tensor:
    """min(max(x, 0), 6).

    >>> import tapeflow as tp
    >>> tp.activations.relu6(tp.tensor([-1.0, 9.0])).numpy().tolist()
    [0.0, 6.0]
    """
    return math.minimum(nn.relu(_float("relu6", x)), 6.0)


def softmax(x, axis=-1) -> Tensor:
    """exp(x) normalized along `axis`; a float16/bfloat16 input is computed and returned in
    float32, so a mixed precision model's probabilities keep float32's resolution.

    >>> import tapeflow as tp
    >>> tp.activations.softmax(tp.zeros((1, 2))).numpy().tolist()
    [[0.5, 0.5]]
    """
    x = _float("softmax", x)
    if x.dtype.bits < 32:
        x = math.cast(x, "float32")
    if x.ndim < 1:
        raise ValueError(f"softmax: needs a tensor of at least one axis, got a scalar of shape {x.shape}")
    return keras_names.softmax(x, axis)


def elu(x, alpha=1.0) -> Tensor:
    """x for x > 0, alpha * (exp(x) - 1) otherwise.

    >>> import tapeflow as tp
    >>> round(tp.activations.elu(tp.tensor([-1.0])).numpy().item(), 4)
    -0.6321
    """
    return nn.elu(_float("elu", x), alpha)


def selu(x) -> Tensor:
    """scale * elu(x, alpha) with Klambauer et al.'s constants (alpha 1.6733, scale 1.0507).

    >>> import tapeflow as tp
    >>> round(tp.activations.selu(tp.tensor([1.0])).numpy().item(), 4)
    1.0507
    """
    return _SELU_SCALE * nn.elu(_float("selu", x), _SELU_ALPHA)


def softplus(x) -> Tensor:
    """log(1 + exp(x)).

    >>> import tapeflow as tp
    >>> round(tp.activations.softplus(tp.tensor([0.0])).numpy().item(), 4)
    0.6931
    """
    return nn.softplus(_float("softplus", x))


def softsign(x) -> Tensor:
    """x / (1 + |x|).

    >>> import tapeflow as tp
    >>> tp.activations.softsign(tp.tensor([-1.0, 3.0])).numpy().tolist()
    [-0.5, 0.75]
    """
    x = _float("softsign", x)
    return x / (math.abs(x) + 1.0)


def silu(x) -> Tensor:
    """x * sigmoid(x) (also called swish).

    >>> import tapeflow as tp
    >>> round(tp.activations.silu(tp.tensor([1.0])).numpy().item(), 4)
    0.7311
    """
    x = _float("silu", x)
    return x * math.sigmoid(x)


swish = silu


def gelu(x, approximate=False) -> Tensor:
    """Gaussian error linear unit: x * Phi(x), or its tanh approximation.

    >>> import tapeflow as tp
    >>> round(tp.activations.gelu(tp.tensor([1.0])).numpy().item(), 4)
    0.8413
    """
    return nn.gelu(_float("gelu", x), approximate)


def tanh(x) -> Tensor:
    """The hyperbolic tangent.

    >>> import tapeflow as tp
    >>> tp.activations.tanh(tp.tensor([0.0])).numpy().tolist()
    [0.0]
    """
    return math.tanh(_float("tanh", x))


def sigmoid(x) -> Tensor:
    """1 / (1 + exp(-x)).

    >>> import tapeflow as tp
    >>> tp.activations.sigmoid(tp.tensor([0.0])).numpy().tolist()
    [0.5]
    """
    return math.sigmoid(_float("sigmoid", x))


def exponential(x) -> Tensor:
    """exp(x).

    >>> import tapeflow as tp
    >>> tp.activations.exponential(tp.tensor([0.0])).numpy().tolist()
    [1.0]
    """
    return math.exp(_float("exponential", x))


def hard_sigmoid(x) -> Tensor:
    """A piecewise-linear sigmoid: relu6(x + 3) / 6, that is clip(x / 6 + 0.5, 0, 1).

    >>> import tapeflow as tp
    >>> tp.activations.hard_sigmoid(tp.tensor([-4.0, 0.0, 4.0])).numpy().tolist()
    [0.0, 0.5, 1.0]
    """
    return relu6(_float("hard_sigmoid", x) + 3.0) / 6.0


def linear(x):
    """The identity.

    >>> linear(3.0)
    3.0
    """
    return x


def celu(x, alpha=1.0) -> Tensor:
    """Continuously differentiable ELU: max(x, 0) + min(alpha * (exp(x / alpha) - 1), 0).

    >>> import tapeflow as tp
    >>> round(tp.activations.celu(tp.tensor([-1.0])).numpy().item(), 4)
    -0.6321
    """
    return nn.celu(x, alpha)


def glu(x, axis=-1) -> Tensor:
    """Gated linear unit: the first half of `axis` times the sigmoid of the second half.

    >>> import tapeflow as tp
    >>> tp.activations.glu(tp.tensor([2.0, 0.0])).numpy().tolist()
    [1.0]
    """
    return nn.glu(x, axis)


def hard_shrink(x, threshold=0.5) -> Tensor:
    """x where |x| > threshold, else 0.

    >>> import tapeflow as tp
    >>> tp.activations.hard_shrink(tp.tensor([-1.0, 0.2])).numpy().tolist()
    [-1.0, 0.0]
    """
    return nn.hard_shrink(x, threshold)


def hard_silu(x) -> Tensor:
    """x * hard_sigmoid(x) (also called hard_swish).

    >>> import tapeflow as tp
    >>> tp.activations.hard_silu(tp.tensor([-4.0, 4.0])).numpy().tolist()
    [-0.0, 4.0]
    """
    x = _float("hard_silu", x)
    return x * hard_sigmoid(x)


hard_swish = hard_silu


def hard_tanh(x) -> Tensor:
    """clip(x, -1, 1).

    >>> import tapeflow as tp
    >>> tp.activations.hard_tanh(tp.tensor([-2.0, 0.5])).numpy().tolist()
    [-1.0, 0.5]
    """
    return nn.hard_tanh(x)


def log_sigmoid(x) -> Tensor:
    """log(sigmoid(x)), computed as -softplus(-x).

    >>> import tapeflow as tp
    >>> round(tp.activations.log_sigmoid(tp.tensor([0.0])).numpy().item(), 4)
    -0.6931
    """
    return nn.log_sigmoid(x)


def log_softmax(x, axis=-1) -> Tensor:
    """x - logsumexp(x) along `axis`.

    >>> import tapeflow as tp
    >>> round(tp.activations.log_softmax(tp.zeros((1, 2))).numpy()[0, 0].item(), 4)
    -0.6931
    """
    return nn.log_softmax(_float("log_softmax", x), axis)


def mish(x) -> Tensor:
    """x * tanh(softplus(x)).

    >>> import tapeflow as tp
    >>> round(tp.activations.mish(tp.tensor([1.0])).numpy().item(), 4)
    0.8651
    """
    x = _float("mish", x)
    return x * math.tanh(nn.softplus(x))


def soft_shrink(x, threshold=0.5) -> Tensor:
    """x - threshold above threshold, x + threshold below -threshold, 0 between.

    >>> import tapeflow as tp
    >>> tp.activations.soft_shrink(tp.tensor([-1.0, 0.2, 1.0])).numpy().tolist()
    [-0.5, 0.0, 0.5]
    """
    return nn.soft_shrink(x, threshold)


def sparse_plus(x) -> Tensor:
    """0 below -1, x above 1, (x + 1)^2 / 4 between.

    >>> import tapeflow as tp
    >>> tp.activations.sparse_plus(tp.tensor([-2.0, 0.0, 2.0])).numpy().tolist()
    [0.0, 0.25, 2.0]
    """
    return nn.sparse_plus(x)


def sparse_sigmoid(x) -> Tensor:
    """0 below -1, 1 above 1, (x + 1) / 2 between.

    >>> import tapeflow as tp
    >>> tp.activations.sparse_sigmoid(tp.tensor([-2.0, 0.0, 2.0])).numpy().tolist()
    [0.0, 0.5, 1.0]
    """
    return nn.sparse_sigmoid(x)


def sparsemax(x, axis=-1) -> Tensor:
    """Sparsemax along `axis`, as Keras computes it (see `tp.nn.sparsemax`).

    >>> import tapeflow as tp
    >>> tp.activations.sparsemax(tp.tensor([1.0, 0.0, -3.0])).numpy().tolist()
    [1.0, 0.0, 0.0]
    """
    return nn.sparsemax(x, axis)


def squareplus(x, b=4) -> Tensor:
    """(x + sqrt(x^2 + b)) / 2.

    >>> import tapeflow as tp
    >>> tp.activations.squareplus(tp.tensor([0.0])).numpy().tolist()
    [1.0]
    """
    return nn.squareplus(x, b)


def tanh_shrink(x) -> Tensor:
    """x - tanh(x).

    >>> import tapeflow as tp
    >>> tp.activations.tanh_shrink(tp.tensor([0.0])).numpy().tolist()
    [0.0]
    """
    return nn.tanh_shrink(x)


def threshold(x, threshold, default_value) -> Tensor:
    """x where x > threshold, else `default_value`.

    >>> import tapeflow as tp
    >>> tp.activations.threshold(tp.tensor([-1.0, 2.0]), 0.0, 5.0).numpy().tolist()
    [5.0, 2.0]
    """
    return nn.threshold(x, threshold, default_value)


BUILTINS = {
    "relu": relu,
    "leaky_relu": leaky_relu,
    "relu6": relu6,
    "softmax": softmax,
    "elu": elu,
    "selu": selu,
    "softplus": softplus,
    "softsign": softsign,
    "silu": silu,
    "gelu": gelu,
    "tanh": tanh,
    "sigmoid": sigmoid,
    "exponential": exponential,
    "hard_sigmoid": hard_sigmoid,
    "linear": linear,
    "celu": celu,
    "glu": glu,
    "hard_shrink": hard_shrink,
    "hard_silu": hard_silu,
    "hard_tanh": hard_tanh,
    "log_sigmoid": log_sigmoid,
    "log_softmax": log_softmax,
    "mish": mish,
    "soft_shrink": soft_shrink,
    "sparse_plus": sparse_plus,
    "sparse_sigmoid": sparse_sigmoid,
    "sparsemax": sparsemax,
    "squareplus": squareplus,
    "tanh_shrink": tanh_shrink,
    "threshold": threshold,
}
_ALIASES = {"swish": silu, "hard_swish": hard_silu}


def serialize(activation) -> str:
    """The name of a built-in activation, or the registered name of a function registered
    with `tp.saving.register_serializable`.

    >>> import tapeflow as tp
    >>> serialize(tp.activations.relu), serialize(tp.activations.swish)
    ('relu', 'silu')
    """
    for name, fn in BUILTINS.items():
        if activation is fn:
            return name
    name = serialization.registered_name(activation)
    if name is None:
        raise ValueError(
            f"activations.serialize: {activation!r} is not a built-in activation nor a registered function; "
            "register it with @tp.saving.register_serializable()"
        )
    return name


def deserialize(config):
    """The activation function a name (or Keras's {"class_name": "function", "config": name}
    dict) names: a built-in, or a function registered with `tp.saving.register_serializable`.

    >>> deserialize("tanh") is tanh
    True
    """
    if isinstance(config, dict) and isinstance(config.get("config"), str):
        registered = config.get("registered_name")
        config = registered if registered not in (None, "function") else config["config"]
    if not isinstance(config, str):
        raise TypeError(f"activations.deserialize: expected an activation's name, got {config!r}")
    found = BUILTINS.get(config) or _ALIASES.get(config) or serialization.lookup(config)
    if not callable(found):
        raise ValueError(
            f"activations.deserialize: unknown activation {config!r}; known: {sorted(BUILTINS | _ALIASES)} "
            "and registered functions"
        )
    return found


def get(identifier):
    """An activation from a name, a serialized config, a callable (returned as is), or None
    (the identity, `linear`).

    >>> get(None) is linear, get("swish") is silu
    (True, True)
    """
    if identifier is None:
        return linear
    if isinstance(identifier, str | dict):
        return deserialize(identifier)
    if callable(identifier):
        return identifier
    raise TypeError(f"activations.get: expected a name or a callable, got {identifier!r}")
