"""The LLVM backend's jit (llvmlite MCJIT, -O3 with vectorization, object code, BLAS) and its math library.

Each math function is jitted inside a loop `y[i] = f(x[i])`, run on NumPy arrays, and compared in units in the
last place (ulp) with a reference of higher precision: float64 for float32, and for float64 np.longdouble
(80-bit on x86-64) or mpmath. The inputs sweep the whole finite range (float32: one bit pattern in 4099 of
each sign, so every binade; float64: evenly spaced bit patterns) plus uniform samples of the interesting
interval. The bounds asserted here are the ones `backends/llvm/mathlib.py` documents.
"""

import ctypes
import re

import llvmlite.binding as llvm
import mpmath
import numpy as np
import pytest
import scipy.special
from llvmlite import ir

from gradir.backends.llvm import mathlib
from gradir.backends.llvm.jit import JitModule, add_symbol, blas_address, cpu_key, optimize, target_machine

TYPES = {np.float32: ir.FloatType(), np.float64: ir.DoubleType()}
DTYPES = (np.float32, np.float64)

# Max error in ulp asserted per function: (float32, float64). Subnormal results included.
BOUNDS = {
    "exp": (1.0, 1.25),
    "expm1": (1.0, 1.0),
    "log": (1.0, 1.25),
    "tanh": (1.75, 1.0),
    "sigmoid": (1.5, 1.5),
    "erf": (1.5, 1.0),
    "sin": (0.75, 1.0),
    "cos": (0.75, 1.0),
    "pow": (0.75, 1.25),
}
# Where uniform samples are added on top of the sweep of the whole range.
INTERVALS = {
    "exp": (-750, 712),
    "expm1": (-45, 712),
    "log": (0, 4),
    "tanh": (-20, 20),
    "sigmoid": (-750, 40),
    "erf": (-6.5, 6.5),
    "sin": (-20, 20),
    "cos": (-20, 20),
}
SIN_COS_F64_ACCURATE = 2.0**53  # mathlib: float64 sin/cos are accurate below this, bounded beyond

LONGDOUBLE_OK = np.finfo(np.longdouble).nmant >= 63


# ---- jitting a loop around a math function ------------------------------------------------------------------------
def apply_loop(module: ir.Module, fn: ir.Function, name: str) -> None:
    """Add `void name(T* x0, [T* x1,] T* y, i64 n)`: for i < n, y[i] = fn(x0[i], [x1[i]])."""
    ty = fn.function_type.return_type
    nargs = len(fn.args)
    i64 = ir.IntType(64)
    loop_fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ty.as_pointer()] * (nargs + 1) + [i64]), name=name)
    for arg in loop_fn.args[:-1]:
        arg.add_attribute("noalias")
    *inputs, out, n = loop_fn.args
    entry, body, done = (loop_fn.append_basic_block(label) for label in ("entry", "body", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, i64(0)), body, done)
    b.position_at_end(body)
    i = b.phi(i64)
    i.add_incoming(i64(0), entry)
    b.store(b.call(fn, [b.load(b.gep(x, [i])) for x in inputs]), b.gep(out, [i]))
    i_next = b.add(i, i64(1))
    i.add_incoming(i_next, body)
    b.cbranch(b.icmp_signed("<", i_next, n), body, done)
    b.position_at_end(done)
    b.ret_void()


def caller(jit: JitModule, name: str, dtype, nargs: int = 1):
    """A Python function running the jitted loop `name` on NumPy arrays (broadcast, converted to dtype)."""
    cfunc = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (nargs + 1), ctypes.c_int64)(jit.address(name))

    def run(*xs):
        xs = [np.ascontiguousarray(x) for x in np.broadcast_arrays(*[np.asarray(x, dtype=dtype) for x in xs])]
        y = np.empty_like(xs[0])
        cfunc(*[x.ctypes.data for x in xs], y.ctypes.data, y.size)
        return y

    return run


def loop_name(name, dtype):
    return f"apply_{name}_{np.dtype(dtype).name}"


