"""Vectorizable math functions (exp, log, tanh, sigmoid, erf, sin, cos, pow, expm1) written in LLVM IR.

Why: LLVM turns a call to `llvm.exp.f32` into a call to the C library, one element at a time, so a loop that
calls it cannot be vectorized. Here each function is straight-line code (no branches, no calls except LLVM
intrinsics that have vector forms: fma, fabs, floor, rint, copysign), marked `alwaysinline`: once inlined into
a kernel's loop, the loop vectorizer turns it into AVX2/AVX-512 code. The recipe is the one of Cephes, SLEEF,
Eigen and XLA: reduce the argument to a small interval (x = n ln2 + r, x = n pi/2 + r, x = 2^k m), evaluate a
polynomial there, and undo the reduction with exponent-bit arithmetic. Special inputs are fixed up at the end
with `select`s, never with branches.

Every polynomial was fitted in Chebyshev nodes with `mpmath.chebyfit` on the interval named next to it
(near-minimax), and the fit error is stated there; the rational of float32 tanh and the polynomials of float32
erf were fitted by a weighted minimax iteration (see _TANH_F32_C, _ERF_F32_SMALL). All arithmetic is IEEE: no
fast-math flags; fused multiply-adds are explicit `llvm.fma` calls (one rounding; on x86 they need FMA3, i.e.
x86-64-v3 or later, to be fast).

Accuracy: the largest error measured, in units in the last place (ulp) of the result, against a reference
of higher precision (float64 for float32; np.longdouble, or mpmath for erf, for float64). Inputs: one in every
4099 float32 bit patterns of each sign (every binade, subnormals included), 200k evenly spaced float64 bit
patterns of each sign, plus uniform samples of the interval where the function is not flat. Subnormal results
included (their ulp is the fixed subnormal spacing). `tests/test_llvm_mathlib.py` asserts the bound column.

    function   float32: measured / bound   float64: measured / bound
    exp        0.89 / 1.0                  1.00 / 1.25
    expm1      0.87 / 1.0                  0.87 / 1.0
    log        0.84 / 1.0                  1.17 / 1.25
    tanh       1.58 / 1.75                 0.66 / 1.0    float32: every float (the sweep sees 1.20)
    sigmoid    1.34 / 1.5                  1.25 / 1.5
    erf        1.31 / 1.5                  0.71 / 1.0    float32: every float (the sweep sees 1.14)
    sin, cos   0.50 / 0.75                 0.78 / 1.0    float64: for |x| < 2^53 (9.0e15), see below
    pow        0.50 / 0.75                 1.00 / 1.25   sampled: wide bases, y log|x| up to the over/underflow
                                                         limits, bases near 1 with |y| up to 1e5, x < 0

sin and cos: float32 arguments are reduced exactly over the whole float range (2/pi in 28-bit chunks; see
_reduce_pio2_f32). float64 arguments are reduced by Cody-Waite with pi/2 in three doubles, which is accurate
while n = round(x 2/pi) is an exact integer below 2^53, i.e. for |x| < 2^53 ~ 9.0e15. Beyond that (where every
double is an even integer and NumPy/glibc switch to a Payne-Hanek reduction) the result is still in [-1, 1]
but has no accuracy at all. Speed (AVX-512, 1M elements): float32 exp 0.4 ns/element, float32 tanh 0.29 ns
(NumPy 0.36 ns), float32 erf 0.39 ns (SciPy 19 ns), float64 sin 2 ns; float32 sin/cos and pow pay for their
double-precision internals (~3.5 ns).

Special values follow NumPy: exp overflows to inf and underflows to 0 through the subnormals, log(0) = -inf,
log(x < 0) = nan, tanh(+-inf) = +-1, sigmoid(-inf) = 0, erf(+-inf) = +-1, sin/cos(+-inf) = nan, the sign
of zero is kept by the odd functions (tanh, erf, sin, expm1), NaN in gives NaN out, and pow follows C99 pow
(pow(x, 0) = 1, pow(1, y) = 1, pow(-8, 1/3) = nan, pow(-2, 3) = -8, pow(0, -1) = inf, ...).
"""

from __future__ import annotations

from llvmlite import ir

__all__ = ["FUNCTIONS", "function", "pow_function"]

FUNCTIONS = ("exp", "expm1", "log", "tanh", "sigmoid", "erf", "sin", "cos")

F64 = ir.DoubleType()
INF, NAN = float("inf"), float("nan")

# Constants split in a high part and a low part (hi + lo = value to twice the precision of the type).
LOG2E = float.fromhex("0x1.71547652b82fep0")
LN2_HI, LN2_LO = float.fromhex("0x1.62e42fefa39efp-1"), float.fromhex("0x1.abc9e3b39803fp-56")  # ln 2 in two doubles
LN2_HI_F32, LN2_LO_F32 = float.fromhex("0x1.62e430p-1"), -float.fromhex("0x1.05c610p-29")  # ln 2 in two floats
TWO_OVER_PI, TWO_OVER_PI_LO = float.fromhex("0x1.45f306dc9c883p-1"), -3.935735335036497e-17
PIO2_1 = float.fromhex("0x1.921fb54442d18p0")  # pi/2 in three doubles
PIO2_2 = float.fromhex("0x1.1a62633145c07p-54")
PIO2_3 = -float.fromhex("0x1.f1976b7ed8fbcp-110")

# 2/pi in chunks of 28 bits (for the exact float32 reduction): 2/pi = sum of these + 3e-68.
_TWO_OVER_PI_CHUNKS = (
    0.6366197690367699, 3.3308114738561656e-09, 2.276010047810136e-18, 2.5268260189002822e-26, 1.6682867657019525e-34,
    1.158871328288855e-43, 7.053959174404295e-52, 8.910067885731021e-60,
)

