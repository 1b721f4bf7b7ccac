# Times the value-path micro-kernels (vpath.cu, compiled here to cubins) on the GPU: 132 cubes of
# 12 warps, 200 KB of shared memory each (one cube per SM, as the decode kernel), random codes.
import ctypes, sys, torch
torch.cuda.init(); torch.zeros(1, device="cuda")
cu = ctypes.CDLL("libcuda.so.1")
def ck(r, what):
    if r != 0: sys.exit(f"{what}: CUDA error {r}")
ctx = ctypes.c_void_p(); ck(cu.cuCtxGetCurrent(ctypes.byref(ctx)), "ctx")
SM, SMEM = 132, 200 * 1024
SLOTS = 32768 * 64
g = torch.Generator(device="cuda").manual_seed(1)
codes = torch.randint(0, 2**31, ((SLOTS + SM * 16 * 32) * 16,), device="cuda", dtype=torch.int64, generator=g).to(torch.int32)
books = (torch.randn(256 * 64 * 2, device="cuda", generator=g) * 0.1).half()
def run(cubin, name, WARPS, reps=50):
    ROUNDS = SLOTS // (SM * WARPS * 32) + 1
    mod = ctypes.c_void_p(); ck(cu.cuModuleLoad(ctypes.byref(mod), cubin.encode()), "load " + cubin)
    f = ctypes.c_void_p(); ck(cu.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()), "func " + name)
    ck(cu.cuFuncSetAttribute(f, 8, SMEM), "smem attr")
    out = torch.zeros(SM * WARPS * 8 * 4 * 32, device="cuda")
    args = [ctypes.c_uint64(codes.data_ptr()), ctypes.c_uint64(books.data_ptr()), ctypes.c_uint64(out.data_ptr()), ctypes.c_int(ROUNDS)]
    params = (ctypes.c_void_p * 4)(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args])
    launch = lambda: ck(cu.cuLaunchKernel(f, SM, 1, 1, WARPS * 32, 1, 1, SMEM, None, params, None), "launch")
    for _ in range(5): launch()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); launch(); b.record(); torch.cuda.synchronize(); times.append(a.elapsed_time(b) * 1e3)
    times.sort()
    return times[len(times) // 2], out.double().sum().item(), ROUNDS
print(f"{SM} cubes, 32K batch 8 x 8 KV heads = {SLOTS} slots (rounded up to whole rounds)")
print("| variant | books layout | warps | rounds | median us | ns per warp-round | output sum |")
print("|---|---|---:|---:|---:|---:|---:|")
for warps in (8, 12, 16):
    for spread, name, layout in [(0, "vpath_tile", "[c][64 subspaces]"), (0, "vpath_frag", "[c][64 subspaces]"), (1, "vpath_frag", "c & 3 spread over 4 banks")]:
        cubin = f"v{spread}.cubin" if warps == 12 else f"v{spread}_w{warps}.cubin"
        med, total, rounds = run(cubin, name, warps)
        print(f"| {name} | {layout} | {warps} | {rounds} | {med:.1f} | {med * 1e3 / rounds:.1f} | {total:.6e} |")
