"""`tp.nn`: activations, convolution and pooling, cross-entropies, dropout, embeddings,
moments, and the sampled losses for large vocabularies.

>>> import tapeflow as tp
>>> tp.nn.relu(tp.tensor([-1.0, 2.0])).numpy().tolist()
[0.0, 2.0]
"""

from tapeflow.ops.nn import functions
from tapeflow.ops.nn.functions import (
    avg_pool2d,
    conv2d,
    conv2d_transpose,
    dropout,
    elu,
    embedding_lookup,
    gelu,
    leaky_relu,
    log_softmax,
    max_pool2d,
    moments,
    relu,
    sigmoid,
    sigmoid_cross_entropy_with_logits,
    softmax,
    softmax_cross_entropy_with_logits,
    softplus,
    sparse_softmax_cross_entropy_with_logits,
    tanh,
)
from tapeflow.ops.nn.sampled_losses import compute_accidental_hits, nce_loss, sampled_softmax_loss

__all__ = [*functions.__all__, "nce_loss", "sampled_softmax_loss", "compute_accidental_hits"]