# ---- Polynomial coefficients, lowest degree first --------------------------------------------------------------
# exp(r) = 1 + r + r^2 E(r) for |r| <= ln2/2 (fitted on a slightly wider interval).
_EXP_F64 = (  # (exp(r) - 1 - r) / r^2: degree 10 on [-0.35, 0.35], fit error 1.6e-18
    0.5, 0.1666666666666667, 0.04166666666666667, 0.008333333333325551, 0.0013888888888883332, 0.00019841269876840357,
    2.480158732699005e-05, 2.755725286336732e-06, 2.755727183153613e-07, 2.5106262550879078e-08,
    2.0915433598076003e-09,
)
_EXP_F32 = (  # (exp(r) - 1 - r) / r^2: degree 6 on [-0.35, 0.35], fit error 2.9e-11
    0.5, 0.16666666722181583, 0.041666666722163556, 0.008333297083738308, 0.0013888852650225144,
    0.00019900428151915095, 2.4860731885840675e-05,
)
# log(1 + f) = 2 atanh(s) = 2s + s z (2/3 + z L(z)), s = f / (2 + f), z = s^2, |s| <= (sqrt2 - 1) / (sqrt2 + 1).
_LOG_F64 = (  # (2 atanh(s)/s - 2 - 2z/3) / z^2, z = s^2: degree 7 on [0, 0.0295], fit error 1.9e-18
    0.4, 0.2857142857142938, 0.2222222222164882, 0.1818181833699257, 0.15384594791762352, 0.13334813971292003,
    0.11705988156500907, 0.11725771221811145,
)
_LOG_F32 = (  # (2 atanh(s)/s - 2 - 2z/3) / z^2, z = s^2: degree 3 on [0, 0.0295], fit error 9.8e-10
    0.3999999990414776, 0.28571532463591487, 0.22204689410867448, 0.19122430398325344,
)
# sin(r) = r + r z S(z) and cos(r) = 1 - z/2 + z^2 C(z) for |r| <= pi/4 (fitted up to |r| = 0.8), z = r^2.
_SIN_F64 = (  # (sin(r)/r - 1) / z, z = r^2: degree 6 on [0, 0.64], fit error 1.5e-20
    -0.16666666666666666, 0.008333333333333331, -0.000198412698412641, 2.7557319218602575e-06,
    -2.5052105981350752e-08, 1.6058492556729892e-10, -7.584436884170301e-13,
)
_COS_F64 = (  # (cos(r) - 1 + z/2) / z^2, z = r^2: degree 5 on [0, 0.64], fit error 1.6e-18
    0.041666666666666664, -0.0013888888888887096, 2.4801587298318395e-05, -2.755731704403567e-07,
    2.0876099692314926e-09, -1.1379338585298136e-11,
)
# float32 sin/cos are computed in double precision, so these are double coefficients of lower degree.
_SIN_F32 = (  # (sin(r)/r - 1) / z, z = r^2: degree 3 on [0, 0.64], fit error 3.3e-11
    -0.16666666663409865, 0.008333331704724155, -0.00019839996607644324, 2.7238454628945354e-06,
)
_COS_F32 = (  # (cos(r) - 1 + z/2) / z^2, z = r^2: degree 3 on [0, 0.64], fit error 2.7e-12
    0.041666666663949484, -0.0013888887530147357, 2.4800525153789957e-05, -2.7291384736662117e-07,
)
# float64 erf(x) = x P(x^2) for |x| < 0.84375.
_ERF_F64 = (  # erf(x)/x, z = x^2: degree 11 on [0, 0.711914], fit error 1.4e-19
    1.1283791670955126, -0.3761263890318375, 0.11283791670954745, -0.026866170645031, 0.005223977624080742,
    -0.000854832691425112, 0.00012055327421282683, -1.4925463570287675e-05, 1.6457914349746103e-06,
    -1.630309508468887e-07, 1.4205594850504056e-08, -8.879702704985848e-10,
)
# For |x| >= 0.84375: erf(x) = 1 - erfc(x) and erfc(x) = exp(-x^2 + L(x)), where L(x) = log(erfc(x) exp(x^2))
# is smooth and slowly varying. L is a polynomial in t = x - center on each piece [lo, hi). An error in L is a
# relative error in erfc, i.e. an absolute error erfc(x) times smaller in erf: the further pieces can be coarser.
# Each entry: (lo, center, coefficients).
_ERFC_F64 = (
    (0.84375, 1.046875, (  # degree 12 on [-0.203125, 0.203125], fit error 1.4e-20
        -0.8792166097938009, -0.6245286954481708, 0.1511784762335991, -0.039722722583350197, 0.009578162192892386,
        -0.0019100940977713988, 0.000244355685052977, 1.6825266320691746e-05, -2.3298230432740783e-05,
        8.646503173844203e-06, -1.9492780810227756e-06, 1.5612328133890568e-07, 9.121051145593307e-08,
    )),
    (1.25, 1.625, (  # degree 12 on [-0.375, 0.375], fit error 1.3e-18
        -1.1964637037779426, -0.48312595907261746, 0.09821497034207846, -0.02300896732574307, 0.005270029325498801,
        -0.0011028409215932031, 0.0001954904423173438, -2.3963973808970044e-05, -4.966432939613971e-07,
        1.500748007480828e-06, -5.828538438387535e-07, 1.5162941430542587e-07, -2.6500507606690884e-08,
    )),
    (2.0, 2.5, (  # degree 12 on [-0.5, 0.5], fit error 2.8e-17 (erfc(2) = 4.7e-3: below 1e-19 in erf)
        -1.5568152727272644, -0.3526807509863917, 0.05610626647586017, -0.010858072738456404, 0.0021654768989770525,
        -0.0004209325638726634, 7.703080579685223e-05, -1.2755806400551193e-05, 1.768975149592741e-06,
        -1.5618693102422957e-07, -1.2566012076331478e-08, 1.1625474783149347e-08, -3.645750293514321e-09,
    )),
    (3.0, 4.5, (  # degree 12 on [-1.5, 1.5], fit error 1.1e-13 (erfc(3) = 2.2e-5: below 3e-18 in erf)
        -2.099768303435941, -0.21240127528524289, 0.02163711034073506, -0.002825260864908224, 0.0003994338405226801,
        -5.7982909346856585e-05, 8.432036975683925e-06, -1.210352855956568e-06, 1.694841915862674e-07,
        -2.2836243252743565e-08, 2.935376443421565e-09, -3.658034356338338e-10, 3.557074125461757e-11,
    )),
)
# float32 erf (see _erf_f32). Fitted by weighted minimax (Lawson's iteration on least squares, Chebyshev nodes),
# then the coefficients rounded to float32 one at a time, lowest degree first, refitting the higher ones.
_ERF_F32_SMALL = (  # (erf(a)/a - 2/sqrt(pi)) / z, z = a^2, for a in [0, 1]: relative error in erf 1.5e-9
    -0.3761262893676758, 0.11283604055643082, -0.026854272931814194, 0.005188812967389822, -0.0008011997560970485,
    7.853474380681291e-05,
)
_ERF_F32_LARGE = (  # log2 erfc(a), a in [1, 4]: error weighted by erfc(a) ln 2 (its error in erf) 1.6e-8
    -0.0038544624112546444, -1.612122893333435, -0.9442281126976013, -0.12787191569805145, 0.021320238709449768,
    -0.0016596937784925103,
)
_EXP2_F32 = (  # 2^f, f in [-0.5, 0.5], constant term 1: relative error 9.3e-8
    1.0, 0.6931470036506653, 0.24022246897220612, 0.0555071085691452, 0.009671292267739773, 0.0013269535265862942,
)
_ERF_C0_HI_F32, _ERF_C0_LO_F32 = 1.128379225730896, -5.863538343753305e-08  # 2/sqrt(pi) = hi + lo, hi a float32
_ERF_F32_SPLIT = 1.0  # |x| above this: 1 - 2^W(|x|)
_ERF_F32_CLAMP = 4.0  # erf rounds to 1 beyond 3.92; the formula gives exactly 1 here
# float32 tanh (see _tanh_f32): tanh(y) = y P(z)/Q(z), z = y^2, with P of degree 3 and Q of degree 2, written as
# tanh(y) = y + y z C(z)/Q(z), C = (P - Q)/z. A rational, not a polynomial: tanh has poles at +-i pi/2, so a
# polynomial needs about twice the terms. Fitted (weighted minimax by Lawson's iteration on a linearized least
# squares, Chebyshev nodes) for relative error on y in [0, 1.25], and on [0.625, 4.6] for the error it leaves in
# tanh(2y) through the doubling formula (weight 2t^2(1 - t^2)/(1 + t^2)^2, floored at 1e-3 so that 1 - t is
# still right to 15% at y = 4.6 and tanh(9.2) rounds to 1). Fit error, with the coefficients rounded to float32:
# 2.1e-8 relative on [0, 1.25] (0.36 ulp), 2.9e-8 absolute in tanh(2y) (0.49 ulp).
_TANH_F32_C = (-0.33333313, -0.015601642, -4.429141e-06)  # float32 values
_TANH_F32_Q = (1.0, 0.44680262, 0.016832573)
_TANH_F32_SPLIT = 1.25  # |x| above this: the doubling formula on y = |x|/2
_TANH_F32_CLAMP = 9.2  # tanh rounds to 1 beyond 9.011; the formula gives exactly 1 here


