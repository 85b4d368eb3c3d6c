// fp8tower "stream" backend: an FP8 decode GEMM that is resident before its predecessor ends.
//
// y (M, N) = x (M, K) @ W (N, K).T for M <= 16 tokens, W in FP8 e4m3, stored tile-major
// (backends/stream.pack_weight): each (128-row tile, 256-wide K step) is 32 KB contiguous, so
// a stage is one TMA box. Row-major W (128 pieces of 256 bytes, K bytes apart, per stage) ran
// 2.7% slower at 34816x5120 M=1 (49.30 against 47.97 us, H200 2026-12-01,
// results/tile_major_H200_2026-12-01/README.md, call 1); a plain read of such tiles reached
// 92.6% of the ceiling there tile-major, 76.3% row-major (bench_layout.py, call3/).
// Built by nvcc into a plain shared library with a C entry point (backends/stream.py), loaded
// with ctypes, launched on torch's current stream.
//
// Why (issue #12): every decode GEMM paid ~4.1-4.9 us beyond its bytes at the read ceiling,
// whatever its size: the kernel boundary (tail, launch, ramp). The weights never depend on
// the previous kernel, only x does. So this kernel
//   1. lets the next kernel launch at once (griddepcontrol.launch_dependents),
//   2. asks TMA for the weights of its first STAGES steps (every slot of its ring),
//   3. only then waits for the previous kernel (griddepcontrol.wait) and asks for x.
// Launched with programmatic dependent launch (PDL), its start overlaps the previous kernel.
//
// Roles (warp specialization): a producer warp issues every TMA (one lane) and refills a
// slot as soon as its "empty" barrier says both consumers are done with it; two consumer
// warpgroups each take 64 rows of a 128-row tile, wait on the slot's "full" barrier, run
// their own wgmma chains and release the slot, with no CTA-wide barrier in the loop. (One
// warpgroup doing all of it, refilling after a __syncthreads, ran 16384x5120 M=1 in 25.3 us;
// this, 22.8: H200 2026-12-01.) One CTA per SM (the ring takes the shared memory).
//
// Work: the (128-row tile, 256-wide K step) iterations, flattened tile-major, split over the
// grid: stream-K (CTA c owns [c*I/G, (c+1)*I/G), even) or whole tiles (CTA c owns tiles
// [c*T/G, (c+1)*T/G)). A tile split between CTAs is summed by the last one to arrive (fp32
// partials in a workspace, a per-tile counter it resets to 0): deterministic, in CTA order.
// Each CTA runs its split tiles first and its whole tiles after.
// Cluster split (``cluster`` = S >= 2): a thread block cluster of S CTAs per tile, rank r
// taking K steps [r kb / S, (r + 1) kb / S); ranks 1..S-1 store their fp32 partials into
// rank 0's shared memory (distributed shared memory, st.shared::cluster) and arrive on the
// cluster barrier; rank 0 waits, sums them in rank order and stores y. No L2 round trip,
// no counter: the global-memory reduction cost 1.6-2.4 us a GEMM (Triton's split-K, H200
// 2026-12-01, results/split_k_H200_2026-12-01/call1/split.json).
//
// MMA: wgmma m64nNk32 e4m3 (fp32 accumulate), swap-AB: a warpgroup's 64 weight rows are the
// MMA's M, the tokens its N (8 for M <= 8, 16 for M <= 16), both operands K-major in shared
// memory exactly as TMA writes them (128-byte rows, 128B swizzle). mma.sync has no FP8 path
// on sm_90 (ptxas emulates it with fp16 HMMAs and a conversion per element; H200,
// 2026-12-01: 40 us at 16384x5120 against 22.5 for the Triton wgmma kernel).
//
// x is FP8 from the one-launch activation pre-pass (kernels/act_quant.py, launched with PDL so
// that this kernel streams its weights while it runs), with its scales (XK template):
//   1  one scale (per_tensor)
//   2  per-token scales (channel_token)
//   3  per 1x128 group scales and per 128x128 weight-block scales (block128)
// XK 1-2 take an (N,) weight-scale vector (a per-tensor scale expanded at prepare).
// Or (``xq``, cluster split, XK 1-2) bfloat16 x, quantized by the consumers into shared memory
// after the wait, in the layout TMA would write: no pre-pass launch. After a kernel launched
// without PDL (a norm, an activation: most of a model's GEMMs) the pre-pass cannot overlap
// anything and the GEMM starts only after it ends (H200 2026-12-01, torch.profiler timeline,
// results/cluster_split_H200_2026-12-01/call5/stream.json: pre-pass 1.04-1.26 us, the GEMM
// 0.11-0.30 us after its end). Same bits as the pre-pass: div_rn by the scale, a saturating
// round-to-nearest FP8 conversion; channel_token's per-token scale from the row's amax, which
// every CTA computes (it reads the whole row: M x K bf16 from L2).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <cstdio>

