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
from gradir.ops.nn.activations import elu, gelu, hardtanh, leaky_relu, log_softmax, relu6, silu, softmax, softplus
from gradir.ops.nn.composite import composite
from gradir.ops.nn.convolution import (
    adaptive_avg_pool2d,
    adaptive_max_pool2d,
    avg_pool2d,
    conv1d,
    conv2d,
    conv_transpose2d,
    max_pool2d,
)
from gradir.ops.nn.layers import dropout, embedding, linear, scaled_dot_product_attention
from gradir.ops.nn.losses import binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, mse_loss, nll_loss
from gradir.ops.nn.normalization import batch_norm, batch_norm_stats, group_norm, layer_norm, rms_norm

__all__ = ["adaptive_avg_pool2d", "adaptive_max_pool2d", "avg_pool2d", "batch_norm", "batch_norm_stats",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "composite", "conv1d", "conv2d",
           "conv_transpose2d", "cross_entropy", "dropout", "elu", "embedding", "fold", "gelu", "group_norm", "hardtanh",
           "layer_norm", "leaky_relu", "linear", "log_softmax", "max_pool2d", "mse_loss", "nll_loss", "one_hot",
           "out_size", "relu", "relu6", "rms_norm", "scaled_dot_product_attention", "sigmoid", "silu", "softmax",
           "softplus", "tanh", "unfold"]
