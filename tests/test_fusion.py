"""The fusion pass: IR in, kernel listing out; kernel counts of the fused ops forward and backward;
the makemore step's kernels and arena; and, over random programs, the invariants every fused
program keeps (each node in one kernel, kernels in dependency order, no two live buffers overlapping
in the arena) with the LLVM backend computing the NumPy backend's values."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

import gradir as gr
from gradir.core.ir import Graph
from gradir.passes import run_pipeline
from gradir.passes.fusion import LOOP, MATMUL, SCATTER, VIEWS, fuse
from tests.random_programs import make_inputs, programs, run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_core import mlp_batch, mlp_loss, mlp_params  # noqa: E402

SOFTMAX_IR = """
graph softmax {
  %0 = input name='x' : f32[4,8]
  %1 = max %0, axes=(1,), keepdims=True : f32[4,1]
  %2 = stop_gradient %1 : f32[4,1]
  %3 = broadcast_to %2, shape=(4, 8) : f32[4,8]
  %4 = subtract %0, %3 : f32[4,8]
  %5 = exp %4 : f32[4,8]
  %6 = sum %5, axes=(1,), keepdims=True : f32[4,1]
  %7 = broadcast_to %6, shape=(4, 8) : f32[4,8]
  %8 = divide %5, %7 : f32[4,8]
  return %8
}
"""


def test_softmax_ir_fuses_to_one_row_kernel_listing():
    program = fuse(Graph.parse(SOFTMAX_IR))
    assert str(program) == """\
fused program softmax: 1 kernels (1 loop), arena 0 B (peak 0 B)
k0 loop    for [4] x 3 passes over [8]  reads 128 B, writes 128 B
    %1 = max %0 : f32[4,1]  [row value after pass 1]
    %4 = subtract %0, %3 : f32[4,8]  [pass 2]
    %5 = exp %4 : f32[4,8]  [pass 2]
    %6 = sum %5 : f32[4,1]  [row value after pass 2]
    %8 = divide %5, %7 : f32[4,8]  [pass 3] -> stored"""


def _fused(fn, *args):
    return fuse(run_pipeline(gr.trace(fn, *args)))


RNG = np.random.default_rng(0)
X, W = RNG.standard_normal((8, 16)), RNG.standard_normal((8, 16))
GAIN, BIAS, Y = RNG.standard_normal(16), RNG.standard_normal(16), RNG.integers(0, 16, 8)


@pytest.mark.parametrize("name, fn, args, kernels", [
    ("softmax", gr.value_and_grad(lambda x, w: gr.sum(gr.nn.softmax(x, axis=-1) * w)), (X, W), 1),
    ("log_softmax", gr.value_and_grad(lambda x, w: gr.sum(gr.nn.log_softmax(x, axis=-1) * w)), (X, W), 1),
    ("layer_norm", gr.value_and_grad(lambda x, g, b, w: gr.sum(gr.nn.layer_norm(x, g, b) * w), argnums=(0, 1, 2)),
     (X, GAIN, BIAS, W), 1),
    # the class-index check, the row pass (max, log-sum-exp, probabilities), the picked log-probabilities, the one-hot
    ("cross_entropy", gr.value_and_grad(lambda x, y: gr.nn.cross_entropy(x, y)), (X, Y), 4),
])
def test_row_ops_forward_and_backward_fuse_to_few_kernels(name, fn, args, kernels):
    program = _fused(fn, *args)
    assert len(program.kernels) == kernels, str(program)
    assert all(k.kind == LOOP for k in program.kernels)
    row = max(program.kernels, key=lambda k: k.num_passes)
    assert row.outer == 1 and row.num_passes <= 4  # one kernel walks each row a few times, from cache


def test_makemore_step_kernels_and_arena():
    """The TEACHING makemore step at B=32/H=64 (embedding, linear, BatchNorm, tanh, linear, cross-entropy
    and their backward): its kernels by kind, and the arena that holds every intermediate."""
    p, (X_, Y_) = mlp_params(64), mlp_batch(32)
    step = gr.compile(gr.value_and_grad(mlp_loss), backend="llvm")
    step(p, X_, Y_)
    program = step.executable(p, X_, Y_).program
    kinds = [k.kind for k in program.kernels]
    assert (kinds.count(LOOP), kinds.count(MATMUL), kinds.count(SCATTER)) == (17, 6, 1), str(program)
    # matmuls: 2 forward (embedding @ W1, h @ W2) and 4 backward (2 per weight: its gradient and the input's);
    # the forward ones add their bias in the gemm (its output starts as the bias)
    epilogues = [k.epilogue for k in program.kernels if k.kind == MATMUL and k.epilogue is not None]
    assert len(epilogues) == 2 and all(e.op == "add" for e in epilogues)
    # the arena holds every stored intermediate, each at one offset for its whole life; it is exactly as big
    # as the most bytes alive during any one kernel (recounted here from the kernels' reads and writes)
    first, last = _lifetimes(program)
    peak = max(sum(v.nbytes for v in program.arena_offsets if first[v] <= i <= last[v]) for i in range(len(kinds)))
    assert program.arena_bytes == program.peak_bytes == peak == 40320


def _lifetimes(program):
    """Each arena buffer's first kernel (the one storing it) and last kernel (the last reading it)."""
    first = {v: next(i for i, k in enumerate(program.kernels) if v in k.stored) for v in program.arena_offsets}
    last = {v: max([first[v]] + [i for i, k in enumerate(program.kernels)
                                 if any(program.access[u].owner is v for u in k.inputs)]) for v in program.arena_offsets}
    return first, last


def _check_invariants(program) -> None:
    graph = program.graph
    covered = [n for k in program.kernels for n in k.nodes if n.graph is graph and any(n is m for m in graph.nodes)]
    assert len(covered) == len(set(covered))  # no node in two kernels
    computed = {n for n in covered}
    for n in graph.nodes:  # every node is computed by a kernel, or is a view, a constant or a literal
        assert n in computed or n.op in VIEWS or n.op == "const" or n in program.immediates, n
    done: set = set(graph.inputs) | {n for n in graph.nodes if n.op == "const"}
    for k in program.kernels:  # each kernel reads only what earlier kernels stored
        for u in k.inputs:
            owner = program.access[u].owner
            assert owner in done or owner.op == "const", (k.name, u)
        done |= set(k.outputs)
    # buffers alive in the same kernel never share arena bytes
    first, last = _lifetimes(program)
    items = list(program.arena_offsets.items())
    for i, (a, oa) in enumerate(items):
        for b, ob in items[i + 1:]:
            if first[a] <= last[b] and first[b] <= last[a]:
                assert oa + a.nbytes <= ob or ob + b.nbytes <= oa, (a, b)


@settings(max_examples=40, deadline=None)
@given(programs())
def test_random_programs_fuse_correctly(program):
    shapes, steps = program
    xs = make_inputs(shapes, seed=len(steps))
    f = gr.value_and_grad(lambda *a: run(steps, a, "gr"), argnums=tuple(range(len(xs))))
    graph = run_pipeline(gr.trace(f, *xs))
    _check_invariants(fuse(graph))
    want = gr.compile(f, backend="numpy")(*xs)
    got = gr.compile(f, backend="llvm")(*xs)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
