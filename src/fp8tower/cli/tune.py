"""`fp8tower tune` and `fp8tower dispatch`: pre-tune shapes, and explain the cached choices.

Thin: parses, calls dispatch/tuning (imported inside the commands), prints (rich tables; ``--json`` for machines).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from ._common import (
    STANDIN_HELP,
    at_least,
    check_standin,
    fail,
    tp_size,
)
from ._common import csv as _csv
from ._common import parse_ms as _parse_ms

app = typer.Typer(help="Per-shape autotuned dispatch: tune GEMM shapes, explain the choices.",
                  no_args_is_help=True, rich_markup_mode=None)

ALL_SCHEMES = "per_tensor,channel_token,block128"
DEFAULT_M = "1,2,4,8,16,32,64"

Model = Annotated[str | None, typer.Option(
    "--model", help="Model name or config.json path (fp8tower.models).")]
Shapes = Annotated[str | None, typer.Option(
    "--shapes", help="GEMM shapes NxK, comma-separated, e.g. 10240x5120,1024x5120.")]
Merged = Annotated[bool | None, typer.Option(
    "--merged/--unmerged",
    help="Model shapes with sibling projections merged, or not (default: both; needs --model).")]
Parts = Annotated[str | None, typer.Option(
    "--parts", help="Model parts: gdn, attention, mlp, all (default: gdn,attention; needs "
    "--model).")]
DEFAULT_PARTS = "gdn,attention"
Tp = Annotated[int, typer.Option(
    "--tp", parser=tp_size, metavar="N",
    help="Tensor-parallel size: the GEMMs one GPU of a TP-N deployment runs, as vLLM splits "
    "the model (column-parallel q/k/v, gate/up, GDN in_proj_* N / tp; row-parallel o_proj, "
    "down_proj, GDN out_proj K / tp; kv heads replicated below tp); a model that cannot be "
    "split so is refused, naming the value (needs --model; --shapes are taken as given, not "
    "sharded).")]
# What `fp8tower tune` accepts: fp8_linear's activation and output dtypes (nn/linear.py);
# FP8 x only for per_tensor with its static scale, the only FP8 call fp8_linear admits.
ACT_DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn")
OUT_DTYPES = ("bfloat16", "float16", "float32")
Explain = Annotated[bool, typer.Option("--explain", help="Show runners-up, margins, failures.")]
TuneExplain = Annotated[bool, typer.Option("--explain", help=(
    "Show runners-up, margins, failures; with --in-context also each candidate the step timed "
    "against the current choice, in the tuner's chain (us a call) and in the step (us a GEMM "
    "of the key)."))]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


# ---------------------------------------------------------------------- parsing


def _bad(message: str, param_hint: str) -> typer.Exit:
    """One ``error: OPTION: ...`` line and exit code 2, as the other commands print (typer's
    BadParameter printed four lines)."""
    return fail(f"{param_hint}: {message}")


def _parse_shapes(text: str) -> list[tuple[int, int]]:
    out = []
    for item in _csv(text):
        n, sep, k = item.lower().partition("x")
        if not (sep and n.isdigit() and k.isdigit() and int(n) > 0 and int(k) > 0):
            raise _bad(f"{item!r} is not NxK (e.g. 10240x5120)", param_hint="--shapes")
        out.append((int(n), int(k)))
    if not out:  # "," or "": no shape at all, not "every shape"
        raise _bad(f"{text!r} names no shape (e.g. 10240x5120,1024x5120)", param_hint="--shapes")
    return out


def _parse_schemes(text: str) -> list:
    from ..formats import Scheme

    try:
        schemes = [Scheme.parse(s) for s in _csv(text)]
    except ValueError as e:
        raise _bad(str(e), param_hint="--scheme") from None
    if not schemes:
        raise _bad(f"{text!r} names no scheme: expected a comma list of "
                   f"{', '.join(s.value for s in Scheme)}", param_hint="--scheme")
    return schemes


def _parse_dtype(text: str, hint: str, allowed: tuple[str, ...] = ACT_DTYPES):
    """The torch dtype named ``text``, one of ``allowed`` (int32 or bool crashed the tuner
    later, complex64 built a key)."""
    import torch

    name = text.strip().removeprefix("torch.")
    if name not in allowed:
        raise _bad(f"{text!r} is not supported: expected one of "
                   f"{', '.join(allowed)}", param_hint=hint)
    return getattr(torch, name)


def _model_options(model, merged, parts, tp: int = 1) -> str:
    """--parts (default gdn,attention); --merged/--unmerged, --parts and --tp select a model's
    GEMMs, so without --model they are refused, not ignored."""
    if model is None:
        given = [o for o, v in (("--merged/--unmerged", merged), ("--parts", parts),
                                ("--tp", None if tp == 1 else tp))
                 if v is not None]
        if given:
            verb, it = ("select", "they") if len(given) > 1 else ("selects", "it")
            raise fail(f"{' and '.join(given)} {verb} the GEMMs of --model; without --model "
                       f"{it} would be ignored: give --model or drop "
                       f"{'them' if it == 'they' else 'it'}")  # the option named once
    return DEFAULT_PARTS if parts is None else parts


def _model_spec(model: str, tp: int = 1):
    from ..models import ConfigError, TpError, get_spec

    try:
        return get_spec(model, tp=tp)
    except TpError as e:  # a model that cannot be split into tp shards
        raise _bad(str(e), param_hint="--tp") from None
    except ConfigError as e:
        raise _bad(str(e), param_hint="--model") from None


def _check_block_shards(spec, schemes, option: str) -> None:
    """An explicit ``--scheme`` with block128 at a tp whose shards cannot hold whole blocks:
    refused naming the linear and its value, before any tuning."""
    from ..formats import Scheme
    from ..models.tp import block_split_error

    e = (block_split_error(spec, fix=None)
         if spec is not None and Scheme.BLOCK128 in schemes else None)
    if e is not None:
        raise _bad(f"{e}; use another --tp, or leave block128 out of {option}",
                   param_hint="--tp")


def _block_left_out(spec) -> bool:
    """No --scheme given: block128 is left out of the default schemes (a note on stderr
    naming why) where this tp's shards cannot hold whole blocks."""
    from ..models.tp import block_split_error

    e = block_split_error(spec, fix=None) if spec is not None else None
    if e is not None:
        typer.echo(f"note: --tp {spec.tp}: block128 left out of the default schemes: {e}",
                   err=True)
    return e is not None


