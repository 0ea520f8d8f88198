"""Which kernels can run the same compiled function: a structural key per kernel.

A kernel function takes its buffers as pointer parameters, so two kernels whose code is the same up
to those pointers (an unrolled loop's iterations, a deep network's identical blocks) share one LLVM
function, and the driver calls it with different pointers. `kernel_key` is a canonical serialization
of everything the emitters in `codegen` read about a kernel: Values become local ids in order of
first appearance, buffers become parameter positions, and every op, attribute, shape, dtype, axis
map, pass, access (offset and strides) and literal constant is spelled out. Kernels with equal keys
emit identical code (tests/test_llvm_backend.py checks this against the emitted text), so a field
missing here would be wrong code: anything codegen starts reading must be added here too.
"""

from __future__ import annotations

import numpy as np

from gradir.ir import Value
from gradir.passes.fusion import LOOP, VIEWS, FusedProgram, Kernel, in_kernel_value


def kernel_params(k: Kernel, program: FusedProgram) -> list[Value]:
    """The distinct buffers kernel k touches: owners of what it reads, then of what it writes."""
    owners: dict[Value, None] = {}
    for u in k.inputs:
        owners.setdefault(program.access[u].owner)
    for v in k.outputs:
        owners.setdefault(program.access[v].owner)
    return list(owners)


def _canon(x):
    """A hashable, exact spelling of an attribute value (bytes for floats and arrays: -0.0 and NaNs stay apart;
    tags where Python's equality would conflate: True == 1 == 1.0, (1,) == [1] is False but a list is unhashable)."""
    t = type(x)
    if t is int or t is str or x is None:
        return x
    if t is tuple:
        return tuple(map(_canon, x))
    if t is bool:
        return ("bool", x)
    if t is float:
        return ("float", np.float64(x).tobytes())
    if t is list:
        return ("list", tuple(map(_canon, x)))
    if isinstance(x, np.ndarray | np.generic):
        a = np.asarray(x)
        return ("array", a.dtype, a.shape, a.tobytes())
    if isinstance(x, np.dtype):
        return ("dtype", x)
    if t is dict:
        return ("dict", tuple((key, _canon(v)) for key, v in sorted(x.items())))
    return ("object", id(x))  # unknown: never equal to another kernel's, so never shared


def kernel_key(k: Kernel, program: FusedProgram, params: list[Value] | None = None) -> tuple:
    """The structural key of kernel k: equal keys mean the same generated code (see the module docstring)."""
    params = kernel_params(k, program) if params is None else params
    param_of = {o: i for i, o in enumerate(params)}
    nodes = {n: i for i, n in enumerate(k.nodes)}
    access, immediates = program.access, program.immediates
    maps, stored, accumulated, copies, passes, row_after = k.maps, k.stored, k.accumulated, k.copies, k.passes, k.row_after
    ids: dict[Value, int] = {}
    queue: list[Value] = []

    def ref(v: Value | None):
        if v is None:
            return None
        i = ids.get(v)
        if i is None:
            i = ids[v] = len(queue)
            queue.append(v)
        return i

    head = (k.kind, k.domain, k.outer, tuple((o.dtype, o.shape, o.op == "const") for o in params),
            tuple(map(ref, k.nodes)), tuple(map(ref, k.inputs)), tuple(map(ref, k.outputs)),
            ref(k.epilogue), ref(k.bias), ref(k.transposed))
    described = []
    for v in queue:  # breadth first over the values the code reads (the queue grows as they are met)
        acc = access.get(v)
        if acc is not None:
            owner = param_of.get(acc.owner)
            acc = (owner if owner is not None else ("foreign", id(acc.owner)), acc.offset, acc.strides)
        op = v.op
        if v in nodes:  # computed here: everything fusion decided about it
            described.append((
                op, v.shape, v.dtype, _canon(v.attrs) if v.attrs else None, tuple(map(ref, v.inputs)), acc,
                maps.get(v), v in accumulated, v in stored, ref(copies.get(v)), passes.get(v), row_after.get(v)))
            continue
        operands = ()
        if op == "const":  # read from memory, except a gemm's 0-d bias, which its epilogue writes as a literal
            attrs = None if v.shape or k.kind == LOOP else _canon(v.attrs)
        elif op in VIEWS:  # read from memory through its access, or the in-kernel value it views
            op, attrs = "view", None
            p = in_kernel_value(k, v)
            operands = () if p is None else (ref(p),)
        else:
            op, attrs = "*", None  # computed elsewhere: only its storage matters
        imm = immediates.get(v)
        described.append((op, v.shape, v.dtype, attrs, operands, acc, None if imm is None else ref(imm)))
    return head + tuple(described)


def share(kernels: list[Kernel], program: FusedProgram,
          params: dict[int, list[Value]] | None = None) -> tuple[dict[int, int], list[Kernel]]:
    """Group kernels by key: (kernel index -> function number, one representative kernel per function).
    `params` may give each kernel's kernel_params by index."""
    function_of: dict[int, int] = {}
    functions: list[Kernel] = []
    seen: dict[tuple, int] = {}
    for k in kernels:
        key = kernel_key(k, program, params[k.index] if params is not None else None)
        f = seen.setdefault(key, len(functions))
        if f == len(functions):
            functions.append(k)
        function_of[k.index] = f
    return function_of, functions


__all__ = ["kernel_key", "kernel_params", "share"]
