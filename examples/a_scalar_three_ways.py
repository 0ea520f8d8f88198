"""A. One scalar expression, three ways: a tiny tape, gradir's IR, and numerical checks.

    L = tanh(a*b + a)   at a = 1.5, b = -2

1. A micrograd-style tape (the `Value` class below, ~40 lines) records each operation with a local
   backward closure and runs them in reverse topological order.
2. The same expression through gradir: `gr.trace` shows the tape *is* a graph (SSA text form);
   reverse mode turns it into a joint forward+backward graph. `a` is read twice (by `a*b` and by
   `+ a`), so its gradient is the sum of two contributions, one per path; we evaluate the joint
   graph and print both.
3. Numerical checks that never use autodiff: central and forward differences (error sweep over h,
   log-log slope = order of accuracy), the complex step (no cancellation, so h can be 1e-250), and
   controls that show when the complex step is blind (`abs`) and when it is fine (a branch on the
   real part).
4. Two deliberate engine bugs in the tiny tape, next to the correct engine.

The finite-difference sweep evaluates L as plain Python (`math.tanh`, `cmath.tanh` for the complex
step), the same arithmetic the tape uses; its "analytic" reference is the tape's gradient. gradir's
eager ops evaluate with NumPy's `np.tanh`, which may round tanh(-1.5) differently (by one unit in the
last place on the machine this was written on, where the two analytic gradients differ by 2.2e-16 (dL/da)
and 3.3e-16 (dL/db); the output prints the count on yours), and the round-off half of the sweep
(h <= 1e-5) then differs in its noise, which is shown in a second column.

With `--out DIR` it draws the tape as a graph (micrograd's draw_dot: one node per value with its data
and grad) and writes the joint forward+backward report (`GradTrace.render`: diagrams, the backward
schedule player, memory plot).

Run:  python examples/a_scalar_three_ways.py [--out DIR]
"""

from __future__ import annotations

import argparse
import cmath
import math
import pathlib

import numpy as np

import gradir as gr
from gradir.api import checks
from gradir.passes import joint_graph
from gradir.util.fileio import write_atomic

A, B = 1.5, -2.0
SWEEP = [10.0 ** -k for k in range(1, 13)]                       # h = 1e-1 .. 1e-12
COMPLEX_SWEEP = [1e-1, 1e-2, 1e-4, 1e-8, 1e-16, 1e-20, 1e-50, 1e-100, 1e-200, 1e-250]

# The course's figures (TEACHING.md, section A), as the course writes them; each is printed beside ours.
COURSE = {
    "L": "-0.9051482536", "dL/da": "-0.1807066389", "dL/db": "0.2710599584",
    "m": "-3", "z": "-1.5", "dL/dz": "0.1807066389", "via m": "-0.3614132778", "direct": "+0.1807066389",
    "central h=0.1": "-0.1815845310",
    # the central-difference error sweep; "~": round-off figures, which the course gives to 2 figures
    "sweep": {1e-1: "8.78e-4", 1e-2: "8.78e-6", 1e-4: "8.78e-10", 1e-5: "~6.7e-12 (the valley)",
              1e-8: "~3.8e-10", 1e-10: "~7.8e-8", 1e-12: "~1.8e-5"},
    "slope forward": "~1 (0.993)", "slope central": "~2 (2.000)",
    "complex step": "<= ~3e-17 for h <= 1e-8 (down to 1e-250)",
    "relu": "1 at +2, 0 at -2", "abs": "0 (silent failure)",
    "bug overwrite": "dL/da = -0.3614132778, dL/db stays right", "bug forward order": "0 for both leaves",
}


def the_course(figure: str, reason: str = "") -> str:
    """The course's figure, to append to the line of ours; a reason where ours differs or is a bound."""
    return f"  (the course: {figure}{'; ' + reason if reason else ''})"


# -- 1. a tiny scalar tape ----------------------------------------------------------------------


