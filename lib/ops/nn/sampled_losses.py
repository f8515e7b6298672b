"""Sampled losses for large output vocabularies: `nce_loss` and `sampled_softmax_loss`,
with TensorFlow's arguments and arithmetic.

Both score the true classes and a few sampled classes instead of every class: the
logits are inputs @ weights[classes].T + biases[classes], less log(expected count) of
each class under the sampler (which makes the estimate unbiased). The gradients of
`weights` and `biases` are IndexedSlices over the classes used.

>>> import tapeflow as tp
>>> w, b = tp.Variable(tp.zeros((50, 4))), tp.Variable(tp.zeros((50,)))
>>> loss = tp.nn.nce_loss(w, b, [[3], [7]], tp.ones((2, 4)), num_sampled=5, num_classes=50, seed=0)
>>> loss.shape
(2,)
"""

from __future__ import annotations

import numpy as np

from tapeflow.ops.array import concat, expand_dims, gather, reshape, transpose
from tapeflow.ops.creation import ones_like, zeros_like
from tapeflow.ops.math import cast, equal, log, matmul, stop_gradient
from tapeflow.ops.nn.functions import sigmoid_cross_entropy_with_logits, softmax_cross_entropy_with_logits
from tapeflow.ops.random import log_uniform_candidate_sampler
from tapeflow.ops.reduce import max as reduce_max
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.ops.registry import as_tensor
from tapeflow.tensor import Tensor


def compute_accidental_hits(true_classes, sampled_candidates, num_true: int) -> Tensor:
    """A [batch, num_sampled] float mask: 1 where a sampled class is one of the row's true
    classes (TensorFlow returns the same facts as sparse coordinates).

    >>> import tapeflow as tp
    >>> compute_accidental_hits([[2], [5]], [5, 1, 2], 1).numpy().tolist()
    [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    """
    labels = as_tensor(true_classes, name="compute_accidental_hits")
    sampled = as_tensor(sampled_candidates, name="compute_accidental_hits")
    same = equal(expand_dims(labels, 2), reshape(sampled, (1, 1, -1)))
    return reduce_max(cast(same, "float32"), axis=1)


def _sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true, sampled_values, hits, seed):
    """(logits [batch, num_true + num_sampled], target probabilities), as TensorFlow's
    _compute_sampled_logits builds them (subtracting log Q)."""
    name = "sampled loss"
    weights, biases = as_tensor(weights, name=name), as_tensor(biases, name=name)
    inputs = as_tensor(inputs, name=name)
    labels = as_tensor(labels, name=name)
    if labels.dtype.kind != "i":
        raise TypeError(f"{name}: labels must be integers, got {labels.dtype}")
    if len(labels.shape) == 1 and num_true == 1:
        labels = reshape(labels, (-1, 1))
    if len(labels.shape) != 2 or labels.shape[1] != num_true:
        raise ValueError(f"{name}: labels must have shape [batch, num_true={num_true}], got {labels.shape}")
    if len(inputs.shape) != 2 or inputs.dtype.kind != "f":
        raise ValueError(f"{name}: inputs must be a float [batch, dim] tensor, got {inputs.shape} {inputs.dtype}")
    if len(weights.shape) != 2 or weights.shape[1] != inputs.shape[1] or tuple(biases.shape) != (weights.shape[0],):
        raise ValueError(
            f"{name}: weights {weights.shape} and biases {biases.shape} must be [num_classes, {inputs.shape[1]}] "
            "and [num_classes]"
        )
    if sampled_values is None:
        sampled_values = log_uniform_candidate_sampler(labels, num_true, num_sampled, True, num_classes, seed=seed)
    sampled, true_expected, sampled_expected = (stop_gradient(as_tensor(v, name=name)) for v in sampled_values)
    dtype = inputs.dtype
    true_w = reshape(gather(weights, reshape(labels, (-1,))), (-1, num_true, inputs.shape[1]))
    true_b = reshape(gather(biases, reshape(labels, (-1,))), (-1, num_true))
    true_logits = reduce_sum(expand_dims(inputs, 1) * true_w, axis=2) + true_b
    sampled_logits = matmul(inputs, transpose(gather(weights, sampled))) + gather(biases, sampled)
    if hits:
        mask = cast(compute_accidental_hits(labels, sampled, num_true), dtype)
        sampled_logits = sampled_logits + mask * float(-np.finfo(dtype.np).max)
    true_logits = true_logits - log(cast(true_expected, dtype))
    sampled_logits = sampled_logits - log(cast(sampled_expected, dtype))
    logits = concat([true_logits, sampled_logits], axis=1)
    targets = concat([ones_like(true_logits) / float(num_true), zeros_like(sampled_logits)], axis=1)
    return logits, targets


def nce_loss(
    weights,
    biases,
    labels,
    inputs,
    num_sampled: int,
    num_classes: int,
    num_true: int = 1,
    sampled_values=None,
    remove_accidental_hits: bool = False,
    seed=None,
    name: str = "nce_loss",
) -> Tensor:
    """Noise-contrastive estimation loss per example (Gutmann and Hyvarinen; Mnih and Teh):
    logistic regression telling the true classes (target 1 / num_true) from
    `num_sampled` classes drawn by `sampled_values` (default: a log-uniform sampler,
    unique draws, shared by the batch).

    `weights` [num_classes, dim] and `biases` [num_classes] are the output layer;
    `labels` [batch, num_true] the true classes; `inputs` [batch, dim] the activations.
    `sampled_values` is what a `tp.random.*_candidate_sampler` returns.

    >>> import tapeflow as tp
    >>> w, b = tp.zeros((10, 2)), tp.zeros((10,))
    >>> tp.nn.nce_loss(w, b, [[1]], tp.ones((1, 2)), 3, 10, seed=0).shape
    (1,)
    """
    sampling = (num_sampled, num_classes, num_true, sampled_values, remove_accidental_hits, seed)
    logits, targets = _sampled_logits(weights, biases, labels, inputs, *sampling)
    return reduce_sum(sigmoid_cross_entropy_with_logits(labels=targets, logits=logits), axis=1)


def sampled_softmax_loss(
    weights,
    biases,
    labels,
    inputs,
    num_sampled: int,
    num_classes: int,
    num_true: int = 1,
    sampled_values=None,
    remove_accidental_hits: bool = True,
    seed=None,
    name: str = "sampled_softmax_loss",
) -> Tensor:
    """Softmax cross-entropy per example over the true classes and `num_sampled` sampled
    classes (Jean et al. 2015), an estimate of the full softmax loss that approaches it as
    `num_sampled` nears `num_classes`; arguments as for `nce_loss`. Sampled classes that
    equal a true class are dropped by default (`remove_accidental_hits`).

    >>> import tapeflow as tp
    >>> w, b = tp.zeros((10, 2)), tp.zeros((10,))
    >>> tp.nn.sampled_softmax_loss(w, b, [[1]], tp.ones((1, 2)), 3, 10, seed=0).shape
    (1,)
    """
    sampling = (num_sampled, num_classes, num_true, sampled_values, remove_accidental_hits, seed)
    logits, targets = _sampled_logits(weights, biases, labels, inputs, *sampling)
    return softmax_cross_entropy_with_logits(labels=stop_gradient(targets), logits=logits)
