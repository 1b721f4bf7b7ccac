// Streaming-read patterns on one GPU: how close to DRAM peak can a cube-per-SM kernel that
// stages rows in shared memory get, and which change gets it there. Reads K and V of
// `rows` rows of 1024 bytes each (the ZACK benchmark's 8 sequences x 32K slots x 512 f16).
//
// nvcc -O3 -arch=sm_90a -std=c++17 -o cp copy_patterns.cu
// ./cp 262144 100        every pattern, nothing between rounds (copy.txt)
// ./cp 262144 50 delay   a busy wait after each round, as a kernel's compute (copy-delay.txt)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <cuda/barrier>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(1); } } while (0)

constexpr int ROW_BYTES = 1024;
constexpr int VEC_PER_ROW = ROW_BYTES / 16;
constexpr int PITCH = ROW_BYTES + 16;

__device__ __forceinline__ uint32_t saddr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.shared.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.shared.b64 st, [%0]; }\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared.b64 st, [%0], %1; }\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool mbar_try(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }\n"
               : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok;
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) { while (!mbar_try(bar, parity)) {} }
__device__ __forceinline__ void bulk(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

__device__ __forceinline__ void spin(int cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}

// Split halves: keys and values of a round on their own barriers; the keys of round r + 2 are
// issued once round r's scores (half the delay) are done, its values once its values are.
template <int ROWS>
__global__ void __launch_bounds__(256) split(const uint4* K, const uint4* V, size_t rows, float* sink, int delay) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[4];
  constexpr int HALF = ROWS * PITCH;
  size_t r0 = rows * blockIdx.x / gridDim.x, r1 = rows * (blockIdx.x + 1) / gridDim.x;
  int rounds = (int)((r1 - r0 + ROWS - 1) / ROWS);
  if (threadIdx.x == 0) for (int s = 0; s < 4; s++) mbar_init(saddr(&bars[s]), blockDim.x);
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();
  // half h = 2 * (round % 2) + (0: keys, 1: values)
  auto issue = [&](int round, int part) {
    int h = 2 * (round % 2) + part;
    uint32_t base = saddr(smem) + h * HALF, bar = saddr(&bars[h]);
    const uint4* src = part ? V : K;
    size_t first = r0 + (size_t)round * ROWS;
    for (int e = threadIdx.x; e < ROWS * VEC_PER_ROW; e += blockDim.x) {
      int row = e / VEC_PER_ROW, v = e % VEC_PER_ROW;
      size_t g = first + row < r1 ? first + row : r1 - 1;
      cp_async16(base + row * PITCH + v * 16, src + g * VEC_PER_ROW + v);
    }
    cp_async_arrive(bar);
  };
  auto wait = [&](int round, int part) {
    uint32_t bar = saddr(&bars[2 * (round % 2) + part]);
    mbar_arrive(bar);
    mbar_wait(bar, (round / 2) & 1);
  };
  for (int i = 0; i < 2 && i < rounds; i++) { issue(i, 0); issue(i, 1); }
  float acc = 0.f;
  for (int r = 0; r < rounds; r++) {
    wait(r, 0);
    acc += *reinterpret_cast<const float*>(smem + (2 * (r % 2)) * HALF + (threadIdx.x % ROWS) * PITCH);
    spin(delay / 2);
    __syncthreads();
    if (r + 2 < rounds) issue(r + 2, 0);
    wait(r, 1);
    acc += *reinterpret_cast<const float*>(smem + (2 * (r % 2) + 1) * HALF + (threadIdx.x % ROWS) * PITCH);
    spin(delay / 2);
    __syncthreads();
    if (r + 2 < rounds) issue(r + 2, 1);
  }
  if (acc == 1234.5f) sink[blockIdx.x] = acc;
}