class Value:
    """A scalar that remembers how it was made (micrograd's engine, cut to +, * and tanh).

    ACCUMULATE and ORDER are switches for the two deliberate bugs of section 4."""

    ACCUMULATE = True     # False: a child's .grad is overwritten instead of summed
    ORDER = "reverse"     # "forward": run the backward closures in forward (topological) order

    def __init__(self, data, parents=(), op=""):
        self.data, self.grad, self.parents, self.op = data, 0.0, parents, op
        self._backward = lambda: None

    def _receive(self, g):
        self.grad = self.grad + g if Value.ACCUMULATE else g

    def __add__(self, other):
        out = Value(self.data + other.data, (self, other), "+")

        def _backward():  # d(x+y)/dx = d(x+y)/dy = 1
            self._receive(out.grad)
            other._receive(out.grad)
        out._backward = _backward
        return out

    def __mul__(self, other):
        out = Value(self.data * other.data, (self, other), "*")

        def _backward():  # d(xy)/dx = y, d(xy)/dy = x
            self._receive(other.data * out.grad)
            other._receive(self.data * out.grad)
        out._backward = _backward
        return out

    def tanh(self):
        t = math.tanh(self.data)
        out = Value(t, (self,), "tanh")

        def _backward():  # d tanh(x)/dx = 1 - tanh(x)^2
            self._receive((1 - t * t) * out.grad)
        out._backward = _backward
        return out

    def topo(self):
        order, seen = [], set()

        def visit(v):
            if v not in seen:
                seen.add(v)
                for p in v.parents:
                    visit(p)
                order.append(v)
        visit(self)
        return order

    def backward(self):
        order = self.topo()
        self.grad = 1.0
        for v in reversed(order) if Value.ORDER == "reverse" else order:
            v._backward()


def tape(a=A, b=B, accumulate=True, order="reverse"):
    """Run the tape (optionally with a bug switched on): returns (L, dL/da, dL/db, the tape's nodes)."""
    Value.ACCUMULATE, Value.ORDER = accumulate, order
    try:
        va, vb = Value(a, op="a"), Value(b, op="b")
        L = (va * vb + va).tanh()
        L.backward()
        return L.data, va.grad, vb.grad, L.topo()
    finally:
        Value.ACCUMULATE, Value.ORDER = True, "reverse"


# -- 2. the same expression through gradir's IR -----------------------------------------------------


def loss(a, b):
    return gr.tanh(a * b + a)


def evaluate(graph: gr.Graph, args: list) -> dict:
    """Every value of `graph` at `args` (gradir ops evaluate eagerly on NumPy values)."""
    from gradir.core.trace import bind

    env = dict(zip(graph.inputs, [np.asarray(x, dtype=float) for x in args]))
    for n in graph.nodes:
        env[n] = n.attrs["value"] if n.op == "const" else bind(n.op, *[env[i] for i in n.inputs], **n.attrs)
    return env


def two_paths(forward: gr.Graph):
    """The joint graph of `forward` and, at (A, B), the two contributions summed into dL/da."""
    joint = joint_graph(forward, [0, 1])
    env = evaluate(joint, [A, B, 1.0])  # inputs: a, b, then the output cotangent dL/dL = 1
    grad_a = joint.outputs[1]
    assert grad_a.op == "add", "a is read twice, so its gradient is an accumulation"
    b = joint.inputs[1]
    # multiply's VJP sends g*b to a (it reads b directly); add's VJP passes dL/dz through unchanged
    reads_b = [any(i is b for i in c.inputs) for c in grad_a.inputs]  # `is`: == on Values is elementwise
    via_m, direct = (grad_a.inputs[reads_b.index(True)], grad_a.inputs[reads_b.index(False)])
    return joint, float(env[via_m]), float(env[direct]), float(env[grad_a])


# -- 3. numerical checks ----------------------------------------------------------------------------


def loss_py(a, b):
    """L as plain Python floats (cmath for the complex step: math.tanh has no complex form)."""
    return (cmath if isinstance(a, complex) else math).tanh(a * b + a)


