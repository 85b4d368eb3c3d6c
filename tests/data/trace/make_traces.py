"""Regenerate the small committed torch-profiler traces of tests/data/trace.

    python tests/data/trace/make_traces.py

Two capture directories of a 2-layer GDN-like tower at 2 and 6 decode steps (CUDA graph
replays, kernels sharing their cudaGraphLaunch correlation id):
- arm_unmerged: in_proj_qkv (nvjet split-K GEMM + cuBLASLt split-K reduce: 2 kernels),
  in_proj_z, out_proj per layer; torch >= 2.12 layout, host step ranges;
- arm_merged: in_proj_qkvz (one CUTLASS GEMM), out_proj per layer; "graph id"/"graph node
  id" kernel args (newer torch) and GPU step ranges;
plus a foreign trace pair (vllm_2/6: python-export compact layout, eager launches, step ranges
named "execute_model", non-GEMM kernels) with its map files, and an eager pair in the older
kineto C++ layout without step ranges (old_2/6).
"""

from __future__ import annotations

import json
from pathlib import Path

from fp8tower.trace.manifest import Manifest, OpRecord
from fp8tower.trace.synth import KernelSpec, write_torch_trace

HERE = Path(__file__).parent
STEPS = (2, 6)

NVJET_SPLITK = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT"
SPLITK_REDUCE = (
    "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, "
    "__nv_bfloat16, true, false, false>(cublasLt::cublasSplitKParams<float>, float const*, "
    "__nv_bfloat16 const*, __nv_bfloat16*, float const*, float const*, __nv_bfloat16 const*, "
    "float const*, __nv_bfloat16*, void*, long, float*, int*)"
)
NVJET = "nvjet_sm90_tst_128x16_64x8_2x1_h_bz_coopA_TNT"
CUTLASS = (
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, "
    "int, int>, cutlass::gemm::collective::CollectiveMma<cutlass::gemm::"
    "MainloopSm90TmaGmmaWarpSpecializedFP8<3>, cute::tuple<cute::C<64>, cute::C<128>, "
    "cute::C<128> >, cutlass::float_e4m3_t> > >(cutlass::gemm::kernel::GemmUniversal::Params)"
)
CUDNN = "cudnn_generated_fort_native_sm90_matMul_fp8_64x128x128_warpspec"
RMSNORM = "void (anonymous namespace)::rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, int)"
FILL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
)
COPY = "Memcpy HtoD (Pinned -> Device)"

PROLOGUE = [KernelSpec(FILL, 2.0, (64, 1, 1))]
LAYERS = 2
K_HID = 5120


def gemm_bytes(n: int, k: int, m: int = 1) -> int:
    """FP8 weights + fp32 per-channel scales + bf16 activations and output."""
    return n * k + 4 * n + 2 * m * k + 2 * m * n


def unmerged():
    ops, kernels = [], []
    for _ in range(LAYERS):
        ops += [
            OpRecord(
                "gdn.in_proj_qkv",
                10240,
                K_HID,
                gemm_bytes(10240, K_HID),
                "cublaslt",
                r"nvjet|splitKreduce",
                2,
                "gdn.in_proj",
            ),
            OpRecord(
                "gdn.in_proj_z",
                6144,
                K_HID,
                gemm_bytes(6144, K_HID),
                "cublaslt",
                r"nvjet",
                1,
                "gdn.in_proj",
            ),
            OpRecord(
                "gdn.out_proj",
                K_HID,
                6144,
                gemm_bytes(K_HID, 6144),
                "cublaslt",
                r"nvjet",
                1,
                "gdn.out_proj",
            ),
        ]
        kernels += [
            KernelSpec(NVJET_SPLITK, 120.0, (132, 1, 4)),
            KernelSpec(SPLITK_REDUCE, 5.0, (80, 1, 1)),
            KernelSpec(NVJET, 60.0, (48, 1, 1)),
            KernelSpec(NVJET, 40.0, (40, 1, 1)),
        ]
    return ops, kernels


def merged():
    ops, kernels = [], []
    for _ in range(LAYERS):
        ops += [
            OpRecord(
                "gdn.in_proj_qkvz",
                16384,
                K_HID,
                gemm_bytes(16384, K_HID),
                "cutlass",
                r"cutlass",
                1,
                "gdn.in_proj",
            ),
            OpRecord(
                "gdn.out_proj",
                K_HID,
                6144,
                gemm_bytes(K_HID, 6144),
                "cublaslt",
                r"nvjet",
                1,
                "gdn.out_proj",
            ),
        ]
        kernels += [KernelSpec(CUTLASS, 130.0, (128, 1, 1)), KernelSpec(NVJET, 40.0, (40, 1, 1))]
    return ops, kernels


def write_arm(name: str, ops, kernels, **kw) -> None:
    d = HERE / f"arm_{name}"
    d.mkdir(exist_ok=True)
    for n in STEPS:
        write_torch_trace(d / f"trace_{n}.json.gz", n, kernels, prologue=PROLOGUE, seed=n, **kw)
    Manifest(
        arm=name,
        steps=STEPS,
        device="cuda",
        ops=ops,
        traces=(f"trace_{STEPS[0]}.json.gz", f"trace_{STEPS[1]}.json.gz"),
        model="tiny-gdn-2l",
        m=1,
        event_ms=(0.9, 2.3) if name == "unmerged" else None,
        read_ceiling_gbps=4000.0,
        meta={"gpu": "synthetic", "torch": "2.11.0"},
        directory=d,
    ).write(d)


def vllm_kernels():
    out = []
    for _ in range(LAYERS):
        out += [
            KernelSpec(RMSNORM, 3.0, (1, 1, 1), (256, 1, 1)),
            KernelSpec(CUDNN, 128.0, (128, 1, 1), (384, 1, 1)),
            KernelSpec(NVJET, 41.0, (40, 1, 1)),
        ]
    return out


def write_maps() -> None:
    rules = [
        {
            "match": "^cudnn_generated_fort_native",
            "grid": [128, 1, "*"],
            "label": "gdn.in_proj_qkvz",
            "group": "gdn.in_proj",
            "n": 16384,
            "k": K_HID,
            "bytes": gemm_bytes(16384, K_HID),
        },
        {
            "match": "^nvjet_",
            "label": "gdn.out_proj",
            "n": K_HID,
            "k": 6144,
            "bytes": gemm_bytes(K_HID, 6144),
        },
    ]
    (HERE / "vllm_map.json").write_text(json.dumps({"rules": rules}, indent=1) + "\n")
    toml = []
    for r in rules:
        toml.append("[[rules]]")
        for key, value in r.items():
            toml.append(f"{key} = {json.dumps(value)}")
        toml.append("")
    (HERE / "vllm_map.toml").write_text("\n".join(toml))


def main() -> None:
    write_arm("unmerged", *unmerged())
    write_arm("merged", *merged(), graph_ids=True, gpu_step_ranges=True)
    for n in STEPS:
        write_torch_trace(
            HERE / f"vllm_{n}.json.gz",
            n,
            vllm_kernels(),
            graph=False,
            layout="compact",
            step_name="execute_model",
            seed=n,
        )
        write_torch_trace(
            HERE / f"old_{n}.json.gz",
            n,
            unmerged()[1],
            graph=False,
            layout="kineto_old",
            step_ranges=False,
            prologue=PROLOGUE,
            seed=n,
        )
    write_maps()


if __name__ == "__main__":
    main()
