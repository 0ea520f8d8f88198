"""What backward keeps: gradir.core.rules (what each VJP rule reads) and the saved-tensor report
(passes/saved.py), checked against hand derivations and against the tensors PyTorch's autograd
saves (counted with torch.autograd.graph.saved_tensors_hooks)."""

from __future__ import annotations

import inspect
import json
import os

import numpy as np
import pytest
import torch

import gradir as gr
from gradir.core.rules import OUTPUT, explain, vjp_reads, vjp_reads_by_operand
from gradir.passes import joint_graph, partition, run_pipeline
from gradir.passes.saved import SavedReport, saved_tensors

F64 = np.dtype(np.float64)


def _partition(fn, *args, argnums=(0,)):
    graph = gr.trace(fn, *args)
    return partition(run_pipeline(joint_graph(graph, list(argnums))))


def _report(fn, *args, argnums=(0,), **kw) -> SavedReport:
    return saved_tensors(_partition(fn, *args, argnums=argnums), **kw)


def _line(fn, marker: str) -> str:
    lines, start = inspect.getsourcelines(fn)
    k = next(i for i, text in enumerate(lines) if marker in text)
    return f"{os.path.basename(__file__)}:{start + k}"


def _index(values, v) -> int:
    """Position by identity (`list.index` would call Value.__eq__, the elementwise op)."""
    return next(i for i, u in enumerate(values) if u is v)


def _torch_saved(fn, arrays, requires_grad):
    """(count, new bytes) of the distinct tensors torch's autograd saves for fn; new bytes leave out
    the leaves (inputs and parameters)."""
    leaves = [torch.tensor(a, requires_grad=r) for a, r in zip(arrays, requires_grad)]
    saved = {}

    def pack(t):
        saved[(t.data_ptr(), tuple(t.shape), t.stride(), t.dtype)] = t
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*leaves)
    leaf_ptrs = {t.data_ptr() for t in leaves}
    return len(saved), sum(t.nbytes for k, t in saved.items() if k[0] not in leaf_ptrs)


# -- rules ------------------------------------------------------------------------------------------


V3 = np.zeros(3)
M33 = np.zeros((3, 3))
I2 = np.zeros(2, dtype=np.int64)


@pytest.mark.parametrize("op, operands, attrs, out_shape, reads", [
    ("multiply", [V3, V3], {}, (3,), {0, 1}),         # d(xy)/dx = y, d(xy)/dy = x
    ("add", [V3, V3], {}, (3,), set()),               # d(x+y) = 1, 1
    ("subtract", [V3, V3], {}, (3,), set()),
    ("tanh", [V3], {}, (3,), {OUTPUT}),               # 1 - tanh^2
    ("exp", [V3], {}, (3,), {OUTPUT}),                # exp
    ("sqrt", [V3], {}, (3,), {OUTPUT}),               # 1 / (2 sqrt x)
    ("log", [V3], {}, (3,), {0}),                     # 1 / x
    ("sin", [V3], {}, (3,), {0}),                     # cos x
    ("divide", [V3, V3], {}, (3,), {1, OUTPUT}),      # 1/y and -x/y^2 = -out/y
    ("matmul", [M33, M33], {}, (3, 3), {0, 1}),       # g B^T, A^T g
    ("take", [V3, I2], {"axis": 0}, (2,), {1}),       # scatter g to the indices
    ("sum", [M33], {"axes": (0,), "keepdims": False}, (3,), set()),
    ("transpose", [M33], {"perm": (1, 0)}, (3, 3), set()),
    ("less", [V3, V3], {}, (3,), set()),              # not differentiable
])
def test_vjp_reads_hand_derived(op, operands, attrs, out_shape, reads):
    out_dtype = np.dtype(bool) if op == "less" else F64
    assert vjp_reads(op, operands, attrs, out_shape, out_dtype) == frozenset(reads)


def test_vjp_reads_per_operand_and_cache():
    by = vjp_reads_by_operand("multiply", [V3, V3], {}, (3,), F64)
    assert by == (frozenset({1}), frozenset({0}))  # each operand's cotangent reads the other one
    assert vjp_reads_by_operand("multiply", [V3, V3], {}, (3,), F64) is by  # cached
    # integer indices get no cotangent
    assert vjp_reads_by_operand("take", [V3, I2], {"axis": 0}, (2,), F64)[1] is None
    # where: the condition is what both cotangents read
    by = vjp_reads_by_operand("where", [np.zeros(3, bool), V3, V3], {}, (3,), F64)
    assert by == (None, frozenset({0}), frozenset({0}))