Gemm = tuple[int, int, tuple[int, ...], bool]


def _model_gemms(spec, merged: bool | None, parts: str) -> list[Gemm]:
    """The model's distinct GEMMs as (N, K, its merge group's member Ns, () for a single
    linear, adds a bias: Qwen2's q/k/v, attention_bias / mlp_bias); parts that name none
    (e.g. gdn of a model without GDN layers) are refused: they would filter nothing
    (dispatch) or tune nothing."""
    from ..models.tp import ROW, role

    modes = [False, True] if merged is None else [merged]
    parts_t = tuple(_csv(parts))
    gemms: dict[Gemm, None] = {}
    for mode in modes:
        try:
            for g in spec.gemms(parts_t, merged=mode):
                members = tuple(m.n for m in g.members) if g.merged else ()
                gemms[(g.n, g.k, members, g.bias)] = None
                # at tp > 1 vLLM adds a row-parallel linear's bias on rank 0 only: the other
                # ranks pose the bias-free key
                if g.bias and spec.tp > 1 and not g.merged and role(g.members[0]) == ROW:
                    gemms[(g.n, g.k, members, False)] = None
        except ValueError as e:  # unknown part, or MLP of an MoE model
            raise _bad(str(e), param_hint="--parts") from None
    if not gemms:
        from ..models.spec import ALL_PARTS

        # no MLP where every one is a mixture of experts without a shared expert
        modelled = ALL_PARTS if spec.mlp_in_scope else ("gdn", "attention")
        has = {g.kind for g in spec.gemms(modelled)}
        kinds = [k for k in ALL_PARTS if k in has]
        raise _bad(f"{parts!r} names no FP8 GEMMs of {spec.name}; expected one "
                   f"or more of {', '.join(kinds)}", param_hint="--parts")
    return list(gemms)


def _gemms_from(model, shapes, merged, parts, tp: int = 1) -> tuple[list[Gemm], object]:
    """(N, K, merge group's member Ns, bias) of the model's GEMMs (one rank's shards at
    tp > 1), then of --shapes (never merged, no bias of their own: --bias gives every key
    one), and the spec."""
    spec = _model_spec(model, tp) if model else None
    out: dict[Gemm, None] = {}
    if spec is not None:
        out.update(dict.fromkeys(_model_gemms(spec, merged, parts)))
    if shapes is not None:  # "" or ",": an error naming --shapes, not "no filter"
        out.update(dict.fromkeys((n, k, (), False) for n, k in _parse_shapes(shapes)))
    return list(out), spec


def _model_scale_keys(spec, static: bool | None, channel: bool, act_dtype,
                      in_context: bool) -> tuple[bool, bool]:
    """per_tensor's key flags: those given, else what --model's quantization config says its
    loaded layers look up (models/quant.py: AutoFP8's activation_scheme dynamic, compressed-
    tensors' dynamic tensor activations or channel weight scales), else static and scalar.
    Before, a dynamic checkpoint's model was tuned on static keys, which its calls never
    looked up (2026-12-06). FP8 x comes with a static scale: a given --act-dtype float8 keeps
    static. ``spec`` None (no --model, or no per_tensor scheme tuned): the flags alone."""
    import torch

    hint_static = None if spec is None else spec.static_act_hint
    hint_channel = spec is not None and spec.channel_scale_hint
    moved = []
    if static is None:
        static = True
        if hint_static is False and act_dtype != torch.float8_e4m3fn:
            static = False
            moved.append("dynamic activation scales (--static-act-scale tunes the static keys)")
    if hint_channel and not channel:
        channel = True
        moved.append("(N,) weight scales")
    if moved and in_context:
        raise _bad(f"--in-context re-ranks the keys the tower's decode step runs (static "
                   f"per_tensor scale, scalar weight scales where unmerged), but "
                   f"{spec.name}'s quantization config makes its per_tensor layers look up "
                   f"keys with {' and '.join(moved)}: tune without --in-context",
                   param_hint="--in-context")
    if moved:
        typer.echo(f"note: {spec.name}'s quantization config: per_tensor keys with "
                   f"{' and '.join(moved)}", err=True)
    return static, channel


