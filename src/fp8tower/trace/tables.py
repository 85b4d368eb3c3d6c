"""Analysis for the report: pure functions from results (DiffResult, Attribution,
Comparison) to dicts and rows, HTA style. No printing, no files, no rich: the report layer
(:mod:`fp8tower.trace.report`, :mod:`fp8tower.trace.report_host`) renders what these return.

Bandwidth is GB/s (1e9 B/s) unless ``gib=True`` asks for GiB/s (2**30 B/s), which is then
labelled as such.
"""

from __future__ import annotations

from .attribute import UNATTRIBUTED, Attribution, OpRow
from .compare import Comparison
from .diff import DiffResult
from .launches import HostRow

GIB = float(1 << 30)

HOST_CSV_COLUMNS = [
    "host_launches_per_step",
    "host_cpu_ms_per_step",
    "launch_cpu_us_median",
    "launch_delay_us_median",
    "launch_delay_us_p90",
]


def bandwidth(gbps: float | None, gib: bool) -> float | None:
    """``gbps`` (1e9 B/s) in the unit asked for: GiB/s (2**30 B/s) when ``gib``."""
    return None if gbps is None else (gbps * 1e9 / GIB if gib else gbps)


def unit(gib: bool) -> str:
    return "GiB/s" if gib else "GB/s"


def step_summary(att: Attribution) -> list[tuple[str, str]]:
    """(what, value) lines on the time of one step."""
    st = att.step_times
    lines = [("kernel-busy time (two-length diff)", f"{att.ms_per_step:.4f} ms/step")]
    if st.span_ms is not None:
        lines.append(
            (
                (
                    f"span, first kernel start to last kernel end (mean of {st.steps_seen} "
                    f"steps, boundaries from {st.method})"
                ),
                f"{st.span_ms:.4f} ms/step",
            )
        )
        lines.append(("kernel-busy time (mean of the same steps)", f"{st.busy_ms:.4f} ms/step"))
    else:
        lines.append(("span per step", "no step boundaries in the trace"))
    lines.append(("whole-trace kernel span, two-length diff", f"{att.span_diff_ms:.4f} ms/step"))
    lines.append(
        (
            "CUDA-event step time (capture)",
            "–" if att.event_ms_per_step is None else f"{att.event_ms_per_step:.4f} ms/step",
        )
    )
    if att.ceiling_gbps is not None:
        lines.append((f"read ceiling ({att.ceiling_source})", f"{att.ceiling_gbps:,.1f} GB/s"))
    return lines


# -- host launch statistics ------------------------------------------------------------------


def host_row_json(r: HostRow) -> dict:
    return dict(r.__dict__)


def host_json(att: Attribution) -> dict | None:
    h = att.host
    if h is None:
        return None
    return {
        "units": {"cpu_us": "host microseconds per launch call",
                  "delay_us": "kernel start - launch call start, microseconds (graph "
                              "launches: to the replay's first kernel)",
                  "per_step": "two-length difference"},
        "launches_per_step": h.launches_per_step,
        "cpu_ms_per_step": h.cpu_ms_per_step,
        "unmatched_kernels": h.unmatched_kernels,
        "rows": [host_row_json(r) for r in h.rows],
        "notes": h.notes,
    }


def checks_json(att: Attribution) -> list[dict]:
    return [c.__dict__ | {"message": c.message()} for c in att.launch_checks]


#: the one line the HTML report shows above each arm's host launch table
HOST_EXPLAINED = (
    "Host time per launch, as HTA's kernel launch statistics compute it: CPU us/launch is the "
    "host CPU time of each launch call (cudaLaunchKernel, cuLaunchKernelEx, ...); delay = "
    "kernel start - call start; a CUDA graph replay is one call (cudaGraphLaunch), its delay "
    "to the replay's first kernel. Launches and host ms per step: two-length difference; "
    "median / p90 / max: the long trace's launches."
)


def host_absent(att: Attribution) -> str | None:
    """Why ``att`` has no host launch table (None: it has one, i.e. at least one row)."""
    h = att.host
    if h is not None and h.rows:
        return None
    if att.device == "cpu":
        return "CPU run: no GPU launch calls were traced"
    if h is None:
        why = [n for n in att.notes if n.startswith("no host launch statistics")]
        return why[0] if why else "no host launch statistics for this arm"
    return "; ".join(h.notes) or "no launch call matched a kernel of the steps"


