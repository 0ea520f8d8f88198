"""The LLVM backend against the NumPy reference: dtypes, fallbacks, schedules and recompute plans;
its memory (one persistent arena, nothing else allocated per call), its on-disk cache, its errors,
and the teaching view (kernel listing, LLVM IR, assembly)."""

from __future__ import annotations

import os
import tracemalloc

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings

import gradir as gr
from gradir.backends.llvm import backend as llvm_backend
from gradir.backends.llvm import kernels as llvm_kernels
from gradir.backends.llvm.codegen import ModuleBuilder
from gradir.core.errors import ExecutionError
from tests.random_programs import make_inputs, programs
from tests.random_programs import run as run_program

RNG = np.random.default_rng(0)


def both(fn, *args, **options):
    """fn compiled by the NumPy backend and by LLVM, on args: (numpy results, llvm results, the llvm Compiled)."""
    ref = gr.compile(fn, backend="numpy", **options)(*args)
    c = gr.compile(fn, backend="llvm", **options)
    return ref, c(*args), c


def assert_same(got, want, rtol=1e-12, atol=0.0):
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        wide = np.complex128 if np.iscomplexobj(w) else np.float64
        np.testing.assert_allclose(g.astype(wide), w.astype(wide), rtol=rtol, atol=atol)


def test_compile_defaults_to_llvm_and_numpy_is_one_keyword_away():
    f = lambda x: gr.tanh(x) * 2.0
    assert gr.compile(f).backend == "llvm" and gr.compile(f, backend="numpy").backend == "numpy"


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-14), (np.float32, 1e-6), (np.float16, 2e-3),
                                         (ml_dtypes.bfloat16, 2e-2)])
def test_float_dtypes_match_numpy(dtype, rtol):
    """float16/bfloat16 compute in float32 and round after every op, as NumPy does: results agree to
    the format's precision (an op's rounding may differ in the last bit)."""
    x = RNG.standard_normal((6, 5)).astype(dtype)
    w = RNG.standard_normal(5).astype(dtype)
    f = lambda x, w: (gr.sum(gr.exp(x * w) - gr.tanh(x), axis=0), gr.max(x, axis=-1), gr.nn.softmax(x, axis=-1))
    ref, got, _ = both(f, x, w)
    assert_same(got, ref, rtol=rtol, atol=rtol)


def test_integer_and_bool_ops_match_numpy():
    a = RNG.integers(-20, 20, (4, 6)).astype(np.int32)
    b = RNG.integers(1, 7, (4, 6)).astype(np.int32)
    f = lambda a, b: (a % b, (a - 3) % -b, gr.maximum(a, b) * 2, gr.sum(a < b, axis=1), gr.abs(a), gr.sign(a),
                      gr.logical_and(a > 0, b > 2), gr.where(a > b, a, b), gr.argmax(a, axis=1), gr.min(a, axis=1),
                      a.astype(np.float32) / 3.0, gr.sum(a.astype(np.int64)))
    ref, got, _ = both(f, a, b)
    for g, w in zip(got, ref):
        np.testing.assert_array_equal(g, w)


def test_special_values_follow_numpy():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310, -5.0, 3.0])
    f = lambda x: (gr.exp(x), gr.log(gr.abs(x)), gr.tanh(x), gr.sqrt(x), x % 2.0, gr.maximum(x, 0.0), gr.sign(x),
                   x.astype(np.int64) * 0 + gr.relu(x).astype(np.int64) * 0)
    ref, got, _ = both(f, x)
    for g, w in zip(got, ref):
        np.testing.assert_array_equal(np.signbit(g[~np.isnan(w)]), np.signbit(w[~np.isnan(w)]))
        np.testing.assert_allclose(g, w, rtol=1e-15)


@pytest.mark.parametrize("policy", ["engine", "memory"])
@pytest.mark.parametrize("remat", [None, "uniform", "selective", "mincut"])
def test_every_schedule_and_recompute_plan(policy, remat):
    x, w1, w2 = RNG.standard_normal((8, 5)), RNG.standard_normal((5, 6)), RNG.standard_normal((6, 3))

    def loss(w1, w2, x):
        h = x
        for w in (w1, w2):
            h = gr.tanh(h @ w)
        return gr.sum(gr.nn.log_softmax(h, axis=-1))
    ref, got, _ = both(gr.value_and_grad(loss, argnums=(0, 1)), w1, w2, x, policy=policy, remat=remat)
    assert_same(got[0], ref[0])
    assert_same(tuple(got[1]), tuple(ref[1]))