def test_explain_phrases():
    assert explain("add", frozenset(), 2) == "add keeps nothing"
    assert explain("tanh", frozenset({OUTPUT}), 1) == "tanh keeps its output"
    assert explain("exp", frozenset({OUTPUT}), 1) == "exp keeps its output"
    assert explain("log", frozenset({0}), 1) == "log keeps its input"
    assert explain("matmul", frozenset({0, 1}), 2) == "matmul keeps both operands"
    assert explain("take", frozenset({1}), 2) == "take keeps the indices"
    assert explain("divide", frozenset({1, OUTPUT}), 2) == "divide keeps its second operand and its output"
    by = vjp_reads_by_operand("multiply", [V3, V3], {}, (3,), F64)
    assert explain("multiply", frozenset({0, 1}), 2, by) == "multiply keeps the other operand"


# -- the saved-tensor report --------------------------------------------------------------------------


def _loss_tanh(a, b):
    return gr.tanh(a * b + a).sum()  # <tanh line>


def test_teaching_tanh_example():
    a, b = np.array([1.5, 0.5, -1.0]), np.array([-2.0, 1.0, 0.25])
    r = _report(_loss_tanh, a, b, argnums=(0, 1))
    # hand derivation: multiply keeps a and b (each for the other's gradient); add keeps nothing;
    # tanh keeps its output; sum keeps nothing
    by_kind = {e.name: e.kind for e in r.entries}
    tanh_entry = next(e for e in r.entries if e.producer["op"] == "tanh")
    assert by_kind == {"a": "input", "b": "input", tanh_entry.name: "activation"}
    assert r.count == 3 and r.bytes == 3 * 8 and r.total_bytes == 3 * 3 * 8
    assert r["a"].new_bytes == r["b"].new_bytes == 0 and tanh_entry.new_bytes == 24
    assert [n.reason for n in tanh_entry.needed_by] == ["tanh keeps its output"]
    assert str(tanh_entry.needed_by[0]) == f"{tanh_entry.name} = tanh: tanh keeps its output"
    for name in ("a", "b"):
        assert [(n.op, n.reason) for n in r[name].needed_by] == [("multiply", "multiply keeps the other operand")]
    line = _line(_loss_tanh, "<tanh line>")
    assert tanh_entry.producer == {"op": "tanh", "source": line}
    assert r["a"].producer["op"] == "input"
    # torch saves the same three tensors (mul: self and other; tanh: its result)
    count, new = _torch_saved(lambda a, b: torch.tanh(a * b + a).sum(), [a, b], [True, True])
    assert (r.count, r.bytes) == (count, new)


def test_readers_and_last_use_match_backward_graph():
    a, b = np.array([1.5, 0.5]), np.array([-2.0, 1.0])
    part = _partition(_loss_tanh, a, b, argnums=(0, 1))
    r = saved_tensors(part)
    bwd = part.backward
    for k, e in enumerate(r.entries):
        placeholder = bwd.inputs[k]
        readers = [n for n in bwd.nodes if any(i is placeholder for i in n.inputs)]
        assert [x.op for x in readers] == [x.op for x in e.readers]
        assert e.last_use == max(_index(bwd.nodes, n) for n in readers)
    # tanh's output is read by its rule's y*y
    tanh_entry = next(e for e in r.entries if e.producer["op"] == "tanh")
    assert [x.op for x in tanh_entry.readers] == ["multiply"]
    # another order: last_use indexes it (Values or node indices)
    order = list(reversed(bwd.nodes))
    for given in (order, [_index(bwd.nodes, n) for n in order]):
        r2 = saved_tensors(part, backward_order=given)
        for k, e in enumerate(r2.entries):
            readers = [n for n in bwd.nodes if any(i is bwd.inputs[k] for i in n.inputs)]
            assert e.last_use == max(_index(order, n) for n in readers)


def test_sum_of_squares_keeps_x():
    x = np.array([2.0, 3.0])
    r = _report(lambda x: (x * x).sum(), x)
    assert [e.name for e in r.entries] == ["x"]
    assert r.count == 1 and r.bytes == 0 and r["x"].kind == "input" and r["x"].bytes == 16
    assert [n.reason for n in r["x"].needed_by] == ["multiply keeps the other operand"]
    assert _torch_saved(lambda x: (x * x).sum(), [x], [True]) == (1, 0)


def test_sum_of_add_keeps_nothing():
    x, y = np.array([2.0, 3.0]), np.array([1.0, 1.0])
    r = _report(lambda x, y: (x + y).sum(), x, y, argnums=(0, 1))
    assert r.count == 0 and r.bytes == 0 and r.entries == []
    assert _torch_saved(lambda x, y: (x + y).sum(), [x, y], [True, True]) == (0, 0)