@pytest.fixture(scope="module")
def jitted():
    """One module with the loop of every function for both types, compiled once."""
    module = ir.Module("mathlib_test")
    for dtype, ty in TYPES.items():
        for name in mathlib.FUNCTIONS:
            apply_loop(module, mathlib.function(module, name, ty), loop_name(name, dtype))
        apply_loop(module, mathlib.pow_function(module, ty), loop_name("pow", dtype))
    return JitModule.from_ir(str(module))


def kernel(jitted, name, dtype):
    return caller(jitted, loop_name(name, dtype), dtype, 2 if name == "pow" else 1)


# ---- references and ulps ---------------------------------------------------------------------------------------------
NUMPY = {  # float64 versions: the reference for float32, and for the special values of float64
    "exp": np.exp,
    "expm1": np.expm1,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": scipy.special.expit,
    "erf": scipy.special.erf,
    "sin": np.sin,
    "cos": np.cos,
    "pow": np.power,
}
MPMATH = {
    "exp": mpmath.exp,
    "expm1": mpmath.expm1,
    "log": mpmath.log,
    "tanh": mpmath.tanh,
    "sigmoid": lambda v: 1 / (1 + mpmath.exp(-v)),
    "erf": mpmath.erf,
    "sin": mpmath.sin,
    "cos": mpmath.cos,
    "pow": mpmath.power,
}


def reference(name, dtype, *xs):
    """The exact f(x) as a double-double (hi, lo) of float64s: good to far below an ulp of dtype.

    float32: NumPy/SciPy in float64. float64: np.longdouble where it has 64 bits of mantissa, else (and for erf)
    mpmath at 120 bits; special values (inf/NaN in or out, log/pow of x <= 0) from NumPy in float64."""
    xs = [np.asarray(x, dtype=np.float64) for x in xs]
    with np.errstate(all="ignore"):
        f64 = NUMPY[name](*xs)
        if dtype == np.float32:
            return f64, 0.0
        if name != "erf" and LONGDOUBLE_OK:
            lds = [x.astype(np.longdouble) for x in xs]
            ref = 1 / (1 + np.exp(-lds[0])) if name == "sigmoid" else NUMPY[name](*lds)
            hi = ref.astype(np.float64)
            lo = np.where(np.isfinite(hi), (ref - hi.astype(np.longdouble)).astype(np.float64), 0.0)
            return hi, lo
    hi, lo = f64.copy(), np.zeros_like(f64)
    with mpmath.workprec(120):
        for j, args in enumerate(zip(*xs)):
            if np.isfinite(f64[j]) and all(np.isfinite(args)) and (name not in ("log", "pow") or args[0] > 0):
                v = MPMATH[name](*[mpmath.mpf(float(a)) for a in args])
                hi[j] = float(v)
                lo[j] = float(v - mpmath.mpf(hi[j])) if np.isfinite(hi[j]) else 0.0
    return hi, lo


def ulp_errors(y, ref, dtype):
    """|y - ref| in ulps of dtype at ref; 0 where both are the same inf or both NaN, inf where they disagree there."""
    hi, lo = ref
    hi, lo = np.broadcast_arrays(np.asarray(hi, dtype=np.float64), np.asarray(lo, dtype=np.float64))
    y = np.asarray(y, dtype=np.float64)
    info = np.finfo(dtype)
    with np.errstate(all="ignore"):
        rounded = hi.astype(dtype).astype(np.float64)  # inf where the exact value overflows dtype
        mant, ex = np.frexp(np.abs(hi))
        ex = ex - ((mant == 0.5) & (lo * np.sign(hi) < 0))  # just below a power of two
        ulp = np.ldexp(1.0, np.maximum(ex, info.minexp + 1) - info.nmant - 1)  # subnormals: fixed spacing
        err = np.abs((y - hi) - lo) / ulp
    special = ~np.isfinite(rounded) | ~np.isfinite(y)
    agree = (y == rounded) | (np.isnan(y) & np.isnan(rounded))
    return np.where(special, np.where(agree, 0.0, np.inf), err)


