"""Data-parallel training on torch.distributed (`gr.distributed`): count-weighted, bucketed gradient all-reduce.

    import gradir as gr
    info = gr.distributed.init(timeout_s=60)            # reads torchrun's RANK, WORLD_SIZE, MASTER_ADDR, ...
    dp = gr.distributed.DataParallel(loss, gr.optim.adam(1e-3))
    params, state = dp.init(params)                     # rank 0's parameters, on every rank
    for k in range(steps):
        loss_value, params, state = dp.step(params, state, *my_shard(k))   # this rank's examples only
        if k % 100 == 0:
            dp.save_checkpoint("run.npz", params, state, k + 1)             # rank 0 writes, atomically
    gr.distributed.finish()                             # every rank, before it exits

`loss(params, *batch)` returns the MEAN loss over the batch's examples; axis 0 of every batch leaf is the
example axis. Each rank holds a shard of the global batch: any number of examples, zero included (the last
batch of an epoch). A step is:

1. an all-reduce of the ranks' example counts n_r (and of a failure flag, see Errors): N = sum n_r;
2. this rank's loss and gradients, by ONE program `gr.compile` made (`gr.optim.loss_and_grads`, so mixed
   precision works too); a rank with n_r = 0 does not call the loss (the mean of nothing is undefined) and
   contributes zeros;
3. count weighting: each rank scales its mean gradient and mean loss by n_r / N, and the ranks' scaled
   gradients are summed by `dist.all_reduce`. Summing the ranks' plain means instead (or averaging them)
   is wrong whenever the counts differ: sum_r (n_r / N) mean_r = (1/N) sum over all examples = the
   full-batch mean, which is what single-process training computes;
4. every rank applies the same update with a second compiled program (`opt.update`), so parameters stay
   identical on every rank (the same inputs, the same machine code, the same bits).

Buckets. Gradients travel in buckets: each bucket's gradients are copied (already scaled) into one
contiguous buffer of at most `bucket_bytes` (one dtype per bucket) and all-reduced as one tensor, as DDP's
`bucket_cap_mb`. The buckets follow the backward schedule (`gradir.passes.buckets.plan_buckets`: the order
in which the compiled program finishes the gradients), where DDP guesses reverse parameter order. The plan
is fixed at the first step and the same on every rank (computed on the lowest rank holding examples and
broadcast), because gloo matches collectives by the order in which they are issued. `dp.plan` is the plan
(`print(dp.plan)`: each bucket's gradients, bytes and launch step); `dp.last` holds the last step's counts, N, weight and
whether it overlapped, and `dp.last_grads` the all-reduced gradients it applied.

Overlap. When `overlap=True` and the compiled program offers `run_with_ready(flat_args, on_ready)` (the
LLVM backend reports each output as soon as it is final), each bucket's all-reduce is started
asynchronously as soon as its last gradient is ready (and every earlier bucket has been started), so
communication runs while the rest of the backward pass computes; all handles are waited for after the
backward. Otherwise every bucket is all-reduced after the backward. The decision sits in one function,
`overlaps`; both paths do the same arithmetic in the same order and give identical bits.

Checkpoints. `dp.save_checkpoint` writes on rank 0 only, atomically (`gr.train.save_checkpoint`: a temporary
file renamed into place), then waits at a barrier, so no rank runs ahead of a checkpoint that is not yet on
disk. `dp.load_checkpoint(path)` reads on every rank by default: on one machine the file is shared; on
several machines the path must be on a filesystem every machine sees (NFS, a cluster filesystem). Without
one, `dp.load_checkpoint(path, broadcast=True)` reads on rank 0 only and broadcasts the checkpoint to the
other ranks (then only rank 0's machine needs the file, which is also where `save_checkpoint` wrote it).
Either way, the ranks then compare what they loaded and raise if they differ (a stale copy on one machine).

Errors. A rank that raises must not leave the others waiting forever. `init(timeout_s=...)` gives the
process group a timeout: a collective that waits longer raises on every rank. A Python error on one rank
during a step (tracing or compiling the loss, a bad batch) is caught, announced to the other ranks through
the count all-reduce, and every rank raises a `DistributedError` naming the rank and its error (the
failing rank chains its original exception). A rank that dies (or raises outside `dp.step`) closes its
connections: the others' next collective fails at once ("Connection closed by peer") or at the timeout,
and is re-raised as a `DistributedError` that says another rank failed. A rank closes its process group
before it raises a `DistributedError` (so it exits with that Python error, not an abort in gloo's threads);
its collectives are over.

Launch. One machine, N processes:

    torchrun --nproc-per-node N script.py

Several machines (run on each; HOST:PORT is an address of the first machine every machine can reach):

    torchrun --nnodes 2 --node-rank 0 --rdzv-backend c10d --rdzv-endpoint HOST:PORT --nproc-per-node N script.py
    torchrun --nnodes 2 --node-rank 1 --rdzv-backend c10d --rdzv-endpoint HOST:PORT --nproc-per-node N script.py

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; `init()` reads them. gloo is the
backend for NumPy (CPU) arrays; on several machines set GLOO_SOCKET_IFNAME to the network interface to use
if gloo picks the wrong one. Parameters stay bit-identical across ranks when every machine runs the same
machine code (same CPU features); on mixed hardware, re-broadcast them now and then (`dp.init(params)`
broadcasts rank 0's, keeping `state` is up to you).

torch is imported only inside the functions of this module, so `import gradir` does not import it.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np

from gradir.api import transforms as api
from gradir.core import dtypes
from gradir.core.errors import GradirError
from gradir.passes.buckets import BucketPlan, plan_buckets
from gradir.training import loop
from gradir.training.optim import loss_and_grads
from gradir.util.public import api_dir
from gradir.util.pytree import tree_flatten, tree_flatten_with_path, tree_unflatten

__all__ = ["DataParallel", "DistributedError", "ProcessInfo", "finish", "free_port", "init", "launch_local", "overlaps",
           "tree_digest"]

MESSAGE_BYTES = 512  # of a failing rank's error message, sent to every rank


class DistributedError(GradirError, RuntimeError):
    """A data-parallel step failed on some rank (every rank raises it), or a collective failed or timed out."""


def _torch():
    import torch
    import torch.distributed as dist

    return torch, dist


# -- process group --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessInfo:
    """Where this process stands: its rank, the world size, its rank on this machine, the backend."""

    rank: int
    world_size: int
    local_rank: int
    backend: str


def init(timeout_s: float = 60, *, backend: str | None = None, rank: int | None = None, world_size: int | None = None,
         master_addr: str | None = None, master_port: int | None = None) -> ProcessInfo:
    """Initialise torch.distributed's default process group from torchrun's environment (RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR, MASTER_PORT; explicit arguments win), with a timeout of `timeout_s` seconds on
    every collective, so a rank that fails makes the others raise instead of hang. `backend`: "gloo" (the
    default: gradir's arrays live in CPU memory) or "nccl" (CUDA tensors). Already initialised: returns the
    existing group's figures."""
    torch, dist = _torch()
    if dist.is_initialized():
        return ProcessInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", dist.get_rank())),
                           str(dist.get_backend()))
    env = os.environ

    def need(value, name):
        if value is not None:
            return value
        if name not in env:
            raise DistributedError(f"{name} is not set: launch with torchrun (torchrun --nproc-per-node N script.py) "
                                   "or pass rank=, world_size=, master_addr=, master_port= to gr.distributed.init",
                                   op="distributed.init")
        return env[name]

    rank = int(need(rank, "RANK"))
    world_size = int(need(world_size, "WORLD_SIZE"))
    addr = str(need(master_addr, "MASTER_ADDR"))
    port = int(need(master_port, "MASTER_PORT"))
    backend = backend or "gloo"
    if backend == "nccl" and torch.cuda.is_available():
        torch.cuda.set_device(int(env.get("LOCAL_RANK", rank % max(torch.cuda.device_count(), 1))))
    dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return ProcessInfo(rank, world_size, int(env.get("LOCAL_RANK", rank)), backend)


