"""C. Forward mode vs reverse mode on one small function.

    L = tanh(x0*x1 + x2*x2 + x3*x3)   at x = [1.5, -2, 0.25, -0.75]   (four scalar inputs)

Forward mode (`gr.jvp`) pushes one tangent through the graph per seed: a full gradient of n inputs
needs n passes, each evaluating every op with its JVP rule. Reverse mode (`gr.grad`) runs the
forward once, then every op that lies between the inputs and L applies its VJP rule once, whatever
n is. Both give the same gradient here; the operation counts are read off the IR (the traced graph
and the set of nodes that receive a cotangent), not written down by hand.

Run:  python examples/c_forward_vs_reverse.py
"""

from __future__ import annotations

import numpy as np

import gradir as gr
from gradir.passes import needs_grad

X = (1.5, -2.0, 0.25, -0.75)

# The course's figures (TEACHING.md, section C), as the course writes them; each is printed beside ours.
COURSE = {
    "gradient": "[-0.068031297262, 0.051023472946, 0.017007824315, -0.051023472946]",
    "max difference": "0", "forward mode": "4 seeds x 6 graph ops = 24 op evaluations",
    "reverse mode": "one forward plus 6 backward rules",
}


def the_course(figure: str, reason: str = "") -> str:
    """The course's figure, to append to the line of ours; a reason where ours differs or is a bound."""
    return f"  (the course: {figure}{'; ' + reason if reason else ''})"


def loss(x0, x1, x2, x3):
    return gr.tanh(x0 * x1 + x2 * x2 + x3 * x3)


def forward_ops(graph: gr.Graph) -> list:
    """The graph's operations: every node that is neither an input nor a constant."""
    return [n for n in graph.nodes if n.op != "const"]


def cotangent_receivers(graph: gr.Graph) -> list:
    """Nodes whose VJP rule reverse mode applies: those on a differentiable path from the inputs to
    the output (the output's cotangent reaches them). Mirrors gradir.passes.autodiff."""
    live = needs_grad(graph, list(range(len(graph.inputs))))
    receives = {o for o in graph.outputs if o in live}
    for n in reversed(graph.nodes):
        if n in receives:
            receives.update(i for i in n.inputs if i in live)
    return [n for n in graph.nodes if n in receives]


def tangent_carriers(graph: gr.Graph, seed: int) -> list:
    """Nodes whose tangent is non-zero when only input `seed` is perturbed."""
    live = needs_grad(graph, [seed])
    return [n for n in forward_ops(graph) if n in live]


def main(verbose: bool = True) -> dict:
    say = print if verbose else (lambda *a, **k: None)
    graph = gr.trace(loss, *X)
    say(f"the function under test: L = tanh(x0*x1 + x2*x2 + x3*x3) at (x0, x1, x2, x3) = {tuple(float(x) for x in X)}; "
        "gradir traces it to:")
    say(graph)
    n_in, ops = len(graph.inputs), forward_ops(graph)

    # forward mode: one jvp per seed (basis direction)
    fwd = []
    for i in range(n_in):
        seed = tuple(1.0 if j == i else 0.0 for j in range(n_in))
        _, t = gr.jvp(loss, X, seed)
        fwd.append(float(t))
    fwd = np.array(fwd)

    # reverse mode: one gr.grad call
    rev = np.array([float(g) for g in gr.grad(loss, argnums=tuple(range(n_in)))(*X)])
    diff = float(np.max(np.abs(fwd - rev)))

    rules = cotangent_receivers(graph)
    carriers = [len(tangent_carriers(graph, i)) for i in range(n_in)]
    out = {
        "grad_forward": fwd, "grad_reverse": rev, "max_diff": diff,
        "forward_graph_ops": len(ops), "seeds": n_in,
        "forward_mode_op_evaluations": n_in * len(ops),
        "forward_mode_nonzero_tangent_rules": carriers,
        "reverse_forward_ops": len(ops), "reverse_backward_rules": len(rules),
        "reverse_mode_total": len(ops) + len(rules),
    }
    fmt = lambda v: np.array2string(v, precision=12, floatmode="fixed")
    label = f"forward mode (gr.jvp, {n_in} seeds)"
    say(f"{label:34s}: {fmt(fwd)}")
    say(f"{'reverse mode (gr.grad)':34s}: {fmt(rev)}")
    say(" " * (36 - len("(the course: ")) + the_course(COURSE["gradient"])[2:])  # its '[' under ours
    say(f"max |forward - reverse| = {diff:g}{the_course(COURSE['max difference'])}")
    say(f"forward graph: {len(ops)} ops ({', '.join(n.op for n in ops)})")
    say(f"forward mode: {n_in} seeds x {len(ops)} ops = {n_in * len(ops)} op evaluations{the_course(COURSE['forward mode'])}")
    say(f"  each op with its JVP rule (non-zero tangents per seed: {carriers})")
    say(f"reverse mode: one forward ({len(ops)} ops) + {len(rules)} backward (VJP) rules"
        f"{the_course(COURSE['reverse mode'])}")
    say(f"  = {len(ops) + len(rules)}, one backward pass for all {n_in} inputs")
    say("\nPictures: notebooks/c_forward_vs_reverse.py shows the graph and its joint forward/backward diagram inline.")
    return out


if __name__ == "__main__":
    main()
