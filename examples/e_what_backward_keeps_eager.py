"""E. What backward keeps alive, seen from the eager front door (`gr.Tensor`).

`gr.Tensor` works like a PyTorch tensor: ops run at once and, on tensors that require grad, record
a tape node (`grad_fn`) that keeps what its VJP rule reads. `backward()` walks the tape in reverse
and runs each node's VJP rule (traced once per signature into gradir's IR and compiled);
`last_backward()` shows the tape as a forward graph and the partition `gr.grad` makes of it.
This program shows the eager semantics that follow from that, each with its figure:

1. What each tape node keeps ("multiply keeps the other operand", "add keeps nothing"), and the
   tape printed as a forward graph (`last_backward().graph`).
2. Version check: x=[2,3], y=sum(x*x), then `x += 1` under no_grad (nothing recorded, but the
   storage's version moves from 0 to 1): backward refuses, because multiply saved x at version 0.
   The same mutation after y=sum(x+2) is allowed: add keeps nothing, and dy/dx=[1,1] still holds.
3. Graph lifetime: backward frees the saved values, so a second backward through the same graph
   errors; with retain_graph=True it gives the same gradient again. Leaves accumulate: the second
   call leaves 2x in .grad. `.grad.zero_()` or `.grad = None` start over.
4. Higher order: backward(create_graph=True) runs the backward program on Tensors, so x.grad has a
   history of its own: x^3 at 2 -> 12, and differentiating that gradient -> 12.
5. Leaf vs non-leaf: y=x*x, y.sum().backward(): x.grad=[4,6]; y keeps .grad=[1,1] only if
   y.retain_grad() was asked.

With `--out DIR` it writes two diagrams of item 1's y = sum(tanh(x*x + x)): the tape as a forward
graph and the backward program `backward()` ran (.dot, and .svg when Graphviz's `dot` runs;
atomic writes), and prints their paths.

Run:  python examples/e_what_backward_keeps_eager.py [--out DIR]
"""

from __future__ import annotations

import argparse
import pathlib

import gradir as gr
from gradir.core.errors import FreedGraphError, VersionError
from gradir.core.rules import explain_node
from gradir.eager.engine import last_backward

# The course's figures (TEACHING.md, section E), printed beside ours as "(the course: X)".
COURSE = {"versions": (0, 1),          # x saved at version 0, mutated to version 1
          "accumulated": 2,            # a second backward leaves 2x in the leaf's .grad
          "first": 12, "second": 12,   # d/dx x^3 and d2/dx2 x^3 at 2
          "x_grad": [4, 6], "y_grad": [1, 1]}  # y = x*x at [2, 3], y.sum().backward(), y.retain_grad()


def what_nodes_keep() -> dict:
    x = gr.Tensor([2.0, 3.0], requires_grad=True)
    y = gr.tanh(x * x + x).sum()
    saved = {}  # grad_fn name -> how many values the tape node holds for backward
    stack = [y.grad_fn]
    while stack:
        n = stack.pop()
        saved[n.name] = len(n.saved)
        stack.extend(f for f, _ in n.next_functions if f is not None and hasattr(f, "saved"))
    y.backward()
    record = last_backward()
    what_nodes_keep.record = record  # for write_diagrams
    keeps = [{"op": v.op, "source": v.source, "keeps": explain_node(v)} for v in record.graph.nodes if v.op != "const"]
    return {"keeps": keeps, "saved_per_node": saved, "tape_graph": str(record.graph),
            "residuals": len(record.partition.residuals), "from_tape": record.from_tape,
            "recomputed": record.recomputed, "grad": x.grad.numpy().tolist()}


def version_check() -> dict:
    x = gr.Tensor([2.0, 3.0], requires_grad=True)
    y = (x * x).sum()
    saved_at = x.version  # multiply saved x at this version
    with gr.no_grad():
        x += 1  # not recorded, but the version moves
    try:
        y.backward()
        message = None
    except VersionError as e:
        message = str(e)
    a = gr.Tensor([2.0, 3.0], requires_grad=True)
    z = (a + 2.0).sum()
    with gr.no_grad():
        a += 1  # nothing saved a: allowed
    z.backward()
    return {"error": message, "version_saved": saved_at, "version_after": x.version,
            "add_case_grad": a.grad.numpy().tolist()}


