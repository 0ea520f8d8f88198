"""Math functions the generated Triton kernels call, written with `triton.language` core ops only.

Triton's core has exp, log, sin, cos, sqrt, erf, floor and ceil; tanh, expm1, log1p, tan, rint, sigmoid
and pow come from libdevice on a GPU, which the CPU interpreter (TRITON_INTERPRET=1) cannot run. These
versions run in both, so the interpreter tests check the code the GPU runs. Each is accurate to a few ulps
where NumPy's is the reference: expm1 by Kahan's correction of exp(x) - 1, log1p by Goldberg's of
log(1 + x), tanh through expm1 (no cancellation near 0), tan as sin / cos, sigmoid from the side where exp
cannot overflow; rint is exact (halves to even).
"""

import triton
import triton.language as tl


@triton.jit
def expm1(x):
    # Kahan: u = exp(x); (u - 1) * x / log(u) cancels the rounding of u (exact at u == 1 and u == 0)
    u = tl.exp(x)
    um1 = u - 1.0
    fixed = um1 * x / tl.log(tl.where(u == 1.0, 2.0, u))  # (the u == 1 lane is replaced below)
    out = tl.where(um1 == -1.0, -1.0, tl.where(u == 1.0, x, fixed))
    return tl.where(u == float("inf"), u, tl.where(x != x, x, out))


@triton.jit
def log1p(x):
    # Goldberg: u = 1 + x rounded; log(u) * x / (u - 1) cancels the rounding of u (exact at u == 1 and u == inf)
    u = 1.0 + x
    r = tl.log(u) * (x / (u - 1.0))  # (the u == 1 lanes divide by 0: replaced below)
    return tl.where(u == 1.0, x, tl.where(u == float("inf"), u, r))


@triton.jit
def tan(x):
    return tl.sin(x) / tl.cos(x)


@triton.jit
def rint(x):
    # round half to even from floor: d = x - floor(x) is exact; a tie goes to the even neighbour
    f = tl.floor(x)
    d = x - f
    odd = tl.floor(f * 0.5) * 2.0 != f
    r = tl.where(d > 0.5, f + 1.0, tl.where(d < 0.5, f, tl.where(odd, f + 1.0, f)))
    r = tl.where(r == 0.0, x * 0.0, r)  # a zero keeps the sign of x, as NumPy: rint(-0.3) = -0.0
    return tl.where(tl.abs(x) < 4503599627370496.0, r, x)  # from 2**52 on every float is an integer (and inf, NaN)


@triton.jit
def tanh(x):
    # tanh|x| = -expm1(-2|x|) / (expm1(-2|x|) + 2), then the sign of x; NaN stays NaN
    e = expm1(-2.0 * tl.abs(x))
    t = -e / (e + 2.0)
    return tl.where(x < 0, -t, t)


@triton.jit
def sigmoid(x):
    z = tl.exp(-tl.abs(x))  # never overflows
    return tl.where(x >= 0, 1.0 / (1.0 + z), z / (1.0 + z))


@triton.jit
def pow(x, y):
    # NumPy's float power: |x|^y = exp(y log|x|); a negative base needs an integer exponent (odd: negative)
    r = tl.exp(y * tl.log(tl.abs(x)))
    integral = tl.floor(y) == y
    odd = tl.where(integral, tl.floor(y * 0.5) * 2.0 != y, False)
    negative = tl.where(odd, -r, r)
    r = tl.where(x < 0, tl.where(integral, negative, float("nan")), r)
    zero_to_negative = tl.where(odd, 1.0 / x, float("inf"))  # (-0)^-3 = -inf, as NumPy
    r = tl.where(x == 0, tl.where(y < 0, zero_to_negative, r), r)  # (nested: the interpreter cannot & a scalar)
    r = tl.where(y == 0, 1.0, r)  # 0^0 = nan^0 = 1
    return tl.where(x == 1.0, 1.0, r)
