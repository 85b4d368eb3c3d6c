"""Helpers shared by the command modules: rich is imported when a command prints, not at
startup."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import typer


def shipped_models() -> str:
    """The shipped config names, comma-separated, for --model's help (models/ is torch-free:
    a directory listing)."""
    from ..models import list_models

    return ", ".join(list_models())


def console():
    """A console for tables: wide enough when stdout is not a terminal (cells are not cut)."""
    from rich.console import Console

    return Console(width=max(Console().width, 160) if not sys.stdout.isatty() else None)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print one ``error:`` line on stderr; the Exit to raise (code 2: bad input)."""
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {escape(message)}",
                                               highlight=False)
    return typer.Exit(code)


def warn(message: str) -> None:
    """Print one ``warning:`` line on stderr."""
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True, soft_wrap=True).print(f"[bold yellow]warning:[/] {escape(message)}",
                                               highlight=False)


def at_least(lo: int):
    """An option callback refusing an integer below ``lo`` with the value named, in one
    ``error:`` line (typer's ``min=`` says only "Input should be greater than or equal to 1";
    its BadParameter printed a four-line usage block)."""

    def check(param: typer.CallbackParam, value: int | None) -> int | None:
        if value is not None and value < lo:
            name = param.opts[0] if param.opts else param.name
            raise fail(f"{name}: {value}: expected an integer >= {lo}")
        return value

    return check


def tp_size(text: str | int) -> int:
    """``--tp``: an integer >= 1 in plain decimal digits, refused with the value named ('1.5',
    '0', 'x', '1_0': int() reads that as 10); typer's own int parsing said only "Input should
    be a valid integer". (typer passes the default, an int, through the parser too.)"""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    elif re.fullmatch(r"-?[0-9]+", str(text).strip()):
        value = int(str(text).strip())
    else:
        raise fail(f"--tp: {text!r}: expected an integer >= 1 (the tensor-parallel size)")
    if value < 1:
        raise fail(f"--tp: {value}: expected an integer >= 1 (the tensor-parallel size)")
    return value


# --standin of bench tower and tune --in-context; its kernels are tower.build.STANDIN_KERNELS
# (not imported here: it pulls in torch; a test keeps them equal).
STANDIN_HELP = (
    "The stand-ins' kernel (the a + b between some GEMMs): torch (torch.add on the GEMM "
    "outputs' column slices, the tower's definition: strided from M = 2, 2.6-2.8 us a call "
    "on an H200 against 1.2 at M = 1), rows (one Triton kernel that reads each row at its "
    "stride: the same bits, about the same cost at every M) or rows_fp8 (per_tensor only: "
    "that kernel also quantizes the sum with the next GEMM's static scale, so the GEMM reads "
    "FP8 x and runs no pre-pass, as an engine that fuses the quantization into the producer "
    "does).")


def check_standin(standin: str, kernels, schemes: list[str]) -> None:
    """``--standin`` of bench tower / trace capture: one of ``kernels``; rows_fp8 quantizes
    with per_tensor's static scale, so it serves per_tensor alone."""
    if standin not in kernels:
        raise fail(f"--standin {standin!r}: expected one of {', '.join(kernels)}")
    if standin == "rows_fp8" and schemes != ["per_tensor"]:
        raise fail(f"--standin rows_fp8 quantizes with per_tensor's static activation scale; "
                   f"--scheme {','.join(schemes)}: pass --scheme per_tensor (rows serves every "
                   "scheme)")


def check_standin_device(standin: str, cuda: bool) -> None:
    """A Triton stand-in needs a CUDA GPU, or the interpreter on the CPU."""
    if standin != "torch" and not cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise fail(f"--standin {standin} runs a Triton kernel: it needs a CUDA GPU (on the "
                   "CPU, set TRITON_INTERPRET=1)")


def csv(text: str) -> list[str]:
    """'a, b,,c' -> ['a', 'b', 'c']."""
    return [t.strip() for t in text.split(",") if t.strip()]


def check_backend_here(name: str, option: str = "--backend") -> None:
    """A named backend must be registered and able to run on this machine, checked before
    any model is built (`bench generate`, `trace capture` refused it after the build)."""
    from .. import backends  # torch: imported where a backend is named only
    from ..backends import BackendError

    try:
        why = backends.get(name).unavailable_reason()
    except BackendError as e:
        raise fail(f"{option} {name}: {e}") from None
    if why is not None:
        raise fail(f"{option} {name}: cannot run on this machine: {why}")


def parse_ms(text: str, option: str = "--m") -> list[int]:
    """'1, 8,8,32' -> [1, 8, 32]: positive integers, each once, in the order given."""
    try:
        ms = [int(t) for t in csv(text)]
    except ValueError:
        raise fail(f"{option} {text!r}: expected positive integers, e.g. 1,8,32") from None
    if not ms or min(ms) < 1:
        raise fail(f"{option} {text!r}: expected positive integers, e.g. 1,8,32")
    return list(dict.fromkeys(ms))


def write_json(path: Path, record, indent: int | None = 1) -> None:
    """Write ``record`` as JSON (parent folders made); an OSError is one ``error:`` line.
    ``indent=None``: no whitespace, as benchmarks/compact_results.py stores results (a bench
    run from the repository root writes under benchmarks/results/, which CI checks)."""
    text = (json.dumps(record, indent=indent) if indent is not None
            else json.dumps(record, separators=(",", ":"), ensure_ascii=False))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
    except OSError as e:
        raise fail(f"cannot write {path}: {e.strerror or e}") from None


def check_json_path(path: Path, option: str = "--json") -> None:
    """Refuse, before any measuring, a JSON path that :func:`write_json` could not write: a
    directory, a parent that is a file, or a folder (the nearest existing one: write_json
    makes the rest) or file this user cannot write. One ``error:`` line naming the path."""
    if path.is_dir():
        raise fail(f"{option} {path}: is a directory, not a file path")
    if path.exists() and not os.access(path, os.W_OK):
        raise fail(f"{option} {path}: the file is not writable")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise fail(f"{option} {path}: {folder} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise fail(f"{option} {path}: the directory {folder} is not writable")
