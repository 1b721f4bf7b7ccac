#!/usr/bin/env python3
"""Summarizes Nsight Compute's SASS source page of one kernel: executed warp instructions per
opcode, and the warp stall samples by reason.

    ncu -i PROFILE.ncu-rep --page source --print-source sass --csv > SASS.csv
    sass_mix.py SASS.csv [--per N] [--top 30]

`--per N` divides the counts by N (say the kernel's blocks times warps, for instructions per block
and warp). Stall reasons are Nsight's `stall_*` columns summed over the instructions; "selected"
samples are the issuing ones, so `selected / all` is the issue rate per warp.
"""
import argparse
import collections
import csv


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", help="the CSV of `ncu --page source --print-source sass --csv`")
    p.add_argument("--per", type=float, default=1.0, help="divide instruction counts by this")
    p.add_argument("--top", type=int, default=30, help="opcodes listed")
    args = p.parse_args()
    rows = list(csv.reader(open(args.csv)))
    header_at = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    header = rows[header_at]
    ix = {k: i for i, k in enumerate(header)}
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    executed = collections.Counter()
    stalled = collections.Counter()
    by_reason = collections.Counter()
    for r in rows[header_at + 1 :]:
        if len(r) != len(header):
            continue
        opcode = r[ix["Source"]].split()[0] if r[ix["Source"]].split() else "?"
        if opcode.startswith("@"):
            opcode = r[ix["Source"]].split()[1]
        opcode = opcode.split(".")[0]
        executed[opcode] += int(r[ix["Instructions Executed"]] or 0)
        for s in stalls:
            n = int(r[ix[s]] or 0)
            stalled[opcode] += n
            by_reason[s] += n
    total = sum(executed.values())
    samples = sum(by_reason.values()) or 1
    print(f"warp instructions {total:,} ({total / args.per:,.1f} per unit); stall samples {samples:,}")
    for opcode, n in executed.most_common(args.top):
        print(f"{opcode:12s} {n:12,d} {n / args.per:9.1f}  stalls {100 * stalled[opcode] / samples:5.1f}%")
    print("stall reasons:")
    for reason, n in by_reason.most_common():
        if n:
            print(f"  {reason[6:]:20s} {100 * n / samples:5.1f}%")


if __name__ == "__main__":
    main()