def sweep(dtype, name):
    """The inputs of the accuracy tests: the whole finite range by bit patterns, plus uniform samples."""
    rng = np.random.default_rng(1234)
    if dtype == np.float32:
        bits = np.arange(0, 0x7F800000, 4099, dtype=np.uint32).view(np.float32)
    else:
        bits = np.linspace(0, 0x7FEFFFFFFFFFFFFF, 200_001).astype(np.uint64).view(np.float64)
        bits = bits[np.isfinite(bits)]
    lo, hi = INTERVALS[name]
    x = np.concatenate([bits, -bits, rng.uniform(lo, hi, 50_000), rng.uniform(-1, 1, 50_000)]).astype(dtype)
    if dtype == np.float64 and name == "erf":  # mpmath reference: fewer points, concentrated where erf is not +-1
        x = np.concatenate([x[::100], rng.uniform(-6.5, 6.5, 5_000)])
    elif dtype == np.float64 and not LONGDOUBLE_OK:
        x = x[::50]
    if dtype == np.float64 and name in ("sin", "cos"):
        x = x[np.abs(x) < SIN_COS_F64_ACCURATE]
    return x


# ---- accuracy ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", mathlib.FUNCTIONS)
def test_accuracy_over_the_whole_range(jitted, name, dtype):
    x = sweep(dtype, name)
    y = kernel(jitted, name, dtype)(x)
    err = ulp_errors(y, reference(name, dtype, x), dtype)
    worst = int(np.argmax(err))
    bound = BOUNDS[name][DTYPES.index(dtype)]
    assert err[worst] <= bound, f"{name}({x[worst]!r}) = {y[worst]!r}: {err[worst]:.3g} ulp > {bound}"


@pytest.mark.parametrize("name, lo, hi, one_from", [
    # float32 tanh switches formulas at |x| = 1.25 and clamps at 9.2 (mathlib._tanh_f32); its largest error
    # (1.58 ulp over every float) is near 1.1; it rounds to 1 from 9.011 on
    ("tanh", 0.25, 9.25, 9.2),
    # float32 erf switches from a polynomial to 1 - 2^W(|x|) at |x| = 1 and clamps at 4 (mathlib._erf_f32);
    # its largest error (1.31 ulp over every float) is just above 1; it rounds to 1 from 3.916 on
    ("erf", 0.25, 4.25, 3.92),
])
def test_float32_dense_where_the_error_peaks(jitted, name, lo, hi, one_from):
    """One float in 61 of [lo, hi], both signs, within the bound; exactly +-1 from `one_from` up."""
    lo, hi = (int(np.float32(v).view(np.uint32)) for v in (lo, hi))
    x = np.arange(lo, hi, 61, dtype=np.uint32).view(np.float32)
    x = np.concatenate([x, -x])
    f = kernel(jitted, name, np.float32)
    y = f(x)
    err = ulp_errors(y, reference(name, np.float32, x), np.float32)
    worst = int(np.argmax(err))
    assert err[worst] <= BOUNDS[name][0], f"{name}({x[worst]!r}) = {y[worst]!r}: {err[worst]:.3g} ulp"
    assert np.all(np.abs(y) <= 1)
    big = np.float32(one_from) * np.float32(2.0) ** np.linspace(0, 7, 200, dtype=np.float32)
    assert np.all(f(big) == 1.0) and np.all(f(-big) == -1.0)


