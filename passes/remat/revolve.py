"""Binomial checkpointing (Griewank's revolve) for pure chains: a reference bound for recompute plans.

The execution model is not gradir's. A chain of n steps x_i = F_i(x_{i-1}) is reversed with c
checkpoint slots, each holding one state x_i (the chain's input x_0 occupies one of them). A step's
internals are never kept between steps: reversing step i re-runs F_i from x_{i-1} with its internals
recorded (the "taping" run), then runs its backward. States may be recomputed any number of times,
forward from any stored checkpoint. Griewank (1992) and Griewank & Walther (2000, ACM TOMS 26:19-45):
with c slots the fewest forward steps (advances, not counting the n taping runs) is

    t(n, c) = r*n - beta(c + 1, r - 1),   beta(s, r) = C(s + r, s),

where r is the least integer with beta(c, r) >= n: each step is advanced at most r times. With
c >= n slots, t = n - 1 (one forward sweep storing every state).

Block calls, as `remat` counts them (each block's forward runs), are t(n, c) + n: for c = n this is
2n - 1, what "uniform with a segment per block" does in gradir. gradir's plans recompute a value at
most once but may keep a block's internals (a relu output, say), so neither model bounds the other
in general: revolve shows what repeated recomputation buys at few slots, gradir's plans what
keeping internals buys.
"""

from __future__ import annotations

import functools
from math import comb

from gradir.core.errors import GradirError


def beta(s: int, r: int) -> int:
    """The longest chain reversible with s slots and each step advanced at most r times: C(s+r, s)."""
    return comb(s + r, s) if s >= 0 and r >= 0 else 0


def _check(n: int, c: int):
    if n < 1 or c < 1:
        raise GradirError(f"revolve needs a chain of n >= 1 steps and c >= 1 checkpoint slots, got n={n}, c={c}",
                          op="revolve")


def revolve_steps(n: int, c: int) -> int:
    """Griewank's closed form: the fewest forward steps to reverse a chain of n steps with c slots."""
    _check(n, c)
    r = 0
    while beta(c, r) < n:
        r += 1
    return r * n - beta(c + 1, r - 1)


def block_calls(n: int, c: int) -> int:
    """Block forward calls of the optimal revolve schedule: its advances plus the n taping runs."""
    return revolve_steps(n, c) + n


@functools.cache
def _best(n: int, c: int) -> tuple[int, int]:
    """(fewest advances, first split) to reverse n steps from a stored state with c slots (that state's
    included), by dynamic programming over the first checkpoint placed: advance m steps, store, reverse
    the last n - m with c - 1 slots, then the first m with c."""
    if n == 1:
        return 0, 0
    if c == 1:
        return n * (n - 1) // 2, 0
    return min((m + _best(n - m, c - 1)[0] + _best(m, c)[0], m) for m in range(1, n))


def revolve_schedule(n: int, c: int) -> list[tuple[str, int]]:
    """An optimal schedule as actions on a current state: ("restore", i) takes stored x_i;
    ("advance", i) runs step i forward (x_{i-1} -> x_i); ("store", i) / ("free", i) keep or release
    x_i in a slot; ("reverse", i) tapes step i from x_{i-1} and runs its backward (steps are reversed
    n, n-1, ..., 1). It starts with x_0 current and holds at most c states; its advances number
    `revolve_steps(n, c)`."""
    _check(n, c)
    out: list[tuple[str, int]] = [("store", 0)]

    def advance(lo: int, to: int):
        out.append(("restore", lo))
        out.extend(("advance", i) for i in range(lo + 1, to + 1))

    def reverse(lo: int, hi: int, slots: int):  # steps lo+1..hi, x_lo stored, `slots` slots (x_lo's included)
        if slots == 1 or hi - lo == 1:
            for top in range(hi, lo, -1):  # from x_lo every time
                advance(lo, top - 1)
                out.append(("reverse", top))
            return
        m = _best(hi - lo, slots)[1]
        advance(lo, lo + m)
        out.append(("store", lo + m))
        reverse(lo + m, hi, slots - 1)
        out.append(("free", lo + m))
        reverse(lo, lo + m, slots)

    reverse(0, n, min(c, n))
    out.append(("free", 0))
    return out
