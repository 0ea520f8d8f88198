"""gradir's own thread pool, in LLVM IR: the team that split kernels run on (codegen.py's `name.part` functions).

`gradir_parallel(part, ctx, threads)` runs `part(ctx)` on the calling thread and on up to `threads - 1` pool
workers at once; every `part` takes pieces of its kernel from a counter in `ctx` until none are left, so the
caller alone can finish all of them. That is why the caller never waits for a worker that has not started:
it closes the job when the pieces are gone and waits only for the workers inside it (running a piece). On a
shared machine, where another process may hold a worker's core for a whole time slice, a fork-join team
(OpenMP's barrier) waits for that worker at every kernel; this one does not. Idle workers spin briefly
(the next kernel usually follows within microseconds), then sleep on a futex.

The workers are Python threads that call `gradir_pool_worker` (through ctypes, so without the GIL) and
never return; they are started on first use (`Pool.ensure`). A second program calling while the pool is
busy (another Python thread) runs its kernel on its own thread; so does a forked child (it has no workers).
Linux only (futex); elsewhere kernels run on one thread.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys
import threading

from llvmlite import ir

from . import jit

I32, I64, PTR = ir.IntType(32), ir.IntType(64), ir.PointerType()
FUTEX = {"x86_64": 202, "AMD64": 202, "aarch64": 98, "arm64": 98}  # SYS_futex
FUTEX_WAIT, FUTEX_WAKE = 128, 129  # the _PRIVATE forms
SPINS = 1000        # an idle worker checks for a new job this many times (~50 us) before it sleeps
WAIT_SPINS = 1000   # the caller spins this many times waiting for a worker's last piece, then yields
OPEN = 1 << 62      # the job state's flag: workers may join (the low bits count the workers inside)


def pool_ir(futex: int) -> str:
    """The pool module: globals (the job, its state, a generation word workers sleep on), the worker loop and
    `gradir_parallel`."""
    m = ir.Module(name="gradir_pool")

    def glob(name, ty, init=0):
        g = ir.GlobalVariable(m, ty, name)
        g.initializer = ir.Constant(ty, init)
        g.linkage = "internal"
        return g
    gen, sleepers, lock = glob("gen", I32), glob("sleepers", I32), glob("lock", I32)
    state, limit = glob("state", I64), glob("limit", I64)
    part_ty = ir.FunctionType(ir.VoidType(), [PTR]).as_pointer()
    # (the context as an integer: llvmlite stores no opaque pointers atomically)
    job_fn, job_ctx = glob("job_fn", part_ty, None), glob("job_ctx", I64)
    syscall = ir.Function(m, ir.FunctionType(I64, [I64], var_arg=True), name="gradir_syscall")
    yield_ = ir.Function(m, ir.FunctionType(I32, []), name="gradir_sched_yield")
    c32, c64 = (lambda v: ir.Constant(I32, v)), (lambda v: ir.Constant(I64, v))

    def atomic_load(b, g, ty):
        return b.load_atomic(g, "seq_cst", align=4 if ty == I32 else 8, typ=ty)

    # -- void gradir_pool_worker(): wait for a job, join it while it is open, run part(ctx); forever
    w = ir.Function(m, ir.FunctionType(ir.VoidType(), []), name="gradir_pool_worker")
    entry, wait, spin, sleep, slept, join, try_join, run = (w.append_basic_block(n) for n in (
        "entry", "wait", "spin", "sleep", "slept", "join", "try_join", "run"))
    b = ir.IRBuilder(entry)
    seen0 = atomic_load(b, gen, I32)
    b.branch(wait)
    b.position_at_end(wait)  # seen: the generation of the last job this worker looked at
    seen = b.phi(I32, name="seen")
    seen.add_incoming(seen0, entry)
    b.branch(spin)
    b.position_at_end(spin)
    i = b.phi(I64, name="i")
    i.add_incoming(c64(0), wait)
    g = atomic_load(b, gen, I32)
    new = b.icmp_unsigned("!=", g, seen)
    nxt = b.add(i, c64(1))
    more = b.icmp_unsigned("<", nxt, c64(SPINS))
    then = w.append_basic_block("spin_more")
    i.add_incoming(nxt, then)
    b.cbranch(new, join, then)
    b.position_at_end(then)
    b.cbranch(more, spin, sleep)
    b.position_at_end(sleep)  # announce, re-check, sleep while the generation is still `seen`
    b.atomic_rmw("add", sleepers, c32(1), "seq_cst")
    b.call(syscall, [c64(futex), gen, c32(FUTEX_WAIT), seen, ir.Constant(PTR, None)])
    b.atomic_rmw("sub", sleepers, c32(1), "seq_cst")
    b.branch(slept)
    b.position_at_end(slept)
    seen.add_incoming(seen, slept)
    b.branch(wait)
    b.position_at_end(join)
    seen.add_incoming(g, run)
    b.branch(try_join)
    b.position_at_end(try_join)
    s = atomic_load(b, state, I64)
    inside = b.and_(s, c64(OPEN - 1))
    can = b.and_(b.icmp_unsigned("!=", b.and_(s, c64(OPEN)), c64(0)),
                 b.icmp_unsigned("<", inside, atomic_load(b, limit, I64)))
    attempt, give_up = w.append_basic_block("attempt"), w.append_basic_block("give_up")
    b.cbranch(can, attempt, give_up)
    b.position_at_end(give_up)
    seen.add_incoming(g, give_up)
    b.branch(wait)
    b.position_at_end(attempt)
    pair = b.cmpxchg(state, s, b.add(s, c64(1)), "seq_cst", "seq_cst")
    b.cbranch(b.extract_value(pair, 1), run, try_join)
    b.position_at_end(run)
    fn = atomic_load(b, job_fn, part_ty)
    ctx = b.inttoptr(atomic_load(b, job_ctx, I64), PTR)
    b.call(fn, [ctx])
    b.atomic_rmw("sub", state, c64(1), "seq_cst")
    b.branch(wait)

    # -- void gradir_parallel(part, ctx, threads)
    f = ir.Function(m, ir.FunctionType(ir.VoidType(), [part_ty, PTR, I64]), name="gradir_parallel")
    part, ctx, threads = f.args
    entry, alone, team, wake, work, drain, pause, done = (f.append_basic_block(n) for n in (
        "entry", "alone", "team", "wake", "work", "drain", "pause", "done"))
    b = ir.IRBuilder(entry)
    pfn = part
    got = b.cmpxchg(lock, c32(0), c32(1), "seq_cst", "seq_cst")
    b.cbranch(b.extract_value(got, 1), team, alone)
    b.position_at_end(alone)  # the pool is busy with another program's kernel: this one runs here alone
    b.call(pfn, [ctx])
    b.ret_void()
    b.position_at_end(team)
    b.store_atomic(part, job_fn, "seq_cst", align=8)
    b.store_atomic(b.ptrtoint(ctx, I64), job_ctx, "seq_cst", align=8)
    b.store_atomic(b.sub(threads, c64(1)), limit, "seq_cst", align=8)
    b.store_atomic(c64(OPEN), state, "seq_cst", align=8)
    b.atomic_rmw("add", gen, c32(1), "seq_cst")
    asleep = b.icmp_unsigned("!=", atomic_load(b, sleepers, I32), c32(0))
    b.cbranch(asleep, wake, work)
    b.position_at_end(wake)
    b.call(syscall, [c64(futex), gen, c32(FUTEX_WAKE), b.trunc(b.sub(threads, c64(1)), I32)])
    b.branch(work)
    b.position_at_end(work)
    b.call(pfn, [ctx])
    b.atomic_rmw("and", state, c64(~OPEN), "seq_cst")  # no worker joins any more: wait for those inside
    b.branch(drain)
    b.position_at_end(drain)
    k = b.phi(I64, name="k")
    k.add_incoming(c64(0), work)
    left = b.icmp_unsigned("!=", atomic_load(b, state, I64), c64(0))
    b.cbranch(left, pause, done)
    b.position_at_end(pause)
    kn = b.add(k, c64(1))
    k.add_incoming(kn, pause)
    yield_now = f.append_basic_block("yield")
    b.cbranch(b.icmp_unsigned(">", kn, c64(WAIT_SPINS)), yield_now, drain)
    b.position_at_end(yield_now)
    b.call(yield_, [])
    k.add_incoming(c64(0), yield_now)
    b.branch(drain)
    b.position_at_end(done)
    b.store_atomic(c32(0), lock, "seq_cst", align=4)
    b.ret_void()
    return str(m)


class Pool:
    """The process's workers (see the module docstring); `ensure(n)` has at least n of them running."""

    def __init__(self):
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._worker = None

    def ensure(self, workers: int) -> None:
        if len(self._threads) >= workers:
            return
        with self._lock:
            while len(self._threads) < workers:
                if self._worker is None:
                    self._worker = ctypes.CFUNCTYPE(None)(pool_module().address("gradir_pool_worker"))
                t = threading.Thread(target=self._worker, name=f"gradir-worker-{len(self._threads)}", daemon=True)
                t.start()
                self._threads.append(t)


@functools.cache
def pool_module() -> jit.JitModule | None:
    """The pool, compiled once per process, its `gradir_parallel` registered for kernels' modules (None where
    there is no futex: not Linux, or an unknown CPU)."""
    futex = FUTEX.get(platform.machine())
    if not sys.platform.startswith("linux") or futex is None:
        return None
    libc = ctypes.CDLL(None)
    jit.add_symbol("gradir_syscall", ctypes.cast(libc.syscall, ctypes.c_void_p).value)
    jit.add_symbol("gradir_sched_yield", ctypes.cast(libc.sched_yield, ctypes.c_void_p).value)
    module = jit.JitModule.from_ir(pool_ir(futex))
    jit.add_symbol("gradir_parallel", module.address("gradir_parallel"))
    return module


POOL = Pool()

__all__ = ["POOL", "Pool", "pool_ir", "pool_module"]
