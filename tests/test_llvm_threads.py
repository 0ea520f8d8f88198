"""The LLVM backend on several threads: big fused loops and matrix products shared by one pool (pool.py), with
BLAS held at one thread meanwhile; results equal to the NumPy backend's at every thread count, and bit for bit
the same at any count where gradir computes the elements (threads split only independent iterations); small
kernels on one thread, GRADIR_NUM_THREADS."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import threadpoolctl
from hypothesis import HealthCheck, given, settings

import gradir as gr
from gradir.backends.llvm import jit
from gradir.backends.llvm.pool import pool_module
from tests.random_programs import make_inputs, programs
from tests.random_programs import run as run_program

pytestmark = pytest.mark.skipif(pool_module() is None, reason="gradir's thread pool needs Linux")
RNG = np.random.default_rng(0)
SPLIT_SEEN: list[int] = []  # per random program, how many of its functions ran on a team


def at_thread_counts(fn, *args, counts=(1, 2, 3)):
    """fn compiled once by LLVM, run at each thread count: (results per count, the compiled program)."""
    c = gr.compile(fn)
    ex = c.executable(*args)
    results = []
    for t in counts:
        ex.threads = t
        results.append(flat(c(*args)))
    return results, ex


def flat(tree) -> list[np.ndarray]:
    if isinstance(tree, (tuple, list)):
        return [a for t in tree for a in flat(t)]
    if isinstance(tree, dict):
        return [a for k in sorted(tree) for a in flat(tree[k])]
    return [np.asarray(tree)]


def assert_same_at_every_count(results, ex) -> None:
    """Bit for bit where gradir computes every element (its loops); where a split function calls BLAS, within
    rounding: OpenBLAS may pick another kernel for a row-split piece, a smaller product (which one depends on
    the CPU), and another kernel sums in another order."""
    first = results[0]
    rows_split = any("gradir_blas_" in line and "call" in line for line in ex.module_ir.split("define")
                     if ".body" in line.split("(")[0])
    for other in results[1:]:
        assert len(other) == len(first)
        for a, b in zip(first, other):
            assert a.dtype == b.dtype and a.shape == b.shape
            if rows_split and a.dtype.kind == "f":
                rtol = 1e-5 if a.dtype.itemsize <= 4 else 1e-12
                np.testing.assert_allclose(b, a, rtol=rtol, atol=rtol * float(np.abs(a).max(initial=0)))
            else:
                np.testing.assert_array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8))


def split_functions(ex) -> int:
    """How many of the program's functions run on a team."""
    return sum("call" in line and "gradir_parallel" in line for line in ex.module_ir.splitlines())


def mlp_step(w1, b1, w2, b2, x, y):
    h = gr.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    return gr.nn.cross_entropy(logits, y)


def test_mlp_step_is_the_same_at_every_thread_count_and_its_big_kernels_split():
    """makemore-like: gemms with bias epilogues and transposed weight gradients (split by rows or columns),
    tanh and its backward, a softmax cross-entropy over rows (split by rows), bias gradients accumulated
    over the batch (split along the features, each one summed in its serial order)."""
    B, C, H, V = 512, 96, 256, 64
    args = (RNG.standard_normal((C, H)).astype(np.float32) * 0.1, RNG.standard_normal(H).astype(np.float32),
            RNG.standard_normal((H, V)).astype(np.float32) * 0.1, RNG.standard_normal(V).astype(np.float32),
            RNG.standard_normal((B, C)).astype(np.float32), RNG.integers(0, V, B))
    results, ex = at_thread_counts(gr.value_and_grad(mlp_step, argnums=(0, 1, 2, 3)), *args)
    assert_same_at_every_count(results, ex)
    assert split_functions(ex) >= 4
    want = gr.compile(gr.value_and_grad(mlp_step, argnums=(0, 1, 2, 3)), backend="numpy")(*args)
    for got, ref in zip(results[1], flat(want)):
        np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-5)


