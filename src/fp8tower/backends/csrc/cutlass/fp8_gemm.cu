// fp8tower CUTLASS backend: ONE sm90 FP8 GEMM config per shared library (fp8tower builds it
// just in time with nvcc; backends/cutlass.py passes the config as -D macros).
//
// Swap-AB: y (M, N) = x (M, K) @ W.T is computed as D (N, M) = W (N, K) @ x.T, so the weight's
// N fills the MMA's wide tile side (FP8T_TM) and the few tokens its narrow side (FP8T_TN).
// W row-major = CUTLASS A RowMajor (K-major); x row-major = B ColumnMajor (K-major); y
// row-major = D ColumnMajor. Epilogue: D = bf16(acc * w_scale[n] * x_scale[m]), each scale a
// scalar or a vector chosen at run time (dynamic broadcast strides): one build serves
// per_tensor and channel_token.
//
// FP8T_SCHED: 0 ws = warp-specialized, non-persistent
//             1 pp = warp-specialized ping-pong, persistent
//             2 sk = cooperative, persistent, stream-K scheduler (split-K / stream-K at run time)
//             3 pf = CUTLASS example 63: early launch_dependent_grids (overlap ratio at run
//                    time); its weight prefetch before griddepcontrol.wait runs only for a
//                    prefetch ratio > 0 (CUTLASS 4.2.0's kernel: should_prefetch)
//             4 bp = block128: ping-pong, persistent, blockwise-scaled mainloop (below)
//             5 bk = block128: cooperative, persistent, stream-K scheduler, blockwise-scaled
// Blockwise (4, 5): CUTLASS's sm90 FP8 mainloop with per-(row group, 128-wide K step) scales
// applied to each K step's partial accumulator in registers (as DeepSeek-V3's block FP8
// GEMMs do). Swap-AB again: SFA = the weight's scales at a granularity of 64 rows (block128's
// 128-row blocks, each scale repeated for both 64-row halves, so a 64-row tile holds one;
// backends/cutlass.py expands them once at load), SFB = the pre-pass's per-token scales of
// each 1x128 group of x; both row-major (K-major, ceil(K/128) a row). The epilogue only
// converts to bf16: the scales are all in the accumulator.
// CUTLASS_ENABLE_GDC_FOR_SM90 (set by the builder except for sk, bk) compiles griddepcontrol into
// the kernels; without it a PDL launch would race, so fp8t_gemm refuses pdl. sk, bk build without it:
// CUTLASS 4.2.0's stream-K is_last_tile (GDC-only code) fails under nvcc 13.0 ("qualifiers
// dropped in binding reference", sm90_tile_scheduler_stream_k.hpp:337, 2026-11-30).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/util/packed_stride.hpp"

#if FP8T_SCHED == 3
#include "collective/builder.hpp"
#include "collective/dispatch_policy_extra.hpp"
#include "kernel/sm90_gemm_tma_warpspecialized_with_prefetch.hpp"
#endif

#if !defined(FP8T_TM) || !defined(FP8T_TN) || !defined(FP8T_TK) || !defined(FP8T_SCHED) || \
    !defined(FP8T_KERNEL)
#error "define FP8T_TM, FP8T_TN, FP8T_TK, FP8T_SCHED and FP8T_KERNEL"
#endif

using namespace cute;

