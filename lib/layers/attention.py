"""Attention layers: MultiHeadAttention (scaled dot-product attention over several heads,
with learned projections), GroupedQueryAttention (query heads sharing fewer key/value heads),
Attention (dot-product) and AdditiveAttention (Bahdanau-style).

>>> import tapeflow as tp
>>> mha = tp.layers.MultiHeadAttention(num_heads=2, key_dim=4)
>>> mha(tp.ones((1, 3, 8)), tp.ones((1, 5, 8))).shape
(1, 3, 8)
"""

from __future__ import annotations

import math

import numpy as np

from tapeflow.layers.base import Layer, serialize_constraint, serialize_initializer, serialize_regularizer
from tapeflow.layers.core import Dropout
from tapeflow.ops import nn
from tapeflow.ops.array import gather, reshape
from tapeflow.ops.core import expand_dims, transpose
from tapeflow.ops.core import sum as reduce_sum
from tapeflow.ops.creation import tensor as constant
from tapeflow.ops.math import logical_and, logical_not, matmul, not_equal, sigmoid, tanh, where
from tapeflow.ops.registry import as_tensor


def _large_negative(dtype) -> float:
    """What masked scores become before the softmax (as Keras: -3e4 in float16, -1e9 otherwise)."""
    return -3e4 if dtype.name == "float16" else -1e9


def as_bool_mask(mask, name: str):
    """A mask as a bool tensor: nonzero entries are True."""
    mask = as_tensor(mask, name=name)
    return mask if mask.dtype.kind == "b" else not_equal(mask, 0)


def masked_softmax(scores, mask=None, axes: int = 1, zero_masked: bool = True):
    """Softmax of `scores` over its last `axes` axes, where a False in `mask` (broadcast to
    the scores) excludes a score: it gets weight zero. A row with nothing left sums to 0, or
    with `zero_masked=False` spreads its weight evenly over every entry.

    >>> import tapeflow as tp
    >>> masked_softmax(tp.zeros((1, 3)), tp.tensor([[True, True, False]])).numpy().tolist()
    [[0.5, 0.5, 0.0]]
    """
    if mask is not None:
        scores = where(mask, scores, constant(_large_negative(scores.dtype), dtype=scores.dtype))
    if axes == 1:
        probs = nn.softmax(scores, axis=-1)
    else:
        shape = scores.shape
        probs = reshape(nn.softmax(reshape(scores, (*shape[:-axes], _product(shape[-axes:]))), axis=-1), shape)
    if mask is not None and zero_masked:
        probs = where(mask, probs, constant(0.0, dtype=probs.dtype))
    return probs


class _Projection(Layer):
    """inputs[..., in] @ kernel[in, *out] + bias[*out]: the projections of MultiHeadAttention
    (Keras builds them as EinsumDense layers with the same kernel and bias shapes). The last
    `contracted` input axes are summed over."""

    def __init__(
        self,
        out_shape,
        contracted=1,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.out_shape = tuple(out_shape)
        self.contracted = contracted
        self.use_bias = use_bias
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
        self.kernel_regularizer = kernel_regularizer
        self.bias_regularizer = bias_regularizer
        self.kernel_constraint = kernel_constraint
        self.bias_constraint = bias_constraint

    def build(self, input_shape):
        in_shape = tuple(input_shape[-self.contracted :])
        if None in in_shape:
            raise ValueError(f"{self.name}: the last axis of the input must be known, got shape {input_shape}")
        shape = in_shape + self.out_shape
        self.kernel = self.add_weight(
            "kernel", shape, self.kernel_initializer, self.kernel_regularizer, constraint=self.kernel_constraint
        )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                "bias", self.out_shape, self.bias_initializer, self.bias_regularizer, constraint=self.bias_constraint
            )

    def call(self, inputs):
        lead = tuple(inputs.shape[: inputs.ndim - self.contracted])
        size_in = math.prod(self.kernel.shape[: self.contracted])
        x = inputs if self.contracted == 1 else reshape(inputs, (*lead, size_in))
        y = matmul(x, reshape(self.kernel, (size_in, math.prod(self.out_shape))))
        y = reshape(y, (*lead, *self.out_shape))
        return y if self.bias is None else y + self.bias


