"""Which kernels can run the same compiled function: one structural key per kernel, for every renderer.

A kernel function takes its buffers as pointer parameters, so two kernels whose code is the same up
to those pointers (an unrolled loop's iterations, a deep network's identical blocks) share one
function, compiled once, and the backend calls it with different pointers (LLVM: the driver's table;
Triton: each launch). `kernel_key` is a canonical serialization of everything the renderers
(backends/llvm, backends/triton) read about a kernel: Values become local ids in order of first
appearance, buffers become parameter positions, and every op, attribute, shape, dtype, axis map,
pass, access (offset and strides) and constant is spelled out. Kernels with equal keys render to
identical code (tests/test_llvm_backend.py and tests/test_triton_backend.py check this against the
emitted text), so a field missing here would be wrong code: anything a renderer starts reading must
be added here too.

Renderers differ in one thing, a parameter of the key: the LLVM backend reads a loop kernel's 0-d
constants from memory (kernels differing only in a constant share code), the Triton backend writes
them into the source as literals (`literal_constants=True`: their values are part of the key).
"""

from __future__ import annotations

import numpy as np

from gradir.core.ir import Value
from gradir.passes.fusion import LOOP, MAX_KERNEL_NODES, VIEWS, FusedProgram, Kernel, in_kernel_value


def kernel_params(k: Kernel, program: FusedProgram) -> list[Value]:
    """The distinct buffers kernel k touches: owners of what it reads, then of what it writes."""
    return list(_param_positions(k, program.access))


def _param_positions(k: Kernel, access) -> dict[Value, int]:
    """kernel_params(k) -> position: each buffer's parameter number."""
    owners: dict[Value, int] = {}
    for u in k.inputs:
        o = access[u].owner
        if o not in owners:
            owners[o] = len(owners)
    for v in k.outputs:
        o = access[v].owner
        if o not in owners:
            owners[o] = len(owners)
    return owners


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


def kernel_key(k: Kernel, program: FusedProgram, params: list[Value] | None = None,
               literal_constants: bool = False) -> tuple:
    """The structural key of kernel k: equal keys mean the same generated code (see the module docstring).
    `literal_constants`: the renderer writes 0-d constants into the code (their values are then part of the key)."""
    param_of = _param_positions(k, program.access) if params is None else {o: i for i, o in enumerate(params)}
    return _key(k, program.access, program.immediates, param_of, {}, literal_constants)


_RANGES: list[tuple] = [tuple(range(n)) for n in range(MAX_KERNEL_NODES + 2)]


def _range(n: int) -> tuple:
    return _RANGES[n] if n < len(_RANGES) else tuple(range(n))