namespace fp8t_stream {

// Warp specialization: two consumer warpgroups (64 weight rows each) and one producer warp.
constexpr int kWarps = 8;                // consumer warps
constexpr int kConsumers = kWarps * 32;
constexpr int kThreads = kConsumers + 32;
constexpr int kBN = kWarps * 16;         // weight rows per tile: 128
constexpr int kBK = 256;                 // K per stage (bytes of W per row)
constexpr int kBox = kBN * 128;          // one TMA box: 128 rows x 128 bytes, 128B-swizzled
constexpr int kWStage = 2 * kBox;        // 32768 B (two boxes: k 0-127, 128-255)
constexpr int kScBytes = 144;            // block128: 2 weight-block scales + 2 per token (16 B aligned)

struct Params {
  CUtensorMap tmap_w;  // W (N, K) bytes, box 128 x 128 rows, 128B swizzle (64-byte aligned)
  CUtensorMap tmap_x;  // x (M, K) bytes, box 128 x (8 NT) rows, zeros past M
  const void* x;
  __nv_bfloat16* y;
  const float* ws;    // (N,) weight scales, or (ceil(N/128), ws_ld) block scales
  const float* xs;    // scalar, (M,) with stride xs_ld, or (M, xs_ld) group scales
  const __nv_bfloat16* bias;  // (N,) or null
  float* part;        // split-tile partials: grid * 2 slots * kWarps * NT * 32 float4
  int* cnt;           // per-tile arrival counters, zero between launches
  int m, n, k, ldx, ldy, ws_ld, xs_ld;
  int tiles, kb;      // 128-row tiles, 256-wide K steps per tile
  unsigned iters;     // tiles * kb (iters * grid < 2^32: the host checks)
  int whole_tiles;    // 1: CTAs own whole tiles (no split tile, uneven counts); 0: stream-K
  int cluster;        // >= 2: S CTAs (one cluster) per tile, reduced through rank 0's smem
  int xq;             // 1: x is bfloat16 (ldx elements a row), quantized in the kernel
  int xq_steps;       // K steps of x the quantized area holds (a cluster rank's range)
  int x_box, stage;   // smem bytes: one x box (8 NT rows x 128), one stage (1024-aligned)
};

// W and x come by TMA: one thread issues a stage's boxes and arms the stage's mbarrier with
// the bytes to expect; every thread waits on the barrier's phase.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// The barrier counts this thread's earlier cp.asyncs' completion as one arrival.
__device__ __forceinline__ void mbar_arrive_cp_async(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// The consumer warpgroups only (the producer warp is not in it).
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void tma_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar) : "memory");
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp4(uint32_t dst, const void* src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
               "r"(ok ? 4 : 0) : "memory");
}
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// First iteration of CTA c: floor(c * I / G), in 32 bits (the host keeps I * G < 2^32; a
// 64-bit division is a long software routine, and the split reductions run several).
__device__ __forceinline__ unsigned range_start(unsigned c, unsigned iters, unsigned grid) {
  return c * iters / grid;
}
// The CTA whose range holds iteration it.
__device__ __forceinline__ int owner(unsigned it, unsigned iters, unsigned grid) {
  unsigned c = static_cast<unsigned>(static_cast<unsigned long long>(it) * grid / iters);
  while (c + 1 < grid && range_start(c + 1, iters, grid) <= it) ++c;
  while (c > 0 && range_start(c, iters, grid) > it) --c;
  return static_cast<int>(c);
}

constexpr int kClusterSlot = 2;  // a segment's slot: summed through the cluster (finish_cluster)

// A CTA's work in processing order: up to two split segments (its range's last tile, then its
// first), then its whole tiles [full_lo, full_hi]. Segment = (tile, k steps [lo, hi), slot).
struct Work {
  int count;                    // steps (iterations) of this CTA
  int np;                       // split segments (0..2)
  int seg_tile[2], seg_lo[2], seg_hi[2], seg_slot[2];
  int full_lo, full_hi;         // whole tiles (full_hi < full_lo: none)
  __device__ int nseg() const { return np + (full_hi >= full_lo ? full_hi - full_lo + 1 : 0); }
  __device__ void segment(int s, int kb, int& tile, int& lo, int& hi, int& slot) const {
    if (s < np) {
      tile = seg_tile[s]; lo = seg_lo[s]; hi = seg_hi[s]; slot = seg_slot[s];
    } else {
      tile = full_lo + (s - np); lo = 0; hi = kb; slot = -1;
    }
  }
};

__device__ Work make_work(const Params& p, int c) {
  Work w;
  if (p.cluster > 1) {  // one tile per cluster; rank = c % S (a 1-D grid of (S, 1, 1) clusters)
    const int s = p.cluster, r = c % s;
    w.np = 1;
    w.seg_tile[0] = c / s;
    w.seg_lo[0] = r * p.kb / s;
    w.seg_hi[0] = (r + 1) * p.kb / s;  // the host keeps S <= kb: every rank has a step
    w.seg_slot[0] = kClusterSlot;
    w.count = w.seg_hi[0] - w.seg_lo[0];
    w.full_lo = 1; w.full_hi = 0;
    return w;
  }
  // whole tiles: CTA c owns tiles [c T / G, (c + 1) T / G), every range starts and ends on a
  // tile, so no tile is split (H200 2026-12-01, 64-row tiles then, 16384x5120 M=1: 28.6 -> 25.3 us; a split
  // tile's reduction stalls both CTAs' weight streams early in the grid)
  const unsigned b = p.whole_tiles ? range_start(c, p.tiles, gridDim.x) * p.kb : range_start(c, p.iters, gridDim.x);
  const unsigned e = p.whole_tiles ? range_start(c + 1, p.tiles, gridDim.x) * p.kb
                                   : range_start(c + 1, p.iters, gridDim.x);
  const int kb = p.kb;
  w.count = static_cast<int>(e - b);
  const int tb = static_cast<int>(b / kb), tl = static_cast<int>((e - 1) / kb);
  const int blo = static_cast<int>(b - static_cast<unsigned>(tb) * kb);
  const int ehi = static_cast<int>(e - static_cast<unsigned>(tl) * kb);
  w.np = 0;
  w.full_lo = tb + 1;
  w.full_hi = tl - 1;
  if (tb == tl) {
    if (blo == 0 && ehi == kb) {
      w.full_lo = w.full_hi = tb;
    } else {
      w.seg_tile[0] = tb; w.seg_lo[0] = blo; w.seg_hi[0] = ehi; w.seg_slot[0] = 0; w.np = 1;
      w.full_lo = 1; w.full_hi = 0;
    }
    return w;
  }
  if (ehi != kb) {  // the range's last tile, split: first
    w.seg_tile[w.np] = tl; w.seg_lo[w.np] = 0; w.seg_hi[w.np] = ehi; w.seg_slot[w.np] = 1; ++w.np;
  } else {
    w.full_hi = tl;
  }
  if (blo != 0) {  // the range's first tile, split: second
    w.seg_tile[w.np] = tb; w.seg_lo[w.np] = blo; w.seg_hi[w.np] = kb; w.seg_slot[w.np] = 0; ++w.np;
  } else {
    w.full_lo = tb;
  }
  return w;
}