def scheme_gemms(gemms, scheme) -> list[Gemm]:
    """The GEMMs a model of ``scheme`` runs for ``gemms`` (as _gemms_from lists them): each as
    it is, but a block128 merge group with a member but the last not a multiple of 128 rows:
    it cannot merge exactly (nn/merged.py: a block row would straddle two members), so convert
    and the loaders keep its members unmerged: their GEMMs (the group's bias each), not the
    group's. `tune` poses these GEMMs' keys and `dispatch` lists them: one rule, so the two
    cannot disagree (dispatch --merged listed the group's block128 shape, a key no model runs,
    and not its members')."""
    from ..formats import BLOCK, Scheme

    out: dict[Gemm, None] = {}
    for gemm in gemms:
        _, k, members, bias = gemm
        if scheme is Scheme.BLOCK128 and any(x % BLOCK for x in members[:-1]):
            out.update(dict.fromkeys((x, k, (), bias) for x in members))
        else:
            out[gemm] = None
    return list(out)


# Where the decode step ranks a model's candidates differently from the tuner's chain: on
# the 27B towers, of 96 re-rankings in the step one moved a key below M = 8 (weight_only's
# in_proj at M = 1 on an H100, 0.994x the step, session 63). H100 (sessions 60-61, M = 1-64):
# at M = 32 (per_tensor, 0.992-0.997x the step) and M = 64 (the GDN in_proj, 0.985-0.989x).
# H200 (session 62, M = 1 / 8 / 32): the GDN in_proj onto tile-major weights at M = 8 in all
# three schemes (0.992-0.995x) and at M = 32 (per_tensor, block128); at M = 32 per_tensor's
# out_proj / o_proj onto CUTLASS's PDL kernel, its q/k/v onto BLOCK_K 256 too (with the
# in_proj, that step 0.966x). The tile-major moves were ties the tuner now takes itself
# (tuning/cache.apply_held_layouts; results/session63_2026-12-07/moves.txt).
IN_CONTEXT_HINT_M = 8
IN_CONTEXT_HINT = (
    f"note: from M = {IN_CONTEXT_HINT_M} the model's decode step can rank a key's best "
    "candidates differently from the tuner's chain (the 27B towers: 0.966-0.997x "
    "the step where it did); --in-context re-ranks them in that step")


def tune_problems(gemms, schemes, buckets, *, act_dtype, out_dtype, capability,
                  channel_scale: bool = False, static_act_scale: bool | None = True,
                  has_bias: bool = False) -> list:
    """The dispatch keys ``fp8tower tune`` tunes: every (N, K, members, bias) x scheme x M
    bucket. per_tensor GEMMs of a merge group carry one weight scale per shard, an (N,) vector
    (as MergedFp8Linear builds it; a scalar only when every shard has the same one), so their
    key is the channel-scale one; a block128 group with a member but the last not a multiple
    of 128 rows cannot merge exactly (nn/merged.py: a block row would straddle two members),
    so convert and the loaders keep its members unmerged: their keys, not the group's; a GEMM
    with a bias (the model's: Qwen2's q/k/v, Llama's attention_bias) poses the -bias key, as
    its converted layer's calls do; ``channel_scale`` gives every per_tensor key a vector;
    ``has_bias`` gives every key a bias; ``static_act_scale`` None: static, the CLI's
    default without a --model hint (_model_scale_keys)."""
    from ..formats import Scheme
    from ..problem import GemmProblem

    static_act_scale = True if static_act_scale is None else static_act_scale

    problems = [
        GemmProblem(m=b, n=n, k=k, scheme=s, act_dtype=act_dtype, out_dtype=out_dtype,
                    capability=capability,
                    channel_weight_scale=(channel_scale or bool(members))
                    and s is Scheme.PER_TENSOR,
                    static_act_scale=static_act_scale and s is Scheme.PER_TENSOR,
                    has_bias=has_bias or bias)
        for gemm in gemms for s in schemes for (n, k, members, bias) in scheme_gemms([gemm], s)
        for b in buckets
    ]
    return list(dict.fromkeys(problems))


# ---------------------------------------------------------------------- output


def _console():
    from rich.console import Console

    # Not a terminal (pipe, CliRunner): wide enough that cells are not cut.
    return Console() if sys.stdout.isatty() else Console(width=200, soft_wrap=True)


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:+.1f}%"


def _variant(row: dict) -> str:
    s = row["scheme"] + (" (channel scale)" if row["channel_weight_scale"] else "")
    if row.get("has_bias"):
        s += " +bias"
    if (row["act_dtype"], row["out_dtype"]) != ("bfloat16", "bfloat16"):
        s += f" {row['act_dtype']}->{row['out_dtype']}"
    return s


def _cand(c: dict) -> str:
    from ..tuning.cache import config_label

    return f"{c['backend']}[{config_label(c['config'])}]"


