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
eager ops evaluate with NumPy's `np.tanh`, which rounds tanh(-1.5) one unit in the last place
differently: the two analytic gradients differ by ~2e-16 (the exact value lies between them) and
the round-off half of the sweep (h <= 1e-5) differs in its noise, which is shown in a second column.

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

A, B = 1.5, -2.0
SWEEP = [10.0 ** -k for k in range(1, 13)]                       # h = 1e-1 .. 1e-12
COMPLEX_SWEEP = [1e-1, 1e-2, 1e-4, 1e-8, 1e-16, 1e-20, 1e-50, 1e-100, 1e-200, 1e-250]


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


def relu_like(x):
    """A branch on the real part: x where Re(x) > 0 else 0 (the complex step follows the branch)."""
    return gr.where(gr.real(x) > 0, x, 0.0)


def write_pictures(folder) -> dict:
    """The tape of L as a graph (value, data, grad) and the joint report, in `folder`; atomic writes."""
    from gradir.util.fileio import write_atomic

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
    say(f"  L = {L:.10f}   dL/da = {da:.10f}   dL/db = {db:.10f}")

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
    say(f"  m = a*b = {m:g}   z = m + a = {z:g}   L = {L_ir:.10f}   dL/dz = 1 - tanh(z)^2 = {dL_dz:.10f}")
    say(f"  gr.grad: dL/da = {ir_da:.10f}   dL/db = {ir_db:.10f}")
    say("  the joint forward+backward graph (a is read twice, so its gradient is an `add`):")
    say(joint)
    say(f"  path into a through m: dL/dz * b = {via_m:+.10f}")
    say(f"  direct path into a   : dL/dz     = {direct:+.10f}")
    say(f"  sum                  :             {total:+.10f}")
    say(f"  tape vs gradir gradients differ by {out['tape_vs_ir']:.1e} (math.tanh vs np.tanh rounding)")

    # 3. finite differences
    say("\n== 3. numerical checks (no autodiff) ==")
    exact = da  # the tape's analytic gradient: same arithmetic as loss_py
    out["central_h01"] = checks.central_difference(loss_py, A, B, h=0.1)
    say(f"  central difference at h=0.1: {out['central_h01']:.10f}")
    sweep = {}
    say(f"  {'h':>7s}  {'central err':>11s}  {'forward err':>11s}  {'central err (gradir eager)':>26s}")
    for h in SWEEP:
        c = abs(checks.central_difference(loss_py, A, B, h=h) - exact)
        f = abs(checks.forward_difference(loss_py, A, B, h=h) - exact)
        g = abs(checks.central_difference(loss, A, B, h=h) - ir_da)
        sweep[h] = {"central": c, "forward": f, "central_gradir": g}
        say(f"  {h:7.0e}  {c:11.2e}  {f:11.2e}  {g:26.2e}")
    fit = SWEEP[:4]  # h = 1e-1 .. 1e-4: truncation error dominates
    out["sweep"] = sweep
    out["slope_forward"] = checks.order_of_accuracy(fit, [sweep[h]["forward"] for h in fit])
    out["slope_central"] = checks.order_of_accuracy(fit, [sweep[h]["central"] for h in fit])
    say(f"  log-log slope over h=1e-1..1e-4: forward {out['slope_forward']:.3f}, central {out['slope_central']:.3f}")

    # complex step
    cs = {h: abs(checks.complex_step(loss_py, A, B, h=h) - exact) for h in COMPLEX_SWEEP}
    cs_gr = {h: abs(checks.complex_step(loss, A, B, h=h) - exact) for h in COMPLEX_SWEEP}
    out.update(complex_step=cs, complex_step_gradir=cs_gr)
    say("  complex step Im(L(a+ih))/h, error vs analytic:")
    for h in COMPLEX_SWEEP:
        say(f"  {h:7.0e}  {cs[h]:.1e}   (gradir ops on complex128: {cs_gr[h]:.1e})")
    out["relu_pos"] = checks.complex_step(relu_like, 2.0)
    out["relu_neg"] = checks.complex_step(relu_like, -2.0)
    out["abs_pos"] = checks.complex_step(lambda x: gr.abs(x), 2.0)
    out["abs_pos_central"] = checks.central_difference(lambda x: gr.abs(x), 2.0)
    say(f"  control, ReLU-like branch on Re(x): {out['relu_pos']:g} at +2, {out['relu_neg']:g} at -2 (right)")
    say(f"  control, abs at +2: complex step {out['abs_pos']:g}, central difference {out['abs_pos_central']:.6f} "
        "(|x| is not analytic: a silent failure)")

    # 4. engine bugs
    say("\n== 4. two deliberate engine bugs ==")
    _, oa, ob, _ = tape(accumulate=False)
    _, fa, fb, _ = tape(order="forward")
    out.update(bug_overwrite=(oa, ob), bug_forward_order=(fa, fb))
    say(f"  {'engine':32s} {'dL/da':>14s} {'dL/db':>14s}")
    say(f"  {'correct':32s} {da:+14.10f} {db:+14.10f}")
    say(f"  {'overwrite instead of accumulate':32s} {oa:+14.10f} {ob:+14.10f}   (a keeps only the path via m)")
    say(f"  {'backward in forward order':32s} {fa:+14.10f} {fb:+14.10f}   (closures run before any grad arrives)")
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