// MODE 0: cp.async + mbarrier (CubeCL's copy_async/commit/arrive_and_wait), 1: cp.async groups,
// 2: one bulk copy per row (lane r of warp 0 copies row r), 3: one bulk copy per round and tensor,
// 4: cp.async + libcu++ cuda::barrier arrive_and_wait (what CubeCL emits), 5: the same barrier
// with arrive then wait_parity.
template <int ROWS, int STAGES, int MODE>
__global__ void __launch_bounds__(256) staged(const uint4* K, const uint4* V, size_t rows, float* sink, int delay) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[STAGES];
  __shared__ cuda::barrier<cuda::thread_scope_block> lbars[STAGES];
  constexpr int PITCH_ = MODE == 3 ? ROW_BYTES : PITCH;
  constexpr int STAGE_BYTES = 2 * ROWS * PITCH_;
  size_t r0 = rows * blockIdx.x / gridDim.x, r1 = rows * (blockIdx.x + 1) / gridDim.x;
  int rounds = (int)((r1 - r0 + ROWS - 1) / ROWS);
  if (threadIdx.x == 0)
    for (int s = 0; s < STAGES; s++) {
      if (MODE >= 4) init(&lbars[s], blockDim.x);
      else mbar_init(saddr(&bars[s]), MODE >= 2 ? 1 : blockDim.x);
    }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();
  auto issue = [&](int round) {
    int s = round % STAGES;
    uint32_t base = saddr(smem) + s * STAGE_BYTES;
    uint32_t bar = MODE >= 4 ? saddr(cuda::device::barrier_native_handle(lbars[s])) : saddr(&bars[s]);
    size_t first = r0 + (size_t)round * ROWS;
    if (MODE <= 1 || MODE >= 4) {
      for (int e = threadIdx.x; e < ROWS * VEC_PER_ROW; e += blockDim.x) {
        int row = e / VEC_PER_ROW, v = e % VEC_PER_ROW;
        size_t g = first + row < r1 ? first + row : r1 - 1;
        cp_async16(base + row * PITCH + v * 16, K + g * VEC_PER_ROW + v);
        cp_async16(base + ROWS * PITCH + row * PITCH + v * 16, V + g * VEC_PER_ROW + v);
      }
      if (MODE != 1) cp_async_arrive(bar); else asm volatile("cp.async.commit_group;\n" ::: "memory");
    } else if (MODE == 2) {
      if (threadIdx.x < 32) {
        if (threadIdx.x == 0) mbar_arrive_tx(bar, 2 * ROWS * ROW_BYTES);
        __syncwarp();
        for (int row = threadIdx.x; row < ROWS; row += 32) {
          size_t g = first + row < r1 ? first + row : r1 - 1;
          bulk(base + row * PITCH, K + g * VEC_PER_ROW, ROW_BYTES, bar);
          bulk(base + ROWS * PITCH + row * PITCH, V + g * VEC_PER_ROW, ROW_BYTES, bar);
        }
      }
    } else {
      if (threadIdx.x == 0) {
        size_t n = first + ROWS <= r1 ? ROWS : r1 - first;
        mbar_arrive_tx(bar, 2 * n * ROW_BYTES);
        bulk(base, K + first * VEC_PER_ROW, n * ROW_BYTES, bar);
        bulk(base + ROWS * ROW_BYTES, V + first * VEC_PER_ROW, n * ROW_BYTES, bar);
      }
    }
  };
  for (int i = 0; i < STAGES - 1; i++) {
    if (i < rounds) issue(i);
    else if (MODE == 1) asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  float acc = 0.f;
  for (int r = 0; r < rounds; r++) {
    int next = r + STAGES - 1;
    if (next < rounds) issue(next);
    else if (MODE == 1) asm volatile("cp.async.commit_group;\n" ::: "memory");
    int s = r % STAGES;
    uint32_t bar = saddr(&bars[s]);
    if (MODE == 4) lbars[s].arrive_and_wait();
    else if (MODE == 5) { (void)lbars[s].arrive(); lbars[s].wait_parity((r / STAGES) & 1); }
    else if (MODE == 0) { mbar_arrive(bar); mbar_wait(bar, (r / STAGES) & 1); }
    else if (MODE == 1) { asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 1) : "memory"); __syncthreads(); }
    else mbar_wait(bar, (r / STAGES) & 1);
    acc += *reinterpret_cast<const float*>(smem + s * STAGE_BYTES + (threadIdx.x % ROWS) * PITCH_ + 4 * (threadIdx.x / ROWS));
    spin(delay);
    __syncthreads();
  }
  if (acc == 1234.5f) sink[blockIdx.x] = acc;
}