def _pow_inputs(dtype):
    rng = np.random.default_rng(99)
    n = 40_000
    limit = 700 if dtype == np.float64 else 100
    x3 = np.exp(rng.uniform(-5, 5, n))
    xs = [
        (np.exp(rng.uniform(-50, 50, n)), rng.uniform(-30, 30, n)),  # wide bases, moderate exponents
        (rng.uniform(0, 3, n), rng.uniform(-200, 200, n)),
        (x3, rng.uniform(-limit, limit, n) / np.log(x3)),  # y log x up to the over/underflow limits
        (1 + rng.uniform(-1e-3, 1e-3, n), rng.uniform(-1e5, 1e5, n)),  # bases near 1, big exponents
        (-np.exp(rng.uniform(-5, 5, n)), np.round(rng.uniform(-60, 60, n))),  # negative bases, integer exponents
    ]
    x = np.concatenate([a for a, _ in xs]).astype(dtype)
    y = np.concatenate([b for _, b in xs]).astype(dtype)
    if dtype == np.float64 and not LONGDOUBLE_OK:
        x, y = x[::50], y[::50]
    return x, y


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_pow_accuracy(jitted, dtype):
    x, y = _pow_inputs(dtype)
    out = kernel(jitted, "pow", dtype)(x, y)
    err = ulp_errors(out, reference("pow", dtype, x, y), dtype)
    worst = int(np.argmax(err))
    bound = BOUNDS["pow"][DTYPES.index(dtype)]
    assert err[worst] <= bound, f"pow({x[worst]!r}, {y[worst]!r}) = {out[worst]!r}: {err[worst]:.3g} ulp > {bound}"


def test_sin_cos_float64_beyond_the_accurate_range_stay_bounded(jitted):
    x = 2.0 ** np.linspace(53, 1023.99, 20_000)
    x = np.concatenate([x, -x])
    for name in ("sin", "cos"):
        y = kernel(jitted, name, np.float64)(x)
        assert np.all(np.abs(y) <= 1), name


# ---- special values --------------------------------------------------------------------------------------------------
def _specials(dtype):
    info = np.finfo(dtype)
    sub, big = float(info.smallest_subnormal), float(info.max)
    inf, nan = np.inf, np.nan
    return {
        "exp": [(0.0, 1.0), (-0.0, 1.0), (inf, inf), (-inf, 0.0), (nan, nan), (big, inf), (-big, 0.0), (sub, 1.0),
                (1000.0, inf), (-1000.0, 0.0)],
        "expm1": [(0.0, 0.0), (-0.0, -0.0), (inf, inf), (-inf, -1.0), (nan, nan), (1000.0, inf), (-1000.0, -1.0),
                  (sub, sub), (-sub, -sub), (big, inf), (-big, -1.0)],
        "log": [(0.0, -inf), (-0.0, -inf), (inf, inf), (-inf, nan), (-1.0, nan), (-sub, nan), (nan, nan), (1.0, 0.0)],
        "tanh": [(0.0, 0.0), (-0.0, -0.0), (inf, 1.0), (-inf, -1.0), (nan, nan), (sub, sub), (-sub, -sub),
                 (1e-30, 1e-30), (-1e-30, -1e-30), (30.0, 1.0), (-30.0, -1.0), (big, 1.0), (-big, -1.0)],
        "sigmoid": [(0.0, 0.5), (-0.0, 0.5), (inf, 1.0), (-inf, 0.0), (nan, nan), (-1000.0, 0.0), (1000.0, 1.0),
                    (-big, 0.0), (big, 1.0)],
        "erf": [(0.0, 0.0), (-0.0, -0.0), (inf, 1.0), (-inf, -1.0), (nan, nan), (10.0, 1.0), (-10.0, -1.0),
                (big, 1.0), (-big, -1.0)],
        "sin": [(0.0, 0.0), (-0.0, -0.0), (inf, nan), (-inf, nan), (nan, nan), (sub, sub), (-sub, -sub),
                (1e-30, 1e-30), (-1e-30, -1e-30)],
        "cos": [(0.0, 1.0), (-0.0, 1.0), (inf, nan), (-inf, nan), (nan, nan), (sub, 1.0), (-sub, 1.0)],
    }


def _same(a, b):
    """Equal including the sign of zero, or both NaN."""
    return (a == b) & (np.signbit(a) == np.signbit(b)) | (np.isnan(a) & np.isnan(b))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", mathlib.FUNCTIONS)