def finish() -> None:
    """Wait until every rank gets here, then close the process group. Call it before a rank exits: a process
    that exits with the group open can abort in gloo's threads ("terminate called without an active exception")
    while a peer is still talking to it."""
    _, dist = _torch()
    if dist.is_initialized():
        _collective("the final barrier", dist.barrier)
        dist.destroy_process_group()


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on (for a local process group)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_local(argv: list[str], world_size: int, *, timeout_s: float = 120, env: dict | None = None,
                 capture: bool = True) -> list[tuple[int, str]]:
    """Run `python argv...` as `world_size` ranks on this machine, with the environment torchrun would give
    them (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT; gloo on the loopback
    interface), for examples and tests that start their own ranks. Returns (exit status, output) per rank
    (output is "" with `capture=False`: the ranks print to this terminal). Every rank is killed when they
    have not all finished after `timeout_s`, and a DistributedError says so: a hang fails instead of blocking."""
    base = {**os.environ, "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo"),
            "WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), **(env or {})}
    pipe = subprocess.PIPE if capture else None
    procs = [subprocess.Popen([sys.executable, *map(str, argv)], env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=pipe, stderr=subprocess.STDOUT if capture else None, text=True)
             for r in range(world_size)]
    deadline = time.monotonic() + timeout_s
    results = []
    for p in procs:
        try:
            text, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            for q in procs:  # reap them and close their pipes
                q.communicate()
            raise DistributedError(f"the {world_size} ranks of {' '.join(map(str, argv))} did not finish within "
                                   f"{timeout_s:g} s (killed)", op="distributed.launch_local") from None
        results.append((p.returncode, text or ""))
    return results


