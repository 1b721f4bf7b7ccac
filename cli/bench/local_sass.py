#!/usr/bin/env python3
"""Reads a CubeCL kernel's SASS on a machine without a GPU: takes the CUDA source from CubeCL's
compilation log (written on the GPU machine with `CUBECL_DEBUG_LOG=FILE`), compiles it with NVRTC
and ptxas for sm_90a as the CUDA runtime does, prints the registers and spills, and counts the
SASS instructions per opcode in regions of source lines.

The compilers come from PyPI wheels (no CUDA install needed); unzip them into one folder:

    pip download --no-deps nvidia-cuda-nvrtc-cu12==12.9.86 nvidia-cuda-nvcc-cu12==12.9.86 \\
        nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-cccl-cu12==12.9.27 \\
        nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump
    for w in *.whl; do unzip -qo $w -d CUDA_DIR; done

    local_sass.py extract LOG mma_decode_kernel --block-size 384 [--match N] -o kernel.cu
    local_sass.py compile kernel.cu --cuda-dir CUDA_DIR [--launch-bounds 512]
    local_sass.py regions kernel.lsass keys:1342-2577,values:3226-6800
    local_sass.py loop kernel.lsass

`compile` writes `kernel.ptx`, `kernel.cubin` and `kernel.lsass` (SASS with line numbers) beside
the source. Static counts: a region's instructions once, whatever the loop trip counts; Nsight's
source page (`sass_mix.py`) gives the executed ones.
"""
import argparse
import collections
import ctypes
import pathlib
import re
import subprocess
import sys


def extract(args):
    """Writes the source of the `match`-th kernel named `name` with cube size `block_size` in `log`
    (one compilation a shape: the log's `name:` block above each source says which)."""
    text = open(args.log).read().split("\n")
    header = re.compile(rf"__launch_bounds__\({args.block_size}\)\s*{re.escape(args.name)}")
    found = [i for i, line in enumerate(text) if header.search(line)]
    if len(found) < args.match:
        sys.exit(f"{len(found)} kernels {args.name} with __launch_bounds__({args.block_size}) in {args.log}")
    print("matches at lines " + ", ".join(str(i + 1) for i in found))
    i = found[args.match - 1]
    start = max(n for n in range(i) if text[n].startswith("```cpp")) + 1
    end = next(n for n in range(i, len(text)) if text[n].startswith("```"))
    pathlib.Path(args.output).write_text("\n".join(text[start:end]) + "\n")
    print(f"{args.output}: lines {start + 1}..{end} of {args.log}")