def grads_from_tanh(t, a=A, b=B):
    """(dL/da, dL/db) by the backward rules, in the order both engines apply them, from a given tanh(z)."""
    g = 1 - t * t           # tanh's rule, with dL/dL = 1
    return g + b * g, a * g  # a: the direct path (add) plus the path through m (multiply); b: through m


def relu_like(x):
    """A branch on the real part: x where Re(x) > 0 else 0 (the complex step follows the branch)."""
    return gr.where(gr.real(x) > 0, x, 0.0)


def write_pictures(folder) -> dict:
    """The tape of L as a graph (value, data, grad) and the joint report, in `folder`; atomic writes."""
    folder = pathlib.Path(folder)
    diagram = gr.viz.value_diagram(loss, A, B, title="L = tanh(a*b + a) at a = 1.5, b = -2: data and grad")
    files = {"tape.dot": write_atomic(folder / "a_tape.dot", diagram.source)}
    rendered = gr.viz.render_svg(diagram)
    if rendered.svg is not None:
        files["tape.svg"] = write_atomic(folder / "a_tape.svg", rendered.svg)
    report = gr.trace_grad(loss, A, B, argnums=(0, 1)).render(folder / "a_loss")
    return {k: str(v) for k, v in {**files, **report}.items()}


def main(verbose: bool = True, out_dir=None) -> dict:
    out: dict = {}
    say = print if verbose else (lambda *a, **k: None)

    # 1. the tape
    L, da, db, nodes = tape()
    out.update(L=L, dL_da=da, dL_db=db)
    say("== 1. a tiny scalar tape ==")
    ids = {v: i for i, v in enumerate(nodes)}
    for v in nodes:
        args = ", ".join(f"%{ids[p]}" for p in v.parents)
        say(f"  %{ids[v]} = {v.op:4s} {args:8s} data={v.data:+.10f}  grad={v.grad:+.10f}")
    say(f"  L     = {L:.10f}{the_course(COURSE['L'])}")
    say(f"  dL/da = {da:.10f}{the_course(COURSE['dL/da'])}")
    say(f"  dL/db = {db:.10f}{the_course(COURSE['dL/db'])}")

    # 2. gradir
    say("\n== 2. the same expression in gradir's IR ==")
    forward = gr.trace(loss, A, B)
    say(forward)
    fenv = evaluate(forward, [A, B])
    m, z, L_ir = (float(fenv[n]) for n in forward.nodes)  # multiply, add, tanh
    ir_da, ir_db = (float(g) for g in gr.grad(loss, argnums=(0, 1))(A, B))
    dL_dz = float(gr.grad(gr.tanh)(z))
    joint, via_m, direct, total = two_paths(forward)
    out.update(m=m, z=z, ir_L=L_ir, ir_dL_da=ir_da, ir_dL_db=ir_db, dL_dz=dL_dz, path_via_m=via_m,
               path_direct=direct, path_total=total, tape_vs_ir=max(abs(ir_da - da), abs(ir_db - db)))
    say(f"  m = a*b = {m:g}{the_course(COURSE['m'])}   z = m + a = {z:g}{the_course(COURSE['z'])}")
    say(f"  L = {L_ir:.10f}{the_course(COURSE['L'])}   dL/dz = 1 - tanh(z)^2 = {dL_dz:.10f}{the_course(COURSE['dL/dz'])}")
    say(f"  gr.grad: dL/da = {ir_da:.10f}{the_course(COURSE['dL/da'])}   dL/db = {ir_db:.10f}{the_course(COURSE['dL/db'])}")
    say("  the joint forward+backward graph (a is read twice, so its gradient is an `add`):")
    say(joint)
    say(f"  path into a through m: dL/dz * b = {via_m:+.10f}{the_course(COURSE['via m'])}")
    say(f"  direct path into a   : dL/dz     = {direct:+.10f}{the_course(COURSE['direct'])}")
    say(f"  sum                  :             {total:+.10f}{the_course(COURSE['dL/da'])}")
    # why the tape and gradir differ in the last digits: their tanh(-1.5) rounds differently
    t_math, t_np = math.tanh(z), float(np.tanh(z))
    ulps = round((t_np - t_math) / math.ulp(t_math))
    recomputed = (grads_from_tanh(t_math) == (da, db), grads_from_tanh(t_np) == (ir_da, ir_db))
    out.update(tanh_math=t_math, tanh_np=t_np, tanh_ulps=ulps, tanh_recomputes=recomputed)
    say(f"  tape vs gradir gradients differ by {out['tape_vs_ir']:.1e}; t = tanh(-1.5) rounds {abs(ulps)} ulp apart in the two:")
    say(f"    the tape's math.tanh: {t_math!r}   gradir's np.tanh: {t_np!r}")
    say(f"    g = 1 - t*t, dL/da = g + b*g, dL/db = a*g from each t give exactly the tape's gradients: {recomputed[0]}, "
        f"gradir's: {recomputed[1]}")

    # 3. finite differences
    say("\n== 3. numerical checks (no autodiff) ==")
    exact = da  # the tape's analytic gradient: same arithmetic as loss_py
    out["central_h01"] = checks.central_difference(loss_py, A, B, h=0.1)
    say(f"  central difference at h=0.1: {out['central_h01']:.10f}{the_course(COURSE['central h=0.1'])}")
    sweep = {}
    say(f"  {'h':>7s}  {'central err':>11s}  {'forward err':>11s}  {'central (gradir)':>16s}  {'eps|L|/h':>8s}")
    for h in SWEEP:
        c = abs(checks.central_difference(loss_py, A, B, h=h) - exact)
        f = abs(checks.forward_difference(loss_py, A, B, h=h) - exact)
        g = abs(checks.central_difference(loss, A, B, h=h) - ir_da)
        r = np.finfo(float).eps * abs(L) / h  # the scale of rounding noise in (L(a+h) - L(a-h)) / 2h
        sweep[h] = {"central": c, "forward": f, "central_gradir": g, "roundoff_scale": r}
        course = the_course("central err " + COURSE["sweep"][h]) if h in COURSE["sweep"] else ""
        say(f"  {h:7.0e}  {c:11.2e}  {f:11.2e}  {g:16.2e}  {r:8.1e}{course}")
    # from h = 1e-5 on, both central columns are rounding noise (below eps |L| / h) and part; at h = 1e-5 (the valley)
    # truncation C h^2, with C measured at h = 1e-3, is what the two share, and the rest is noise
    signed = {"plain Python": checks.central_difference(loss_py, A, B, h=1e-5) - exact,
              "gradir eager": checks.central_difference(loss, A, B, h=1e-5) - ir_da}
    trunc = (checks.central_difference(loss_py, A, B, h=1e-3) - exact) / 1e-6 * 1e-10
    roundoff = np.finfo(float).eps * abs(L) / 1e-5
    noise = {k: v - trunc for k, v in signed.items()}
    out["valley"] = {"truncation": trunc, "roundoff_scale": roundoff, "noise": noise, "signed": signed}
    say("  the course's figures sit beside the first column (plain Python floats, math.tanh). For h <= 1e-5 both central")
    say("  columns stay below the round-off scale eps|L|/h, so there they part by rounding noise. At h=1e-5")
    say(f"  ({abs(signed['plain Python']):.2e} vs {abs(signed['gradir eager']):.2e}) truncation C h^2 is {abs(trunc):.2e} "
        f"(C from h=1e-3); the rest, {noise['plain Python']:+.1e} and {noise['gradir eager']:+.1e},")
    say(f"  is noise, below eps|L|/h = {roundoff:.1e}")
    fit = SWEEP[:4]  # h = 1e-1 .. 1e-4: truncation error dominates
    out["sweep"] = sweep
    out["slope_forward"] = checks.order_of_accuracy(fit, [sweep[h]["forward"] for h in fit])
    out["slope_central"] = checks.order_of_accuracy(fit, [sweep[h]["central"] for h in fit])
    say(f"  log-log slope over h=1e-1..1e-4: forward {out['slope_forward']:.3f}{the_course(COURSE['slope forward'])}, "
        f"central {out['slope_central']:.3f}{the_course(COURSE['slope central'])}")

    # complex step
    cs = {h: abs(checks.complex_step(loss_py, A, B, h=h) - exact) for h in COMPLEX_SWEEP}
    cs_gr = {h: abs(checks.complex_step(loss, A, B, h=h) - exact) for h in COMPLEX_SWEEP}
    out.update(complex_step=cs, complex_step_gradir=cs_gr)
    say("  complex step Im(L(a+ih))/h, error vs analytic:")
    for h in COMPLEX_SWEEP:
        say(f"  {h:7.0e}  {cs[h]:.1e}   (gradir ops on complex128: {cs_gr[h]:.1e})")
    small = [h for h in COMPLEX_SWEEP if h <= 1e-8]
    out["complex_step_max_small_h"] = max(max(cs[h], cs_gr[h]) for h in small)
    say(f"  largest error for h <= 1e-8: {out['complex_step_max_small_h']:.1e}"
        f"{the_course(COURSE['complex step'], 'a bound, ours is within it')}")
    out["relu_pos"] = checks.complex_step(relu_like, 2.0)
    out["relu_neg"] = checks.complex_step(relu_like, -2.0)
    out["abs_pos"] = checks.complex_step(lambda x: gr.abs(x), 2.0)
    out["abs_pos_central"] = checks.central_difference(lambda x: gr.abs(x), 2.0)
    say(f"  control, ReLU-like branch on Re(x): {out['relu_pos']:g} at +2, {out['relu_neg']:g} at -2"
        f"{the_course(COURSE['relu'])}")
    say(f"  control, abs at +2: complex step {out['abs_pos']:g}{the_course(COURSE['abs'])}, "
        f"central difference {out['abs_pos_central']:.6f}")
    say("  (|x| is not analytic: the complex step gives 0 where the slope is 1, and nothing warns)")

    # 4. engine bugs
    say("\n== 4. two deliberate engine bugs ==")
    _, oa, ob, _ = tape(accumulate=False)
    _, fa, fb, forward_nodes = tape(order="forward")
    out.update(bug_overwrite=(oa, ob), bug_forward_order=(fa, fb))
    say(f"  {'engine':32s} {'dL/da':>14s} {'dL/db':>14s}")
    say(f"  {'correct':32s} {da:+14.10f} {db:+14.10f}")
    say(f"  {'overwrite instead of accumulate':32s} {oa:+14.10f} {ob:+14.10f}{the_course(COURSE['bug overwrite'])}")
    say(f"  {'backward in forward order':32s} {fa:+14.10f} {fb:+14.10f}{the_course(COURSE['bug forward order'])}")
    out["bug_forward_order_grads"] = {v.op: v.grad for v in forward_nodes}
    say(f"  overwriting: a keeps only the path via m ({via_m:+.10f} above). Forward order runs the closures as "
        f"{', '.join(v.op for v in forward_nodes)}:")
    say("  each before its output's grad arrives but tanh's (last); the grads after it: "
        + ", ".join(f"{v.op} {v.grad:g}" for v in forward_nodes))
    if out_dir is not None:
        out["files"] = write_pictures(out_dir)
        say(f"\nFiles (--out {out_dir}), .dot sources and the forward/backward diagrams beside them:")
        for key, what in (("tape.svg", "the tape as a graph"), ("joint.svg", "forward and backward, saved values"),
                          ("html", "the report, with the backward schedule player")):
            if key in out["files"]:
                say(f"   {what}: {out['files'][key]}")
    else:
        say("\nPictures: --out DIR draws the tape as a graph and writes the joint report; "
            "notebooks/a_scalar_three_ways.py shows them inline.")
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", metavar="DIR", help="write the tape's diagram and the joint report into DIR")
    main(out_dir=ap.parse_args().out)