class _Emitter:
    """Straight-line floating-point code of one type `ty` through an IRBuilder; Python numbers become constants."""

    def __init__(self, builder: ir.IRBuilder, ty):
        self.b, self.ty = builder, ty
        self.f64 = isinstance(ty, ir.DoubleType)
        self.ity = ir.IntType(64 if self.f64 else 32)  # the integer type with the same bits
        self.mant_bits, self.exp_bias = (52, 1023) if self.f64 else (23, 127)

    def _v(self, x):
        return ir.Constant(self.ty, float(x)) if isinstance(x, (int, float)) else x

    def _intrinsic(self, name: str, nargs: int):
        fnty = ir.FunctionType(self.ty, [self.ty] * nargs)
        return self.b.module.declare_intrinsic(name, [self.ty], fnty)

    # arithmetic (each one IEEE operation, one rounding)
    def add(self, a, b):
        return self.b.fadd(self._v(a), self._v(b))

    def sub(self, a, b):
        return self.b.fsub(self._v(a), self._v(b))

    def mul(self, a, b):
        return self.b.fmul(self._v(a), self._v(b))

    def div(self, a, b):
        return self.b.fdiv(self._v(a), self._v(b))

    def neg(self, a):
        return self.b.fneg(self._v(a))

    def fma(self, a, b, c):
        """a * b + c with a single rounding."""
        return self.b.call(self._intrinsic("llvm.fma", 3), [self._v(a), self._v(b), self._v(c)])

    def abs(self, a):
        return self.b.call(self._intrinsic("llvm.fabs", 1), [self._v(a)])

    def floor(self, a):
        return self.b.call(self._intrinsic("llvm.floor", 1), [self._v(a)])

    def rint(self, a):
        """Round to the nearest integer (ties to even)."""
        return self.b.call(self._intrinsic("llvm.rint", 1), [self._v(a)])

    def copysign(self, magnitude, sign):
        return self.b.call(self._intrinsic("llvm.copysign", 2), [self._v(magnitude), self._v(sign)])

    # comparisons: ordered (false when either side is NaN), except isnan
    def lt(self, a, b):
        return self.b.fcmp_ordered("<", self._v(a), self._v(b))

    def gt(self, a, b):
        return self.b.fcmp_ordered(">", self._v(a), self._v(b))

    def ge(self, a, b):
        return self.b.fcmp_ordered(">=", self._v(a), self._v(b))

    def eq(self, a, b):
        return self.b.fcmp_ordered("==", self._v(a), self._v(b))

    def ne(self, a, b):
        return self.b.fcmp_ordered("!=", self._v(a), self._v(b))

    def isnan(self, a):
        return self.b.fcmp_unordered("uno", self._v(a), self._v(a))

    def select(self, cond, a, b):
        return self.b.select(cond, self._v(a), self._v(b))

    def clamp(self, x, lo, hi):
        """min(max(x, lo), hi), with NaN going to lo (so that later integer conversions stay defined)."""
        x = self.select(self.gt(x, lo), x, lo)
        return self.select(self.lt(x, hi), x, hi)

    # composites
    def poly(self, x, coeffs):
        """c0 + c1 x + c2 x^2 + ... by Horner's rule with fused multiply-adds."""
        acc = self._v(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, c)
        return acc

    def two_sum(self, a, b):
        """(s, err) with s = fl(a + b) and s + err = a + b exactly (Knuth's TwoSum)."""
        s = self.add(a, b)
        bb = self.sub(s, a)
        err = self.add(self.sub(a, self.sub(s, bb)), self.sub(b, bb))
        return s, err

    def fast_two_sum(self, a, b):
        """(s, err) with s = fl(a + b) and s + err = a + b exactly, given |a| >= |b| (Dekker's Fast2Sum)."""
        s = self.add(a, b)
        return s, self.sub(b, self.sub(s, a))

    def div_sum(self, a, d_hi, d_lo, a_lo=0.0):
        """(a + a_lo) / (d_hi + d_lo) to about half an ulp: a quotient, then one correction from its residual."""
        rcp = self.div(1.0, d_hi)
        q = self.mul(a, rcp)
        residual = self.sub(self.add(self.fma(self.neg(q), d_hi, a), a_lo), self.mul(q, d_lo))
        return self.fma(residual, rcp, q)

    def two_prod(self, a, b):
        """(p, err) with p = fl(a * b) and p + err = a * b exactly."""
        p = self.mul(a, b)
        return p, self.fma(a, b, self.neg(p))

    def pow2(self, k):
        """2**k for an integral float k in the normal exponent range, built from its exponent bits."""
        i = self.b.fptosi(k, ir.IntType(32))
        if self.f64:
            i = self.b.sext(i, self.ity)
        biased = self.b.add(i, ir.Constant(self.ity, self.exp_bias))
        return self.b.bitcast(self.b.shl(biased, ir.Constant(self.ity, self.mant_bits)), self.ty)

    def scale(self, p, n):
        """p * 2**n for an integral float n that may lie slightly outside the normal exponent range: the scaling
        is split in two factors that are both normal, so overflow gives inf and underflow rounds once."""
        n1 = self.floor(self.mul(n, 0.5))
        return self.mul(self.mul(p, self.pow2(n1)), self.pow2(self.sub(n, n1)))


