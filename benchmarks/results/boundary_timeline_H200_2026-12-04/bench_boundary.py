"""Issue #12: where a GEMM's cost beyond its bytes goes, from clocks read inside the kernels.

Sessions 6-29 fitted that cost (2.2-2.6 us a GEMM with PDL, session 24) and tried to hide it,
but never looked inside it: the trace sees a kernel's start and end, not when its programs
began, were released by ``gdc_wait`` or finished. Here every program of every Triton GEMM of the
merged 27B tower writes a record (``stamps.patch``, applied on the GPU machine only: the
kernel's ``STAMP`` constexpr, off in the package): %globaltimer (ns, one clock for all SMs) and
%clock64 (this SM's cycles) when it begins, when its wait returns, when its K loop is done and
after its last store; its SM; whether it summed the split-K partials.

The activation pre-pass kernel (``kernels/act_quant.py``, launched before a GEMM that reads FP8
x: most of per_tensor's tuned choices) writes the same record, its K-loop stamp its end.

Per GEMM i of one step (replayed from the tower's CUDA graph, early launch as the tower runs;
each replay's records read back; means over replays), with bytes_i / the read ceiling the time
of its bytes and ``wait``, ``end`` the median over its programs unless named ``last``:

    interval_i  = wait(i+1) - wait(i)                (what GEMM i adds to the step)
                = bytes_i / ceiling                  (its bytes at the ceiling)
                + body_excess_i = end(i) - wait(i) - bytes_i / ceiling   (ramp, pipeline)
                + tail_i        = end_last(i) - end(i)                   (uneven programs)
                + release_i     = wait(i+1) - end_last(i)    (completion -> next release,
                                  plus whatever runs between: a stand-in, a pre-pass)

The four terms sum to the interval exactly. Where GEMM i + 1's pre-pass p runs between, the
release splits further: ``wait(p) - end_last(i)`` + ``end_last(p) - wait(p)`` + ``wait(i+1) -
end_last(p)`` (``PREPASS_TERMS``). Also per GEMM: how long its programs sat resident before
their release (``resident``: wait - begin, PDL's early launch at work), how far its first
program began before the previous GEMM's last one ended (``early``), and how far apart its first
and last programs were released (``wait_spread``).

Arms ``off`` (STAMP false: the package's kernel) and ``on`` are timed alternately (tower_ab's
method) to show what the stamps cost. ``--probe`` first measures %globaltimer's tick (its
resolution bounds what one replay can resolve; means over replays average the phase).
Run (GPU machine, after ``git apply stamps.patch`` and a restamped cache): see call1.sh.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
import tower_ab

STAMP_WORDS = 16  # int64 words a program's record takes (the patch's layout)
FIELDS = ("t_start", "t_wait", "t_loop", "t_end", "c_start", "c_wait", "c_loop", "c_end",
          "smid", "reducer", "prog", "written")
COL = {f: i for i, f in enumerate(FIELDS)}
TERMS = ("at_ceiling", "body_excess", "tail", "release")
# release split where the next GEMM's pre-pass runs between: its release after this GEMM, its
# own run, the next GEMM's release after it
PREPASS_TERMS = ("release_to_prepass", "prepass_body", "release_after_prepass")
# what install() records of each launch, kept with its GEMM's row (its config: enough to build
# the same kernel offline, kernels/offline.py, for its registers, shared memory and residency)
LAUNCH_KEYS = ("m", "n", "k", "grid", "x_fp8", "scheme_id", "block_n", "block_k", "split_k",
               "num_warps", "num_stages", "prefetch", "pdl", "wo_mode")


# ----------------------------------------------------------------------------- stamp buffers


@dataclass
class Slot:
    """One GEMM launch's records: ``programs`` x STAMP_WORDS words from ``offset``."""

    offset: int
    programs: int
    meta: dict


@dataclass
class StampBook:
    """One int64 buffer; each stamped launch takes the next slice (views only: no kernel is
    launched, so slices may be taken while a CUDA graph is captured)."""

    words: int
    device: torch.device | str
    enabled: bool = False
    used: int = 0
    slots: list[Slot] = field(default_factory=list)

    def __post_init__(self):
        self.buf = torch.zeros(self.words, dtype=torch.int64, device=self.device)

    def reset(self) -> None:
        self.used, self.slots = 0, []

    def take(self, programs: int, meta: dict) -> torch.Tensor:
        n = programs * STAMP_WORDS
        if self.used + n > self.words:
            raise RuntimeError(f"stamp buffer full: {self.used} + {n} words > {self.words} "
                               "(--buffer-mb)")
        self.slots.append(Slot(self.used, programs, meta))
        view = self.buf[self.used:self.used + n]
        self.used += n
        return view


