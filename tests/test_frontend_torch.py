"""gr.from_torch: PyTorch modules written in ordinary style, captured (torch.export -> core ATen, or
make_fx), replayed through the ATen -> gradir table, and checked against torch autograd in float64:
loss and every parameter gradient on the NumPy (gr.grad) and LLVM (gr.compile) backends, parameter
naming (tied weights once), BatchNorm running statistics, source lines and scopes, errors."""

from __future__ import annotations

import copy
import dataclasses
import math
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch.utils._pytree as torch_pytree  # noqa: E402

import gradir as gr  # noqa: E402
from gradir.core.errors import TraceError, UnsupportedOpError  # noqa: E402
from gradir.frontends import aten_table  # noqa: E402
from gradir.frontends.torch import nearest_supported  # noqa: E402

RTOL = 1e-10
# torch.export's own deprecation noise (its TreeSpec copying), not ours
pytestmark = pytest.mark.filterwarnings("ignore:.*isinstance\\(treespec, LeafSpec\\).*:FutureWarning")
FILE = "test_frontend_torch.py"


# -- models, in the style of ordinary PyTorch code ------------------------------------------------


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.ln = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        h = F.gelu(self.ln(self.fc1(x)))  # MLP_GELU_LINE
        return self.fc2(h)


class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.bn(self.conv(x)))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.block = ResBlock(4)
        self.gap = nn.AdaptiveAvgPool2d((2, 2))
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.stem(x))))
        x = self.block(x)
        return self.head(torch.flatten(self.gap(x), 1))


class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head, sdpa):
        super().__init__()
        self.n_head, self.sdpa = n_head, sdpa
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = [t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v)]
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            i = torch.arange(T, device=x.device)
            att = torch.where(i[None, :] <= i[:, None], att, float("-inf"))  # ATTN_MASK_LINE
            att = att.softmax(dim=-1)
            y = att @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MaskedFillAttention(CausalSelfAttention):
    """The other common causal mask: a registered tril buffer and masked_fill."""

    def __init__(self, d, n_head, t):
        super().__init__(d, n_head, False)
        self.register_buffer("bias", torch.tril(torch.ones(t, t)).view(1, 1, t, t))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = [t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, d, n_head, attn):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = attn
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


@dataclasses.dataclass
class LMOutput:
    """A model-output object as transformers' ModelOutput is: registered with torch's pytree by its keys."""

    loss: torch.Tensor
    logits: torch.Tensor


torch_pytree.register_pytree_node(LMOutput, lambda o: ([o.loss, o.logits], ["loss", "logits"]),
                                  lambda values, keys: LMOutput(*values))


