"""`tp.nn` (also `tp.ops.nn`): activations, convolution and pooling, cross-entropies,
dropout, embeddings, moments, the sampled losses for large vocabularies, and Keras 3's
`keras.ops.nn` names with Keras's arguments.

>>> import tapeflow as tp
>>> tp.nn.relu(tp.tensor([-1.0, 2.0])).numpy().tolist()
[0.0, 2.0]
"""

from tapeflow.ops.nn import conv3d as _conv3d
from tapeflow.ops.nn import depthwise as _depthwise
from tapeflow.ops.nn import functions, keras_functions
from tapeflow.ops.nn.conv3d import avg_pool3d, conv3d, conv3d_transpose, max_pool3d
from tapeflow.ops.nn.depthwise import depthwise_conv2d
from tapeflow.ops.nn.functions import (
    avg_pool2d,
    conv2d,
    conv2d_transpose,
    dropout,
    elu,
    embedding_lookup,
    max_pool2d,
    relu,
    sigmoid,
    sigmoid_cross_entropy_with_logits,
    softmax_cross_entropy_with_logits,
    softplus,
    sparse_softmax_cross_entropy_with_logits,
    tanh,
)
from tapeflow.ops.nn.keras_functions import (
    adaptive_average_pool,
    adaptive_max_pool,
    average_pool,
    batch_normalization,
    binary_crossentropy,
    categorical_crossentropy,
    celu,
    conv,
    conv_transpose,
    ctc_decode,
    ctc_loss,
    depth_to_space,
    depthwise_conv,
    dot_product_attention,
    fold,
    gelu,
    glu,
    hard_shrink,
    hard_sigmoid,
    hard_silu,
    hard_swish,
    hard_tanh,
    layer_normalization,
    leaky_relu,
    log_sigmoid,
    log_softmax,
    max_pool,
    moments,
    multi_hot,
    normalize,
    one_hot,
    polar,
    psnr,
    relu6,
    rms_normalization,
    selu,
    separable_conv,
    silu,
    soft_shrink,
    softmax,
    softsign,
    space_to_depth,
    sparse_categorical_crossentropy,
    sparse_plus,
    sparse_sigmoid,
    sparsemax,
    squareplus,
    swish,
    tanh_shrink,
    threshold,
    unfold,
)
from tapeflow.ops.nn.sampled_losses import compute_accidental_hits, nce_loss, sampled_softmax_loss

__all__ = sorted(
    {
        *functions.__all__,
        *keras_functions.__all__,
        *_conv3d.__all__,
        *_depthwise.__all__,
        "nce_loss",
        "sampled_softmax_loss",
        "compute_accidental_hits",
    }
)