def install(book: StampBook) -> None:
    """Route every Triton GEMM launch and every activation pre-pass launch built from now on
    through ``book`` (when enabled)."""
    from fp8tower.kernels import act_quant, fp8_gemm

    for fn in (fp8_gemm.launch_args, act_quant.quantize_args):
        if "stamp" not in inspect.signature(fn).parameters:
            raise SystemExit("the kernels have no STAMP constexpr: git apply benchmarks/"
                             "results/boundary_timeline_H200_2026-12-04/stamps.patch first")
    gemm_args, quant_args = fp8_gemm.launch_args, act_quant.quantize_args

    def launch_args(w, x, y, *rest, **kw):
        grid, args, kwargs = gemm_args(w, x, y, *rest, **kw)
        if book.enabled:
            programs = grid[0] * grid[1] * grid[2]
            meta = {"kind": "gemm", "m": int(x.shape[0]), "n": int(kw.get("n") or w.shape[0]),
                    "k": int(x.shape[1]), "grid": list(grid), "x_fp8": bool(kw["x_fp8"])}
            meta.update({key: kw.get(key) for key in LAUNCH_KEYS[5:]})
            kwargs["stamp_ptr"] = book.take(programs, meta)
            kwargs["STAMP"] = True
        return grid, args, kwargs

    def quantize_args(x, *rest, **kw):
        grid, args, kwargs, q, scale = quant_args(x, *rest, **kw)
        if book.enabled:
            meta = {"kind": "prepass", "m": int(x.shape[0]), "k": int(x.shape[1]),
                    "grid": list(grid)}
            kwargs["stamp_ptr"] = book.take(grid[0] * grid[1], meta)
            kwargs["STAMP"] = True
        return grid, args, kwargs, q, scale

    fp8_gemm.launch_args = launch_args
    act_quant.quantize_args = quantize_args


# ----------------------------------------------------------------------------- analysis


def _med(t: torch.Tensor) -> float:
    """The median, the mean of the two middle values for an even count (torch's median
    returns the lower one)."""
    return float(t.double().quantile(0.5))


def summarize_slot(rec: torch.Tensor, t0: int, ghz: float | None) -> dict | None:
    """One launch's records (programs x STAMP_WORDS, int64, CPU) as times in us after ``t0``:
    medians over programs, the first / last where named; None if no program wrote one."""
    written = rec[:, COL["written"]]
    if not bool((written == 1).any()):
        return None
    if not bool((written == 1).all()):
        raise RuntimeError(f"{int((written != 1).sum())} of {len(rec)} programs wrote no record")

    def us(name):
        return (rec[:, COL[name]] - t0).double() / 1e3

    start, wait, loop, end = us("t_start"), us("t_wait"), us("t_loop"), us("t_end")
    out = {
        "start_first": float(start.min()), "start": _med(start),
        "wait_first": float(wait.min()), "wait": _med(wait), "wait_last": float(wait.max()),
        "loop": _med(loop), "end": _med(end), "end_last": float(end.max()),
        "end_p90": float(end.quantile(0.9)),  # one straggler, or a broad spread?
        "programs": len(rec), "sms": int(rec[:, COL["smid"]].unique().numel()),
        "reducers": int(rec[:, COL["reducer"]].sum()),
    }
    if ghz:  # the same spans on the SM's own clock (finer than globaltimer's tick)
        spans = (("resident_clock", "c_start", "c_wait"), ("body_clock", "c_wait", "c_end"),
                 ("loop_clock", "c_wait", "c_loop"))
        for key, a, b in spans:
            out[key] = _med(rec[:, COL[b]] - rec[:, COL[a]]) / ghz / 1e3
    return out


