"""The LLVM backend's runtime: compile a graph once, then run each call as one ctypes call.

`compile_graph(graph, order=...)` fuses the graph (passes.fusion), builds its LLVM module
(codegen), compiles it for this CPU (or loads the object code from the on-disk cache) and keeps
one arena, allocated once and reused by every call. Kernels of the same structure share one
compiled function (codegen, sharing), so the code compiled grows with the distinct kernels, not
with the graph; the order of calls is data, a table per segment that the one driver runs. A call
passes the caller's input arrays, fresh output arrays, the constants and the arena to the driver.
Kernels this backend does not compute (the listing marks them "numpy": dtypes it does not lower, ops
missing from its table `RENDERS`, which fusion reads) split the program into segments: the NumPy
reference runs them between driver calls, on the same buffers. The graph comes with its composites
lowered to primitives (backends.compile_graph does that, once, for every backend).

Threads: kernels with enough work (kernels.split_of: fused loops over their outermost independent loop, matrix
products over their batch or C's rows) run on `threads` threads, gradir's own pool (pool.py), while OpenBLAS is
held at one thread (jit.BLAS_SERIAL), so one pool serves both. Threads split only iterations that are computed
the same way whoever runs them, so results are bit for bit the same at any thread count; `GRADIR_NUM_THREADS`
sets the default (else the cores this process may use), and `.threads` may be changed between calls.

The on-disk cache holds object code keyed by the program's structure as planned before any code is written
(codegen.ModuleBuilder.structure: the kernels' sharing keys, their splits, the emitters' tunables) with a digest
of gradir's source, or, for gemm.py's modules, by their IR text; and by gradir's and llvmlite's versions and the
CPU's name and features. It lives in `$GRADIR_CACHE_DIR` (default `~/.cache/gradir/llvm`);
`GRADIR_CACHE_DIR=off` disables it. Entries are written atomically; an entry that does not load
is rebuilt.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import mmap
import os
import pathlib
import sys
import threading
import time

import llvmlite
import numpy as np

from gradir.backends.numpy_backend import run as run_reference
from gradir.core.errors import ExecutionError
from gradir.core.ir import Graph, Value
from gradir.core.nan_check import NAN_CHECKS, check_outputs
from gradir.core.primitive import get_primitive
from gradir.passes.conv_input_grad import input_grads_as_convolutions
from gradir.passes.fusion import NUMPY, FusedProgram, fuse, kernel_header
from gradir.passes.remat.columns import recompute_columns
from gradir.util.fileio import write_atomic
from gradir.util.gcpause import gc_paused

from . import gemm, jit
from .codegen import ModuleBuilder
from .emitter import RENDERS, module_text
from .pool import POOL, pool_module

_DRIVER = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                           ctypes.c_int64)
ALIGN = 64
OWN_OUTPUT_BYTES = 1 << 16  # outputs at least this big get their own allocation
JIT_VERSION = "4"  # part of the disk cache key: bump when jit.py's pipeline or codegen's conventions change
CACHE_MAGIC = b"gradir llvm object v2\n"


def cache_dir() -> pathlib.Path | None:
    """Where compiled object code is cached (None when GRADIR_CACHE_DIR=off)."""
    where = os.environ.get("GRADIR_CACHE_DIR", "")
    if where.lower() in ("off", "0", "none", "false"):
        return None
    return pathlib.Path(where) if where else pathlib.Path.home() / ".cache" / "gradir" / "llvm"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gradir")
    except PackageNotFoundError:
        return "dev"


def load_module(ir_text: str) -> tuple[jit.JitModule, str]:
    """The compiled module for `ir_text`, from the disk cache when there (returns it and 'cache' or 'compiled'),
    with the functions it calls registered first: BLAS, and gemm.py's products (a module of their own,
    compiled once per process, or loaded from the same cache)."""
    return _compile(lambda: (ir_text, calls_of(ir_text)))[:2]


def load_program(mb: ModuleBuilder) -> tuple[jit.JitModule, str, str | None, dict]:
    """The module `mb` planned (ModuleBuilder.plan), from the disk cache when there, found by its structure
    before any code is written (a warm start skips emitting and printing the IR: 0.3 of 0.5 s on a 12-layer
    GPT-2-small step), else emitted, compiled and cached. Returns the module, 'cache' or 'compiled', the IR text
    when it was written, and the external functions it calls (`calls_of`)."""
    written = []

    def make() -> tuple[str, dict]:
        ir_text = module_text(mb.emit())
        mb.release()  # LLVM's compile is the peak of memory: drop the build's bookkeeping first
        written.append(ir_text)
        return ir_text, calls_of(ir_text)

    def key() -> str | None:  # (None: a structure without an exact spelling is keyed by its IR text)
        structure = mb.structure()
        return None if structure is None else _key(structure, source_digest())
    module, origin, needs = _compile(make, key)
    return module, origin, written[0] if written else None, needs


def calls_of(ir_text: str) -> dict:
    """The functions of other modules that IR text calls: {'gemm': element types of gemm.py's products,
    'blas': whether BLAS}."""
    return {"gemm": [s for s in gemm.TYPES if f"gradir_gemm_{s}" in ir_text or f"gradir_dot_{s}" in ir_text],
            "blas": "gradir_blas_" in ir_text}


def register(needs: dict) -> None:
    """Make what a module calls (`calls_of`) resolvable before it is loaded."""
    for name in ("sgemm", "dgemm"):
        jit.add_symbol(f"gradir_blas_{name}", jit.blas_address(name))
    for suffix in needs.get("gemm", ()):
        gemm_module(suffix)


@functools.cache
def gemm_module(suffix: str) -> jit.JitModule:
    """gemm.py's product for element type `suffix` ('f32', 'f64'), compiled (or loaded) once and registered."""
    gemm.runtime()
    ir_text = gemm.gemm_ir(suffix, gemm.host_shapes()[suffix])
    module = _compile(lambda: (ir_text, {}))[0]  # (it calls nothing to register)
    gemm.register(suffix, module)
    return module


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join([*parts, _version(), JIT_VERSION, llvmlite.__version__, jit.cpu_key()]).encode()
                          ).hexdigest()


