"""The public API, name by name: everything reached from `gr.` (the face's `__all__` and its namespaces), as it
was before the layered layout (issue 20) and must stay. A name added or removed on purpose is added or removed here."""

import types

import pytest

import gradir as gr

FACE = [
    "GradirError", "Graph", "NonFiniteError", "Tensor", "Value", "__version__", "abs", "acos", "acosh", "add",
    "addcdiv", "addcmul",
    "addmm", "all", "amp", "any", "arange", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctan2",
    "arctanh", "argmax", "argmin", "argsort", "asin", "asinh", "astype", "atan", "atan2", "atanh", "baddbmm",
    "bfloat16", "bool_", "broadcast_to", "ceil", "checkpoint", "clamp", "clear_caches", "clip", "clone", "compile",
    "complex128", "concatenate", "copy", "cos", "cosh", "count_nonzero", "cross", "cummax", "cummin", "cumprod",
    "cumsum", "debug_nans", "diag", "diag_embed", "diagonal", "diff", "digamma", "distributed", "divide", "dot",
    "dtypes", "einsum", "enable_grad", "equal", "erf", "erfc", "erfinv", "errors", "exp", "exp2", "expand_dims",
    "expm1", "flip", "float16", "float32", "float64", "floor", "floor_divide", "fmod", "from_torch", "full",
    "full_like",
    "gather", "getitem", "grad", "greater", "greater_equal", "hstack", "imag", "index_add", "index_copy",
    "index_fill", "index_put", "inner", "int32", "int64", "isfinite", "isinf", "isnan",
    "jvp", "kron", "kthvalue", "lerp", "less", "less_equal", "lgamma", "linalg_trace", "log", "log10", "log1p",
    "log2", "logaddexp", "logcumsumexp", "logical_and",
    "logical_not", "logical_or", "logit", "logsumexp", "masked_fill", "masked_scatter", "matmul", "max", "maximum",
    "mean", "median", "meshgrid", "min",
    "minimum", "multiply", "nan_to_num", "nanmean", "nansum", "negative", "no_grad", "norm", "not_equal", "one_hot",
    "ones", "ones_like",
    "optim", "outer", "pad", "polygamma", "power", "prod", "quantile", "real", "relu", "remainder", "repeat",
    "reshape", "roll",
    "rot90", "round", "rsqrt", "scatter", "scatter_add", "scatter_reduce", "scope", "select_scatter", "sigmoid",
    "sign", "sin", "sinh", "slice_scatter", "sort", "split", "sqrt",
    "square", "squeeze", "stack", "std", "stop_gradient", "subtract", "sum", "swapaxes", "take", "tan", "tanh",
    "tensordot",
    "tile", "topk", "torch_saved", "trace", "trace_grad", "train", "transpose", "tril", "triu", "trunc",
    "value_and_grad", "var", "vjp", "vstack", "where", "xlogy", "zeros", "zeros_like",
]

NN = [
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool1d", "adaptive_max_pool2d", "avg_pool1d",
    "avg_pool2d", "batch_norm", "batch_norm_stats", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "cdist", "celu", "composite", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "cosine_similarity", "cross_entropy", "dropout", "elu", "embedding", "embedding_bag", "fold", "gelu", "glu",
    "group_norm", "hardsigmoid", "hardswish", "hardtanh", "huber_loss", "instance_norm", "interpolate", "kl_div",
    "l1_loss", "layer_norm", "leaky_relu", "linear", "log_softmax", "logsigmoid", "max_pool1d", "max_pool2d",
    "mish", "mse_loss", "nll_loss", "normalize", "one_hot", "out_size", "pad", "pairwise_distance", "pixel_shuffle",
    "pixel_unshuffle", "prelu", "relu", "relu6", "rms_norm", "scaled_dot_product_attention", "selu", "sigmoid",
    "silu", "smooth_l1_loss", "softmax", "softmin", "softplus", "softsign", "tanh", "threshold", "unfold",
]