def clock_ghz(rec: torch.Tensor, min_span_ns: int = 20_000) -> float | None:
    """The SMs' clock (GHz): per SM, clock64 cycles over globaltimer ns from its first
    program's begin to its last one's end (a span long enough that globaltimer's tick is a
    small error), the median over SMs; None when no SM's span reaches ``min_span_ns``."""
    rates = []
    for sm in rec[:, COL["smid"]].unique().tolist():
        r = rec[rec[:, COL["smid"]] == sm]
        first, last = int(r[:, COL["t_start"]].argmin()), int(r[:, COL["t_end"]].argmax())
        dt = int(r[last, COL["t_end"]] - r[first, COL["t_start"]])
        if dt >= min_span_ns:
            rates.append(int(r[last, COL["c_end"]] - r[first, COL["c_start"]]) / dt)
    return statistics.median(rates) if rates else None


def align(rec: torch.Tensor) -> torch.Tensor:
    """``rec`` (the records of one replay, all launches) with its four globaltimer stamps
    replaced by its clock64 stamps mapped onto globaltimer, one line fitted per SM (least
    squares over all that SM's stamp pairs): clock64 counts every cycle, globaltimer may tick
    coarsely (``--probe``), and the fit averages its rounding over the SM's many stamps."""
    out = rec.clone()
    t_cols = [COL[f] for f in ("t_start", "t_wait", "t_loop", "t_end")]
    c_cols = [COL[f] for f in ("c_start", "c_wait", "c_loop", "c_end")]
    t0 = int(rec[:, t_cols].min())
    for sm in rec[:, COL["smid"]].unique().tolist():
        rows = rec[:, COL["smid"]] == sm
        c = rec[rows][:, c_cols]
        c0 = int(c.min())
        x = (c - c0).double().flatten()
        y = (rec[rows][:, t_cols] - t0).double().flatten()
        if float(x.max() - x.min()) <= 0:
            continue  # one instant only: nothing to fit, keep globaltimer's stamps
        xm, ym = x.mean(), y.mean()
        slope = ((x - xm) * (y - ym)).sum() / ((x - xm) ** 2).sum()
        fitted = ym + slope * ((c - c0).double() - xm)
        out[rows.nonzero().flatten()[:, None], torch.tensor(t_cols)] = fitted.round().long() + t0
    return out


def between(ops: list[dict], gemms: list[int], prepass: list[bool]) -> list[str]:
    """What lies between stamped GEMM j and j + 1 (``gemms``: their indices into ``ops``, the
    step's op sequence): the kinds of the ops in between, and ``prepass`` where GEMM j + 1
    takes FP8 x from the activation pre-pass (``prepass[j + 1]``: its own kernel before it)."""
    out = []
    for j in range(len(gemms) - 1):
        kinds = [ops[i]["what"] for i in range(gemms[j] + 1, gemms[j + 1])]
        if prepass[j + 1]:
            kinds.append("prepass")
        out.append("+".join(kinds) or "gemm")
    return out