def test_only_what_requested_gradients_need():
    # d/da (a*b) = b: with only a differentiated, multiply keeps b alone (torch too)
    a, b = np.array([2.0, 3.0]), np.array([4.0, 5.0])
    r = _report(lambda a, b: (a * b).sum(), a, b, argnums=(0,))
    assert [e.name for e in r.entries] == ["b"]
    assert _torch_saved(lambda a, b: (a * b).sum(), [a, b], [True, False]) == (1, 0)


def _mlp(act):
    def f(x, W1, b1, W2, b2):
        h = act(x @ W1 + b1)
        out = h @ W2 + b2
        return (out * out).sum()
    return f


@pytest.mark.parametrize("name", ["tanh", "relu"])
def test_mlp_saves_what_torch_saves(name):
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s) for s in [(8, 5), (5, 6), (6,), (6, 3), (3,)]]
    r = _report(_mlp(getattr(gr, name)), *args, argnums=(1, 2, 3, 4))
    count, new = _torch_saved(_mlp(getattr(torch, name)), args, [False, True, True, True, True])
    # hand derivation: x (for dW1), W2 (for dh), h (tanh: its output, kept for dW2 too), out (for out*out)
    hidden, out = 8 * 6 * 8, 8 * 3 * 8
    assert count == 4 and new == hidden + out  # torch: relu and tanh both keep their result
    extra = 0
    if name == "relu" and vjp_reads("relu", [np.zeros((8, 6))], {}, (8, 6), F64) == frozenset({0}):
        extra = 1  # gradir's relu rule reads its input (x > 0) where torch's reads its output
    assert r.count == count + extra and r.bytes == new + extra * hidden
    assert sorted(e.kind for e in r.entries if e.kind == "input") == ["input", "input"]
    assert {e.name for e in r.entries if e.kind == "input"} == {"x", "W2"}


def test_views_share_storage():
    x, w = np.ones((4, 3)), np.ones((4, 5))
    # w only: the reshape view of tanh(x) is kept; tanh's output itself is not saved, so the view
    # keeps its whole buffer alive (96 bytes)
    r = _report(lambda x, w: (gr.tanh(x).reshape(3, 4) @ w).sum(), x, w, argnums=(1,))
    (e,) = r.entries
    assert e.kind == "view" and e.producer["op"] == "reshape" and e.new_bytes == 96 and r.bytes == 96
    assert [n.reason for n in e.needed_by] == ["matmul keeps the other operand"]
    owner = e.view_of
    # x and w: tanh keeps its output, so the view adds no new memory
    r = _report(lambda x, w: (gr.tanh(x).reshape(3, 4) @ w).sum(), x, w, argnums=(0, 1))
    kinds = {e.name: (e.kind, e.view_of, e.new_bytes) for e in r.entries}
    assert kinds[owner] == ("activation", None, 96)
    view = next(n for n, k in kinds.items() if k[0] == "view")
    assert kinds[view] == ("view", owner, 0) and kinds["w"] == ("input", None, 0)
    assert r.bytes == 96 and r.total_bytes == 96 + 96 + 160
    reasons = [n.reason for n in r[owner].needed_by]
    assert reasons == ["tanh keeps its output", f"matmul keeps the other operand (through the reshape {view})"]
    # a view of an input is free
    r = _report(lambda x, w: (x.reshape(3, 4) @ w).sum(), x, w, argnums=(1,))
    (e,) = r.entries
    assert (e.kind, e.view_of, e.new_bytes, r.bytes) == ("view", "x", 0, 0)


def test_to_dict_and_table():
    a, b = np.array([1.5, 0.5]), np.array([-2.0, 1.0])
    r = _report(_loss_tanh, a, b, argnums=(0, 1))
    d = json.loads(json.dumps(r.to_dict()))
    assert {"count", "bytes", "entries"} <= set(d)
    assert d["count"] == 3 and d["bytes"] == 16 and len(d["entries"]) == 3
    e = d["entries"][0]
    assert {"name", "dtype", "shape", "bytes", "new_bytes", "kind", "view_of", "producer", "readers", "needed_by",
            "last_use"} <= set(e)
    assert e["dtype"] == "f64" and e["shape"] == [2]
    assert d["entries"][2]["needed_by"][0]["text"].endswith("= tanh: tanh keeps its output")
    text = r.text(width=None)  # unwrapped: str(r) fits 80 columns, wrapping long cells
    for word in ("a", "b", "tanh keeps its output", "multiply keeps", "total", "activation", "input"):
        assert word in text