# ---- exp and expm1 ------------------------------------------------------------------------------------------------
def _exp_reduce(e: _Emitter, hi, lo=None):
    """Cody-Waite reduction of x = hi (+ lo): x = n ln2 + r with |r| <= ln2/2 (slightly more when rounding).

    Returns (n, r, r_lo) where r_lo is the part of r smaller than its last bit (or None). hi is clamped to
    where exp over/underflows, NaN goes to the low end (callers restore NaN).
    """
    lo_lim, hi_lim = (-746.0, 710.0) if e.f64 else (-104.0, 89.0)
    x = e.clamp(hi, lo_lim, hi_lim)
    n = e.rint(e.mul(x, LOG2E))
    ln2_hi, ln2_lo = (LN2_HI, LN2_LO) if e.f64 else (LN2_HI_F32, LN2_LO_F32)
    r = e.fma(n, -ln2_hi, x)  # exact: x and n ln2_hi agree in their leading bits
    if lo is None:
        return n, e.fma(n, -ln2_lo, r), None
    # x was clamped: then the low part no longer belongs to it (and may be inf - inf = nan from the caller)
    lo = e.select(e.eq(x, hi), lo, 0.0)
    tail = e.fma(n, -ln2_lo, lo)
    r_hi = e.add(r, tail)
    return n, r_hi, e.add(e.sub(r, r_hi), tail)  # r_hi + r_lo = r + tail, to about twice the precision


def _expm1_r(e: _Emitter, r, r_lo=None):
    """exp(r) - 1 on the reduced interval, as r + t with t = r^2 E(r) small (plus (1 + r) r_lo for a low part)."""
    t = e.mul(e.mul(r, r), e.poly(r, _EXP_F64 if e.f64 else _EXP_F32))
    if r_lo is not None:
        t = e.add(t, e.fma(r, r_lo, r_lo))
    return r, t


def _exp_core(e: _Emitter, hi, lo=None):
    """exp(hi + lo) for non-NaN input: exp(n ln2 + r) = 2^n (1 + expm1(r))."""
    n, r, r_lo = _exp_reduce(e, hi, lo)
    r, t = _expm1_r(e, r, r_lo)
    return e.scale(e.add(1.0, e.add(r, t)), n)


def _exp(e: _Emitter, x):
    # below the underflow limit the result is 0: compute those lanes at x = 0 instead, since scaling down into
    # the subnormals costs a microcode assist per element (exp(-inf) in a masked softmax ran at half speed)
    zero = e.lt(x, -746.0 if e.f64 else -104.0)
    y = _exp_core(e, e.select(zero, 0.0, x))
    return e.select(e.isnan(x), x, e.select(zero, 0.0, y))


def _expm1_parts(e: _Emitter, x):
    """exp(x) - 1 as an unevaluated sum hi + lo, for non-NaN x.

    exp(x) - 1 = 2^n (1 + u) - 1 with u = expm1(r), computed as 2 (s u + (s - 1/2)) with s = 2^(n-1). u, s - 1/2
    and the sum are carried with their rounding errors (for n = +-1 the sum cancels a little, and tanh needs the
    low part of results near -1). Below -40, exp(x) - 1 is -1 for all that matters (also to tanh); the clamp
    there keeps 2^(n-1) normal."""
    x_c = e.select(e.lt(x, -40.0), -40.0, x)
    n, r, r_lo = _exp_reduce(e, x_c, 0.0)
    u_hi, u_lo = e.fast_two_sum(*_expm1_r(e, r, r_lo))
    s = e.pow2(e.sub(n, 1.0))
    s_m, s_m_lo = e.two_sum(s, -0.5)
    v, v_lo = e.two_sum(e.mul(s, u_hi), s_m)
    return e.mul(v, 2.0), e.mul(e.fma(s, u_lo, e.add(v_lo, s_m_lo)), 2.0)