def host_report(att: Attribution) -> dict:
    """What the HTML report shows of one arm's host launches: the explanation, the table
    (:func:`host_json`, None when absent), why it is absent, and the launch-count checks."""
    absent = host_absent(att)
    checks = checks_json(att)
    return {
        "explained": HOST_EXPLAINED,
        "absent": absent,
        "host": None if absent else host_json(att),
        "checks": checks,
        "failed_checks": [c for c in checks if not c["ok"]],
    }


def host_csv_cells(att: Attribution, label: str) -> list:
    r = att.host.row(label) if att.host is not None else None
    if r is None:
        return [""] * len(HOST_CSV_COLUMNS)
    return [r.launches_per_step, r.cpu_ms_per_step, r.cpu_us_median, r.delay_us_median,
            r.delay_us_p90]


# -- JSON documents ----------------------------------------------------------------------------


def op_json(att: Attribution, op: OpRow, gib: bool = False) -> dict:
    d = {
        "label": op.label,
        "group": op.group,
        "n": op.n,
        "k": op.k,
        "backends": op.backends,
        "calls_per_step": op.calls_per_step,
        "launches_per_step": op.launches_per_step,
        "ms_per_step": op.ms_per_step,
        "share": op.share,
        "bytes_per_step": op.bytes_per_step,
        "gbps": op.gbps,
        "ceiling_pct": att.ceiling_pct(op),
        "excess_us_per_call": att.excess_us_per_call(op),
        "kernel_families": op.families,
        "kernels": op.kernels,
        "integral": op.integral,
    }
    if gib:
        d["gibps"] = bandwidth(op.gbps, True)
    return d


def attribution_json(att: Attribution, gib: bool = False) -> dict:
    st = att.step_times
    return {
        "arm": att.arm,
        "device": att.device,
        "cpu_run": att.device == "cpu",
        "steps": {"short": att.steps[0], "long": att.steps[1]},
        "source": att.source,
        "units": {
            "time": "ms per decode step",
            "bandwidth": "GB/s = 1e9 B/s" + ("; gibps = 2**30 B/s" if gib else ""),
        },
        "ops": [op_json(att, op, gib) for op in att.ops],
        "unattributed": [
            {"name": k.name, "launches_per_step": k.launches_per_step, "ms_per_step": k.ms_per_step}
            for k in att.unattributed
        ],
        "total": {
            "launches_per_step": att.launches_per_step,
            "ms_per_step": att.ms_per_step,
            "attributed_ms_per_step": sum(op.ms_per_step for op in att.ops),
        },
        "step": {
            "busy_ms": st.busy_ms,
            "span_ms": st.span_ms,
            "steps_seen": st.steps_seen,
            "boundaries": st.method,
            "span_diff_ms": att.span_diff_ms,
            "event_ms": att.event_ms_per_step,
        },
        "ceiling": {"gbps": att.ceiling_gbps, "source": att.ceiling_source},
        "verify": {
            "ok": not att.failed,  # what the exit code says: launch checks included
            "mismatches": [m.__dict__ | {"message": m.message()} for m in att.mismatches],
        },
        "integral": att.integral,
        "notes": att.notes,
        "meta": att.meta,
        "host": host_json(att),
        "launch_checks": checks_json(att),
    }


def comparison_json(cmp: Comparison, gib: bool = False) -> dict:
    def side(s) -> dict:
        d = {
            "ops": s.labels,
            "ms_per_step": s.ms_per_step,
            "gbps": s.gbps,
            "launches_per_step": s.launches_per_step,
            "bytes_per_step": s.bytes_per_step,
            "kernel_families": s.families,
        }
        if gib:
            d["gibps"] = bandwidth(s.gbps, True)
        return d

    return {
        "arms": [cmp.a.arm, cmp.b.arm],
        "device": cmp.a.device,
        "cpu_run": cmp.a.device == "cpu",
        "delta": f"{cmp.a.arm} - {cmp.b.arm}, ms per step",
        "levers": [
            {"group": r.group, "a": side(r.a), "b": side(r.b), "delta_ms": r.delta_ms}
            for r in cmp.rows
        ],
        "total": {
            "a_ms_per_step": cmp.a.ms_per_step,
            "b_ms_per_step": cmp.b.ms_per_step,
            "delta_ms": cmp.delta_ms,
        },
        "attributions": [attribution_json(cmp.a, gib), attribution_json(cmp.b, gib)],
    }


