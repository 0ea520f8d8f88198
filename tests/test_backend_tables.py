"""What each compiled backend renders, and the things every renderer does one way (issue 20):

- fusion reads "elementwise" from the primitive's rule table, and each backend's table (`RENDERS`) says which
  ops it renders: every elementwise primitive of the registry either is in the table and a compiled run of it
  matches the NumPy backend, or is not and runs on the reference, with the right value, saying so;
- one kernel-sharing key (backends/sharing.py) for every renderer: kernels of one key render to the same code;
- composites are lowered once, by the backends' entry point; the backends get primitives only."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import triton_missing
from hypothesis import given, settings

import gradir as gr
from gradir.backends import compile_graph, numpy_backend
from gradir.backends import run as run_graph
from gradir.backends.llvm import RENDERS as LLVM_RENDERS
from gradir.backends.llvm import backend as llvm_backend
from gradir.backends.sharing import kernel_key
from gradir.backends.triton import RENDERS as TRITON_RENDERS
from gradir.backends.triton import codegen, gemm, scatter
from gradir.core import dtypes
from gradir.core.errors import GradirError
from gradir.core.interop import is_torch, torch_to_numpy
from gradir.core.ir import Graph
from gradir.core.primitive import REGISTRY
from gradir.passes import run_pipeline
from gradir.passes.fusion import KERNEL_OPS, LOOP, MATMUL, NUMPY, SCATTER, fuse
from tests.random_programs import make_inputs, programs, run

TRITON = pytest.param("triton", marks=pytest.mark.skipif(triton_missing() is not None, reason=str(triton_missing())))
TABLES = {"llvm": LLVM_RENDERS, "triton": TRITON_RENDERS}
ELEMENTWISE = sorted(name for name, p in REGISTRY.items() if p.kind == "elementwise")
FLOAT_ONLY = {"ceil", "floor", "rint"}  # (float domain; the others take any real dtype through the public functions)
X = np.array([-2.5, -1.5, -0.75, -0.5, -0.0, 0.0, 0.3, 0.5, 1.5, 2.5, 3.7, 10.0]).reshape(3, 4)
Y = np.array([1.5, -2.0, 0.5, 3.0, 2.0, -1.0, 0.7, -0.5, 2.0, 4.0, -3.0, 0.25]).reshape(3, 4)


def test_tables_name_primitives_fusion_places():
    for table in TABLES.values():
        assert table <= set(REGISTRY)
        assert all(REGISTRY[op].kind == "elementwise" or op in KERNEL_OPS for op in table)
    # the elementwise primitives fusion's own list left out now fuse, where the backend renders them
    formerly_missing = {"ceil", "floor", "expm1", "log1p", "tan", "rint", "real", "imag"}
    assert formerly_missing <= set(ELEMENTWISE)
    assert formerly_missing <= LLVM_RENDERS and formerly_missing - {"imag"} <= TRITON_RENDERS
    assert "imag" not in TRITON_RENDERS and "index_update" not in TRITON_RENDERS


def one_op_graph(op: str, dt) -> tuple[Graph, list]:
    """A graph applying primitive `op` once to small operands of dtype `dt` (where: a bool condition)."""
    prim = REGISTRY[op]
    g = Graph(f"one_{op}")
    if op == "where":
        specs = [(X > 0, dtypes.bool_), (X, dt), (Y, dt)]
    else:
        specs = [(a, dt) for a in (X, Y)[:len(prim.args)]]
    args = [np.asarray(a).astype(d) for a, d in specs]
    ins = [g.add_input(a.shape, a.dtype, f"x{i}") for i, a in enumerate(args)]
    attrs = {"dtype": np.dtype(np.float32 if dt == np.float64 else np.float64)} if op == "convert" else {}
    shape, out_dt = prim.infer(*ins, **attrs)
    g.outputs = [g.append(op, ins, attrs, shape, out_dt)]
    return g, args


def numpy_values(outs) -> list:
    return [torch_to_numpy(o) if is_torch(o) else np.asarray(o) for o in outs]


def fallback_kernels(compiled) -> list[str]:
    """The notes of the kernels `compiled` runs on the NumPy reference."""
    if compiled.backend == "triton":
        return [compiled.reasons[k.index] for kind, k, _ in compiled.steps if kind == "reference"]
    return [k.note for k in compiled.program.kernels if k.kind == NUMPY]


@pytest.mark.parametrize("dt", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("op", ELEMENTWISE)
@pytest.mark.parametrize("backend", ["llvm", TRITON])
def test_every_elementwise_primitive_renders_or_falls_back(backend, op, dt):
    g, args = one_op_graph(op, dt)
    want = numpy_values(compile_graph(g, backend="numpy")(*args))[0]
    compiled = compile_graph(g, backend=backend)
    got = numpy_values(compiled(*args))[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    if dtypes.is_float(want.dtype):
        np.testing.assert_allclose(got, want, rtol=1e-12 if dt == np.float64 else 1e-6, atol=1e-300)
        if op in FLOAT_ONLY or op in ("sign", "abs", "real", "negative", "imag"):
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # exact ops: the sign of zero too
    else:
        np.testing.assert_array_equal(got, want)
    fallbacks = fallback_kernels(compiled)
    if op in TABLES[backend]:
        assert fallbacks == []
    else:
        assert fallbacks == [f"{op} is not rendered by this backend"]


def test_formerly_missing_ops_fuse_with_their_neighbours():
    x = np.linspace(0.1, 0.9, 8)

    def f(x):
        return gr.sum(gr.round(gr.expm1(x) * 4.0) + gr.floor(gr.log1p(x) * 3.0) + gr.ceil(gr.tan(x)))
    graph = run_pipeline(gr.trace(f, x))
    program = fuse(graph)
    assert [k.kind for k in program.kernels] == [LOOP], str(program)
    ref, got = gr.compile(f, backend="numpy")(x), gr.compile(f, backend="llvm")(x)
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_an_op_missing_from_a_table_stays_out_of_the_kernels_and_says_so(monkeypatch):
    x = np.linspace(-1, 1, 12).reshape(3, 4)

    def f(x):
        return gr.tanh(gr.tan(x) * 2.0) + x

    graph = run_pipeline(gr.trace(f, x))
    program = fuse(graph, renders=LLVM_RENDERS - {"tan"})
    kinds = [k.kind for k in program.kernels]
    assert kinds == [NUMPY, LOOP] and "NumPy fallback (tan is not rendered by this backend)" in str(program)
    assert [k.kind for k in fuse(graph, renders=LLVM_RENDERS).kernels] == [LOOP]
    monkeypatch.setattr(llvm_backend, "RENDERS", LLVM_RENDERS - {"tan"})
    c = gr.compile(f, backend="llvm")
    np.testing.assert_allclose(c(x), gr.compile(f, backend="numpy")(x), rtol=1e-12)
    assert "tan is not rendered by this backend" in c.source(x)


# -- one sharing key for every renderer ------------------------------------------------------------------


def triton_texts(program) -> dict:
    """The Triton source of every kernel the Triton backend would generate (kernel index -> text), rendered alone."""
    names = codegen.buffer_names(program)
    texts = {}
    for k in program.kernels:
        if k.kind == LOOP and codegen.unrendered(program, k) is None:
            texts[k.index] = codegen.LoopSource(program, k, "kernel", names).text
        elif k.kind == MATMUL and dtypes.is_float(k.nodes[0].dtype) and gemm.choose(program, k) == "triton":
            texts[k.index] = gemm.gemm_source(program, k, "kernel", names)[0]
        elif k.kind == SCATTER:
            made = scatter.scatter_source(program, k, "kernel", names)
            if made is not None:
                texts[k.index] = made[0]
    return texts


def code_of(text: str) -> str:
    """A kernel's code without its docstring and comments (what runs)."""
    head, body = text.split("):\n", 1)
    body = body.split('"""', 2)[2] if body.lstrip().startswith('"""') else body
    lines = [line.split("  # ", 1)[0].rstrip() for line in body.splitlines()]
    return head + "\n".join(line for line in lines if line)