def test_ops_no_kernel_lowers_fall_back_to_numpy_and_say_so():
    x = RNG.standard_normal((3, 4))
    f = lambda x: gr.tanh(gr.concatenate([x, x * 2.0], axis=0)) + gr.argmax(x, axis=0)
    ref, got, c = both(f, x)
    assert_same(got, ref)
    listing = c.source(x)
    assert "numpy   NumPy fallback (argmax over a non-trailing axis is not lowered)" in listing
    assert listing.count("NumPy fallback") == 1  # the concatenate is a loop
    z = np.exp(1j * RNG.standard_normal(3))  # complex values: every kernel falls back
    ref, got, c = both(lambda z: z * z + 1.0, z)
    assert_same(got, ref)
    assert "dtype c128 is not lowered" in c.source(z)


def test_arena_is_planned_persistent_and_the_only_memory_a_call_uses():
    """A call allocates its outputs and nothing else: every intermediate lives in the arena, which
    was sized by the fused program's memory plan and is reused by every call."""
    x, w = RNG.standard_normal((256, 64)), RNG.standard_normal((64, 64))
    f = gr.compile(gr.value_and_grad(lambda w, x: gr.sum(gr.tanh(x @ w) * gr.exp(x @ w))), backend="llvm")
    f(w, x)
    compiled = f.executable(w, x)
    assert compiled.arena.nbytes == compiled.program.arena_bytes >= 2 * 256 * 64 * 8  # x @ w and tanh's input
    address = compiled.arena.ctypes.data
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    out = f(w, x)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename") if s.size_diff > 0)
    output_bytes = np.asarray(out[0]).nbytes + out[1].nbytes
    assert grown < output_bytes + 16 * 1024, (grown, output_bytes)  # outputs + a few small Python objects
    assert compiled.arena.ctypes.data == address