// Walks a CTA's iterations in processing order.
struct Cursor {
  int s, kstep, tile, lo, hi, slot, nseg;
  __device__ void init(const Work& w, int kb) {
    s = 0; nseg = w.nseg();
    if (nseg > 0) w.segment(0, kb, tile, lo, hi, slot);
    kstep = lo;
  }
  __device__ bool valid() const { return s < nseg; }
  __device__ bool last_step() const { return kstep + 1 == hi; }
  __device__ void next(const Work& w, int kb) {
    if (++kstep == hi && ++s < nseg) {
      w.segment(s, kb, tile, lo, hi, slot);
      kstep = lo;
    }
  }
};

// One thread: the stage's W box (256 rows of 128 bytes of the tile-major weights: 32 KB
// contiguous), the barrier armed with its bytes and x's.
__device__ __forceinline__ void issue_w(const Params& p, uint8_t* st, uint32_t bar, int tile, int kstep,
                                        int x_bytes) {
  mbar_expect(bar, kWStage + x_bytes);
  tma_2d(smem_addr(st), &p.tmap_w, 0, (tile * p.kb + kstep) * 2 * kBN, bar);
}

// The same thread, after the wait for the previous kernel: the stage's two x boxes (their
// bytes were in the barrier's count already), zeros past M and K.
__device__ __forceinline__ void issue_x_boxes(const Params& p, uint8_t* st, uint32_t bar, int kstep) {
  tma_2d(smem_addr(st + kWStage), &p.tmap_x, kstep * kBK, 0, bar);
  tma_2d(smem_addr(st + kWStage + p.x_box), &p.tmap_x, kstep * kBK + 128, 0, bar);
}

// block128: the step's two weight-block scales and each token's two group scales, by the
// producer warp's lanes (cp.async, after the wait for the previous kernel).
__device__ __forceinline__ void issue_scales(const Params& p, uint8_t* st, int tile, int kstep, int lane) {
  float* sc = reinterpret_cast<float*>(st + kWStage + 2 * p.x_box);
  const int k0 = kstep * kBK, kg = k0 / 128;
  for (int q = lane; q < 2 + 2 * p.m; q += 32) {
    if (q < 2) {
      const bool ok = k0 + q * 128 < p.k;
      cp4(smem_addr(sc + q), p.ws + (ok ? static_cast<size_t>(tile * kBN / 128) * p.ws_ld + kg + q : 0), ok);
    } else {
      const int tok = (q - 2) >> 1, h = (q - 2) & 1;
      const bool ok = k0 + h * 128 < p.k;
      cp4(smem_addr(sc + q), p.xs + (ok ? static_cast<size_t>(tok) * p.xs_ld + kg + h : 0), ok);
    }
  }
}

// wgmma operand descriptor: K-major, 128B swizzle, 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

template <int NT>
__device__ __forceinline__ void wgmma(float (&d)[NT][4], uint64_t a, uint64_t b, int accumulate);
template <>
__device__ __forceinline__ void wgmma<1>(float (&d)[1][4], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3])
      : "l"(a), "l"(b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma<2>(float (&d)[2][4], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
      : "l"(a), "l"(b), "r"(accumulate));
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit_wait() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

// One stage: 64 rows x 256 k x (8 NT) tokens: eight k32 wgmmas into eight separate
// accumulators (no wgmma waits for another), then folded into acc in registers. Against one
// chain of eight on acc this measured the same (H200 2026-12-01, 16384x5120 M=1: the loop is
// not bound by the MMAs); block128 needs the per-group sums anyway.
// The accumulator fragment of thread (warp w, lane 4g + t): d[j][0..1] at row 16w + g,
// tokens 8j + 2t, 8j + 2t + 1; d[j][2..3] at row 16w + g + 8 (mma.sync's C layout).
template <int NT, int XK>
__device__ __forceinline__ void compute(const Params& p, const uint8_t* st, uint32_t x_addr, float (&acc)[NT][4],
                                        int t, int wg) {
  const uint32_t w_addr = smem_addr(st) + wg * 64 * 128;  // its 64 rows
  float part[8][NT][4];
#pragma unroll
  for (int q = 0; q < 8; ++q)
#pragma unroll
    for (int j = 0; j < NT; ++j) part[q][j][0] = part[q][j][1] = part[q][j][2] = part[q][j][3] = 0.f;
  wgmma_fence();
#pragma unroll
  for (int sp = 0; sp < 2; ++sp)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)  // accumulate = 0: part = W x (no dependence on part)
      wgmma<NT>(part[4 * sp + kk], desc(w_addr + sp * kBox + 32 * kk), desc(x_addr + sp * p.x_box + 32 * kk), 0);
  wgmma_commit_wait();
  if (XK != 3) {
#pragma unroll
    for (int q = 0; q < 8; ++q)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] += part[q][j][e];
    return;
  }
  // block128: each 128-wide group times its weight block's scale and each token's group scale
  const float* sc = reinterpret_cast<const float*>(st + kWStage + 2 * p.x_box);