class GPT(nn.Module):
    def __init__(self, attention="where", vocab=11, d=8, n_head=2, block=6, layers=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)

        def attn():
            if attention == "masked_fill":
                return MaskedFillAttention(d, n_head, block)
            return CausalSelfAttention(d, n_head, attention == "sdpa")
        self.blocks = nn.ModuleList([Block(d, n_head, attn()) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied input/output embedding

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return LMOutput(loss=loss, logits=logits)


# -- helpers --------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _float64(torch_float64):
    """Every test here builds torch tensors in float64."""


def line_of(marker: str) -> str:
    """`test_frontend_torch.py:N` of the line carrying `marker` in this file."""
    with open(__file__) as fh:
        for n, text in enumerate(fh, 1):
            if marker in text and "line_of(" not in text:
                return f"{FILE}:{n}"
    raise AssertionError(marker)


def rel_err(a, b, scale=0.0) -> float:
    """max |a - b| relative to max |b| (or to `scale` where b is smaller: a gradient that is zero in exact
    arithmetic, such as a bias before BatchNorm, is compared at the size of the model's other gradients)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), scale, 1e-300))


def torch_grads(model, inputs, loss_of):
    """(loss, {name: grad}) from torch autograd on a copy (training-mode BatchNorm updates its buffers)."""
    model = copy.deepcopy(model)
    loss = loss_of(model(*inputs))
    loss.backward()
    return loss.item(), {n: p.grad.numpy() for n, p in model.named_parameters()}


def check_against_torch(model, inputs, loss_torch, loss_gr):
    """from_torch's loss and gradients on the NumPy and LLVM backends equal torch autograd to RTOL."""
    f, params = gr.from_torch(model, *inputs)
    assert list(params) == [n for n, _ in model.named_parameters()]
    ref_loss, ref_grads = torch_grads(model, inputs, loss_torch)
    xs = [t.numpy() for t in inputs]

    def loss(p, *args):
        return loss_gr(f(p, *args))
    value, grads = gr.value_and_grad(loss)(params, *xs)
    llvm_value, llvm_grads = gr.compile(gr.value_and_grad(loss), backend="llvm")(params, *xs)
    scale = max(np.max(np.abs(g)) for g in ref_grads.values())
    for v, g in ((value, grads), (llvm_value, llvm_grads)):
        assert rel_err(v, ref_loss) < RTOL
        assert set(g) == set(ref_grads)
        for name, ref in ref_grads.items():
            assert rel_err(g[name], ref, scale) < RTOL, name
    return f, params


def tokens(seed=0, b=2, t=6, vocab=11):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, vocab, (b, t), generator=g)
    targets = torch.randint(0, vocab, (b, t), generator=g)
    targets[0, :2] = -1  # ignored positions (padding)
    return idx, targets


# -- (a) MLP with LayerNorm and GELU --------------------------------------------------------------


def test_mlp_gradients_match_torch():
    torch.manual_seed(0)
    x, y = torch.randn(5, 6), torch.randn(5, 3)
    f, _ = check_against_torch(MLP(), (x,), lambda out: ((out - y) ** 2).mean(),
                               lambda out: gr.mean((out - y.numpy()) ** 2))
    assert f.capture == "export" and f.export_error is None


def test_mlp_jvp_trace_grad_and_remat():
    torch.manual_seed(1)
    model, x = MLP(), torch.randn(4, 6)
    f, params = gr.from_torch(model, x)
    xs = x.numpy()
    out, tangent = gr.jvp(lambda inp: gr.sum(f(params, inp)), (xs,), (np.ones_like(xs),))
    xt = x.clone().requires_grad_(True)
    model(xt).sum().backward()
    assert rel_err(out, model(x).sum().item()) < RTOL
    assert rel_err(tangent, xt.grad.sum().item()) < RTOL
    plain = gr.grad(lambda p, inp: gr.sum(f(p, inp)))(params, xs)
    remat = gr.compile(gr.grad(lambda p, inp: gr.sum(f(p, inp))), backend="numpy", remat="uniform")(params, xs)
    for name in params:
        assert rel_err(remat[name], plain[name]) < RTOL
    j = gr.trace_grad(lambda p, inp: gr.sum(f(p, inp)), params, xs)
    assert j.saved.to_dict()["count"] > 0
    assert any(n.source == line_of("MLP_GELU_LINE") for n in j.forward.nodes)


# -- (b) CNN: Conv2d, BatchNorm2d (training), ReLU, MaxPool2d, residual, AdaptiveAvgPool2d --------


def test_cnn_gradients_match_torch():
    torch.manual_seed(2)
    x = torch.randn(3, 3, 8, 8)
    model = CNN().train()
    labels = torch.tensor([0, 4, 2])
    check_against_torch(model, (x,), lambda out: F.cross_entropy(out, labels),
                        lambda out: gr.nn.cross_entropy(out, labels.numpy()))


def test_batchnorm_running_stats_follow_torch():
    torch.manual_seed(3)
    model, x = CNN().train(), torch.randn(3, 3, 8, 8)
    f, params = gr.from_torch(model, x)
    before = {k: v.copy() for k, v in f.buffers.items()}
    out, buffers = f.with_buffers(params, x.numpy())
    ref = copy.deepcopy(model)
    ref_out = ref(x)
    assert rel_err(out, ref_out.detach().numpy()) < RTOL
    assert set(buffers) == {n for n, _ in model.named_buffers()}
    for name, b in ref.named_buffers():
        if b.dtype == torch.int64:
            assert buffers[name] == b.numpy() == 1, name
        else:
            assert rel_err(buffers[name], b.numpy()) < RTOL, name
    assert all(np.array_equal(f.buffers[k], v) for k, v in before.items())  # f itself is pure
    # the updated buffers go back in: a second step matches torch's second step
    out2, buffers2 = f.with_buffers(params, x.numpy() * 2, buffers=buffers)
    ref(x * 2)
    assert rel_err(buffers2["bn.running_var"], ref.bn.running_var.numpy()) < RTOL
    assert buffers2["bn.num_batches_tracked"] == 2


def test_eval_mode_batchnorm_uses_running_stats():
    torch.manual_seed(4)
    model, x = CNN(), torch.randn(2, 3, 8, 8)
    model.train()(x * 3 + 1)  # move the running statistics away from (0, 1)
    model.eval()
    f, params = gr.from_torch(model, x)
    out, buffers = f.with_buffers(params, x.numpy())
    assert rel_err(out, model(x).detach().numpy()) < RTOL
    assert all(np.array_equal(buffers[k], f.buffers[k]) for k in buffers)


# -- (c) GPT-style decoder -------------------------------------------------------------------------


@pytest.mark.parametrize("attention", ["where", "sdpa", "masked_fill"])
def test_gpt_gradients_match_torch(attention):
    torch.manual_seed(5)
    model = GPT(attention)
    idx, targets = tokens()
    f, params = check_against_torch(model, (idx, targets), lambda out: out.loss, lambda out: out["loss"])
    assert "lm_head.weight" not in params and "wte.weight" in params  # tied: once, under its first name
    out = f(params, idx.numpy(), targets.numpy())
    assert set(out) == {"loss", "logits"}  # the model-output object comes back as a dict
    ref = model(idx, targets)
    assert rel_err(out["logits"], ref.logits.detach().numpy()) < RTOL


def test_gpt_source_lines_and_scopes():
    torch.manual_seed(6)
    model = GPT("where")
    idx, targets = tokens(1)
    f, params = gr.from_torch(model, idx, targets)
    g = gr.trace(lambda p, i, t: f(p, i, t)["loss"], params, idx.numpy(), targets.numpy())
    ops = [n for n in g.nodes if n.op != "const"]
    assert all(n.source and n.source.startswith(FILE + ":") for n in ops)
    assert any(n.source == line_of("ATTN_MASK_LINE") and "blocks.1.attn" in n.scope for n in ops)
    assert {s for n in ops for s in n.scope} >= {"blocks.0", "blocks.0.attn", "blocks.1.mlp.0", "ln_f"}
    assert f"# {line_of('ATTN_MASK_LINE')}" in str(g)


# -- capture, structure, errors ---------------------------------------------------------------------


class Branchy(nn.Module):
    """Data-dependent Python control flow: torch.export refuses it, make_fx specialises on the input."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        if x.sum() > 0:
            return torch.tanh(self.fc(x))  # BRANCH_LINE
        return self.fc(x)


def test_make_fx_fallback_is_reported_and_correct():
    torch.manual_seed(7)
    model, x = Branchy(), torch.rand(2, 3)
    f, params = gr.from_torch(model, x)
    assert f.capture == "make_fx" and f.export_error
    xt = x.clone()
    loss = model(xt).pow(2).sum()
    loss.backward()
    g = gr.grad(lambda p, inp: gr.sum(f(p, inp) ** 2))(params, x.numpy())
    assert rel_err(g["fc.weight"], model.fc.weight.grad.numpy()) < RTOL
    traced = gr.trace(lambda p, inp: f(p, inp), params, x.numpy())
    assert any(n.op == "tanh" and n.source == line_of("BRANCH_LINE") for n in traced.nodes)


class Zeta(nn.Module):
    def forward(self, x):
        return torch.special.zeta(x, 2.0) * 2  # ZETA_LINE


def test_unmapped_op_is_one_clear_error():
    with pytest.raises(UnsupportedOpError) as e:
        gr.from_torch(Zeta(), torch.rand(3) + 1.5)
    msg = str(e.value)
    assert "aten.special_zeta" in msg and line_of("ZETA_LINE") in msg
    assert "nearest supported" not in msg  # no elementwise op is spelled like it: no suggestion rather than noise
    assert e.value.source == line_of("ZETA_LINE")


class MaskedSum(nn.Module):
    def forward(self, x):
        return x[x > 0].sum()  # BOOL_MASK_LINE


class NonzeroCount(nn.Module):
    def forward(self, x):
        return torch.nonzero(x).sum() * 1.0  # NONZERO_LINE


@pytest.mark.parametrize("module, marker", [(MaskedSum, "BOOL_MASK_LINE"), (NonzeroCount, "NONZERO_LINE")])
def test_data_dependent_shape_is_one_clear_error_saying_what_to_write(module, marker):
    """Boolean-mask indexing and nonzero make a shape that depends on the values: one error naming the user's line,
    saying why and what to write instead (not an unmapped-op message with unrelated suggestions)."""
    with pytest.raises(UnsupportedOpError) as e:
        gr.from_torch(module(), torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64))
    msg = str(e.value)
    assert "data-dependent shape" in msg and "torch.where(mask, x, 0)" in msg and "nearest supported" not in msg
    assert e.value.source == line_of(marker)


def test_the_masked_spelling_the_error_suggests_captures_and_matches_torch():
    x = torch.tensor([[0.5, -1.0, 2.0]], dtype=torch.float64, requires_grad=True)

    class Masked(nn.Module):
        def forward(self, x):
            return torch.where(x > 0, x, 0).sum()

    f, params = gr.from_torch(Masked(), x.detach())
    got = gr.grad(lambda v: f(params, v))(x.detach().numpy())
    MaskedSum()(x).backward()
    np.testing.assert_allclose(got, x.grad.numpy(), rtol=1e-12)


class ReadsItem(nn.Module):
    def forward(self, x):
        return x * x.sum().item()  # ITEM_LINE


def test_a_value_read_into_python_is_one_clear_error():
    with pytest.raises(UnsupportedOpError) as e:
        gr.from_torch(ReadsItem(), torch.randn(2, 3, dtype=torch.float64))
    assert "item()" in str(e.value) and "keep it a tensor" in str(e.value) and e.value.source == line_of("ITEM_LINE")


class WrongShapes(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)

    def forward(self, x):
        return (self.fc(x) @ torch.ones(3, 2, dtype=x.dtype)).sum()  # WRONG_SHAPES_LINE


def test_a_shape_mistake_is_one_line_naming_the_model_line_and_torch_stays_quiet(capfd):
    with pytest.raises(TraceError) as e:
        gr.from_torch(WrongShapes().double(), torch.randn(2, 3, dtype=torch.float64))
    assert e.value.source == line_of("WRONG_SHAPES_LINE") and "cannot be multiplied" in str(e.value)
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # torch's fake-tensor log (tens of lines) is silenced during capture


class Dropper(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.drop = nn.Linear(4, 4), nn.Dropout(0.25)

    def forward(self, x):
        return self.drop(self.fc(x))  # DROPOUT_LINE


def test_training_dropout_needs_a_seed():
    x = torch.randn(3, 4)
    f, params = gr.from_torch(Dropper().train(), x)
    with pytest.raises(TraceError, match="seed") as e:
        f(params, x.numpy())
    assert e.value.source == line_of("DROPOUT_LINE")
    a, b, c = (f(params, x.numpy(), seed=s) for s in (0, 0, 1))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    dense = f(params, x.numpy(), seed=0) != 0
    assert 0 < dense.mean() < 1
    g = gr.grad(lambda p, inp: gr.sum(f(p, inp, seed=0)))(params, x.numpy())
    assert np.array_equal(g["fc.bias"], dense.sum(0) / 0.75)
    fe, pe = gr.from_torch(Dropper().eval(), x)  # eval mode: no mask, no seed
    assert np.array_equal(fe(pe, x.numpy()), fe(pe, x.numpy()))


def test_plain_function_and_output_structures():
    def fn(a, b):
        s = torch.tril(a @ b)
        return {"sum": s.sum(), "parts": (s.max(dim=-1).values, [torch.cumsum(a, 0), a.clamp(-0.5, 0.5)])}

    a, b = torch.randn(3, 3), torch.randn(3, 3)
    f, params = gr.from_torch(fn, a, b)
    assert params == {}
    out = f(params, a.numpy(), b.numpy())
    ref = fn(a, b)
    assert set(out) == {"sum", "parts"} and isinstance(out["parts"], tuple) and isinstance(out["parts"][1], list)
    for got, want in zip(torch_pytree.tree_leaves(out), torch_pytree.tree_leaves(ref)):
        assert rel_err(got, want.numpy()) < RTOL
    torch_out = f(params, a, b)  # torch in, torch out
    assert isinstance(torch_out["sum"], torch.Tensor)


def test_import_gradir_does_not_import_torch():
    code = "import sys, gradir; assert 'torch' not in sys.modules; assert callable(gradir.from_torch)"
    subprocess.run([sys.executable, "-c", code], check=True)


class Zoo(nn.Module):
    """Many other mappings in one module: each term is a scalar, so one gradient checks them all."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(4, 6, 3, padding=1, groups=2)
        self.gn = nn.GroupNorm(2, 6)
        self.rms = nn.RMSNorm(5)
        self.ct = nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
        self.w = nn.Parameter(torch.randn(5, 5))

    def forward(self, x, img, labels):
        h = self.gn(self.c1(x))                                        # (2, 6, 5)
        terms = [F.silu(h).sum(), F.softplus(h).mean(), F.leaky_relu(h, 0.2).sum(), F.elu(h).sum()]
        r = self.rms(h @ self.w)
        terms += [r.cumsum(-1).sum(), torch.tril(r[0]).sum(), r.masked_fill(r > 0.5, 0.0).sum()]
        terms += [r.max(dim=-1).values.sum(), r.topk(2, dim=-1).values.sum(), r.sort(dim=-1).values[..., 0].sum()]
        terms += [torch.roll(r, 1, -1)[..., 0].sum(), r.repeat(1, 2, 1).std(), r.var(dim=1).sum()]
        terms += [torch.gather(r, 2, labels).sum(), torch.einsum("bij,jk->bik", r, self.w).sum()]
        terms += [r.clamp(-0.3, 0.3).sum(), torch.cat(r.chunk(5, dim=-1)[::-1], -1).flip(1)[:, 0].sum()]
        terms += [F.pad(r, (1, 2)).prod(dim=-1).sum(), torch.linalg.vector_norm(r, dim=-1).sum()]
        terms += [torch.log1p(r.abs()).sum(), torch.expm1(r * 0.1).sum(), r.index_select(1, labels[0, :2, 0]).sum()]
        terms += [F.mse_loss(r, r.detach() * 0.5), F.binary_cross_entropy_with_logits(r, torch.sigmoid(r.detach()))]
        up = self.ct(img)                                              # (2, 3, 7, 7)
        terms += [F.avg_pool2d(up, 2, 1).sum(), F.adaptive_avg_pool2d(up, (1, 7)).sum(), torch.stack([up, -up], 2).mean()]
        return torch.stack(terms)


def test_op_zoo_values_and_gradients_match_torch():
    torch.manual_seed(8)
    model = Zoo()
    x, img = torch.randn(2, 4, 5), torch.randn(2, 2, 4, 4)
    labels = torch.randint(0, 5, (2, 6, 1))
    weights = torch.linspace(0.5, 1.5, 27)
    check_against_torch(model, (x, img, labels), lambda out: (out * weights).sum(),
                        lambda out: gr.sum(out * weights.numpy()))


class Detached(nn.Module):
    """detach() and torch.no_grad() block gradients (core ATen would turn them into plain aliases)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        r = self.fc(x)
        with torch.no_grad():
            scale = r.abs().mean() + 1
        return ((r - r.detach() * 0.5) ** 2).sum() * scale + torch.sigmoid(r.detach()).sum()


def test_detach_and_no_grad_block_gradients():
    torch.manual_seed(9)
    check_against_torch(Detached(), (torch.randn(4, 3),), lambda out: out, lambda out: out)


def test_other_input_shape_is_a_clear_error():
    f, params = gr.from_torch(MLP(), torch.randn(4, 6))
    with pytest.raises(gr.errors.ShapeError, match="captured with shape"):
        f(params, np.zeros((3, 6)))


def test_float32_module_called_with_float64_computes_in_float64():
    """The dtype of the arguments decides, as in torch.func.functional_call: a float32 module given float64
    params and inputs computes in float64 (it used to be cast back to float32 after every op)."""
    torch.manual_seed(10)
    model, x, y = MLP().float(), torch.randn(5, 6, dtype=torch.float32), torch.randn(5, 3, dtype=torch.float64)
    f, params = gr.from_torch(model, x)
    assert {p.dtype for p in params.values()} == {np.dtype(np.float32)}
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in p64.items()}
    ref = ((torch.func.functional_call(model, tp, (x.double(),)) - y) ** 2).mean()
    ref.backward()

    def loss(p, inp):
        return gr.mean((f(p, inp) - y.numpy()) ** 2)
    value, grads = gr.value_and_grad(loss)(p64, x.double().numpy())
    assert value.dtype == np.float64 and rel_err(value, ref.item()) < RTOL
    for name, t in tp.items():
        assert grads[name].dtype == np.float64
        assert rel_err(grads[name], t.grad.numpy()) < RTOL, name
    torch_out = f({k: t.detach() for k, t in tp.items()}, x.double())  # torch tensors in, torch float64 out
    assert torch_out.dtype == torch.float64 and rel_err(torch_out, f(p64, x.double().numpy())) < 1e-15
    # in the capture's own dtype it stays float32; a mix torch refuses keeps the capture's dtypes, as before
    assert f(params, x.numpy()).dtype == np.float32
    assert f(params, x.double().numpy()).dtype == np.float32


def test_float32_batchnorm_called_with_float64_casts_its_buffers():
    """torch refuses float32 running statistics with float64 inputs: the buffers f uses by default follow
    the params' and inputs' float64, as `module.double()` would cast them."""
    torch.manual_seed(11)
    model, x = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).float().eval(), torch.randn(6, 3, dtype=torch.float32)
    model[1].running_mean.uniform_(-1, 1)
    f, params = gr.from_torch(model, x)
    out = f({k: v.astype(np.float64) for k, v in params.items()}, x.double().numpy())
    assert out.dtype == np.float64
    assert rel_err(out, model.double()(x.double()).detach().numpy()) < RTOL


# -- outputs that are not tensors, suggestions, the zoo's ops, float32_as ---------------------------


class State:
    """An object in a model's output that torch's pytree cannot carry (as transformers' DynamicCache)."""


class WithState(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        y = self.fc(x)
        return {"logits": y, "state": State()}, (y.sum(), State())


def test_outputs_that_are_not_tensors_are_left_out_and_said_once():
    x, model = torch.randn(4, 3), WithState()
    f, params = gr.from_torch(model, x)
    assert f.notes == ["left out of the outputs (not tensors): output[0].state (State), output[1][1] (State)"]
    out = f(params, x.numpy())
    assert set(out[0]) == {"logits"} and out[1][1] is None
    assert rel_err(out[1][0], model(x)[1][0].detach().numpy()) < RTOL
    assert f.outputs == ({"logits": gr.f64[4, 2]}, (gr.f64[()], None))
    assert "forward" not in model.__dict__  # the module is as it was


class Copysign(nn.Module):
    def forward(self, x):
        return torch.copysign(x, -x).sum()


def test_an_unmapped_op_suggests_only_mapped_ops_of_its_kind():
    with pytest.raises(UnsupportedOpError) as e:
        gr.from_torch(Zeta(), torch.rand(3) + 1.5)
    assert "_assert" not in str(e.value) and "sym_size" not in str(e.value)
    for name, target in [("copysign", torch.ops.aten.copysign.Tensor), ("special_zeta", torch.ops.aten.special_zeta.default)]:
        near = nearest_supported(name, target)
        assert all(n in aten_table.ELEMENTWISE for n in near), near  # elementwise suggests elementwise
    assert "prod" in nearest_supported("cumprod", torch.ops.aten.cumprod.default)
    assert "_assert_async" not in nearest_supported("index_put_", torch.ops.aten.index_put_.default)
    assert "copysign" not in aten_table.TABLE  # while it is unmapped: the message names its elementwise neighbour
    with pytest.raises(UnsupportedOpError, match=r"nearest supported: aten\.sign\b"):
        gr.from_torch(Copysign(), torch.rand(3))


class Strided(nn.Module):
    """as_strided patterns: AdaptiveAvgPool1d of a transposed input (Swin's pooler), and direct views: a
    transpose, every other row, a broadcast row, an offset slice, and the storage order of a transposed tensor
    (as_strided reads storage, not the transposed tensor's own order)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.scale = nn.Parameter(torch.linspace(0.5, 2.0, 24).reshape(6, 4))

    def forward(self, x):
        x = x * self.scale                                           # (2, 6, 4), contiguous
        t = x.transpose(1, 2)                                        # (2, 4, 6), strides (24, 1, 4)
        terms = [self.pool(t).sum(dim=-1), torch.as_strided(x, (2, 4, 6), (24, 1, 4)).sum(-1)]
        terms += [torch.as_strided(x, (2, 3, 4), (24, 8, 1)).sum(1), torch.as_strided(x, (2, 5, 4), (24, 0, 1)).mean(1)]
        terms += [torch.as_strided(t.contiguous(), (2, 4), (24, 1), 2) * 3]
        terms += [torch.as_strided(t, (2, 6, 4), (24, 4, 1)).pow(2).sum(1)]
        return torch.stack(terms)


class Windows(nn.Module):
    def forward(self, x):
        return torch.as_strided(x, (3, 4), (2, 1)).sum()  # overlapping windows: no view slices make  # WINDOWS_LINE


def test_as_strided_views_match_torch_and_overlapping_windows_are_a_clear_error():
    torch.manual_seed(12)
    w = torch.linspace(0.5, 1.5, 48).reshape(6, 2, 4)
    check_against_torch(Strided(), (torch.randn(2, 6, 4, dtype=torch.float64),), lambda out: (out * w).sum(),
                        lambda out: gr.sum(out * w.numpy()))

    with pytest.raises(UnsupportedOpError, match="not a view that slices") as e:
        gr.from_torch(Windows(), torch.randn(8, dtype=torch.float64))
    assert e.value.op == "aten.as_strided" and e.value.source == line_of("WINDOWS_LINE")


class OneHotAfterBranch(nn.Module):
    """Python control flow on a value: export refuses it, make_fx specialises it, and F.one_hot's decomposition
    leaves an in-place scatter_ in make_fx's graph."""

    def forward(self, x, labels):
        if x.sum() > 0:
            x = x * 2
        return (x * F.one_hot(labels, 4)).sum(-1)


def test_make_fx_in_place_scatter_from_one_hot_matches_torch(capfd):
    x, labels = torch.rand(3, 4, dtype=torch.float64), torch.tensor([0, 3, 1])
    f, params = gr.from_torch(OneHotAfterBranch(), x, labels)
    assert f.capture == "make_fx"
    assert capfd.readouterr().err == ""  # export's partial graph, printed where it gives up, is not shown
    assert rel_err(f(params, x.numpy(), labels.numpy()), OneHotAfterBranch()(x, labels).numpy()) < RTOL
    g = gr.grad(lambda v: gr.sum(f(params, v, labels.numpy())))(x.numpy())
    assert np.array_equal(g, 2 * F.one_hot(labels, 4).double().numpy())


class Upsample(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return torch.stack([F.interpolate(y, scale_factor=2, mode="bilinear").sum(), nn.Upsample((5, 7))(y).sum(),
                            F.interpolate(y, size=(6, 5), mode="bilinear", align_corners=True).sum(),
                            F.interpolate(y, scale_factor=1.5, mode="nearest").sum(),
                            # the overloads with sizes and per-axis scales (what other decompositions call)
                            torch.ops.aten.upsample_nearest2d.default(y, [5, 7]).pow(2).sum(),
                            torch.ops.aten.upsample_nearest1d.default(y[0], [8], 2.0).pow(2).sum()])


def test_upsampling_maps_onto_interpolate_and_matches_torch():
    torch.manual_seed(13)
    w = torch.tensor([0.5, -1.0, 1.5, 2.0, 0.7, -0.3])
    check_against_torch(Upsample(), (torch.randn(1, 2, 3, 4),), lambda out: (out * w).sum(),
                        lambda out: gr.sum(out * w.numpy()))


class UpcastNorm(nn.Module):
    """An RMSNorm that computes in float32 whatever the model's dtype (as Llama's), and a float32 table."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("table", torch.linspace(0.1, 1.0, 4))

    def forward(self, x):
        h = self.fc(x).to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.table
        return torch.softmax(h, dim=-1, dtype=torch.float32).to(x.dtype)


def test_float32_as_float64_computes_a_float64_model_in_float64_throughout():
    torch.manual_seed(14)
    model, x = UpcastNorm().double(), torch.randn(3, 4, dtype=torch.float64)
    model.table = model.table.float()  # a buffer the model keeps in float32
    f, params = gr.from_torch(model, x, float32_as=np.float64)
    as_is, _ = gr.from_torch(model, x)
    want = model(x).detach().numpy()
    assert 1e-12 < rel_err(as_is(params, x.numpy()), want) < 1e-6  # float32 inside, as torch
    wide = f(params, x.numpy())
    assert rel_err(wide, want) > 1e-12 and rel_err(wide, f.in_torch(params, x).numpy()) < 1e-14
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    (f.in_torch(tp, x)[:, 0]).sum().backward()
    g = gr.grad(lambda p: gr.sum(f(p, x.numpy())[:, 0]))(params)
    for name, t in tp.items():
        assert t.grad.dtype == torch.float64 and rel_err(g[name], t.grad.numpy()) < 1e-12, name
    assert rel_err(as_is.in_torch(params, x), want) < 1e-15  # the captured graph, as the model
    f32, x32 = {k: v.astype(np.float32) for k, v in params.items()}, x.float().numpy()  # a float32 call: unchanged
    assert np.array_equal(f(f32, x32), as_is(f32, x32))
    with pytest.raises(gr.errors.DTypeError, match="float32_as"):
        gr.from_torch(model, x, float32_as=np.float16)
