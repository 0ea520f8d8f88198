"""Chains (backends/llvm/chains.py): a convolution's unfold and product, and its input gradient's product and fold,
run image by image; a product's epilogue (the loop kernel after it) runs on each thread's rows of it. The same
code per piece, so results are bit for bit those of the kernels run one after the other, at every thread count
(also where a buffer between them is one image's worth, reused), and the NumPy backend's within rounding;
neighbours that read another image's columns, or other rows of the product, are not chained."""

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


def assert_bits_and_numpy(results, apart, step, args) -> None:
    """Each thread count's results bit for bit `apart` (the kernels run one after the other), and the NumPy
    backend's within rounding."""
    for got in results:
        for a, b in zip(got, apart):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(results[0], flat(gr.compile(step, backend="numpy")(*args))):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * max(1.0, float(np.abs(b).max())))


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
    monkeypatch.setattr(chains, "PRODUCT_EPILOGUES", False)
    unchained, plain = at_thread_counts(step, *args, counts=(1,))
    assert not plain.chains
    assert_bits_and_numpy(results, unchained[0], step, args)


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
    assert WINDOW in kinds and MATMUL in kinds and ("unfold", MATMUL) not in chained_kinds(ex)
    for a, b in zip(results[1], flat(gr.compile(step, backend="numpy")(*args))):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * max(1.0, float(np.abs(b).max())))


def mlp_block(w1, b1, w2, x):
    """A linear layer, GELU, a second linear layer with a residual add, then LayerNorm: each product is followed
    by a kernel reading it element for element (the GELU; the residual add and LayerNorm's rows)."""
    h = gr.nn.gelu(x @ w1 + b1)
    return gr.sum(gr.nn.layer_norm(h @ w2 + x, gr.ones(x.shape[-1]), gr.zeros(x.shape[-1])) ** 2)


def attention(q, k, v):
    """Batched products over (batch, heads), the first followed by a softmax over each row of scores."""
    return gr.sum((gr.nn.softmax(q @ gr.swapaxes(k, -1, -2), axis=-1) @ v) ** 2)


@pytest.mark.parametrize("f,shapes", [(mlp_block, [(12, 20), (20,), (20, 12), (24, 12)]),
                                      (attention, [(3, 2, 10, 8), (3, 2, 10, 8), (3, 2, 10, 8)])])
def test_product_epilogues_run_on_each_threads_rows_bit_for_bit(split_everything, monkeypatch, f, shapes):
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s) for s in shapes]
    step = gr.value_and_grad(f, argnums=tuple(range(len(args))))
    results, ex = at_thread_counts(step, *args)
    assert (MATMUL, "loop") in chained_kinds(ex) and "products with their epilogues" in ex.sharing
    monkeypatch.setattr(chains, "PRODUCT_EPILOGUES", False)
    apart, plain = at_thread_counts(step, *args, counts=(2,))
    assert (MATMUL, "loop") not in chained_kinds(plain)
    assert_bits_and_numpy(results, apart[0], step, args)


def transposed_read(a, b):
    c = a @ b
    return gr.sum((gr.tanh(c) + gr.transpose(c)) ** 2)


def grouped(a, b):
    return gr.sum((gr.relu(a @ b) @ gr.swapaxes(b, -1, -2)) ** 2)


@pytest.mark.parametrize("f,shapes", [(transposed_read, [(16, 9), (9, 16)]), (grouped, [(1, 2, 16, 36), (1, 2, 36, 64)])])
def test_a_kernel_reading_other_rows_of_a_thread_is_not_its_epilogue(split_everything, f, shapes):
    """tanh(C) + C^T reads row j of C for row i of its output; a grouped convolution's product (batch (1, 2))
    splits its rows within each group, so a thread's rows are not one run of C: both wait for every thread."""
    rng = np.random.default_rng(4)
    args = [rng.standard_normal(s) for s in shapes]
    step = gr.value_and_grad(f, argnums=(0, 1))
    results, ex = at_thread_counts(step, *args)
    product = next(k for k in ex.program.kernels if k.kind == MATMUL and k.nodes[0].inputs[0].shape == shapes[0])
    assert product.index not in ex.chains
    for got in results:
        for a, b in zip(got, flat(gr.compile(step, backend="numpy")(*args))):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * max(1.0, float(np.abs(b).max())))