namespace fp8tower_cutlass {

using ElementA = cutlass::float_e4m3_t;  // W
using LayoutA = cutlass::layout::RowMajor;
using ElementB = cutlass::float_e4m3_t;  // x
using LayoutB = cutlass::layout::ColumnMajor;
using ElementD = cutlass::bfloat16_t;    // y
using LayoutD = cutlass::layout::ColumnMajor;
constexpr int kAlignAB = 16;
constexpr int kAlignD = 8;

using TileShape = Shape<Int<FP8T_TM>, Int<FP8T_TN>, Int<FP8T_TK>>;
// FP8T_CM CTAs a cluster along CUTLASS's M (the weight's rows): they share each x tile, which
// TMA multicasts to all of them, so x is read from L2 once a cluster (default 1: no cluster).
// ws, pp, pf, sk build with 2 and pf with 4 (2026-12-08, nvcc 13.0, CUTLASS 4.2.0); not yet
// run on a GPU, and no tuner config asks for it (benchmarks/results/session70_2026-12-08/).
#ifndef FP8T_CM
#define FP8T_CM 1
#endif
using ClusterShape = Shape<Int<FP8T_CM>, _1, _1>;

#if FP8T_SCHED == 0
using MainSchedule = cutlass::gemm::KernelTmaWarpSpecializedFP8FastAccum;
using EpiSchedule = cutlass::epilogue::TmaWarpSpecialized;
using Scheduler = void;
#elif FP8T_SCHED == 1
using MainSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum;
using EpiSchedule = cutlass::epilogue::TmaWarpSpecialized;
using Scheduler = void;
#elif FP8T_SCHED == 2
using MainSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum;
using EpiSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
using Scheduler = cutlass::gemm::StreamKScheduler;
#elif FP8T_SCHED == 3
using MainSchedule = cutlass::gemm::KernelTmaWarpSpecializedFP8FastAccumWithPrefetchAndSplitDMA;
using EpiSchedule = cutlass::epilogue::TmaWarpSpecialized;
using Scheduler = void;
#elif FP8T_SCHED == 4
using MainSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8BlockScaledAccum;
using EpiSchedule = cutlass::epilogue::TmaWarpSpecialized;
using Scheduler = void;
#elif FP8T_SCHED == 5
using MainSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum;
using EpiSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
using Scheduler = cutlass::gemm::StreamKScheduler;
#else
#error "FP8T_SCHED must be 0..5"
#endif
#define FP8T_BLOCKWISE (FP8T_SCHED >= 4)
#define FP8T_STREAMK (FP8T_SCHED == 2 || FP8T_SCHED == 5)

namespace fusion = cutlass::epilogue::fusion;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
// Dynamic broadcast: the bool stride says vector (true) or scalar (false) at run time.
using StrideCol = Stride<bool, _0, int64_t>;  // weight scale, along D's rows (weight N)
using StrideRow = Stride<_0, bool, int64_t>;  // activation scale, along D's columns (tokens)
using WScale = fusion::Sm90ColBroadcast<0, TileShape, float, float, StrideCol, 1>;
using XScale = fusion::Sm90RowBroadcast<0, TileShape, float, float, StrideRow, 1>;
using AccTimesW = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>,
                                  WScale, fusion::Sm90AccFetch>;
#if FP8T_BLOCKWISE
using Fusion = fusion::LinearCombination<ElementD, float, void, float, kRound>;  // D = bf16(acc)
// Scale granularity (swap-AB): A = W, 64 rows x 128 K; B = x, 1 token x 128 K.
constexpr int kScaleRowsW = 64;
static_assert(FP8T_TM % kScaleRowsW == 0, "blockwise tiles hold whole 64-row scale groups");
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<kScaleRowsW, 1, 128,
                                                              cute::GMMA::Major::K,
                                                              cute::GMMA::Major::K>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
using MainLayoutA = cute::tuple<LayoutA, LayoutSFA>;
using MainLayoutB = cute::tuple<LayoutB, LayoutSFB>;
#else
using Fusion = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, ElementD, float, kRound>,
                               XScale, AccTimesW>;
using MainLayoutA = LayoutA;
using MainLayoutB = LayoutB;
#endif

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignD,
    ElementD, LayoutD, kAlignD, EpiSchedule, Fusion>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, MainLayoutA, kAlignAB, ElementB,
    MainLayoutB, kAlignAB, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename CollectiveEpilogue::SharedStorage))>,
    MainSchedule>::CollectiveOp;

using GemmKernelBase = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>,
                                                            CollectiveMainloop, CollectiveEpilogue,
                                                            Scheduler>;
