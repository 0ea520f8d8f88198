"""Random straight-line programs as wide as what users write, each with a gradir and a torch spelling.

`generate(seed)` builds one program from an integer seed (NumPy's Generator: the same seed gives the same
program on every machine). A program is a list of steps over a growing pool of values; each step is
one line (or a few) of Python in two spellings, gradir's and an independent PyTorch one, so a program
prints as the exact code that runs (`Program.source()`), and every step's shape, dtype and rough
magnitude are known when it is drawn. The steps cover:

- 0-4-D values with size-1 axes, broadcasting, 0-d values and a few empty (size-0) arrays;
- views: transpose/permute/swapaxes/.T, reshape (with -1), broadcast_to, basic indexing (ints, steps,
  negative indices and steps, None, Ellipsis), squeeze/expand_dims;
- concatenate, stack, pad (constant, lo/hi per axis);
- gathers and scatters: gr.take, integer-array indexing, gather, scatter_add, scatter, one_hot,
  gr.nn.embedding, with constant or traced (argument) indices, 0-d ones included;
- reductions over one, several or all axes, keepdims or not (sum, mean, max, min, logsumexp, var),
  argmax/argmin feeding gather / where(one_hot(...)) / a flat take; cumsum;
- softmax, log_softmax, layer_norm (with or without weight and bias) over any axes, length-1 ones
  included; cross_entropy; batched matmul (with broadcasting and 1-D operands) and einsum;
- in-place writes (gradir functionalizes `x[idx] = v`, `x[idx] += v`, `x[mask] = c`, `x += v`,
  `x.mul_(v)`; it has no `x.at[...]`); float32 regions (astype to float32 and back); long chains and fan-out;
- and more of what users write: split, roll, tile, repeat, masked_fill, tril/triu, sort, topk, outer,
  linear, mse_loss, binary_cross_entropy_with_logits, rms_norm, batch_norm, conv1d, conv2d, max_pool2d,
  avg_pool2d, scaled_dot_product_attention; a few programs hold an axis of 300-5,000.

Inputs are standard-normal float64 (sometimes float32) arrays, so values are distinct; max, min, argmax,
sort and max_pool2d read `x + ramp(shape)` (distinct offsets) so broadcast or padded copies never tie, and
kinks (relu, abs, maximum, where, clip) sit away from the constants programs create. The loss is
sum_k sum(v_k * weight(shape_k, k)) over every float value v_k, so each value reaches the gradient.

The ops are drawn by tests/wide_ops.py (and tests/wide_ops_numeric.py); tests/wide_checks.py runs a program
on a backend and classifies the outcome (ok, crash, wrong); benchmarks/fuzz_backends.py runs thousands.
"""

from __future__ import annotations

import dataclasses
import linecache
import math

import numpy as np

MAX_RANK = 4
MAX_SIZE = 256  # elements per value: programs stay quick to compile and to interpret
MAG_LIMIT = {"float64": 1e4, "float32": 1e3}  # a step whose result may exceed this is drawn again
# relative tolerance of every comparison, "float32" for programs with any float32 value: a float32 layer_norm over
# two values (program 1464) is 1.3e-5 (gradir) and 2.9e-5 (torch) of the gradient's scale off its float64 value
RTOL = {"float64": 1e-9, "float32": 1e-4}

# Helpers every program's source starts with (printed by `Program.source()`, run by both spellings;
# the torch side wraps their results as tensors).
HELPERS = '''\
def weight(shape, k):
    """Fixed loss weights in [0.5, 1.5), multiples of 1/64 (exact in float32)."""
    n = math.prod(shape)
    return (0.5 + (np.arange(n) * 37 + 11 * k) % 64 / 64).reshape(shape)


def ramp(shape, dtype="float64"):
    """Distinct offsets 0, 1/128, 2/128, ...: added before max/min/argmax so no two entries tie."""
    return (np.arange(math.prod(shape)) / 128).reshape(shape).astype(dtype)
'''

TORCH_HELPERS = '''\
def layer_norm_axes(x, axes, weight=None, bias=None):
    """torch's layer_norm over any axes (sorted, non-negative): move them last, normalize, move back."""
    moved = list(range(x.ndim - len(axes), x.ndim))
    y = torch.movedim(x, axes, moved)
    y = F.layer_norm(y, y.shape[x.ndim - len(axes):], weight, bias, eps=1e-5)
    return torch.movedim(y, moved, axes)
'''

