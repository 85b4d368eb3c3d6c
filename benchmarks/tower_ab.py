"""The merged tower timed per arm of a knob, arms alternated (benchmarks that patch one knob
of the cached configs or kernels: bench_prefetch_depth.py, bench_prepass_group.py).

Per scheme and M, one merged tower with ``auto`` (the tuning cache in FP8TOWER_CACHE_DIR):
for each arm, ``set_arm(arm)`` sets the knob, dispatch's memo and the tower's launch plans
re-resolve, and the step is timed (CUDA graph of ``steps`` steps, ``replays`` replays,
median), ``rounds`` passes over the arms, every other one in reverse (ABBA); outputs compared
bit for bit with the first arm's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch

from fp8tower import dispatch, provenance
from fp8tower.formats import Scheme
from fp8tower.tower.build import build_tower
from fp8tower.tower.timing import time_tower


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options every such benchmark takes: the model, M, rounds, steps, replays, JSON."""
    ap.add_argument("--model", default="qwen3.5-27b")
    ap.add_argument("--m", default="1,8", help="comma list of M")
    ap.add_argument("--rounds", type=int, default=2, help="passes over the arms per (scheme, M)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--json", required=True)


def patch_triton_choices(transform: Callable[[object, dict], dict]) -> None:
    """Make dispatch run every cached Triton choice as ``transform(problem, config)`` returns
    it (a benchmark arm, not a dispatch rule: the result need not be in the tuner's space)."""
    from fp8tower.tuning import search

    native = search.native_config

    def patched(backend, problem, config):
        found, cfg = native(backend, problem, config)
        if not found or backend.name != "triton":
            return found, cfg
        return True, transform(problem, cfg)

    search.native_config = patched


def parse_schemes(text: str | list[str], option: str = "--schemes") -> list[str]:
    """The schemes of a comma list (or a list), each checked before any timing: one line
    naming the first unknown one and the schemes there are, not a traceback mid-run."""
    names = text.split(",") if isinstance(text, str) else list(text)
    for s in names:
        try:
            Scheme.parse(s)
        except ValueError as e:
            raise SystemExit(f"{option}: {e}") from None
    return names


def parse_ms(text: str | list, option: str = "--m") -> list[int]:
    """The M of a comma list (or a list): positive integers, else one line naming the value."""
    values = text.split(",") if isinstance(text, str) else list(text)
    ms = []
    for v in values:
        if isinstance(v, bool) or not str(v).strip().isdigit() or int(v) < 1:
            raise SystemExit(f"{option}: {v!r} is not a positive integer M (e.g. 1,8,32)")
        ms.append(int(v))
    if not ms:
        raise SystemExit(f"{option}: no M given")
    return ms


def run_arms(model: str, schemes: list[str], ms: list[int], arms: list[str],
             set_arm: Callable[[str], None], rounds: int, steps: int, replays: int,
             json_path: str | None = None, t0: float | None = None) -> list[dict]:
    """One row per (scheme, M): each arm's median ms/step, its ratio to the first arm's, its
    runs, and whether its output equals the first arm's bit for bit. ``schemes`` and ``ms``
    are checked before any timing (SystemExit naming a bad one); with ``json_path``, the rows
    so far are written after each scheme ("complete": false), so that a run stopped later
    keeps them (the caller's :func:`write_rows` at the end replaces that file)."""
    schemes = parse_schemes(schemes)
    ms = parse_ms(ms)
    t0 = time.time() if t0 is None else t0
    rows = []
    for scheme in schemes:
        tower = build_tower(model, scheme=scheme, arm="merged", backend="auto", m=ms[0])
        for m in ms:
            times: dict[str, list[float]] = {a: [] for a in arms}
            outs: dict[str, torch.Tensor] = {}
            # every other round in reverse (ABBA, as tower/context.py): with A,B,A,B a
            # linear drift favours the arm timed first in each round
            for r in range(rounds):
                for a in arms if r % 2 == 0 else arms[::-1]:
                    set_arm(a)
                    dispatch.reset()  # the memo and the modules' launch plans re-resolve
                    tower.reconfigure(m=m)
                    t = time_tower(tower, replays=replays, steps=steps)
                    times[a].append(t.ms_per_step)
                    outs[a] = tower.static_y.clone()
            base = statistics.median(times[arms[0]])
            row = {"scheme": scheme, "m": m, "arms": {}}
            for a in arms:
                med = statistics.median(times[a])
                row["arms"][a] = {"ms": round(med, 4), "over_first": round(med / base, 4),
                                  "runs": [round(v, 4) for v in times[a]],
                                  "bits_equal_first": bool(torch.equal(outs[a], outs[arms[0]]))}
            row["finite"] = bool(torch.isfinite(outs[arms[0]]).all())
            rows.append(row)
            print(json.dumps(row), flush=True)
        del tower
        torch.cuda.empty_cache()
        if json_path is not None:
            write_rows(json_path, rows, t0, complete=False)
    return rows


def write_rows(path: str, rows: list[dict], t0: float, *, complete: bool = True) -> None:
    """The JSON (provenance, seconds since ``t0``, whether the run finished, rows) at
    ``path``; when ``complete``, the rows printed too."""
    doc = {**provenance.record(), "seconds": round(time.time() - t0, 1), "complete": complete,
           "rows": rows}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    if complete:
        print_rows(rows)


def print_rows(rows: list[dict]) -> None:
    """One line per row: each arm's ms/step and its ratio to the first arm's."""
    for r in rows:
        cells = []
        for a, v in r["arms"].items():
            differ = "" if v["bits_equal_first"] else " BITS DIFFER"
            cells.append(f"{a}: {v['ms']:.4f} ({v['over_first']:.3f}{differ})")
        print(r["scheme"], f"M={r['m']}", "  ".join(cells))
