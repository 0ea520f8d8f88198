"""A GPT-style decoder written in ordinary PyTorch, for `gradir trace/schedule/memory` and example k.

    gradir trace examples/models/torch_gpt.py       # the model captured from PyTorch, differentiated
    gradir memory examples/models/torch_gpt.py      # its memory plan, parameters named by module path

The file's convention for PyTorch models: `model()` returns the `nn.Module`, `example_inputs()` the
forward's arguments followed by the loss's targets, and `loss(output, *targets)` the scalar to
differentiate (written with torch ops). gradir differentiates it with respect to every parameter.
"""

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, CONTEXT, WIDTH, HEADS, LAYERS = 27, 8, 32, 4, 2


class SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(width), SelfAttention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = VOCAB, context: int = CONTEXT, width: int = WIDTH, heads: int = HEADS,
                 layers: int = LAYERS):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied input and output embeddings

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def model() -> nn.Module:
    torch.manual_seed(0)
    return GPT().double()


def example_inputs():
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, VOCAB, (4, CONTEXT), generator=g)
    targets = torch.randint(0, VOCAB, (4, CONTEXT), generator=g)
    targets[:, -1] = -1  # the last position has no next character: ignored by the loss
    return idx, targets


def loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1)