#pragma unroll
  for (int sp = 0; sp < 2; ++sp) {
    const float wsc = sc[sp];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int n0 = 8 * j + 2 * t;
      const float s0 = n0 < p.m ? wsc * sc[2 + 2 * n0 + sp] : 0.f;
      const float s1 = n0 + 1 < p.m ? wsc * sc[2 + 2 * (n0 + 1) + sp] : 0.f;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float v = (part[4 * sp][j][e] + part[4 * sp + 1][j][e]) + (part[4 * sp + 2][j][e] + part[4 * sp + 3][j][e]);
        acc[j][e] += v * (e & 1 ? s1 : s0);
      }
    }
  }
}

// This lane's epilogue factors, loaded when a segment starts so that their latency hides
// behind the segment's weight stream (a load at the tile's end stalled the loop, its ring
// full): the weight scale and bias of its two rows, the x scale of its tokens.
template <int NT>
struct Epilogue {
  float wsc[2], bias[2], xsc[NT][2];
};

template <int NT, int XK>
__device__ __forceinline__ void load_token_scales(const Params& p, Epilogue<NT>& ep, int t, const float* s_xs) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int tok = 8 * j + 2 * t + e;
      float v = 1.f;
      if (XK == 1) v = p.xs[0];
      else if (XK == 2 && tok < p.m) v = p.xq ? s_xs[tok] : p.xs[static_cast<size_t>(tok) * p.xs_ld];
      ep.xsc[j][e] = v;
    }
}

// xq: the consumers quantize x's K steps [lo, hi) into `area` (step j - lo at 2 x_box (j - lo),
// one 128B-swizzled box per 128 K: row r's 16-byte chunk c at (r / 8) 1024 + (r % 8) 128 +
// 16 (c ^ r % 8), as TMA writes a box). Rows past M stay unwritten: they only feed the MMA's
// columns of absent tokens, never stored. channel_token first takes each token's scale from
// its row's amax over all of K into s_xs. Ends with the writes visible to wgmma (async proxy).
template <int NT, int XK>
__device__ void quantize_x(const Params& p, uint8_t* area, int lo, int hi, int tid, float* s_xs) {
  const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(p.x);
  const int warp = tid >> 5, lane = tid & 31;
  if (XK == 2) {
    for (int r = warp; r < p.m; r += kWarps) {
      float mx = 0.f;
      for (int c = lane * 8; c < p.k; c += 256) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(x + static_cast<size_t>(r) * p.ldx + c));
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float2 f = __bfloat1622float2(h[q]);
          mx = fmaxf(mx, fmaxf(fabsf(f.x), fabsf(f.y)));
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      if (lane == 0) s_xs[r] = fmaxf(__fdiv_rn(mx, 448.f), 1e-12f);  // formats.FP8_MAX, MIN_SCALE
    }
    consumer_sync();
  }
  const int chunks = (hi - lo) * 16 * p.m;  // 16-byte chunks of FP8 x: c fastest, then row, step
  for (int i = tid; i < chunks; i += kConsumers) {
    const int c = i & 15, r = (i >> 4) % p.m, j = i / (16 * p.m);
    const int k0 = (lo + j) * kBK + c * 16;
    uint4 out = make_uint4(0, 0, 0, 0);
    if (k0 < p.k) {  // K is a multiple of 16: a chunk is all in or all out
      const float sc = XK == 1 ? p.xs[0] : s_xs[r];
      const uint4* src = reinterpret_cast<const uint4*>(x + static_cast<size_t>(r) * p.ldx + k0);
      uint4 v[2] = {__ldg(src), __ldg(src + 1)};
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(v);
      uint16_t* o = reinterpret_cast<uint16_t*>(&out);
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const float2 f = __bfloat1622float2(h[q]);
        o[q] = __nv_cvt_float2_to_fp8x2(make_float2(__fdiv_rn(f.x, sc), __fdiv_rn(f.y, sc)), __NV_SATFINITE, __NV_E4M3);
      }
    }
    const int half = c >> 3, c8 = c & 7;
    *reinterpret_cast<uint4*>(area + (j * 2 + half) * p.x_box + (r >> 3) * 1024 + (r & 7) * 128 +
                              ((c8 ^ (r & 7)) << 4)) = out;
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes -> wgmma's reads
  consumer_sync();
}

template <int NT, int XK>
__device__ __forceinline__ void load_row_factors(const Params& p, Epilogue<NT>& ep, int tile, int warp, int g) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = tile * kBN + warp * 16 + g + 8 * half;
    ep.wsc[half] = XK != 3 && row < p.n ? p.ws[row] : 1.f;
    ep.bias[half] = p.bias && row < p.n ? __bfloat162float(p.bias[row]) : 0.f;
  }
}

// y for this lane's fragment of a finished tile: acc * weight scale * x scale (+ bias).
template <int NT, int XK>
__device__ __forceinline__ void store_tile(const Params& p, const float (&acc)[NT][4], const Epilogue<NT>& ep,
                                           int tile, int warp, int g, int t) {
  const int r0 = tile * kBN + warp * 16 + g;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = r0 + 8 * half;
    if (row >= p.n) continue;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int tok = 8 * j + 2 * t + e;
        if (tok >= p.m) continue;
        const float v = acc[j][2 * half + e] * ep.wsc[half] * ep.xsc[j][e];
        p.y[static_cast<size_t>(tok) * p.ldy + row] = __float2bfloat16_rn(v + ep.bias[half]);
      }
    }
  }
}

__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }

template <int NT>
__device__ __forceinline__ float4* part_slot(const Params& p, int cta, int slot, int warp, int j, int lane) {
  const size_t i = ((static_cast<size_t>(cta) * 2 + slot) * kWarps * NT + warp * NT + j) * 32 + lane;
  return reinterpret_cast<float4*>(p.part) + i;
}