def _expm1(e: _Emitter, x):
    result = e.add(*_expm1_parts(e, x))
    result = e.select(e.lt(e.abs(x), 2.0**-60), x, result)  # expm1(x) = x there; keeps -0.0 and the subnormals
    return e.select(e.isnan(x), x, result)


# ---- log --------------------------------------------------------------------------------------------------------
def _log_reduce(e: _Emitter, x):
    """x = 2^k m with m in [sqrt(1/2), sqrt(2)), for positive finite x (subnormals included).

    Returns (k as a float, f = m - 1 exactly)."""
    tiny = e.lt(x, 2.0**-1022 if e.f64 else 2.0**-126)  # subnormal: scale into the normals first
    extra = 54 if e.f64 else 25
    x = e.select(tiny, e.mul(x, 2.0**extra), x)
    bits = e.b.bitcast(x, e.ity)
    # Subtracting the bits of sqrt(1/2) makes the exponent field count from sqrt(1/2) instead of 1, so one
    # arithmetic shift gives k (no compare-and-adjust), and removing k from the exponent field gives m.
    sqrt_half = 0x3FE6A09E667F3BCD if e.f64 else 0x3F3504F3
    k = e.b.ashr(e.b.sub(bits, ir.Constant(e.ity, sqrt_half)), ir.Constant(e.ity, e.mant_bits))
    m = e.b.bitcast(e.b.sub(bits, e.b.shl(k, ir.Constant(e.ity, e.mant_bits))), e.ty)
    kf = e.sub(e.b.sitofp(k, e.ty), e.select(tiny, float(extra), 0.0))
    return kf, e.sub(m, 1.0)  # exact (Sterbenz)


def _log1p_small(e: _Emitter, f):
    """log(1 + f) for f in [sqrt(1/2) - 1, sqrt(2) - 1], as f - (f^2/2 - s (f^2/2 + R)) (fdlibm's arrangement:
    f is exact and the correction is small, so the rounding errors land on the small term)."""
    s = e.div(f, e.add(2.0, f))
    z = e.mul(s, s)
    R = e.mul(z, e.fma(z, e.poly(z, _LOG_F64 if e.f64 else _LOG_F32), 2.0 / 3.0))  # 2 atanh(s) - 2s = s R
    hfsq = e.mul(e.mul(f, f), 0.5)
    return e.sub(f, e.sub(hfsq, e.mul(s, e.add(hfsq, R))))


def _log(e: _Emitter, x):
    k, f = _log_reduce(e, x)
    ln2_hi, ln2_lo = (LN2_HI, LN2_LO) if e.f64 else (LN2_HI_F32, LN2_LO_F32)
    result = e.fma(k, ln2_hi, e.fma(k, ln2_lo, _log1p_small(e, f)))  # k ln2 + log(m)
    result = e.select(e.eq(x, INF), INF, result)
    result = e.select(e.eq(x, 0.0), -INF, result)
    return e.select(e.b.fcmp_unordered("<", x, e._v(0.0)), NAN, result)  # x < 0 or NaN


def _log_dd(e: _Emitter, x):
    """log(x) as an unevaluated sum hi + lo good to about 2^-66 relative (float64, positive finite x), for pow.

    Same reduction and series as _log, with the large terms carried in double-double arithmetic:
    log(1 + f) = 2s + s z (2/3 + z L(z)), s = f / (2 + f)."""
    k, f = _log_reduce(e, x)
    d_hi, d_lo = e.fast_two_sum(2.0, f)  # 2 + f exactly
    s_hi = e.div(f, d_hi)
    s_lo = e.div(e.sub(e.fma(e.neg(s_hi), d_hi, f), e.mul(s_hi, d_lo)), d_hi)  # s = f / (2 + f) = s_hi + s_lo
    z_hi, z_lo = e.two_prod(s_hi, s_hi)
    z_lo = e.fma(e.mul(s_hi, 2.0), s_lo, z_lo)  # z = s^2 = z_hi + z_lo
    w = e.mul(z_hi, e.poly(z_hi, _LOG_F64))  # z L(z): small, plain double precision is enough
    q_hi, q_lo = e.two_sum(2.0 / 3.0, w)
    q_lo = e.add(q_lo, float.fromhex("0x1.5555555555555p-55"))  # 2/3 - fl(2/3)
    sz_hi, sz_lo = e.two_prod(s_hi, z_hi)  # s z
    sz_lo = e.add(sz_lo, e.fma(s_hi, z_lo, e.mul(s_lo, z_hi)))
    t_hi, t_lo = e.two_prod(sz_hi, q_hi)  # t = s z q = 2 atanh(s) - 2s
    t_lo = e.add(t_lo, e.fma(sz_hi, q_lo, e.mul(sz_lo, q_hi)))
    a_hi, a_lo = e.two_sum(e.mul(s_hi, 2.0), t_hi)  # log(1 + f) = 2 s + t
    a_lo = e.add(a_lo, e.fma(s_lo, 2.0, t_lo))
    k_hi, k_lo = e.two_prod(k, LN2_HI)  # + k ln2
    b_hi, b_lo = e.two_sum(k_hi, a_hi)
    return b_hi, e.add(b_lo, e.add(k_lo, e.fma(k, LN2_LO, a_lo)))