@functools.cache
def source_digest() -> str:
    """SHA-256 of gradir's own source files: a key made before code is written (load_program) must change
    whenever the code that writes it does."""
    h = hashlib.sha256()
    here = pathlib.Path(__file__).resolve()
    for root in (pathlib.Path(sys.modules[Graph.__module__].__file__).resolve().parents[1],  # gradir/
                 pathlib.Path(sys.modules[fuse.__module__].__file__).resolve().parent,  # passes/
                 here.parents[1]):  # backends/
        for f in sorted(root.rglob("*.py")):
            h.update(f"{f.relative_to(root)}\0".encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _compile(make, key=lambda: None) -> tuple[jit.JitModule, str, dict]:
    """The module of `make()`'s (IR text, what it calls: `calls_of`), what it calls registered first: from the
    disk cache entry named by `key()` (None: by the IR text) when there is a cache and that entry (returns it,
    'cache', what it calls), else compiled and cached there ('compiled'). An entry is a magic line, the SHA-256
    of the rest, a line of JSON (what the code calls) and the object code: loading anything else could crash
    the process, so a corrupt or foreign entry is rebuilt instead."""
    where = cache_dir()
    if where is None:
        ir_text, needs = make()
        register(needs)
        return jit.JitModule.from_ir(ir_text), "compiled", needs
    name = key()
    if name is None:
        made = make()
        name, make = _key(made[0]), lambda: made
    path = where / f"{name}.o"
    try:
        entry = path.read_bytes()
    except OSError:
        entry = b""
    head, digest, rest = entry[:len(CACHE_MAGIC)], entry[len(CACHE_MAGIC):len(CACHE_MAGIC) + 32], entry[len(CACHE_MAGIC) + 32:]
    if head == CACHE_MAGIC and b"\n" in rest and hashlib.sha256(rest).digest() == digest:
        line, obj = rest.split(b"\n", 1)
        try:
            needs = json.loads(line)
        except ValueError:
            needs = None
        if obj and isinstance(needs, dict):
            register(needs)
            return jit.JitModule.from_object(obj), "cache", needs
    ir_text, needs = make()
    register(needs)
    module = jit.JitModule.from_ir(ir_text)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        rest = json.dumps(needs).encode() + b"\n" + module.object_code()
        write_atomic(path, CACHE_MAGIC + hashlib.sha256(rest).digest() + rest)
    except OSError:
        pass  # an unwritable cache only costs the next process a compile
    return module, "compiled", needs


POPULATE_BYTES = 4 << 20  # arenas from this size on are mapped with their pages already in (populated_zeros)


def populated_zeros(nbytes: int) -> np.ndarray:
    """nbytes of zeros. From POPULATE_BYTES on, a fresh anonymous mapping whose pages the kernel puts in at once
    (MAP_POPULATE, Linux) rather than one fault at a time when the first call touches them (the planner sized the
    arena to what a call uses): a 12-layer GPT-2-small step's first call then takes 0.94 s instead of 1.3-1.5 s,
    its warm compile 0.45-0.55 s instead of 0.75-0.9 s on this machine."""
    if nbytes < POPULATE_BYTES or not hasattr(mmap, "MAP_POPULATE"):
        return np.zeros(nbytes, np.uint8)
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)
    return np.frombuffer(region, np.uint8)  # (the array keeps the mapping alive)


