#!/usr/bin/env python3
"""Summarizes an Nsight Compute CSV (`ncu --csv --metrics ...`): one row per (kernel, grid size),
with the launches' count and each metric's median.

    ncu_summary.py NCU.csv [--name-width 24]

Kernel names are cut to `--name-width` characters (CubeCL appends long hashes); a kernel launched
with several grid sizes (batch 1 and 8, say) gets one row per grid size.
"""
import argparse
import collections
import csv
import statistics


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", help="the CSV that `ncu --csv` printed")
    p.add_argument("--name-width", type=int, default=24, help="characters of the kernel name kept")
    args = p.parse_args()
    rows = list(csv.reader(open(args.csv)))
    header = next((r for r in rows if r and r[0] == "ID"), None)
    if header is None:
        print(f"{args.csv}: no Nsight rows")
        return
    ix = {k: i for i, k in enumerate(header)}
    values = collections.defaultdict(lambda: collections.defaultdict(list))
    launches = collections.defaultdict(set)
    metrics = []
    for r in rows:
        if len(r) != len(header) or r[0] == "ID":
            continue
        key = (r[ix["Kernel Name"]][: args.name_width], r[ix["Grid Size"]])
        metric = r[ix["Metric Name"]]
        if metric not in metrics:
            metrics.append(metric)
        launches[key].add(r[ix["ID"]])
        try:
            values[key][metric].append(float(r[ix["Metric Value"]].replace(",", "")))
        except ValueError:
            pass
    short = [m.split("__")[-1][:18] for m in metrics]
    print("| kernel | grid | launches | " + " | ".join(short) + " |")
    print("|---|---|---:|" + "---:|" * len(metrics))
    for key in sorted(values):
        cells = [f"{statistics.median(values[key][m]):.4g}" if values[key][m] else "" for m in metrics]
        print(f"| {key[0]} | {key[1]} | {len(launches[key])} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