// Plain loads into registers, UNROLL 16-byte loads in flight per unit, contiguous range per cube.
template <int UNROLL>
__global__ void __launch_bounds__(256) loads(const uint4* K, const uint4* V, size_t rows, float* sink, int delay) {
  size_t v0 = rows * blockIdx.x / gridDim.x * VEC_PER_ROW, v1 = rows * (blockIdx.x + 1) / gridDim.x * VEC_PER_ROW;
  uint32_t acc = 0;
  for (size_t i = v0 + threadIdx.x; i < v1; i += (size_t)blockDim.x * UNROLL) {
    uint4 k[UNROLL], v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      size_t j = i + (size_t)u * blockDim.x;
      if (j < v1) { k[u] = __ldg(K + j); v[u] = __ldg(V + j); } else { k[u] = v[u] = make_uint4(0, 0, 0, 0); }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; u++) acc ^= k[u].x ^ v[u].y;
  }
  if (acc == 12345u) sink[blockIdx.x] = acc;
}

typedef void (*Kernel)(const uint4*, const uint4*, size_t, float*, int);

static int g_delay = 0;
static void run(const char* name, Kernel k, int ctas, int smem, const uint4* K, const uint4* V, size_t rows, float* sink, int runs) {
  if (smem > 48 * 1024) CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  for (int i = 0; i < 5; i++) k<<<ctas, 256, smem>>>(K, V, rows, sink, g_delay);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  float best = 1e30f, total = 0;
  for (int rep = 0; rep < 3; rep++) {
    CK(cudaEventRecord(a));
    for (int i = 0; i < runs; i++) k<<<ctas, 256, smem>>>(K, V, rows, sink, g_delay);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms; CK(cudaEventElapsedTime(&ms, a, b));
    float us = ms * 1e3f / runs; total += us; if (us < best) best = us;
  }
  double bytes = 2.0 * rows * ROW_BYTES;
  printf("| %5d | %-44s | %4d | %6d | %7.1f | %7.1f | %5.0f |\n", g_delay, name, ctas, smem, total / 3, best, bytes / best / 1e3);
}

