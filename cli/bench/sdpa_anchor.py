"""PyTorch SDPA fp16 anchor for the HACK attention benchmark (run on the GPU machine, in the same
session as `hack_bench`).

Prints, as markdown tables: the device's measured copy bandwidth; SDPA decode attention time (one
query slot, GQA heads) over contexts and batch sizes, with the K/V bytes it reads and the achieved
bandwidth; SDPA causal prefill attention time. Medians of synchronized runs timed with CUDA events,
and the mean per call of the same number of calls queued back to back ("pipelined").
"""

import argparse

import torch
import torch.nn.functional as F


def median_ms(fn, runs, warmups=10):
    """(median, min) in ms of `runs` calls of `fn`, each timed by CUDA events and synchronized,
    after `warmups` calls."""
    for _ in range(warmups):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2], times[0]


def pipelined_ms(fn, runs):
    """Mean per call of `runs` calls queued back to back between two CUDA events (the Rust
    benches' "pipelined" column: host launch work overlaps device work)."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(runs):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / runs


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--contexts", default="4096,16384,32768,65536")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--prefill-contexts", default="4096,16384")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--runs", type=int, default=100)
    a = p.parse_args()
    dev = "cuda"
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")

    n = 1 << 28  # 1 GiB of f32
    src, dst = torch.empty(n, device=dev), torch.empty(n, device=dev)
    copy_ms, _ = median_ms(lambda: dst.copy_(src), 50)
    copy_gbs = 2 * 4 * n / copy_ms / 1e6
    print(f"\nmeasured copy bandwidth (read + write of 1 GiB): {copy_gbs:.0f} GB/s")
    del src, dst

    print("\n| batch | context | SDPA fp16 median µs | min µs | pipelined µs | MB read | GB/s | fraction of copy bw |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for b in [int(x) for x in a.batches.split(",")]:
        for t in [int(x) for x in a.contexts.split(",")]:
            q = torch.randn(b, a.heads, 1, a.head_dim, device=dev, dtype=torch.float16)
            k = torch.randn(b, a.kv_heads, t, a.head_dim, device=dev, dtype=torch.float16)
            v = torch.randn(b, a.kv_heads, t, a.head_dim, device=dev, dtype=torch.float16)
            step = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # noqa: E731
            med, mn = median_ms(step, a.runs)
            piped = pipelined_ms(step, a.runs)
            mb = 2 * k.numel() * 2 / 1e6
            gbs = mb / med
            print(
                f"| {b} | {t} | {med * 1e3:.1f} | {mn * 1e3:.1f} | {piped * 1e3:.1f} | {mb:.1f} | {gbs:.0f} "
                f"| {gbs / copy_gbs:.2f} |"
            )
            del q, k, v
    print("\n| prefill context | SDPA fp16 causal median ms |")
    print("|---:|---:|")
    for t in [int(x) for x in a.prefill_contexts.split(",")]:
        q = torch.randn(1, a.heads, t, a.head_dim, device=dev, dtype=torch.float16)
        k = torch.randn(1, a.kv_heads, t, a.head_dim, device=dev, dtype=torch.float16)
        v = torch.randn(1, a.kv_heads, t, a.head_dim, device=dev, dtype=torch.float16)
        med, _ = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), 20)
        print(f"| {t} | {med:.3f} |")


if __name__ == "__main__":
    main()