def _print_table(rows: list[dict], *, explain: bool, title: str) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(title))
    # rows of several files (two GPUs, or a GPU's -no-early-launch file too): say whose, or
    # one key read as two identical decisions
    files = len({r.get("file") for r in rows}) > 1
    if files:
        table.add_column("cache file")
    for col in ("shape NxK", "scheme", "M", "winner", "us", "GB/s"):
        # the winner's config is what --explain is for: wrapped, never cut ("nu...")
        table.add_column(col, justify="right" if col in ("M", "us", "GB/s") else "left",
                         overflow="fold" if col == "winner" else "ellipsis")
    if explain:
        table.add_column("% ceiling", justify="right")
        table.add_column("runners-up (us)", overflow="fold")
        table.add_column("margin", justify="right")
        table.add_column("vs other backend", justify="right")
        table.add_column("measured")
    else:
        table.add_column("date")
    for r in rows:
        w = r["winner"]
        cells = [Path(r["file"]).stem] if files else []
        cells += [f"{r['n']}x{r['k']}", _variant(r), str(r["m_bucket"])]
        if w is None:
            cells += ["all candidates failed", "-", "-"]
        else:
            g = r.get("graph_winner")  # what a CUDA graph runs instead (a tie)
            cells += [_cand(w) + (f"; CUDA graphs: {_cand(g)} {_us(g['median_us'])} us"
                                  if g else ""), _us(w["median_us"]), f"{w['gbps']:.0f}"]
        if explain:
            frac = None if w is None else w.get("ceiling_fraction")
            ups = "; ".join(f"{_cand(c)} {_us(c['median_us'])}" for c in r["runners_up"])
            pruned = sum(r["pruned"].values())
            cells += [
                "-" if frac is None else f"{frac * 100:.0f}%",
                ups or "-",
                _pct(r["margin"]) + (" within noise" if r.get("within_noise") else ""),
                _pct(r["margin_other_backend"]),
                f"{r['measured']} ok, {len(r['failed'])} failed, {pruned} pruned"
                + (f", seeded from M={r['seeded_from'].split('_')[0][1:]}"
                   if r.get("seeded_from") else "")
                + (f", chosen in context ({_context_step(r['context'])})"
                   if r.get("context") else ""),
            ]
        else:
            cells.append(r["date"])
        table.add_row(*(Text(c) for c in cells))  # Text: '[...]' is not markup
    console = _console()
    console.print(table)
    if any(r.get("graph_winner") for r in rows):
        from ..tuning.cache import HOST_TIE

        console.print(f"CUDA graphs: a tie (within {HOST_TIE:.1%} of the fastest) goes to the "
                      "cheapest eager host path in eager calls and to the fastest GPU time in "
                      "a CUDA graph (FP8TOWER_HOST_TIE=1 / 0: one rule for both).", markup=False)
    if explain:
        console.print("margin: how much slower the runner-up is than the winner (within "
                      "noise: less than the larger timing spread of the two, so their order "
                      "is not established); GB/s: decimal, bytes per GEMM (FP8 weights, "
                      "scales, activations, output) / median time.", markup=False)
        for r in rows:
            for f in r["failed"]:
                console.print(f"failed {r['key']} {_cand(f)}: {f['error']}", markup=False)


def _context_step(context: dict) -> str:
    """The step an in-context choice was made in, with its stand-in kernel (entries written
    before it was recorded have none)."""
    standin = context.get("standin")
    return str(context.get("step")) + (f", stand-in {standin}" if standin else "")


def _sort_key(row: dict):
    return (row["n"], row["k"], _variant(row), row["m_bucket"])


# ---------------------------------------------------------------------- commands


