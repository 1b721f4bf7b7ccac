#!/usr/bin/env python3
"""Extracts the CUDA source of each kernel whose name contains PATTERN from a CubeCL compilation log,
compiles it with nvcc for sm_90 and prints an opcode histogram of its SASS.
Usage: sass.py LOG OUTDIR [PATTERN]"""
import collections, os, re, subprocess, sys
log, out = sys.argv[1], sys.argv[2]
pattern = sys.argv[3] if len(sys.argv) > 3 else "mma_decode_kernel"
text = open(log).read()
blocks = text.split("[START_KERNEL_COMPILATION]")
n = 0
for b in blocks:
    if pattern not in b[:300] or "```cpp" not in b:
        continue
    m = re.search(r"geo: \w+ \{(.*?)\}", b, re.S)
    geo = " ".join(m.group(1).split()) if m else "?"
    src = b.split("```cpp", 1)[1].split("```", 1)[0]
    n += 1
    cu = os.path.join(out, f"k{n}.cu")
    open(cu, "w").write(src)
    cubin = cu.replace(".cu", ".cubin")
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", "-o", cubin, cu], capture_output=True, text=True)
    if r.returncode:
        print(f"k{n} {geo}: nvcc failed: {r.stderr[:400]}")
        continue
    sass = subprocess.run(["cuobjdump", "-sass", cubin], capture_output=True, text=True).stdout
    open(cu.replace(".cu", ".sass"), "w").write(sass)
    ops = collections.Counter()
    for line in sass.splitlines():
        mm = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(@!?P\d\s+)?([A-Z0-9_.]+)", line)
        if mm:
            ops[mm.group(2).split(".")[0]] += 1
    total = sum(ops.values())
    print(f"k{n} {geo}: {total} static SASS instructions")
    print("   " + ", ".join(f"{k} {v}" for k, v in ops.most_common(28)))