def test_disk_cache_is_written_reused_and_rebuilt_when_corrupt(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADIR_CACHE_DIR", str(tmp_path))
    f = lambda x: gr.sin(x) * 3.0
    x = RNG.standard_normal(7)
    first = gr.compile(f, backend="llvm")
    assert_same(first(x), np.sin(x) * 3.0, rtol=1e-15)
    entries = list(tmp_path.glob("*.o"))
    assert len(entries) == 1 and first.executable(x).origin == "compiled"
    again = gr.compile(f, backend="llvm")
    assert_same(again(x), np.sin(x) * 3.0, rtol=1e-15)
    assert again.executable(x).origin == "cache"
    entries[0].write_bytes(b"not an object file")
    rebuilt = gr.compile(f, backend="llvm")
    assert_same(rebuilt(x), np.sin(x) * 3.0, rtol=1e-15)
    assert rebuilt.executable(x).origin == "compiled"
    assert entries[0].read_bytes() != b"not an object file"  # the entry was written anew
    assert not list(tmp_path.glob("*.tmp*"))  # atomic writes leave nothing half-written behind
    monkeypatch.setenv("GRADIR_CACHE_DIR", "off")
    assert llvm_backend.cache_dir() is None


def test_a_cached_program_is_found_by_its_structure_before_any_code_is_written(tmp_path, monkeypatch):
    """A warm start takes the module from the cache without emitting its IR; the IR it shows is the same as a
    cold compile's; another constant (read from memory) shares the entry; other code or a changed emitter
    tunable does not."""
    monkeypatch.setenv("GRADIR_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((64, 32)), rng.standard_normal((32, 16))
    step = lambda c: gr.compile(gr.value_and_grad(lambda w, x: gr.sum(gr.tanh(x @ w) * c)), backend="llvm")
    cold = step(2.0).executable(w, x)
    assert cold.origin == "compiled"
    emitted = []
    monkeypatch.setattr(llvm_backend.ModuleBuilder, "emit", lambda mb: emitted.append(mb) or pytest.fail("emitted"))
    for c in (2.0, 5.0):  # the constant is data, not code
        warm = step(c)
        assert warm.executable(w, x).origin == "cache" and not emitted
        value, grad = warm(w, x)
        t = np.tanh(x @ w)
        assert_same(value, c * t.sum(), rtol=1e-13)
        np.testing.assert_allclose(grad, x.T @ (c * (1 - t * t)), rtol=1e-10, atol=1e-12)
    monkeypatch.undo()
    monkeypatch.setenv("GRADIR_CACHE_DIR", str(tmp_path))
    assert warm.executable(w, x).module_ir == cold.module_ir  # written on demand, as a cold compile wrote it
    # so are the optimized IR and the assembly (the cache keeps object code only: the IR is compiled again to show)
    assert warm.executable(w, x).optimized_ir == cold.optimized_ir and "define" in cold.optimized_ir
    assert warm.executable(w, x).assembly == cold.assembly
    other = gr.compile(gr.value_and_grad(lambda w, x: gr.sum(gr.sin(x @ w))), backend="llvm")
    assert other.executable(w, x).origin == "compiled"
    monkeypatch.setattr(llvm_kernels, "UNROLLED_INSIDE", llvm_kernels.UNROLLED_INSIDE + 1)
    assert step(2.0).executable(w, x).origin == "compiled"
    # a structure without an exact spelling (an attribute sharing._canon cannot spell) is cached by its IR text
    monkeypatch.setattr(llvm_backend.ModuleBuilder, "structure", lambda mb: None)
    assert [step(3.0).executable(w, x).origin for _ in range(2)] == ["compiled", "cache"]


def test_a_large_arena_is_populated_zeros_and_runs_as_a_small_one():
    """Arenas from POPULATE_BYTES on are mapped with their pages in (MAP_POPULATE): zeros, writable, and a
    program planned into one computes what the NumPy backend does."""
    big = llvm_backend.populated_zeros(llvm_backend.POPULATE_BYTES + 3)
    assert big.nbytes == llvm_backend.POPULATE_BYTES + 3 and not big.any()
    big[-1] = 7
    assert big[-1] == 7 and not big[:-1].any()
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((512, 512)), rng.standard_normal((512, 512)) / 20
    f = lambda w, x: gr.sum(gr.tanh(x @ w) * gr.exp(gr.sin(x @ w)))
    (value, grad), (got_value, got_grad), c = both(gr.value_and_grad(f), w, x)
    assert c.executable(w, x).arena.nbytes >= llvm_backend.POPULATE_BYTES
    assert_same(got_value, value, rtol=1e-11)
    assert_same(got_grad, grad, rtol=1e-11, atol=1e-12 * np.abs(grad).max())  # (products summed in another order)


def test_bad_indices_raise_the_located_gradir_error():
    table, idx = RNG.standard_normal((5, 3)), np.array([0, 4, 7])
    f = gr.compile(lambda t, i: gr.sum(gr.take(t, i, axis=0)), backend="llvm")
    with pytest.raises(ExecutionError, match=r"take.*test_llvm_backend.py"):
        f(table, idx)
    logits = RNG.standard_normal((3, 4))
    g = gr.compile(lambda z, y: gr.nn.cross_entropy(z, y), backend="llvm")
    with pytest.raises(ExecutionError, match=r"class index 9 is out of range for 4 classes"):
        g(logits, np.array([1, 9, 2]))
    assert_same(g(logits, np.array([1, 3, 2])), gr.compile(lambda z, y: gr.nn.cross_entropy(z, y), backend="numpy")(
        logits, np.array([1, 3, 2])))


def test_the_teaching_view_listing_ir_and_assembly():
    x = RNG.standard_normal((16, 8)).astype(np.float32)
    f = gr.compile(lambda x: gr.nn.softmax(x, axis=-1), backend="llvm")
    f(x)
    compiled = f.executable(x)
    src = f.source(x)
    assert src.startswith("fused program") and "for [16] x 3 passes over [8]" in src and "define internal" in src
    assert "<8 x float>" in compiled.optimized_ir or "<16 x float>" in compiled.optimized_ir  # vectorized
    assert "ret" in compiled.assembly
    timings = compiled.profile(x)
    assert [h.split()[0] for h, _ in timings] == ["k0"] and all(t > 0 for _, t in timings)


def test_torch_tensors_in_and_out_and_pytrees():
    torch = pytest.importorskip("torch")
    p = {"w": torch.randn(4, 3, dtype=torch.float64), "b": torch.randn(3, dtype=torch.float64)}
    x = torch.randn(5, 4, dtype=torch.float64)
    step = gr.compile(gr.value_and_grad(lambda p, x: gr.sum(gr.tanh(x @ p["w"] + p["b"]))), backend="llvm")
    value, grads = step(p, x)
    tp = {k: v.clone().requires_grad_() for k, v in p.items()}
    loss = torch.tanh(x @ tp["w"] + tp["b"]).sum()
    loss.backward()
    assert isinstance(grads["w"], torch.Tensor)
    np.testing.assert_allclose(float(value), loss.item(), rtol=1e-13)
    for k in p:
        np.testing.assert_allclose(grads[k].numpy(), tp[k].grad.numpy(), rtol=1e-12)


def test_cache_dir_default_is_in_the_home_cache(monkeypatch):
    monkeypatch.delenv("GRADIR_CACHE_DIR", raising=False)
    assert llvm_backend.cache_dir() == llvm_backend.pathlib.Path.home() / ".cache" / "gradir" / "llvm"
    assert os.environ.get("GRADIR_CACHE_DIR") is None


@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)])
def test_big_matmuls_with_transposes_and_long_loops_match_numpy(ta, tb):
    """A gemm on each transposed layout (gemm.py's strides, or BLAS's flags), and loops over many points (edges
    that are not multiples of the vector width)."""
    a = RNG.standard_normal((301, 203)).astype(np.float32)
    w = RNG.standard_normal((203, 150)).astype(np.float32)

    def f(a, w):
        a = a if not ta else gr.transpose(gr.transpose(a) * 1.0)
        w = w if not tb else gr.transpose(gr.transpose(w) * 1.0)
        return gr.tanh(a @ w) * 2.0, gr.sum(gr.exp(-a * a), axis=-1)
    ref, got, c = both(f, a, w)
    assert_same(got, ref, rtol=2e-5, atol=2e-5)
    assert c.source(a, w).count("matmul  gemm") == 1


