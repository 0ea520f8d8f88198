"""Composite primitives: one node with a hand-derived fused VJP, lowered to its decomposition before execution."""

from __future__ import annotations

from gradir.core import dtypes
from gradir.core.errors import DTypeError, GradirError, UnsupportedOpError
from gradir.core.ir import Graph, Value
from gradir.core.primitive import Primitive, get_primitive, register
from gradir.core.trace import EagerOperand, bind, building, constant, is_traced, user_source
from gradir.ops.lifting import lift

__all__ = ["composite"]

# -- composite primitives --------------------------------------------------------------------------


def composite(name: str, args: tuple[str, ...], infer, decompose, vjp, doc: str = "") -> Primitive:
    """Register a composite primitive: no NumPy template; `decompose` (the computation in primitives)
    is what runs, `vjp` is the hand-derived rule autodiff uses, and the JVP is forward mode over the
    decomposition."""
    return register(Primitive(name, args, infer, numpy=None, vjp=vjp, jvp=_decomposition_jvp(decompose),
                              kind="composite", decompose=decompose, doc=doc))


def _decomposition_jvp(decompose):
    """JVP rule of a composite: trace `decompose` into a scratch graph, then replay it into the graph
    being built, applying each primitive's JVP rule as forward mode does."""
    def jvp(ts, out, *xs, **attrs):
        scratch = Graph("decomposition")
        with building(scratch):
            holders = [scratch.add_input(x.shape, x.dtype) for x in xs]
            result = decompose(*holders, **attrs)
        env: dict[Value, Value] = dict(zip(holders, xs))
        tangent: dict[Value, Value | None] = dict(zip(holders, ts))
        for n in scratch.nodes:
            if n.op == "const":
                env[n], tangent[n] = constant(n.attrs["value"]), None
                continue
            operands = [env[i] for i in n.inputs]
            env[n] = bind(n.op, *operands, **n.attrs)
            prim, n_ts = get_primitive(n.op), [tangent[i] for i in n.inputs]
            live = prim.differentiable and dtypes.is_inexact(n.dtype) and any(t is not None for t in n_ts)
            tangent[n] = prim.jvp(n_ts, env[n], *operands, **n.attrs) if live else None
        return tangent[result]
    return jvp


def checked(op: str, infer, *operands, **attrs):
    """Run a composite's shape rule up front, so errors name the user's line on the eager path too."""
    try:
        infer(*operands, **attrs)
    except GradirError as e:
        raise type(e)(e.detail, op=op, source=user_source()) from None


def apply(op: str, decompose, operands, attrs):
    """Bind the composite inside a trace; on concrete operands run its decomposition eagerly."""
    if any(isinstance(o, EagerOperand) for o in operands):
        return bind(op, *operands, **attrs)  # eager Tensors record one fused node on their tape
    if not is_traced(*operands):
        return decompose(*operands, **attrs)
    return bind(op, *[o if isinstance(o, Value) else lift(o) for o in operands], **attrs)


def choice(op: str, name: str, value, allowed):
    if value not in allowed:
        raise UnsupportedOpError(f"{name}={value!r} is not supported (use one of {', '.join(map(repr, allowed))})",
                                 op=op, source=user_source())

def float_input(op, x):
    if not dtypes.is_float(x.dtype):
        raise DTypeError(f"needs a floating input, got {dtypes.short(x.dtype)}", op=op, source=user_source())
