"""gradir: a graph compiler for automatic differentiation you can read, check and draw.

The face: the public names, gathered from the layers (docs/layout.md); no module of the package imports it.

    import gradir as gr
    gr.grad(lambda a, b: gr.tanh(a * b + a), argnums=(0, 1))(1.5, -2.0)
"""

from gradir import viz  # gr.viz, a namespace (its package is mapped from viz/)
from gradir.api import checks, display  # noqa: F401 - gr.checks, a namespace
from gradir.api.cache import clear_caches
from gradir.api.jacobians import hessian, jacfwd, jacobian
from gradir.api.specs import TensorSpec, bf16, f16, f32, f64, i32, i64  # noqa: F401 - shape annotations: gr.f32[32, 256]
from gradir.api.transforms import checkpoint, compile, grad, jvp, trace, trace_grad, value_and_grad, vjp
from gradir.api.vmap import vmap
from gradir.core import dtypes, errors
from gradir.core.dtypes import bfloat16, bool_, complex128, float16, float32, float64, int32, int64
from gradir.core.errors import GradirError, NonFiniteError
from gradir.core.ir import Graph, Value
from gradir.core.nan_check import debug_nans
from gradir.core.source import scope
from gradir.eager.grad_mode import enable_grad, no_grad
from gradir.eager.tensor import Tensor  # the eager front door
from gradir.frontends import from_torch, torch_saved
from gradir.ops import *  # noqa: F403 - the NumPy-named op library is the top-level namespace
from gradir.ops import __all__ as _ops_all
from gradir.ops import linalg_namespace as linalg  # noqa: F401 - gr.linalg, a namespace
from gradir.ops import nn  # noqa: F401 - gr.nn, a namespace
from gradir.training import amp, distributed, optim
from gradir.training.loop import train  # gr.train, the training loop (its helpers hang off it: gr.train.load_checkpoint)
from gradir.util.public import api_dir

__version__ = "0.1.0"

display.install()  # _repr_svg_/_repr_html_ for notebooks

__all__ = ["Graph", "GradirError", "Tensor", "Value", "__version__", "amp", "bfloat16", "bool_", "checkpoint", "clear_caches",
           "compile", "complex128", "debug_nans", "distributed", "dtypes", "enable_grad", "errors", "float16", "float32",
           "float64", "from_torch", "grad", "hessian", "int32", "int64", "jacfwd", "jacobian", "jvp", "no_grad", "NonFiniteError",
           "optim", "scope",
           "torch_saved", "trace", "trace_grad", "train", "value_and_grad", "vjp", "vmap", *_ops_all,
           # the namespaces and the shape annotations (gr.f32[32, 256]) are the face's too
           "TensorSpec", "bf16", "checks", "f16", "f32", "f64", "i32", "i64", "linalg", "nn", "viz"]

__dir__ = api_dir(globals())  # dir(gr) and tab completion offer the API, not the layers (gr.core, gr.passes, ...)