def graph_lifetime() -> dict:
    x = gr.Tensor([2.0, 3.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    first = x.grad.numpy().tolist()
    try:
        y.backward()
        freed = None
    except FreedGraphError as e:
        freed = str(e)
    x.grad = None
    y = (x * x).sum()
    y.backward(retain_graph=True)
    again_first = x.grad.numpy().tolist()
    x.grad = None
    y.backward(retain_graph=True)
    again = x.grad.numpy().tolist()
    y.backward(retain_graph=True)  # accumulates into the same .grad
    accumulated = x.grad.numpy().tolist()
    x.grad.zero_()
    y.backward(retain_graph=True)
    after_zero = x.grad.numpy().tolist()
    x.grad = None
    none = x.grad is None
    y.backward()
    after_none = x.grad.numpy().tolist()
    return {"first": first, "freed_error": freed, "retained_first": again_first, "retained_again": again,
            "accumulated": accumulated, "after_zero": after_zero, "none_after_reset": none, "after_none": after_none}


def higher_order() -> dict:
    x = gr.Tensor(2.0, requires_grad=True)
    (x ** 3).backward(create_graph=True)
    first = x.grad
    has_history = first.grad_fn is not None
    x.grad = None
    first.backward()
    return {"first": first.item(), "second": x.grad.item(), "first_has_grad_fn": has_history}


def leaf_vs_non_leaf() -> dict:
    x = gr.Tensor([2.0, 3.0], requires_grad=True)
    y = x * x
    y.retain_grad()
    y.sum().backward()
    x2 = gr.Tensor([2.0, 3.0], requires_grad=True)
    y2 = x2 * x2  # the same, without retain_grad()
    y2.sum().backward()
    return {"x_is_leaf": x.is_leaf, "y_is_leaf": y.is_leaf, "y_grad_fn": repr(y.grad_fn),
            "x_grad": x.grad.numpy().tolist(), "y_grad": y.grad.numpy().tolist(), "not_retained_grad": y2.grad}


def write_diagrams(out, record) -> dict:
    """The tape (as a forward graph) and the backward program of `record` (a gradir.eager.record.BackwardRecord) as
    diagrams in `out`: .dot always, .svg when `dot` runs (otherwise its reason is printed). Atomic writes."""
    from gradir.util.fileio import write_atomic
    from gradir.viz.graphs import graph_diagram, render_svg

    written = {}
    for name, graph in (("tape", record.graph), ("tape_backward", record.partition.backward)):
        diagram = graph_diagram(graph)
        written[f"{name}.dot"] = str(write_atomic(pathlib.Path(out) / f"{name}.dot", diagram.source))
        rendered = render_svg(diagram)
        if rendered.svg is not None:
            written[f"{name}.svg"] = str(write_atomic(pathlib.Path(out) / f"{name}.svg", rendered.svg))
        else:
            print(f"   {name}.svg not drawn: {rendered.error}")
    for path in written.values():
        print(f"   wrote {path}")
    return written


def main(verbose: bool = True, out=None) -> dict:
    """Print the figures (with `out`, write the tape's diagrams there too); return them."""
    figures = {"tape": what_nodes_keep(), "version": version_check(), "lifetime": graph_lifetime(),
               "higher_order": higher_order(), "leaf": leaf_vs_non_leaf()}
    if verbose:
        t = figures["tape"]
        print("1. what each tape node keeps, for y = sum(tanh(x*x + x)):")
        for row in t["keeps"]:
            print(f"   {row['op']:<10} {row['keeps']:<36} ({row['source']})")
        print(f"   values held by each tape node: {t['saved_per_node']}")
        print("   the tape as a forward graph (last_backward().graph):")
        print("   " + t["tape_graph"].replace("\n", "\n   "))
        print(f"   residuals of the backward program: {t['residuals']} (read from the tape: {t['from_tape']}, "
              f"recomputed: {t['recomputed']})")
        v = figures["version"]
        print("2. version check: x=[2,3], y=sum(x*x), x += 1 under no_grad, y.backward():")
        print(f"   VersionError: {v['error']}")
        print(f"   x's version: {v['version_saved']} when multiply saved it -> {v['version_after']} at backward  "
              f"(the course: {COURSE['versions'][0]} -> {COURSE['versions'][1]})")
        print(f"   the allowed case, y=sum(x+2) then x += 1: x.grad = {v['add_case_grad']}")
        g = figures["lifetime"]
        print("3. graph lifetime, y = sum(x*x) at x=[2,3]:")
        print(f"   first backward: x.grad = {g['first']}")
        print(f"   second backward, graph freed: FreedGraphError: {g['freed_error']}")
        print(f"   retain_graph=True: {g['retained_first']}, again (after .grad=None): {g['retained_again']}")
        ratio = {a / b for a, b in zip(g["accumulated"], g["retained_again"])}
        times = f"{ratio.pop():g}x the one before" if len(ratio) == 1 else "not a multiple of the one before"
        print(f"   one more backward accumulates: x.grad = {g['accumulated']} ({times})  "
              f"(the course: {COURSE['accumulated']}x)")
        print(f"   x.grad.zero_() then backward: {g['after_zero']};  x.grad = None -> None is {g['none_after_reset']}, "
              f"then backward: {g['after_none']}")
        h = figures["higher_order"]
        print(f"4. higher order, x^3 at 2: first derivative {h['first']:g} (has a grad_fn: {h['first_has_grad_fn']}), "
              f"second derivative {h['second']:g}  (the course: {COURSE['first']}, {COURSE['second']})")
        lf = figures["leaf"]
        print(f"5. leaf vs non-leaf, y = x*x: x.is_leaf={lf['x_is_leaf']}, y.is_leaf={lf['y_is_leaf']}, "
              f"y.grad_fn={lf['y_grad_fn']}")
        print(f"   y.sum().backward(): x.grad = {lf['x_grad']}, retained y.grad = {lf['y_grad']}, "
              f"without retain_grad(): y.grad = {lf['not_retained_grad']}")
        print(f"     (the course: x.grad = {COURSE['x_grad']}, retained y.grad = {COURSE['y_grad']})")
    if out is not None:
        print(f"Files (--out {out}): the tape of y = sum(tanh(x*x + x)) and its backward program")
        figures["files"] = write_diagrams(out, what_nodes_keep.record)
    elif verbose:
        print("Pictures: --out DIR draws the tape and its backward program; "
              "notebooks/e_saved_tensors_memory_checkpointing.py shows them inline.")
    return figures


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", metavar="DIR", help="write the tape's diagrams into DIR")
    main(out=ap.parse_args().out)
