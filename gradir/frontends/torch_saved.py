"""What PyTorch's autograd saves for a model, next to what gradir's backward saves.

The comparison gradir alone can show a learner. PyTorch's side is read with its own mechanism,
`torch.autograd.graph.saved_tensors_hooks`: every tensor an autograd node saves during the forward
passes through the pack hook once per save. Walking the autograd graph afterwards names the node
and attribute (`AddmmBackward0._saved_mat1`) of each save. gradir's side is the saved-tensor report
(`gr.trace_grad(...).saved`) of the same model captured with `gr.from_torch`.

The two count differently, and the report says how:
- PyTorch saves parameters and inputs as well as activations, while gradir counts them as inputs
  with no new memory (both keep them alive either way).
- PyTorch lists a tensor once per node that saves it, and a view (`W.t()`) as its own save. Counted
  once per storage, as gradir counts, those duplicates disappear.
- What remains, the activations, can still differ by the rules each side differentiates with.
  PyTorch's fused kernels save their input and a few statistics; gradir differentiates the
  primitives the capture decomposed them into, except where it has a fused rule of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gradir.api.transforms import trace_grad
from gradir.frontends.with_loss import capture_with_loss
from gradir.passes.report import Report, human_bytes
from gradir.passes.saved import SavedReport
from gradir.passes.text_table import Column

KINDS = ("parameter", "input", "activation")


@dataclass
class TorchSave:
    """One tensor one autograd node saved."""
    node: str               # e.g. "AddmmBackward0._saved_mat1"
    shape: tuple[int, ...]
    dtype: str
    bytes: int              # the saved tensor's own size
    kind: str               # "parameter" | "input" | "activation" (by the storage it lives in)
    storage: int            # distinct storages numbered in order of first save
    first: bool             # the first save of its storage (the one whose storage bytes count)
    storage_bytes: int      # the storage's size: what keeping it alive costs
    parameter: str | None = None  # the parameter's name, for a parameter's storage


@dataclass
class SavedComparison(Report):
    """PyTorch's saves and gradir's saved-tensor report for one model (`gr.torch_saved`)."""
    saves: list[TorchSave] = field(repr=False)
    gradir: SavedReport = field(repr=False)

    noun = "saves"

    # -- PyTorch's figures
    @property
    def torch_count(self) -> int:
        return len(self.saves)

    @property
    def torch_bytes(self) -> int:
        """Every save's size, summed save by save (what adding up the hooks' tensors gives)."""
        return sum(s.bytes for s in self.saves)

    def storage_bytes(self, kind: str | None = None) -> int:
        """Bytes of the distinct storages PyTorch's saves keep alive (of one kind, or all)."""
        return sum(s.storage_bytes for s in self.saves if s.first and (kind is None or s.kind == kind))

    @property
    def activation_bytes(self) -> int:
        """New memory PyTorch keeps for backward: distinct storages that are neither parameters nor inputs."""
        return self.storage_bytes("activation")

    def differences(self) -> list[str]:
        """Why the two totals differ, in sentences, from the figures."""
        out = []
        for kind in ("parameter", "input"):
            saves = [s for s in self.saves if s.kind == kind]
            if saves:
                out.append(f"PyTorch saves {len(saves)} tensor(s) living in {kind}s "
                           f"({human_bytes(self.storage_bytes(kind))} of storage); gradir counts {kind}s the "
                           "backward reads as inputs, no new memory: both keep them alive.")
        repeats = [s for s in self.saves if not s.first]
        if repeats:
            out.append(f"{len(repeats)} save(s) share a storage with an earlier save (the same tensor saved by "
                       f"two nodes, or a view such as a transposed weight): counted save by save they add "
                       f"{human_bytes(sum(s.bytes for s in repeats))}; counted once per storage, as gradir "
                       "counts, nothing.")
        mine, theirs = self.gradir.bytes, self.activation_bytes
        if mine == theirs:
            out.append(f"Activations: both keep {human_bytes(mine)} of new memory for backward.")
        else:
            out.append(f"Activations: PyTorch keeps {human_bytes(theirs)}, gradir {human_bytes(mine)}. The rules "
                       "differ: PyTorch's fused kernels (native_layer_norm, gelu, softmax) save their input and a "
                       "few statistics, while gradir differentiates what the capture decomposed them into, and each "
                       "primitive's rule keeps what it reads (LayerNorm's centered input and scale, GELU's erf "
                       "terms). Where gradir has a fused rule of its own (cross-entropy keeps its softmax, batch "
                       "norm its normalized input) it saves what PyTorch does.")
        return out

    def to_dict(self) -> dict:
        return {
            "torch": {"count": self.torch_count, "bytes": self.torch_bytes, "activation_bytes": self.activation_bytes,
                      "storage_bytes": {k: self.storage_bytes(k) for k in KINDS},
                      "saves": [dict(vars(s), shape=list(s.shape)) for s in self.saves]},
            "gradir": self.gradir.to_dict(),
            "differences": self.differences(),
        }

    def _title(self) -> str:
        return (f"saved for backward: PyTorch {self.torch_count} saves ({human_bytes(self.torch_bytes)} save by save, "
                f"{human_bytes(self.activation_bytes)} of activations); gradir {self.gradir.count} values "
                f"({human_bytes(self.gradir.bytes)} new memory)")

    def _columns(self) -> list[Column]:
        return [Column("PyTorch node"), Column("type"), Column("kind"), Column("bytes", right=True),
                Column("storage", right=True, drop=1)]

    def _rows(self) -> list[tuple[str, ...]]:
        return [(s.node, f"{s.dtype}[{','.join(map(str, s.shape))}]",
                 s.kind if s.parameter is None else f"parameter {s.parameter}", human_bytes(s.bytes),
                 f"#{s.storage}" + ("" if s.first else " (again)")) for s in self.saves]

    def _notes(self) -> list[str]:
        return self.differences() + ["gradir's side: gr.trace_grad(...).saved (its own report, by value)."]