# ---- tanh, sigmoid ----------------------------------------------------------------------------------------------
def _tanh_f32(e: _Emitter, x):
    """float32 tanh: one rational approximation t(y) ~ tanh(y), one division, no exp.

    |x| <= 1.25: tanh(a) = a + a z r, r = C(z)/Q(z), z = a^2. The leading term a is exact and the rational part
    is at most 0.47 of the result, so its rounding errors are damped (x P/Q instead reaches 2.4 ulp).
    |x| > 1.25: with y = a/2 and t = N/Q = tanh(y), N = y P(z) = yQ + yz C, z = y^2:
    1 - tanh(a) = (1 - t)^2/(1 + t^2) = r = D^2/S, D = Q - N (exact: t >= 0.55 there), S = N^2 + Q^2, and
    tanh(a) = 1 - r. r <= 0.15 and an error e in t moves tanh(a) by about 2(1 - t)e: no large term of the
    rational ends up in the result (x P/Q over the whole range reaches 5.6 ulp near 1, from Horner's rounding).
    Both branches share the rational and the division; the choice is made per element by selects (which LLVM
    folds into masked operations). Cost per element: 12 multiplies or fmas, one division, and 8 cheap operations
    (compares, adds, bit operations); the multiplies and the division are what count (AVX-512 on Zen 4: 0.29 ns
    per element, NumPy 0.36 ns). Largest error 1.58 ulp (every float32), at |x| ~ 1.11 where both branches are
    at their weakest."""
    i32 = e.ity
    ax = e.abs(x)
    a = e.select(e.gt(ax, _TANH_F32_CLAMP), _TANH_F32_CLAMP, ax)  # NaN passes (the compare is false)
    large = e.gt(a, _TANH_F32_SPLIT)  # false for NaN: the small branch, which keeps it
    bits = e.b.bitcast(a, i32)  # y = a/2 on the large branch, by the exponent bits (a is normal there)
    y = e.b.bitcast(e.b.select(large, e.b.sub(bits, ir.Constant(i32, 1 << 23)), bits), e.ty)
    z = e.mul(y, y)
    yz = e.mul(y, z)
    C = e.poly(z, _TANH_F32_C)
    Q = e.poly(z, _TANH_F32_Q)
    N = e.fma(yz, C, e.mul(y, Q))  # y P(z)
    D = e.sub(Q, N)
    num = e.select(large, e.mul(D, D), C)
    den = e.select(large, e.fma(Q, Q, e.mul(N, N)), Q)  # written so that the select folds into a masked fma
    r = e.div(num, den)
    result = e.select(large, e.sub(1.0, r), e.fma(yz, r, y))
    return e.copysign(result, x)  # odd; keeps -0.0; tiny and subnormal x give x (z and yz underflow to 0)


def _tanh(e: _Emitter, x):
    if not e.f64:
        return _tanh_f32(e, x)
    # tanh|x| = (1 - e^{-2|x|}) / (1 + e^{-2|x|}) = -u / (u + 2) with u = expm1(-2|x|) in (-1, 0]: no overflow,
    # no cancellation for small |x| (u ~ -2|x|), and the sign (including -0.0) comes back from x.
    # u and u + 2 are carried in two parts, so the quotient is rounded only once.
    u_hi, u_lo = _expm1_parts(e, e.mul(e.abs(x), -2.0))
    d_hi, d_lo = e.fast_two_sum(2.0, u_hi)
    t = e.div_sum(e.neg(u_hi), d_hi, e.add(d_lo, u_lo), e.neg(u_lo))
    return e.copysign(e.select(e.isnan(x), x, t), x)


def _sigmoid(e: _Emitter, x):
    # 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) for x < 0, both with t = e^-|x| in (0, 1]: no overflow.
    # 1 + t is carried exactly, so the result's error is that of t (scaled by at most 1) plus half an ulp.
    t = _exp_core(e, e.neg(e.abs(x)))
    d_hi, d_lo = e.fast_two_sum(1.0, t)
    result = e.div_sum(e.select(e.ge(x, 0.0), 1.0, t), d_hi, d_lo)
    return e.select(e.isnan(x), x, result)


# ---- erf ----------------------------------------------------------------------------------------------------------
def _erf_f32(e: _Emitter, x):
    """float32 erf: two polynomials of degree 5 and one exp2, no division, all in float32.

    |x| <= 1: erf(a) = a c0 + a z P(z), z = a^2, with c0 = 2/sqrt(pi) in two parts (a c0_hi rounded once, in
    the final fma: tiny and subnormal x give 2/sqrt(pi) x to within an ulp).
    1 < |x| <= 4: erf(a) = 1 - 2^w, w = W(a) ~ log2 erfc(a) (a polynomial in a itself: the -a^2 log2(e) of
    log2 erfc is part of it, so exp's argument has no separate x^2 to round). 2^w = 2^n 2^f, n = w rounded to
    an integer by adding 1.5 2^23 (whose low bits then hold n + 127: shifted into the exponent field, 2^n),
    f = w - n in [-1/2, 1/2], 2^f by a polynomial; and 1 - 2^f 2^n is one fma. Only erfc's error relative to 1
    counts, at most erfc(1) = 0.157 times its own: W and 2^f need no more than about 1e-7 relative.
    Beyond 4 (erf rounds to 1 from 3.92 on) a is clamped to 4, where the formula gives exactly 1; NaN passes the
    clamp and the compare (false) sends it to the small branch. Both branches are computed, one is selected.
    Cost per element: 21 multiplies or fmas and ~10 cheap operations (AVX-512 on Zen 4: 0.39 ns per element;
    the previous version, exp of a double-word argument, 1.25 ns). Largest error 1.31 ulp (every float32),
    at |x| just above 1, where erfc is largest."""
    i32 = e.ity
    ax = e.abs(x)
    a = e.select(e.gt(ax, _ERF_F32_CLAMP), _ERF_F32_CLAMP, ax)  # NaN passes (the compare is false)
    z = e.mul(a, a)
    small = e.fma(a, _ERF_C0_HI_F32, e.mul(a, e.fma(z, e.poly(z, _ERF_F32_SMALL), _ERF_C0_LO_F32)))
    w = e.poly(a, _ERF_F32_LARGE)  # log2 erfc(a), in [-26, -2.7] on the large branch
    magic = 12582912.0 + 127.0  # 1.5 2^23 (rounds to integers) + the exponent bias
    k = e.add(w, magic)
    n = e.sub(k, magic)
    p = e.poly(e.sub(w, n), _EXP2_F32)  # 2^f
    pow2n = e.b.bitcast(e.b.shl(e.b.bitcast(k, i32), ir.Constant(i32, 23)), e.ty)
    result = e.select(e.gt(a, _ERF_F32_SPLIT), e.fma(e.neg(p), pow2n, 1.0), small)
    return e.copysign(result, x)  # erf is odd: this also keeps erf(-0.0) = -0.0