def analyze(replays: list[list[dict]], ops: list[dict], gemms: list[int],
            ceiling_gbs: float) -> dict:
    """Per stamped GEMM (launch order) the decomposition of the module doc, means over
    replays; ``replays``: per replay, the slot summaries in launch order; ``ops``: the step's
    op sequence (``what``: "gemm" for a stamped Triton GEMM, else what it is; ``bytes``:
    bytes moved; ``label``); ``gemms``: the stamped GEMMs' indices into ``ops``. A slot's
    ``x_fp8`` (its launch reads x from the pre-pass) names that kernel in ``next``."""
    n = len(gemms)
    for r, slots in enumerate(replays):
        if len(slots) != n:
            raise ValueError(f"replay {r}: {len(slots)} stamped launches, the step has {n}")
        for j, s in enumerate(slots):  # launch order must be the step's order of GEMMs
            op = ops[gemms[j]]
            if "n" in s and (s["n"], s["k"]) != (op["n"], op["k"]):
                raise ValueError(f"replay {r}, launch {j}: {s['n']}x{s['k']} where the step "
                                 f"runs {op['label']} {op['n']}x{op['k']}")
    gaps = between(ops, gemms, [bool(s.get("x_fp8")) for s in replays[0]])
    rows = []
    for j in range(n):
        op = ops[gemms[j]]
        at_ceiling = op["bytes"] / ceiling_gbs / 1e3  # bytes / (GB/s) -> us
        acc: dict[str, list[float]] = {}
        add = lambda key, value, acc=acc: acc.setdefault(key, []).append(value)

        for slots in replays:
            s = slots[j]
            add("body", s["end"] - s["wait"])
            add("body_excess", s["end"] - s["wait"] - at_ceiling)
            add("tail", s["end_last"] - s["end"])
            add("tail_p90", s["end_p90"] - s["end"])
            add("resident", s["wait"] - s["start"])
            add("wait_spread", s["wait_last"] - s["wait_first"])  # all released at once?
            add("loop_to_end", s["end"] - s["loop"])
            for key in ("resident_clock", "body_clock", "loop_clock"):
                if key in s:
                    add(key, s[key])
            if j > 0:
                add("early", slots[j - 1]["end_last"] - s["start_first"])
            if j + 1 < n:
                nxt = slots[j + 1]
                add("interval", nxt["wait"] - s["wait"])
                add("release", nxt["wait"] - s["end_last"])
                p = nxt.get("prepass")
                if p is not None:  # release = to the pre-pass + its body + after it
                    add("release_to_prepass", p["wait"] - s["end_last"])
                    add("prepass_body", p["end_last"] - p["wait"])
                    add("release_after_prepass", nxt["wait"] - p["end_last"])
        row = {"pos": j, "label": op["label"], "n": op["n"], "k": op["k"],
               "bytes": op["bytes"], "at_ceiling": round(at_ceiling, 4),
               "next": gaps[j] if j + 1 < n else None,
               "programs": replays[0][j]["programs"], "sms": replays[0][j]["sms"],
               "launch": {key: replays[0][j][key] for key in LAUNCH_KEYS
                          if key in replays[0][j]}}
        for key, vals in acc.items():
            row[key] = round(statistics.fmean(vals), 4)
            row[key + "_sd"] = round(statistics.pstdev(vals), 4)
        if "interval" in row:
            row["beyond"] = round(row["interval"] - at_ceiling, 4)
        rows.append(row)
    return {"gemms": rows, "by_next": group_means(rows, "next"),
            "by_label": group_means(rows, "label")}


def group_means(rows: list[dict], key: str) -> dict:
    """Means of the decomposition's terms over the GEMMs that share ``key`` (with an interval)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if "interval" in r:
            groups.setdefault(str(r[key]), []).append(r)
    out = {}
    for name, rs in sorted(groups.items()):
        out[name] = {"count": len(rs)}
        for t in ("interval", "beyond", *TERMS[1:], "tail_p90", "resident", "early",
                  "wait_spread", "body_clock", "loop_to_end", *PREPASS_TERMS):
            vals = [r[t] for r in rs if t in r]
            if vals:
                out[name][t] = round(statistics.fmean(vals), 4)
    return out


# ----------------------------------------------------------------------------- the GPU run


def probe_timer(device, n: int = 4096) -> dict:
    """%globaltimer read ``n`` times back to back by one program: its tick (the smallest step
    between distinct readings) and how often it advanced."""
    import triton
    import triton.language as tl

    @triton.jit
    def _ticks(out_ptr, N: tl.constexpr):
        for i in range(N):
            tl.store(out_ptr + i, tl.extra.cuda.globaltimer())

    out = torch.zeros(n, dtype=torch.int64, device=device)
    _ticks[(1,)](out, n)
    torch.cuda.synchronize(device)
    v = out.cpu()
    d = v[1:] - v[:-1]
    steps = d[d > 0]
    return {"reads": n, "span_ns": int(v[-1] - v[0]), "distinct": int(v.unique().numel()),
            "tick_ns_min": int(steps.min()) if len(steps) else None,
            "tick_ns_median": _med(steps) if len(steps) else None}


def step_ops(tower) -> tuple[list[dict], list[int]]:
    """The step's ops as ``analyze`` takes them, and the indices of its Triton GEMMs."""
    ops, gemms = [], []
    for i, op in enumerate(tower.ops()):
        d = {"label": op.label, "n": op.n, "k": op.k, "bytes": op.bytes_moved}
        if op.kind == "gemm" and op.backend == "triton":
            d["what"] = "gemm"
            gemms.append(i)
        else:
            d["what"] = op.kind if op.kind != "gemm" else f"gemm:{op.backend}"
        ops.append(d)
    return ops, gemms