def test_linear_layer_gemms_take_the_bias_and_write_the_weight_gradient_in_torchs_layout():
    """A linear layer on (B, T, C) with torch's (out, in) weight: one gemm for the batch whose output
    starts as the bias, and the weight gradient written by its gemm already transposed (no copy)."""
    x, w, b = RNG.standard_normal((4, 6, 30)), RNG.standard_normal((20, 30)), RNG.standard_normal(20)
    f = gr.value_and_grad(lambda w, b, x: gr.sum(gr.tanh(gr.nn.linear(x, w, b))), argnums=(0, 1))
    ref, got, c = both(f, w, b, x)
    assert_same(got[0], ref[0])
    scale = max(np.abs(r).max() for r in ref[1])  # (a gradient summed over 24 rows: an element near 0 is
    assert_same(tuple(got[1]), tuple(ref[1]), atol=1e-13 * scale)  # only as exact as the sum's largest term)
    listing = c.source(w, b, x)
    assert "[epilogue: the product's buffer starts as the bias]" in listing
    assert "[written by the gemm in this layout: (A @ B)^T = B^T @ A^T] -> stored" in listing
    assert "copy" not in listing.split("\n\n")[0]


def test_review_cases_match_numpy():
    """Cases a review found: a returned transpose of a product that another output views, an empty inner
    dimension, integer powers (NumPy wraps), float64 -> float16 in one rounding, relu(-0.0) = +0.0."""
    a, b = RNG.standard_normal((5, 3)), RNG.standard_normal((3, 4))
    ref, got, _ = both(lambda a, b: (gr.transpose(a @ b), gr.transpose(a @ b)[0]), a, b)
    assert_same(got, ref)
    ref, got, _ = both(lambda x, w: x @ w, np.zeros((2, 3, 0)), np.zeros((0, 4)))
    assert_same(got, ref)
    ints = np.array([3, 7, -2, 5], np.int64)
    ref, got, c = both(lambda x: x ** np.int64(39) + x ** 2, ints)
    np.testing.assert_array_equal(got, ref)
    assert "integer power is not lowered" in c.source(ints)
    x = np.array([1 + 2.0 ** -11 + 2.0 ** -40, 65519.99999999, -0.0, -3.0])
    ref, got, _ = both(lambda x: (x.astype(np.float16), gr.relu(x)), x)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(np.signbit(got[1]), np.signbit(ref[1]))


