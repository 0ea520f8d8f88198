"""The Triton backend under Triton's CPU interpreter (TRITON_INTERPRET=1, set in conftest): every fused pattern
against the NumPy backend and PyTorch float64, both row forms, atomics, fallbacks, errors and the teaching view.
(Every op and the random-program property tests also run on it, through conftest's eager_backend fixture.)"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import triton_missing

import gradir as gr
from gradir.backends.triton.codegen import interpreting
from gradir.core.errors import ExecutionError, UnsupportedOpError
from gradir.ops.update import setitem
from gradir.util.pytree import tree_flatten

pytestmark = pytest.mark.skipif(triton_missing() is not None, reason=str(triton_missing()))
torch = pytest.importorskip("torch")
RNG = np.random.default_rng(0)
TOL = {np.float64: 1e-12, np.float32: 2e-5, gr.float16: 2e-2, gr.bfloat16: 6e-2}


def both(f, *args):
    """f compiled by the NumPy backend and the Triton backend, on the same arguments."""
    return gr.compile(f, backend="numpy")(*args), gr.compile(f, backend="triton")(*args)


def assert_close(got, want, rtol):
    for g, w in zip(tree_flatten(got)[0], tree_flatten(want)[0]):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=rtol)


def layer_norm_loss(p, x):
    return gr.sum(gr.nn.layer_norm(x, p["g"], p["b"]) * p["w"])


def gpt_block_loss(p, tokens, targets):
    """Embedding, LayerNorm, causal attention with softmax, GELU MLP, cross-entropy: every fused pattern."""
    T, C = tokens.shape[1], p["wte"].shape[1]
    x = gr.nn.embedding(p["wte"], tokens) + p["wpe"]
    h = gr.nn.layer_norm(x, p["ln_g"], p["ln_b"])
    q, k, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
    att = (q @ gr.swapaxes(k, -1, -2)) * (1.0 / np.sqrt(C))
    att = gr.where(np.tril(np.ones((T, T), bool)), att, -1e9)
    x = x + gr.nn.softmax(att, axis=-1) @ v
    x = x + gr.nn.gelu(gr.nn.layer_norm(x, p["ln_g"], p["ln_b"]) @ p["w1"] + p["b1"]) @ p["w2"]
    logits = x @ gr.transpose(p["wte"])
    return gr.nn.cross_entropy(gr.reshape(logits, (-1, logits.shape[-1])), gr.reshape(targets, (-1,)))


def gpt_params(dtype, V=11, T=6, C=8):
    r = np.random.default_rng(1)
    shapes = {"wte": (V, C), "wpe": (T, C), "ln_g": (C,), "ln_b": (C,), "wq": (C, C), "wk": (C, C), "wv": (C, C),
              "w1": (C, 4 * C), "b1": (4 * C,), "w2": (4 * C, C)}
    p = {k: (r.standard_normal(s) * 0.3).astype(dtype) for k, s in shapes.items()}
    p["ln_g"] += 1
    return p, r.integers(0, V, (2, T)), r.integers(0, V, (2, T))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, gr.float16, gr.bfloat16])
def test_gpt_block_value_and_grad_matches_the_numpy_backend(dtype):
    p, tokens, targets = gpt_params(dtype)
    want, got = both(gr.value_and_grad(gpt_block_loss), p, tokens, targets)
    assert_close(got, want, TOL[dtype])


def test_gpt_block_gradients_match_torch_float64():
    p, tokens, targets = gpt_params(np.float64)
    loss, grads = gr.compile(gr.value_and_grad(gpt_block_loss), backend="triton")(p, tokens, targets)
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
    T, C = tokens.shape[1], p["wte"].shape[1]
    ln = lambda x: torch.nn.functional.layer_norm(x, (C,), tp["ln_g"], tp["ln_b"])  # noqa: E731
    x = tp["wte"][torch.tensor(tokens)] + tp["wpe"]
    h = ln(x)
    att = (h @ tp["wq"]) @ (h @ tp["wk"]).transpose(-1, -2) / np.sqrt(C)
    att = torch.where(torch.tril(torch.ones(T, T, dtype=torch.bool)), att, torch.tensor(-1e9, dtype=torch.float64))
    x = x + torch.softmax(att, -1) @ (h @ tp["wv"])
    x = x + torch.nn.functional.gelu(ln(x) @ tp["w1"] + tp["b1"]) @ tp["w2"]
    ref = torch.nn.functional.cross_entropy((x @ tp["wte"].T).reshape(-1, p["wte"].shape[0]),
                                            torch.tensor(targets).reshape(-1))
    ref.backward()
    assert abs(float(loss) - ref.item()) < 1e-12
    for k in p:
        np.testing.assert_allclose(grads[k], tp[k].grad.numpy(), rtol=1e-10, atol=1e-12)


def test_long_rows_are_chunked_in_passes_and_agree(monkeypatch):
    # rows longer than MAX_ROW are walked in chunks once per pass; shrink MAX_ROW so small rows take that path
    from gradir.backends.triton import codegen

    monkeypatch.setattr(codegen, "MAX_ROW", 8)
    monkeypatch.setattr(codegen, "CHUNK", 4)
    p = {"g": 1 + RNG.standard_normal(21), "b": RNG.standard_normal(21), "w": RNG.standard_normal((5, 21))}
    x = RNG.standard_normal((5, 21))
    want, got = both(gr.value_and_grad(layer_norm_loss, argnums=(0, 1)), p, x)
    assert_close(got, want, 1e-12)
    f = gr.compile(lambda z, y: gr.nn.cross_entropy(z, y), backend="triton")
    z, y = RNG.standard_normal((4, 30)), RNG.integers(0, 30, 4)
    assert abs(f(z, y) - gr.compile(lambda z, y: gr.nn.cross_entropy(z, y), backend="numpy")(z, y)) < 1e-12
    assert "chunks of 4" in f.source(z, y)


def test_row_kernels_keep_the_row_in_registers_and_say_so():
    x = RNG.standard_normal((16, 8)).astype(np.float32)
    f = gr.compile(lambda x: gr.nn.softmax(x, axis=-1), backend="triton")
    assert_close(f(x), gr.compile(lambda x: gr.nn.softmax(x, axis=-1), backend="numpy")(x), 2e-6)
    compiled = f.executable(x)
    text = compiled.kernel_text(0)
    assert text.startswith("@triton.jit") and "16 rows of 8 (whole row in registers)" in text
    assert "tl.max(" in text and "tl.sum(" in text and "tl.exp(" in text
    assert "[triton]" in compiled.listing
    assert ("Triton interpreter" if interpreting() else "compiled Triton") in compiled.listing


def test_special_values_and_integer_ops_follow_numpy():
    x = np.array([0.0, -0.0, 1.5, -2.5, np.inf, -np.inf, np.nan, 3.0])
    y = np.array([2.0, -3.0, 0.5, 0.0, 1.0, 2.0, 1.0, -2.0])
    f = lambda x, y: (gr.maximum(x, y), gr.minimum(x, y), gr.remainder(x, y), gr.sign(x), gr.relu(x),  # noqa: E731
                      gr.tanh(x), gr.sigmoid(x), gr.expm1(x), x ** 2.0, gr.abs(y) ** x, x ** -3.0, x ** -2.0,
                      gr.max(x), gr.isfinite(x))
    want, got = both(f, x, y)
    for w, g in zip(want, got):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-14, atol=1e-300, equal_nan=True)
    i, j = np.array([7, -7, 3, 0, -1]), np.array([2, 2, -2, 5, 3])
    want, got = both(lambda i, j: (gr.remainder(i, j), gr.maximum(i, j), gr.sum(i > j), gr.argmax(i)), i, j)
    assert all(np.array_equal(w, g) for w, g in zip(want, got))


def test_accumulated_reductions_and_scatter_add_use_atomics():
    # the bias gradient sums over the batch inside the elementwise kernel (an atomic add per point); the
    # embedding backward adds rows at repeated indices (atomic adds into a zeroed buffer)
    table, idx = RNG.standard_normal((7, 3)), np.array([1, 4, 1, 1, 6])
    w = RNG.standard_normal((5, 3))
    f = gr.value_and_grad(lambda t, b: gr.sum(gr.tanh(gr.nn.embedding(t, idx) + b) * w), argnums=(0, 1))
    b = RNG.standard_normal(3)
    want, got = both(f, table, b)
    assert_close(got, want, 1e-12)
    src = gr.compile(f, backend="triton").source(table, b)
    assert "tl.atomic_add" in src and "index_add" in src


def test_kernels_not_rendered_run_on_the_reference_and_say_so(monkeypatch):
    # argmax over a chunked row is not rendered; index_update (the last write wins) always runs in order
    from gradir.backends.triton import codegen

    monkeypatch.setattr(codegen, "MAX_ROW", 4)
    x = RNG.standard_normal((3, 9))
    want, got = both(lambda x: gr.argmax(x, axis=-1), x)
    assert np.array_equal(got, want)
    listing = gr.compile(lambda x: gr.argmax(x, axis=-1), backend="triton").executable(x).listing
    assert "NumPy reference" in listing and "argmax" in listing

    def scatter(x, v):
        return setitem(x, (np.array([0, 2, 0]),), v)
    want, got = both(scatter, RNG.standard_normal((4, 2)), RNG.standard_normal((3, 2)))
    assert_close(got, want, 0)


def test_bad_indices_raise_the_located_gradir_error():
    table, idx = RNG.standard_normal((5, 3)), np.array([0, 4, 7])
    f = gr.compile(lambda t, i: gr.sum(gr.take(t, i, axis=0)), backend="triton")
    with pytest.raises(ExecutionError, match=r"take.*test_triton_backend.py"):
        f(table, idx)
    assert f(table, np.array([0, 4, -1])) == pytest.approx(table[[0, 4, -1]].sum(), rel=1e-14)
    g = gr.compile(lambda z, y: gr.nn.cross_entropy(z, y), backend="triton")
    with pytest.raises(ExecutionError, match=r"class index 9 is out of range for 4 classes"):
        g(RNG.standard_normal((3, 4)), np.array([1, 9, 2]))


def test_torch_tensors_stay_torch_and_numpy_stays_numpy():
    f = gr.compile(lambda x, w: gr.tanh(x @ w), backend="triton")
    x, w = RNG.standard_normal((4, 3)), RNG.standard_normal((3, 2))
    out = f(torch.tensor(x), torch.tensor(w))
    # results stay on the backend's device: the CPU under the interpreter, the GPU otherwise
    assert isinstance(out, torch.Tensor) and out.device.type == ("cpu" if interpreting() else "cuda")
    assert out.dtype == torch.float64
    np.testing.assert_allclose(out.cpu().numpy(), np.tanh(x @ w), rtol=1e-13)
    assert isinstance(f(x, w), np.ndarray)
    bf = f(torch.tensor(x, dtype=torch.bfloat16), torch.tensor(w, dtype=torch.bfloat16))
    assert bf.dtype == torch.bfloat16


def test_generated_modules_are_written_atomically_to_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADIR_CACHE_DIR", str(tmp_path))
    x = RNG.standard_normal((3, 5)) + 10.0  # a constant the other tests do not use: a new module
    f = gr.compile(lambda x: gr.exp(x) * 0.123456789, backend="triton")
    np.testing.assert_allclose(f(x), np.exp(x) * 0.123456789, rtol=1e-14)
    files = sorted(p.name for p in (tmp_path / "triton").iterdir())
    assert len(files) == 1 and files[0].startswith("gradir_triton_") and files[0].endswith(".py")


def test_missing_triton_or_gpu_is_one_clear_error(monkeypatch):
    import builtins

    from gradir.backends.triton import backend

    real_import = builtins.__import__

    def no_triton(name, *a, **k):
        if name == "triton":
            raise ImportError("No module named 'triton'", name="triton")
        return real_import(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_triton)
    with pytest.raises(UnsupportedOpError, match=r"pip install 'gradir\[triton\]'"):
        backend.require_triton()
    monkeypatch.setattr(builtins, "__import__", real_import)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UnsupportedOpError, match="TRITON_INTERPRET=1"):
        gr.compile(lambda x: x * 2.0, backend="triton")(np.ones(3))


@pytest.mark.parametrize("force", ["triton", "torch"])
@pytest.mark.parametrize("dtype", [np.float32, gr.float16, gr.bfloat16])
def test_matmuls_by_tl_dot_or_torch_with_the_bias_epilogue(monkeypatch, force, dtype):
    # both sides of the rule in gemm.py, forced: batched and transposed operands, a broadcast bias, and a
    # returned transpose written in place
    monkeypatch.setenv("GRADIR_TRITON_MATMUL", force)
    a, b = RNG.standard_normal((2, 20, 18)).astype(dtype), RNG.standard_normal((18, 33)).astype(dtype)
    c = RNG.standard_normal(33).astype(dtype)
    f = lambda a, b, c: (a @ b + c, gr.swapaxes(a, -1, -2) @ a, gr.transpose(a[0] @ b))  # noqa: E731
    want, got = both(f, a, b, c)
    assert_close(got, want, TOL[dtype] if dtype != np.float32 else 1e-5)
    listing = gr.compile(f, backend="triton").executable(a, b, c).listing
    assert ("triton tl.dot" in listing) == (force == "triton") and ("torch.matmul" in listing) == (force == "torch")


def test_the_matmul_rule_sends_big_and_float64_products_to_torch(monkeypatch):
    monkeypatch.delenv("GRADIR_TRITON_MATMUL", raising=False)
    small, big = RNG.standard_normal((8, 8)).astype(np.float32), RNG.standard_normal((300, 300)).astype(np.float32)
    listing = lambda x: gr.compile(lambda x: x @ x, backend="triton").executable(x).listing  # noqa: E731
    assert "tl.dot" in listing(small) and "torch.matmul" in listing(big)
    assert "torch.matmul" in listing(small.astype(np.float64))


def test_replayed_launches_on_fixed_buffers_give_fresh_results(monkeypatch):
    # from the second call the launch sequence is captured on fixed buffers (a CUDA graph on a GPU; forced here on
    # the CPU, where "replay" re-runs it): later calls copy in, replay, and return copies, never the fixed buffers
    monkeypatch.setenv("GRADIR_TRITON_CUDA_GRAPHS", "force")
    p, tokens, targets = gpt_params(np.float32)
    step = gr.compile(gr.value_and_grad(gpt_block_loss), backend="triton")
    reference = gr.compile(gr.value_and_grad(gpt_block_loss), backend="numpy")
    results = []
    for seed in range(3):
        q = {k: v + np.float32(0.01 * seed) for k, v in p.items()}
        got = step(q, tokens, targets)
        assert_close(got, reference(q, tokens, targets), 2e-5)
        results.append(got)
    assert step.executable(p, tokens, targets).replay is not None
    assert results[0][0] != results[2][0]  # the first result was not overwritten by later calls


def test_the_readme_shows_the_kernel_the_backend_generates():
    import importlib.util
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("triton_layer_norm", root / "docs" / "triton_layer_norm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = module.layer_norm_backward_kernel()
    assert "(whole row in registers)" in kernel and kernel.count("tl.atomic_add") == 2
    assert kernel in (root / "docs" / "triton.md").read_text()  # regenerate with python docs/triton_layer_norm.py


def test_autotuning_is_a_gpu_option_that_resets_accumulators(monkeypatch):
    # Triton's autotuner times configurations on a device, so under the interpreter the option changes nothing;
    # on a GPU each loop kernel gets the decorator, resetting the buffers its atomics add into between trials
    from gradir.backends.triton import codegen
    from gradir.passes.fusion import fuse

    monkeypatch.setenv("GRADIR_TRITON_AUTOTUNE", "1")
    assert codegen.autotuning() == (not interpreting())
    monkeypatch.setattr(codegen, "interpreting", lambda: False)
    b, w = RNG.standard_normal(3), RNG.standard_normal((5, 3))
    f = gr.grad(lambda b: gr.sum(gr.tanh(w + b)))  # db sums over the 5 rows: an accumulated (atomic) reduction
    fused = fuse(gr.compile(f, backend="numpy").graph(b))
    k = next(k for k in fused.kernels if k.accumulated)
    source = codegen.LoopSource(fused, k, "k", codegen.buffer_names(fused))
    zeroed = source.zeroed_params()
    assert len(zeroed) == 1 and f"reset_to_zero={zeroed!r}" in source.text
    assert source.text.startswith("@triton.autotune(configs=[triton.Config({}, num_warps=w) for w in (1, 2, 4, 8)]")


def test_identical_blocks_share_one_generated_function():
    # three residual blocks of the same shape: their elementwise kernels have the same code (only the buffers
    # differ), so one generated function runs them
    ws = [RNG.standard_normal((8, 8)) for _ in range(3)]

    def blocks(x):
        for w in ws:
            x = x + gr.tanh(x @ w) * 0.25
        return gr.sum(x)
    x = RNG.standard_normal((4, 8))
    want, got = both(gr.value_and_grad(blocks), x)
    assert_close(got, want, 1e-12)
    compiled = gr.compile(gr.value_and_grad(blocks), backend="triton").executable(x)
    functions = [compiled.function_of[k.index] for k in compiled.program.kernels if k.index in compiled.function_of]
    assert len(set(functions)) < len(functions) and "code]" in compiled.listing
    assert compiled.kernel_source.count("@triton.jit") == len(set(functions))


@pytest.mark.parametrize("target,flat_block", [(1, 1024), (2, 4), (3, 1024)])
def test_accumulations_sum_several_rows_per_program(monkeypatch, target, flat_block):
    # a kernel accumulating into memory gives each program several rows of the axes every accumulation sums over
    # (a GPU's bias gradient over a 32k-row batch): their sum in registers, one atomic add per lane after them.
    # Fewer programs than TARGET_PROGRAMS = 1024 force it here; FLAT_BLOCK = 4 splits a row into masked blocks.
    from gradir.backends.triton import codegen

    monkeypatch.setattr(codegen, "TARGET_PROGRAMS", target)
    monkeypatch.setattr(codegen, "MIN_LANES", 4)
    monkeypatch.setattr(codegen, "FLAT_BLOCK", flat_block)
    rng = np.random.default_rng(7)
    x, w, b = rng.standard_normal((6, 4, 5)), rng.standard_normal((6, 4, 5)), rng.standard_normal(5)
    bias_grad = gr.value_and_grad(lambda x, b: gr.sum(gr.tanh(x + b) * w), argnums=(0, 1))
    p = {"g": 1 + rng.standard_normal(21), "b": rng.standard_normal(21), "w": rng.standard_normal((3, 4, 21))}
    ln_grad = gr.value_and_grad(layer_norm_loss, argnums=(0, 1))  # rows in registers, gain/bias sums accumulated
    y = rng.standard_normal((7, 9, 13)).astype(np.float32)
    mean_square = gr.value_and_grad(lambda y: gr.mean(y * y))  # a total sum: accumulated, the divide after it
    ints = rng.integers(-5, 5, (12, 6))
    column_sums = lambda i: gr.sum(i, axis=0)  # noqa: E731
    for f, args, tol in [(bias_grad, (x, b), 1e-12), (ln_grad, (p, rng.standard_normal((3, 4, 21))), 1e-12),
                         (mean_square, (y,), 2e-6), (column_sums, (ints,), 0)]:
        want, got = both(f, *args)
        assert_close(got, want, tol)
        src = gr.compile(f, backend="triton").source(*args)
        assert "rows each" in src or "rows in" in src, src
    assert "rows in" in gr.compile(ln_grad, backend="triton").source(p, rng.standard_normal((3, 4, 21)))