def assert_triton_sharing_is_exact(program) -> dict:
    """Kernels of one key (literal constants, as the Triton backend asks) render the same code; returns the groups."""
    groups: dict = {}
    for index, text in triton_texts(program).items():
        groups.setdefault(kernel_key(program.kernels[index], program, literal_constants=True), []).append(code_of(text))
    for texts in groups.values():
        assert all(t == texts[0] for t in texts[1:])
    return groups


def test_identical_blocks_share_one_key_and_one_triton_text():
    ws = [np.random.default_rng(i).standard_normal((8, 8)) for i in range(3)]

    def blocks(x):
        for w in ws:
            x = x + gr.tanh(x @ w) * 0.25
        return gr.sum(x)
    x = np.random.default_rng(9).standard_normal((4, 8))
    graph = gr.compile(gr.value_and_grad(blocks), backend="numpy").graph(x)
    program = fuse(graph, renders=TRITON_RENDERS)
    groups = assert_triton_sharing_is_exact(program)
    assert max(len(t) for t in groups.values()) >= 2
    # the key shares as much as the text does (what the Triton backend compared before it used the key)
    assert len(groups) == len({t for texts in groups.values() for t in texts}) < sum(map(len, groups.values()))


def test_scalar_constants_are_part_of_the_key_where_the_renderer_writes_literals():
    def f(x, y, w):  # two tanh kernels, kept apart by the product between them, differing in one constant
        return gr.tanh(x * 0.5) @ w, gr.tanh(y * 0.25)
    rng = np.random.default_rng(3)
    args = rng.standard_normal((4, 4)), rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    program = fuse(run_pipeline(gr.trace(f, *args)))
    first, second = (k for k in program.kernels if any(n.op == "tanh" for n in k.nodes))
    assert kernel_key(first, program) == kernel_key(second, program)  # LLVM reads them from memory
    assert kernel_key(first, program, literal_constants=True) != kernel_key(second, program, literal_constants=True)
    texts = triton_texts(program)
    assert code_of(texts[first.index]) != code_of(texts[second.index])


