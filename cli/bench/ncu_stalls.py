#!/usr/bin/env python3
"""Where one kernel's warps stall, from Nsight Compute's source page of a report collected with
`--section SourceCounters` (`ncu --import REP --page source --csv --print-source sass > SRC.csv`):
the warp-state samples by reason, by opcode, and by windows of consecutive SASS instructions
(each window's most frequent executed opcodes and top stall reasons), so that a kernel's parts
can be told apart by their instructions (products, exponentials, copies, barriers).

    ncu_stalls.py SRC.csv [--window 100] [--min-share 0.004]

Executed counts are divided by `--per` (the number of warp-steps, say) where given.
"""
import argparse
import collections
import csv
import re


def opcode(source):
    """The SASS line's opcode without its predicate and modifiers."""
    text = re.sub(r"^@!?U?P\w+\s+", "", source.strip())
    return text.split()[0].split(".")[0] if text else "?"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", help="the source page's CSV")
    p.add_argument("--window", type=int, default=100, help="SASS instructions a window")
    p.add_argument("--min-share", type=float, default=0.004, help="smallest share of the samples a window printed")
    p.add_argument("--per", type=float, default=1.0, help="divide executed counts by this")
    args = p.parse_args()
    rows = list(csv.reader(open(args.csv)))
    header = next((r for r in rows if "Source" in r and "# Samples" in r), None)
    if header is None:
        raise SystemExit(f"{args.csv}: no source-page header (collect with --section SourceCounters)")
    ix = {k: i for i, k in enumerate(header)}
    reasons = [c for c in header if c.startswith("stall_") and "Not Issued" not in c]
    lines = [r for r in rows[rows.index(header) + 1 :] if len(r) >= len(header)]
    num = lambda r, c: int(r[ix[c]] or 0)
    total = sum(num(r, "# Samples") for r in lines) or 1
    by_reason = collections.Counter({c[6:]: sum(num(r, c) for r in lines) for c in reasons})
    print(f"samples {total}")
    for reason, n in by_reason.most_common():
        print(f"  {reason:20s} {100 * n / total:5.1f} %")
    by_op = collections.defaultdict(collections.Counter)
    executed = collections.Counter()
    for r in lines:
        op = opcode(r[ix["Source"]])
        executed[op] += num(r, "Instructions Executed")
        for c in reasons:
            by_op[op][c[6:]] += num(r, c)
    print("\nby opcode: share of samples, executed, top reasons")
    for op, c in sorted(by_op.items(), key=lambda kv: -sum(kv[1].values()))[:25]:
        top = ", ".join(f"{k} {v}" for k, v in c.most_common(3))
        print(f"  {op:8s} {100 * sum(c.values()) / total:5.1f} %  {executed[op] / args.per:10.0f}  {top}")
    print(f"\nby window of {args.window} instructions: first line, share, executed, opcodes | reasons")
    for start in range(0, len(lines), args.window):
        chunk = lines[start : start + args.window]
        n = sum(num(r, "# Samples") for r in chunk)
        if n < args.min_share * total:
            continue
        ops = collections.Counter(opcode(r[ix["Source"]]) for r in chunk if num(r, "Instructions Executed"))
        stalls = collections.Counter({c[6:]: sum(num(r, c) for r in chunk) for c in reasons})
        done = sum(num(r, "Instructions Executed") for r in chunk) / args.per
        print(
            f"  {start:5d} {100 * n / total:5.1f} % {done:8.0f}  "
            + " ".join(f"{k}:{v}" for k, v in ops.most_common(6))
            + " | "
            + " ".join(f"{k}:{v}" for k, v in stalls.most_common(3))
        )


if __name__ == "__main__":
    main()
