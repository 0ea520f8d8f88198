"""Neural-network ops (`gr.nn`), with PyTorch-like signatures.

Most are plain compositions of primitives (softmax, layer_norm, gelu, conv2d, pooling, ...), so
autodiff differentiates them node by node. `cross_entropy` and `batch_norm` are *composite
primitives*: one node in the traced graph that carries a hand-derived fused VJP, e.g.
``d loss / d logits = (softmax - onehot) / n``, instead of the chain of its pieces. Before execution
`lower_composites` replaces the node by its decomposition, so backends only see primitives; forward
mode differentiates the decomposition. Pass ``vjp="composed"`` to get the plain composition instead
(same gradients, longer backward graph).

Layer rule: part of the op library; imports gradir.util, gradir.core and gradir.ops modules below it.
"""

from gradir.ops.conv import fold, out_size, unfold
from gradir.ops.elementwise import relu, sigmoid, tanh
from gradir.ops.indexing import one_hot
from gradir.ops.nn.activations import (
    celu,
    elu,
    gelu,
    glu,
    hardsigmoid,
    hardswish,
    hardtanh,
    leaky_relu,
    log_softmax,
    logsigmoid,
    mish,
    prelu,
    relu6,
    selu,
    silu,
    softmax,
    softmin,
    softplus,
    softsign,
    threshold,
)
from gradir.ops.nn.bags import embedding_bag
from gradir.ops.nn.composite import composite
from gradir.ops.nn.convolution import conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d
from gradir.ops.nn.distances import cdist, cosine_similarity, normalize, pairwise_distance
from gradir.ops.nn.layers import dropout, embedding, linear, scaled_dot_product_attention
from gradir.ops.nn.losses import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    kl_div,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)
from gradir.ops.nn.normalization import batch_norm, batch_norm_stats, group_norm, instance_norm, layer_norm, rms_norm
from gradir.ops.nn.pooling import (
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    avg_pool1d,
    avg_pool2d,
    max_pool1d,
    max_pool2d,
)
from gradir.ops.nn.resample import interpolate, pad, pixel_shuffle, pixel_unshuffle
from gradir.util.public import api_dir

__all__ = ["adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool1d", "adaptive_max_pool2d", "avg_pool1d",
           "avg_pool2d", "conv3d", "conv_transpose1d", "embedding_bag", "interpolate", "max_pool1d", "pad",
           "pixel_shuffle", "pixel_unshuffle", "batch_norm", "batch_norm_stats",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "cdist", "celu", "composite", "conv1d",
           "conv2d", "conv_transpose2d", "cosine_similarity", "cross_entropy", "dropout", "elu", "embedding", "fold",
           "gelu", "glu", "group_norm", "hardsigmoid", "hardswish", "hardtanh", "huber_loss", "instance_norm",
           "kl_div", "l1_loss", "layer_norm", "leaky_relu", "linear", "log_softmax", "logsigmoid", "max_pool2d",
           "mish", "mse_loss", "nll_loss", "normalize", "one_hot", "out_size", "pairwise_distance", "prelu", "relu",
           "relu6", "rms_norm", "scaled_dot_product_attention", "selu", "sigmoid", "silu", "smooth_l1_loss",
           "softmax", "softmin", "softplus", "softsign", "tanh", "threshold", "unfold"]


__dir__ = api_dir(globals())  # dir() and tab completion offer __all__, not the imports (gradir.util.public)
