"""PyTorch anchor for `prompt_bench` (run on the GPU machine in the same call): a prompt's weight
products `[batch · context, k] · [k, n]` (cuBLAS) and its causal attention (SDPA, GQA) in fp16,
Llama-3-8B shapes. Medians of CUDA-event timed runs, ms and TFLOP/s, as markdown tables.

    python3 cli/bench/prompt_anchor.py [--context 8192] [--batch 1]
"""

import argparse

import torch
import torch.nn.functional as F

from sdpa_anchor import median_ms


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--context", type=int, default=8192, help="prompt tokens per sequence")
    p.add_argument("--batch", type=int, default=1, help="sequences")
    p.add_argument("--runs", type=int, default=10, help="timed calls per measurement")
    a = p.parse_args()
    dev, f16 = "cuda", torch.float16
    hidden, heads, kv_heads, d, ff = 4096, 32, 8, 128, 14336
    rows = a.batch * a.context
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"\n## PyTorch products [{rows}, k] · [k, n], fp16\n\n| k | n | ms | TFLOP/s |\n|---:|---:|---:|---:|")
    for k, n in [(hidden, hidden + 2 * kv_heads * d), (hidden, hidden), (hidden, 2 * ff), (ff, hidden)]:
        x = torch.randn(rows, k, device=dev, dtype=f16)
        w = torch.randn(k, n, device=dev, dtype=f16) * 0.02
        ms, _ = median_ms(lambda: x @ w, a.runs)
        print(f"| {k} | {n} | {ms:.2f} | {2 * rows * k * n / ms / 1e9:.0f} |")
    s, b = a.context, a.batch
    q = torch.randn(b, heads, s, d, device=dev, dtype=f16)
    k = torch.randn(b, kv_heads, s, d, device=dev, dtype=f16)
    v = torch.randn(b, kv_heads, s, d, device=dev, dtype=f16)
    ms, _ = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), a.runs)
    flop = 4 * b * heads * s * s * d / 2
    print(f"\n## PyTorch SDPA causal, batch {b}, {heads}/{kv_heads} heads × {d}, {s} tokens\n")
    print(f"| ms | TFLOP/s |\n|---:|---:|\n| {ms:.2f} | {flop / ms / 1e9:.0f} |")


if __name__ == "__main__":
    main()