def _erf(e: _Emitter, x):
    if not e.f64:
        return _erf_f32(e, x)
    ax = e.abs(x)
    # Small |x|: x P(x^2) = x c0 + x (z Q(z)), with the leading coefficient 2/sqrt(pi) in two parts c0_hi + c0_lo
    # so that the big term x c0 is rounded only once.
    coeffs, c0_lo = _ERF_F64, 1.533545961316588e-17
    z = e.mul(x, x)
    small = e.fma(x, coeffs[0], e.mul(x, e.fma(z, e.poly(z, coeffs[1:]), c0_lo)))
    # Tail: pick the piece's center and coefficients per element with selects (one polynomial evaluation).
    pieces = _ERFC_F64
    one_beyond = 6.0  # erf(x) rounds to 1 beyond this (NaN goes there too)
    a = e.select(e.lt(ax, one_beyond), ax, one_beyond)
    center, coeffs = e._v(pieces[0][1]), [e._v(c) for c in pieces[0][2]]
    for lo, c, cs in pieces[1:]:
        use = e.ge(a, lo)
        center = e.select(use, c, center)
        coeffs = [e.select(use, new, old) for new, old in zip(cs, coeffs)]
    L = e.poly(e.sub(a, center), coeffs)
    a2_hi, a2_lo = e.two_prod(a, a)  # -a^2 + L exactly as hi + lo: exp's argument must be exact to ~2^-60
    arg_hi, arg_lo = e.two_sum(L, e.neg(a2_hi))
    erfc = _exp_core(e, arg_hi, e.sub(arg_lo, a2_lo))
    small_or_nan = e.b.fcmp_unordered("<", ax, e._v(0.84375))  # NaN takes the small path and stays NaN
    result = e.select(small_or_nan, small, e.sub(1.0, erfc))
    return e.copysign(result, x)  # erf is odd: this also keeps erf(-0.0) = -0.0


# ---- sin, cos -----------------------------------------------------------------------------------------------------
def _reduce_pio2_f64(e: _Emitter, x):
    """x = n pi/2 + (r_hi + r_lo), |r| <= pi/4, for double x (Cody-Waite, pi/2 in three doubles).

    n is x 2/pi rounded, with the product itself carried in two parts so that n is right even for large x.
    x - n P1 is exact (both are multiples of 2^-52 and the difference is below 1), and the rest is carried in
    double-double, so r is accurate to far below an ulp while n is an exact integer, |x| < 2^53; beyond, see the
    module docstring."""
    p_hi = e.mul(x, TWO_OVER_PI)
    p_lo = e.fma(x, TWO_OVER_PI_LO, e.fma(x, TWO_OVER_PI, e.neg(p_hi)))
    n = e.rint(p_hi)
    n = e.add(n, e.rint(e.add(e.sub(p_hi, n), p_lo)))
    r1 = e.fma(n, -PIO2_1, x)
    t_hi, t_lo = e.two_prod(n, PIO2_2)
    r2, r2_err = e.two_sum(r1, e.neg(t_hi))
    return n, *e.fast_two_sum(r2, e.fma(n, -PIO2_3, e.sub(r2_err, t_lo)))


def _reduce_pio2_f32(e: _Emitter, x):
    """|x| = n pi/2 + r for a float32 x held in double: exact over the whole float range, without tables.

    A float has 24 significant bits and each chunk of 2/pi below has 28, so every product |x| c_k is exact in
    double, and so is its remainder mod 4. The remainders are summed in double-double; the whole number part
    of the sum gives n (mod 4, which is all sin and cos need) and the fraction gives r. Chunks whose product is
    a multiple of 4 drop out by themselves, so the same code serves |x| = 1e-45 and |x| = 3e38."""
    ax = e.abs(x)
    acc, acc_lo = None, e._v(0.0)
    for chunk in _TWO_OVER_PI_CHUNKS:
        p = e.mul(ax, chunk)
        p = e.fma(e.floor(e.mul(p, 0.25)), -4.0, p)  # p mod 4, exact
        if acc is None:
            acc = p
        else:
            acc, err = e.two_sum(acc, p)
            acc_lo = e.add(acc_lo, err)
    acc = e.fma(e.floor(e.mul(acc, 0.25)), -4.0, acc)
    n = e.rint(acc)
    f = e.add(e.sub(acc, n), acc_lo)  # |x| 2/pi - n (mod 4), in [-1/2, 1/2]
    return n, e.mul(f, PIO2_1)


def _sincos(e: _Emitter, which: str, n, r, r_lo, sin_coeffs, cos_coeffs):
    """sin or cos of n pi/2 + r (+ r_lo): the polynomials on r, then the quadrant q = n mod 4."""
    r = e.clamp(r, -0.8, 0.8)  # no effect where the reduction is accurate; keeps huge |x| in range
    z = e.mul(r, r)
    hz = e.mul(z, 0.5)
    # sin(r + r_lo) = r + r z S(z) + r_lo (1 - z/2)
    sin_small = e.mul(e.mul(r, z), e.poly(z, sin_coeffs))
    if r_lo is not None:
        r_lo = e.select(e.lt(e.abs(r_lo), 2.0**-40), r_lo, 0.0)
        sin_small = e.add(sin_small, e.fma(r_lo, e.neg(hz), r_lo))
    sin_r = e.add(r, sin_small)
    # cos(r + r_lo) = 1 - z/2 + z^2 C(z) - r r_lo; w = 1 - z/2 is rounded, and (1 - w) - z/2 is that rounding error
    w = e.sub(1.0, hz)
    cos_small = e.fma(e.mul(z, z), e.poly(z, cos_coeffs), e.sub(e.sub(1.0, w), hz))
    if r_lo is not None:
        cos_small = e.fma(e.neg(r), r_lo, cos_small)
    cos_r = e.add(w, cos_small)
    # sin x = (s, c, -s, -c)[q], cos x = (c, -s, -c, s)[q]; q = n mod 4 is exact in floating point
    q = e.fma(e.floor(e.mul(n, 0.25)), -4.0, n)
    odd = e.b.or_(e.eq(q, 1.0), e.eq(q, 3.0))
    if which == "sin":
        v = e.select(odd, cos_r, sin_r)
        return e.select(e.ge(q, 2.0), e.neg(v), v)
    v = e.select(odd, sin_r, cos_r)
    return e.select(e.b.or_(e.eq(q, 1.0), e.eq(q, 2.0)), e.neg(v), v)


