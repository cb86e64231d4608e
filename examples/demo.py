"""`make demo`: semantic search with real pretrained weights (examples/semantic_search.py), then a
small Llama-style language model, eager on the emulated RBLN NPU, in float32 and with int8 weights.

Builds the language model with random weights (seeded), runs the same forward pass and a
greedy generation with a KV cache on CPU and on rbln, and prints whether the
outputs match, which ops ran on the device, which fell back, and the time taken.
"""
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import semantic_search
import torch_rbln  # noqa: F401  (also autoloaded by `import torch`)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cos, sin, cache):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, self.head_dim).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        total = k.shape[2]
        # Causal mask: query i (at position total - t + i) sees keys up to it.
        rows = torch.arange(total - t, total, device=x.device).unsqueeze(1)
        cols = torch.arange(total, device=x.device).unsqueeze(0)
        scores = scores.masked_fill(cols > rows, float("-inf"))
        y = torch.matmul(F.softmax(scores, dim=-1), v)
        return self.out(y.transpose(1, 2).reshape(b, t, -1)), (k, v)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.attn = Attention(dim, heads)
        self.gate = nn.Linear(dim, 4 * dim, bias=False)
        self.up = nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x, cos, sin, cache):
        h, cache = self.attn(self.norm1(x), cos, sin, cache)
        x = x + h
        n = self.norm2(x)
        return x + self.down(F.silu(self.gate(n)) * self.up(n)), cache


class TinyLlama(nn.Module):
    def __init__(self, vocab=512, dim=128, heads=4, layers=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head_dim = dim // heads

    def rotary(self, start, t, device):
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2, device=device).float() / self.head_dim))
        freqs = torch.arange(start, start + t, device=device).float().unsqueeze(1) * inv.unsqueeze(0)
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos(), emb.sin()

    def forward(self, tokens, caches=None):
        start = 0 if caches is None else caches[0][0].shape[2]
        cos, sin = self.rotary(start, tokens.shape[1], tokens.device)
        x = self.embed(tokens)
        new_caches = []
        for i, block in enumerate(self.blocks):
            x, cache = block(x, cos, sin, None if caches is None else caches[i])
            new_caches.append(cache)
        return self.head(self.norm(x)), new_caches

    @torch.no_grad()
    def generate(self, prompt, steps):
        logits, caches = self(prompt)
        tokens = [logits[:, -1].argmax(-1, keepdim=True)]
        for _ in range(steps - 1):
            logits, caches = self(tokens[-1], caches)
            tokens.append(logits[:, -1].argmax(-1, keepdim=True))
        return torch.cat(tokens, dim=1)


def run(model, prompt, steps):
    start = time.perf_counter()
    with torch.no_grad():
        logits, _ = model(prompt)
    generated = model.generate(prompt, steps)
    logits, generated = logits.cpu(), generated.cpu()  # synchronizes the device
    return logits, generated, time.perf_counter() - start


def main():
    semantic_search.main()
    print()
    torch.manual_seed(0)
    model = TinyLlama().eval()
    prompt = torch.randint(0, 512, (2, 16))
    steps = 16

    run(model, prompt, 2)  # warm-up, so both devices are timed warm
    cpu_logits, cpu_tokens, cpu_time = run(model, prompt, steps)
    device_model = TinyLlama().eval().to("rbln")
    device_model.load_state_dict(model.state_dict())
    run(device_model, prompt.to("rbln"), 2)  # warm-up: allocator cache, worker threads
    with torch.rbln.explain() as ex:
        logits, tokens, rbln_time = run(device_model, prompt.to("rbln"), steps)

    params = sum(p.numel() for p in model.parameters())
    max_diff = (logits - cpu_logits).abs().max().item()
    logits_match = torch.allclose(logits, cpu_logits, atol=1e-4, rtol=1e-4)
    tokens_match = torch.equal(tokens, cpu_tokens)
    print(f"TinyLlama ({params / 1e6:.2f} M parameters), batch 2, prompt 16 tokens, {steps} generated greedily "
          f"with a KV cache, on {torch.rbln.get_device_name()} rbln:0 and on the CPU")
    print(f"logits match CPU: {logits_match} (max abs diff {max_diff:.2e})")
    print(f"generated tokens equal CPU's: {tokens_match}")
    print(f"op calls on the device: {sum(ex.device_ops.values())} across {len(ex.device_ops)} ATen ops")
    for name, count in sorted(ex.device_ops.items(), key=lambda kv: -kv[1]):
        print(f"  {count:6d}  {name}")
    print(f"op calls that fell back to the CPU: {sum(ex.fallback_ops.values())}")
    for name, reasons in sorted(ex.fallback_reasons.items()):
        print(f"  {sum(reasons.values()):6d}  {name}  ({', '.join(reasons)})")
    print(f"time: rbln {rbln_time * 1e3:.1f} ms, cpu {cpu_time * 1e3:.1f} ms (forward + generation)")
    if not (logits_match and tokens_match):
        raise SystemExit("demo: rbln results differ from CPU")
    print()
    int8_weight_only(model, prompt, steps)


def int8_weight_only(model, prompt, steps):
    """The same model with int8 weights (torchao, docs/quantization.md): generated on rbln, against CPU's int8."""
    import copy

    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    reference = copy.deepcopy(model)
    quantize_(reference, Int8WeightOnlyConfig())
    torch.rbln.synchronize()
    start = torch.rbln.memory_allocated()
    device_model = copy.deepcopy(model).to("rbln")
    float_bytes = torch.rbln.memory_allocated() - start
    quantize_(device_model, Int8WeightOnlyConfig())  # on the device: the float weights are freed
    torch.rbln.synchronize()
    int8_bytes = torch.rbln.memory_allocated() - start
    with torch.rbln.explain() as ex:
        tokens = device_model.generate(prompt.to("rbln"), steps).cpu()
    matches = torch.equal(tokens, reference.generate(prompt, steps))
    print(f"int8 weight-only (torchao Int8WeightOnlyConfig): device memory {int8_bytes / 2**20:.2f} MiB, "
          f"float32 {float_bytes / 2**20:.2f} MiB ({int8_bytes / float_bytes:.2f}x)")
    print(f"generated tokens equal the CPU's int8 model's: {matches}; CPU fallbacks: {sum(ex.fallback_ops.values())}")
    if not matches or ex.fallback_ops:
        raise SystemExit("demo: the int8 model on rbln differs from CPU's or fell back")


if __name__ == "__main__":
    main()