// A split tile's segment is done: store its partial; the last of the tile's CTAs to arrive
// sums every partial in CTA order and stores y. One thread fences and counts (the consumer
// barrier before it orders the other consumers' stores).
template <int NT, int XK>
__device__ void finish_split(const Params& p, float (&acc)[NT][4], const Epilogue<NT>& ep, int tile, int slot,
                             int warp, int g, int t, int lane, int tid, int* s_flag) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
    *part_slot<NT>(p, blockIdx.x, slot, warp, j, lane) = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
  consumer_sync();
  const unsigned first = static_cast<unsigned>(tile) * p.kb;
  const int cf = owner(first, p.iters, gridDim.x);
  const int cl = owner(first + p.kb - 1, p.iters, gridDim.x);
  if (tid == 0) {
    fence_acq_rel_gpu();  // release this CTA's partial
    const bool last = atomicAdd(p.cnt + tile, 1) == cl - cf;
    if (last) fence_acq_rel_gpu();  // acquire every other CTA's
    *s_flag = last;
  }
  consumer_sync();
  if (*s_flag) {
    float sum[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) sum[j][0] = sum[j][1] = sum[j][2] = sum[j][3] = 0.f;
    for (int c = cf; c <= cl; ++c) {
      const int first_tile = static_cast<int>(range_start(c, p.iters, gridDim.x) / p.kb);
      const int sl = first_tile == tile ? 0 : 1;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const float4 v = __ldcg(part_slot<NT>(p, c, sl, warp, j, lane));
        sum[j][0] += v.x; sum[j][1] += v.y; sum[j][2] += v.z; sum[j][3] += v.w;
      }
    }
    store_tile<NT, XK>(p, sum, ep, tile, warp, g, t);
    if (tid == 0) p.cnt[tile] = 0;
  }
  consumer_sync();  // s_flag is reused by the next split segment
}

// Thread block clusters (sm_90): the barrier counts every non-exited thread of the cluster;
// .aligned: all threads of a warp execute it together.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// The address of this CTA's shared-memory address `addr` in the cluster's CTA `rank`.
__device__ __forceinline__ uint32_t map_shared(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ void st_cluster_v4(uint32_t addr, float a, float b, float c, float d) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(a), "f"(b), "f"(c),
               "f"(d) : "memory");
}

// Bytes of the cluster split's reduction area (rank 0's: one partial per other rank).
__host__ __device__ constexpr int red_bytes(int nt, int cluster) {
  return cluster > 1 ? (cluster - 1) * kWarps * nt * 32 * 16 : 0;
}
// Bytes of xq's quantized x: two boxes a K step.
constexpr int xq_bytes(int x_box, int steps) { return 2 * x_box * steps; }

// A cluster-split tile's segment is done (consumer threads only). Every CTA arrived on the
// cluster barrier at its start, so rank 0 is running: the first wait makes its shared memory
// safe to write. Ranks >= 1 store their partial into rank 0's reduction area (slot rank - 1,
// laid out as part_slot's [warp][j][lane] float4) and arrive with release; rank 0 arrives,
// waits (acquire), sums its own partial and the others in rank order, stores y.
template <int NT, int XK>
__device__ void finish_cluster(const Params& p, float (&acc)[NT][4], const Epilogue<NT>& ep, int tile,
                               uint8_t* red, int warp, int g, int t, int lane) {
  const uint32_t rank = cluster_rank();
  cluster_wait();  // phase 0 (arrived at the kernel's start): every CTA of the cluster runs
  const int per_rank = kWarps * NT * 32;  // float4s
  if (rank != 0) {
    const uint32_t base = map_shared(smem_addr(red), 0) + (rank - 1) * per_rank * 16;
#pragma unroll
    for (int j = 0; j < NT; ++j)
      st_cluster_v4(base + ((warp * NT + j) * 32 + lane) * 16, acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
    cluster_arrive_release();  // phase 1; this CTA then exits
    return;
  }
  cluster_arrive_release();
  cluster_wait();  // phase 1: every rank's partial is in `red`
  const float4* part = reinterpret_cast<const float4*>(red);
  for (int r = 1; r < p.cluster; ++r) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const float4 v = part[(r - 1) * per_rank + (warp * NT + j) * 32 + lane];
      acc[j][0] += v.x; acc[j][1] += v.y; acc[j][2] += v.z; acc[j][3] += v.w;
    }
  }
  store_tile<NT, XK>(p, acc, ep, tile, warp, g, t);
}