def _collective(what: str, fn, *args, **kwargs):
    """Run a torch.distributed call; its failure (a peer that died, a timeout) becomes a DistributedError."""
    try:
        return fn(*args, **kwargs)
    except RuntimeError as e:  # torch's DistBackendError is a RuntimeError
        raise _peer_error(what, e) from e


def _peer_error(what: str, e: BaseException) -> DistributedError:
    _, dist = _torch()
    rank = dist.get_rank() if dist.is_initialized() else "?"
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return _closing(DistributedError(f"rank {rank}: {what} failed: another rank probably raised or exited (its own "
                                     f"error says why), or the process group's timeout passed. torch said: {first}",
                                     op="distributed"))


def _closing(error: DistributedError) -> DistributedError:
    """`error`, once the process group is closed (as finish() closes it, without the barrier: the ranks are
    already stopping). A rank that raises it then exits with an ordinary Python error; with the group still
    open its exit could abort in gloo's threads (SIGABRT, "terminate called without an active exception")
    after printing the error. Its collectives are over: init() again to start another group."""
    _, dist = _torch()
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - a group whose peers are gone may not close cleanly; `error` is the news
            pass
    return error


def _wait(what: str, handle) -> None:
    try:
        handle.wait()
    except RuntimeError as e:
        raise _peer_error(what, e) from e


def _group_size(group) -> tuple[int, int]:
    _, dist = _torch()
    if not dist.is_initialized():
        raise DistributedError("torch.distributed is not initialised: call gr.distributed.init() first (under torchrun)",
                               op="distributed")
    return dist.get_rank(group), dist.get_world_size(group)


def _as_torch(a: np.ndarray):
    """A torch view of a contiguous NumPy array (bfloat16 through an int16 view, bool through uint8)."""
    torch, _ = _torch()
    if a.dtype == dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    if a.dtype == np.bool_:
        return torch.from_numpy(a.view(np.uint8))
    return torch.from_numpy(a)


# -- the overlap decision ----------------------------------------------------------------------------


def overlaps(executable, overlap: bool) -> bool:
    """Whether this step's buckets start during the backward, decided in one place: when `overlap` is asked for
    and the backend can hand over each output as soon as it is final (`run_with_ready`: the LLVM backend);
    otherwise every bucket is all-reduced after the backward."""
    return overlap and hasattr(executable, "run_with_ready")


