"""Image chains (backends/llvm/chains.py): a convolution's unfold and product, and its input gradient's product
and fold, run image by image. The same code per image, so results are bit for bit those of the kernels run one
after the other, at every thread count (also where a buffer between them is one image's worth, reused), and the
NumPy backend's within rounding; neighbours that read another image's columns are not chained."""

from __future__ import annotations

import numpy as np
import pytest

import gradir as gr
from gradir.backends import run
from gradir.backends.llvm import backend, chains, codegen
from gradir.backends.llvm.pool import pool_module
from gradir.passes.fusion import MATMUL, WINDOW
from tests.test_llvm_threads import at_thread_counts, flat

pytestmark = pytest.mark.skipif(pool_module() is None, reason="chains run split kernels (gradir's thread pool)")
RNG = np.random.default_rng(7)


def two_convolutions(w1, w2, x):
    """A ResNet-like pair: the second convolution's unfold reads a value nothing else reads (the memory planner
    may put the product's output on it)."""
    h = gr.nn.relu(gr.nn.conv2d(x, w1, padding=1))
    return gr.sum(gr.tanh(gr.nn.conv2d(h, w2, padding=1, stride=2)) ** 2)


def chained_kinds(ex, reused_only: bool = False) -> set[tuple[str, str]]:
    """(first, second) of each chain: the window op or the kernel kind; only chains reusing the buffer between
    them image after image (chains.reused_per_image) with `reused_only`."""
    kernels = ex.program.kernels
    kind = lambda k: k.nodes[0].op if k.kind == WINDOW else k.kind
    return {(kind(kernels[p]), kind(kernels[c])) for p, (c, _) in ex.chains.items()
            if not reused_only or chains.reused_per_image(ex.program, kernels[p], kernels[c])}


def test_a_chained_convolution_step_is_bit_for_bit_the_unchained_one(split_everything, monkeypatch):
    args = (RNG.standard_normal((6, 4, 3, 3)), RNG.standard_normal((6, 6, 3, 3)), RNG.standard_normal((8, 4, 10, 10)))
    step = gr.value_and_grad(two_convolutions, argnums=(0, 1, 2))
    results, ex = at_thread_counts(step, *args)
    assert {("unfold", MATMUL), (MATMUL, "fold")} <= chained_kinds(ex)
    assert "+k" in ex.module_ir.split("@gradir_run")[0]  # the chains' functions
    # the input gradient's columns go only from its product to its fold: one image's worth per thread is used
    # over and over
    assert (MATMUL, "fold") in chained_kinds(ex, reused_only=True)
    assert "* the buffer between them is one image's worth" in ex.sharing
    monkeypatch.setattr(codegen, "image_chains", lambda program, kernels: {})
    unchained, plain = at_thread_counts(step, *args, counts=(1,))
    assert not plain.chains
    for got in results:
        for a, b in zip(got, unchained[0]):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(results[0], flat(gr.compile(step, backend="numpy")(*args))):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * max(1.0, float(np.abs(b).max())))


def test_a_convolutions_columns_are_made_again_for_its_weight_gradient(split_everything, monkeypatch):
    """The weight gradient reads the columns the forward product read: passes.remat.columns gives it its own
    unfold, chained with it, so the forward's columns are the product's alone and no columns are kept from the
    forward to the backward (each chain reuses one image's worth). The arena shrinks; the results are bit for
    bit those of keeping them, and the two graphs agree on the NumPy interpreter."""
    args = (RNG.standard_normal((6, 4, 3, 3)), RNG.standard_normal((6, 6, 3, 3)), RNG.standard_normal((8, 4, 10, 10)))
    step = gr.value_and_grad(two_convolutions, argnums=(0, 1, 2))
    results, ex = at_thread_counts(step, *args)
    # each convolution's, again for its weight gradient, and the first's input gradient (passes.conv_input_grad)
    assert sum(n.op == "unfold" for n in ex.graph.nodes) == 5
    assert ("unfold", MATMUL) in chained_kinds(ex, reused_only=True)
    monkeypatch.setattr(backend, "recompute_columns", lambda graph, order: (graph, order))
    kept_results, kept = at_thread_counts(step, *args)
    assert sum(n.op == "unfold" for n in kept.graph.nodes) == 3
    assert ("unfold", MATMUL) not in chained_kinds(kept, reused_only=True)  # the columns are read again later
    assert kept.program.arena_bytes > ex.program.arena_bytes
    for got, want in zip(results, kept_results):
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(run(ex.graph, list(args)), run(kept.graph, list(args))):
        np.testing.assert_array_equal(a, b)


def test_every_unfold_runs_image_by_image_with_its_product(split_everything):
    """A window or product kernel's operands stay alive through the next kernel (passes.fusion), so the memory
    planner never puts the next kernel's output on them (the second product's output (8, 6, 25) would fit on the
    ReLU output its unfold reads, and chained, image i's output would overwrite image i + 1's input): every unfold
    is chained with its product, no chain's second kernel writes where its first reads, and the results are
    the NumPy backend's."""
    def f(w1, w2, x):
        h = gr.nn.relu(gr.nn.conv2d(x, w1, padding=1))
        return gr.sum(gr.tanh(gr.nn.conv2d(h, w2, padding=1)) ** 2)
    args = (RNG.standard_normal((6, 3, 3, 3)), RNG.standard_normal((6, 6, 3, 3)), RNG.standard_normal((8, 3, 5, 5)))
    results, ex = at_thread_counts(gr.value_and_grad(f, argnums=(0, 1, 2)), *args)
    program = ex.program
    unfolds = {k.index for k in program.kernels if k.kind == WINDOW and k.nodes[0].op == "unfold"}
    assert len(unfolds) == 6 and unfolds <= set(ex.chains)  # forward, weight gradients, input gradients
    for p, (c, _) in ex.chains.items():
        assert not any(chains.overlap(program, program.access[v].owner, program.access[u].owner)
                       for v in program.kernels[c].outputs for u in program.kernels[p].inputs)
    for got in results:
        for a, b in zip(got, flat(gr.compile(gr.value_and_grad(f, argnums=(0, 1, 2)), backend="numpy")(*args))):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * max(1.0, float(np.abs(b).max())))


def test_a_product_reading_other_images_columns_is_not_chained(split_everything):
    """Columns (N, C*9, H*W) viewed with the channels first and batched over channels (N == C): the product for
    index i reads every image's columns, so it must wait for the whole unfold."""
    def f(w, x):
        cols = gr.reshape(gr.nn.unfold(x, 3, padding=1), (4, 4, 9, 36))
        return gr.sum(gr.tanh(gr.transpose(cols, (1, 0, 2, 3)) @ w) ** 2)
    args = (RNG.standard_normal((36, 5)), RNG.standard_normal((4, 4, 6, 6)))
    step = gr.value_and_grad(f, argnums=(0, 1))
    results, ex = at_thread_counts(step, *args)
    kinds = [k.kind for k in ex.program.kernels]
    assert WINDOW in kinds and MATMUL in kinds and not ex.chains
    for a, b in zip(results[1], flat(gr.compile(step, backend="numpy")(*args))):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * max(1.0, float(np.abs(b).max())))