def attention(wq, x):
    q = x @ wq                                             # (B, T, C)
    heads = q.reshape(4, 64, 4, 32).transpose(0, 2, 1, 3)  # (B, h, T, d)
    att = gr.nn.softmax(heads @ heads.transpose(0, 1, 3, 2) * 0.2, axis=-1)
    return gr.sum(gr.tanh(att @ heads))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batched_products_and_row_softmax_are_the_same_at_every_thread_count(dtype):
    """GPT-block-like: products batched over (batch, heads), split along the batch; softmax rows."""
    args = (RNG.standard_normal((128, 128)).astype(dtype) * 0.1, RNG.standard_normal((4, 64, 128)).astype(dtype))
    results, ex = at_thread_counts(gr.value_and_grad(attention), *args)
    assert_same_at_every_count(results, ex)
    assert split_functions(ex) >= 3


def test_a_linear_layer_on_a_batch_splits_its_gemm_and_bias_fill_by_rows():
    """(B, T, C) @ W^T + b: one gemm whose rows are the batch and time axes taken together; each thread starts
    its rows of the output as the bias (the epilogue), over the output's leading axes."""
    x, w, b = (RNG.standard_normal((8, 64, 128)).astype(np.float32), RNG.standard_normal((384, 128)).astype(np.float32),
               RNG.standard_normal(384).astype(np.float32))
    f = gr.value_and_grad(lambda w, b, x: gr.sum(gr.tanh(gr.nn.linear(x, w, b))), argnums=(0, 1))
    results, ex = at_thread_counts(f, w, b, x)
    assert_same_at_every_count(results, ex)
    assert "[epilogue: the product's buffer starts as the bias]" in ex.listing
    assert split_functions(ex) >= 2
    np.testing.assert_allclose(results[1][0], np.tanh(x @ w.T + b).sum(), rtol=1e-4)


@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)])
def test_big_matmuls_with_transposes_split_by_rows(ta, tb):
    """A gemm split by rows (pieces big enough to take OpenBLAS's own path), with every transpose flag; M not
    a multiple of the grain; a long elementwise loop cut at whole grains."""
    a = RNG.standard_normal((1301, 203)).astype(np.float32)
    w = RNG.standard_normal((203, 150)).astype(np.float32)

    def f(a, w):
        a = a if not ta else gr.transpose(gr.transpose(a) * 1.0)
        w = w if not tb else gr.transpose(gr.transpose(w) * 1.0)
        return gr.tanh(a @ w) * 2.0, gr.sum(gr.exp(-a * a), axis=-1)
    results, ex = at_thread_counts(f, a, w)
    assert_same_at_every_count(results, ex)
    assert split_functions(ex) >= 1
    np.testing.assert_allclose(results[0][0], np.tanh(a @ w) * 2.0, rtol=2e-5, atol=2e-5)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # (it is constant)
@given(programs(max_steps=7))
def test_random_programs_and_their_gradients_are_the_same_at_every_thread_count(split_everything, program):
    shapes, steps = program
    xs = make_inputs(shapes, seed=len(steps))
    f = gr.value_and_grad(lambda *a: run_program(steps, a, "gr"), argnums=tuple(range(len(shapes))))
    results, ex = at_thread_counts(f, *xs, counts=(1, 2, 5))
    assert_same_at_every_count(results, ex)
    SPLIT_SEEN.append(split_functions(ex))
    want = flat(gr.compile(f, backend="numpy")(*xs))
    for got, ref in zip(results[1], want):
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_the_random_programs_did_split_kernels():
    """(runs after the property test: many of its programs had kernels to split, so it tested partitions)"""
    assert SPLIT_SEEN and sum(n > 0 for n in SPLIT_SEEN) >= len(SPLIT_SEEN) // 4


def test_a_split_gather_still_raises_the_located_error(split_everything):
    table = RNG.standard_normal((10, 300))
    f = gr.compile(lambda t, i: gr.sum(gr.tanh(t[i]), axis=-1))
    ex = f.executable(table, np.arange(40) % 10)
    ex.threads = 2
    assert split_functions(ex) >= 1
    np.testing.assert_allclose(f(table, np.arange(40) % 10), np.tanh(table[np.arange(40) % 10]).sum(-1))
    with pytest.raises(gr.GradirError, match="index"):
        f(table, np.arange(40))


