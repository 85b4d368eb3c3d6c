"""`fp8tower bench ...`: benchmarks of the FP8 tower. Thin: parses, calls fp8tower.tower.bench,
prints a rich table and writes the JSON record (the method: docs/performance.md)."""

from __future__ import annotations

import datetime
import re
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from ._common import (
    STANDIN_HELP,
    at_least,
    check_backend_here,
    check_json_path,
    check_standin,
    check_standin_device,
    shipped_models,
    tp_size,
    write_json,
)
from ._common import console as _console
from ._common import csv as _csv
from ._common import fail as _fail
from ._common import parse_ms as _parse_ms

app = typer.Typer(help="Benchmarks: the FP8 tower's decode step, arm by arm, side by side.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  rich_markup_mode=None)


@app.callback()
def _group() -> None:
    """Benchmarks of the FP8 tower (a group even with one command: `bench tower`)."""


SCHEMA = "fp8tower.bench.tower/1"
GPU_MODEL, CPU_MODEL = "qwen3.5-27b", "tiny-hybrid"
GPU_BACKENDS, CPU_BACKENDS = "cublaslt,auto", "reference"
RESULTS = Path("benchmarks/results")  # the default --json folder, where it exists


def _results_dir() -> Path:
    """``benchmarks/results`` in a checkout of fp8tower (where it exists), else the current
    folder: not a new folder tree wherever a user runs a benchmark (2026-12-06 audit)."""
    return RESULTS if RESULTS.is_dir() else Path(".")


def _choices(text: str, valid: list[str], what: str, option: str) -> list[str]:
    values = _csv(text)
    if not values:
        raise _fail(f"{option} {text!r}: expected a comma list of {', '.join(valid)}")
    for v in values:
        if v not in valid:
            raise _fail(f"unknown {what} {v!r} in {option}: expected one of {', '.join(valid)}")
    return list(dict.fromkeys(values))


def _cpu_size_note(console, model: str) -> None:
    """Say up front when ``model`` is large for a run on the CPU (over 1 GB of bf16 weights:
    qwen3-8b's 16 GB took 170 s to build and 8 s a decode step on a 2-core machine)."""
    from ..hf import random_model as rm

    try:
        gb = rm.model_bytes(rm.text_config(model)) / 1e9
    except Exception:  # noqa: BLE001 - a bad config is reported where the run reads it
        return
    if gb > 1:
        console.print(f"no CUDA GPU: {model}'s {gb:.1f} GB of bf16 weights are built and run "
                      f"on the CPU for each arm: expect minutes (--model {CPU_MODEL} is sized "
                      "for a CPU)", highlight=False)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "unknown"


def _fmt(v: float | None, spec: str, none: str = "-") -> str:
    return none if v is None else format(v, spec)


def _table(rows, model: str, ceiling: float | None, cpu: bool):
    from rich.markup import escape
    from rich.table import Table

    where = "CPU wall clock, eager steps (not a GPU number)" if cpu else "CUDA graphs, median"
    table = Table(title=f"FP8 tower decode step: {model} ({where})")
    for col in ("scheme", "M", "arm", "backend", "GEMMs", "ms/step", "GB/s",
                "% ceiling", "speedup", "chosen / note"):
        table.add_column(col, justify="right" if col in ("M", "GEMMs", "ms/step", "GB/s",
                                                            "% ceiling", "speedup") else "left")
    ordered = sorted(rows, key=lambda r: (r.scheme, r.m))  # stable: arms, backends as run
    for r in ordered:
        if not r.ok:
            table.add_row(r.scheme, str(r.m), r.arm, r.backend, _fmt(r.gemms, "d"), "-", "-", "-",
                          "-", f"[yellow]skipped[/]: {escape(r.reason or '')}")
            continue
        pct = ("n/a (CPU)" if cpu else "-" if not ceiling
               else _fmt(r.ceiling_pct, ".1f", "n/a (in L2)"))  # tower/bench.py: _fits_in_l2
        chosen = escape(", ".join(f"{b} {n}" for b, n in r.chosen.items()))
        if cpu and r.min_ms and r.max_ms and r.max_ms > 2 * r.min_ms:  # a loaded host
            chosen += f" [yellow]noisy: its steps ran {r.min_ms:.3g}-{r.max_ms:.3g} ms[/]"
        table.add_row(r.scheme, str(r.m), r.arm, r.backend, str(r.gemms), f"{r.ms_per_step:.3f}",
                      f"{r.gbps:.1f}", pct, f"{r.speedup:.3f}x", chosen)
    bases: dict[str, list[str]] = {}
    for key in dict.fromkeys((r.scheme, r.m, r.baseline) for r in ordered if r.baseline):
        bases.setdefault(key[2], []).append(f"{key[0]} M={key[1]}")
    ceiling_text = "n/a (CPU)" if ceiling is None else f"{ceiling:.0f} GB/s (measured in this run)"
    table.caption = (
        "GB/s: decimal (1e9 B/s) of the GEMMs' bytes per step: FP8 weights + scales + "
        f"activations + outputs. Read ceiling: {ceiling_text}. Speedup: baseline ms / ms; "
        "baselines: " + "; ".join(f"{b} for {', '.join(keys)}" for b, keys in bases.items())
    )
    return table


def _not_empty(**options: str | None) -> None:
    """An option given as "" is refused by name (it silently meant the default)."""
    for name, value in options.items():
        if value is not None and not value.strip():
            raise _fail(f"--{name} is empty: give a value, or leave the option out for the "
                        "default")


def _command(model, ms, arms, backends, schemes, merge_mode, include_mlp, replays, steps, seed,
             standin="torch", rounds=1, tp=1):
    cmd = (f"fp8tower bench tower --model {model}{f' --tp {tp}' if tp > 1 else ''} "
           f"--m {','.join(map(str, ms))} "
           f"--arms {','.join(arms)} --backends {','.join(backends)} "
           f"--scheme {','.join(schemes)} --merge-mode {merge_mode} --replays {replays} "
           f"--steps {steps} --rounds {rounds} --seed {seed} --standin {standin}")
    return cmd + (" --include-mlp" if include_mlp else "")


@app.command()
def tower(
    model: Annotated[str | None, typer.Option(
        "--model", help=f"Model name or config.json path; default {GPU_MODEL} on a GPU, "
        f"{CPU_MODEL} on a CPU-only machine.")] = None,
    m: Annotated[str, typer.Option("--m", help="Tokens per decode step (GEMM M), comma list.")
                 ] = "1,8,32",
    arms: Annotated[str, typer.Option("--arms", help="Comma list of unmerged, merged.")
                    ] = "unmerged,merged",
    backend_list: Annotated[str | None, typer.Option(
        "--backends", help=f"Comma list of GEMM backends or auto; default {GPU_BACKENDS} on a "
        f"GPU, {CPU_BACKENDS} on the CPU.")] = None,
    scheme: Annotated[str, typer.Option(
        "--scheme", help="Comma list of per_tensor, channel_token, block128, weight_only.")
                      ] = "per_tensor",
    merge_mode: Annotated[str, typer.Option(
        "--merge-mode",
        help="Merged arm's scales: exact or requant_max (per_tensor only).")] = "exact",
    include_mlp: Annotated[bool, typer.Option(
        "--include-mlp", help="Add the MLP linears (default: GDN + attention).")] = False,
    tp: Annotated[int, typer.Option(
        "--tp", parser=tp_size, metavar="N",
        help="Tensor-parallel size: the tower of one GPU of a TP-N deployment (its linears "
        "split as vLLM splits them: column-parallel N / tp, row-parallel K / tp; the "
        "all-reduces are not run); a model that cannot be split so is refused.")] = 1,
    replays: Annotated[int, typer.Option(
        "--replays", callback=at_least(1), help="Timed replays (median).")] = 20,
    steps: Annotated[int, typer.Option(
        "--steps", callback=at_least(1), help="Decode steps per timed replay.")] = 8,
    rounds: Annotated[int, typer.Option(
        "--rounds", callback=at_least(1),
        help="Rounds: every (arm, backend, M) of a scheme timed once a round, the order "
        "reversed every other round, so speedups and M ratios compare times taken side by "
        "side; each row is the median of its rounds. Above 1, a scheme's arms are held in "
        "memory together; 1 holds one arm at a time (models too large for two).")] = 3,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random weights.")] = 0,
    standin: Annotated[str, typer.Option(
        "--standin", help=STANDIN_HELP)] = "torch",
    json_out: Annotated[Path | None, typer.Option(
        "--json", help="JSON path (overwritten if it exists); default "
        "tower_<model>[_tp<N>]_<gpu-or-cpu>_<date>.json in benchmarks/results/ where that "
        "exists, else in the current folder, with _<HHMMSS> (then -2, -3, ...) added when "
        "the file exists.")] = None,
) -> None:
    """Time the tower's decode step for every (scheme, arm, backend, M), side by side."""
    from dataclasses import asdict

    import torch
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from .. import backends, provenance
    from ..backends import BackendError
    from ..formats import Scheme
    from ..models import ALL_PARTS, DEFAULT_PARTS, TpError, get_spec
    from ..nn.merged import MergeMode
    from ..tower.bench import bench_tower
    from ..tower.build import ARMS, STANDIN_KERNELS, standin_kernel
    from ..tuning.timer import early_launch_state

    cuda = torch.cuda.is_available()
    console = _console()
    _not_empty(model=model, backends=backend_list)
    model = model if model is not None else (GPU_MODEL if cuda else CPU_MODEL)
    ms = _parse_ms(m)
    arm_list = _choices(arms, list(ARMS), "arm", "--arms")
    backend_names = _choices(backend_list or (GPU_BACKENDS if cuda else CPU_BACKENDS),
                             backends.names() + ["auto"], "backend", "--backends")
    scheme_list = _choices(scheme, [s.value for s in Scheme], "scheme", "--scheme")
    if backend_list is not None:  # named ones must run here (every row skipped said nothing)
        cannot = [f"{n} ({backends.get(n).unavailable_reason()})" for n in backend_names
                  if n != "auto" and backends.get(n).unavailable_reason() is not None]
        if cannot:
            raise _fail(f"--backends: cannot run on this machine: {'; '.join(cannot)}")
    try:
        mode = MergeMode.parse(merge_mode)
        spec = get_spec(model, tp=tp)
    except TpError as e:  # a model that cannot be split into tp shards
        raise _fail(f"--tp {tp}: {e}") from None
    except ValueError as e:
        raise _fail(str(e)) from None
    if "block128" in scheme_list:  # every rank's shard: whole 128x128 blocks
        from ..models.tp import block_split_error

        e = block_split_error(spec)
        if e is not None:
            raise _fail(f"--tp {tp} --scheme block128: {e}")
    if mode is not MergeMode.EXACT and "merged" not in arm_list:  # it changed nothing
        raise _fail(f"--merge-mode {mode.value} sets the merged arm's scales, but --arms "
                    f"{','.join(arm_list)} has no merged arm")
    if mode is MergeMode.REQUANT_MAX and any(s != "per_tensor" for s in scheme_list):
        # those schemes' merged rows were all skipped (merged.py refuses it), the run exit 0
        others = ",".join(s for s in scheme_list if s != "per_tensor")
        raise _fail(f"--merge-mode requant_max applies to per_tensor only (the other schemes "
                    f"have per-channel or per-block scales already), but --scheme has {others}: "
                    "give --scheme per_tensor, or drop --merge-mode")
    parts = ALL_PARTS if include_mlp else DEFAULT_PARTS
    if include_mlp and not spec.mlp_in_scope:
        raise _fail(f"--include-mlp: {spec.name} ({spec.model_type}) has only mixture-of-"
                    "experts MLPs without a shared expert, and towers do not model routed "
                    "experts; leave --include-mlp out")
    if not spec.linears(parts, fp8_only=True):
        raise _fail(f"{spec.name}: no FP8 linears to run (quantization_config method "
                    f"{spec.quant_method!r}); towers run FP8 checkpoints' linears")
    check_standin(standin, STANDIN_KERNELS, scheme_list)
    check_standin_device(standin, cuda)
    if not cuda and backend_list is None:
        console.print(f"no CUDA GPU: backend {CPU_BACKENDS} (the CPU oracle); pass --backends "
                      "to choose others")
    from ..hf.random_model import free_bytes

    free = None if cuda else free_bytes(torch.device("cpu"))
    fp8_gb = spec.fp8_bytes(parts) / 1e9
    if free is not None and fp8_gb * 1e9 > free:  # it was killed by the OOM killer
        raise _fail(f"{spec.name}'s tower holds {fp8_gb:.1f} GB of FP8 weights; this CPU "
                    f"machine has {free / 1e9:.1f} GB free: use a GPU or a smaller model "
                    f"(--model {CPU_MODEL})")
    if not cuda and fp8_gb > 1:  # the 27B's printed nothing for minutes
        console.print(f"no CUDA GPU: {spec.name}'s tower quantizes and runs {fp8_gb:.1f} GB of "
                      f"FP8 weights on the CPU: expect minutes (--model {CPU_MODEL} is sized "
                      "for a CPU)", highlight=False)
    # before timing
    check_json_path(json_out if json_out is not None else _results_dir() / "tower.json")

    ceiling = None
    if cuda:
        from ..tuning.ceiling import measure_read_ceiling

        with console.status("measuring the read ceiling"):
            ceiling = measure_read_ceiling()
    total = len(scheme_list) * len(arm_list) * len(backend_names) * len(ms) * rounds
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    err = Console(stderr=True)  # a bar on a terminal only: piped, it left a blank line
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("tower", total=total)

        def advance(desc: str) -> None:
            bar.update(task, description=desc)
            bar.advance(task)

        with standin_kernel(standin):
            try:
                rows = bench_tower(spec, schemes=scheme_list, arms=arm_list,
                                   backend_names=backend_names, ms=ms, parts=parts,
                                   merge_mode=mode, replays=replays, steps=steps, rounds=rounds,
                                   seed=seed, read_ceiling_gbps=ceiling, advance=advance)
            except BackendError as e:  # e.g. FP8TOWER_BACKENDS naming no backend that serves
                raise _fail(str(e)) from None
    title = spec.name + (f", one rank of tp {tp}" if tp > 1 else "")
    console.print(_table(rows, title, ceiling, not cuda))
    if rows and not any(r.ok for r in rows):  # exit 0 with a record of nothing measured
        first = rows[0]
        raise _fail(f"no cell ran (nothing written): e.g. {first.scheme} M={first.m} "
                    f"{first.arm} {first.backend}: {first.reason}", code=1)

    gpu = torch.cuda.get_device_name() if cuda else None
    now = datetime.datetime.now(datetime.timezone.utc)
    if json_out is None:
        json_out = provenance.result_path(
            _results_dir(), f"tower_{_slug(spec.name)}{f'_tp{tp}' if tp > 1 else ''}_"
            f"{_slug(gpu) if gpu else 'cpu'}", now)
    record = {
        "schema": SCHEMA,
        "model": spec.name,
        "tp": tp,  # > 1: one rank's shards of a tensor-parallel deployment
        "device": "cuda" if cuda else "cpu",
        "gpu": gpu,
        "versions": provenance.record(),
        "date": now.isoformat(timespec="seconds"),
        # the model as given (a path stays a path: the command must run again as written)
        "command": _command(shlex.quote(str(model)), ms, arm_list, backend_names, scheme_list,
                            mode.value, include_mlp, replays, steps, seed, standin, rounds, tp),
        "argv": sys.argv,
        "read_ceiling_gbps": ceiling,
        "parts": list(parts),
        "standin": standin,
        "rounds": rounds,  # > 1: cells alternated, each row the median of its rounds
        # whether the timed graphs launch PDL kernels early (up to 3.9% a step; capture falls
        # back to the graph as captured, with one warning, where it cannot edit edges)
        "early_launch": early_launch_state(gpu),
        "units": {"ms_per_step": "ms", "gbps": "GB/s decimal (1e9 B/s)",
                  "bytes_per_step": "bytes: FP8 weights + scales + activations + outputs",
                  "speedup": "baseline ms / ms"},
        "timing": "cpu-eager wall clock" if not cuda else "CUDA events around graph replays",
        "rows": [asdict(r) for r in rows],
    }
    write_json(json_out, record, indent=None)
    console.print(f"wrote {json_out}")


GEN_GPU_ARMS = ("bf16,fp8:per_tensor,fp8:channel_token,fp8:block128,fp8:per_tensor:merged,"
                "torchao:per_row,torchao:per_tensor,transformers:block128")
GEN_CPU_ARMS = "bf16,fp8:per_tensor,fp8:channel_token"


@app.command()
def generate(
    model: Annotated[str | None, typer.Option(
        "--model", help=f"Shipped name ({shipped_models()}) or a config.json / "
        f"directory; default qwen3-8b on a GPU, {CPU_MODEL} on a CPU-only machine.")] = None,
    arms: Annotated[str | None, typer.Option(
        "--arms", help="Comma list of arms: bf16, fp8:<scheme>[:merged], torchao:per_row, "
        "torchao:per_tensor, transformers:block128 (transformers' own FP8Linear). "
        f"Default on a GPU: {GEN_GPU_ARMS}; on the CPU: {GEN_CPU_ARMS}.")
                    ] = None,
    batch: Annotated[str, typer.Option("--batch", help="Batch sizes, comma list.")] = "1,8",
    context: Annotated[int, typer.Option(
        "--context", callback=at_least(1), help="Prefilled tokens.")] = 512,
    steps: Annotated[int, typer.Option(
        "--steps", callback=at_least(1), help="Timed decode steps a round.")] = 32,
    rounds: Annotated[int, typer.Option(
        "--rounds", callback=at_least(1),
        help="Eager rounds per arm; the median round is reported.")] = 5,
    interleave: Annotated[bool, typer.Option(
        "--interleave/--one-at-a-time", help="Build every arm first and time the eager rounds "
        "arm after arm (side by side: the host drifts); --one-at-a-time holds one model at a "
        "time, for models too large to hold every arm.")] = True,
    backend: Annotated[str, typer.Option(
        "--backend", help="Fp8Linear backend (auto; reference on a CPU-only machine).")] = "auto",
    graph: Annotated[bool, typer.Option(
        "--graph/--no-graph", help="Also time decode steps as CUDA graph replays (GPU).")] = True,
    compile_step: Annotated[bool, typer.Option(
        "--compile", help="torch.compile each arm's decode step (Inductor, default mode) "
        "after its eager warm-up; the eager columns (then labelled compiled) time the "
        "compiled step without a graph, the graph columns the compiled step captured. "
        "torchao's float8 is meant to run compiled. Compiling took 33-93 s an arm for an 8B "
        "model (H100 machine; compile_s in the JSON).")] = False,
    json_out: Annotated[Path | None, typer.Option(
        "--json", help="JSON path (overwritten if it exists); default "
        "generate_<model>_<gpu-or-cpu>_<date>.json in benchmarks/results/ where that exists, "
        "else in the current folder, with _<HHMMSS> (then -2, -3, ...) added when the file "
        "exists.")] = None,
) -> None:
    """End-to-end decode of a transformers model (random weights): ms per step and tokens/s,
    eager and under a CUDA graph, for bf16, fp8tower per scheme, torchao float8 and
    transformers' own block-FP8 linear."""
    import torch
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from ..hf.generate import bench_generate

    cuda = torch.cuda.is_available()
    console = _console()
    _not_empty(model=model, arms=arms)
    model = model if model is not None else ("qwen3-8b" if cuda else CPU_MODEL)
    arm_list = _csv(arms if arms is not None else (GEN_GPU_ARMS if cuda else GEN_CPU_ARMS))
    if not arm_list:
        raise _fail(f"--arms {arms!r} names no arm: expected a comma list of {GEN_GPU_ARMS}")
    batches = _parse_ms(batch, "--batch")
    from .. import backends, provenance
    from ..formats import Scheme
    from ..hf.generate import check_arm

    canonical = []
    for arm in arm_list:  # before any model is built (the 27B's take minutes)
        try:
            parts = check_arm(arm)
        except ValueError as e:
            raise _fail(f"--arms: {e}") from None
        if parts[0] == "fp8":  # fp8:PER_TENSOR, fp8:per-tensor: one arm, run once
            parts = ("fp8", Scheme.parse(parts[1]).value, *parts[2:])
        canonical.append(":".join(parts))
    arm_list = canonical
    if len(set(arm_list)) != len(arm_list):
        raise _fail(f"--arms {','.join(arm_list)}: an arm is listed twice")

    if backend not in backends.names() + ["auto"]:  # before any model is built
        raise _fail(f"unknown backend {backend!r} in --backend: expected one of "
                    f"{', '.join(backends.names() + ['auto'])}")
    if backend != "auto" and not any(a.startswith("fp8:") for a in arm_list):
        raise _fail(f"--backend {backend} sets the fp8: arms' GEMM backend, but --arms "
                    f"{','.join(arm_list)} has no fp8: arm")
    if backend != "auto":
        check_backend_here(backend)
    if not cuda and backend == "auto":
        backend = CPU_BACKENDS
    if not cuda:  # a GPU-sized model on the CPU printed nothing for minutes
        _cpu_size_note(console, model)
    check_json_path(json_out if json_out is not None
                    else _results_dir() / "generate.json")
    command = (f"fp8tower bench generate --model {shlex.quote(model)} "
               f"--arms {','.join(arm_list)} "
               f"--batch {','.join(map(str, batches))} --context {context} --steps {steps} "
               f"--rounds {rounds} --backend {backend}" + ("" if graph else " --no-graph")
               + ("" if interleave else " --one-at-a-time")
               + (" --compile" if compile_step else ""))

    eager = "compiled" if compile_step else "eager"  # compiled: the step without a graph

    def progress(r) -> None:
        Console(stderr=True).print(f"{r.arm} batch {r.batch}: "
                                   + (f"skipped ({r.skipped})" if r.skipped else
                                      "not timed (prefill logits not finite)"
                                      if r.eager_ms is None else
                                      f"{eager} {r.eager_ms:.2f} ms/step"
                                      + (f", graph {r.graph_ms:.2f}" if r.graph_ms else "")),
                                   highlight=False)

    def note(text: str) -> None:  # interleaved arms are all built before the first finishes
        Console(stderr=True).print(text, style="dim", highlight=False)

    try:
        record = bench_generate(model, arm_list, batches, context=context, steps=steps,
                                device="cuda" if cuda else "cpu", backend=backend,
                                graph=graph and cuda, command=command, rounds=rounds,
                                interleave=interleave, progress=progress, note=note,
                                compile=compile_step)
    except ValueError as e:
        raise _fail(str(e)) from None
    where = record["gpu"] or "CPU (wall clock, not a GPU number)"
    title = f"Decode step: {model}, context {context}, {where}"
    table = Table(title=title + (", torch.compile'd" if compile_step else ""))
    for col in ("arm", "batch", "linears", f"{eager} ms", f"{eager} tok/s", "vs bf16",
                "graph ms", "graph tok/s", "vs bf16", "logits dB", "note"):
        table.add_column(col, justify="left" if col in ("arm", "note") else "right")
    for r in record["rows"]:
        note = f"[yellow]skipped[/]: {escape(r['skipped'])}" if r["skipped"] else \
            escape("; ".join(r["notes"]))
        table.add_row(r["arm"], str(r["batch"]), str(r["linears_swapped"]),
                      _fmt(r["eager_ms"], ".2f"), _fmt(r["eager_tok_s"], ".1f"),
                      _fmt(r["eager_speedup_vs_bf16"], ".3f"), _fmt(r["graph_ms"], ".2f"),
                      _fmt(r["graph_tok_s"], ".1f"), _fmt(r["graph_speedup_vs_bf16"], ".3f"),
                      _fmt(r["logits_sqnr_db_vs_bf16"], ".1f"), note)
    table.caption = ("vs bf16: bf16 ms / arm ms (same batch, same run); logits dB: the "
                     "prefill's last logits against bf16's, SQNR (same random weights)")
    paired = [f"{r['arm']} (batch {r['batch']}) {r['eager_paired_ratio_vs_bf16']:.3f}"
              for r in record["rows"]
              if r.get("eager_paired_ratio_vs_bf16") and r["arm"] != "bf16"]
    if paired:  # robust to the host's drift across rounds (hf/generate.py)
        table.caption += (f"\n{eager} time / bf16, median of per-round ratios (< 1: faster): "
                          + ", ".join(paired))
    if record["model_type"].startswith(("qwen3_5", "qwen3_next")):  # hybrid: say which GDN ran
        kern = record["linear_attention_kernels"]
        table.caption += "\n" + "; ".join(f"{k}: {v}" for k, v in kern.items())
    console.print(table)
    if record["rows"] and all(r["skipped"] for r in record["rows"]):  # nothing measured
        first = record["rows"][0]
        raise _fail(f"no arm ran (nothing written): {first['arm']} (batch {first['batch']}) "
                    f"skipped: {first['skipped']}", code=1)
    if json_out is None:
        json_out = provenance.result_path(
            _results_dir(),
            f"generate_{_slug(model)}_{_slug(record['gpu']) if record['gpu'] else 'cpu'}",
            record["date"])
    write_json(json_out, record, indent=None)
    console.print(f"wrote {json_out}")
