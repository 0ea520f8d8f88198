"""Split a joint forward+backward graph into a forward program and a backward program.

forward:  primal inputs -> forward outputs + residuals
backward: residuals + output cotangents -> gradients

The forward program computes only what the forward outputs need; every other node of the joint
graph runs in backward. The residuals ("saved tensors") are the forward values the backward
reads. Values computed from constants alone are recomputed in backward rather than saved.
"""

from __future__ import annotations

from dataclasses import dataclass

from gradir.ir import Graph, Value, topo_values


@dataclass
class Partition:
    joint: Graph
    forward: Graph
    backward: Graph
    residuals: list[Value]  # joint-graph values saved by forward for backward, in forward order
    joint_of: dict[Value, Value]  # forward/backward graph value -> the joint-graph value it copies

    def timeline(self, backward_order: list[Value] | None = None) -> tuple[list[Value], list[str]]:
        """The joint graph's nodes in execution order (forward program, then backward program in
        `backward_order`, default its graph order), with each step's phase."""
        fwd = [self.joint_of[n] for n in self.forward.nodes]
        seen = set(fwd)  # constant-only values the backward recomputes already ran in forward
        bwd = [self.joint_of[n] for n in (backward_order or self.backward.nodes) if self.joint_of[n] not in seen]
        return fwd + bwd, ["forward"] * len(fwd) + ["backward"] * len(bwd)


def _const_only(graph: Graph) -> set[Value]:
    out: set[Value] = set()
    for n in graph.nodes:
        if n.op == "const" or (n.inputs and all(i in out for i in n.inputs)):
            out.add(n)
    return out


def partition(joint: Graph, num_forward_outputs: int | None = None) -> Partition:
    k = joint.num_forward_outputs if num_forward_outputs is None else num_forward_outputs
    n_ct = k
    primals = joint.inputs[:len(joint.inputs) - n_ct]
    cts = joint.inputs[len(joint.inputs) - n_ct:]
    fwd_outs, grads = joint.outputs[:k], joint.outputs[k:]
    constish = _const_only(joint)

    fwd_set = set(topo_values(fwd_outs)) | set(primals)
    saved = lambda v: v in fwd_set and v not in constish  # noqa: E731 - read from forward, not recomputed
    # backward = what the gradients need, walking up until a saved forward value is reached
    needed, stack = set(), [g for g in grads if not saved(g)]
    while stack:
        v = stack.pop()
        if v not in needed:
            needed.add(v)
            stack.extend(i for i in v.inputs if not saved(i))
    position = {v: i for i, v in enumerate(joint.all_values())}
    bwd_order = sorted(needed, key=position.__getitem__)
    residual_set = {i for n in bwd_order for i in n.inputs if saved(i)} | {g for g in grads if saved(g)}
    residuals = sorted(residual_set, key=position.__getitem__)

    forward = Graph(joint.name.replace("_joint", "") + "_forward")
    env: dict[Value, Value] = {}
    for x in primals:
        env[x] = forward.add_input(x.shape, x.dtype, x.attrs.get("name"), x.source)
    for n in joint.nodes:
        if n in fwd_set:
            env[n] = forward.append(n.op, [env[i] for i in n.inputs], n.attrs, n.shape, n.dtype, n.source)
    forward.outputs = [env[o] for o in fwd_outs] + [env[r] for r in residuals]
    forward.num_forward_outputs = k

    backward = Graph(joint.name.replace("_joint", "") + "_backward")
    benv: dict[Value, Value] = {}
    for r in residuals:
        name = r.attrs.get("name") if r.op == "input" else f"saved_{r.op}{position[r]}"
        benv[r] = backward.add_input(r.shape, r.dtype, name, r.source)
    for c in cts:
        benv[c] = backward.add_input(c.shape, c.dtype, c.attrs.get("name"), c.source)
    for n in bwd_order:
        if n.op == "input":
            continue
        benv[n] = backward.append(n.op, [benv[i] for i in n.inputs], n.attrs, n.shape, n.dtype, n.source)
    backward.outputs = [benv[g] for g in grads]
    joint_of = {v: j for j, v in env.items()} | {v: j for j, v in benv.items()}
    return Partition(joint, forward, backward, residuals, joint_of)
