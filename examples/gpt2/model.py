"""GPT-2 small (the 124M configuration: 12 layers, 12 heads, 768 wide, 1024
positions, 50257 tokens), randomly initialised as GPT-2 was (normal 0.02,
residual projections scaled by 1/sqrt(2 n_layer)), from plain torch.nn
modules so that ktune.patch finds its Linear, LayerNorm and GELU layers.
Attention is torch's scaled_dot_product_attention, called through each
block's `sdpa` attribute, and the loss the LM head's logits, then
F.cross_entropy, unless `lm_loss` is set to a module that takes (hidden,
weight, targets): train.py's ktune run sets them to ktune.nn's
ScaledDotProductAttention and LinearCrossEntropy.  The LM head shares the
token embedding's weight."""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    block_size: int = 1024
    vocab_size: int = 50257
    dropout: float = 0.0  # 0: the two runs see the same computation, step for step


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c.n_head
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd)
        self.dropout = c.dropout
        self.sdpa = F.scaled_dot_product_attention  # or a module of its signature

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = self.sdpa(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(c.n_embd), Attention(c)
        self.ln_2, self.mlp = nn.LayerNorm(c.n_embd), MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.wte, self.wpe = nn.Embedding(c.vocab_size, c.n_embd), nn.Embedding(c.block_size, c.n_embd)
        self.h = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.n_embd)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2
        self.lm_loss = None  # or a module (hidden, weight, targets) -> loss: the head and its loss in one
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        if self.lm_loss is not None:
            return self.lm_loss(x.view(-1, x.size(-1)), self.lm_head.weight, targets.view(-1))
        logits = self.lm_head(x)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))
