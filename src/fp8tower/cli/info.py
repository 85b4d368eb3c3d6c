"""`fp8tower info`: versions, the GPU, and each backend (available or why not)."""

from __future__ import annotations


def untuned_default(gpu_name: str | None) -> str:
    """What ``auto`` serves a decode GEMM with no tuned choice on the GPU named ``gpu_name``."""
    from ..dispatch import UNTUNED_RULE_GPUS

    if gpu_name is None:  # what dispatch.resolve gives a CPU problem
        import os

        if os.environ.get("TRITON_INTERPRET") == "1":
            return ("no GPU: the Triton kernels, interpreted (TRITON_INTERPRET=1, for tests; "
                    "the interpreter's fp32 -> FP8 cast is wrong where rounding carries into "
                    "the exponent, so their numbers can differ from the reference backend's: "
                    "pass backend reference for those)")
        return "no GPU: the reference backend (the float oracle)"
    if gpu_name in UNTUNED_RULE_GPUS:
        return (f"the rule measured on this GPU ({gpu_name}): Triton's defaults (on the H100 "
                "its own at M <= 8), cuBLASLt where they lost to it; `fp8tower tune` measures "
                "each shape")
    return ("cuBLASLt (no untuned rule measured on this GPU; weight_only: Triton's default); "
            "`fp8tower tune` measures each shape")


def info() -> None:
    """Versions (torch, triton, CUDA), the GPU, and each backend: available or why not."""
    import platform

    import torch
    from rich.markup import escape
    from rich.table import Table

    from .. import backends, provenance

    gpu = provenance.current_gpu()
    v = provenance.versions(gpu)
    rows = {
        "fp8tower": v["fp8tower"],
        "python": platform.python_version(),
        "torch": v["torch"],
        "cuda (torch build)": torch.version.cuda or "none (CPU build)",
        "triton": provenance.package_version("triton", "not installed"),
        "driver": v["driver"],
        "cudnn / frontend": f"{v['cudnn']} / {v['cudnn_frontend']}",
        "cutlass (nvidia-cutlass)": provenance.package_version("nvidia-cutlass", "not installed"),
    }
    from ..backends import cutlass as cutlass_backend

    nvcc = cutlass_backend.nvcc_path()
    rows["nvcc"] = cutlass_backend.nvcc_version(nvcc) if nvcc else "not found"
    if gpu is not None:
        p = torch.cuda.get_device_properties(0)
        rows["gpu"] = (f"{p.name} (sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, "
                       f"{p.total_memory / 1e9:.0f} GB, "
                       f"L2 {getattr(p, 'L2_cache_size', 0) / 1e6:.0f} MB)")
    else:
        rows["gpu"] = "none (no CUDA device visible)"
    rows["untuned default"] = untuned_default(None if gpu is None else p.name)
    from ._common import console as _console

    console = _console()  # piped: wide enough that cells are not cut
    table = Table(title="fp8tower info", show_header=False)
    for k, val in rows.items():
        table.add_row(k, escape(str(val)))
    console.print(table)
    bt = Table(title="GEMM backends")
    bt.add_column("backend")
    bt.add_column("status")
    bt.add_column("kernels (regex)", overflow="fold")
    bt.add_column("what")
    for b in backends.all_backends():
        reason = b.unavailable_reason()
        # escaped: an install hint "fp8tower[cudnn]" read as markup lost its "[cudnn]"
        status = ("[green]available[/]" if reason is None
                  else f"[yellow]unavailable[/]: {escape(reason)}")
        bt.add_row(b.name, status, escape(b.kernel_family), escape(b.description))
    console.print(bt)
