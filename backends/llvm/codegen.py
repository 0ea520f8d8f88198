"""LLVM IR for a fused program: one function per distinct kernel, and one driver that runs a table.

Every shape is static, so each kernel is a loop nest with constant trip counts and constant
strides, taking its buffers as pointer parameters. Kernels with the same structure (backends/sharing.py:
an unrolled loop's iterations, a deep network's blocks) share one function, so the code compiled
grows with the number of distinct kernels, not with the program. The driver
`gradir_run(i8** slots, i64* table, i64 steps, i64* failed)` runs a *table* the backend builds (per
kernel: its function, then a slot and byte offset per pointer parameter), and returns 0, or the
code of the node that found bad input (an out-of-range index: the caller re-runs the NumPy
reference to raise the located error). Slots are the caller's arrays: graph inputs, outputs, array
constants, then the arena, at the offsets the fused program planned. Two neighbouring kernels that threads
share by image may run as one entry, image by image (chains.py: a convolution's unfold and product).

This module builds the module and its driver (`ModuleBuilder`); the kernels' bodies are emitted by
kernels.py, on emitter.py's values (the compute types, loads and stores, the per-op expressions).
"""

from __future__ import annotations

import re

import numpy as np
from llvmlite import ir

from gradir.core.ir import Value
from gradir.passes.fusion import LOOP, MATMUL, NUMPY, SCAN, SCATTER, WINDOW, FusedProgram, Kernel

from .. import loops
from ..loops import lowering
from ..sharing import kernel_key, kernel_params, share
from . import chains, emitter, gemm, index_kernels, kernels, mathlib
from .chains import image_chains, product_epilogues, reused_per_image
from .emitter import I8, I32, I64, PTR, counted
from .index_kernels import ScanKernel, ScatterKernel, WindowKernel
from .kernels import LoopKernel, MatmulKernel, split_of

PIECES_PER_THREAD = 4  # a split kernel's iterations are cut into about this many pieces per thread


def tunables() -> str:
    """The module constants of everything that writes kernel code (sizes, thresholds, tables): part of
    `ModuleBuilder.structure`, since tests and benchmarks change some (the split sweep, A/B runs)."""
    spell = lambda v: repr(sorted(map(repr, v)) if isinstance(v, frozenset) else v)  # (a set's order varies by run)
    spaces = [vars(m) for m in (loops, chains, emitter, gemm, index_kernels, kernels, mathlib)] + [globals()]
    found = [(space["__name__"], k, spell(v)) for space in spaces for k, v in space.items()
             if k.isupper() and isinstance(v, int | float | str | tuple | dict | frozenset)]
    return repr(sorted(t for t in found if " at 0x" not in t[2]))  # (not tables of functions: their ids vary)


