"""`fp8tower convert PATH`: what a checkpoint holds, and optionally fp8tower's merged copy of it
(fp8tower.hf.describe / write_merged).

Exit codes: 0 ok; 2 bad input (not a checkpoint directory, a malformed checkpoint, a bad
option value, an output directory that is not empty).
"""

from __future__ import annotations

import collections
import re
from pathlib import Path
from typing import Annotated

import typer

from ._common import check_json_path, warn, write_json
from ._common import console as _console
from ._common import fail as _fail

HELP = """Report what a local checkpoint holds, as fp8tower reads it: its format (modelopt,
compressed_tensors, block_fp8, fp8_per_tensor (AutoFP8), fp8tower, or unquantized bf16 with
--scheme), the scheme of each quantized linear (layers collapsed to *), the modules kept in
high precision (ignore lists, lm_head, embeddings, vision towers), the sibling groups fp8tower
merges into one GEMM (and why a group cannot merge), and the bytes per dtype. --write-merged
OUT_DIR writes fp8tower's own checkpoint with those groups stored merged (per-member scales;
fp8tower.from_pretrained reads it back, transformers' own loader does not). Nothing is loaded
into a model; only headers and the merge groups' scales are read unless --write-merged is
given."""


def _pattern(name: str) -> str:
    """model.layers.12.mlp.up_proj -> model.layers.*.mlp.up_proj (layers, experts)."""
    return re.sub(r"(?<=\.)\d+(?=\.|$)", "*", name)


def _gb(n: int) -> str:
    return f"{n / 1e9:.3f} GB" if n >= 1e7 else f"{n / 1e6:.3f} MB"


def _collapse(names) -> list[tuple[str, int]]:
    return sorted(collections.Counter(_pattern(n) for n in names).items())


def _print(info: dict, written: dict | None) -> None:
    from rich.markup import escape
    from rich.table import Table

    con = _console()
    head = Table(title=f"checkpoint {info['path']}", show_header=False)
    head.add_row("format", f"{info['format']}  ({Path(info['quant_config_file']).name})")
    head.add_row("model_type", str(info["model_type"]))
    head.add_row("tensors", str(info["n_tensors"]))
    head.add_row("bytes", f"{info['bytes']:,} ({_gb(info['bytes'])}, decimal)")
    for dtype, n in info.get("bytes_by_dtype", {}).items():
        head.add_row(f"  {dtype}", f"{n:,} ({_gb(n)})")
    con.print(head)

    static = set(info["static_act_scale"])
    rows = collections.Counter((_pattern(f), s, f in static) for f, s in info["schemes"].items())
    st = Table(title=f"quantized linears: {len(info['schemes'])}")
    for col in ("module", "scheme", "activation scale", "count"):
        st.add_column(col)
    for (pat, scheme, is_static), n in sorted(rows.items()):
        act = "static" if is_static else ("none" if scheme == "weight_only" else "dynamic")
        st.add_row(pat, scheme, act, str(n))
    con.print(st)
    if info["format"] == "unquantized" and not info["schemes"]:
        # opened without a scheme: nothing would be quantized (2026-12-05 audit: no hint)
        con.print("an unquantized (bf16 / fp16 / fp32) checkpoint: nothing is quantized "
                  "without --scheme (per_tensor, channel_token, block128 or weight_only), "
                  "which quantizes its linears at load")
    experts = info.get("moe_experts_not_converted") or {}
    if experts:  # checkpoint/base.py describe(): fp8tower does not convert MoE experts
        con.print(f"MoE expert linears: {len(experts)} in FP8, not converted by fp8tower: "
                  f"from_pretrained loads them dequantized into transformers' fused expert "
                  f"parameters (e.g. {escape(min(experts))}; docs/models.md, Known limits)")
    if info.get("linears_by_name") is False:
        con.print(f"model_type {info['model_type']!r}: which 2-D weights are linears is a "
                  "guess from their names (embeddings excluded); write_merged refuses it")

    by_filter = set(info.get("kept_high_precision") or ())  # hf.describe, bf16 checkpoints
    kept = info["not_quantized"] + sorted(by_filter)
    if kept:
        # every 2-D *.weight not in FP8: linears and embeddings alike (the files do not say)
        kt = Table(title=f"kept in high precision: {len(kept)} 2-D weight(s) (linears, "
                         "embeddings)")
        kt.add_column("module")
        kt.add_column("why")
        kt.add_column("count")
        ignored = set(info["ignored"])
        # a bf16 checkpoint has no ignore list: what it "ignores" is lm_head and the embeddings
        never = ("lm_head / embedding (never quantized)" if info["format"] == "unquantized"
                 else "in the ignore list")
        for pat, n in _collapse(kept):
            if any(_pattern(f) == pat and f in by_filter for f in kept):
                why = ("convert's default_filter (vision, mtp, small GDN projections, "
                       "routers)")
            elif any(_pattern(f) == pat and f in ignored for f in kept):
                why = never
            else:
                why = "not quantized in the checkpoint"
            kt.add_row(pat, why, str(n))
        con.print(kt)

    groups = info["merge_groups"]
    mt = Table(title=f"merge groups: {len(groups)}")
    for col in ("merged", "members", "action", "scheme", "count", "reason"):
        mt.add_column(col, overflow="fold")
    by = collections.defaultdict(list)
    for g in groups:
        members = "+".join(m.rpartition(".")[2] for m in g["members"])
        by[(_pattern(g["parent"]) + "." + g["merged"], members, g["action"], g["scheme"])].append(g)
    # a kept group has no scheme (None) beside merged ones that have one: sort it as a string
    for (merged, members, action, scheme), gs in sorted(
            by.items(), key=lambda kv: (*kv[0][:3], str(kv[0][3]))):
        reasons = {g["reason"] for g in gs if g["reason"]}
        reason = next(iter(reasons), "") if len(reasons) <= 1 else (
            f"e.g. {min(reasons)} ({len(reasons)} different)")
        mt.add_row(merged, members, action, "-" if scheme is None else str(scheme), str(len(gs)),
                   reason)
    if groups:
        con.print(mt)
    else:
        from ..hf.families import GROUPS

        con.print(f"no merge groups (model_type {info['model_type']!r}: fp8tower merges "
                  f"{', '.join(sorted(GROUPS))})")

    if written is not None:
        done = collections.Counter(g["written"] for g in written["groups"])
        con.print(f"wrote {written['path']}: {len(written['files'])} file(s), "
                  f"{written['bytes']:,} bytes ({_gb(written['bytes'])}); groups stored merged: "
                  f"{done.get('merged', 0)}, kept separate: {done.get('separate', 0)}")
        for g in written["groups"]:
            if g["written"] == "separate":
                con.print(f"  kept separate: {escape(g['merged'])}: {escape(str(g['reason']))}")
        if written.get("not_copied"):
            con.print("not copied (subdirectories, weights in other formats): "
                      + escape(", ".join(written["not_copied"])))