def test_special_values(jitted, name, dtype):
    cases = _specials(dtype)[name]
    x = np.array([c[0] for c in cases], dtype=dtype)
    expected = np.array([c[1] for c in cases], dtype=dtype)
    y = kernel(jitted, name, dtype)(x)
    wrong = ~_same(y, expected)
    assert not wrong.any(), [(float(a), float(b), float(c)) for a, b, c in zip(x[wrong], y[wrong], expected[wrong])]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_exp_and_sigmoid_at_the_overflow_and_underflow_thresholds(jitted, dtype):
    info = np.finfo(dtype)
    thresholds = [
        np.log(float(info.max)),  # exp overflows just above
        np.log(float(info.smallest_subnormal)),  # exp reaches the last subnormal
        np.log(float(info.smallest_subnormal)) - np.log(2.0),  # and rounds to 0 just below
        np.log(float(info.tiny)),  # normal / subnormal results
    ]
    x = []
    for t in thresholds:
        v = dtype(t)
        for _ in range(4):
            v = np.nextafter(v, dtype(-np.inf))
        for _ in range(9):
            x.append(v)
            v = np.nextafter(v, dtype(np.inf))
    x = np.array(x, dtype=dtype)
    for name, inputs in (("exp", x), ("expm1", x[x > 0]), ("sigmoid", x[x < 0])):
        y = kernel(jitted, name, dtype)(inputs)
        err = ulp_errors(y, reference(name, dtype, inputs), dtype)
        assert err.max() <= BOUNDS[name][DTYPES.index(dtype)], (name, inputs[np.argmax(err)], y[np.argmax(err)])


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_pow_special_values_match_numpy(jitted, dtype):
    info = np.finfo(dtype)
    values = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5, -2.5, np.inf, -np.inf, np.nan,
              float(info.max), float(info.smallest_subnormal), -float(info.smallest_subnormal), 1e10, -1e10, 2.0**60]
    x, y = (a.ravel() for a in np.meshgrid(np.array(values, dtype=dtype), np.array(values, dtype=dtype)))
    out = kernel(jitted, "pow", dtype)(x, y)
    with np.errstate(all="ignore"):
        expected = np.power(x, y)
    # the cases C99 defines by the operands must match exactly (sign of zero included); the rest within the bound
    # (plus one ulp: NumPy's own pow is not correctly rounded either)
    special = np.isin(np.abs(x), [0, 1, np.inf]) | np.isin(np.abs(y), [0, np.inf]) | np.isnan(x) | np.isnan(y)
    wrong = np.where(special, ~_same(out, expected), ulp_errors(out, (expected, 0.0), dtype) > BOUNDS["pow"][1] + 1)
    assert not wrong.any(), [(float(a), float(b), float(c), float(d))
                             for a, b, c, d in zip(x[wrong], y[wrong], out[wrong], expected[wrong])]
    assert np.isnan(kernel(jitted, "pow", dtype)(-8.0, 1 / 3))  # negative base, non-integer exponent
    assert kernel(jitted, "pow", dtype)(-2.0, 3.0) == -8.0


# ---- structure: straight-line, inlined, vectorized -----------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", [*mathlib.FUNCTIONS, "pow"])
def test_functions_are_straight_line_and_their_loops_vectorize(jitted, name, dtype):
    module = ir.Module()
    ty = TYPES[dtype]
    fn = mathlib.pow_function(module, ty) if name == "pow" else mathlib.function(module, name, ty)
    assert fn.linkage == "internal" and {"alwaysinline", "nounwind"} <= set(fn.attributes)
    assert len(fn.blocks) == 1  # no branches
    calls = re.findall(r"call \S+ (@\"?[\w.]+)", str(fn))
    assert calls and all(callee.lstrip('@"').startswith("llvm.") for callee in calls), calls
    # in the jitted loop, the function was inlined (no call left) and the loop runs on vectors
    body = jitted.optimized_ir.split(f"@{loop_name(name, dtype)}(")[1].split("\ndefine ")[0].split("\n}\n")[0]
    assert "@gradir." not in body
    element = "float" if dtype == np.float32 else "double"
    widths = {int(w) for w in re.findall(rf"<(\d+) x {element}>", body)}
    assert widths and max(widths) >= (4 if dtype == np.float32 else 2), widths


