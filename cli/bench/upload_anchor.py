"""PyTorch anchor for `import_bench`: host-to-device copies of SIZES bytes (MB, from argv, e.g.
`1074 4295`), from pageable memory (`.to("cuda")`) and from pinned memory (non_blocking), each
from a buffer the copy has not touched before; synchronized, median of 5 after one warm-up, ms and GB/s."""
import sys
import time

import torch


def timed(make, copy, reps=5):
    times = []
    for rep in range(reps + 1):
        src = make()
        torch.cuda.synchronize()
        start = time.perf_counter()
        dst = copy(src)
        torch.cuda.synchronize()
        if rep:
            times.append((time.perf_counter() - start) * 1e3)
        del src, dst
    return sorted(times)[len(times) // 2]


print("| MB | torch pageable ms | GB/s | torch pinned ms | GB/s |")
print("|---:|---:|---:|---:|---:|")
for mb in (float(a) for a in sys.argv[1:]):
    n = int(mb * 1e6)
    pageable = timed(lambda: torch.ones(n, dtype=torch.uint8), lambda x: x.to("cuda"))
    pinned = timed(lambda: torch.ones(n, dtype=torch.uint8).pin_memory(), lambda x: x.to("cuda", non_blocking=True))
    print(f"| {mb:.0f} | {pageable:.1f} | {n / pageable / 1e6:.1f} | {pinned:.1f} | {n / pinned / 1e6:.1f} |")