@dataclasses.dataclass(frozen=True)
class Var:
    """A value of the program: its Python name, static shape, dtype name and a bound on |value|."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # "float64" | "float32" | "int64"
    mag: float = 1.0

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclasses.dataclass(frozen=True)
class Step:
    """One step: the op drawn, its lines in both spellings, and the value it defines."""

    op: str
    gr: tuple[str, ...]
    torch: tuple[str, ...]
    out: Var


@dataclasses.dataclass
class Program:
    """A random program: arguments (float inputs, then int index inputs as drawn), constants, steps."""

    seed: int
    max_steps: int
    inputs: list[Var]
    int_ranges: dict[str, tuple[int, int]]  # an int input's values lie in [lo, hi)
    consts: dict[str, np.ndarray]
    steps: list[Step]
    loss_names: tuple[str, ...] | None = None  # the values the loss weighs (None: every float value)
    shrunk: bool = False  # steps or loss terms were dropped (benchmarks/fuzz_backends.py --shrink)

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        return f"generate({self.seed}, max_steps={self.max_steps})"

    @property
    def outputs(self) -> list[Var]:
        """The values the loss weighs: every float value (unless `loss_names` says which)."""
        return [v for v in self.inputs + [s.out for s in self.steps]
                if v.dtype != "int64" and (self.loss_names is None or v.name in self.loss_names)]

    @property
    def argnums(self) -> tuple[int, ...]:
        return tuple(i for i, v in enumerate(self.inputs) if v.dtype != "int64")

    @property
    def has_float32(self) -> bool:
        return any(v.dtype == "float32" for v in self.outputs)

    @property
    def rtol(self) -> float:
        return RTOL["float32" if self.has_float32 else "float64"]

    @property
    def ops(self) -> list[str]:
        return [s.op for s in self.steps]

    def arguments(self) -> list[np.ndarray]:
        """The input arrays, drawn exactly as `source()` prints them."""
        rng = np.random.default_rng([self.seed, 1])
        out = []
        for v in self.inputs:
            if v.dtype == "int64":
                out.append(rng.integers(*self.int_ranges[v.name], v.shape))
            else:
                out.append(rng.standard_normal(v.shape).astype(v.dtype))
        return out

    def function_source(self, side: str = "gr") -> str:
        """`def f(...)` in gradir's spelling (side 'gr') or torch's (side 'torch', returning the loss and
        every value, for the shape checks)."""
        lines = [f"def f({', '.join(v.name for v in self.inputs)}):"]
        for s in self.steps:
            lines += ["    " + line for line in (s.gr if side == "gr" else s.torch)]
        for k, v in enumerate(self.outputs):
            if v.dtype == "float64":
                x = v.name
            else:
                x = f"gr.astype({v.name}, gr.float64)" if side == "gr" else f"{v.name}.double()"
            term = f"{'gr' if side == 'gr' else 'torch'}.sum({x} * weight({v.shape}, {k}))"
            lines.append(f"    loss = {term}" if k == 0 else f"    loss = loss + {term}")
        if side == "gr":
            lines.append("    return loss")
        else:
            lines.append(f"    return loss, [{', '.join(v.name for v in self.inputs + [s.out for s in self.steps])}]")
        return "\n".join(lines) + "\n"

    def _consts_source(self) -> str:
        return "".join(f"{k} = np.array({c.tolist()!r})\n" if c.size else f"{k} = np.zeros({c.shape}, dtype=np.int64)\n"
                       for k, c in self.consts.items())

    def source(self, backend: str = "numpy") -> str:
        """A standalone script in gradir's spelling: runs the program's value_and_grad on `backend`."""
        args = ", ".join(v.name for v in self.inputs)
        draws = "".join(
            f"{v.name} = rng.integers({self.int_ranges[v.name][0]}, {self.int_ranges[v.name][1]}, {v.shape})\n"
            if v.dtype == "int64" else
            f"{v.name} = rng.standard_normal({v.shape})" + (".astype(np.float32)\n" if v.dtype == "float32" else "\n")
            for v in self.inputs)
        what = "shrunk, " if self.shrunk else ""
        return (f"# {self!r} from tests/wide_programs.py ({what}{len(self.steps)} steps: {', '.join(self.ops)})\n"
                "import math\n\nimport numpy as np\n\nimport gradir as gr\n\n\n" + HELPERS + "\n\n"
                + self._consts_source() + "\n\n" + self.function_source("gr") + "\n\n"
                + f"rng = np.random.default_rng([{self.seed}, 1])\n" + draws
                + f'step = gr.compile(gr.value_and_grad(f, argnums={self.argnums}), backend="{backend}")\n'
                + f"print(step({args}))\n")

    def gradir_function(self):
        """The program as a Python function over gradir ops."""
        import gradir as gr

        ns = {"__name__": "wide_program", "math": math, "np": np, "gr": gr}
        _exec(HELPERS + self._consts_source() + self.function_source("gr"), ns, f"<wide program {self.seed}>")
        return ns["f"]

    def torch_function(self):
        """The program over torch ops: f(*tensors) -> (loss, [every value])."""
        import torch
        import torch.nn.functional as F  # noqa: N812 - the usual spelling

        ns = {"__name__": "wide_program_torch", "math": math, "np": np, "torch": torch, "F": F}
        _exec(HELPERS + TORCH_HELPERS, ns, f"<wide program {self.seed} helpers>")
        weight, ramp = ns["weight"], ns["ramp"]
        ns["weight"] = lambda shape, k: torch.from_numpy(weight(shape, k))
        ns["ramp"] = lambda shape, dtype="float64": torch.from_numpy(ramp(shape, dtype))
        ns.update({k: torch.from_numpy(c) for k, c in self.consts.items()})
        _exec(self.function_source("torch"), ns, f"<wide program {self.seed} torch>")
        return ns["f"]


def _exec(source: str, namespace: dict, filename: str) -> None:
    """exec `source` under `filename`, registered with linecache so tracebacks show its lines."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)


# -- the generator --------------------------------------------------------------------------------


def generate(seed: int, max_steps: int = 12) -> Program:
    """The program of `seed`: 1..max_steps steps over 1-4 inputs (drawn by tests/wide_ops.py)."""
    from tests.wide_ops import Builder

    return Builder(seed, max_steps).build()


def wide_programs(max_steps: int = 12):
    """A hypothesis strategy of programs (drawn by seed; a failure prints `generate(seed, ...)`)."""
    from hypothesis import strategies as st

    return st.integers(0, 2**32 - 1).map(lambda s: generate(s, max_steps))