class _Launcher:
    """Copies each gradient, scaled by n_r / N, into its bucket's buffer as it becomes ready, and starts a
    bucket's all-reduce once it is full and every earlier bucket has started (the same order on every rank)."""

    def __init__(self, plan: BucketPlan, grad_positions: list[int], shapes: list[tuple], weight: float, group,
                 async_op: bool):
        self.plan, self.weight, self.group, self.async_op = plan, weight, group, async_op
        self.buffers = [np.empty(b.nbytes // np.dtype(b.dtype).itemsize, b.dtype) for b in plan.buckets]
        self.leaf_of = {p: i for i, p in enumerate(grad_positions)}
        self.where: dict[int, tuple[int, int, int]] = {}  # leaf -> (bucket, start, size)
        for b in plan.buckets:
            start = 0
            for position in b.positions:
                leaf = self.leaf_of[position]
                size = int(np.prod(shapes[leaf], dtype=np.int64))
                self.where[leaf] = (b.index, start, size)
                start += size
        self.shapes = shapes
        self.missing = [len(b.positions) for b in plan.buckets]
        self.next = 0  # the next bucket to launch
        self.handles: list = []
        self.launched_at: list[int] = []  # how many gradients were ready when each bucket launched
        self.launch_times: list[float] = []  # time.perf_counter() at each launch
        self.ready = 0
        self.done: set[int] = set()  # leaves already in their buffer

    def put(self, leaf: int, grad) -> None:
        b, start, size = self.where[leaf]
        self.done.add(leaf)
        dst = self.buffers[b][start:start + size]
        np.multiply(np.asarray(grad, dtype=dst.dtype).reshape(-1), dst.dtype.type(self.weight), out=dst)
        self.missing[b] -= 1
        self.ready += 1
        self.launch_ready()

    def on_ready(self, position: int, array) -> None:
        leaf = self.leaf_of.get(int(position))
        if leaf is not None and leaf not in self.done:
            self.put(leaf, array)

    def zeros(self) -> None:
        for buf in self.buffers:
            buf.fill(0)
        self.missing = [0] * len(self.missing)
        self.launch_ready()

    def launch_ready(self) -> None:
        _, dist = _torch()
        while self.next < len(self.buffers) and self.missing[self.next] == 0:
            what = f"all-reduce of gradient bucket {self.next}"
            t = _as_torch(self.buffers[self.next])
            if self.async_op:
                self.handles.append((what, _collective(what, dist.all_reduce, t, group=self.group, async_op=True)))
            else:
                _collective(what, dist.all_reduce, t, group=self.group)
            self.launched_at.append(self.ready)
            self.launch_times.append(time.perf_counter())
            self.next += 1

    def wait(self) -> None:
        for what, h in self.handles:
            _wait(what, h)
        self.handles = []

    def grads(self, treedef):
        leaves = [None] * len(self.shapes)
        for leaf, (b, start, size) in self.where.items():
            leaves[leaf] = self.buffers[b][start:start + size].reshape(self.shapes[leaf])
        return tree_unflatten(treedef, leaves)


# -- DataParallel -----------------------------------------------------------------------------------


def _count(shard) -> int:
    leaves = [x for x in tree_flatten(tuple(shard))[0]]
    if not leaves:
        raise DistributedError("a data-parallel step needs a batch (axis 0 of each batch leaf is the example axis)",
                               op="distributed.step")
    counts = {int(np.shape(x)[0]) if np.ndim(x) else -1 for x in leaves}
    if len(counts) != 1 or -1 in counts:
        raise DistributedError(f"every batch leaf needs the same number of examples on axis 0, got "
                               f"{sorted(int(np.shape(x)[0]) if np.ndim(x) else 'scalar' for x in leaves)}",
                               op="distributed.step")
    return counts.pop()


def _signature(tree) -> tuple:
    leaves, td = tree_flatten(tree)
    return td, tuple((tuple(np.shape(x)), str(np.asarray(x).dtype)) for x in leaves)


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "little")


def tree_digest(tree) -> str:
    """A SHA-256 of a pytree's structure, shapes, dtypes and bytes: equal digests, equal bits."""
    h = hashlib.sha256()
    leaves, td = tree_flatten(tree)
    h.update(repr(td).encode())
    for x in leaves:
        a = np.ascontiguousarray(np.asarray(x))
        h.update(f"{a.shape}{a.dtype}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


class DataParallel:
    """Count-weighted data-parallel training of `loss(params, *batch)` (the MEAN over the batch's examples)
    with the `gr.optim` optimizer `opt` over torch.distributed. See the module docstring."""

    def __init__(self, loss, opt, *, backend: str = "llvm", bucket_bytes: int = 25 * 2**20, overlap: bool = True,
                 process_group=None):
        if bucket_bytes <= 0:
            raise DistributedError(f"bucket_bytes must be > 0, got {bucket_bytes}", op="distributed.DataParallel")
        self.loss, self.opt, self.backend = loss, opt, backend
        self.bucket_bytes, self.overlap, self.group = int(bucket_bytes), bool(overlap), process_group
        gradients = loss_and_grads(loss, opt)

        def value_and_grads(params, state, *batch):
            return gradients(params, state, *batch)

        value_and_grads.__name__ = f"grads_{getattr(loss, '__name__', 'loss')}".replace("<lambda>", "loss")
        self.gradients = api.compile(value_and_grads, backend=backend)
        self.update = api.compile(lambda g, s, p: opt.update(g, s, p), backend=backend)
        self.plan: BucketPlan | None = None
        self._plan_key = None
        self.last: dict = {}  # the last step's figures: counts, N, weight, overlapped, launch points
        self.last_grads = None  # the last step's all-reduced (count-weighted) gradients, as every rank applied them

    # -- setup
    @property
    def rank(self) -> int:
        return _group_size(self.group)[0]

    @property
    def world_size(self) -> int:
        return _group_size(self.group)[1]

    def _agree(self, what: str, key: int) -> None:
        """Raise on every rank unless every rank passed the same `key` (e.g. a pytree signature's digest)."""
        torch, dist = _torch()
        rank, world = _group_size(self.group)
        t = torch.zeros(world, dtype=torch.int64)
        t[rank] = key
        _collective(f"comparing {what} across ranks", dist.all_reduce, t, group=self.group)
        if len(set(t.tolist())) != 1:
            raise _closing(DistributedError(f"the ranks passed different {what} (digests by rank: {t.tolist()})",
                                            op="distributed"))

    def broadcast(self, tree, src: int = 0):
        """`tree` as rank `src` has it, on every rank (the same structure, shapes and dtypes are required)."""
        _, dist = _torch()
        leaves, td = tree_flatten(tree)
        self._agree("pytree structures, shapes or dtypes", _digest(repr(_signature(tree))))
        out = []
        for i, x in enumerate(leaves):
            a = np.array(x, copy=True, order="C")
            if a.size:
                _collective(f"broadcast of leaf {i}", dist.broadcast, _as_torch(a.reshape(-1)), src=src,
                            group=self.group)
            out.append(a)
        return tree_unflatten(td, out)

    def init(self, params):
        """(params, state): rank 0's parameters broadcast to every rank, and the optimizer's initial state."""
        params = self.broadcast(params, 0)
        return params, self.opt.init(params)

    # -- the step
    def _exchange(self, n: int, error: BaseException | None) -> np.ndarray:
        """The all-reduce that opens every step: each rank's example count and whether it failed; if some
        rank failed, a second all-reduce carries the failing ranks' messages, and every rank raises."""
        torch, dist = _torch()
        rank, world = _group_size(self.group)
        t = torch.zeros((world, 2), dtype=torch.int64)
        t[rank, 0], t[rank, 1] = n, error is not None
        _collective("all-reduce of the shard counts", dist.all_reduce, t, group=self.group)
        table = t.numpy()
        failed = [r for r in range(world) if table[r, 1]]
        if failed:
            msg = torch.zeros((world, MESSAGE_BYTES), dtype=torch.uint8)
            if error is not None:
                text = f"{type(error).__name__}: {error}".encode()[:MESSAGE_BYTES]
                msg[rank, :len(text)] = torch.frombuffer(bytearray(text), dtype=torch.uint8)
            _collective("all-reduce of the error messages", dist.all_reduce, msg, group=self.group)
            texts = [bytes(msg[r].numpy()).rstrip(b"\0").decode(errors="replace") for r in failed]
            why = "; ".join(f"rank {r} raised {m}" for r, m in zip(failed, texts))
            raise _closing(DistributedError(f"data-parallel step failed on rank(s) {failed} (rank {rank} stops too): "
                                            f"{why}", op="distributed.step")) from error
        return table[:, 0].copy()

    def _plan_for(self, params, graph_args, counts: np.ndarray, grad_positions: list[int]) -> BucketPlan:
        """The bucket plan (passes.buckets: the order the backward schedule finishes the gradients), made at the
        first step for these parameters on the lowest rank holding examples and broadcast, so every rank issues
        the same all-reduces in the same order (gloo matches collectives by their order)."""
        key = _signature(params)
        if self.plan is not None and self._plan_key == key:
            return self.plan
        _, dist = _torch()
        rank, _ = _group_size(self.group)
        src = int(np.flatnonzero(counts > 0)[0])
        box = [None]
        if rank == src:
            names = [p for p, _ in tree_flatten_with_path(params, "params")[0]]
            box[0] = plan_buckets(self.gradients.graph(*graph_args), grad_positions, self.bucket_bytes, names=names)
        _collective("broadcast of the bucket plan", dist.broadcast_object_list, box, src=src, group=self.group)
        self.plan, self._plan_key = box[0], key
        return self.plan

    def step(self, params, state, *shard):
        """(loss, params, state): the global batch's mean loss and every rank's identical updated parameters
        and state, from this rank's `shard` (any number of examples, zero included)."""
        torch, dist = _torch()
        n = _count(shard)
        p_leaves, p_tree = tree_flatten(params)
        shapes = [tuple(np.shape(x)) for x in p_leaves]
        executable = None
        args = (params, state, *shard)
        error = None
        try:
            if n > 0:  # trace and compile now (where a Python error in the loss shows), before any collective waits
                executable = self.gradients.executable(*args)
        except Exception as e:  # noqa: BLE001 - announced to every rank, then raised here too
            error = e
        counts = self._exchange(n, error)
        total = int(counts.sum())
        if total == 0:
            raise _closing(DistributedError("no rank holds any example in this step", op="distributed.step"))
        weight = n / total
        grad_positions = list(range(1, 1 + len(p_leaves)))  # the outputs are (value, *grads)
        plan = self._plan_for(params, (params, state, *shard), counts, grad_positions)
        overlapped = overlaps(executable, self.overlap)
        launcher = _Launcher(plan, grad_positions, shapes, weight, self.group, async_op=True)
        start = time.perf_counter()
        if n == 0:
            value = 0.0
            launcher.zeros()
        else:
            if overlapped:
                outs = self.gradients.run_with_ready(*args, on_ready=launcher.on_ready)
            else:
                outs = tree_flatten(self.gradients(*args))[0]
            computed = time.perf_counter()  # the program (forward and backward) is done
            for leaf, pos in enumerate(grad_positions):  # whatever was not reported ready (or all, without overlap)
                if leaf not in launcher.done:
                    launcher.put(leaf, outs[pos])
            value = float(np.asarray(outs[0]))
        if n == 0:
            computed = start
        loss = torch.tensor([value * weight], dtype=torch.float64)
        h = _collective("all-reduce of the loss", dist.all_reduce, loss, group=self.group, async_op=True)
        launcher.wait()
        _wait("all-reduce of the loss", h)
        reduced = time.perf_counter()
        grads = launcher.grads(p_tree)
        self.last_grads = grads
        ms = lambda t: (t - start) * 1e3  # noqa: E731
        self.last = {"counts": counts.tolist(), "N": total, "weight": weight, "overlapped": overlapped,
                     "launched_at": launcher.launched_at, "buckets": len(plan.buckets),
                     # when, from the start of this rank's forward, each bucket's all-reduce started, the program
                     # (forward and backward) ended, and every all-reduce had finished
                     "timeline_ms": {"launch": [ms(t) for t in launcher.launch_times], "computed": ms(computed),
                                     "reduced": ms(reduced)}}
        params, state = self.update(grads, state, params)
        return np.float64(loss.item()), params, state

    # -- checkpoints
    def save_checkpoint(self, path, params, state, step: int, **kwargs):
        """Rank 0 writes `gr.train.save_checkpoint(path, params, state, step, **kwargs)` (atomically); every
        rank then waits at a barrier. Returns the path."""
        _, dist = _torch()
        error = None
        if self.rank == 0:
            try:
                loop.save_checkpoint(path, params, state, step, **kwargs)
            except Exception as e:  # noqa: BLE001 - told to the others through the barrier's all-reduce
                error = e
        self._exchange(0, error)  # a barrier that also says whether rank 0's write failed
        return path

    def load_checkpoint(self, path, *, broadcast: bool = False):
        """The checkpoint at `path` (a gr.train Checkpoint: .params, .state, .step, .losses, ...) on every rank.
        Read by every rank (a path every rank sees), or with `broadcast=True` read by rank 0 and sent to the
        others. The ranks then check that they hold the same checkpoint."""
        _, dist = _torch()
        rank, _ = _group_size(self.group)
        ck, error = None, None
        if rank == 0 or not broadcast:
            try:
                ck = loop.load_checkpoint(path)
            except Exception as e:  # noqa: BLE001 - every rank raises, naming the rank that could not read
                error = e
        self._exchange(0, error)
        if broadcast:
            box = [ck]
            _collective("broadcast of the checkpoint", dist.broadcast_object_list, box, src=0, group=self.group)
            ck = box[0]
        digest = _digest(tree_digest((ck.params, ck.state, ck.step)))
        try:
            self._agree("checkpoints", digest)
        except DistributedError as e:
            raise DistributedError(f"{e.detail}: {path} differs between ranks; on several machines it must be on a "
                                   "shared filesystem, or pass broadcast=True", op="distributed.load_checkpoint") from None
        return ck


__dir__ = api_dir(globals())  # dir() and tab completion offer __all__, not the imports (gradir.util.public)
