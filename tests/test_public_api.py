"""The public API, name by name: everything reached from `gr.` (the face's `__all__` and its namespaces), as it
was before the layered layout (issue 20) and must stay. A name added or removed on purpose is added or removed here.
Each namespace offers `dir()` and tab completion its `__all__` only, not its imports (issue 24, item 4)."""

import ast
import importlib
import pathlib
import types

import numpy as np
import pytest

import gradir as gr

FACE = [
    "GradirError", "Graph", "NonFiniteError", "Tensor", "TensorSpec", "Value", "__version__", "abs", "acos", "acosh",
    "add", "addcdiv", "addcmul", "addmm", "all", "amp", "any", "arange", "arccos", "arccosh", "arcsin", "arcsinh",
    "arctan", "arctan2", "arctanh", "argmax", "argmin", "argsort", "asin", "asinh", "astype", "atan", "atan2",
    "atanh", "baddbmm", "bf16", "bfloat16", "bool_", "broadcast_to", "ceil", "checkpoint", "checks", "clamp",
    "clear_caches", "clip", "clone", "compile", "complex128", "concatenate", "copy", "cos", "cosh", "count_nonzero",
    "cross", "cummax", "cummin", "cumprod", "cumsum", "debug_nans", "diag", "diag_embed", "diagonal", "diff",
    "digamma", "distributed", "divide", "dot", "dtypes", "einsum", "enable_grad", "equal", "erf", "erfc", "erfinv",
    "errors", "exp", "exp2", "expand_dims", "expm1", "f16", "f32", "f64", "flip", "float16", "float32", "float64",
    "floor", "floor_divide", "fmod", "from_torch", "full", "full_like", "gather", "getitem", "grad", "greater",
    "greater_equal", "hessian", "hstack", "i32", "i64", "imag", "index_add", "index_copy", "index_fill", "index_put",
    "inner", "int32", "int64", "isfinite", "isinf", "isnan", "jacfwd", "jacobian", "jvp", "kron", "kthvalue", "lerp",
    "less", "less_equal", "lgamma", "linalg", "linalg_trace", "log", "log10", "log1p", "log2", "logaddexp",
    "logcumsumexp", "logical_and", "logical_not", "logical_or", "logit", "logsumexp", "masked_fill",
    "masked_scatter", "matmul", "max", "maximum", "mean", "median", "meshgrid", "min", "minimum", "multiply",
    "nan_to_num", "nanmean", "nansum", "negative", "nn", "no_grad", "norm", "not_equal", "one_hot", "ones",
    "ones_like", "optim", "outer", "pad", "polygamma", "power", "prod", "quantile", "real", "relu", "remainder",
    "repeat", "reshape", "roll", "rot90", "round", "rsqrt", "scatter", "scatter_add", "scatter_reduce", "scope",
    "select_scatter", "sigmoid", "sign", "sin", "sinh", "slice_scatter", "sort", "split", "sqrt", "square",
    "squeeze", "stack", "std", "stop_gradient", "subtract", "sum", "swapaxes", "take", "tan", "tanh", "tensordot",
    "tile", "topk", "torch_saved", "trace", "trace_grad", "train", "transpose", "tril", "triu", "trunc",
    "value_and_grad", "var", "viz", "vjp", "vmap", "vstack", "where", "xlogy", "zeros", "zeros_like",
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
        "Optimizer", "adam", "adamw", "chain", "clip", "clip_by_global_norm", "cosine", "global_norm", "linear_lr",
        "linear_warmup", "loss_and_grads", "rmsprop", "sgd", "step_lr"
    ],
    "amp": [
        "all_finite", "cast_floats", "mixed_precision"
    ],
    "checks": [
        "CmpRow", "CmpTable", "DirectionalReport", "DirectionalRow", "GradcheckError", "central_difference", "cmp",
        "complex_step", "directional", "forward_difference", "gradcheck", "order_of_accuracy"
    ],
    "distributed": [
        "DataParallel", "DistributedError", "ProcessInfo", "finish", "free_port", "init", "launch_local", "overlaps",
        "tree_digest"
    ],
    "dtypes": [
        "FLOATING", "FROM_SHORT", "SHORT_NAMES", "as_dtype", "bfloat16", "bool_", "complex128", "complex64",
        "float16", "float32", "float64", "int32", "int64", "is_complex", "is_float", "is_inexact", "is_integer",
        "promote", "real_dtype", "short", "weak_dtype"
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

    def loss(x, y, scale=1.0):
        return gr.sum(x * y) * scale

    f = gr.compile(loss, backend="numpy")
    assert repr(f) == "<gr.compile(loss, backend='numpy'): not traced yet>"
    f(np.ones((2, 3), np.float32), np.ones(3, np.float32))
    f(1.0, 2.0, scale=3.0)
    assert repr(f) == "<gr.compile(loss, backend='numpy'): 2 signatures cached: (f32[2,3], f32[3]); (f64[], f64[], scale=...)>"


# the modules whose API the docs reference pages show, and the namespaces gr. reaches (issue 24, item 4)
PUBLIC_MODULES = [
    "gradir", "gradir.ops", "gradir.ops.nn", "gradir.ops.linalg_namespace", "gradir.training.optim", "gradir.training.amp",
    "gradir.training.distributed", "gradir.training.loop", "gradir.api.checks", "gradir.api.transforms",
    "gradir.api.grad_trace", "gradir.api.options", "gradir.eager.tensor", "gradir.eager.grad_mode", "gradir.core.ir",
    "gradir.core.errors", "gradir.core.dtypes", "viz",
    *(f"gradir.ops.{p.stem}" for p in sorted((pathlib.Path(gr.__file__).parent / "ops").glob("*.py"))
      if p.stem not in ("__init__", "batching")),
    *(f"gradir.ops.nn.{p.stem}" for p in sorted((pathlib.Path(gr.__file__).parent / "ops" / "nn").glob("*.py"))
      if p.stem != "__init__"),
]
IMPORTS = {"np", "math", "dataclass", "field", "Any", "Callable", "annotations", "functools", "itertools", "os", "re"}


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_module_lists_its_api_in_all(module):
    m = importlib.import_module(module)
    assert isinstance(m.__all__, list) and m.__all__ and len(set(m.__all__)) == len(m.__all__)
    missing = [n for n in m.__all__ if not hasattr(m, n)]
    # the face's namespaces (gr.optim, gr.amp, ...) are modules on purpose; elsewhere a module in __all__ is an import
    imported = [n for n in m.__all__ if n in IMPORTS or (module != "gradir" and isinstance(getattr(m, n), types.ModuleType))]
    assert not missing and not imported, (missing, imported)
    star: dict = {}
    exec(f"from {module} import *", star)  # noqa: S102 - what a star import gives is the list
    assert set(star) - {"__builtins__"} == set(m.__all__)


def test_every_op_the_library_re_exports_is_in_its_modules_all():
    """gr.acos, gr.zeros, ...: each name gradir/ops/__init__.py imports from one of its modules (by name, or all of
    a module's __all__) is in that module's __all__ too, so the module's star import, dir() and reference page offer
    it; and gradir.ops.__all__ is built from those imports only."""
    ops = importlib.import_module("gradir.ops")
    source = {}  # re-exported name -> the module it is imported from
    for node in ast.parse(pathlib.Path(ops.__file__).read_text()).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gradir.ops."):
            m = importlib.import_module(node.module)
            for alias in node.names:
                names = m.__all__ if alias.name == "*" else [alias.name]
                source.update((n, m) for n in names)
                unlisted = [n for n in names if n not in m.__all__]
                assert not unlisted, f"{node.module} does not list {unlisted} in __all__"
    assert set(ops.__all__) <= set(source)
    assert all(getattr(ops, n) is getattr(source[n], n) for n in ops.__all__)


@pytest.mark.parametrize("name", ["", "nn", "optim", "amp", "distributed", "checks", "dtypes", "errors", "linalg"])
def test_dir_and_tab_completion_offer_the_api_not_the_imports(name):
    ns = getattr(gr, name) if name else gr  # "": the face, whose layers (gr.core, gr.passes, ...) are not offered
    offered = [n for n in dir(ns) if not n.startswith("_")]
    api = sorted(n for n in ns.__all__ if not n.startswith("_"))  # the face's __all__ also names __version__
    assert offered == api
    assert not IMPORTS & set(offered)
    assert gr.optim.np is np  # still reachable: only not offered
    jedi = pytest.importorskip("jedi")  # what IPython completes with
    completions = {c.name for c in jedi.Interpreter(f"gr.{name}." if name else "gr.", [{"gr": gr}]).complete()}
    assert {n for n in completions if not n.startswith("_")} == set(api)
