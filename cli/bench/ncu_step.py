#!/usr/bin/env python3
"""The launches of one decode step from an Nsight Compute CSV of a run that ends in identical
steps (`ncu --csv --metrics gpu__time_duration.sum row_bench ...`): the step is the shortest
period P with which the launches' kernel names and grids repeat at the end of the run, and its
last P launches are summed per kernel (count, device µs) and in all. With `--layers L`, a
kernel launched a multiple of L times a step (or one more) is counted as the layers' (the one
more, at the median duration, as the step's own: the final norm), every other launch as the
step's own (embedding, output head, logits), and both are printed.

    ncu_step.py NCU.csv [--layers 32] [--name-width 40]
"""
import argparse
import collections
import csv
import statistics


def launches(path):
    """(kernel name, grid, duration ns) per launch, in launch order."""
    rows = list(csv.reader(open(path)))
    header = next((r for r in rows if r and r[0] == "ID"), None)
    if header is None:
        raise SystemExit(f"{path}: no Nsight rows")
    ix = {k: i for i, k in enumerate(header)}
    out = {}
    for r in rows:
        if len(r) != len(header) or r[0] == "ID" or r[ix["Metric Name"]] != "gpu__time_duration.sum":
            continue
        out[int(r[ix["ID"]])] = (r[ix["Kernel Name"]], r[ix["Grid Size"]], float(r[ix["Metric Value"]].replace(",", "")))
    return [out[i] for i in sorted(out)]


def period(names, longest):
    """The shortest P ≤ longest with names[-P:] == names[-2P:-P]."""
    for p in range(1, min(longest, len(names) // 2) + 1):
        if names[-p:] == names[-2 * p : -p]:
            return p
    raise SystemExit("no repeating step at the end of the run")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", help="the CSV that `ncu --csv` printed")
    p.add_argument("--layers", type=int, default=0, help="layers of the model: also print launches per layer")
    p.add_argument("--name-width", type=int, default=40, help="characters of the kernel name kept")
    p.add_argument("--longest", type=int, default=5000, help="longest step considered, launches")
    args = p.parse_args()
    all_launches = launches(args.csv)
    step = all_launches[-period([(n, g) for n, g, _ in all_launches], args.longest) :]
    per_kernel = collections.defaultdict(lambda: [0, 0.0])
    for name, grid, ns in step:
        key = (name[: args.name_width], grid)
        per_kernel[key][0] += 1
        per_kernel[key][1] += ns / 1e3
    total = sum(ns for _, _, ns in step) / 1e3
    print(f"one step: {len(step)} launches, {total:.1f} µs of kernel time")
    if args.layers:
        durations = collections.defaultdict(list)
        for name, grid, ns in step:
            durations[(name[: args.name_width], grid)].append(ns / 1e3)
        layer_launches, layer_us = 0, 0.0
        for times in durations.values():
            extra = len(times) % args.layers
            if extra <= 1 and len(times) >= args.layers:
                layer_launches += len(times) - extra
                layer_us += sum(times) - extra * statistics.median(times)
        own_launches, own_us = len(step) - layer_launches, total - layer_us
        print(
            f"per layer: {layer_launches / args.layers:.1f} launches, {layer_us / args.layers:.1f} µs; "
            f"the step's own (embedding, final norm, output head): {own_launches} launches, {own_us:.1f} µs"
        )
    print("\n| kernel | grid | launches | µs | share |")
    print("|---|---|---:|---:|---:|")
    for (name, grid), (count, us) in sorted(per_kernel.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name} | {grid} | {count} | {us:.1f} | {100 * us / total:.1f} % |")


if __name__ == "__main__":
    main()