class ModuleBuilder:
    """Builds the LLVM module of a fused program (see the module docstring)."""

    def __init__(self, program: FusedProgram, output_values: list[Value], const_values: list[Value],
                 parallel: bool = False):
        self.program = program
        self.parallel = parallel  # whether kernels big enough may run on a team of threads (pool.py's)
        self.module = ir.Module(name=program.graph.name)
        g = program.graph
        # slots: inputs, outputs, array constants, arena
        self.slot: dict[Value, int] = {x: i for i, x in enumerate(g.inputs)}
        base = len(g.inputs)
        for j, o in enumerate(output_values):
            self.slot.setdefault(o, base + j)
        base += len(output_values)
        for j, c in enumerate(const_values):
            self.slot[c] = base + j
        self.arena_slot = base + len(const_values)
        self.num_slots = self.arena_slot + 1
        self._external: dict[str, ir.Function] = {}
        self.function_of: dict[int, int] = {}  # kernel index -> the number of the function that runs it
        self.functions: list[Kernel] = []      # per function, the kernel it was emitted from
        self.params: dict[int, list[Value]] = {}  # kernel index -> its buffers (kernel_params)
        self.chains: dict[int, tuple] = {}     # kernel index -> (the kernel it runs piece by piece with, whether
        # a kernel between them runs first): chains.py's image chains and product epilogues
        self.scales: dict[int, int] = {}  # a product's index -> its epilogue's iterations per unit of its split
        self.chain_function: dict[tuple, int] = {}  # (function, function, reuse, scale) -> the number of their chain
        self.chain_of: dict[int, int] = {}  # chained first kernel's index -> the number of the chain's function
        self.chained: list[tuple] = []  # per chain function: (its first kernel's function, its second's, reuse,
        # scale: None for an image chain)
        self.reused: set[int] = set()  # chained first kernels whose buffer to the second is one image's worth
        self.entries: list[tuple[str, int]] = []  # per function number: its name and number of buffers

    # storage of a value's owner: (slot, byte offset)
    def owner_location(self, owner: Value) -> tuple[int, int]:
        if owner in self.slot:
            return self.slot[owner], 0
        return self.arena_slot, self.program.arena_offsets[owner]

    def build(self, kernels: list[Kernel]) -> ir.Module:
        """One function per distinct kernel (sharing.share) and the driver `gradir_run` that runs a table."""
        self.plan(kernels)
        return self.emit()

    def plan(self, kernels: list[Kernel]) -> None:
        """What `emit` will write, without writing it: which kernels share a function (sharing.share), which run
        as chains, and each table entry's function (its name and number of buffers)."""
        kernels = [k for k in kernels if k.kind != NUMPY]
        self.params = {}  # filled in by share
        self.function_of, self.functions = share(kernels, self.program, self.params)
        self.entries = [(k.name, len(self.kernel_params(k))) for k in self.functions]
        self.chains = image_chains(self.program, kernels) if self.parallel else {}
        if self.parallel:
            epilogues = product_epilogues(self.program, kernels, {i for p, (c, _) in self.chains.items() for i in (p, c)})
            self.chains.update({p: (c, True) for p, (c, _) in epilogues.items()})
            self.scales = {p: scale for p, (_, scale) in epilogues.items()}
        by_index = {k.index: k for k in kernels}
        for p, (c, _) in self.chains.items():
            reuse = reused_per_image(self.program, by_index[p], by_index[c]) if p not in self.scales else None
            key = (self.function_of[p], self.function_of[c], reuse, self.scales.get(p))
            if key not in self.chain_function:
                self.chain_function[key] = len(self.entries)
                first, second = self.functions[key[0]], self.functions[key[1]]
                self.entries.append((self.chain_name(first, second, reuse, key[3]),
                                     len(self.kernel_params(first)) + len(self.kernel_params(second))))
                self.chained.append(key)
            self.chain_of[p] = self.chain_function[key]
            if reuse is not None:
                self.reused.add(p)

    def emit(self) -> ir.Module:
        """The module `plan` planned: the kernels' functions, the chains' and the driver."""
        for k in self.functions:
            self.kernel_function(k)
        for first, second, reuse, scale in self.chained:
            self.chain(self.functions[first], self.functions[second], reuse, scale)
        self.driver()
        return self.module

    def structure(self) -> str | None:
        """What the planned module's code is made from, for a disk cache keyed before any code is written: the
        table's entries, each function's kernel as sharing.kernel_key spells it (equal keys: equal code) and its
        split over threads, the chains, and the kernel emitters' tunables (tests and benchmarks set some). The
        keys name buffers a kernel does not touch by id(): those are numbered in order of appearance here. None
        when an attribute has no exact spelling (sharing._canon's "object": equal only to itself)."""
        split = (lambda k: split_of(self.program, k)) if self.parallel else (lambda k: None)
        keys = [(kernel_key(k, self.program, self.params[k.index]), split(k)) for k in self.functions]
        text = repr((self.entries, keys, self.chained, self.parallel, tunables()))
        if "('object', " in text:
            return None
        ids: dict[str, int] = {}
        return re.sub(r"\('foreign', (\d+)\)", lambda m: f"('foreign', #{ids.setdefault(m[1], len(ids))})", text)

    def kernel_params(self, k: Kernel) -> list[Value]:
        """The distinct buffers kernel k touches: owners of what it reads, then what it writes."""
        params = self.params.get(k.index)
        return kernel_params(k, self.program) if params is None else params

    def _function(self, name: str, params: int, extra: int, noalias: bool = True) -> ir.Function:
        """An internal, never-inlined function of `params` buffers (noalias unless told) and `extra` i64s,
        returning a status."""
        fn = ir.Function(self.module, ir.FunctionType(I32, [PTR] * params + [I64] * extra), name=name)
        fn.linkage = "internal"
        fn.attributes.add("noinline")  # compiled once, called from every place of the driver's table it runs
        for a in fn.args[:params] if noalias else ():
            a.add_attribute("noalias")
        return fn

    def kernel_function(self, k: Kernel, name: str | None = None) -> ir.Function:
        """Emit kernel k as function `name` (default k.name): its buffers as noalias pointer parameters, then
        the number of threads it may use. A kernel that threads share (kernels.split_of) is three functions:
        `name.body` runs the iterations [lo, hi) of its split loop; `name.part` is one thread's share of it
        (it takes pieces of the range from a shared counter); `name` runs what comes once (memory accumulators' start),
        then the body whole on one thread or `name.part` on a team (pool.py's gradir_parallel)."""
        params = self.kernel_params(k)
        name = name or k.name
        fn = self._function(name, len(params), 1)
        emit = {LOOP: LoopKernel, MATMUL: MatmulKernel, SCATTER: ScatterKernel, SCAN: ScanKernel, WINDOW: WindowKernel}[k.kind]
        split = split_of(self.program, k) if self.parallel else None
        if split is None:
            emitter = emit(self, k, fn, dict(zip(params, fn.args)))
            with lowering("LLVM", k, emitter.at):
                emitter.emit()
            return fn
        body = self._function(f"{name}.body", len(params), 2)
        emitter = emit(self, k, body, dict(zip(params, body.args)))
        emitter.part, emitter.split = tuple(body.args[-2:]), split.where
        once = emit(self, k, fn, dict(zip(params, fn.args)))
        with lowering("LLVM", k, emitter.at):
            emitter.emit()
            if isinstance(once, LoopKernel):
                once.prologue()
        self._parallel_call(once.b, fn, body, split, len(params))
        return fn

    @staticmethod
    def chain_name(first: Kernel, second: Kernel, reuse: tuple[int, int, int] | None, scale: int | None) -> str:
        return f"{first.name}+{second.name}" + ("" if reuse is None else f"+reused{'_'.join(map(str, reuse))}") + \
            ("" if scale is None else f"+epilogue{scale}")

    def chain(self, first: Kernel, second: Kernel, reuse: tuple[int, int, int] | None, scale: int | None) -> None:
        """The function running (the functions of) two chained kernels (chains.py). An image chain's body calls
        each kernel's body on one image at a time; threads share images as they share either kernel's.
        `reuse` (chains.reused_per_image): the buffer between them, given to both kernels shifted back so each
        image of a thread's piece is written and read where the piece's first image is. A product epilogue's
        body (`scale`: the epilogue's iterations per unit of the product's split) calls the product's body on a
        thread's piece, then the epilogue's on the same elements."""
        name = self.chain_name(first, second, reuse, scale)
        params = len(self.kernel_params(first)) + len(self.kernel_params(second))
        # (no noalias: the second kernel reads what the first writes)
        fn, body = (self._function(f, params, extra, noalias=False) for f, extra in ((name, 1), (f"{name}.body", 2)))
        b = ir.IRBuilder(body.append_basic_block("entry"))
        cut = len(self.kernel_params(first))
        status = b.alloca(I32)
        b.store(ir.Constant(I32, 0), status)
        if scale is not None:  # (a product never fails: the status is the epilogue's)
            lo, hi = body.args[-2:]
            b.call(self.module.get_global(f"{first.name}.body"), list(body.args[:cut]) + [lo, hi])
            s = ir.Constant(I64, scale)
            b.store(b.call(self.module.get_global(f"{second.name}.body"), list(body.args[cut:params]) +
                           [b.mul(lo, s), b.mul(hi, s)]), status)
        else:
            self.per_image(b, first, second, body, cut, params, reuse, status)
        b.ret(b.load(status, typ=I32))
        self._parallel_call(ir.IRBuilder(fn.append_basic_block("entry")), fn, body, split_of(self.program, first),
                            params)

    def per_image(self, b, first: Kernel, second: Kernel, body: ir.Function, cut: int, params: int,
                  reuse: tuple[int, int, int] | None, status) -> None:
        lo, hi = body.args[-2:]
        with counted(b, lo, hi, name="image") as i:
            j = b.add(i, ir.Constant(I64, 1))
            back = None if reuse is None else b.mul(b.sub(i, lo), ir.Constant(I64, -reuse[2]))
            for side, (k, args) in enumerate(((first, body.args[:cut]), (second, body.args[cut:params]))):
                args = list(args)
                if back is not None:  # (not inbounds: the shifted pointer is before the buffer's start)
                    args[reuse[side]] = b.gep(args[reuse[side]], [back], source_etype=I8)
                got = b.call(self.module.get_global(f"{k.name}.body"), args + [i, j])
                old = b.load(status, typ=I32)
                b.store(b.select(b.icmp_signed("!=", old, ir.Constant(I32, 0)), old, got), status)

    def _parallel_call(self, b: ir.IRBuilder, fn: ir.Function, body: ir.Function, split, nparams: int) -> None:
        """Finish `fn` (its builder `b` after the prologue): with more than one thread, the buffers go in a
        context that gradir_parallel (pool.py) hands each thread's `part`; else the body runs whole here."""
        ctx_ty = ir.LiteralStructType([ir.ArrayType(PTR, nparams), I32, I64, I64])  # buffers, status, next piece,
        # threads
        part = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]), name=f"{body.name[:-5]}.part")
        part.linkage = "internal"
        threads = fn.args[-1]
        team, alone = fn.append_basic_block("team"), fn.append_basic_block("alone")
        b.cbranch(b.icmp_signed(">", threads, ir.Constant(I64, 1)), team, alone)
        b.position_at_end(alone)
        b.ret(b.call(body, list(fn.args[:nparams]) + [ir.Constant(I64, 0), ir.Constant(I64, split.size)]))
        b.position_at_end(team)
        ctx = b.alloca(ctx_ty)  # (a typed pointer: its fields' addresses are typed too, as stores want)
        field = lambda *i: b.gep(ctx, [ir.Constant(I32, 0)] + [ir.Constant(I32, j) for j in i])
        for j, a in enumerate(fn.args[:nparams]):
            b.store(a, field(0, j))
        b.store(ir.Constant(I32, 0), field(1))
        b.store(ir.Constant(I64, 0), field(2))
        b.store(threads, field(3))
        parallel = self.module.globals.get("gradir_parallel") or ir.Function(
            self.module, ir.FunctionType(ir.VoidType(), [part.type, PTR, I64]), name="gradir_parallel")
        b.call(parallel, [part, ctx, threads])
        b.ret(b.load(field(1), typ=I32))
        # a thread's share: it takes pieces of whole grains from a shared counter until none are left, so a
        # thread the OS delays (another process on its core) leaves its pieces to the others; each element is
        # still computed by the same code in the same order, whichever thread runs it
        b = ir.IRBuilder(part.append_basic_block("entry"))
        ctx = part.args[0]
        field = lambda *i: b.gep(ctx, [ir.Constant(I32, 0)] + [ir.Constant(I32, j) for j in i], source_etype=ctx_ty)
        c64 = lambda v: ir.Constant(I64, v)
        umin = lambda x, y: b.select(b.icmp_unsigned("<", x, y), x, y)
        units = c64(max(1, split.size // split.grain))  # (the last piece takes the remainder: no piece is short)
        team_size = b.load(field(3), typ=I64)
        # a product split by rows: one piece per thread (each piece reads all of B: more pieces, more reads)
        pieces = b.mul(team_size, c64(1 if split.where == "m" else PIECES_PER_THREAD))
        per = b.udiv(b.add(units, b.sub(pieces, c64(1))), pieces)  # (rounded up)
        buffers = [b.load(field(0, j), typ=PTR) for j in range(nparams)]
        take, run, done = (part.append_basic_block(x) for x in ("take", "run", "done"))
        b.branch(take)
        b.position_at_end(take)
        first = b.mul(b.atomic_rmw("add", field(2), c64(1), "monotonic"), per)
        b.cbranch(b.icmp_unsigned("<", first, units), run, done)
        b.position_at_end(run)
        lo = umin(b.mul(first, c64(split.grain)), c64(split.size))
        end = b.add(first, per)
        hi = b.select(b.icmp_unsigned("<", end, units), b.mul(end, c64(split.grain)), c64(split.size))
        b.atomic_rmw("umax", field(1), b.call(body, buffers + [lo, hi]), "monotonic")
        b.branch(take)
        b.position_at_end(done)
        b.ret_void()

    def table(self, kernels: list[Kernel]) -> np.ndarray:
        """The driver's program for running `kernels` in order: per entry (`entries_of`), its function number,
        then (slot, byte offset) per parameter (int64s)."""
        out: list[int] = []
        append, extend = out.append, out.extend
        function_of, params, slot = self.function_of, self.params, self.slot
        arena_slot, arena_offsets = self.arena_slot, self.program.arena_offsets
        for run in self.entries_of(kernels):
            append(function_of[run[0].index] if len(run) == 1 else
                   self.chain_of[run[0].index])
            for r in run:
                ps = params.get(r.index)
                for o in kernel_params(r, self.program) if ps is None else ps:
                    s = slot.get(o)
                    extend((arena_slot, arena_offsets[o]) if s is None else (s, 0))
        return np.array(out, np.int64)

    def entries_of(self, kernels: list[Kernel]) -> list[list[Kernel]]:
        """`kernels` as the driver's table runs them: one per entry, or two where they run as a chain (a kernel
        between them runs before or after it, image_chains says which)."""
        entries: list[list[Kernel]] = []
        i = 0
        while i < len(kernels):
            k, ahead = kernels[i], [x.index for x in kernels[i + 1:i + 3]]
            c, first = self.chains.get(k.index, (None, False))
            if c in ahead:
                between = [[m] for m in kernels[i + 1:i + 1 + ahead.index(c)]]
                chain = [[k, kernels[i + 1 + len(between)]]]
                entries += between + chain if first else chain + between
                i += 2 + len(between)
            else:
                entries.append([k])
                i += 1
        return entries

    def release(self) -> None:
        """Drop what only building the module and its tables needed (`table` still works, more slowly)."""
        self.params = {}
        self.module = None
        self._external = {}

    def driver(self) -> None:
        """`i32 gradir_run(i8** slots, i64* table, i64 steps, i64* failed, i64 threads)`: for each of `steps`
        table entries, call its function with pointers slots[slot] + offset and the number of threads; on a
        nonzero status, store the step in *failed and return the status (the failing node's position in its
        kernel, + 1)."""
        fn = ir.Function(self.module, ir.FunctionType(I32, [PTR, PTR, I64, PTR, I64]), name="gradir_run")
        slots, table, steps, failed, threads = fn.args
        entry, loop = fn.append_basic_block("entry"), fn.append_basic_block("step")
        after, done = fn.append_basic_block("called"), fn.append_basic_block("done")
        stop, more = fn.append_basic_block("failed"), fn.append_basic_block("next")
        bad = fn.append_basic_block("bad_function")
        b = ir.IRBuilder(entry)
        b.cbranch(b.icmp_signed(">", steps, ir.Constant(I64, 0)), loop, done)
        b.position_at_end(loop)
        s, pos = b.phi(I64, name="s"), b.phi(I64, name="pos")
        s.add_incoming(ir.Constant(I64, 0), entry)
        pos.add_incoming(ir.Constant(I64, 0), entry)
        word = lambda i: b.load(b.gep(table, [b.add(pos, ir.Constant(I64, i))], source_etype=I64), typ=I64)
        switch = b.switch(word(0), bad)
        incoming = []  # per function: (its status, the table words its entry takes, the block calling it)
        for f, (name, nparams) in enumerate(self.entries):
            case = fn.append_basic_block(f"f{f}")
            switch.add_case(ir.Constant(I64, f), case)
            b.position_at_end(case)
            args = []
            for j in range(nparams):
                base = b.load(b.gep(slots, [word(1 + 2 * j)], source_etype=PTR), typ=PTR)
                args.append(b.gep(base, [word(2 + 2 * j)], source_etype=I8))
            incoming.append((b.call(self.module.get_global(name), args + [threads]), ir.Constant(I64, 1 + 2 * len(args)),
                             case))
            b.branch(after)
        b.position_at_end(bad)
        b.unreachable()
        b.position_at_end(after)
        st, wd = b.phi(I32, name="status"), b.phi(I64, name="width")
        for v, w, blk in incoming:
            st.add_incoming(v, blk)
            wd.add_incoming(w, blk)
        nxt, moved = b.add(s, ir.Constant(I64, 1)), b.add(pos, wd)
        b.cbranch(b.icmp_signed("!=", st, ir.Constant(I32, 0)), stop, more)
        b.position_at_end(stop)
        b.store(s, failed)
        b.ret(st)
        b.position_at_end(more)
        s.add_incoming(nxt, more)
        pos.add_incoming(moved, more)
        b.cbranch(b.icmp_signed("<", nxt, steps), loop, done)
        b.position_at_end(done)
        b.ret(ir.Constant(I32, 0))

    def external(self, name: str, fnty: ir.FunctionType) -> ir.Function:
        """A function of another module, declared once (backend.load_module registers its address first): a
        BLAS routine `gradir_blas_sgemm`, gemm.py's `gradir_gemm_f32`, ..."""
        if name not in self._external:
            self._external[name] = ir.Function(self.module, fnty, name=name)
        return self._external[name]


__all__ = ["LoopKernel", "MatmulKernel", "ModuleBuilder", "ScanKernel", "ScatterKernel", "WindowKernel"]