// A named kernel type (as cutlass_library's generated kernels do), so that traces show
// `cutlass::device_kernel<fp8tower_cutlass::sk_128x16x128>` and the backend's kernel_family
// can tell our launches from cuBLASLt's.
struct FP8T_KERNEL : GemmKernelBase {};
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<FP8T_KERNEL>;

thread_local char g_error[512] = "";

int fail(int code, char const* what, char const* detail) {
  std::snprintf(g_error, sizeof(g_error), "%s: %s", what, detail);
  return code;
}

// The current device's SM count, cached per device (a process may use several GPUs).
int sm_count() {
  constexpr int kMaxDevices = 64;
  static int count[kMaxDevices] = {};  // 0: not queried yet
  int dev = 0;
  cudaGetDevice(&dev);
  if (dev < 0 || dev >= kMaxDevices) {
    return cutlass::KernelHardwareInfo::query_device_multiprocessor_count(dev);
  }
  if (count[dev] <= 0) {
    count[dev] = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(dev);
  }
  return count[dev];
}

typename Gemm::Arguments make_args(void const* w, void const* x, void* y, float const* w_scale,
                                   int w_scale_vec, float const* x_scale, int x_scale_vec, int m,
                                   int n, int k, int splits, int mode, float overlap,
                                   float prefetch) {
  using StrideA = typename Gemm::GemmKernel::StrideA;
  using StrideB = typename Gemm::GemmKernel::StrideB;
  using StrideD = typename Gemm::GemmKernel::StrideD;
  // CUTLASS problem (M, N, K) = (weight N, tokens M, K).
  auto sA = cutlass::make_cute_packed_stride(StrideA{}, make_shape(n, k, 1));
  auto sB = cutlass::make_cute_packed_stride(StrideB{}, make_shape(m, k, 1));
  auto sD = cutlass::make_cute_packed_stride(StrideD{}, make_shape(n, m, 1));
  cutlass::KernelHardwareInfo hw;
  hw.sm_count = sm_count();
#if FP8T_BLOCKWISE
  // w_scale: (ceil(n / 64), ceil(k / 128)), x_scale: (m, ceil(k / 128)), both row-major.
  (void)w_scale_vec;
  (void)x_scale_vec;
  auto shape_mnkl = make_shape(n, m, k, 1);
  typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                {n, m, k, 1},
                                {static_cast<ElementA const*>(w), sA,
                                 static_cast<ElementB const*>(x), sB, w_scale,
                                 ScaleConfig::tile_atom_to_shape_SFA(shape_mnkl), x_scale,
                                 ScaleConfig::tile_atom_to_shape_SFB(shape_mnkl)},
                                {{}, nullptr, sD, static_cast<ElementD*>(y), sD},
                                hw};
  args.epilogue.thread.alpha = 1.f;
  args.epilogue.thread.beta = 0.f;
#else
  typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                {n, m, k, 1},
                                {static_cast<ElementA const*>(w), sA,
                                 static_cast<ElementB const*>(x), sB},
                                {{}, nullptr, sD, static_cast<ElementD*>(y), sD},
                                hw};
  auto& t = args.epilogue.thread;
  t.op_0.ptr_row = x_scale;
  t.op_0.dRow = StrideRow{_0{}, bool(x_scale_vec), int64_t(0)};
  t.op_1.op_0.ptr_col = w_scale;
  t.op_1.op_0.dCol = StrideCol{bool(w_scale_vec), _0{}, int64_t(0)};
#endif
#if FP8T_STREAMK
  using Decomp = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamKParams::DecompositionMode;
  args.scheduler.splits = splits;
  args.scheduler.decomposition_mode =
      mode == 1 ? Decomp::SplitK : (mode == 2 ? Decomp::StreamK : Decomp::Heuristic);
#else
  (void)splits;
  (void)mode;
#endif
#if FP8T_SCHED == 3
  args.mainloop.overlap_ratio = overlap;
  args.mainloop.prefetch_ratio = prefetch;