int main(int argc, char** argv) {
  size_t rows = argc > 1 ? strtoull(argv[1], 0, 10) : 8 * 32768;
  int runs = argc > 2 ? atoi(argv[2]) : 100;
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, 0));
  printf("%s, %d SMs, %zu rows of %d B per tensor (K and V: %.1f MB)\n", p.name, sms, rows, ROW_BYTES, 2.0 * rows * ROW_BYTES / 1e6);
  uint4 *K, *V; float* sink;
  CK(cudaMalloc(&K, rows * ROW_BYTES)); CK(cudaMalloc(&V, rows * ROW_BYTES)); CK(cudaMalloc(&sink, 4096 * 4));
  CK(cudaMemset(K, 1, rows * ROW_BYTES)); CK(cudaMemset(V, 2, rows * ROW_BYTES));
  bool sweep = argc > 3 && argv[3][0] == 'd';
  printf("\n| delay cycles | pattern | cubes | smem B | mean us | best us | GB/s |\n|---:|---|---:|---:|---:|---:|---:|\n");
  int s32 = 2 * 32 * PITCH, s16 = 2 * 16 * PITCH;
  if (!sweep) {
    // copy.txt: every pattern, no work between rounds.
    run("cp.async+mbarrier, 32 rows x 2 stages", staged<32, 2, 0>, 128, 2 * s32, K, V, rows, sink, runs);
    run("cp.async+mbarrier, 32 rows x 2 stages", staged<32, 2, 0>, sms, 2 * s32, K, V, rows, sink, runs);
    run("cp.async+mbarrier, 32 rows x 3 stages", staged<32, 3, 0>, 128, 3 * s32, K, V, rows, sink, runs);
    run("cp.async+mbarrier, 16 rows x 4 stages", staged<16, 4, 0>, 128, 4 * s16, K, V, rows, sink, runs);
    run("cp.async+mbarrier, 16 rows x 2 stages, 2/SM", staged<16, 2, 0>, 2 * sms, 2 * s16, K, V, rows, sink, runs);
    run("cp.async+mbarrier, 32 rows x 3 stages", staged<32, 3, 0>, sms, 3 * s32, K, V, rows, sink, runs);
    run("cp.async+libcu++ arrive_and_wait, 32 x 2", staged<32, 2, 4>, 128, 2 * s32, K, V, rows, sink, runs);
    run("cp.async+libcu++ wait_parity, 32 x 2", staged<32, 2, 5>, 128, 2 * s32, K, V, rows, sink, runs);
    run("cp.async groups, 32 rows x 2 stages", staged<32, 2, 1>, 128, 2 * s32, K, V, rows, sink, runs);
    run("cp.async groups, 32 rows x 3 stages", staged<32, 3, 1>, 128, 3 * s32, K, V, rows, sink, runs);
    run("bulk per row, 32 rows x 2 stages", staged<32, 2, 2>, 128, 2 * s32, K, V, rows, sink, runs);
    run("bulk per row, 32 rows x 2 stages", staged<32, 2, 2>, sms, 2 * s32, K, V, rows, sink, runs);
    run("bulk per row, 32 rows x 3 stages", staged<32, 3, 2>, 128, 3 * s32, K, V, rows, sink, runs);
    run("bulk per row, 16 rows x 4 stages", staged<16, 4, 2>, 128, 4 * s16, K, V, rows, sink, runs);
    run("bulk per round, 32 rows x 2 stages", staged<32, 2, 3>, 128, 2 * 2 * 32 * ROW_BYTES, K, V, rows, sink, runs);
    run("bulk per round, 32 rows x 3 stages", staged<32, 3, 3>, 128, 3 * 2 * 32 * ROW_BYTES, K, V, rows, sink, runs);
    run("loads, 4 in flight", loads<4>, 128, 0, K, V, rows, sink, runs);
    run("loads, 8 in flight", loads<8>, 128, 0, K, V, rows, sink, runs);
    run("loads, 4 in flight, 4/SM", loads<4>, 4 * sms, 0, K, V, rows, sink, runs);
    run("loads, 8 in flight, 8/SM", loads<8>, 8 * sms, 0, K, V, rows, sink, runs);
  } else {
    // copy-delay.txt: a busy wait of `delay` cycles after each round lands (its compute).
    for (int d : {0, 2000, 4000, 5000}) {
      g_delay = d;
      run("cp.async+mbarrier, 32 rows x 2 stages", staged<32, 2, 0>, 128, 2 * s32, K, V, rows, sink, runs);
      run("cp.async+mbarrier, 32 rows x 3 stages", staged<32, 3, 0>, 128, 3 * s32, K, V, rows, sink, runs);
      run("cp.async+mbarrier, 16 rows x 4 stages", staged<16, 4, 0>, 128, 4 * s16, K, V, rows, sink, runs);
      run("split K/V halves, 32 rows x 2 stages", split<32>, 128, 2 * s32, K, V, rows, sink, runs);
      run("bulk per round, 32 rows x 2 stages", staged<32, 2, 3>, 128, 2 * 2 * 32 * ROW_BYTES, K, V, rows, sink, runs);
      run("bulk per round, 32 rows x 3 stages", staged<32, 3, 3>, 128, 3 * 2 * 32 * ROW_BYTES, K, V, rows, sink, runs);
    }
  }
  CK(cudaMemcpy(sink, K, 4, cudaMemcpyDeviceToDevice));
  return 0;
}