def _key(k: Kernel, access, immediates, param_of: dict[Value, int], canon_memo: dict, literal_constants: bool) -> tuple:
    """kernel_key, given kernel k's buffers (-> parameter number) and a memo (id of an attrs dict -> its
    spelling) that the calls of one `Sharing` may share (its dicts stay alive and unchanged meanwhile)."""
    nodes = k.nodes
    n_nodes = len(nodes)
    # local ids in order of first appearance: the nodes first (each once), then the values met after
    queue = list(nodes)
    ids = dict(zip(queue, range(n_nodes)))
    get = ids.get

    def ref(v: Value | None):
        if v is None:
            return None
        i = get(v)
        if i is None:
            i = ids[v] = len(queue)
            queue.append(v)
        return i

    def refs(values) -> tuple:  # ref of each (a loop per list, not a call per value: keys run per kernel)
        out = []
        for v in values:
            i = get(v)
            if i is None:
                i = ids[v] = len(queue)
                queue.append(v)
            out.append(i)
        return tuple(out)

    epilogue, bias, transposed = k.epilogue, k.bias, k.transposed
    head = (k.kind, k.domain, k.outer, tuple([(o.dtype, o.shape, o.op == "const") for o in param_of]),
            _range(n_nodes), refs(k.inputs), refs(k.outputs), None if epilogue is None else ref(epilogue),
            None if bias is None else ref(bias), None if transposed is None else ref(transposed))
    maps, accumulated, copies, passes, row_after = k.maps, k.accumulated, k.copies, k.passes, k.row_after
    stored = set(k.outputs)
    described = []
    append = described.append
    for v in nodes:  # computed here: everything fusion decided about each node
        acc = access.get(v)
        if acc is not None:
            owner = param_of.get(acc.owner)
            acc = (owner if owner is not None else ("foreign", id(acc.owner)), acc.offset, acc.strides)
        attrs = v.attrs
        if attrs:
            c = canon_memo.get(id(attrs))
            if c is None:
                c = canon_memo[id(attrs)] = _canon(attrs)
        else:
            c = None
        append((v.op, v.shape, v.dtype, c, refs(v.inputs), acc, maps.get(v) if maps else None,
                v in accumulated, v in stored, ref(copies.get(v)) if copies else None,
                passes.get(v) if passes else None, row_after.get(v) if row_after else None))
    loads = k.kind == LOOP and not literal_constants  # 0-d constants read from memory, not written as literals
    j = n_nodes
    while j < len(queue):  # then the values the code reads, breadth first (the queue grows as they are met)
        v = queue[j]
        j += 1
        acc = access.get(v)
        if acc is not None:
            owner = param_of.get(acc.owner)
            acc = (owner if owner is not None else ("foreign", id(acc.owner)), acc.offset, acc.strides)
        op = v.op
        operands = ()
        if op == "const":  # read from memory, except 0-d ones the renderer writes as literals (a gemm's bias, say)
            attrs = None if v.shape or loads else _canon(v.attrs)
        elif op in VIEWS:  # read from memory through its access, or the in-kernel value it views
            op, attrs = "view", None
            p = in_kernel_value(k, v)
            if p is not None:
                operands = (ref(p),)
        else:
            op, attrs = "*", None  # computed elsewhere: only its storage matters
        imm = immediates.get(v)
        append((op, v.shape, v.dtype, attrs, operands, acc, None if imm is None else ref(imm)))
    return head + tuple(described)


class Sharing:
    """Kernels grouped by key as a renderer meets them: `add(k)` gives k's function number and whether it is a
    new one (render it then; an old one: call that function with k's buffers). `functions[f]` is the kernel
    function f was first rendered from, `function_of` maps kernel index -> function number."""

    def __init__(self, program: FusedProgram, literal_constants: bool = False):
        self.program, self.literal_constants = program, literal_constants
        self.function_of: dict[int, int] = {}
        self.functions: list[Kernel] = []
        self._seen: dict[tuple, int] = {}
        self._memo: dict = {}

    def add(self, k: Kernel, params: list[Value] | None = None) -> tuple[int, bool]:
        """k's function number (params: kernel_params(k) when known), and whether k is the first of its key."""
        p = self.program
        return self._add(k, _param_positions(k, p.access) if params is None else {o: i for i, o in enumerate(params)})

    def _add(self, k: Kernel, param_of: dict[Value, int]) -> tuple[int, bool]:
        p = self.program
        f = self._seen.setdefault(_key(k, p.access, p.immediates, param_of, self._memo, self.literal_constants),
                                  len(self.functions))
        new = f == len(self.functions)
        if new:
            self.functions.append(k)
        self.function_of[k.index] = f
        return f, new


def share(kernels: list[Kernel], program: FusedProgram, params: dict[int, list[Value]] | None = None,
          literal_constants: bool = False) -> tuple[dict[int, int], list[Kernel]]:
    """Group kernels by key: (kernel index -> function number, one representative kernel per function).
    `params` may give each kernel's kernel_params by index; a dict given empty is filled in."""
    sharing = Sharing(program, literal_constants)
    fill = params is not None and not params
    for k in kernels:
        if params is None or fill:
            param_of = _param_positions(k, program.access)
            if fill:
                params[k.index] = list(param_of)
        else:
            param_of = {o: i for i, o in enumerate(params[k.index])}
        sharing._add(k, param_of)
    return sharing.function_of, sharing.functions


__all__ = ["Sharing", "kernel_key", "kernel_params", "share"]