def _shape(value) -> tuple:
    shape = getattr(value, "shape", None)
    return tuple(np.shape(value) if shape is None else shape)


def _positive_int(layer: str, label: str, value, allow_none=False):
    if value is None and allow_none:
        return None
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{layer}: {label} must be a positive integer, got {value!r}")
    return int(value)


class MultiHeadAttention(Layer):
    """Multi-head attention (Vaswani et al., 2017), as Keras' `MultiHeadAttention`.

    `query` [B, T, dim] and `value` [B, S, dim_v] (and `key`, by default `value`) are
    projected to `num_heads` heads of `key_dim` (queries, keys) and `value_dim` (values);
    each head attends with softmax(q k^T / sqrt(key_dim)), and the heads are projected back
    to `query`'s last dimension (or `output_shape`). Inputs of higher rank attend over
    `attention_axes` (by default every axis between the batch and the features).

    Weights, in order: query/kernel [dim, heads, key_dim], query/bias [heads, key_dim], the
    same for key (and gate, with use_gate) and value, then attention_output/kernel
    [heads, value_dim, dim] and its bias [dim].

    Args:
        num_heads: the number of attention heads.
        key_dim: the size of each head for queries and keys.
        value_dim: the size of each head for values (by default key_dim).
        dropout: the dropout rate on the attention weights, in training.
        use_bias: whether the projections have biases.
        output_shape: the output's trailing shape (an int or a tuple); by default the
            query's last dimension.
        attention_axes: the axes attention runs over (an int or a tuple; None: all between
            the batch and the features).
        sliding_window: attend only to keys within `sliding_window - 1` positions (None: all).
        flash_attention: None or False (a fused kernel is not offered).
        kernel_initializer: initializer of the projections' kernels. Default "glorot_uniform".
        bias_initializer: initializer of their biases. Default "zeros".
        kernel_regularizer: regularizer of the kernels (a name, a regularizer, or None).
        bias_regularizer: regularizer of the biases.
        activity_regularizer: a regularizer of the output (its loss joins `losses`).
        kernel_constraint: constraint of the projections' kernels (a name such as "max_norm", a
            constraint, or None), applied after each optimizer update.
        bias_constraint: constraint of their biases.
        use_gate: multiply each head's output by a sigmoid gate projected from the query.
        seed: the seed of the attention dropout's random stream.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype`.

    Call arguments: `query`, `value`, `key=None`, `query_mask`, `value_mask`, `key_mask`
    (bool [B, T] / [B, S], True for a real step; in a functional model they come from the
    inputs' masks, e.g. `Embedding(mask_zero=True)`), `attention_mask` (bool [B, T, S],
    True where a query may attend to a key), `return_attention_scores` (also return the
    weights [B, heads, T, S]), `training`, `use_causal_mask` (each query attends only to
    keys at or before its position).

    >>> import tapeflow as tp
    >>> mha = tp.layers.MultiHeadAttention(num_heads=2, key_dim=3, name="mha")
    >>> out, scores = mha(tp.ones((1, 4, 6)), tp.ones((1, 5, 6)), return_attention_scores=True)
    >>> out.shape, scores.shape
    ((1, 4, 6), (1, 2, 4, 5))
    >>> [w.name for w in mha.weights][:2], tuple(mha.weights[0].shape)
    (['mha/query/kernel', 'mha/query/bias'], (6, 2, 3))
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_shape=None,
        attention_axes=None,
        sliding_window=None,
        flash_attention=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        use_gate=False,
        seed=None,
        **kwargs,
    ):
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        self.num_heads = _positive_int(self.name, "num_heads", num_heads)
        self.key_dim = _positive_int(self.name, "key_dim", key_dim)
        self.value_dim = _positive_int(self.name, "value_dim", value_dim, allow_none=True) or self.key_dim
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"{self.name}: dropout must be in [0, 1), got {dropout!r}")
        self.dropout = float(dropout)
        self.use_bias = bool(use_bias)
        self.use_gate = bool(use_gate)
        if isinstance(output_shape, int | np.integer) and not isinstance(output_shape, bool):
            output_shape = (output_shape,)
        if output_shape is not None:
            if not isinstance(output_shape, list | tuple) or not output_shape:
                raise ValueError(f"{self.name}: output_shape must be an int, a tuple or a list, got {output_shape!r}")
            output_shape = tuple(_positive_int(self.name, "each entry of output_shape", d) for d in output_shape)
        self.output_shape = output_shape
        if isinstance(attention_axes, int | np.integer) and not isinstance(attention_axes, bool):
            attention_axes = (int(attention_axes),)
        if attention_axes is not None:
            if not isinstance(attention_axes, list | tuple) or not attention_axes:
                raise ValueError(
                    f"{self.name}: attention_axes must be an int, a list or a tuple, got {attention_axes!r}"
                )
            attention_axes = tuple(int(a) for a in attention_axes)
        self.attention_axes = attention_axes
        self.sliding_window = _positive_int(self.name, "sliding_window", sliding_window, allow_none=True)
        if flash_attention:
            raise ValueError(f"{self.name}: flash_attention={flash_attention!r} is not supported; pass None or False")
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
        self.kernel_regularizer = kernel_regularizer
        self.bias_regularizer = bias_regularizer
        self.kernel_constraint = kernel_constraint
        self.bias_constraint = bias_constraint
        self.seed = seed
        self.supports_masking = True  # the output keeps the query's mask
        heads = self.num_heads
        self._query_dense = self._projection("query", (heads, self.key_dim))
        self._key_dense = self._projection("key", (heads, self.key_dim))
        self._gate_dense = self._projection("gate", (heads, self.value_dim)) if self.use_gate else None
        self._value_dense = self._projection("value", (heads, self.value_dim))
        self._output_dense = None  # its output size is the query's last axis, known in build
        self._dropout_layer = Dropout(
            self.dropout, seed=seed, name=f"{self.name}/dropout", dtype=self.dtype_policy.name
        )

    def _projection(self, name, out_shape, contracted=1):
        return _Projection(
            out_shape,
            contracted,
            self.use_bias,
            self.kernel_initializer,
            self.bias_initializer,
            self.kernel_regularizer,
            self.bias_regularizer,
            self.kernel_constraint,
            self.bias_constraint,
            name=f"{self.name}/{name}",
            trainable=self.trainable,
            dtype=self.dtype_policy.name,
        )

    def __call__(self, *args, **kwargs):
        # The key and value projections take their input sizes from the `key` and `value`
        # arguments, which `build` (given the query's shape) does not see: build them here.
        given = dict(zip(("query", "value", "key"), args, strict=False))
        given.update({k: kwargs[k] for k in ("query", "value", "key") if kwargs.get(k) is not None})
        if "value" in given and not self._value_dense.built:
            value_shape = _shape(given["value"])
            key_shape = _shape(given["key"]) if given.get("key") is not None else value_shape
            for layer, shape in ((self._key_dense, key_shape), (self._value_dense, value_shape)):
                layer.build(shape)
        return super().__call__(*args, **kwargs)

    def build(self, query_shape):
        if len(query_shape) < 3:
            raise ValueError(f"{self.name}: query must have rank >= 3 ([batch, ..., features]), got {query_shape}")
        out_shape = self.output_shape or (query_shape[-1],)
        if None in out_shape:
            raise ValueError(f"{self.name}: the last axis of query must be known, got shape {query_shape}")
        self._query_dense.build(query_shape)
        self._output_dense = self._projection("attention_output", out_shape, contracted=2)
        self._output_dense.build((*query_shape[:-1], self.num_heads, self.value_dim))

    # ----- the attention itself -----
    def _axes(self, rank: int) -> tuple:
        """The attention axes of the projected [B, ..., heads, dim] tensors (of rank `rank`)."""
        if self.attention_axes is None:
            return tuple(range(1, rank - 2))
        axes = tuple(a if a >= 0 else rank - 1 + a for a in self.attention_axes)
        if any(not 1 <= a < rank - 2 for a in axes) or len(set(axes)) != len(axes):
            raise ValueError(
                f"{self.name}: attention_axes {self.attention_axes} must name distinct axes between the batch "
                f"and the features of inputs of rank {rank - 1}"
            )
        return axes

    def _attend(self, query, key, value, mask, training, return_scores):
        """(outputs [B, ..., heads, value_dim], weights [B, ..., heads, T..., S...])."""
        rank = query.ndim
        axes = self._axes(rank)
        batch = tuple(i for i in range(rank - 1) if i not in axes)
        perm = (*batch, *axes, rank - 1)
        q, k, v = (transpose(t, perm) for t in (query, key, value))
        lead = tuple(q.shape[: len(batch)])
        q_dims, k_dims = tuple(q.shape[len(batch) : -1]), tuple(k.shape[len(batch) : -1])
        flat = len(axes) > 1
        if flat:
            q, k, v = (reshape(t, (*lead, _product(t.shape[len(batch) : -1]), t.shape[-1])) for t in (q, k, v))
        q = q * constant(1.0 / math.sqrt(self.key_dim), dtype=q.dtype)
        scores = matmul(q, transpose(k, (*range(k.ndim - 2), k.ndim - 1, k.ndim - 2)))
        if flat:
            scores = reshape(scores, (*lead, *q_dims, *k_dims))
        if mask is not None:
            while mask.ndim < scores.ndim:
                mask = expand_dims(mask, -2 * len(axes) - 1)
        # As Keras: its fused kernel (no dropout, no scores asked for, rank 4) leaves a query
        # that may attend to no key with even weights; its general path gives it zeros.
        fused = self.dropout == 0.0 and not return_scores and rank == 4
        weights = masked_softmax(scores, mask, len(axes), zero_masked=not fused)
        dropped = self._dropout_layer(weights, training=training) if self.dropout > 0.0 else weights
        if flat:
            dropped = reshape(dropped, (*lead, math.prod(q_dims), _product(k_dims)))
        out = matmul(dropped, v)
        if flat:
            out = reshape(out, (*lead, *q_dims, out.shape[-1]))
        inverse = tuple(int(i) for i in np.argsort(perm))
        return transpose(out, inverse), weights

    def _band(self, query, value, causal: bool):
        """The [1, T, S] mask of a causal and/or sliding-window attention."""
        t, s = query.shape[1], value.shape[1]
        if t is None or s is None:
            raise ValueError(
                f"{self.name}: use_causal_mask and sliding_window need known sequence lengths, "
                f"got query {query.shape} and value {value.shape}"
            )
        rows, cols = np.arange(t)[:, None], np.arange(s)[None, :]
        band = np.ones((t, s), bool)
        if causal:
            band &= rows >= cols
        if self.sliding_window is not None:
            band &= np.abs(rows - cols) < self.sliding_window
        return constant(band[None])

    def _attention_mask(self, query, value, query_mask, value_mask, key_mask, attention_mask, use_causal_mask):
        """Every given mask and the causal band, combined into one bool [B, T, S] mask (or None)."""
        masks = []
        if query_mask is not None:
            masks.append(expand_dims(as_bool_mask(query_mask, self.name), -1))
        for mask in (value_mask, key_mask):
            if mask is not None:
                masks.append(expand_dims(as_bool_mask(mask, self.name), -2))
        if use_causal_mask or self.sliding_window is not None:
            masks.append(self._band(query, value, use_causal_mask))
        if attention_mask is not None:
            masks.insert(0, as_bool_mask(attention_mask, self.name))
        if not masks:
            return None
        combined = masks[0]
        for mask in masks[1:]:
            combined = logical_and(combined, mask)
        return combined

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
    ):
        value = self._convert_input(value)
        key = value if key is None else self._convert_input(key)
        if tuple(value.shape[1:-1]) != tuple(key.shape[1:-1]):
            raise ValueError(
                f"{self.name}: value and key must have the same shape but for the last axis, "
                f"got value {value.shape} and key {key.shape}"
            )
        if value.ndim != query.ndim:
            raise ValueError(f"{self.name}: query {query.shape} and value {value.shape} must have the same rank")
        mask = self._attention_mask(
            query, value, query_mask, value_mask, key_mask, attention_mask, bool(use_causal_mask)
        )
        gate = self._gate_dense(query) if self._gate_dense is not None else None
        projected_query = self._query_dense(query)
        projected_key = self._key_dense(key)
        projected_value = self._value_dense(value)
        out, weights = self._attend(
            projected_query, projected_key, projected_value, mask, training, bool(return_attention_scores)
        )
        if gate is not None:
            out = out * sigmoid(gate)
        out = self._output_dense(out)
        return (out, weights) if return_attention_scores else out

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "dropout": self.dropout,
            "use_bias": self.use_bias,
            "use_gate": self.use_gate,
            "output_shape": self.output_shape,
            "attention_axes": self.attention_axes,
            "sliding_window": self.sliding_window,
            "kernel_initializer": serialize_initializer(self.kernel_initializer),
            "bias_initializer": serialize_initializer(self.bias_initializer),
            "kernel_regularizer": serialize_regularizer(self.kernel_regularizer),
            "bias_regularizer": serialize_regularizer(self.bias_regularizer),
            "activity_regularizer": serialize_regularizer(self.activity_regularizer),
            "kernel_constraint": serialize_constraint(self.kernel_constraint),
            "bias_constraint": serialize_constraint(self.bias_constraint),
            "seed": self.seed,
        }


# ------------------------------------------------------ Attention, AdditiveAttention
def _three_inputs(name: str, inputs, mask):
    """(query, value, key, query_mask, value_mask) from the lists Attention layers take."""
    if not isinstance(inputs, list | tuple) or not 2 <= len(inputs) <= 3:
        raise ValueError(f"{name}: expected a list [query, value] or [query, value, key], got {inputs!r}")
    if mask is not None and (not isinstance(mask, list | tuple) or not 2 <= len(mask) <= 3):
        raise ValueError(f"{name}: mask must be a list [query_mask, value_mask], got {mask!r}")
    query, value = inputs[0], inputs[1]
    key = inputs[2] if len(inputs) > 2 else value
    query_mask, value_mask = (mask[0], mask[1]) if mask is not None else (None, None)
    return query, value, key, query_mask, value_mask


class Attention(Layer):
    """Dot-product attention (Luong-style), as Keras' `Attention`: the scores of
    query [B, Tq, dim] against key [B, Tv, dim] (by default the value) are q k^T (times a
    learned `scale` with use_scale) or, with score_mode="concat", the sum over dim of
    tanh(q + k) (times a learned `concat_score_weight`); their softmax over Tv weighs the
    value rows.

    Args:
        use_scale: learn a scalar `scale` multiplying the scores.
        score_mode: "dot" or "concat".
        dropout: the dropout rate on the attention weights, in training.
        seed: the seed of that dropout's random stream.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype`.

    Call arguments: `inputs` ([query, value] or [query, value, key]); `mask` ([query_mask,
    value_mask], bool, True for a real step: masked value steps get no weight and masked
    query steps give zeros; in a functional model they come from the inputs' masks);
    `training`; `return_attention_scores` (also return the weights [B, Tq, Tv]);
    `use_causal_mask`.

    >>> import tapeflow as tp
    >>> layer = tp.layers.Attention()
    >>> query, keys = tp.ones((1, 2, 3)), tp.ones((1, 2, 3))  # equal scores: the values' mean
    >>> layer([query, tp.tensor([[[1.0, 0.0, 0.0], [3.0, 0.0, 0.0]]]), keys]).numpy()[0, 0].tolist()
    [2.0, 0.0, 0.0]
    """

    def __init__(self, use_scale=False, score_mode="dot", dropout=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        if score_mode not in ("dot", "concat"):
            raise ValueError(f"{self.name}: score_mode must be 'dot' or 'concat', got {score_mode!r}")
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"{self.name}: dropout must be in [0, 1), got {dropout!r}")
        self.use_scale = bool(use_scale)
        self.score_mode = score_mode
        self.dropout = float(dropout)
        self.seed = seed
        self._dropout_layer = Dropout(
            self.dropout, seed=seed, name=f"{self.name}/dropout", dtype=self.dtype_policy.name
        )

    def build(self, input_shape):
        self.scale = self.add_weight("scale", (), "ones") if self.use_scale else None
        self.concat_score_weight = None
        if self.score_mode == "concat":
            self.concat_score_weight = self.add_weight("concat_score_weight", (), "ones")

    def _scores(self, query, key):
        if self.score_mode == "dot":
            scores = matmul(query, transpose(key, (*range(key.ndim - 2), key.ndim - 1, key.ndim - 2)))
            return scores if self.scale is None else scores * self.scale
        summed = expand_dims(query, -2) + expand_dims(key, -3)
        if self.scale is not None:
            summed = self.scale * summed
        return self.concat_score_weight * reduce_sum(tanh(summed), axis=-1)

    def call(self, inputs, mask=None, training=None, return_attention_scores=False, use_causal_mask=False):
        query, value, key, query_mask, value_mask = _three_inputs(self.name, inputs, mask)
        value = self._convert_input(value)
        key = self._convert_input(key)
        scores = self._scores(query, key)
        allowed = None if value_mask is None else expand_dims(as_bool_mask(value_mask, self.name), -2)
        if use_causal_mask:
            t, s = scores.shape[-2], scores.shape[-1]
            if t is None or s is None:
                raise ValueError(
                    f"{self.name}: use_causal_mask needs known sequence lengths, got scores {scores.shape}"
                )
            causal = constant(np.tril(np.ones((t, s), bool))[None])
            allowed = causal if allowed is None else logical_and(allowed, causal)
        if allowed is not None:
            large = constant(65504.0 if scores.dtype.name == "float16" else 1e9, dtype=scores.dtype)
            scores = where(logical_not(allowed), scores - large, scores)
        weights = nn.softmax(scores, axis=-1)
        dropped = self._dropout_layer(weights, training=training) if self.dropout > 0.0 else weights
        out = matmul(dropped, value)
        if query_mask is not None:
            keep = expand_dims(as_bool_mask(query_mask, self.name), -1)
            out = where(keep, out, constant(0.0, dtype=out.dtype))
        return (out, weights) if return_attention_scores else out

    def compute_mask(self, inputs, mask=None):
        if mask is None or mask[0] is None:
            return None
        return as_bool_mask(mask[0], self.name)

    def get_config(self):
        return {
            **super().get_config(),
            "use_scale": self.use_scale,
            "score_mode": self.score_mode,
            "dropout": self.dropout,
            "seed": self.seed,
        }


class AdditiveAttention(Attention):
    """Additive attention (Bahdanau-style), as Keras' `AdditiveAttention`: the scores of
    query [B, Tq, dim] against key [B, Tv, dim] are the sum over dim of
    scale * tanh(q + k), with a learned `scale` [dim] (use_scale) or 1; the rest is
    `Attention`'s (see there for the call arguments).

    Args:
        use_scale: learn the `scale` vector [dim] (default True).
        dropout: the dropout rate on the attention weights, in training.
        **kwargs: `seed` and the base layer's arguments: `name`, `trainable`, `dtype`.

    >>> import tapeflow as tp
    >>> layer = tp.layers.AdditiveAttention(use_scale=False)
    >>> layer([tp.ones((1, 2, 3)), tp.ones((1, 4, 3))]).shape
    (1, 2, 3)
    """

    def __init__(self, use_scale=True, dropout=0.0, **kwargs):
        super().__init__(use_scale=use_scale, dropout=dropout, **kwargs)

    def build(self, input_shape):
        dim = input_shape[0][-1]
        if dim is None:
            raise ValueError(f"{self.name}: the last axis of query must be known, got shape {input_shape[0]}")
        self.scale = self.add_weight("scale", (dim,), "glorot_uniform") if self.use_scale else None
        self.concat_score_weight = None

    def _scores(self, query, key):
        summed = tanh(expand_dims(query, -2) + expand_dims(key, -3))
        if self.scale is not None:
            summed = self.scale * summed
        return reduce_sum(summed, axis=-1)

    def get_config(self):
        config = super().get_config()
        del config["score_mode"]
        return config


# ------------------------------------------------------------ GroupedQueryAttention
class GroupedQueryAttention(MultiHeadAttention):
    """Multi-head attention whose `num_query_heads` query heads share `num_key_value_heads`
    key and value heads (each key/value head serves num_query_heads / num_key_value_heads
    consecutive query heads), as in Llama-style decoders. Keras exports it as
    `GroupQueryAttention`; both names work here.

    Call it as MultiHeadAttention: `layer(query, value, key=None, query_mask=None,
    value_mask=None, key_mask=None, attention_mask=None, return_attention_scores=False,
    training=None, use_causal_mask=False)`.

    Args:
        head_dim: the size of each head.
        num_query_heads: the number of query heads.
        num_key_value_heads: the number of key and value heads (dividing num_query_heads).
        dropout: the dropout rate of the attention weights.
        use_bias: whether the projections have biases.
        sliding_window: attend only to keys fewer than this many positions away, or None.
        flash_attention: not supported (None or False).
        kernel_initializer: initializer of the projection kernels. Default "glorot_uniform".
        bias_initializer: initializer of the biases. Default "zeros".
        kernel_regularizer: regularizer of the kernels.
        bias_regularizer: regularizer of the biases.
        activity_regularizer: a regularizer of the output (its loss joins `losses`).
        kernel_constraint: constraint of the projection kernels (a name such as "max_norm", a
            constraint, or None), applied after each optimizer update.
        bias_constraint: constraint of the biases.
        use_gate: multiply the attention output by a sigmoid gate projected from the query.
        seed: the seed of the dropout's random stream.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`).

    >>> import tapeflow as tp
    >>> gqa = tp.layers.GroupQueryAttention(head_dim=4, num_query_heads=4, num_key_value_heads=2)
    >>> gqa(tp.ones((1, 3, 8)), tp.ones((1, 5, 8))).shape, tuple(gqa.weights[2].shape)
    ((1, 3, 8), (8, 2, 4))
    """

    def __init__(
        self,
        head_dim,
        num_query_heads,
        num_key_value_heads,
        dropout=0.0,
        use_bias=True,
        sliding_window=None,
        flash_attention=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        use_gate=False,
        seed=None,
        **kwargs,
    ):
        super().__init__(
            num_query_heads,
            head_dim,
            dropout=dropout,
            use_bias=use_bias,
            sliding_window=sliding_window,
            flash_attention=flash_attention,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            use_gate=use_gate,
            seed=seed,
            **kwargs,
        )
        kv_heads = _positive_int(self.name, "num_key_value_heads", num_key_value_heads)
        if self.num_heads % kv_heads:
            raise ValueError(
                f"{self.name}: num_query_heads ({self.num_heads}) must be divisible by num_key_value_heads ({kv_heads})"
            )
        self.num_key_value_heads = kv_heads
        self._key_dense = self._projection("key", (kv_heads, self.key_dim))
        self._value_dense = self._projection("value", (kv_heads, self.key_dim))

    @property
    def head_dim(self) -> int:
        return self.key_dim

    @property
    def num_query_heads(self) -> int:
        return self.num_heads

    def _attend(self, query, key, value, mask, training, return_scores):
        # each key/value head serves its group of consecutive query heads
        repeats = self.num_heads // self.num_key_value_heads
        index = constant(np.repeat(np.arange(self.num_key_value_heads), repeats))
        key, value = gather(key, index, axis=key.ndim - 2), gather(value, index, axis=value.ndim - 2)
        return super()._attend(query, key, value, mask, training, return_scores)

    def get_config(self):
        return {
            **Layer.get_config(self),
            "head_dim": self.key_dim,
            "num_query_heads": self.num_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "use_bias": self.use_bias,
            "use_gate": self.use_gate,
            "dropout": self.dropout,
            "sliding_window": self.sliding_window,
            "kernel_initializer": serialize_initializer(self.kernel_initializer),
            "bias_initializer": serialize_initializer(self.bias_initializer),
            "kernel_regularizer": serialize_regularizer(self.kernel_regularizer),
            "bias_regularizer": serialize_regularizer(self.bias_regularizer),
            "activity_regularizer": serialize_regularizer(self.activity_regularizer),
            "kernel_constraint": serialize_constraint(self.kernel_constraint),
            "bias_constraint": serialize_constraint(self.bias_constraint),
            "seed": self.seed,
        }


GroupQueryAttention = GroupedQueryAttention


def _product(sizes) -> int:
    """The number of positions in axes of `sizes`; -1 (inferred) when one is unknown."""
    return -1 if any(n is None for n in sizes) else math.prod(sizes)