def test_a_reused_input_is_rechecked_and_big_outputs_do_not_share_memory():
    x = np.arange(6.0).reshape(2, 3)[:, :2].copy()
    f = gr.compile(lambda x: (x * 2.0, gr.sum(x)), backend="llvm")
    np.testing.assert_array_equal(f(x)[0], x * 2.0)
    y = x.T  # a new object; then the same object with another layout must not reuse the old pointer
    np.testing.assert_array_equal(f(y)[0], y * 2.0)
    big = np.ones((300, 300))
    g = gr.compile(lambda x: (x + 1.0, gr.sum(x)), backend="llvm")
    out, total = g(big)
    assert out.base is None or out.base.nbytes == out.nbytes  # its own allocation, not a shared block
    assert total == 90000.0


# -- kernels of the same structure share one compiled function ------------------------------------

def emitted_alone(program, k) -> str:
    """Kernel k's LLVM function emitted on its own, under a fixed name (what it would compile to unshared)."""
    return str(ModuleBuilder(program, [], []).kernel_function(k, name="kernel"))


def assert_sharing_is_exact(compiled) -> dict[int, list]:
    """Every group of kernels that share a function emits the same code when each is emitted on its own;
    returns the groups (function number -> kernels)."""
    groups: dict[int, list] = {}
    for k in compiled.program.kernels:
        if k.index in compiled.function_of:
            groups.setdefault(compiled.function_of[k.index], []).append(k)
    for members in groups.values():
        first = emitted_alone(compiled.program, members[0])
        for k in members[1:]:
            assert emitted_alone(compiled.program, k) == first, (members[0].name, k.name)
    return groups


def chain(x, n=200):
    for _ in range(n):
        x = gr.tanh(x) * 0.9 + 0.1
    return gr.sum(x)


def test_an_unrolled_loop_compiles_each_distinct_kernel_once():
    x = np.linspace(-1, 1, 8)
    ref, got, c = both(gr.value_and_grad(chain), x)
    assert_same(got, ref)
    compiled = c.executable(x)
    groups = assert_sharing_is_exact(compiled)
    # 200 iterations forward and backward, in kernels of up to 64 nodes: a handful of distinct bodies
    assert len(compiled.program.kernels) >= 20 and len(groups) <= 8
    assert compiled.module_ir.count("define internal i32 @") == len(groups)
    assert f"{len(compiled.program.kernels)} compiled kernels run {len(groups)} functions" in compiled.source
    alone, in_order = compiled.profile(x, repeats=3), compiled.profile(x, repeats=3, in_order=True)
    assert len(alone) == len(in_order) == len(compiled.program.kernels)
    assert [h for h, _ in alone] == [h for h, _ in in_order] and all(t > 0 for _, t in in_order)
    assert_same(c(x), ref)  # profiling left the executable as it was


def deep_mlp(ws, x):
    h = x
    for w in ws:
        h = h + gr.tanh(h @ w) * 0.5
    return gr.sum(h * h)


def test_identical_network_blocks_share_code_and_compute_their_own_values():
    ws = [RNG.standard_normal((4, 4)) * 0.3 for _ in range(12)]
    x = RNG.standard_normal((3, 4))
    ref, got, c = both(gr.value_and_grad(deep_mlp), ws, x)
    assert_same(got[0], ref[0])
    for g, w in zip(got[1], ref[1]):
        assert_same(g, w, rtol=1e-11)
    groups = assert_sharing_is_exact(c.executable(ws, x))
    assert max(len(m) for m in groups.values()) >= 10  # the 12 blocks' kernels, compiled once