def convert(
    path: Annotated[Path, typer.Argument(metavar="PATH", help="Checkpoint directory (config.json + "
                                         "*.safetensors).", show_default=False)],
    json_out: Annotated[Path | None, typer.Option(
        "--json", help="Also write the report as JSON to this file.")] = None,
    write_merged: Annotated[Path | None, typer.Option(
        "--write-merged", help="Write fp8tower's merged checkpoint to this (new or empty) "
        "directory.")] = None,
    scheme: Annotated[str | None, typer.Option(
        help="For an unquantized (bf16/fp16) checkpoint: the scheme to quantize to "
        "(per_tensor, channel_token, block128, weight_only).")] = None,
    requant_max: Annotated[bool, typer.Option(
        "--requant-max", help="With --write-merged: merge per_tensor groups with one rescaled "
        "scale (the largest) instead of keeping one scale per member.")] = False,
) -> None:
    """What a checkpoint holds (format, schemes, ignored modules, merge groups, bytes)."""

    from ..checkpoint import CheckpointError
    from ..hf.conversion import ConvertError
    from ..hf.pretrained import describe

    if requant_max and write_merged is None:  # it was silently ignored
        raise _fail("--requant-max applies to --write-merged's copy; give --write-merged too, "
                    "or drop --requant-max")
    if json_out is not None:  # before writing a copy of many GB
        check_json_path(json_out)
        if write_merged is not None and (
                json_out.resolve() == write_merged.resolve()
                or write_merged.resolve() in json_out.resolve().parents):
            raise _fail(f"--json {json_out} is (inside) --write-merged {write_merged}: give "
                        "the report a path outside the copy")
    try:
        info = describe(path, scheme=scheme)
        written = None
        if requant_max and not any(g.get("scheme") == "per_tensor"
                                   for g in info["merge_groups"]):  # it changed nothing, unsaid
            schemes = sorted({str(g.get("scheme")) for g in info["merge_groups"]}) or ["none"]
            warn(f"--requant-max rescales per_tensor groups, and {path} has none (its sibling "
                 f"groups: {', '.join(schemes)}): every group is merged exactly")
        if write_merged is not None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            from ..hf.write import write_merged as _write

            columns = (TextColumn("writing {task.description}"), BarColumn(),
                       MofNCompleteColumn())  # a 27B copy takes minutes: say how far
            err = Console(stderr=True)  # a bar on a terminal only: piped, it left a blank line
            with Progress(*columns, console=err, transient=True,
                          disable=not err.is_terminal) as bar:
                task = bar.add_task(str(write_merged), total=None)
                written = _write(path, write_merged, scheme=scheme, requant_max=requant_max,
                                 progress=lambda done, total: bar.update(task, completed=done,
                                                                         total=total))
    except (CheckpointError, ConvertError, OSError) as e:
        raise _fail(str(e)) from None
    _print(info, written)
    if json_out is not None:
        write_json(json_out, {"checkpoint": info, "written": written}, indent=2)


convert.__doc__ = HELP