def compile_source(args):
    """NVRTC (the options CubeCL's CUDA runtime passes) → PTX → ptxas → nvdisasm with lines."""
    cuda = pathlib.Path(args.cuda_dir) / "nvidia"
    source = pathlib.Path(args.source)
    text = source.read_text()
    if args.launch_bounds:
        text = re.sub(r"__launch_bounds__\(\d+\)", f"__launch_bounds__({args.launch_bounds})", text)
    nvrtc = ctypes.CDLL(str(next((cuda / "cuda_nvrtc" / "lib").glob("libnvrtc.so.*"))))
    program = ctypes.c_void_p()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(program), text.encode(), source.name.encode(), 0, None, None):
        sys.exit("nvrtcCreateProgram failed")
    includes = [cuda / "cuda_runtime" / "include", cuda / "cuda_nvcc" / "include", cuda / "cuda_cccl" / "include"]
    options = [b"--gpu-architecture=compute_90a", b"-lineinfo"] + [f"--include-path={p}".encode() for p in includes]
    status = nvrtc.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(*options))
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(program, log)
    if status:
        sys.exit(log.value.decode())
    nvrtc.nvrtcGetPTXSize(program, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetPTX(program, ptx)
    stem = source.with_suffix("")
    stem.with_suffix(".ptx").write_bytes(ptx.value)
    ptxas = cuda / "cuda_nvcc" / "bin" / "ptxas"
    report = subprocess.run(
        [str(ptxas), "-arch=sm_90a", "-v", str(stem.with_suffix(".ptx")), "-o", str(stem.with_suffix(".cubin"))],
        capture_output=True, text=True, check=True,
    ).stderr
    print("\n".join(l.strip() for l in report.splitlines() if "registers" in l or "spill" in l))
    nvdisasm = next(cuda.glob("*/bin/nvdisasm"))
    sass = subprocess.run([str(nvdisasm), "-g", "-c", str(stem.with_suffix(".cubin"))], capture_output=True,
                          text=True, check=True).stdout
    stem.with_suffix(".lsass").write_text(sass)
    print(f"{stem.with_suffix('.lsass')}: {sum(1 for _ in instructions(sass.splitlines()))} instructions")


def instructions(lines):
    """(source line, opcode) of each SASS instruction of `nvdisasm -g` output."""
    line = None
    for text in lines:
        found = re.search(r'File ".*", line (\d+)', text)
        if found:
            line = int(found.group(1))
            continue
        found = re.match(r"\s+/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9]*)", text)
        if found and line is not None:
            yield line, found.group(2)


def loop(args):
    """Opcode counts (with modifiers) of the widest loop: the instructions between a backward
    branch and its target, the widest such span (a kernel's loop over its steps)."""
    text = open(args.lsass).read().splitlines()
    label_at, pending, body = {}, [], []
    for line in text:
        label = re.match(r"\s*(\.L_x_\d+):", line)
        if label:
            pending.append(label.group(1))
            continue
        found = re.match(r"\s+/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9.]*)([^;]*)", line)
        if found:
            address = int(found.group(1), 16)
            label_at.update((name, address) for name in pending)
            pending = []
            body.append((address, found.group(3), found.group(4)))
    spans = []
    for address, opcode, operands in body:
        target = re.search(r"(\.L_x_\d+)", operands)
        if opcode.startswith("BRA") and target and label_at.get(target.group(1), address) < address:
            spans.append((label_at[target.group(1)], address))
    if not spans:
        sys.exit("no backward branch")
    first, last = max(spans, key=lambda span: span[1] - span[0])
    opcodes = collections.Counter(op for address, op, _ in body if first <= address <= last)
    print(f"loop {first:#x}..{last:#x}: {sum(opcodes.values())} instructions")
    for opcode, count in opcodes.most_common(args.top):
        print(f"{count:6d}  {opcode}")


def regions(args):
    """Opcode counts per named region `name:first-last` of source lines, the rest as `other`."""
    spans = []
    for part in args.regions.split(","):
        name, lines = part.split(":")
        first, last = lines.split("-")
        spans.append((name, int(first), int(last)))
    counts = {name: collections.Counter() for name, _, _ in spans}
    counts["other"] = collections.Counter()
    for line, opcode in instructions(open(args.lsass)):
        region = next((name for name, first, last in spans if first <= line <= last), "other")
        counts[region][opcode] += 1
    for name, opcodes in counts.items():
        top = " ".join(f"{k}:{v}" for k, v in opcodes.most_common(args.top))
        print(f"{name:12s} {sum(opcodes.values()):6d}  {top}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(required=True)
    p = commands.add_parser("extract", help="take one kernel's source out of a CubeCL compilation log")
    p.add_argument("log", help="the file CUBECL_DEBUG_LOG named")
    p.add_argument("name", help="the kernel's function name (or its start)")
    p.add_argument("--block-size", type=int, required=True, help="its cube size (units), as in __launch_bounds__")
    p.add_argument("-o", "--output", required=True, help="where to write the .cu source")
    p.add_argument("--match", type=int, default=1, help="which of the kernels so named (1: the first)")
    p.set_defaults(run=extract)
    p = commands.add_parser("compile", help="NVRTC + ptxas for sm_90a; registers, spills, SASS with lines")
    p.add_argument("source", help="a .cu file from `extract`")
    p.add_argument("--cuda-dir", required=True, help="the folder the wheels were unzipped into")
    p.add_argument("--launch-bounds", type=int, help="recompile for this many units per cube (register budget)")
    p.set_defaults(run=compile_source)
    p = commands.add_parser("regions", help="SASS opcode counts per region of source lines")
    p.add_argument("lsass", help="the .lsass file `compile` wrote")
    p.add_argument("regions", help="comma-separated name:first-last source line ranges")
    p.add_argument("--top", type=int, default=12, help="opcodes listed per region")
    p.set_defaults(run=regions)
    p = commands.add_parser("loop", help="SASS opcode counts of the widest loop (static)")
    p.add_argument("lsass", help="the .lsass file `compile` wrote")
    p.add_argument("--top", type=int, default=40, help="opcodes listed")
    p.set_defaults(run=loop)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