template <int NT, int STAGES, int XK>
__global__ void __launch_bounds__(kThreads, 1) fp8t_stream_gemm(const __grid_constant__ Params p) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full_bars[STAGES], empty_bars[STAGES];
  __shared__ int s_flag;
  __shared__ float s_xs[16];  // xq, channel_token: the per-token scales
  // 128B-swizzled TMA boxes need 1024-byte aligned destinations (the host adds the slack)
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const uint32_t full0 = smem_addr(&full_bars[0]), empty0 = smem_addr(&empty_bars[0]);

  pdl_launch_dependents();  // the next kernel may start streaming its weights now
  if (tid == 0) {  // the descriptors' first fetch off the critical path
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&p.tmap_w)) : "memory");
    if (!p.xq) asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&p.tmap_x)) : "memory");
    for (int s = 0; s < STAGES; ++s) {
      // full: the producer's expect-tx arrival (+ block128: one cp.async arrival per lane)
      mbar_init(full0 + 8 * s, XK == 3 ? 33 : 1);
      mbar_init(empty0 + 8 * s, kWarps);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();  // the last CTA-wide barrier: the roles split below
  if (p.cluster > 1) cluster_arrive_relaxed();  // phase 0: this CTA runs (finish_cluster waits on it)
  const Work work = make_work(p, blockIdx.x);
  const int x_bytes = p.xq ? 0 : 2 * p.x_box;  // x's TMA bytes a stage

  if (warp == kWarps) {
    // Producer warp: step j goes to slot j % S once the consumers released step j - S.
    // Weights of the first S steps before the wait: they do not depend on the previous kernel.
    Cursor pr, px;
    pr.init(work, p.kb);
    px.init(work, p.kb);
    const int pre = work.count < STAGES ? work.count : STAGES;
    for (int j = 0; j < pre; ++j, pr.next(work, p.kb))
      if (lane == 0) issue_w(p, smem + j * p.stage, full0 + 8 * j, pr.tile, pr.kstep, x_bytes);
    if (!p.xq) pdl_wait();  // the previous kernel has finished and its writes (x, scales) are visible
    for (int j = 0; j < pre && !p.xq; ++j, px.next(work, p.kb)) {
      if (lane == 0) issue_x_boxes(p, smem + j * p.stage, full0 + 8 * j, px.kstep);
      if (XK == 3) {
        issue_scales(p, smem + j * p.stage, px.tile, px.kstep, lane);
        mbar_arrive_cp_async(full0 + 8 * j);
      }
    }
    for (int j = pre; j < work.count; ++j, pr.next(work, p.kb)) {
      const int slot = j % STAGES;
      uint8_t* st = smem + slot * p.stage;
      mbar_wait(empty0 + 8 * slot, ((j / STAGES) - 1) & 1);
      if (lane == 0) {
        issue_w(p, st, full0 + 8 * slot, pr.tile, pr.kstep, x_bytes);
        if (!p.xq) issue_x_boxes(p, st, full0 + 8 * slot, pr.kstep);
      }
      if (XK == 3) {
        issue_scales(p, st, pr.tile, pr.kstep, lane);
        mbar_arrive_cp_async(full0 + 8 * slot);
      }
    }
    if (p.cluster > 1) cluster_wait();  // phase 0's wait (a thread waits before it leaves)
    return;
  }

  // Consumers: warpgroup wg (= warp / 4) computes rows 64 wg .. 64 wg + 63 of each tile; the
  // two run their wgmma chains independently, each warp releases a slot when done with it.
  pdl_wait();  // before any read of x or write (y, partials, counters)
  const int wg = warp >> 2;
  Cursor cons;
  cons.init(work, p.kb);
  // xq: the quantized x follows the ring and the cluster reduction area (one segment: [lo, hi))
  uint8_t* xq_area = smem + STAGES * p.stage + red_bytes(NT, p.cluster);
  if (XK != 3 && p.xq && cons.valid()) quantize_x<NT, XK>(p, xq_area, cons.lo, cons.hi, tid, s_xs);
  Epilogue<NT> ep;
  load_token_scales<NT, XK>(p, ep, t, s_xs);
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  for (int it = 0; cons.valid(); ++it) {
    const int slot = it % STAGES;
    if (cons.kstep == cons.lo) load_row_factors<NT, XK>(p, ep, cons.tile, warp, g);
    mbar_wait(full0 + 8 * slot, (it / STAGES) & 1);
    const uint32_t x_addr = p.xq ? smem_addr(xq_area + (cons.kstep - cons.lo) * 2 * p.x_box)
                                 : smem_addr(smem + slot * p.stage + kWStage);
    compute<NT, XK>(p, smem + slot * p.stage, x_addr, acc, t, wg);
    __syncwarp();
    if (lane == 0) mbar_arrive(empty0 + 8 * slot);
    if (cons.last_step()) {
      if (cons.slot < 0) {
        store_tile<NT, XK>(p, acc, ep, cons.tile, warp, g, t);
      } else if (cons.slot == kClusterSlot) {
        finish_cluster<NT, XK>(p, acc, ep, cons.tile, smem + STAGES * p.stage, warp, g, t, lane);
      } else {
        finish_split<NT, XK>(p, acc, ep, cons.tile, cons.slot, warp, g, t, lane, tid, &s_flag);
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    }
    cons.next(work, p.kb);
  }
}

thread_local char g_error[256] = "";

// Function attributes are per device: a kernel configured on GPU 0 is not on GPU 1.
constexpr int kMaxDevices = 64;

// The dynamic shared memory limit of this instantiation on the current device raised to
// `smem`, once per device (and again only for a larger size). A CTA's dynamic + static
// shared memory must fit the device's per-block opt-in limit (232448 B on the H200; the
// static part is 80-176 B, ptxas -v: stream.STATIC_SMEM): checked here first, so that the
// error names the sizes instead of cudaFuncSetAttribute's "invalid argument".
template <int NT, int STAGES, int XK>
int configure(int smem) {
  auto kernel = fp8t_stream_gemm<NT, STAGES, XK>;
  static int configured[kMaxDevices] = {};  // bytes set per device (0: not yet)
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) {
    snprintf(g_error, sizeof g_error, "cudaGetDevice: %s", cudaGetErrorString(e));
    return 2;
  }
  const bool cached = dev >= 0 && dev < kMaxDevices;
  if (cached && configured[dev] >= smem) return 0;
  cudaFuncAttributes fa;
  int optin = 0;
  e = cudaFuncGetAttributes(&fa, kernel);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e == cudaSuccess && smem + static_cast<long long>(fa.sharedSizeBytes) > optin) {
    snprintf(g_error, sizeof g_error, "shared memory: %d dynamic + %zu static bytes > the %d-byte "
             "per-block limit of device %d (fewer stages, a smaller cluster or no xq)", smem,
             fa.sharedSizeBytes, optin, dev);
    return 2;
  }
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e == cudaSuccess)  // clusters of 9-16 CTAs are "non-portable": allowed per kernel
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (e != cudaSuccess) {
    snprintf(g_error, sizeof g_error, "cudaFuncSetAttribute(%d bytes) on device %d: %s", smem, dev,
             cudaGetErrorString(e));
    return 2;
  }
  if (cached) configured[dev] = smem;
  return 0;
}

