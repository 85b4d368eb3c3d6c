"""`fp8tower trace ...`: diff, attribute, compare, report (fp8tower.trace), and capture (of a
tower: fp8tower.tower.capture, which is why this command lives here and not in trace/).

Exit codes: 0 ok; 1 verification failed (an op's kernels do not match its backend, or a
launch-count check failed);
2 bad input (unreadable/foreign trace, bad option value, fractional launch counts).
"""

from __future__ import annotations

import enum
import functools
from pathlib import Path
from typing import Annotated

import typer

from ._common import (
    at_least,
    check_backend_here,
    check_json_path,
    check_standin,
    check_standin_device,
    shipped_models,
    tp_size,
)
from ._common import console as _console
from ._common import fail as _fail
from ._common import warn as _warn

app = typer.Typer(
    name="trace",
    help="Prove from GPU traces what ran and where the time of a decode step went: two-length "
    "diff of traces, attribution of kernels to ops, paired comparison of two arms, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)

ARM_HELP = (
    "An arm: a capture directory (manifest.json + its two traces), or SHORT,LONG trace "
    "paths (torch .json/.json.gz or nsys .sqlite) with --steps and a map file."
)
# tower.build.STANDIN_KERNELS (not imported here: it pulls in torch; a test keeps them equal).
STANDIN_KERNELS = ("torch", "rows", "rows_fp8")
STEPS_HELP = "Decode steps of the short and the long trace, e.g. --steps 8 136."
MAP_HELP = ("Map file (.json/.toml) mapping kernels of foreign traces to ops; see docs/trace.md. "
            "On a capture directory it replaces the manifest's mapping, whose checks are then "
            "skipped.")
STEP_RANGE_HELP = (
    "Regex of the range name (record_function/NVTX) marking one step; default fp8tower.step."
)
CEILING_HELP = (
    "Read ceiling in GB/s (decimal) for the '% ceiling' column; default: the "
    "capture's measured one, if any."
)
GIB_HELP = "Show bandwidth in GiB/s (2^30 B/s), labelled, instead of GB/s (1e9 B/s)."
FRACTIONAL_HELP = "Print per-step numbers even when launch counts per step are not integers."


class Device(str, enum.Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


class ArmKind(str, enum.Enum):
    unmerged = "unmerged"
    merged = "merged"


def _handles_errors(fn):
    """TraceError / unwritable outputs -> one clear line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from ..trace.errors import TraceError

        try:
            return fn(*args, **kwargs)
        except TraceError as e:
            raise _fail(str(e)) from None
        except OSError as e:
            raise _fail(f"{e.filename or ''}: {e.strerror or e}") from None

    return wrapper


def _check_outputs(**paths: Path | None) -> None:
    """Each output path (``json=``, ``csv=``, ``html=``) checked before any trace is read: a
    directory or an unwritable place is refused then, not after the analysis (the writers
    make missing parent folders); two options naming one file are refused (the last write
    silently replaced the other)."""
    seen: dict[Path, str] = {}
    for option, path in paths.items():
        if path is not None:
            check_json_path(path, f"--{option}")
            same = seen.setdefault(Path(path).resolve(), option)
            if same != option:
                raise _fail(f"--{same} {path} and --{option} {path} are the same file: give "
                            "each output its own path")


def _check_integral(ok: bool, message: str, allow: bool) -> None:
    if ok:
        return
    if not allow:
        raise _fail(message + " (use --allow-fractional to print them anyway)")
    _warn(message)


# Options shared by the analysis commands.
StepRangeOpt = Annotated[str | None, typer.Option("--step-range", help=STEP_RANGE_HELP)]
CeilingOpt = Annotated[float | None, typer.Option("--ceiling-gbps", help=CEILING_HELP)]
GibOpt = Annotated[bool, typer.Option("--gib", help=GIB_HELP)]
FractionalOpt = Annotated[bool, typer.Option("--allow-fractional", help=FRACTIONAL_HELP)]
DeviceOpt = Annotated[Device, typer.Option(help="Kind of events to analyse (see diff).")]
OtherMOpt = Annotated[bool, typer.Option(
    "--other-m", help="Compare one model's arms at different M (where a larger M's time "
    "goes); without it arms at different M are refused.")]


@app.command()
@_handles_errors
def diff(
    short: Annotated[
        Path, typer.Argument(metavar="SHORT", help="Trace of the short run (.json, .json.gz, .sqlite).")
    ],
    long: Annotated[Path, typer.Argument(metavar="LONG", help="Trace of the long run.")],
    steps: Annotated[tuple[int, int], typer.Option("--steps", help=STEPS_HELP)] = (8, 136),
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the diff as JSON here.")
    ] = None,
    csv_out: Annotated[
        Path | None, typer.Option("--csv", help="Write the diff as CSV here.")
    ] = None,
    allow_fractional: FractionalOpt = False,
    device: Annotated[
        Device,
        typer.Option(
            help="cuda: GPU kernels; cpu: top-level CPU ops of a CPU-only run; auto: kernels if any."
        ),
    ] = Device.auto,
    top: Annotated[
        int | None,
        typer.Option(callback=at_least(0), help="Print only the N most expensive kernels (0: "
                     "the totals only)."),
    ] = None,
    step_range: StepRangeOpt = None,
) -> None:
    """Per kernel name: launches and ms per step, (long - short) / (steps_long - steps_short).

    The declared --steps are checked against the traces' step ranges, else their
    cudaGraphLaunch calls (one per step); with neither, a warning says so."""
    import re

    from ..trace import report
    from ..trace.diff import diff_traces
    from ..trace.events import STEP_RANGE
    from ..trace.ingest import load_trace
    from ..trace.steps import graph_replay_problems

    _check_outputs(json=json_out, csv=csv_out)
    traces = [load_trace(short, device.value), load_trace(long, device.value)]
    for trace in traces:
        for problem in graph_replay_problems(trace):
            _warn(f"{trace.path}: {problem}")
    result = diff_traces(*traces, steps, step_range or re.escape(STEP_RANGE))
    for warning in result.warnings:
        _warn(warning)
    _check_integral(result.integral, result.fractional_message(), allow_fractional)
    report.print_diff(result, _console(), top)
    if json_out:
        report.write_json(json_out, result.to_json())
    if csv_out:
        report.diff_csv(csv_out, result)


def _attribution(spec: str, map_path, steps, step_range, ceiling, device, allow_fractional):
    from ..trace.arm import load_arm
    from ..trace.attribute import attribute

    arm = load_arm(
        spec, map_path=map_path, steps=steps, step_pattern=step_range, device=device.value
    )
    att = attribute(arm, ceiling)
    for warning in att.diff.warnings:  # as `diff` prints them (they are in att.notes too)
        _warn(f"arm {att.arm}: {warning}")
    _check_integral(
        att.integral,
        f"arm {att.arm}" + (f" ({spec})" if str(spec) != att.arm else "") + ": "
        + (
            att.diff.fractional_message()
            if not att.diff.integral
            else "launch counts per op and step are not integers"
        ),
        allow_fractional,
    )
    return att


def _warn_same_capture(arm_a: str, arm_b: str, map_a: Path | None, map_b: Path | None) -> None:
    """Two arms of one capture attributed by one map (or both by the manifest) compare a run
    with itself; the same traces under two maps do not."""

    def key(spec) -> tuple | None:
        if spec is None:
            return None
        parts = [str(spec)] if Path(spec).exists() else str(spec).split(",")
        return tuple(str(Path(p).resolve()) if Path(p).exists() else p for p in parts)

    if key(arm_a) == key(arm_b) and key(map_a) == key(map_b):
        how = f" under the same map ({map_a})" if map_a is not None else ""
        _warn(f"ARM_A and ARM_B are the same capture ({arm_a}){how}: every delta will be 0")


@app.command()
@_handles_errors
def attribute(
    arm: Annotated[str, typer.Argument(metavar="ARM", help=ARM_HELP)],
    map_path: Annotated[Path | None, typer.Option("--map", help=MAP_HELP)] = None,
    steps: Annotated[
        tuple[int, int] | None,
        typer.Option("--steps", help=STEPS_HELP + " Required for SHORT,LONG arms."),
    ] = None,
    step_range: StepRangeOpt = None,
    ceiling_gbps: CeilingOpt = None,
    gib: GibOpt = False,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the attribution as JSON.")
    ] = None,
    csv_out: Annotated[
        Path | None, typer.Option("--csv", help="Write the per-op table as CSV.")
    ] = None,
    allow_fractional: FractionalOpt = False,
    device: DeviceOpt = Device.auto,
) -> None:
    """Per op: launches, ms/step, share of step, bytes/step, GB/s, % of the read ceiling, and
    microseconds per call beyond its bytes at the ceiling (its fixed cost).

    With a capture manifest, also checks that each op's kernels match its backend's kernel
    regex: a mismatch is an error (exit code 1)."""
    from ..trace import report, tables

    _check_outputs(json=json_out, csv=csv_out)
    att = _attribution(arm, map_path, steps, step_range, ceiling_gbps, device, allow_fractional)
    report.print_attribution(att, _console(), gib)
    if json_out:
        report.write_json(json_out, tables.attribution_json(att, gib))
    if csv_out:
        report.write_attribution_csv(csv_out, att)
    if att.failed:
        raise typer.Exit(1)


@app.command()
@_handles_errors
def compare(
    arm_a: Annotated[str, typer.Argument(metavar="ARM_A", help="First arm. " + ARM_HELP)],
    arm_b: Annotated[str, typer.Argument(metavar="ARM_B", help="Second arm (same forms).")],
    map_a: Annotated[
        Path | None, typer.Option("--map-a", help=MAP_HELP + " For the first arm.")
    ] = None,
    map_b: Annotated[
        Path | None, typer.Option("--map-b", help="Map file for the second arm.")
    ] = None,
    steps: Annotated[tuple[int, int] | None, typer.Option("--steps", help=STEPS_HELP)] = None,
    step_range: StepRangeOpt = None,
    ceiling_gbps: CeilingOpt = None,
    gib: GibOpt = False,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the comparison as JSON.")
    ] = None,
    csv_out: Annotated[
        Path | None, typer.Option("--csv", help="Write the levers table as CSV.")
    ] = None,
    html_out: Annotated[
        Path | None, typer.Option("--html", help="Also write the HTML report.")
    ] = None,
    allow_fractional: FractionalOpt = False,
    device: DeviceOpt = Device.auto,
    other_m: OtherMOpt = False,
) -> None:
    """Both arms op group by op group, ranked by the delta (first - second): the levers."""
    from ..trace import report, tables
    from ..trace.compare import compare as compare_arms

    _check_outputs(json=json_out, csv=csv_out, html=html_out)
    if html_out:
        report.check_html_deps()  # before any trace is read
    _warn_same_capture(arm_a, arm_b, map_a, map_b)
    a = _attribution(arm_a, map_a, steps, step_range, ceiling_gbps, device, allow_fractional)
    b = _attribution(arm_b, map_b, steps, step_range, ceiling_gbps, device, allow_fractional)
    cmp = compare_arms(a, b, other_m=other_m)
    if a.arm == b.arm:  # after the checks: their errors name the arms as given
        b.arm = b.arm + " (2)"
    report.print_comparison(cmp, _console(), gib)
    if json_out:
        report.write_json(json_out, tables.comparison_json(cmp, gib))
    if csv_out:
        report.write_comparison_csv(csv_out, cmp)
    if html_out:
        report.write_html(html_out, [a, b], cmp, gib)
    if a.failed or b.failed:
        raise typer.Exit(1)


@app.command()
@_handles_errors
def report(
    arm_a: Annotated[str, typer.Argument(metavar="ARM_A", help=ARM_HELP)],
    arm_b: Annotated[
        str | None, typer.Argument(metavar="ARM_B", help="Optional second arm to compare with.")
    ] = None,
    map_a: Annotated[
        Path | None, typer.Option("--map-a", help=MAP_HELP + " For the first arm.")
    ] = None,
    map_b: Annotated[
        Path | None, typer.Option("--map-b", help="Map file for the second arm.")
    ] = None,
    steps: Annotated[tuple[int, int] | None, typer.Option("--steps", help=STEPS_HELP)] = None,
    step_range: StepRangeOpt = None,
    ceiling_gbps: CeilingOpt = None,
    gib: GibOpt = False,
    html_out: Annotated[
        Path, typer.Option("--html", help="Self-contained HTML page to write.")
    ] = Path("trace_report.html"),
    no_html: Annotated[bool, typer.Option(
        "--no-html", help="No HTML page: the tables and --json / --csv only (the page needs "
                          "the report extra: jinja2, matplotlib).")] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write JSON.")] = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Also write CSV.")] = None,
    allow_fractional: FractionalOpt = False,
    device: DeviceOpt = Device.auto,
    other_m: OtherMOpt = False,
) -> None:
    """Full report of one arm, or two arms compared: terminal tables and one HTML page.

    The page has the levers table, per-op tables, plots (ms/step per op of both arms, GB/s per
    op against the read ceiling) and per-step kernel-busy time, span and CUDA-event time.
    JSON and CSV on request; --no-html for those alone."""
    from rich.markup import escape

    from ..trace import report as rep
    from ..trace import tables
    from ..trace.compare import compare as compare_arms

    if no_html:
        html_out = None
    _check_outputs(html=html_out, json=json_out, csv=csv_out)
    if html_out is not None:
        rep.check_html_deps()  # before any trace is read
    if arm_b is not None:
        _warn_same_capture(arm_a, arm_b, map_a, map_b)
    a = _attribution(arm_a, map_a, steps, step_range, ceiling_gbps, device, allow_fractional)
    atts, cmp = [a], None
    console = _console()
    if arm_b is not None:
        b = _attribution(arm_b, map_b, steps, step_range, ceiling_gbps, device, allow_fractional)
        if a.arm == b.arm:
            b.arm = b.arm + " (2)"
        atts, cmp = [a, b], compare_arms(a, b, other_m=other_m)
        rep.print_comparison(cmp, console, gib)
    for att in atts:
        rep.print_attribution(att, console, gib)
    if json_out:
        doc = tables.comparison_json(cmp, gib) if cmp else tables.attribution_json(a, gib)
        rep.write_json(json_out, doc)
    if csv_out:
        if cmp:
            rep.write_comparison_csv(csv_out, cmp)
        else:
            rep.write_attribution_csv(csv_out, a)
    if html_out is not None:
        rep.write_html(html_out, atts, cmp, gib)
        console.print(f"wrote {escape(str(html_out))}")
    if any(att.failed for att in atts):
        raise typer.Exit(1)


def _parse_steps(text: str) -> tuple[int, int]:
    try:
        short, long = (int(s) for s in text.split(","))
    except ValueError:
        raise _fail(f"--steps {text!r}: expected SHORT,LONG step counts, e.g. 8,136") from None
    if not 0 < short < long:
        raise _fail(f"--steps {text!r}: expected 0 < SHORT < LONG")
    return short, long


@app.command()
@_handles_errors
def capture(
    model: Annotated[str, typer.Option(
        "--model", help=f"Shipped name ({shipped_models()}) or a config.json / "
        "directory.")],
    arm: Annotated[
        ArmKind,
        typer.Option(
            "--arm",
            help="unmerged: one GEMM per projection; merged: sibling projections as one GEMM.",
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", help="Capture directory to write (traces + manifest).")
    ],
    backend: Annotated[
        str, typer.Option("--backend", help="GEMM backend, or auto (tuned).")
    ] = "auto",
    m: Annotated[int, typer.Option(
        "--m", callback=at_least(1), help="Tokens per decode step (GEMM M).")] = 1,
    steps: Annotated[
        str, typer.Option("--steps", help="Short and long step counts, SHORT,LONG.")
    ] = "8,136",
    scheme: Annotated[
        str, typer.Option("--scheme", help="per_tensor, channel_token, block128, weight_only.")
    ] = "per_tensor",
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing capture in --out, whole.")
    ] = False,
    standin: Annotated[
        str, typer.Option("--standin", help="The stand-ins' kernel: torch (the tower's "
                          "definition), rows (one stride-aware Triton kernel, the same bits) or "
                          "rows_fp8 (per_tensor: that kernel also quantizes for the next GEMM); "
                          "see fp8tower bench tower --help.")
    ] = "torch",
    tp: Annotated[int, typer.Option(
        "--tp", parser=tp_size, metavar="N",
        help="Tensor-parallel size: the tower of one GPU of a TP-N deployment (as bench tower "
        "--tp; recorded in the manifest, and report compares only captures of one tp).")] = 1,
) -> None:
    """Capture a two-length trace pair of a model's FP8 tower (the GPU, or the CPU's ops).

    The traces and manifest are written to a temporary directory and renamed into place when
    complete; an existing capture in --out is refused unless --force."""
    from rich.markup import escape

    from ..backends import BackendError
    from ..formats import Scheme
    from ..models import ConfigError, TpError, get_spec
    from ..models.tp import block_split_error
    from ..trace.capture import check_capture_dir

    short_long = _parse_steps(steps)
    try:
        scheme_v = Scheme.parse(scheme)
    except ValueError as e:
        raise _fail(f"--scheme: {e}") from None
    try:
        spec = get_spec(model, tp=tp)  # a clear --model / --tp error before anything is built
        split = block_split_error(spec) if scheme_v is Scheme.BLOCK128 else None
        if split is not None:
            raise split
    except TpError as e:
        raise _fail(f"--tp {tp}: {e}") from None
    except ConfigError as e:
        raise _fail(f"--model: {e}") from None
    check_standin(standin, STANDIN_KERNELS, [scheme_v.value])
    check_capture_dir(out, force)  # before the (slow) tower build

    import torch

    from ..nn.merged import MergeError
    from ..tower.capture import capture_arm

    check_standin_device(standin, torch.cuda.is_available())
    if backend != "auto":
        check_backend_here(backend)

    from rich.console import Console

    try:
        # the build, warm-up (tuning) and two profiled runs take minutes on a 27B: say so
        with Console(stderr=True).status(
                f"capturing {model} {arm.value} M={m}: build, warm-up, then "
                f"{short_long[0]} and {short_long[1]} profiled steps"):
            result = capture_arm(
                model=spec if tp > 1 else model,  # at tp > 1 the shards' spec
                arm=arm.value, backend=backend, m=m, steps=short_long,
                out_dir=out, scheme=scheme_v, force=force, standin=standin,
            )
    except BackendError as e:  # FP8TOWER_BACKENDS is checked at startup (cli/__init__.py)
        raise _fail(f"--backend {backend}: {e}" if backend != "auto" else str(e)) from None
    except MergeError as e:
        raise _fail(f"--arm merged --scheme {scheme_v.value}: {e}") from None
    _console().print(f"wrote {escape(str(getattr(result, 'directory', out)))}")


@app.command("capture-model")
@_handles_errors
def capture_model(
    model: Annotated[
        str, typer.Option("--model", help=f"Shipped config name ({shipped_models()}) or a "
                          "config.json / directory: a transformers model with random weights.")
    ],
    arm: Annotated[
        str, typer.Option("--arm", help="bf16, fp8:<scheme> (unmerged) or fp8:<scheme>:merged.")
    ],
    out: Annotated[
        Path, typer.Option("--out", help="Capture directory to write (traces + manifest).")
    ],
    backend: Annotated[str, typer.Option("--backend", help="FP8 GEMM backend, or auto.")] = "auto",
    m: Annotated[int, typer.Option(
        "--m", callback=at_least(1), help="Batch (tokens per decode step).")] = 1,
    steps: Annotated[
        str, typer.Option("--steps", help="Short and long step counts, SHORT,LONG.")
    ] = "8,136",
    context: Annotated[int, typer.Option(
        "--context", callback=at_least(1), help="Prefill tokens.")] = 64,
    eager: Annotated[
        bool, typer.Option("--eager", help="Eager steps instead of CUDA-graph replays (host cost).")
    ] = False,
    layers: Annotated[
        int | None, typer.Option("--layers", callback=at_least(1), help="Keep only the first N "
                                 "layers (the last one attention if none of them is).")
    ] = None,
    device: Annotated[str | None, typer.Option(
        "--device", help="cuda or cpu (default: cuda where a GPU is visible, else cpu).")] = None,
    eager_out: Annotated[
        Path | None, typer.Option("--eager-out", help="Also capture 2,6 eager steps of the same "
                                  "model here (GPU; host launch statistics).")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing capture in --out, whole.")
    ] = False,
) -> None:
    """Capture a two-length trace pair of a transformers model's decode step; op groups are
    its modules (layers.*.linear_attn.in_proj_qkvz, layers.*.self_attn, ...)."""
    import warnings

    from rich.markup import escape

    from ..hf.capture import capture_model as run

    short_long = _parse_steps(steps)
    if device not in (None, "cpu", "cuda"):
        raise _fail(f"--device {device!r}: expected cpu or cuda")
    if eager_out is not None and (eager or device == "cpu"):
        raise _fail("--eager-out captures eager steps beside a CUDA-graph capture: not with "
                    f"{'--eager' if eager else '--device cpu'} (that capture is eager itself)")
    if eager_out is not None:
        a, b = Path(out).resolve(), Path(eager_out).resolve()
        if a == b or a in b.parents or b in a.parents:  # the eager capture replaced the graph's
            raise _fail(f"--out {out} and --eager-out {eager_out}: two captures need two "
                        "folders, neither inside the other")
    if eager_out is not None and device is None:
        import torch

        if not torch.cuda.is_available():
            raise _fail("--eager-out captures eager steps beside a CUDA-graph capture, which "
                        "needs a GPU: none is visible (this capture would run eager on the CPU)")
    from rich.console import Console

    try:
        with warnings.catch_warnings(), Console(stderr=True).status(
                f"capturing {model} {arm}: build, convert, then {short_long[0]} and "
                f"{short_long[1]} profiled steps"):
            warnings.showwarning = lambda message, *_args, **_kw: _warn(str(message))
            result = run(model, arm, out, steps=short_long, m=m, context=context,
                         backend=backend, device=device, graph=False if eager else None,
                         layers=layers, eager_out=eager_out, force=force)
    except ValueError as e:
        raise _fail(str(e)) from None
    _console().print(f"wrote {escape(str(result.directory))}: "
                     f"{result.manifest.kernels_per_step} kernels per step, "
                     f"{len(result.manifest.ops)} ops")