@app.command()
def tune(
    model: Model = None,
    shapes: Shapes = None,
    m: Annotated[str, typer.Option(
        "--m", help="Token counts M (each tunes its power-of-two bucket: --m 100 tunes the key "
        "of M = 65-128; above 64, prefill, auto tunes no miss by itself).")] = DEFAULT_M,
    scheme: Annotated[str | None, typer.Option(
        "--scheme", help="Schemes, comma-separated (default: the model's scheme hint, else "
        f"{ALL_SCHEMES}).")] = None,
    merged: Merged = None,
    parts: Parts = None,
    tp: Tp = 1,
    act_dtype: Annotated[str, typer.Option(
        "--act-dtype", help=f"Activation dtype: {', '.join(ACT_DTYPES)} (FP8: per_tensor with "
        "a static scale only, the FP8 call fp8_linear takes).")] = "bfloat16",
    out_dtype: Annotated[str, typer.Option(
        "--out-dtype", help=f"Output dtype: {', '.join(OUT_DTYPES)}.")] = "bfloat16",
    channel_scale: Annotated[bool, typer.Option(
        "--channel-scale",
        help="Every per_tensor key with a per-channel scale vector (as after an exact merge; "
        "a --model's merge groups get it without this flag, and so does every key of a "
        "--model whose quantization config stores (N,) per_tensor weight scales: "
        "compressed-tensors' channel weights with tensor activations).")] = False,
    static_act_scale: Annotated[bool | None, typer.Option(
        "--static-act-scale/--dynamic-act-scale",
        help="per_tensor with a static activation scale (ModelOpt input_scale, the tower's), "
        "or dynamic: layers quantized without act_scale (convert of a bf16 model, "
        "quantize_weight, AutoFP8's activation_scheme dynamic) look up the dynamic keys. "
        "Default: what a --model's quantization config says, else static.",
        show_default=False)]
    = None,
    bias: Annotated[bool, typer.Option(
        "--bias", help="The keys of calls that add a bias (timed with one: cuBLASLt, CUTLASS "
        "and cuDNN add it with a kernel of their own, Triton in its GEMM; a --model's linears "
        "with a bias get them without this flag).")] = False,
    retune: Annotated[bool, typer.Option(
        "--retune", help="Tune again even if cached (as FP8TOWER_RETUNE=1 does).")] = False,
    max_configs: Annotated[int | None, typer.Option(
        "--max-configs", callback=at_least(0),
        help="At most this many configs per backend from the evenly spaced sample of its search "
        "space (default: 16, fp8tower.tuning.search.MAX_CONFIGS). Not bounded by it: each "
        "backend's default and priority configs (a handful), the winners of the shape's tuned "
        "keys at other M groups, the refinements of the winner and of each other backend's "
        "best within 1.2x of the fastest, and the winner's layout variants: 0 still times those.")]
    = None,
    full: Annotated[bool, typer.Option(
        "--full",
        help="Explore every M bucket. Default: buckets sharing a tile group (M = 1..16) "
        "with an explored one time the defaults and its 3 best configs instead of a sample.")]
    = False,
    precompile: Annotated[bool, typer.Option(
        "--precompile/--no-precompile",
        help="Build the Triton configs the tuning samples first, in parallel processes.")]
    = True,
    ceiling: Annotated[bool, typer.Option(
        "--ceiling/--no-ceiling",
        help="Measure the GPU's read ceiling first (GB/s as a fraction of it).")] = True,
    in_context: Annotated[bool, typer.Option(
        "--in-context",
        help="Then re-rank each key's few best candidates by the model's whole decode step "
        "(its FP8 tower with random weights, CUDA graph; needs --model): one pass per scheme, "
        "arm and M bucket, the step timed twice per candidate and a move confirmed by four more "
        "timings (current, challenger, challenger, current), tried for up to 3 challengers, "
        "fastest first (fp8tower.tower.context).")]
    = False,
    standin: Annotated[str, typer.Option(
        "--standin", help="With --in-context, the step's stand-ins. " + STANDIN_HELP
        + " rows_fp8 makes the GEMMs after a stand-in read FP8 x: their own keys, tuned and "
        "re-ranked in that step.")] = "torch",
    explain: TuneExplain = False,
    as_json: Json = False,
) -> None:
    """Pre-tune GEMM shapes (a model's FP8 tower or --shapes) on this GPU; cache the choices."""
    import torch

    from ..formats import Scheme
    from ..problem import m_bucket
    if not model and not shapes:
        raise _bad("give --model and/or --shapes", param_hint="--model/--shapes")
    if in_context and not model:
        raise _bad("--in-context times a model's decode step: give --model",
                   param_hint="--in-context")
    if standin != "torch" and not in_context:
        raise _bad(f"--standin {standin} chooses the stand-ins of the step --in-context times: "
                   "add --in-context, or leave --standin out", param_hint="--standin")
    parts = _model_options(model, merged, parts, tp)
    ms = _parse_ms(m)
    adt = _parse_dtype(act_dtype, "--act-dtype", ACT_DTYPES)
    odt = _parse_dtype(out_dtype, "--out-dtype", OUT_DTYPES)
    if in_context:
        # the step is built as a model runs (bf16 in and out, per_tensor's static scale, no
        # bias, scalar scales where unmerged): it would re-rank those keys, not these
        other = [f for f, on in (("--dynamic-act-scale", static_act_scale is False),
                                 ("--channel-scale", channel_scale), ("--bias", bias),
                                 (f"--act-dtype {act_dtype}", adt != torch.bfloat16),
                                 (f"--out-dtype {out_dtype}", odt != torch.bfloat16)) if on]
        if other:
            raise _bad(
                f"--in-context re-ranks the keys the model's decode step runs (bf16, static "
                f"per_tensor scale, no bias), not the keys {', '.join(other)} make: tune "
                "those without --in-context", param_hint="--in-context")
    gemms, spec = _gemms_from(model, shapes, merged, parts, tp)
    if in_context and any(bias for *_, bias in gemms):
        # the tower (tower/build.py) runs its GEMMs without the model's biases: it would
        # re-rank the bias-free keys, not the -bias ones this model's calls pose
        raise _bad(f"--in-context: {spec.name}'s GEMMs add a bias (attention_bias / mlp_bias, "
                   "Qwen2's q/k/v), which the tower's decode step does not run: tune without "
                   "--in-context", param_hint="--in-context")
    scheme_given = scheme is not None
    if scheme is None:
        scheme = (spec.scheme_hint if spec is not None else None) or ALL_SCHEMES
        if "block128" in _csv(scheme) and _block_left_out(spec):
            scheme = ",".join(s for s in _csv(scheme) if s != "block128")
    else:
        _check_block_shards(spec, _parse_schemes(scheme), f"--scheme {scheme}")
    schemes = _parse_schemes(scheme)
    static_act_scale, channel_scale = _model_scale_keys(
        spec if Scheme.PER_TENSOR in schemes else None, static_act_scale, channel_scale, adt,
        in_context)
    if in_context:
        from ..tower.build import STANDIN_KERNELS
        check_standin(standin, STANDIN_KERNELS, [s.value for s in schemes])
    if adt == torch.float8_e4m3fn:
        others = [s.value for s in schemes if s is not Scheme.PER_TENSOR]
        if others or not static_act_scale:  # every conflict in one line, as the user typed it
            given = "--scheme" if scheme_given else "the default --scheme"
            what = [f"{given} {','.join(others)}"] if others else []
            fix = ["give --scheme per_tensor"] if others else []
            if not static_act_scale:
                what.append("--dynamic-act-scale")
                fix.append("drop --dynamic-act-scale")
            raise fail(f"--act-dtype float8_e4m3fn with {' and '.join(what)}: fp8_linear "
                       f"takes FP8 activations for per_tensor with a static scale only "
                       f"({' and '.join(fix)})")
    for x in ms:
        if m_bucket(x) != x:
            typer.echo(f"note: --m {x} tunes the key of its bucket, M = {m_bucket(x)} (it "
                       f"serves M = {m_bucket(x) // 2 + 1}-{m_bucket(x)})", err=True)
    # no check_standin_device: tune needs a GPU whatever the stand-in (its advice, the CPU
    # interpreter, would not serve here)
    if not torch.cuda.is_available():
        raise fail("tune: tuning needs a CUDA GPU, and none is visible here "
                   "(torch.cuda.is_available() is False). Run it on the GPU that will serve.")

    from .. import dispatch
    from ..tuning.ceiling import measure_read_ceiling
    from ..tuning.search import MAX_CONFIGS
    from ..tuning.tuner import pretune

    max_configs = MAX_CONFIGS if max_configs is None else max_configs

    buckets = sorted({m_bucket(x) for x in ms})
    problems = tune_problems(gemms, schemes, buckets, act_dtype=adt, out_dtype=odt,
                             capability=torch.cuda.get_device_capability(),
                             channel_scale=channel_scale, static_act_scale=static_act_scale,
                             has_bias=bias)
    gbps = None
    if ceiling:
        try:
            gbps = measure_read_ceiling()
        except torch.cuda.OutOfMemoryError as e:
            typer.echo(f"read ceiling not measured (out of memory: {e})", err=True)
    # progress on stderr, with --json too (its JSON goes to stdout); retune None: the
    # dispatcher's own (FP8TOWER_RETUNE), which --retune=False passed over
    entries = pretune(dispatch.default_dispatcher(), problems, retune=True if retune else None,
                      read_ceiling_gbps=gbps, max_configs=max_configs, full=full,
                      precompile=precompile)
    context_rows = []
    if in_context:
        from ..tower.build import standin_kernel
        tuned = {p.key() for p in problems}

        def pretune_step(step_problems) -> None:
            # the keys only a step poses (rows_fp8's FP8-x keys): tuned as tune's own, not by
            # the warm-up's default pretune (which the policy may forbid: nothing to compare)
            todo = [p for p in step_problems if p.key() not in tuned]
            tuned.update(p.key() for p in todo)
            if todo:
                pretune(dispatch.default_dispatcher(), todo, retune=True if retune else None,
                        read_ceiling_gbps=gbps, max_configs=max_configs, full=full,
                        precompile=precompile)

        with standin_kernel(standin):  # rows_fp8: the steps pose the FP8-x keys
            context_rows, stepped = _refine_in_context(spec, schemes, buckets, merged, parts,
                                                       progress=True, pretune_step=pretune_step)
        d = dispatch.default_dispatcher()  # the refined entries replace the tuned ones
        entries = [d.entries_for(e.problem).get(e.key, e) for e in entries]
        # and the keys only the step poses (rows_fp8's FP8-x keys) join the decisions
        known = {e.key for e in entries}
        for p in stepped:
            e = d.entries_for(p).get(p.key())
            if e is not None and e.key not in known:
                known.add(e.key)
                entries.append(e)
    rows = sorted((_served_row(e) for e in entries), key=_sort_key)
    if model and not in_context and buckets[-1] >= IN_CONTEXT_HINT_M:
        typer.echo(IN_CONTEXT_HINT, err=True)
    name = torch.cuda.get_device_name()
    if as_json:
        tp_key = {"tp": tp} if model else {}  # as bench tower's record
        typer.echo(json.dumps({"gpu": name, **tp_key, "read_ceiling_gbps": gbps,
                               "decisions": rows, "in_context": context_rows}, indent=2))
        return
    title = f"{name}: {len(rows)} tuned keys" + (f", read ceiling {gbps:.0f} GB/s" if gbps else "")
    _print_table(rows, explain=explain, title=title)
    for r in rows:
        if "served" in r:
            s = r["served"]
            typer.echo(f"note: {r['key']}: the cached winner cannot run here; dispatch serves "
                       f"{s['backend']} {s['config']}", err=True)
    if context_rows:
        _print_context(context_rows, explain=explain)


