"""PyTorch anchor for the model runtime (run on the GPU machine, in the same call as our runtime's
benches): a Llama-3-8B-shaped decoder in fp16 with random weights, as a user would write it in
about a hundred lines of plain PyTorch, timed at a prompt of `--context` tokens per batch size:

- TTFT: the eager prefill of the prompt (SDPA causal, GQA), logits of the last slot;
- TBT eager: one decode step over a static KV cache (preallocated `[batch, kv_heads, max_len,
  head_dim]` per layer, the new slot written in place, SDPA over the whole buffer with a mask of
  the filled slots, so that every step has the same shapes);
- TBT graph: the same step captured once as a CUDA graph and replayed;
- the bandwidth limit of a step: the weights and the filled KV cache read once at the measured
  copy bandwidth.

Medians of CUDA-event timed runs after warm-ups. Prints a markdown table.

    python3 cli/bench/model_anchor.py [--layers 32] [--context 8192] [--batches 1,8]
"""

import argparse

import torch
import torch.nn.functional as F

from sdpa_anchor import median_ms


class Config:
    hidden = 4096
    heads = 32
    kv_heads = 8
    head_dim = 128
    intermediate = 14336
    vocab = 128256
    theta = 500000.0
    eps = 1e-5


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype) * w


def rotate(x, cos, sin):
    """`x` `[batch, heads, seq, head_dim]`, rotate-half layout; `cos`, `sin` `[seq, head_dim]`."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Model:
    def __init__(self, c, layers, max_len, device):
        g = torch.Generator(device=device).manual_seed(0)
        w = lambda *shape: torch.randn(*shape, device=device, dtype=torch.float16, generator=g) * 0.02  # noqa: E731
        self.c = c
        self.embed = w(c.vocab, c.hidden)
        self.layers = [
            dict(
                wqkv=w(c.hidden, (c.heads + 2 * c.kv_heads) * c.head_dim),
                wo=w(c.heads * c.head_dim, c.hidden),
                w13=w(c.hidden, 2 * c.intermediate),
                w2=w(c.intermediate, c.hidden),
                n1=torch.ones(c.hidden, device=device, dtype=torch.float16),
                n2=torch.ones(c.hidden, device=device, dtype=torch.float16),
            )
            for _ in range(layers)
        ]
        self.norm = torch.ones(c.hidden, device=device, dtype=torch.float16)
        self.head = w(c.hidden, c.vocab)
        inv = 1.0 / (c.theta ** (torch.arange(0, c.head_dim, 2, device=device).float() / c.head_dim))
        angles = torch.outer(torch.arange(max_len, device=device).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.cos, self.sin = angles.cos().half(), angles.sin().half()

    def forward(self, tokens, positions, caches, mask):
        """`tokens` `[batch, seq]` at `positions` `[seq]`; writes K/V into `caches` at the positions
        and attends over the buffer (`mask` `[seq, max_len]`, or causal over the prompt when None);
        returns the last slot's logits."""
        c = self.c
        b, s = tokens.shape
        x = self.embed[tokens]
        cos, sin = self.cos[positions], self.sin[positions]
        for layer, (kc, vc) in zip(self.layers, caches):
            h = rms_norm(x, layer["n1"], c.eps) @ layer["wqkv"]
            q, k, v = h.split([c.heads * c.head_dim, c.kv_heads * c.head_dim, c.kv_heads * c.head_dim], dim=-1)
            q = rotate(q.view(b, s, c.heads, c.head_dim).transpose(1, 2), cos, sin)
            k = rotate(k.view(b, s, c.kv_heads, c.head_dim).transpose(1, 2), cos, sin)
            v = v.view(b, s, c.kv_heads, c.head_dim).transpose(1, 2)
            kc.index_copy_(2, positions, k)
            vc.index_copy_(2, positions, v)
            if mask is None:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                o = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask, enable_gqa=True)
            x = x + o.transpose(1, 2).reshape(b, s, -1) @ layer["wo"]
            gate, up = (rms_norm(x, layer["n2"], c.eps) @ layer["w13"]).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ layer["w2"]
        return rms_norm(x[:, -1], self.norm, c.eps) @ self.head


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=32, help="decoder layers (Llama-3-8B: 32)")
    p.add_argument("--context", type=int, default=8192, help="prompt tokens per sequence")
    p.add_argument("--batches", default="1,8", help="batch sizes, comma-separated")
    p.add_argument("--prefill-runs", type=int, default=3, help="timed prefills per batch size")
    p.add_argument("--step-runs", type=int, default=50, help="timed decode steps per variant")
    a = p.parse_args()
    dev = "cuda"
    c = Config()
    max_len = a.context + 64
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    n = 1 << 28
    src, dst = torch.empty(n, device=dev), torch.empty(n, device=dev)
    copy_gbs = 2 * 4 * n / median_ms(lambda: dst.copy_(src), 20, 3)[0] / 1e6
    del src, dst
    model = Model(c, a.layers, max_len, dev)
    weight_bytes = 2 * sum(t.numel() for layer in model.layers for t in layer.values()) + 2 * model.head.numel()
    print(f"copy bandwidth {copy_gbs:.0f} GB/s; {a.layers} layers, weights {weight_bytes / 1e9:.2f} GB (fp16)")
    print(f"\n| batch | context | TTFT eager ms | TBT eager ms | TBT CUDA graph ms | bandwidth limit ms |")
    print("|---:|---:|---:|---:|---:|---:|")
    for b in [int(x) for x in a.batches.split(",")]:
        caches = [
            (
                torch.zeros(b, c.kv_heads, max_len, c.head_dim, device=dev, dtype=torch.float16),
                torch.zeros(b, c.kv_heads, max_len, c.head_dim, device=dev, dtype=torch.float16),
            )
            for _ in range(a.layers)
        ]
        prompt = torch.randint(0, c.vocab, (b, a.context), device=dev)
        prompt_positions = torch.arange(a.context, device=dev)
        with torch.inference_mode():
            ttft, _ = median_ms(lambda: model.forward(prompt, prompt_positions, caches, None), a.prefill_runs, 1)
            token = torch.zeros(b, 1, dtype=torch.long, device=dev)
            position = torch.tensor([a.context], device=dev)
            mask = (torch.arange(max_len, device=dev) <= a.context).view(1, max_len)
            step = lambda: model.forward(token, position, caches, mask)  # noqa: E731
            eager, _ = median_ms(step, a.step_runs, 3)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            replayed, _ = median_ms(graph.replay, a.step_runs, 3)
        kv_bytes = 2 * a.layers * b * c.kv_heads * (a.context + 1) * c.head_dim * 2
        limit = (weight_bytes + kv_bytes) / copy_gbs / 1e6
        print(f"| {b} | {a.context} | {ttft:.1f} | {eager:.2f} | {replayed:.2f} | {limit:.2f} |")
        del caches, graph


if __name__ == "__main__":
    main()