def test_programs_called_from_several_python_threads_at_once_stay_exact():
    """Two programs running at once from two Python threads: one has the pool, the other's split kernels run
    on its own thread while the pool is busy; both give their one-thread results."""
    xs = [RNG.standard_normal((256, 512)) for _ in range(2)]
    fs = [gr.compile(lambda x, s=s: gr.sum(gr.tanh(x * s) @ gr.transpose(x), axis=0)) for s in (0.5, 2.0)]
    exes = [f.executable(x) for f, x in zip(fs, xs)]
    want = []
    for f, ex, x in zip(fs, exes, xs):
        ex.threads = 1
        want.append(f(x))
        ex.threads = 2
    got: list[list] = [[], []]

    def run(i):
        for _ in range(20):
            got[i].append(fs[i](xs[i]))
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(split_functions(ex) >= 1 for ex in exes)
    for i in range(2):
        assert len(got[i]) == 20 and all(np.array_equal(g, want[i]) for g in got[i])


def test_small_kernels_stay_on_one_thread():
    """Below the work thresholds no kernel pays for a team (and the IR does not mention one)."""
    x, w = RNG.standard_normal((32, 27)), RNG.standard_normal((27, 20))
    ex = gr.compile(lambda x, w: gr.sum(gr.tanh(x @ w))).executable(x, w)
    assert split_functions(ex) == 0


def test_thread_count_comes_from_the_environment_or_the_cores(monkeypatch):
    x = RNG.standard_normal((8, 8))
    monkeypatch.setenv("GRADIR_NUM_THREADS", "3")
    assert gr.compile(lambda x: gr.tanh(x)).executable(x).threads == 3
    monkeypatch.delenv("GRADIR_NUM_THREADS")
    assert gr.compile(lambda x: gr.tanh(x) + 1.0).executable(x).threads == len(os.sched_getaffinity(0))


def test_blas_runs_on_one_thread_inside_and_its_setting_is_restored():
    """While a compiled program runs, OpenBLAS starts no threads of its own (gradir's team partitions the
    products); afterwards its thread count is what it was."""
    before = [lib.num_threads for lib in threadpoolctl.ThreadpoolController().lib_controllers]
    seen = []

    def spy(x):
        seen.append([lib.num_threads for lib in threadpoolctl.ThreadpoolController().lib_controllers
                     if lib.internal_api == "openblas"])
        return x
    a = RNG.standard_normal((128, 128))
    f = gr.compile(lambda a: gr.sum(gr.tanh(a @ a)))
    f(a)
    jit.BLAS_SERIAL.enter()
    spy(None)
    jit.BLAS_SERIAL.leave()
    assert seen and all(n == 1 for n in seen[0])
    assert [lib.num_threads for lib in threadpoolctl.ThreadpoolController().lib_controllers] == before


def against_numpy(fn, *args, counts=(1, 2), rtol=1e-5, atol=1e-6):
    """fn on LLVM at each thread count against the NumPy backend (not only against itself: a partition that is
    wrong the same way at every count passes a bitwise comparison)."""
    results, ex = at_thread_counts(fn, *args, counts=counts)
    want = flat(gr.compile(fn, backend="numpy")(*args))
    for got in results:
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * max(1.0, float(np.abs(w).max(initial=0))))
    return ex


@pytest.mark.parametrize("split", ["defaults", "everything"])
def test_a_batched_product_with_a_broadcast_weight_and_a_residual_epilogue_matches_numpy(split, request):
    """What from_torch makes of a Llama projection plus its residual: (B, T, C) @ W^T broadcast over the batch,
    C starting as the residual (the epilogue). Split over the batch, each thread once filled the wrong rows with
    the residual (every gradient of the example k Llama step was wrong)."""
    if split == "everything":
        request.getfixturevalue("split_everything")
    x, r = RNG.standard_normal((32, 8, 64)).astype(np.float32), RNG.standard_normal((32, 8, 64)).astype(np.float32)
    w = RNG.standard_normal((64, 64)).astype(np.float32) * 0.1

    def f(w, x, r):
        return gr.sum(gr.tanh(r + x @ gr.broadcast_to(gr.transpose(w), (32, 64, 64))) ** 2)
    # float32: a product rounded one ulp differently (4.8e-7 at |z| ~ 4) moves d tanh(z)^2 by up to ~1e-6
    ex = against_numpy(gr.value_and_grad(f, argnums=(0, 1, 2)), w, x, r, atol=1e-5)
    assert "epilogue" in ex.listing and split_functions(ex) >= 1