def _served_row(entry) -> dict:
    """explain_row of ``entry``, with ``served`` where dispatch serves another candidate than
    its winner (one that cannot run here: FP8TOWER_BACKENDS, a missing optional package).
    Before, `tune` printed the winner whatever dispatch served."""
    from .. import dispatch
    from ..tuning.cache import explain_row, normalize_config

    row = explain_row(entry)
    if not entry.ranked():
        return row
    choice = dispatch.default_dispatcher().choice(entry.problem, entry)
    w = entry.winner
    if choice is not None and (choice[0].name, normalize_config(choice[1])) != \
            (w.backend, normalize_config(w.config)):
        row["served"] = {"backend": choice[0].name, "config": normalize_config(choice[1])}
    return row


def _refine_in_context(spec, schemes, buckets, merged, parts, *, progress: bool,
                       pretune_step=None) -> tuple[list[dict], list]:
    """tower.context.refine over the model's tower per scheme, arm and M bucket (progress
    on stderr, one line per key); its rows, and the GemmProblems the steps ran.
    ``pretune_step(problems)``, given, is called with each step's problems before it is
    refined (tune tunes there the keys its own pretune did not)."""
    import torch

    from ..nn.merged import MergeError
    from ..tower.build import build_tower
    from ..tower.context import refine

    arms = ("unmerged", "merged") if merged is None else ("merged" if merged else "unmerged",)
    rows = []
    # A key both arms run (every layer's out_proj) is refined by each arm's pass; the cache
    # holds one choice per key, so the later pass's decision is the one saved. Both passes
    # stay (each step's ranking is evidence; skipping the later one would leave that step's
    # choice untimed) and the earlier row is marked superseded_by: <arm>, not reported as held.
    decided: dict[str, dict] = {}
    stepped = []
    for s in schemes:
        for arm in arms:
            try:
                tower = build_tower(spec, scheme=s, arm=arm, backend="auto", m=buckets[0],
                                    parts=tuple(_csv(parts)))
            except MergeError as e:  # block128 shards of N not a multiple of 128: tune_problems
                # posed the members' keys (the unmerged arm's), which that arm refines
                rows.append({"scheme": s.value, "arm": arm, "m": "-", "key": "-",
                             "kept": f"skipped: {e}", "candidates": [],
                             "note": "the arm cannot be built"})
                if progress:
                    typer.echo(f"in context: {spec.name} {s.value} {arm}: skipped ({e})",
                               err=True)
                continue
            for b in buckets:
                tower.reconfigure(m=b)
                stepped += tower.gemm_problems()
                if progress:
                    typer.echo(f"in context: {spec.name} {s.value} {arm} M={b}", err=True)
                if pretune_step is not None:
                    pretune_step(tower.gemm_problems())
                advance = (lambda what: typer.echo(f"  {what}", err=True)) if progress else None
                for r in refine(tower, advance=advance):
                    row = {"scheme": s.value, "arm": arm, "m": b, **r}
                    if "ms_after" in row:  # this pass timed the key and saved its choice
                        if row["key"] in decided:
                            decided[row["key"]]["superseded_by"] = arm
                        decided[row["key"]] = row
                    rows.append(row)
            del tower
            torch.cuda.empty_cache()
    return rows, stepped