NAMESPACES = {
    "optim": [
        "GradirError", "Optimizer", "ShapeError", "Value", "adam", "adamw", "add", "astype", "chain", "clip",
        "clip_by_global_norm", "cos", "cosine", "equal", "floor", "global_norm", "is_traced", "less",
        "linear_lr", "linear_warmup", "loss_and_grads", "minimum", "power", "rmsprop", "sgd", "sqrt", "step_lr",
        "sum", "tree_flatten", "tree_unflatten", "user_source", "where", "zeros",
    ],
    "amp": [
        "GradirError", "LOW_PRECISION", "Optimizer", "Value", "abs", "add", "all_finite", "astype",
        "cast_floats", "greater_equal", "is_traced", "less", "max", "maximum", "mixed_precision", "quietly",
        "tree_flatten", "tree_unflatten", "user_source", "where", "zeros",
    ],
    "checks": [
        "CmpRow", "CmpTable", "DTypeError", "DirectionalReport", "DirectionalRow", "GradcheckError",
        "GradirError", "ShapeError", "central_difference", "cmp", "complex_step", "directional",
        "forward_difference", "gradcheck", "is_torch", "order_of_accuracy", "torch_to_numpy", "tree_flatten",
        "tree_flatten_with_path", "tree_unflatten",
    ],
    "distributed": [
        "BucketPlan", "DataParallel", "DistributedError", "GradirError", "MESSAGE_BYTES", "ProcessInfo",
        "finish", "free_port", "init", "launch_local", "loss_and_grads", "overlaps", "plan_buckets",
        "tree_digest", "tree_flatten", "tree_flatten_with_path", "tree_unflatten",
    ],
    "dtypes": [
        "DTypeError", "FLOATING", "FROM_SHORT", "SHORT_NAMES", "as_dtype", "bfloat16", "bool_", "complex128",
        "complex64", "float16", "float32", "float64", "int32", "int64", "is_complex", "is_float", "is_inexact",
        "is_integer", "promote", "real_dtype", "short", "weak_dtype",
    ],
    "errors": [
        "AxisError", "BudgetError", "CheckpointError", "DTypeError", "ExecutionError", "FreedGraphError",
        "GradirError", "IRParseError", "InPlaceError", "LoweringError", "ModelFileError",
        "NonDifferentiableError", "NonFiniteError", "ShapeError", "TraceError", "TracedControlFlowError",
        "UnsupportedOpError", "VerifyError", "VersionError",
    ],
    "linalg": [
        "cholesky", "cross", "det", "eigh", "eigvalsh", "inv", "matmul", "matrix_transpose", "qr", "slogdet", "solve",
        "solve_triangular", "svd", "svdvals", "tensordot", "trace",
    ],
    "train": [
        "CheckpointError", "TrainResult", "load_checkpoint", "memory", "plot_losses", "save_checkpoint",
        "train_step",
    ],
}


def public(obj) -> list[str]:
    """A namespace's public names: what it defines (or lists in __all__), not the modules and helpers it imports."""
    listed = set(getattr(obj, "__all__", ()))
    return sorted(n for n in dir(obj) if not n.startswith("_") and not isinstance(getattr(obj, n), types.ModuleType)
                  and (n in listed or getattr(getattr(obj, n), "__module__", "gradir").startswith("gradir")))


def test_the_face_exports_the_same_names():
    assert sorted(gr.__all__) == FACE
    assert all(hasattr(gr, n) for n in FACE)


def test_gr_nn_exports_the_same_names():
    assert sorted(gr.nn.__all__) == NN
    assert all(callable(getattr(gr.nn, n)) for n in NN)


@pytest.mark.parametrize("name", sorted(NAMESPACES))
def test_each_namespace_exports_the_same_names(name):
    assert public(getattr(gr, name)) == NAMESPACES[name]


def test_trace_and_train_are_functions_not_shadowed_modules():
    """gr.trace and gr.train are the functions; the modules that held them live in the layers (core, training)."""
    assert isinstance(gr.trace, types.FunctionType) and isinstance(gr.train, types.FunctionType)
    assert gr.train.load_checkpoint.__module__ == "gradir.training.loop"
    assert gr.trace.__module__.startswith("gradir.api")


def test_compiled_repr_names_the_function_backend_and_cached_signatures():
    """repr(gr.compile(f)) says what it is (issue 24, item 4), not `<gradir.api.Compiled object at 0x...>`."""
    import numpy as np

    def loss(x, y, scale=1.0):
        return gr.sum(x * y) * scale

    f = gr.compile(loss, backend="numpy")
    assert repr(f) == "<gr.compile(loss, backend='numpy'): not traced yet>"
    f(np.ones((2, 3), np.float32), np.ones(3, np.float32))
    f(1.0, 2.0, scale=3.0)
    assert repr(f) == "<gr.compile(loss, backend='numpy'): 2 signatures cached: (f32[2,3], f32[3]); (f64[], f64[], scale=...)>"