// Launches the kernel, or with `clusters` set only asks how many clusters of the launch fit
// on the GPU at once (cudaOccupancyMaxActiveClusters: whether the grid is one wave).
template <int NT, int STAGES, int XK>
int launch(const Params& p, int grid, int pdl, cudaStream_t stream, int* clusters = nullptr) {
  auto kernel = fp8t_stream_gemm<NT, STAGES, XK>;
  // + alignment slack (1024-byte TMA boxes); the reduction area follows the ring
  const int smem = STAGES * p.stage + red_bytes(NT, p.cluster) + xq_bytes(p.x_box, p.xq_steps) + 1024;
  if (const int rc = configure<NT, STAGES, XK>(smem)) return rc;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = p.cluster > 1 ? p.cluster : 1;
  attr[1].val.clusterDim.y = attr[1].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = p.cluster > 1 ? 2 : 1;
  cudaError_t e = clusters ? cudaOccupancyMaxActiveClusters(clusters, kernel, &cfg) : cudaLaunchKernelEx(&cfg, kernel, p);
  if (e != cudaSuccess) {
    snprintf(g_error, sizeof g_error, "%s (grid %d, cluster %d): %s",
             clusters ? "cudaOccupancyMaxActiveClusters" : "cudaLaunchKernelEx", grid, p.cluster,
             cudaGetErrorString(e));
    return 3;
  }
  return 0;
}

template <int NT, int STAGES>
int launch_xk(const Params& p, int xk, int grid, int pdl, cudaStream_t stream, int* clusters) {
  switch (xk) {
    case 1: return launch<NT, STAGES, 1>(p, grid, pdl, stream, clusters);
    case 2: return launch<NT, STAGES, 2>(p, grid, pdl, stream, clusters);
    case 3: return launch<NT, STAGES, 3>(p, grid, pdl, stream, clusters);
  }
  snprintf(g_error, sizeof g_error, "unknown x kind %d (expected 1-3)", xk);
  return 1;
}

// Static shared memory of a variant as the loaded module says (cudaFuncGetAttributes; needs
// a GPU), or -1 (fp8t_stream_last_error says why).
template <int NT, int STAGES, int XK>
int static_smem() {
  cudaFuncAttributes fa;
  const cudaError_t e = cudaFuncGetAttributes(&fa, fp8t_stream_gemm<NT, STAGES, XK>);
  if (e != cudaSuccess) {
    snprintf(g_error, sizeof g_error, "cudaFuncGetAttributes: %s", cudaGetErrorString(e));
    return -1;
  }
  return static_cast<int>(fa.sharedSizeBytes);
}

template <int NT, int STAGES>
int static_smem_xk(int xk) {
  switch (xk) {
    case 1: return static_smem<NT, STAGES, 1>();
    case 2: return static_smem<NT, STAGES, 2>();
    case 3: return static_smem<NT, STAGES, 3>();
  }
  snprintf(g_error, sizeof g_error, "unknown x kind %d (expected 1-3)", xk);
  return -1;
}

int launch_variant(const Params& p, int xk, int stages, int grid, int pdl, cudaStream_t s, int* clusters) {
  const bool nt1 = p.m <= 8;
  switch (stages) {
    case 4: return nt1 ? launch_xk<1, 4>(p, xk, grid, pdl, s, clusters) : launch_xk<2, 4>(p, xk, grid, pdl, s, clusters);
    case 6: return nt1 ? launch_xk<1, 6>(p, xk, grid, pdl, s, clusters) : launch_xk<2, 6>(p, xk, grid, pdl, s, clusters);
  }
  snprintf(g_error, sizeof g_error, "stages=%d: built for 4 or 6", stages);
  return 1;
}

}  // namespace fp8t_stream

using namespace fp8t_stream;