def _print_context(rows: list[dict], *, explain: bool = False) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text("in context: ms per decode step with each key's choice"))
    for col in ("scheme", "arm", "M", "stand-in", "key", "kept", "ms before", "ms after",
                "timed"):
        table.add_column(col, justify="right" if col in ("M", "ms before", "ms after", "timed")
                         else "left")
    for r in rows:
        kept = (r["kept"] or "-") + (f" (superseded by {r['superseded_by']})"
                                     if r.get("superseded_by") else "")
        cells = [r["scheme"], r["arm"], str(r["m"]), r.get("standin", "-"), r["key"], kept,
                 f"{r['ms_before']:.4f}" if "ms_before" in r else "-",
                 f"{r['ms_after']:.4f}" if "ms_after" in r else "-", str(len(r["candidates"]))]
        table.add_row(*(Text(c) for c in cells))
    _console().print(table)
    if explain:
        _print_context_gaps(rows)


def _print_context_gaps(rows: list[dict]) -> None:
    """--explain: each candidate the step timed, against the key's current choice, in the
    tuner's chain (us a call) and in the step (us a GEMM of the key): where they disagree,
    the chain alone would have chosen otherwise (tower/context.py's evidence). Rows written
    before those gaps were recorded show '-'."""
    from rich.table import Table
    from rich.text import Text

    def us(v) -> str:
        return f"{v:+.2f}" if isinstance(v, (int, float)) else "-"

    table = Table(title=Text("in context: each candidate against the current choice (us; "
                             "chain: a call, step: a GEMM of the key)"))
    for col in ("scheme", "M", "key", "GEMMs", "candidate", "ms", "chain", "step"):
        table.add_column(col, justify="right" if col in ("M", "GEMMs", "ms", "chain", "step")
                         else "left")
    for r in rows:
        for c in r["candidates"]:
            cells = [r["scheme"], str(r["m"]), r["key"], str(r.get("gemms", "-")), _cand(c),
                     f"{c['ms']:.4f}", us(c.get("chain_delta_us")), us(c.get("step_delta_us"))]
            table.add_row(*(Text(x) for x in cells))
    _console().print(table)