def read_replays(tower, book: StampBook, replays: int) -> list[list[tuple]]:
    """Replay the tower's graph ``replays`` times; after each, the (records, metadata) of
    every stamped launch that wrote (the graph's last step: a plan's launches reuse its
    slice, so each holds the last step's records)."""
    out = []
    for _ in range(replays):
        book.buf[:book.used].zero_()
        tower.replay(1)
        if tower.device.type == "cuda":
            torch.cuda.synchronize(tower.device)
        host = book.buf[:book.used].cpu().view(-1, STAMP_WORDS)
        recs = [(host[s.offset // STAMP_WORDS: s.offset // STAMP_WORDS + s.programs], s.meta)
                for s in book.slots]
        recs = [(r, meta) for r, meta in recs if bool((r[:, COL["written"]] == 1).any())]
        if not recs:
            raise RuntimeError("no stamped launch wrote a record")
        out.append(recs)
    return out


def attach_prepasses(slots: list[dict]) -> list[dict]:
    """The GEMM launches of ``slots`` (in launch order), each with the activation pre-pass
    launched just before it, if any, under ``prepass``. A pre-pass followed by another one
    served a GEMM that is not stamped (cuBLASLt, cuDNN and CUTLASS take x from the same
    pre-pass kernel: channel_token's auto picks them for some shapes, session 35's crash);
    it is dropped here, and that GEMM's op shows in ``next`` (``gemm:<backend>``)."""
    out, pending = [], None
    for s in slots:
        if s.get("kind") == "prepass":
            pending = s
        else:
            out.append(s if pending is None else {**s, "prepass": pending})
            pending = None
    return out


def decompose(replays: list[list[tuple]], ops: list[dict], gemms: list[int],
              ceiling: float) -> dict:
    """``analyze`` of the replays' records as globaltimer stamped them (``raw``) and mapped
    through each SM's clock64 (``aligned``), the launches put in launch order; where the
    records hold several steps' launches, the last step's."""
    modes: dict[str, list[list[dict]]] = {"raw": [], "aligned": []}
    ghz_seen = []
    n = len(gemms)
    for recs in replays:
        whole = torch.cat([r for r, _ in recs])
        ghz = clock_ghz(whole)
        ghz_seen.append(ghz)
        for mode, src in (("raw", whole), ("aligned", align(whole) if ghz else None)):
            if src is None:
                continue
            t0 = int(src[:, COL["t_start"]].min())
            parts = src.split([len(r) for r, _ in recs])
            slots = [{**summarize_slot(part, t0, ghz), **meta}
                     for part, (_, meta) in zip(parts, recs)]
            slots = attach_prepasses(sorted(slots, key=lambda s: s["start_first"]))
            if len(slots) != n:  # several steps in distinct slots: keep the last step's
                if len(slots) % n:
                    raise RuntimeError(f"{len(slots)} stamped launches, not a multiple of "
                                       f"the step's {n} Triton GEMMs")
                slots = slots[-n:]
            modes[mode].append(slots)
    out = {mode: analyze(per, ops, gemms, ceiling) for mode, per in modes.items() if per}
    out["clock_ghz"] = [round(g, 4) for g in ghz_seen if g][:5]
    out["first_replay"] = modes["raw"][0]
    return out


def measure_row(tower, book: StampBook, scheme: str, m: int, args, ceiling: float, *,
                time_tower, reset) -> dict:
    """One (scheme, M): arms off / on timed alternately (``reset`` drops dispatch's memo and
    the launch plans, which are rebuilt through the book or not), then the timeline of the
    tower as last captured (the on arm)."""
    times: dict[str, list[float]] = {"off": [], "on": []}
    outs = {}
    for _ in range(args.rounds):
        for arm in ("off", "on"):
            book.enabled = arm == "on"
            book.reset()
            reset()
            tower.reconfigure(m=m)
            t = time_tower(tower, replays=args.replays, steps=args.steps,
                           early=False if args.no_early else None)
            times[arm].append(t.ms_per_step)
            outs[arm] = tower.static_y.clone()
    ops, gemms = step_ops(tower)
    row = {"scheme": scheme, "m": m, "steps": args.steps, "early": not args.no_early,
           "override": args.override,
           "ms_off": round(statistics.median(times["off"]), 4),
           "ms_on": round(statistics.median(times["on"]), 4),
           "runs": {a: [round(v, 4) for v in vs] for a, vs in times.items()},
           "bits_equal": bool(torch.equal(outs["off"], outs["on"])),
           "triton_gemms": len(gemms), "ops": len(ops),
           "other_ops": sorted({o["what"] for o in ops if o["what"] != "gemm"})}
    row["on_over_off"] = round(row["ms_on"] / row["ms_off"], 4)
    row.update(decompose(read_replays(tower, book, args.timeline_replays), ops, gemms, ceiling))
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    tower_ab.add_arguments(ap)
    ap.add_argument("--schemes", default="per_tensor,channel_token")
    ap.add_argument("--timeline-replays", type=int, default=30,
                    help="replays whose stamps are read back (means over them)")
    ap.add_argument("--buffer-mb", type=int, default=512, help="stamp buffer (MiB of int64)")
    ap.add_argument("--probe", action="store_true", help="measure %%globaltimer's tick first")
    ap.add_argument("--no-early", action="store_true",
                    help="capture without early launch (graph_edges): PDL kernels then start "
                         "when their predecessor's last program exits")
    ap.add_argument("--override", default="cached",
                    help="KEY=VALUE[;KEY=VALUE][@NxK] set on every cached Triton config (or the "
                         "shape's), as "
                         "benchmarks/bench_override.py's arms (e.g. prequant=false: x quantized "
                         "in the GEMM, no pre-pass); default: the cached configs")
    args = ap.parse_args(argv)
    from bench_override import check_shapes, parse_arm

    try:
        override = parse_arm(args.override)
        check_shapes({args.override: override}, args.model)
    except SystemExit as e:  # its message names bench_override's own option
        raise SystemExit(str(e).replace("--arms:", "--override:", 1)) from None
    if not torch.cuda.is_available():
        raise SystemExit("bench_boundary.py needs a CUDA GPU")
    if override.parts:
        tower_ab.patch_triton_choices(override.apply)
    from fp8tower import dispatch
    from fp8tower.tower.build import build_tower
    from fp8tower.tower.timing import time_tower
    from fp8tower.tuning.ceiling import measure_read_ceiling

    t_begin = time.time()
    device = torch.device("cuda")
    book = StampBook(args.buffer_mb * 2**20 // 8, device)
    install(book)
    doc = {"args": vars(args), "rows": []}
    if args.probe:
        doc["timer"] = probe_timer(device)
        print("globaltimer:", json.dumps(doc["timer"]), flush=True)
    ceiling = measure_read_ceiling(device)
    doc["ceiling_gbs"] = round(ceiling, 1)
    print(f"read ceiling {ceiling:.0f} GB/s", flush=True)
    ms = [int(v) for v in args.m.split(",")]
    for scheme in args.schemes.split(","):
        tower = build_tower(args.model, scheme=scheme, arm="merged", backend="auto", m=ms[0])
        for m in ms:
            row = measure_row(tower, book, scheme, m, args, ceiling, time_tower=time_tower,
                              reset=dispatch.reset)
            doc["rows"].append(row)
            print(f"{scheme} M={m}: {row['ms_off']:.4f} ms/step off, {row['ms_on']:.4f} on "
                  f"({row['on_over_off']:.3f}); bits equal {row['bits_equal']}", flush=True)
            for mode in ("raw", "aligned"):
                if mode in row:
                    print(f"  {mode}:")
                    print_groups(row[mode]["by_next"])
        del tower
        torch.cuda.empty_cache()
    from fp8tower import provenance

    doc = {**provenance.record(), "seconds": round(time.time() - t_begin, 1), **doc}
    with open(args.json, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    return 0


SHORT = {"body_excess": "body_ex", "release_to_prepass": "to_pre", "prepass_body": "pre_body",
         "release_after_prepass": "after_pre"}


def print_groups(groups: dict) -> None:
    """One line per kind of boundary: the mean decomposition (us)."""
    cols = ("count", "interval", "beyond", "body_excess", "tail", "release", "resident", "early",
            *PREPASS_TERMS)
    print("  next".ljust(34) + "".join(SHORT.get(c, c).rjust(12) for c in cols))
    for name, g in groups.items():
        cells = "".join((f"{g[c]:12.3f}" if isinstance(g.get(c), float) else
                         str(g.get(c, "-")).rjust(12)) for c in cols)
        print(f"  {name[:32]:32s}{cells}")


if __name__ == "__main__":
    raise SystemExit(main())