@settings(max_examples=25, deadline=None)
@given(programs(max_steps=6))
def test_random_programs_repeated_render_one_triton_text_per_key(program):
    shapes, steps = program
    xs = make_inputs(shapes, seed=len(steps)) + make_inputs(shapes, seed=len(steps) + 1)
    n = len(shapes)

    def f(*a):  # the same program on two sets of inputs: every kernel has a twin reading other buffers
        return run(steps, a[:n], "gr") + run(steps, a[n:], "gr") * 0.5
    graph = gr.compile(gr.value_and_grad(f, argnums=tuple(range(2 * n))), backend="numpy").graph(*xs)
    assert_triton_sharing_is_exact(fuse(graph, renders=TRITON_RENDERS))


# -- composites are lowered once, by the entry point ------------------------------------------------------

LOGITS, TARGETS = np.random.default_rng(5).standard_normal((3, 4)), np.array([0, 3, 1])


def cross_entropy(z, y):
    return gr.nn.cross_entropy(z, y)


@pytest.mark.parametrize("backend", ["numpy", "llvm", TRITON])
def test_the_entry_point_lowers_composites_once_for_every_backend(backend):
    graph = gr.trace(cross_entropy, LOGITS, TARGETS)
    assert [n.op for n in graph.nodes] == ["cross_entropy"]  # the trace keeps the composite
    want = gr.compile(cross_entropy, backend="numpy")(LOGITS, TARGETS)
    compiled = compile_graph(graph, backend=backend)
    assert "cross_entropy" not in {n.op for n in compiled.graph.nodes}
    np.testing.assert_allclose(numpy_values(compiled(LOGITS, TARGETS))[0], want, rtol=1e-12)
    np.testing.assert_allclose(run_graph(graph, [LOGITS, TARGETS])[0], want, rtol=1e-12)
    np.testing.assert_allclose(numpy_values([gr.compile(cross_entropy, backend=backend)(LOGITS, TARGETS)])[0], want,
                               rtol=1e-12)


def test_a_composite_that_slips_past_the_entry_point_is_a_clear_error():
    graph = gr.trace(cross_entropy, LOGITS, TARGETS)
    for attempt in (lambda: numpy_backend.compile_graph(graph), lambda: numpy_backend.run(graph, [LOGITS, TARGETS])):
        with pytest.raises(GradirError, match="cross_entropy.*composite op.*lower_composites"):
            attempt()