#else
  (void)overlap;
  (void)prefetch;
#endif
  return args;
}

}  // namespace fp8tower_cutlass

using namespace fp8tower_cutlass;

#define FP8T_STR2(x) #x
#define FP8T_STR(x) FP8T_STR2(x)

extern "C" {

char const* fp8t_last_error() { return g_error; }

char const* fp8t_config() {
  return FP8T_STR(FP8T_KERNEL);
}

// Bytes of device workspace fp8t_gemm needs for this problem (0 for most configs).
size_t fp8t_workspace_size(int m, int n, int k, int splits, int mode) {
  auto args = make_args(nullptr, nullptr, nullptr, nullptr, 0, nullptr, 0, m, n, k, splits, mode,
                        -1.f, -1.f);
  return Gemm::get_workspace_size(args);
}

// y (m, n) bf16 row-major = (x (m, k) fp8 @ w (n, k).T fp8) * w_scale * x_scale, on `stream`.
// Scales: float device pointers, vectors (w: n, x: m) when *_vec != 0, else one value;
// blockwise builds (bp, bk): the two block-scale matrices described at the top (*_vec unused).
// pdl != 0: launched with programmatic dependent launch (griddepcontrol in the kernel).
// Returns 0, or a nonzero code with fp8t_last_error() saying why.
int fp8t_gemm(void const* w, void const* x, void* y, float const* w_scale, int w_scale_vec,
              float const* x_scale, int x_scale_vec, int m, int n, int k, int splits, int mode,
              float overlap, float prefetch, int pdl, void* workspace, size_t workspace_bytes,
              void* stream) {
#ifndef CUTLASS_ENABLE_GDC_FOR_SM90
  if (pdl) {
    return fail(5, "pdl", "this build has no griddepcontrol (CUTLASS_ENABLE_GDC_FOR_SM90 unset)");
  }
#endif
  // TMA descriptors need 16-byte aligned bases; CUTLASS's own check is an assert (compiled
  // out by -DNDEBUG: the descriptor would be left zeroed).
  if (reinterpret_cast<uintptr_t>(w) % 16 || reinterpret_cast<uintptr_t>(x) % 16 ||
      reinterpret_cast<uintptr_t>(y) % 16) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "w=%p, x=%p, y=%p: TMA needs 16-byte aligned addresses", w, x,
                  y);
    return fail(6, "alignment", buf);
  }
  auto args = make_args(w, x, y, w_scale, w_scale_vec, x_scale, x_scale_vec, m, n, k, splits, mode,
                        overlap, prefetch);
  Gemm gemm;
  cutlass::Status st = gemm.can_implement(args);
  if (st != cutlass::Status::kSuccess) {
    return fail(1, "can_implement", cutlassGetStatusString(st));
  }
  size_t need = Gemm::get_workspace_size(args);
  if (need > workspace_bytes) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "needs %zu bytes, got %zu", need, workspace_bytes);
    return fail(2, "workspace", buf);
  }
  auto s = static_cast<cudaStream_t>(stream);
  st = gemm.initialize(args, workspace, s);
  if (st != cutlass::Status::kSuccess) {
    return fail(3, "initialize", cutlassGetStatusString(st));
  }
  st = gemm.run(s, nullptr, pdl != 0);
  if (st != cutlass::Status::kSuccess) {
    // CUTLASS's run has read (and so cleared) CUDA's error before it returns: say its status,
    // and the cluster, whose CTAs must fit on the GPU together
    cudaError_t e = cudaGetLastError();
    char buf[200];
    std::snprintf(buf, sizeof(buf), "%s (CUDA: %s; a cluster of %d CTAs)",
                  cutlassGetStatusString(st), e == cudaSuccess ? "cleared" : cudaGetErrorString(e),
                  FP8T_CM);
    return fail(4, "run", buf);
  }
  return 0;
}

}  // extern "C"