def _segments(program: FusedProgram) -> list[list]:
    """Runs of compiled kernels, split by NumPy fallback kernels (which run between them)."""
    segments, current = [], []
    for k in program.kernels:
        if k.kind == NUMPY:
            segments.append(current)
            segments.append(k)
            current = []
        else:
            current.append(k)
    segments.append(current)
    return [s for s in segments if s != []]


class LLVMCompiled:
    """A graph compiled to native code; call it with the graph's inputs (a flat list of arrays)."""

    backend = "llvm"

    def __init__(self, graph: Graph, order: list[Value] | None = None, check: bool = False,
                 threads: int | None = None):
        # a stride-1 convolution's input gradient as a convolution, and a convolution's columns made again for
        # its weight gradient: chained with their products, columns stay in cache
        graph, order = recompute_columns(*input_grads_as_convolutions(graph, order))
        self.graph = graph  # of primitives only (backends.compile_graph lowered the composites)
        self.program = fuse(graph, order, renders=RENDERS)
        p = self.program
        self.consts = [v for v in dict.fromkeys([a.owner for a in p.access.values()]) if v.op == "const"]
        steps = _segments(p)
        compiled = [s for s in steps if isinstance(s, list)]
        self._returned = [v if v is not None else graph.outputs[i] for i, v in enumerate(p.returned)]
        mb = ModuleBuilder(p, self._returned, self.consts, parallel=pool_module() is not None)
        self._compiled_kernels = [k for s in compiled for k in s]
        mb.plan(self._compiled_kernels)
        self._builder = mb  # (its tables: run_with_ready and profile build their own)
        self.chains = mb.chains  # kernel index -> the next kernel's, run image by image with it (chains.py)
        self.steps = [self._compiled_step(s, mb) if isinstance(s, list) else s for s in steps]
        self.jit, self.origin, self._module_ir, needs = load_program(mb)
        mb.release()  # (a warm start wrote no code: its bookkeeping goes now)
        self._driver = _DRIVER(self.jit.address("gradir_run"))
        self._failed = np.zeros(1, np.int64)
        self._failed_ptr = self._failed.ctypes.data
        self.function_of = mb.function_of  # kernel index -> its function (kernels of one structure share one)
        self.functions = [k.name for k in mb.functions]
        self.num_slots = mb.num_slots
        self.slot = mb.slot
        self.arena_slot = mb.arena_slot
        self._arena_raw = populated_zeros(p.arena_bytes + ALIGN)
        start = (-self._arena_raw.ctypes.data) % ALIGN
        self.arena = self._arena_raw[start:start + p.arena_bytes]
        self._const_arrays = [np.ascontiguousarray(c.attrs["value"]) for c in self.consts]
        self._slots = np.zeros(self.num_slots, np.uintp)
        base = len(graph.inputs) + len(graph.outputs)
        for j, a in enumerate(self._const_arrays):
            self._slots[base + j] = a.ctypes.data
        self._slots[self.arena_slot] = self.arena.ctypes.data
        self._slots_ptr = self._slots.ctypes.data
        self._lock = threading.Lock()
        self.threads = jit.default_threads() if threads is None else max(1, int(threads))
        """Threads the big kernels share (GRADIR_NUM_THREADS, default the cores this process may use); may be
        changed between calls. Results do not depend on it: threads split only independent iterations."""
        self._blas = needs["blas"]  # (BLAS is held at one thread while it runs)
        self._ready_plan = None  # run_with_ready's steps, cut at the kernels that finish outputs (made on first use)
        self._in_types = [(x.dtype, x.shape) for x in graph.inputs]
        self._last_inputs = [None] * len(graph.inputs)
        self._last_strides = [None] * len(graph.inputs)
        self._out_parts, top = [], 0
        for o in graph.outputs:
            if o.nbytes >= OWN_OUTPUT_BYTES:
                self._out_parts.append((-1, o.nbytes, o.dtype, o.shape))
                continue
            self._out_parts.append((top, o.nbytes, o.dtype, o.shape))
            top += -(-max(o.nbytes, 1) // ALIGN) * ALIGN
        self._out_bytes = top
        self._own_outputs = [j for j, (o, *_) in enumerate(self._out_parts) if o < 0]
        self._out_slots = np.arange(len(graph.inputs), len(graph.inputs) + len(graph.outputs))
        self._out_offsets = np.array([max(o, 0) for o, *_ in self._out_parts], np.uintp)

    # -- the teaching view
    @property
    def source(self) -> str:
        """The kernel listing (what each kernel covers and moves), which function runs which kernels, then
        the LLVM IR gradir generated."""
        return f"{self.listing}\n\n{self.sharing}\n\n{self.module_ir}"

    @property
    def sharing(self) -> str:
        """Which kernels each compiled function runs (kernels of the same structure share one)."""
        runs: dict[int, list[str]] = {}
        for k in self.program.kernels:
            if k.index in self.function_of:
                runs.setdefault(self.function_of[k.index], []).append(k.name)
        lines = [f"{len(self.function_of)} compiled kernels run {len(self.functions)} functions:"]
        for f, names in sorted(runs.items()):
            shown = ", ".join(names[:6]) + (f", ... ({len(names)} kernels)" if len(names) > 6 else "")
            lines.append(f"  @{self.functions[f]} runs {shown}")
        names, reused, scales = self.program.kernels, self._builder.reused, self._builder.scales
        images = [(p, c) for p, (c, _) in self.chains.items() if p not in scales]
        if images:
            pairs = ", ".join(f"{names[p].name}+{names[c].name}{'*' if p in reused else ''}" for p, c in images)
            lines.append(f"image by image (each image's columns still in cache for the second kernel): {pairs}")
            if reused:
                lines.append("  * the buffer between them is one image's worth per thread, used image after image")
        if scales:
            pairs = ", ".join(f"{names[p].name}+{names[self.chains[p][0]].name}" for p in scales)
            lines.append(f"products with their epilogues (each thread's rows of the product, then the next kernel on "
                         f"them): {pairs}")
        return "\n".join(lines)

    @property
    def module_ir(self) -> str:
        """The LLVM IR gradir generated (written again when the module came from the disk cache)."""
        if self._module_ir is None:
            mb = ModuleBuilder(self.program, self._returned, self.consts, parallel=self._builder.parallel)
            self._module_ir = module_text(mb.build(self._compiled_kernels))
        return self._module_ir

    @property
    def listing(self) -> str:
        return str(self.program)

    @functools.cached_property
    def _shown(self):
        """The compiled module whose text `optimized_ir` and `assembly` show: the one that runs, or for one loaded
        from the disk cache (which keeps no text), the IR compiled again."""
        return self.jit if self.jit.optimized_ir is not None else jit.JitModule.from_ir(self.module_ir)

    @property
    def optimized_ir(self) -> str:
        """The LLVM IR after LLVM's optimisation passes (the vectorized loops)."""
        return self._shown.optimized_ir

    @property
    def assembly(self) -> str:
        return self._shown.assembly

    # -- running
    def __call__(self, *args):
        with self._lock:  # one arena and one slot table: calls from several Python threads take turns
            outs = self._run(args)
        if NAN_CHECKS.get():  # gr.debug_nans: a NaN result is traced to its op on the NumPy reference
            check_outputs(self.graph, args, outs, run_reference)
        return outs

    def run_with_ready(self, args, on_ready):
        """Run on `args` (a flat list) as a call does, calling ``on_ready(position, array)`` for each output as
        soon as it is final: right after the kernel that writes it, while the driver has handed control back
        between two parts of the program (the foreign call releases the GIL, so work the callback starts, such
        as an asynchronous all-reduce, proceeds while the rest runs). Returns the outputs."""
        with self._lock:
            if self._ready_plan is None:
                self._ready_plan = self._split_at_outputs()
            steps, ready_after = self._ready_plan
            outs = self._run(args, steps, ready_after, on_ready)
            # (the callbacks ran inside _run; outputs that are inputs or copies are final only now)
            for pos in ready_after.get(len(steps), ()):
                on_ready(pos, outs[pos])
        if NAN_CHECKS.get():
            check_outputs(self.graph, args, outs, run_reference)
        return outs

    @staticmethod
    def _compiled_step(kernels: list, mb: ModuleBuilder) -> tuple:
        """A compiled segment as it runs: (its kernels, its table, the table's address, the kernel starting each
        table entry); a NumPy fallback kernel runs as itself (addresses are taken once: `.ctypes.data` costs a
        microsecond a call)."""
        table = mb.table(kernels)
        return kernels, table, table.ctypes.data, [run[0] for run in mb.entries_of(kernels)]

    def _split_at_outputs(self):
        """The steps cut after every kernel that finishes an output, and which outputs each step finishes."""
        finisher = {}
        for pos, v in enumerate(self.program.returned):
            if v is not None:
                finisher.setdefault(v, []).append(pos)
        steps, ready_after = [], {}
        for step in self.steps:
            if not isinstance(step, tuple):  # a NumPy fallback kernel
                steps.append(step)
                done = [p for n in step.outputs for p in finisher.get(n, ())]
                if done:
                    ready_after[len(steps) - 1] = done
                continue
            part = []
            for k in step[0]:
                part.append(k)
                done = [p for n in k.outputs for p in finisher.get(n, ())]
                if done:
                    steps.append(self._compiled_step(part, self._builder))
                    ready_after[len(steps) - 1] = done
                    part = []
            if part:
                steps.append(self._compiled_step(part, self._builder))
        rest = [p for p, _ in self.program.passthrough] + [p for p, _ in self.program.output_copies]
        if rest:
            ready_after[len(steps)] = rest
        return steps, ready_after

    def _run(self, args, steps=None, ready_after=None, on_ready=None):
        slots, last = self._slots, self._last_inputs
        ins = []
        for i, (a, (dt, shape)) in enumerate(zip(args, self._in_types)):
            if a is not last[i] or a.strides != self._last_strides[i]:  # same array, same layout: same buffer
                a = np.ascontiguousarray(a, dtype=dt)
                if a.shape != shape:
                    a = a.reshape(shape)
                slots[i] = a.ctypes.data
                last[i] = a
                self._last_strides[i] = a.strides
            ins.append(a)
        # small outputs share one fresh block (one allocation, one pointer), each a view of its part; big
        # ones get their own, so keeping one result does not keep the others alive
        block = np.empty(self._out_bytes, np.uint8)
        outs = [block[o:o + n].view(dt).reshape(shape) if o >= 0 else np.empty(shape, dt)
                for o, n, dt, shape in self._out_parts]
        address = block.ctypes.data
        slots[self._out_slots] = self._out_offsets + address
        for j in self._own_outputs:
            slots[self._out_slots[j]] = outs[j].ctypes.data
        if self.threads > 1:
            POOL.ensure(self.threads - 1)
        if self._blas:
            jit.BLAS_SERIAL.enter()
        try:
            self._steps(self.steps if steps is None else steps, ins, outs, ready_after, on_ready)
        finally:
            if self._blas:
                jit.BLAS_SERIAL.leave()
        for pos, i in self.program.passthrough:
            outs[pos] = ins[i]
        for pos, earlier in self.program.output_copies:
            outs[pos] = outs[earlier].copy()
        return outs

    def _steps(self, steps, ins, outs, ready_after, on_ready) -> None:
        for i, step in enumerate(steps):
            if isinstance(step, tuple):
                _, _, table, entries = step
                status = self._driver(self._slots_ptr, table, len(entries), self._failed_ptr, self.threads)
                if status:  # (chained kernels never fail: an entry's status is its first kernel's)
                    self._fail(entries[int(self._failed[0])].nodes[status - 1], ins)
            else:
                self._run_numpy(step, ins, outs)
            if ready_after and i in ready_after:
                for pos in ready_after[i]:
                    on_ready(pos, outs[pos])

    def profile(self, *args, repeats: int = 20, in_order: bool = False) -> list[tuple[str, float]]:
        """(kernel header, median seconds) for each kernel on `args` (a flat list): each run `repeats` times in a
        row (its operands in cache from its own last run), or with `in_order`, every kernel once per round in
        program order (its operands where the kernels before it left them, as in a step; chained kernels run
        apart)."""
        with self._lock:
            return self._profile(args, repeats, in_order)

    def _profile(self, args, repeats, in_order):
        outs = self._run(args)  # fills the slots and the arena; `outs` keeps the output buffers alive
        runs = []
        for k in self.program.kernels:
            if k.kind == NUMPY:
                runs.append(lambda k=k: self._run_numpy(k, self._last_inputs, outs))
            else:  # the driver, on a table of this one kernel
                table = self._builder.table([k])
                runs.append(lambda t=table, a=table.ctypes.data: self._driver(self._slots_ptr, a, 1, self._failed_ptr,
                                                                              self.threads))
        kernels = range(len(runs))
        turns = [j for _ in range(repeats) for j in kernels] if in_order else [j for j in kernels for _ in range(repeats)]
        samples = [[] for _ in runs]
        if self.threads > 1:
            POOL.ensure(self.threads - 1)
        if self._blas:
            jit.BLAS_SERIAL.enter()
        for j in turns:
            t0 = time.perf_counter()
            runs[j]()
            samples[j].append(time.perf_counter() - t0)
        if self._blas:
            jit.BLAS_SERIAL.leave()
        return [(kernel_header(k, self.program), float(np.median(s))) for k, s in zip(self.program.kernels, samples)]

    def _array(self, u: Value, ins, outs) -> np.ndarray:
        """A NumPy view of stored value u (for kernels that run on the NumPy reference)."""
        if u in self.program.immediates:
            return np.broadcast_to(self.program.immediates[u].attrs["value"], u.shape)
        acc = self.program.access[u]
        owner = acc.owner
        if owner in self.slot:
            s = self.slot[owner]
            n_in, n_out = len(ins), len(outs)
            base = ins[s] if s < n_in else outs[s - n_in] if s < n_in + n_out else self._const_arrays[s - n_in - n_out]
            base = base.reshape(-1)
        else:
            off = self.program.arena_offsets[owner]
            base = np.ndarray((max(owner.size, 1),), owner.dtype, buffer=self.arena, offset=off)
        item = base.itemsize
        return np.lib.stride_tricks.as_strided(base[acc.offset:], u.shape, tuple(s * item for s in acc.strides))

    def _run_numpy(self, k, ins, outs) -> None:
        n = k.nodes[0]
        operands = [self._array(u, ins, outs) if u.op != "const" or u.ndim else u.attrs["value"] for u in n.inputs]
        try:
            with np.errstate(all="ignore"):
                result = get_primitive(n.op).impl(*operands, **n.attrs)
        except (ValueError, IndexError, TypeError, ArithmeticError) as e:
            raise ExecutionError(f"{type(e).__name__}: {e}", op=n.op, source=n.source) from e
        self._array(n, ins, outs)[...] = np.asarray(result, dtype=n.dtype)

    def _fail(self, node: Value, ins) -> None:
        """Node `node` found bad input: the NumPy reference raises the located error for the same inputs."""
        run_reference(self.graph, ins)
        raise ExecutionError("index out of range", op=node.op, source=node.source)


@gc_paused  # fusion and code generation build ~10 objects per node that live as long as the program
def compile_graph(graph: Graph, check: bool = False, order: list[Value] | None = None,
                  threads: int | None = None) -> LLVMCompiled:
    """Compile `graph` to native code through LLVM; its nodes run in `order` (a schedule) as fused kernels, the
    big ones shared by `threads` threads (default: GRADIR_NUM_THREADS, else the cores this process may use)."""
    return LLVMCompiled(graph, order=order, check=check, threads=threads)


__all__ = ["LLVMCompiled", "cache_dir", "compile_graph", "gemm_module", "load_module"]
