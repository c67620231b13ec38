#!/usr/bin/env python3
"""The PyTorch side of bench/char_gpt.sh: examples/char_gpt.c's model and recipe, step for step.

Same data (the same corpus, split and splitmix64 windows drawn from (seed, step, row)), the same model (token and
learned position embeddings, pre-LN blocks with nn.LayerNorm, F.scaled_dot_product_attention (causal) and a
GELU-tanh MLP, final LayerNorm, untied head), AdamW (0.9, 0.95) with weight decay 0.1 on the linear weights
only, linear warm-up then cosine to 10% of the peak, clipping at global norm 1.0. Prints one line of key=value
fields: tokens_per_second (after the first --skip steps), val_loss, peak_rss_mb, mode, threads.
"""
import argparse
import math
import os
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MASK = (1 << 64) - 1


def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def load_corpus(path):
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if "." not in n and not n.startswith("."))
        data = b""
        for n in names:
            full = os.path.join(path, n)
            if os.path.isfile(full):
                with open(full, "rb") as f:
                    data += f.read()
        return data
    with open(path, "rb") as f:
        return f.read()


def attention(q, k, v):
    """F.scaled_dot_product_attention where the PyTorch has it (2.0 on), else the same arithmetic spelled out
    (Debian's 1.13): softmax(q k^T / sqrt(D) + causal mask) v."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim, eps=1e-5)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim, eps=1e-5)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x):
        n, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        shape = (n, t, self.heads, c // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(n, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, dim, heads, context):
        super().__init__()
        self.tok = nn.Embedding(256, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim, eps=1e-5)
        self.head = nn.Linear(dim, 256, bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, tokens, targets):
        positions = torch.arange(tokens.shape[1])
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))


def batch(text, starts, context):
    rows = [text[s : s + context + 1] for s in starts]
    data = torch.tensor(rows, dtype=torch.long)
    return data[:, :-1], data[:, 1:]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/games/fortunes")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--val-batches", type=int, default=20)
    p.add_argument("--skip", type=int, default=3, help="steps not timed (compilation, warm-up)")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    text = load_corpus(a.data)
    train_size = len(text) * 9 // 10
    train, val = text[:train_size], text[train_size:]
    model = GPT(a.layers, a.dim, a.heads, a.context)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith(("tok.", "pos."))]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and not n.startswith(("tok.", "pos.")))]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                  lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    floor = 0.1 * a.lr

    def rate(step):
        if step < a.warmup:
            start = 1.0 / a.warmup
            return a.lr * (start + (1.0 - start) * step / a.warmup)
        t = min(step - a.warmup, max(a.steps - a.warmup, 1))
        return floor + (a.lr - floor) * (1 + math.cos(math.pi * t / max(a.steps - a.warmup, 1))) / 2

    step_fn = model
    if a.compile:
        step_fn = torch.compile(model)
    span = train_size - a.context - 1
    timed_start = None
    for step in range(a.steps):
        if step == a.skip:
            timed_start = time.perf_counter()
        starts = [mix(a.seed ^ mix(step * a.batch + r)) % span for r in range(a.batch)]
        x, y = batch(train, starts, a.context)
        for g in optimizer.param_groups:
            g["lr"] = rate(step)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = step_fn(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    seconds = time.perf_counter() - timed_start if timed_start else float("nan")
    timed = a.steps - a.skip
    model.eval()
    windows = a.val_batches * a.batch
    vspan = len(val) - a.context - 1
    total = 0.0
    with torch.no_grad():
        for i in range(a.val_batches):
            starts = [((i * a.batch + r) * vspan // (windows - 1)) if windows > 1 else 0 for r in range(a.batch)]
            x, y = batch(val, starts, a.context)
            total += model(x, y).item()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"tokens_per_second={timed * a.batch * a.context / seconds:.0f} val_loss={total / a.val_batches:.4f} "
          f"last_loss={loss.item():.4f} peak_rss_mb={rss:.0f} mode={'compile' if a.compile else 'eager'} "
          f"threads={a.threads} torch={torch.__version__}")


if __name__ == "__main__":
    main()
