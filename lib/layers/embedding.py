"""Embedding: integer ids -> rows of a trainable [input_dim, output_dim] table.

>>> import tapeflow as tp
>>> emb = tp.layers.Embedding(10, 4)
>>> emb(tp.tensor([[1, 2, 3]])).shape
(1, 3, 4)
"""

from __future__ import annotations

import functools

from tapeflow.backends.common import check_in_range
from tapeflow.layers.base import Layer, serialize_constraint, serialize_initializer, serialize_regularizer
from tapeflow.ops import nn
from tapeflow.ops.math import cast, not_equal
from tapeflow.ops.registry import as_tensor
from tapeflow.ops.shapes import as_int
from tapeflow.tensor import TracedTensor


class Embedding(Layer):
    """Look up `output_dim`-vectors for ids in [0, input_dim); ids outside raise ValueError.

    With mask_zero=True, id 0 is padding: `compute_mask(ids)` is `ids != 0`, to pass to
    a recurrent layer as `mask=`.

    Args:
        input_dim: the number of ids (the table's rows): ids lie in [0, input_dim).
        output_dim: the size of each vector.
        embeddings_initializer: initializer of the table (a name or an initializer). Default "uniform".
        embeddings_regularizer: regularizer of the table (a name, a regularizer, or None).
        embeddings_constraint: constraint of the table, applied after each optimizer update.
        quantization_config: None only (tapeflow does not quantize layers).
        mask_zero: treat id 0 as padding and produce a mask (see above).
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` (floating, "float32" by
            default) and `input_shape` (the input's shape without the batch axis, on the first layer
            of a Sequential).

    >>> import tapeflow as tp
    >>> emb = tp.layers.Embedding(5, 2, mask_zero=True, name="words")
    >>> ids = tp.tensor([[3, 1, 0, 0]])
    >>> emb.compute_mask(ids).numpy().tolist()
    [[True, True, False, False]]
    >>> emb(tp.tensor([7]))
    Traceback (most recent call last):
    ...
    ValueError: words: id 7 is out of range [0, 5) (input_dim=5), in ids of shape (1,)
    """

    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        embeddings_initializer="uniform",
        embeddings_regularizer=None,
        mask_zero: bool = False,
        embeddings_constraint=None,
        quantization_config=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if quantization_config is not None:
            raise NotImplementedError(
                f"{self.name}: quantization_config is not supported (tapeflow does not quantize layers); pass None"
            )
        self.input_dim = as_int(self.name, "input_dim", input_dim, low=1)
        self.output_dim = as_int(self.name, "output_dim", output_dim, low=1)
        self.embeddings_initializer = embeddings_initializer
        self.embeddings_regularizer = embeddings_regularizer
        self.mask_zero = bool(mask_zero)
        self.embeddings_constraint = embeddings_constraint

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            "embeddings",
            (self.input_dim, self.output_dim),
            self.embeddings_initializer,
            self.embeddings_regularizer,
            constraint=self.embeddings_constraint,
        )

    def call(self, inputs):
        ids = inputs if inputs.dtype.kind == "i" else cast(inputs, "int64")
        if not isinstance(ids, TracedTensor):  # a frozen graph checks when it runs
            # on the host at once; on a device without reading it (the error comes at the step's end)
            check_in_range(
                ids._value, 0, self.input_dim, self._deferred_error(functools.partial(self._id_error, ids.shape))
            )
        return nn.embedding_lookup(self.embeddings, ids)

    def _id_error(self, shape, bad) -> ValueError:
        return ValueError(
            f"{self.name}: id {bad} is out of range [0, {self.input_dim}) (input_dim={self.input_dim}), "
            f"in ids of shape {shape}"
        )

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero:
            return None
        return not_equal(as_tensor(inputs, name=self.name), 0)

    def get_config(self):
        return {
            **super().get_config(),
            "input_dim": self.input_dim,
            "output_dim": self.output_dim,
            "embeddings_initializer": serialize_initializer(self.embeddings_initializer),
            "embeddings_regularizer": serialize_regularizer(self.embeddings_regularizer),
            "mask_zero": self.mask_zero,
            "embeddings_constraint": serialize_constraint(self.embeddings_constraint),
            "activity_regularizer": serialize_regularizer(self.activity_regularizer),
            "quantization_config": None,
        }