def test_function_is_created_once_per_module_and_checks_its_arguments():
    module = ir.Module()
    assert mathlib.function(module, "exp", ir.FloatType()) is mathlib.function(module, "exp", ir.FloatType())
    assert mathlib.function(module, "exp", ir.DoubleType()).name == "gradir.exp.f64"
    assert mathlib.pow_function(module, ir.FloatType()).name == "gradir.pow.f32"
    with pytest.raises(ValueError, match="unknown math function"):
        mathlib.function(module, "gamma", ir.FloatType())
    with pytest.raises(TypeError):
        mathlib.function(module, "exp", ir.IntType(32))


# ---- jit: target, object code, BLAS ------------------------------------------------------------------------------
def test_target_machine_is_the_host_and_made_once():
    assert target_machine() is target_machine()
    assert cpu_key().startswith(llvm.get_host_cpu_name())


def test_optimize_vectorizes_a_plain_loop():
    module = ir.Module()
    apply_loop(module, mathlib.function(module, "exp", ir.FloatType()), "loop")
    ref = llvm.parse_assembly(str(module))
    optimize(ref)
    assert re.search(r"<\d+ x float>", str(ref))


def test_object_code_round_trip():
    module = ir.Module()
    for name in ("tanh", "sin"):
        apply_loop(module, mathlib.function(module, name, ir.DoubleType()), f"apply_{name}")
    compiled = JitModule.from_ir(str(module))
    assert "apply_tanh" in compiled.assembly
    obj = compiled.object_code()
    assert isinstance(obj, bytes) and obj
    loaded = JitModule.from_object(obj)
    assert loaded.optimized_ir is None
    x = np.linspace(-20, 20, 1001)
    for name in ("tanh", "sin"):
        expected = caller(compiled, f"apply_{name}", np.float64)(x)
        np.testing.assert_array_equal(caller(loaded, f"apply_{name}", np.float64)(x), expected)
    del compiled  # the loaded module owns its own copy of the code
    np.testing.assert_allclose(caller(loaded, "apply_tanh", np.float64)(x), np.tanh(x), rtol=1e-15)
    with pytest.raises(KeyError):
        loaded.address("no_such_function")
    with pytest.raises(ValueError):
        loaded.object_code()


def test_blas_addresses():
    for name in ("sgemm", "dgemm", "sdot", "ddot"):
        assert blas_address(name) > 0


def test_jitted_code_calls_blas_dgemm():
    # void matmul(double* a, double* b, double* c, i32 m, i32 n, i32 k): c = a @ b, column-major (Fortran ABI)
    add_symbol("gradir_test_dgemm", blas_address("dgemm"))
    f64, i32, i8 = ir.DoubleType(), ir.IntType(32), ir.IntType(8)
    p64, p32, p8 = f64.as_pointer(), i32.as_pointer(), i8.as_pointer()
    module = ir.Module()
    dgemm = ir.Function(module, ir.FunctionType(ir.VoidType(), [p8, p8, p32, p32, p32, p64, p64, p32, p64, p32, p64, p64, p32]),
                        name="gradir_test_dgemm")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [p64, p64, p64, i32, i32, i32]), name="matmul")
    a, b_, c, m, n, k = fn.args
    b = ir.IRBuilder(fn.append_basic_block())

    def slot(ty, value):
        ptr = b.alloca(ty)
        b.store(value, ptr)
        return ptr

    no_trans = slot(i8, i8(ord("N")))
    b.call(dgemm, [no_trans, no_trans, slot(i32, m), slot(i32, n), slot(i32, k), slot(f64, f64(1.0)), a, slot(i32, m),
                   b_, slot(i32, k), slot(f64, f64(0.0)), c, slot(i32, m)])
    b.ret_void()
    jit = JitModule.from_ir(str(module))
    matmul = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 3, *[ctypes.c_int32] * 3)(jit.address("matmul"))
    rng = np.random.default_rng(0)
    x, y = np.asfortranarray(rng.normal(size=(5, 7))), np.asfortranarray(rng.normal(size=(7, 3)))
    out = np.zeros((5, 3), order="F")
    matmul(x.ctypes.data, y.ctypes.data, out.ctypes.data, 5, 3, 7)
    np.testing.assert_allclose(out, x @ y, rtol=1e-13, atol=1e-13)
