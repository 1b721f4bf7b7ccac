// Value-path micro-benchmark: out[ch][head] += sum_slot v[slot][ch] * p[head][slot], v rebuilt
// from 8-bit PQ codes (64 subspaces of 2 channels, 256 centroids) through f16 codebooks in shared
// memory, products on tensor cores (mma.sync m16n8k16, f16 -> f32). One warp: rounds of 32 slots.
// Variant TILE: lanes rebuild a [16 slots x 32 channels] f16 tile in shared memory, warp sync,
// ldmatrix.trans, mma, warp sync (the landed kernel's scheme). Variant FRAG: lanes build the mma's
// A fragments in registers from 4 lookups and byte permutes (no tile, no syncs).
#include <cuda_fp16.h>
typedef unsigned int uint32_t;
typedef unsigned long long size_t_;
#ifndef WARPS
#define WARPS 12
#endif
#define BOOK_WORDS (256 * 64)
extern "C" __device__ __forceinline__ void mma16816(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// codes: [rounds_total * 32 slots, 16 words]; books: [256 centroids][64 subspaces] half2 (column = subspace
// for TILE; for FRAG the column of subspace s is spread, see below); out: per warp 128 ch x 8 heads.
extern "C" __global__ void __launch_bounds__(WARPS * 32) vpath_tile(const uint32_t* codes, const uint32_t* books_g, float* out, int rounds) {
  extern __shared__ uint32_t sm[];
  uint32_t* books = sm; // 64 KB
  uint32_t* tiles = sm + BOOK_WORDS; // per warp 16 x 20 words
  for (int i = threadIdx.x; i < BOOK_WORDS; i += blockDim.x) books[i] = books_g[i];
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t* tile = tiles + warp * 16 * 20;
  float acc[8][4] = {};  // 8 blocks of 16 channels x 8 heads
  uint32_t pw[2] = {0x3c003c00u, 0x3c003c00u};  // weights p = 1.0 (B fragment)
  const uint32_t* wc = codes + (size_t_)(blockIdx.x * WARPS + warp) * rounds * 32 * 16;
  for (int r = 0; r < rounds; r++) {
    uint32_t vw[16];
    const int t = lane % 16, h = lane / 16;
#pragma unroll
    for (int half = 0; half < 2; half++)
#pragma unroll
      for (int part = 0; part < 4; part++)
#pragma unroll
        for (int j = 0; j < 2; j++)
          vw[(half * 4 + part) * 2 + j] = wc[((r * 32 + half * 16 + t) * 16) + part * 4 + h * 2 + ((j + t / 2) & 1)];
#pragma unroll
    for (int half = 0; half < 2; half++) {
#pragma unroll
      for (int part = 0; part < 4; part++) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
          const int wj = (j + t / 2) & 1;  // word within the side
          const int fc = (t % 2 + 2 * (t / 8)) % 4;
          const uint32_t loaded = vw[(half * 4 + part) * 2 + j];
          const uint32_t word = fc ? (loaded >> (8 * fc)) | (loaded << (32 - 8 * fc)) : loaded;
#pragma unroll
          for (int i = 0; i < 4; i++) {
            const int s = part * 16 + h * 8 + wj * 4 + ((i + fc) & 3);       // subspace
            const uint32_t c = (word >> (8 * i)) & 255u;
            tile[t * 20 + (s - part * 16)] = books[c * 64 + s];
          }
        }
        __syncwarp();
#pragma unroll
        for (int blk = 0; blk < 2; blk++) {
          // A = V^T (16 channels x 16 slots), from the tile [slot][channel] by ldmatrix.trans.
          uint32_t a[4];
          const int row = lane % 16, colblk = lane / 16;
          const uint32_t addr = (uint32_t)__cvta_generic_to_shared(tile + row * 20 + blk * 8 + colblk * 4);
          asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                       : "=r"(a[0]), "=r"(a[2]), "=r"(a[1]), "=r"(a[3]) : "r"(addr));
          mma16816(acc[part * 2 + blk], a, pw);
        }
        __syncwarp();
      }
    }
  }
  float* o = out + (size_t_)(blockIdx.x * WARPS + warp) * 8 * 4 * 32;
#pragma unroll
  for (int b = 0; b < 8; b++)
#pragma unroll
    for (int k = 0; k < 4; k++) o[(b * 4 + k) * 32 + lane] = acc[b][k];
}

// FRAG: lane (g = lane/4, q = lane%4) holds, per block b of 16 channels, rows g and g+8 = the two
// channels of subspace s = 8*b + g... with words: lane g uses code words 2g, 2g+1 of its slots,
// subspace of (word 2g + k/4, code k%4) = 8g + k: block b = k (8 blocks), row pair = g.
// Books column for FRAG: subspace s = 8g + b at column (s ^ ((q-independent) ...)): plain c*64+s.
extern "C" __global__ void __launch_bounds__(WARPS * 32) vpath_frag(const uint32_t* codes, const uint32_t* books_g, float* out, int rounds) {
  extern __shared__ uint32_t sm[];
  uint32_t* books = sm;
  for (int i = threadIdx.x; i < BOOK_WORDS; i += blockDim.x) books[i] = books_g[i];
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, q = lane % 4;
  float acc[8][4] = {};
  uint32_t pw[2] = {0x3c003c00u, 0x3c003c00u};
  const uint32_t* wc = codes + (size_t_)(blockIdx.x * WARPS + warp) * rounds * 32 * 16;
  for (int r = 0; r < rounds; r++) {
    uint32_t vw[16];  // [half][slot k of 4][word 2]
#pragma unroll
    for (int half = 0; half < 2; half++)
#pragma unroll
      for (int k = 0; k < 4; k++)
#pragma unroll
        for (int x = 0; x < 2; x++) {
          const int slot = half * 16 + 2 * q + (k & 1) + 8 * (k >> 1);
          vw[(half * 4 + k) * 2 + x] = wc[(r * 32 + slot) * 16 + 2 * g + x];
        }
#pragma unroll
    for (int half = 0; half < 2; half++) {
#pragma unroll
      for (int b = 0; b < 8; b++) {
        uint32_t v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
          const uint32_t word = vw[(half * 4 + k) * 2 + (b >> 2)];
          const uint32_t c = (word >> (8 * (b & 3))) & 255u;
          const int s = 8 * g + b;
#if SPREAD
          // centroid c's low 2 bits pick the bank within lane group g: bank = 4 g + (c & 3)
          v[k] = books[((c >> 2) * 64 + (8 * b + g)) * 4 + (c & 3)];
#else
          v[k] = books[c * 64 + s];
#endif
        }
        uint32_t a[4];
        // rows g (channel 0 of s), g+8 (channel 1); cols 2q,2q+1 (slots k=0,1), 2q+8,2q+9 (k=2,3)
        a[0] = __byte_perm(v[0], v[1], 0x5410);  // ch0 of slots k0,k1
        a[1] = __byte_perm(v[0], v[1], 0x7632);  // ch1
        a[2] = __byte_perm(v[2], v[3], 0x5410);
        a[3] = __byte_perm(v[2], v[3], 0x7632);
        mma16816(acc[b], a, pw);
      }
    }
  }
  float* o = out + (size_t_)(blockIdx.x * WARPS + warp) * 8 * 4 * 32;
#pragma unroll
  for (int b = 0; b < 8; b++)
#pragma unroll
    for (int k = 0; k < 4; k++) o[(b * 4 + k) * 32 + lane] = acc[b][k];
}