# -- flat tables (header, rows): what the CSV files hold ----------------------------------------


def attribution_table(att: Attribution) -> tuple[list[str], list[list]]:
    """One row per op (with its host launch cells), then one per unattributed kernel."""
    header = [
        "arm", "device", "label", "group", "n", "k", "backends", "kernel_families",
        "launches_per_step", "ms_per_step", "share", "bytes_per_step", "gbps", "ceiling_pct",
        "excess_us_per_call", *HOST_CSV_COLUMNS,
    ]
    rows = [
        [att.arm, att.device, op.label, op.group, op.n, op.k, ";".join(op.backends),
         ";".join(op.families), op.launches_per_step, op.ms_per_step, op.share,
         op.bytes_per_step, op.gbps, att.ceiling_pct(op), att.excess_us_per_call(op),
         *host_csv_cells(att, op.label)]
        for op in att.ops
    ]
    rows += [  # kernels no op took: no bytes, ceiling or (per op) host cells
        [att.arm, att.device, UNATTRIBUTED, UNATTRIBUTED, "", "", "", kd.name,
         kd.launches_per_step, kd.ms_per_step, *[""] * (len(header) - 10)]
        for kd in att.unattributed
    ]
    return header, rows


def comparison_table(cmp: Comparison) -> tuple[list[str], list[list]]:
    """One row per op group (ranked as the comparison ranks them), then the total."""
    a, b = cmp.a.arm, cmp.b.arm
    header = [
        "device", "group",
        f"{a}_ops", f"{a}_ms_per_step", f"{a}_gbps", f"{a}_launches_per_step",
        f"{a}_kernel_families",
        f"{b}_ops", f"{b}_ms_per_step", f"{b}_gbps", f"{b}_launches_per_step",
        f"{b}_kernel_families",
        "delta_ms",
    ]
    rows = [
        [cmp.a.device, r.group,
         ";".join(r.a.labels), r.a.ms_per_step, r.a.gbps, r.a.launches_per_step,
         ";".join(r.a.families),
         ";".join(r.b.labels), r.b.ms_per_step, r.b.gbps, r.b.launches_per_step,
         ";".join(r.b.families),
         r.delta_ms]
        for r in cmp.rows
    ]
    rows.append([cmp.a.device, "total", "", cmp.a.ms_per_step, "", cmp.a.launches_per_step, "",
                 "", cmp.b.ms_per_step, "", cmp.b.launches_per_step, "", cmp.delta_ms])
    return header, rows


def diff_table(diff: DiffResult) -> tuple[list[str], list[list]]:
    """One row per kernel name."""
    header = ["device", "kernel", "launches_per_step", "ms_per_step", "integral"]
    return header, [[diff.device, k.name, k.launches_per_step, k.ms_per_step, k.integral]
                    for k in diff.kernels]


# -- what the plots show ------------------------------------------------------------------------


def time_bars(atts: list[Attribution], cmp: Comparison | None) -> tuple[list[str], list[list]]:
    """The op groups (labels) and one series of ms per step per arm. With a comparison: its
    ranked groups, dropping the unattributed row where it is under 0.5% of the largest."""
    if cmp is None:
        return [op.label for op in atts[0].ops], [[op.ms_per_step for op in atts[0].ops]]
    largest = max(
        (max(abs(r.a.ms_per_step), abs(r.b.ms_per_step)) for r in cmp.rows), default=0.0
    )
    shown = [
        r
        for r in cmp.rows
        if r.group != UNATTRIBUTED
        or max(abs(r.a.ms_per_step), abs(r.b.ms_per_step)) > 0.005 * largest
    ]
    return [r.group for r in shown], [[r.a.ms_per_step for r in shown],
                                      [r.b.ms_per_step for r in shown]]


def bandwidth_bars(atts: list[Attribution], gib: bool) -> list[tuple[str, str, float | None]]:
    """(arm, op label, bandwidth in the unit asked for) of every op with a bandwidth."""
    return [
        (att.arm, op.label, bandwidth(op.gbps, gib))
        for att in atts
        for op in att.ops
        if op.gbps is not None
    ]