SLICES = {"offset": (lambda x: x[:, 0:4], lambda x: x[:, 4:8]),
          "stride": (lambda x: x[:, 0:4], lambda x: x[:, 0:8:2]),
          "transpose": (lambda x: x[:, 0:4], lambda x: gr.transpose(x[0:4, 0:2].reshape(2, 4))),
          "constant": (lambda x: x[:, 0:4] * 0.5, lambda x: x[:, 0:4] * 0.25),
          "signed zero": (lambda x: gr.where(x[:, 0:4] > 0, x[:, 0:4], 0.0),
                          lambda x: gr.where(x[:, 0:4] > 0, x[:, 0:4], -0.0)),
          "dtype": (lambda x: x[:, 0:4], lambda x: x[:, 0:4].astype(np.float32)),
          "same": (lambda x: x[:, 0:4], lambda x: x[:, 0:4])}


@pytest.mark.parametrize("field", sorted(SLICES))
def test_kernels_differing_in_one_field_do_not_share_code(field):
    a, b = SLICES[field]

    def f(x, y, w):  # two tanh kernels on two inputs, kept apart by the product between them
        return gr.tanh(a(x)) @ w, gr.tanh(b(y))
    x, y, w = RNG.standard_normal((4, 8)), RNG.standard_normal((4, 8)), RNG.standard_normal((4, 4))
    x[0, :4], y[0, :4] = -np.abs(x[0, :4]), -np.abs(y[0, :4])  # zeros from `where`, whose sign must survive
    ref, got, c = both(f, x, y, w)
    for g, r in zip(got, ref):
        assert_same(g, r, rtol=1e-6 if field == "dtype" else 1e-12)
        np.testing.assert_array_equal(np.signbit(g), np.signbit(r))
    compiled = c.executable(x, y, w)
    first, second = (k for k in compiled.program.kernels if any(n.op == "tanh" for n in k.nodes))
    shared = compiled.function_of[first.index] == compiled.function_of[second.index]
    # a loop kernel reads its scalar constants from memory: kernels differing only in one share code
    assert shared == (field in ("same", "constant"))
    assert shared == (emitted_alone(compiled.program, first) == emitted_alone(compiled.program, second))


@settings(max_examples=25, deadline=None)
@given(programs(max_steps=6))
@example(([(), (2, 3)], [("reduce", "mean", (1,), (1, False)), ("binary", "add", (1, 0), None)]))  # two accumulators
def test_random_programs_repeated_share_code_exactly(program):
    shapes, steps = program
    xs = make_inputs(shapes, seed=len(steps)) + make_inputs(shapes, seed=len(steps) + 1)
    n = len(shapes)

    def f(*a):  # the same program on two sets of inputs: every kernel has a twin reading other buffers
        return run_program(steps, a[:n], "gr") + run_program(steps, a[n:], "gr") * 0.5
    f = gr.value_and_grad(f, argnums=tuple(range(2 * n)))
    want = gr.compile(f, backend="numpy")(*xs)
    c = gr.compile(f, backend="llvm")
    got = c(*xs)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    assert_sharing_is_exact(c.executable(*xs))


def test_terms_differing_only_in_their_constants_share_one_function():
    """sum_i sum(tanh(x * (i + 1))): every term's kernel has its own constant, read from memory, so one
    compiled function serves them all (written as literals, each term was its own LLVM function)."""
    def wide(x):
        total = 0.0
        for i in range(300):
            total = total + gr.sum(gr.tanh(x * (i + 1.0)))
        return total

    x = np.linspace(-0.3, 1, 8)  # not symmetric: the sum is far from 0, so relative errors mean something
    ref, got, c = both(gr.value_and_grad(wide), x)
    assert_same(got[0], ref[0])
    assert_same(got[1], ref[1], rtol=1e-12)
    compiled = c.executable(x)
    functions, kernels = len(set(compiled.function_of.values())), len(compiled.program.kernels)
    assert kernels >= 30 and functions <= kernels // 3  # 38 kernels in 9 functions (windows fall in a few phases)
    assert_sharing_is_exact(compiled)