extern "C" {

const char* fp8t_stream_last_error() { return g_error; }

// (128-row tiles) x (256-wide K steps): the iterations a grid splits.
long long fp8t_stream_iters(int n, int k) {
  return static_cast<long long>((n + kBN - 1) / kBN) * ((k + kBK - 1) / kBK);
}

// Bytes of the split-tile partials for a grid of `grid` CTAs and M tokens.
size_t fp8t_stream_workspace(int m, int grid) {
  const int nt = m <= 8 ? 1 : 2;
  return static_cast<size_t>(grid) * 2 * kWarps * nt * 32 * sizeof(float4);
}

// Shared memory bytes of one stage (rounded up to 1024: every stage's TMA boxes stay
// aligned), or of a CTA with `stages` stages (+ the cluster split's reduction area, + 1024
// alignment slack) when stages > 1.
int fp8t_stream_smem(int m, int xk, int stages, int cluster, int xq_steps) {
  const int x_box = (m <= 8 ? 8 : 16) * 128;
  const int stage = (kWStage + 2 * x_box + (xk == 3 ? kScBytes : 0) + 1023) / 1024 * 1024;
  return stages == 1 ? stage
                     : stages * stage + red_bytes(m <= 8 ? 1 : 2, cluster) + xq_bytes(x_box, xq_steps) + 1024;
}

// Static shared memory bytes of the variant (M tokens, x kind, stages) on the current GPU;
// -1: no such variant or no GPU (fp8t_stream_last_error says why).
int fp8t_stream_static_smem(int m, int xk, int stages) {
  const bool nt1 = m <= 8;
  switch (stages) {
    case 4: return nt1 ? static_smem_xk<1, 4>(xk) : static_smem_xk<2, 4>(xk);
    case 6: return nt1 ? static_smem_xk<1, 6>(xk) : static_smem_xk<2, 6>(xk);
  }
  snprintf(g_error, sizeof g_error, "stages=%d: built for 4 or 6", stages);
  return -1;
}

// Clusters of `cluster` CTAs (M tokens, x kind, stages) that fit on this GPU at once; < 0:
// the query failed (fp8t_stream_last_error says why).
int fp8t_stream_max_clusters(int m, int xk, int stages, int cluster) {
  Params p = {};
  p.m = m;
  p.cluster = cluster;
  p.x_box = (m <= 8 ? 8 : 16) * 128;
  p.stage = fp8t_stream_smem(m, xk, 1, 1, 0);
  int n = 0;
  const int rc = launch_variant(p, xk, stages, cluster, 0, nullptr, &n);
  return rc ? -rc : n;
}

int fp8t_stream_gemm(const void* w, const void* x, void* y, const float* ws, const float* xs,
                     const void* bias, float* part, int* cnt, int m, int n, int k,
                     int ldx, int ldy, int ws_ld, int xs_ld, int xk, int stages, int grid,
                     int pdl, int whole_tiles, int cluster, int xq, void* stream) {
  if (m < 1 || m > 16) {
    snprintf(g_error, sizeof g_error, "M=%d: this kernel serves 1..16 tokens", m);
    return 1;
  }
  if (xk < 1 || xk > 3) {
    snprintf(g_error, sizeof g_error, "unknown x kind %d (expected 1-3)", xk);
    return 1;
  }
  if (k % 16 || ldx % (xq ? 8 : 16)) {
    snprintf(g_error, sizeof g_error, "K=%d, ldx=%d: K a multiple of 16 and x rows 16-byte aligned", k, ldx);
    return 1;
  }
  if (xq && (cluster < 2 || xk == 3 || reinterpret_cast<uintptr_t>(x) % 16)) {
    snprintf(g_error, sizeof g_error, "xq (x quantized in the kernel) takes a cluster split, per_tensor or "
             "channel_token, 16-byte aligned bfloat16 x (cluster=%d, x kind %d)", cluster, xk);
    return 1;
  }
  if (reinterpret_cast<uintptr_t>(w) % 16 || reinterpret_cast<uintptr_t>(x) % 16) {
    snprintf(g_error, sizeof g_error, "w=%p, x=%p: TMA (and xq's 16-byte loads) need 16-byte "
             "aligned addresses", w, x);
    return 1;
  }
  Params p;
  p.x = x;
  p.y = static_cast<__nv_bfloat16*>(y);
  p.ws = ws;
  p.xs = xs;
  p.bias = static_cast<const __nv_bfloat16*>(bias);
  p.part = part;
  p.cnt = cnt;
  p.m = m; p.n = n; p.k = k; p.ldx = ldx; p.ldy = ldy; p.ws_ld = ws_ld; p.xs_ld = xs_ld;
  p.tiles = (n + kBN - 1) / kBN;
  p.kb = (k + kBK - 1) / kBK;
  p.x_box = (m <= 8 ? 8 : 16) * 128;
  p.stage = fp8t_stream_smem(m, xk, 1, 1, 0);
  const long long iters = fp8t_stream_iters(n, k);
  if (cluster > 1 && (cluster > 16 || cluster > p.kb || grid != p.tiles * cluster || whole_tiles)) {
    snprintf(g_error, sizeof g_error, "cluster=%d, grid=%d: a cluster split takes 2..16 CTAs, at most "
             "the %d K steps, a grid of %d tiles x the cluster, no whole_tiles", cluster, grid, p.kb, p.tiles);
    return 1;
  }
  if (grid < 1 || grid > (whole_tiles ? p.tiles : iters) || iters * grid >= (1LL << 32)) {
    snprintf(g_error, sizeof g_error, "grid=%d: expected 1..%lld (the problem's iterations), "
             "iterations x grid < 2^32", grid, iters);
    return 1;
  }
  p.iters = static_cast<unsigned>(iters);
  p.whole_tiles = whole_tiles;
  p.cluster = cluster > 1 ? cluster : 1;
  p.xq = xq ? 1 : 0;
  p.xq_steps = xq ? (p.kb + p.cluster - 1) / p.cluster : 0;  // the longest rank's range
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  if (encode == nullptr) {
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode), 12000,
                                         cudaEnableDefault, &q) != cudaSuccess || encode == nullptr) {
      encode = nullptr;
      snprintf(g_error, sizeof g_error, "cuTensorMapEncodeTiled is not available from the driver");
      return 4;
    }
  }
  // W: tile-major (tiles * kb * 256, 128) bytes (stream.pack_weight), boxes of 128 x 256 rows
  // (one stage); x: (M, K) bytes, boxes of 128 x (8 or 16) rows. Both 128B-swizzled (the
  // wgmma operand layout; the swizzle repeats every 8 rows, so a 256-row box is two 128-row
  // operands), x zeros past M and K.
  const int x_rows = m <= 8 ? 8 : 16;
  const long long w_rows = static_cast<long long>(p.tiles) * p.kb * 2 * kBN;
  const struct { CUtensorMap* map; const void* ptr; long long rows; int cols, ld, box_rows; } maps[2] = {
      {&p.tmap_w, w, w_rows, 128, 128, 2 * kBN}, {&p.tmap_x, x, m, k, ldx, x_rows}};
  for (const auto& d : maps) {
    if (xq && d.map == &p.tmap_x) continue;  // x comes as bfloat16, by plain loads
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(d.cols), static_cast<cuuint64_t>(d.rows)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(d.ld)};
    const cuuint32_t box[2] = {128, static_cast<cuuint32_t>(d.box_rows)}, elem[2] = {1, 1};
    CUresult r = encode(d.map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(d.ptr), dims, strides, box,
                        elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
      snprintf(g_error, sizeof g_error, "cuTensorMapEncodeTiled failed (%d): %lld rows, %d columns, stride %d",
               int(r), d.rows, d.cols, d.ld);
      return 4;
    }
  }
  return launch_variant(p, xk, stages, grid, pdl, static_cast<cudaStream_t>(stream), nullptr);
}

}  // extern "C"
