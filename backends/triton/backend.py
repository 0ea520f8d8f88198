"""The Triton backend's runtime: fuse a graph once, generate one Triton kernel per loop kernel, run.

`compile_graph(graph, order=...)` fuses the graph (passes.fusion, the same kernels the LLVM backend
compiles), renders the loop kernels as Triton source (codegen), writes the module to the cache folder
and imports it, and keeps one arena (a uint8 torch tensor; each stored intermediate is a typed view at
its planned offset). Per kernel kind:

- ``loop``: a Triton kernel, launched on a 1-d grid (flat: ceil(N / BLOCK) programs; rows: one per row);
- ``matmul``: a generated ``tl.dot`` kernel with the bias epilogue fused, or ``torch.matmul`` (cuBLAS on a
  GPU) on strided views of the operands, by the rule in gemm.py (small float32/16 products: tl.dot);
- ``scatter``: ``index_add`` (embedding backward) as a Triton kernel of atomic adds into a zeroed buffer
  (atomics, not a sorted segmented sum: programs add in any order); ``index_update`` (a write where the
  last write wins) on the NumPy reference;
- ``numpy`` and loop kernels codegen cannot render (codegen.unrendered): the NumPy reference, on the
  same buffers; the listing says which and why.

Launch grids and block sizes follow a stated heuristic (codegen.py: flat kernels take up to 1,024 points per
program, rows up to 4,096 elements in registers, 4 warps, 8 from 2,048 lanes); GRADIR_TRITON_AUTOTUNE=1
lets Triton's autotuner pick each loop kernel's warp count on its first launch instead (GPU only).

On a GPU the second call captures the whole launch sequence as a CUDA graph (fixed input and output
buffers; later calls copy the arguments in, replay it and copy the results out), so a call costs one
replay instead of a Python launch per kernel; GRADIR_TRITON_CUDA_GRAPHS=0 turns this off.

Arguments: torch tensors stay where they are (on the GPU); NumPy arrays and CPU tensors are copied to the
device and results come back as torch tensors on it (`gr.compile` turns them back into NumPy arrays for
NumPy callers). Without a GPU, ``TRITON_INTERPRET=1`` runs the same kernels on the CPU through Triton's
interpreter, on CPU tensors: how the test suite checks this backend.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pathlib
import sys
import threading

import numpy as np

from gradir.backends.numpy_backend import run as run_reference
from gradir.core import dtypes
from gradir.core.errors import ExecutionError, UnsupportedOpError
from gradir.core.interop import is_torch, numpy_to_torch, torch_to_numpy
from gradir.core.ir import Graph, Value
from gradir.core.nan_check import NAN_CHECKS, check_outputs
from gradir.core.primitive import get_primitive
from gradir.passes.fusion import LOOP, MATMUL, SCATTER, VIEWS, fuse, kernel_header
from gradir.util.fileio import write_atomic

from ..loops import lowering
from ..sharing import Sharing
from . import gemm, scatter
from .codegen import (
    RENDERS,
    LoopSource,
    autotuning,
    buffer_names,
    interpreting,
    unrendered,
)

HEADER = '''"""Triton kernels gradir generated for {name}."""
import triton
import triton.language as tl

from gradir.backends.triton import mathfn

'''
SOURCE_VERSION = "1"  # part of the cache file name: bump when the generated code's conventions change


def require_triton():
    """triton and torch, and the device kernels run on; a clear error when either is missing."""
    try:
        import torch
        import triton  # noqa: F401
    except ImportError as e:
        raise UnsupportedOpError(f"the triton backend needs triton and torch ({e.name} is not installed): "
                                 "pip install 'gradir[triton]' (and torch==2.13.0 first)", op="compile") from None
    if interpreting():
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UnsupportedOpError("the triton backend needs an NVIDIA GPU, and torch sees none; to run its kernels on "
                                 "the CPU through Triton's interpreter, set TRITON_INTERPRET=1 before starting Python",
                                 op="compile")
    return torch.device("cuda")


def torch_dtype(dt):
    import torch

    return {dtypes.float64: torch.float64, dtypes.float32: torch.float32, dtypes.float16: torch.float16,
            dtypes.bfloat16: torch.bfloat16, dtypes.int64: torch.int64, dtypes.int32: torch.int32,
            dtypes.bool_: torch.bool, dtypes.complex128: torch.complex128}[np.dtype(dt)]


def to_device(a, dt, device):
    """A contiguous torch tensor of `a` (NumPy array, number or torch tensor) with dtype `dt` on `device`."""
    if not is_torch(a):
        a = np.asarray(a)
        a = numpy_to_torch(a.astype(dt, copy=False))
    return a.to(device=device, dtype=torch_dtype(dt)).contiguous()


def cache_dir() -> pathlib.Path:
    """Where generated kernel modules are written: `$GRADIR_CACHE_DIR/triton` (default ~/.cache/gradir/triton;
    with GRADIR_CACHE_DIR=off, a folder in the temporary directory)."""
    where = os.environ.get("GRADIR_CACHE_DIR", "")
    if where.lower() in ("off", "0", "none", "false"):
        import tempfile

        return pathlib.Path(tempfile.gettempdir()) / "gradir-triton"
    return (pathlib.Path(where) if where else pathlib.Path.home() / ".cache" / "gradir") / "triton"


def _import_source(text: str, name: str):
    """Import generated source as a module. Triton reads a kernel's source through `inspect`, so it lives
    in a file: the cache folder (atomically written, named by its hash), else a temporary folder."""
    digest = hashlib.sha256((SOURCE_VERSION + text).encode()).hexdigest()[:24]
    module_name = f"gradir_triton_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name], f"{module_name}.py"
    import tempfile

    for where in (cache_dir(), pathlib.Path(tempfile.gettempdir()) / "gradir-triton"):
        path = where / f"{module_name}.py"
        try:
            if not path.exists() or path.read_text() != text:
                where.mkdir(parents=True, exist_ok=True)
                write_atomic(path, text.encode())
            break
        except OSError:
            continue
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]  # a module that did not load is not handed out again
        raise
    return module, str(path)


def graphs_wanted(compiled) -> bool:
    """Whether to capture the launches as a CUDA graph: on a GPU, unless GRADIR_TRITON_CUDA_GRAPHS=0 or a kernel
    runs on the NumPy reference (it needs the host); GRADIR_TRITON_CUDA_GRAPHS=force also on the CPU (tests)."""
    mode = os.environ.get("GRADIR_TRITON_CUDA_GRAPHS", "1")
    if mode == "0" or any(kind == "reference" for kind, _, _ in compiled.steps):
        return False
    return mode == "force" or compiled.device.type == "cuda"


class TritonCompiled:
    """A graph compiled to Triton kernels; call it with the graph's inputs (a flat list of arrays or tensors)."""

    backend = "triton"

    def __init__(self, graph: Graph, order: list[Value] | None = None, check: bool = False):
        self.device = require_triton()
        self.graph = graph  # of primitives only (backends.compile_graph lowered the composites)
        self.program = p = fuse(graph, order, renders=RENDERS, accumulate_totals=True)
        self.steps: list[tuple] = []          # (kind, kernel, launch details)
        self.reasons: dict[int, str] = {}     # kernel index -> why it runs on the NumPy reference
        sources: list[str] = []               # the generated functions, one per distinct kernel
        self.function_of: dict[int, str] = {}  # kernel index -> the function it launches
        names = buffer_names(p)
        # kernels of one structural key (a deep network's identical blocks) share one function: one compile.
        # The key is the LLVM backend's (backends/sharing.py), with scalar constants spelled out: they are literals here
        sharing = Sharing(p, literal_constants=True)

        def add(k, text: str, grid: tuple, params: list, warps: int) -> None:
            f, new = sharing.add(k)
            if new:
                sources.append(text)
            function = sharing.functions[f].name  # (the generated function is named after its first kernel)
            self.function_of[k.index] = function
            self.steps.append(("loop", k, (function, grid, params, warps)))

        for k in p.kernels:
            name = f"k{k.index}"
            if k.kind == LOOP:
                why = unrendered(p, k)
                if why is None:
                    with lowering("Triton", k):
                        ls = LoopSource(p, k, name, names)
                    add(k, ls.text, (ls.grid,), ls.params, ls.num_warps)
                    continue
            elif k.kind == MATMUL:
                why = self._matmul_reason(k)
                if why is None and gemm.choose(p, k) == "triton":
                    add(k, *gemm.gemm_source(p, k, name, names), 4)
                    continue
                if why is None:
                    self.steps.append(("matmul", k, None))
                    continue
            elif k.kind == SCATTER:
                made = scatter.scatter_source(p, k, name, names)
                if made is not None:
                    add(k, *made, 4)
                    continue
                why = f"{k.nodes[0].op} over {dtypes.short(k.nodes[0].dtype)} (the last write wins: run in order)"
            else:
                why = k.note or f"{k.nodes[0].op} is not compiled by any backend"
            self.reasons[k.index] = why
            self.steps.append(("reference", k, None))
        self.kernel_source = HEADER.format(name=graph.name) + "\n\n".join(sources)
        self.module, self.path = _import_source(self.kernel_source, graph.name)
        self.checks_errors = any(n.op in ("take", "check_classes") for s in self.steps if s[0] == "loop"
                                 for n in s[1].nodes)
        self._lock = threading.Lock()
        self._setup_buffers()
        self.calls = 0
        self.replay = None        # the captured launch sequence, from the second call on (see _capture)
        self.graph_error = None   # why capturing failed, if it did

    @staticmethod
    def _matmul_reason(k) -> str | None:
        n = k.nodes[0]
        if not dtypes.is_float(n.dtype) or any(not dtypes.is_float(u.dtype) for u in n.inputs):
            return f"matmul of {dtypes.short(n.dtype)} (torch.matmul on a GPU multiplies floats only)"
        return None

    def _setup_buffers(self) -> None:
        import torch

        p, dev = self.program, self.device
        self.arena = torch.zeros(max(p.arena_bytes, 1), dtype=torch.uint8, device=dev)
        self.fixed: dict[Value, object] = {}  # owner -> flat typed tensor: arena values and constants
        for v, off in p.arena_offsets.items():
            nbytes = max(v.size, 1) * v.dtype.itemsize
            self.fixed[v] = self.arena[off:off + nbytes].view(torch_dtype(v.dtype))
        for acc in p.access.values():
            o = acc.owner
            if o.op == "const" and o not in self.fixed:
                self.fixed[o] = to_device(np.asarray(o.attrs["value"]).reshape(-1), o.dtype, dev)
        self.err = torch.zeros(1, dtype=torch.int32, device=dev)
        self.zeroed = {}  # kernel index -> the owners its atomics add into (zeroed before each launch)
        for kind, k, _ in self.steps:
            if kind == "loop":
                acc = [n for n in k.nodes if n in k.accumulated or n.op == "index_add"]
                if acc:
                    self.zeroed[k.index] = acc

    # -- the teaching view
    @property
    def listing(self) -> str:
        """The fused kernel listing, each kernel marked with what runs it."""
        launches = ("captured once and replayed (a CUDA graph) from the second call" if graphs_wanted(self)
                    and self.graph_error is None else "kernel by kernel" + (f" ({self.graph_error})" if self.graph_error
                                                                           else ""))
        lines = [f"{len(self.program.kernels)} kernels on {self.device.type} "
                 f"({'Triton interpreter' if interpreting() else 'compiled Triton'}); launches {launches}:"]
        for kind, k, _ in self.steps:
            how = {"loop": "triton", "matmul": "torch.matmul", "reference": "NumPy reference"}[kind]
            how = "triton tl.dot" if kind == "loop" and k.kind == MATMUL else how
            if self.function_of.get(k.index, k.name) != k.name:
                how += f", runs {self.function_of[k.index]}'s code"
            why = f" — {self.reasons[k.index]}" if k.index in self.reasons else ""
            lines.append(f"  {kernel_header(k, self.program)}  [{how}{why}]")
        return "\n".join(lines)

    @property
    def source(self) -> str:
        """The kernel listing, then the generated Triton module."""
        return f"{self.listing}\n\n# {self.path}\n{self.kernel_source}"

    def kernel_text(self, index: int) -> str:
        """The generated source of the function kernel `index` (k<index>) runs (kernels of the same code share
        the first one's), for reading one kernel."""
        if index not in self.function_of:
            raise KeyError(f"kernel k{index} is not a generated Triton kernel")
        at = self.kernel_source.find(f"def {self.function_of[index]}(")
        start = self.kernel_source.rfind("\n\n", 0, at) + 2
        end = self.kernel_source.find("\n\n", at)
        return self.kernel_source[start:end if end > 0 else None]

    # -- running
    def __call__(self, *args):
        with self._lock:
            outs = self._run(args)
        if NAN_CHECKS.get():  # gr.debug_nans: a NaN result is traced to its op on the NumPy reference
            check_outputs(self.graph, [torch_to_numpy(a) if is_torch(a) else a for a in args],
                          [torch_to_numpy(t) for t in outs], run_reference)
        return outs

    def _buffers(self, ins: list) -> tuple[dict, list]:
        """The buffer of every owner for one run: the fixed ones, `ins`, and fresh outputs."""
        import torch

        g, p = self.graph, self.program
        bufs = dict(self.fixed)
        for x, t in zip(g.inputs, ins):
            bufs[x] = t.reshape(-1)
        outs = []
        for pos, o in enumerate(g.outputs):
            t = torch.empty(tuple(o.shape), dtype=torch_dtype(o.dtype), device=self.device)
            outs.append(t)
            if p.returned[pos] is not None:
                bufs[p.returned[pos]] = t.reshape(-1)
        return bufs, outs

    def _launch(self, bufs) -> None:
        """Every kernel in order, on `bufs`."""
        p = self.program
        for kind, k, launch in self.steps:
            if kind == "loop":
                for n in self.zeroed.get(k.index, ()):
                    bufs[p.access[n].owner].zero_()
                name, grid, params, warps = launch
                if not all(grid):  # an empty domain: nothing to compute (its accumulators were zeroed)
                    continue
                fn = getattr(self.module, name)
                with lowering("Triton", k):  # the first launch compiles the kernel
                    if interpreting():  # NumPy computes the masked-off lanes too (on zeros): no warnings from them
                        with np.errstate(all="ignore"):
                            fn[grid](*[bufs[o] for o in params], self.err)
                    elif autotuning():  # the autotuner picks the warps
                        fn[grid](*[bufs[o] for o in params], self.err)
                    else:
                        fn[grid](*[bufs[o] for o in params], self.err, num_warps=warps)
            elif kind == "matmul":
                self._matmul(k, bufs)
            else:
                self._reference(k, bufs)

    def _run(self, args):
        g, p, dev = self.graph, self.program, self.device
        ins = [to_device(a, x.dtype, dev) for x, a in zip(g.inputs, args)]
        if self.replay is None and self.calls == 1 and graphs_wanted(self):
            self._capture(ins)
        self.calls += 1
        if self.replay is not None:  # copy in, replay the captured launches, copy the results out
            for static, t in zip(self.static_ins, ins):
                static.copy_(t)
            self.replay()
            outs = [t.clone() for t in self.static_outs]
        else:
            bufs, outs = self._buffers(ins)
            self._launch(bufs)
        if self.checks_errors and int(self.err.item()):
            self.err.zero_()
            self._fail([torch_to_numpy(t) for t in ins])
        for pos, i in p.passthrough:
            outs[pos] = ins[i]
        for pos, earlier in p.output_copies:
            outs[pos] = outs[earlier].clone()
        return outs

    def _capture(self, ins) -> None:
        """Record the whole launch sequence once on fixed input and output buffers (a CUDA graph on a GPU:
        one replay instead of a Python launch per kernel); later calls copy into them and replay. The first
        call ran without it, so Triton compiled every kernel before the capture."""
        import torch

        self.static_ins = [t.clone() for t in ins]
        bufs, self.static_outs = self._buffers(self.static_ins)
        if self.device.type != "cuda":  # (GRADIR_TRITON_CUDA_GRAPHS=force on the CPU: the same buffers, re-run)
            self.replay = lambda: self._launch(bufs)
            return
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._launch(bufs)  # warm-up on a side stream, as torch.cuda.graph asks
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._launch(bufs)
            self.replay, self.cuda_graph = graph.replay, graph
        except Exception as e:  # noqa: BLE001 - any capture failure: run kernel by kernel, and say why
            self.replay, self.graph_error = None, f"{type(e).__name__}: {e}"

    def _view(self, u: Value, bufs):
        """Stored value u as a strided torch view of its owner's buffer."""
        if u in self.program.immediates or (u.op == "const" and u not in self.program.access):
            c = self.program.immediates.get(u, u)
            return to_device(np.broadcast_to(c.attrs["value"], u.shape), u.dtype, self.device)
        acc = self.program.access[u]
        base = bufs[acc.owner]
        return base.as_strided(tuple(u.shape), tuple(acc.strides), base.storage_offset() + acc.offset)

    def _matmul(self, k, bufs) -> None:
        import torch

        n = k.nodes[0]
        a, b = (self._view(u, bufs) for u in n.inputs)
        if k.epilogue is None and k.transposed is None:
            dest = self._view(n, bufs)
            if dest.is_contiguous():  # straight into its buffer: no product to copy (1.5 GB for T=1024 attention)
                torch.matmul(a, b, out=dest)
                return
        product = torch.matmul(a, b)
        out = n
        if k.epilogue is not None:  # the bias add the product's buffer starts from (its shape may be a reshape's)
            out = k.epilogue
            product = self._view(k.bias, bufs) + product.reshape(tuple(out.shape))
        if k.transposed is not None:
            out, product = k.transposed, product.transpose(-1, -2)
        self._view(out, bufs).copy_(product)

    def _reference(self, k, bufs) -> None:
        """Kernel k on the NumPy reference: its nodes in order, on CPU copies of its operands."""
        env: dict[Value, np.ndarray] = {}
        stored = set(k.outputs)

        def here(u) -> bool:  # computed by this kernel, possibly through views
            while u not in env and u.op in VIEWS:
                u = u.inputs[0]
            return u in env

        def operand(u):
            if u in env:
                return env[u]
            if u.op in VIEWS and here(u):  # a view of a value of this kernel
                return get_primitive(u.op).impl(operand(u.inputs[0]), **u.attrs)
            if u.op == "const" and u not in self.program.access and u not in self.program.immediates:
                return u.attrs["value"]
            return torch_to_numpy(self._view(u, bufs))

        for n in k.nodes:
            if n in k.copies:
                result = operand(k.copies[n])
            else:
                xs = [operand(u) for u in n.inputs]
                try:
                    with np.errstate(all="ignore"):
                        result = get_primitive(n.op).impl(*xs, **n.attrs)
                except (ValueError, IndexError, TypeError, ArithmeticError) as e:
                    raise ExecutionError(f"{type(e).__name__}: {e}", op=n.op, source=n.source) from e
            env[n] = np.asarray(result, dtype=n.dtype)
            if n in stored:
                self._view(n, bufs).copy_(to_device(env[n], n.dtype, self.device))

    def _fail(self, ins) -> None:
        """A kernel found a bad index: the NumPy reference raises the located error for the same inputs."""
        run_reference(self.graph, ins)
        raise ExecutionError("index out of range", op="take", source=None)


def compile_graph(graph: Graph, check: bool = False, order: list[Value] | None = None) -> TritonCompiled:
    """Compile `graph` to Triton kernels (run on the GPU, or on the CPU under TRITON_INTERPRET=1)."""
    return TritonCompiled(graph, order=order, check=check)


__all__ = ["TritonCompiled", "compile_graph", "interpreting", "require_triton"]