def _sin_or_cos(which: str):
    def body(e: _Emitter, x):
        if e.f64:
            n, r, r_lo = _reduce_pio2_f64(e, x)
            v = _sincos(e, which, n, r, r_lo, _SIN_F64, _COS_F64)
        else:  # float32: reduce exactly and evaluate in double, round once at the end
            d = _Emitter(e.b, F64)
            xd = e.b.fpext(x, F64)
            n, r = _reduce_pio2_f32(d, xd)
            v = _sincos(d, which, n, r, None, _SIN_F32, _COS_F32)
            if which == "sin":  # the reduction was of |x|
                v = d.select(d.lt(xd, 0.0), d.neg(v), v)
            v = e.b.fptrunc(v, e.ty)
        if which == "sin":
            v = e.select(e.eq(x, 0.0), x, v)  # sin(-0.0) = -0.0
        return e.select(e.lt(e.abs(x), INF), v, NAN)  # inf and NaN -> NaN

    return body


# ---- pow ------------------------------------------------------------------------------------------------------------
def _pow_f64(e: _Emitter, x, y, exact_log: bool):
    """x**y in double: |x|**y = exp(y log|x|), then the sign and the special cases of C99 / NumPy.

    With exact_log, log|x| and the product y log|x| are carried as double-double (needed for float64: an
    error d in y log|x| is a relative error d in the result, and y log|x| reaches 745)."""
    ax = e.abs(x)
    if exact_log:
        l_hi, l_lo = _log_dd(e, ax)
        p_hi, p_lo = e.two_prod(y, l_hi)
        p_lo = e.fma(y, l_lo, p_lo)
        mag = _exp_core(e, p_hi, p_lo)
    else:
        k, f = _log_reduce(e, ax)
        mag = _exp_core(e, e.mul(y, e.fma(k, LN2_HI, e.fma(k, LN2_LO, _log1p_small(e, f)))))
    # |x| in {0, inf} or |y| = inf: the result is 0 or inf, inf exactly when (|x| > 1) == (y > 0)
    y_inf = e.eq(e.abs(y), INF)
    zero_or_inf = e.b.or_(e.b.or_(e.eq(ax, 0.0), e.eq(ax, INF)), y_inf)
    big = e.b.icmp_unsigned("==", e.gt(ax, 1.0), e.gt(y, 0.0))
    mag = e.select(zero_or_inf, e.select(big, INF, 0.0), mag)
    # sign: negative x (including -0.0 and -inf) to an odd integer power
    y_int = e.eq(e.floor(y), y)  # true for +-inf too
    half = e.mul(y, 0.5)
    y_odd = e.b.and_(y_int, e.ne(e.floor(half), half))
    x_neg = e.b.icmp_signed("<", e.b.bitcast(x, e.ity), ir.Constant(e.ity, 0))  # the sign bit
    result = e.select(e.b.and_(x_neg, y_odd), e.neg(mag), mag)
    # NaN: negative finite x to a finite non-integer power, or any NaN operand
    bad = e.b.and_(e.lt(x, 0.0), e.b.and_(e.lt(ax, INF), e.b.and_(e.lt(e.abs(y), INF), e.b.not_(y_int))))
    bad = e.b.or_(bad, e.b.or_(e.isnan(x), e.isnan(y)))
    result = e.select(bad, NAN, result)
    # 1: pow(x, +-0) = 1 (even for NaN x), pow(1, y) = 1 (even for NaN y), pow(-1, +-inf) = 1
    one = e.b.or_(e.b.or_(e.eq(y, 0.0), e.eq(x, 1.0)), e.b.and_(e.eq(ax, 1.0), y_inf))
    return e.select(one, 1.0, result)


def _pow(e: _Emitter, x, y):
    if e.f64:
        return _pow_f64(e, x, y, exact_log=True)
    d = _Emitter(e.b, F64)  # float32: double precision is enough (|y log|x|| <= 104 before over/underflow)
    return e.b.fptrunc(_pow_f64(d, e.b.fpext(x, F64), e.b.fpext(y, F64), exact_log=False), e.ty)


# ---- building the functions ---------------------------------------------------------------------------------------
_BODIES = {
    "exp": _exp,
    "expm1": _expm1,
    "log": _log,
    "tanh": _tanh,
    "sigmoid": _sigmoid,
    "erf": _erf,
    "sin": _sin_or_cos("sin"),
    "cos": _sin_or_cos("cos"),
}


def _define(module: ir.Module, name: str, ty, nargs: int, body) -> ir.Function:
    if not isinstance(ty, (ir.FloatType, ir.DoubleType)):
        raise TypeError(f"math functions take ir.FloatType() or ir.DoubleType(), not {ty}")
    symbol = f"gradir.{name}.{'f64' if isinstance(ty, ir.DoubleType) else 'f32'}"
    if symbol in module.globals:
        return module.globals[symbol]
    fn = ir.Function(module, ir.FunctionType(ty, [ty] * nargs), name=symbol)
    fn.linkage = "internal"
    for attribute in ("alwaysinline", "nounwind", "readnone"):  # LLVM 16+ reads readnone as memory(none)
        fn.attributes.add(attribute)
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    builder.ret(body(_Emitter(builder, ty), *fn.args))
    return fn


def function(module: ir.Module, name: str, ty) -> ir.Function:
    """The function `ty name(ty)` of `module` (one of FUNCTIONS; created on first request, then reused).

    Internal, always inlined, straight-line: calls to it in a loop vectorize."""
    if name not in _BODIES:
        raise ValueError(f"unknown math function {name!r}; known: {', '.join(FUNCTIONS)}")
    return _define(module, name, ty, 1, _BODIES[name])


def pow_function(module: ir.Module, ty) -> ir.Function:
    """The function `ty pow(ty x, ty y)` of `module`: x**y with NumPy's (C99's) semantics for real floats."""
    return _define(module, "pow", ty, 2, _pow)
