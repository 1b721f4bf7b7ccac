"""PyTorch anchor for `row_bench`: `--rows` fp16 rows (comma-separated counts, default 1) times
each Llama-3-8B weight shape, CUDA-event timed (median of 50 after 10 warm-ups), with the
weight's read bandwidth."""
import argparse

import torch

shapes = [(4096, 4096), (4096, 1024), (4096, 14336), (14336, 4096), (4096, 128256)]
parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--rows", default="1", help="activation rows, comma-separated (a decode step's batch)")
args = parser.parse_args()
print("| rows | k | n | torch fp16 median µs | GB/s |")
print("|---:|---:|---:|---:|---:|")
for rows in [int(r) for r in args.rows.split(",")]:
    for k, n in shapes:
        x = torch.randn(rows, k, device="cuda", dtype=torch.float16)
        w = torch.randn(k, n, device="cuda", dtype=torch.float16) * 0.02
        for _ in range(10):
            x @ w
        times = []
        for _ in range(50):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            x @ w
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        median = sorted(times)[len(times) // 2]
        print(f"| {rows} | {k} | {n} | {median:.1f} | {k * n * 2 / median / 1e3:.0f} |")
