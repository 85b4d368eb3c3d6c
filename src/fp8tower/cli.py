"""The `fp8tower` command. Thin: parses, calls the library, prints."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform

import typer
from rich.console import Console
from rich.table import Table

from . import __version__

app = typer.Typer(
    help="fp8tower: fast FP8 linear layers for LLM decode, and paired-trace attribution "
    "of where the time of a decode step went.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()


def _version(value: bool) -> None:
    if value:
        console.print(f"fp8tower {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    pass


def _versions() -> dict:
    import torch

    info = {
        "fp8tower": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda (torch build)": torch.version.cuda or "none (CPU build)",
        "triton": "not installed",
    }
    if importlib.util.find_spec("triton") is not None:
        # metadata, not `import triton`: importing it here breaks a later TRITON_INTERPRET=1
        info["triton"] = importlib.metadata.version("triton")
    from .backends import cutlass as cutlass_backend

    info["cutlass (nvidia-cutlass)"] = cutlass_backend.cutlass_version() or "not installed"
    nvcc = cutlass_backend.nvcc_path()
    info["nvcc"] = cutlass_backend.nvcc_version(nvcc) if nvcc else "not found"
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info["gpu"] = f"{p.name} (sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, "
        info["gpu"] += f"{p.total_memory / 1e9:.0f} GB, L2 {getattr(p, 'L2_cache_size', 0) / 1e6:.0f} MB)"
    else:
        info["gpu"] = "none (no CUDA device visible)"
    return info


@app.command()
def info() -> None:
    """Versions (torch, triton, CUDA), the GPU, and each backend: available or why not."""
    from . import backends

    table = Table(title="fp8tower info", show_header=False)
    for k, v in _versions().items():
        table.add_row(k, str(v))
    console.print(table)
    bt = Table(title="GEMM backends")
    bt.add_column("backend")
    bt.add_column("status")
    bt.add_column("kernels (regex)")
    bt.add_column("what")
    for b in backends.all_backends():
        reason = b.unavailable_reason()
        status = "[green]available[/]" if reason is None else f"[yellow]unavailable[/]: {reason}"
        bt.add_row(b.name, status, b.kernel_family, b.description)
    console.print(bt)


def _mount_subapps() -> None:
    from . import bench_cli, tune_cli
    from .trace import cli as trace_cli

    for cmd in tune_cli.app.registered_commands:  # `tune` and `dispatch` at the top level
        app.registered_commands.append(cmd)
    app.add_typer(trace_cli.app, name="trace")
    app.add_typer(bench_cli.app, name="bench")


_mount_subapps()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