def torch_saves(fn, *inputs, params: dict | None = None) -> list[TorchSave]:
    """Every tensor PyTorch's autograd saves while running `fn(*inputs)`, in the order saved, attributed
    to its node by walking the autograd graph. `params` (name -> tensor; default: `fn`'s own when it is a
    module) tell parameter storages from activations."""
    import torch

    packed: list = []

    def pack(t):
        packed.append(t)
        return len(packed) - 1

    def unpack(i):
        return packed[i]

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        out = fn(*inputs)
    named = _node_names(out, packed)
    if params is None:
        params = dict(fn.named_parameters()) if isinstance(fn, torch.nn.Module) else {}
    param_of = {p.untyped_storage().data_ptr(): name for name, p in params.items()}
    input_ptrs = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
    storages: dict[int, int] = {}
    saves = []
    for i, t in enumerate(packed):
        ptr = t.untyped_storage().data_ptr()
        kind = "parameter" if ptr in param_of else "input" if ptr in input_ptrs else "activation"
        first = ptr not in storages
        number = storages.setdefault(ptr, len(storages))
        saves.append(TorchSave(named.get(i, "?"), tuple(t.shape), str(t.dtype).removeprefix("torch."),
                               t.numel() * t.element_size(), kind, number, first, t.untyped_storage().nbytes(),
                               param_of.get(ptr)))
    return saves


def _node_names(out, packed: list) -> dict[int, str]:
    """Pack index -> "NodeName._saved_attr", from the autograd graph behind `out`. A node's saved
    attribute is matched to the packed tensor with the same storage, offset, shape and strides (the
    unpacked object may be a new Python object); among equal ones, nodes in the order the forward made
    them (their sequence numbers) take the packs in the order they were saved."""
    import torch

    def key(t):
        return t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride())

    found = []  # (sequence number, "Node._saved_attr", key)
    seen, stack = set(), [t.grad_fn for t in _tensors(out) if isinstance(t, torch.Tensor)]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for attr in sorted(a for a in dir(node) if a.startswith("_saved_")):
            value = getattr(node, attr)
            for v in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(v, torch.Tensor):
                    found.append((node._sequence_nr(), f"{type(node).__name__}.{attr}", key(v)))
        stack.extend(n for n, _ in node.next_functions)
    waiting: dict[tuple, list[int]] = {}
    for i, t in enumerate(packed):
        waiting.setdefault(key(t), []).append(i)
    names: dict[int, str] = {}
    for _, name, k in sorted(found, key=lambda f: f[0]):
        if waiting.get(k):
            names[waiting[k].pop(0)] = name
    return names


def _tensors(out):
    """The tensors in a model's output (a tensor, a tuple/list/dict of them, or a model-output object)."""
    if isinstance(out, dict):
        return [t for v in out.values() for t in _tensors(v)]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in _tensors(v)]
    return [out]


def torch_saved(module, *inputs, loss=None) -> SavedComparison:
    """What PyTorch's autograd saves for `module(*inputs)` next to gradir's saved-tensor report for
    the same model captured with `gr.from_torch`, with the differences explained.

    `loss(output)`, written with torch ops, makes the scalar both sides differentiate (default: the
    output's sum); gradir differentiates with respect to the module's parameters."""
    import torch

    def scalar(out):
        return loss(out) if loss is not None else sum(t.sum() for t in _tensors(out))

    saves = torch_saves(lambda *xs: scalar(module(*xs)), *inputs, params=dict(module.named_parameters()))
    loss_of, params = capture_with_loss(module, inputs, scalar)
    arrays = [x.detach().numpy() if isinstance(x, torch.Tensor) else x for x in inputs]
    return SavedComparison(saves, trace_grad(loss_of, params, *arrays, argnums=0).saved)


__all__ = ["SavedComparison", "TorchSave", "torch_saved", "torch_saves"]