@pytest.mark.parametrize("split", ["defaults", "everything"])
def test_convolution_windows_split_by_image_are_the_same_at_every_count_and_match_numpy(split, request):
    """unfold (im2col) and fold (col2im, its gradient) each image on its own thread: bit for bit the same at
    every count (an image's windows are computed by the same loops), and the NumPy backend's values."""
    if split == "everything":
        request.getfixturevalue("split_everything")
    x, w = RNG.standard_normal((8, 4, 34, 34)), RNG.standard_normal((5, 4, 3, 3))  # windows of 83k elements

    def f(x, w):
        return gr.sum(gr.tanh(gr.nn.conv2d(x, w, padding=1, stride=2)) ** 2)
    step = gr.value_and_grad(f, argnums=(0, 1))
    results, ex = at_thread_counts(step, x, w, counts=(1, 2, 3))
    assert_same_at_every_count(results, ex)
    assert "im2col" in ex.listing and "col2im" in ex.listing and split_functions(ex) >= 2
    for got, want in zip(results[1], flat(gr.compile(step, backend="numpy")(x, w))):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_tiny_transformers_models_match_numpy_with_every_kernel_split(split_everything):
    """Llama (GQA, rotary, RMSNorm) and a ResNet step at 1 and 2 threads, every splittable kernel split."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=27, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=8, use_cache=False)).eval()
    resnet = transformers.ResNetForImageClassification(transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic", num_labels=3)).eval()
    for model, x, out in ((llama, torch.randint(0, 27, (4, 8)), "logits"), (resnet, torch.randn(2, 3, 16, 16), "logits")):
        f, params = gr.from_torch(model, x)
        step = gr.value_and_grad(lambda p, x, f=f, out=out: gr.sum(gr.tanh(f(p, x)[out])))
        ex = against_numpy(step, params, x.numpy(), rtol=1e-4, atol=1e-5)
        assert split_functions(ex) >= 3


def test_a_split_product_whose_output_is_reshaped_before_its_epilogue_matches_numpy(split_everything):
    """wav2vec2's positional convolution: a (1, 2)-batched product, reshaped to (1, 32, 1, 40), then a bias
    added as its epilogue. Split by rows, each thread filled out's axis 2 (size 1) over its rows."""
    a, b = RNG.standard_normal((1, 2, 16, 64)), RNG.standard_normal((1, 2, 64, 40))
    r = RNG.standard_normal((1, 32, 1, 40))

    def f(a, b, r):
        return gr.sum(gr.tanh(gr.reshape(a @ b, (1, 32, 1, 40)) + r))
    ex = against_numpy(gr.value_and_grad(f, argnums=(0, 1, 2)), a, b, r, rtol=1e-12, atol=1e-13)
    assert "epilogue" in ex.listing and split_functions(ex) >= 1


@pytest.mark.parametrize("residual_layout", ["row-major", "batch axes swapped"])
def test_a_split_linear_layer_on_a_3d_input_fills_its_epilogue_right(split_everything, residual_layout):
    """x (B, T, C) @ W is one (B*T, C) @ (C, N) product written into out (B, T, N). Its epilogue (C starts as the
    residual) is filled over the product's rows: through the residual's strides when a view can say them (row-major),
    else by unravelling each row into (B, T) (a residual stored with T before B)."""
    x, w = RNG.standard_normal((8, 16, 24)), RNG.standard_normal((24, 40))
    r = RNG.standard_normal((8, 16, 40) if residual_layout == "row-major" else (16, 8, 40))

    def f(x, w, r):
        res = r if residual_layout == "row-major" else gr.transpose(r, (1, 0, 2))
        return gr.sum(gr.tanh(x @ w + res))
    ex = against_numpy(gr.value_and_grad(f, argnums=(0, 1, 2)), x, w, r, rtol=1e-12, atol=1e-13)
    assert "epilogue" in ex.listing and split_functions(ex) >= 1
