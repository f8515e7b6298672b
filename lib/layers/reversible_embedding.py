"""ReversibleEmbedding: an Embedding that also maps hidden vectors back to logits over the
vocabulary (`reverse=True`), with the embedding matrix tied or a separate one.

>>> import tapeflow as tp
>>> emb = tp.layers.ReversibleEmbedding(10, 4)
>>> hidden = emb(tp.tensor([[1, 2, 3]]))
>>> hidden.shape, emb(hidden, reverse=True).shape
((1, 3, 4), (1, 3, 10))
"""

from __future__ import annotations

from tapeflow.layers.embedding import Embedding
from tapeflow.ops.core import cast, transpose
from tapeflow.ops.math import matmul, tanh


class ReversibleEmbedding(Embedding):
    """Embedding ids -> vectors, and with `reverse=True` vectors -> logits (`x @ embeddings.T`
    when `tie_weights`, else `x @ reverse_embeddings`), optionally soft-capped as
    `cap * tanh(logits / cap)`.

    Args:
        input_dim: the vocabulary size.
        output_dim: the size of each vector.
        tie_weights: reuse the embeddings for the reverse projection (default) or learn a
            separate [output_dim, input_dim] `reverse_embeddings`.
        embeddings_initializer: initializer of the embeddings. Default "uniform".
        embeddings_regularizer: regularizer of the embeddings.
        embeddings_constraint: constraint of the tables, applied after each optimizer update.
        mask_zero: whether id 0 is padding (the forward output is masked there).
        reverse_dtype: the dtype of the reverse projection's computation, or None.
        logit_soft_cap: the cap of the logits' soft capping, or None.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`,
            `activity_regularizer`).

    >>> import tapeflow as tp
    >>> emb = tp.layers.ReversibleEmbedding(3, 2, embeddings_initializer="ones", logit_soft_cap=1.0)
    >>> [round(v, 4) for v in emb(tp.ones((1, 2)), reverse=True).numpy()[0].tolist()]
    [0.964, 0.964, 0.964]
    """

    def __init__(
        self,
        input_dim,
        output_dim,
        tie_weights: bool = True,
        embeddings_initializer="uniform",
        embeddings_regularizer=None,
        embeddings_constraint=None,
        mask_zero: bool = False,
        reverse_dtype=None,
        logit_soft_cap=None,
        **kwargs,
    ):
        for key in ("quantization_config",):
            if kwargs.pop(key, None) is not None:
                raise NotImplementedError(f"ReversibleEmbedding: {key} is not supported; pass None")
        super().__init__(
            input_dim,
            output_dim,
            embeddings_initializer=embeddings_initializer,
            embeddings_regularizer=embeddings_regularizer,
            mask_zero=mask_zero,
            embeddings_constraint=embeddings_constraint,
            **kwargs,
        )
        if logit_soft_cap is not None and not float(logit_soft_cap) > 0:
            raise ValueError(f"{self.name}: logit_soft_cap must be a number > 0 or None, got {logit_soft_cap!r}")
        self.tie_weights = bool(tie_weights)
        self.reverse_dtype = reverse_dtype
        self.logit_soft_cap = logit_soft_cap

    def build(self, input_shape=None):
        super().build(input_shape)
        self.reverse_embeddings = None
        if not self.tie_weights:
            self.reverse_embeddings = self.add_weight(
                "reverse_embeddings",
                (self.output_dim, self.input_dim),
                self.embeddings_initializer,
                constraint=self.embeddings_constraint,
            )

    def call(self, inputs, reverse=False):
        if not reverse:
            return super().call(inputs)
        kernel = transpose(self.embeddings) if self.tie_weights else self.reverse_embeddings
        if self.reverse_dtype is not None:
            inputs, kernel = cast(inputs, self.reverse_dtype), cast(kernel, self.reverse_dtype)
        logits = matmul(inputs, kernel)
        if self.logit_soft_cap is not None:
            logits = tanh(logits / self.logit_soft_cap) * self.logit_soft_cap
        return logits

    def get_config(self):
        return {
            **super().get_config(),
            "tie_weights": self.tie_weights,
            "reverse_dtype": self.reverse_dtype,
            "logit_soft_cap": self.logit_soft_cap,
        }