@app.command("dispatch")
def dispatch_cmd(
    file: Annotated[Path | None, typer.Option(
        "--file", help="A cache file (default: this GPU's, or every file in the cache dir "
        "without a GPU).")] = None,
    model: Model = None,
    shapes: Shapes = None,
    m: Annotated[str | None, typer.Option("--m", help="Only the buckets of these M.")] = None,
    scheme: Annotated[str | None, typer.Option("--scheme", help="Only these schemes.")] = None,
    merged: Merged = None,
    parts: Parts = None,
    tp: Tp = 1,
    explain: Explain = False,
    as_json: Json = False,
) -> None:
    """Show the cached dispatch decisions (and with --explain, their evidence)."""
    import torch

    from ..formats import Scheme
    from ..problem import m_bucket
    from ..tuning import cache as tcache

    parts = _model_options(model, merged, parts, tp)
    gemms, spec = _gemms_from(model, shapes, merged, parts, tp)
    # per scheme, the (N, K) its keys have: those `tune` poses for these options (a block128
    # group that cannot merge exactly: its members', as the model runs them)
    nks = {s.value: {(n, k) for n, k, *_ in scheme_gemms(gemms, s)} for s in Scheme}
    buckets = {m_bucket(x) for x in _parse_ms(m)} if m is not None else None
    schemes = None
    if scheme is not None:
        parsed = _parse_schemes(scheme)
        _check_block_shards(spec, parsed, f"--scheme {scheme}")
        schemes = {s.value for s in parsed}
    elif _block_left_out(spec):  # as tune: its rows are keys no rank of this split runs
        schemes = {s.value for s in Scheme} - {Scheme.BLOCK128.value}
    if file is not None:
        if file.is_dir():
            raise _bad(f"{str(file)!r}: is a directory, not a cache file",
                       param_hint="--file")
        if not file.is_file():
            raise _bad(f"{str(file)!r}: no such file", param_hint="--file")
        files = [file]
    elif tcache.default_cache_dir().exists() and not tcache.default_cache_dir().is_dir():
        raise _bad(
            f"the tuning cache folder {str(tcache.default_cache_dir())!r} is a file "
            "(FP8TOWER_CACHE_DIR, else $XDG_CACHE_HOME/fp8tower or ~/.cache/fp8tower)",
            param_hint="FP8TOWER_CACHE_DIR")
    elif torch.cuda.is_available():
        files = [tcache.default_cache_dir() / tcache.cache_file_name(torch.cuda.get_device_name())]
    else:
        files = sorted(tcache.default_cache_dir().glob("*.json"))

    # the setups this machine can check a file against: its GPU's, and the CPU's (cpu.json)
    current = {"cpu": tcache.environment_meta(None)}
    if torch.cuda.is_available():
        meta = tcache.environment_meta(torch.cuda.get_device_name())
        current[meta["gpu"]] = meta
    file_info, rows = [], []
    for path in files:
        f = tcache.read_cache_file(path)
        if file is not None and f.error is not None:
            raise _bad(f"{str(file)!r}: not a tuning cache: {f.error}",
                       param_hint="--file")
        for issue in f.issues:
            typer.echo(f"warning: {issue}", err=True)
        if f.meta is None and not f.entries:
            continue
        # Only this machine's GPU (and CPU) can be checked against its own environment.
        expected = current.get((f.meta or {}).get("gpu"))
        checked = expected is not None
        stale = tcache.meta_mismatch(f.meta, expected) if checked else None
        if stale:
            typer.echo(f"warning: {path} is stale ({stale}); dispatch ignores it", err=True)
        file_info.append({"path": str(path), "meta": f.meta, "checked": checked, "stale": stale})
        for entry in f.entries.values():
            p = entry.problem
            if gemms and (p.n, p.k) not in nks[p.scheme.value]:
                continue
            if buckets is not None and p.m not in buckets:
                continue
            if schemes is not None and p.scheme.value not in schemes:
                continue
            row = tcache.explain_row(entry)
            row["file"] = str(path)
            rows.append(row)
    rows.sort(key=_sort_key)
    if as_json:
        tp_key = {"tp": tp} if model else {}  # as bench tower's record
        typer.echo(json.dumps({"files": file_info, **tp_key, "decisions": rows}, indent=2))
        return
    if not rows:
        where = ", ".join(str(p) for p in files) or f"{tcache.default_cache_dir()} (no files)"
        typer.echo(f"no tuned decisions found in {where}; `fp8tower tune` makes them")
        return
    gpus = sorted({str((fi["meta"] or {}).get("gpu")) for fi in file_info})
    n_files = len({r["file"] for r in rows})
    _print_table(rows, explain=explain, title=f"{', '.join(gpus)}: {len(rows)} cached decisions"
                 + (f" in {n_files} files" if n_files > 1 else ""))
