"""Rendering: rich tables, JSON and CSV files and a self-contained HTML page.

The figures, JSON documents and rows come from :mod:`fp8tower.trace.tables` (pure analysis);
this module only formats and writes them. Bandwidth is GB/s (1e9 B/s) unless ``gib=True``
asks for GiB/s (2**30 B/s), which is then labelled as such. matplotlib and jinja2 are
imported inside `write_html` only.
"""

from __future__ import annotations

import base64
import csv
import datetime
import html
import io
import json
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import report_host, tables
from .attribute import UNATTRIBUTED, Attribution
from .compare import Comparison
from .diff import DiffResult
from .errors import TraceError
from .tables import bandwidth as _bw
from .tables import step_summary
from .tables import unit as _unit

CPU_BANNER = "CPU run: the 'kernels' are top-level aten ops timed on the CPU; no GPU was traced"



def _plain(text: str) -> str:
    """A user's label as matplotlib draws it literally: `$...$` would be parsed as mathtext
    (a label with `$\\frac$` stopped the report with a traceback)."""
    return text.replace("$", r"\$")

def _f(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def _short(name: str, width: int = 70) -> str:
    """Shortened and escaped for rich (kernel names may contain '[...]')."""
    return escape(name if len(name) <= width else name[: width - 1] + "…")


# -- terminal --------------------------------------------------------------------------------


def print_diff(diff: DiffResult, console: Console, top: int | None = None) -> None:
    title = f"Two-length diff, {diff.steps[0]} → {diff.steps[1]} steps, per decode step"
    if diff.device == "cpu":
        title += " (CPU run)"
    t = Table(title=title, title_justify="left")
    t.add_column("kernel")
    t.add_column("launches/step", justify="right")
    t.add_column("ms/step", justify="right")
    t.add_column("share", justify="right")
    t.add_column("integral", justify="center")
    total = diff.ms_per_step
    rows = diff.kernels if top is None else diff.kernels[:top]
    for k in rows:
        share = f"{100 * k.ms_per_step / total:.1f}%" if total > 0 else "–"
        t.add_row(
            _short(k.name),
            f"{k.launches_per_step:.3f}",
            f"{k.ms_per_step:.4f}",
            share,
            "yes" if k.integral else "[bold red]NO[/]",
        )
    if top is not None and len(diff.kernels) > top:
        t.add_row(f"… {len(diff.kernels) - top} more", "", "", "", "")
    t.add_section()
    t.add_row(
        "[bold]total",
        f"{diff.launches_per_step:.3f}",
        f"{total:.4f}",
        "100%",
        "yes" if diff.integral else "[bold red]NO[/]",
    )
    console.print(t)
    if diff.device == "cpu":
        console.print(f"[yellow]{CPU_BANNER}")


def _op_table(att: Attribution, gib: bool) -> Table:
    t = Table(
        title=f"Per op, arm {escape(att.arm)} ({att.source}; {att.steps[0]} → {att.steps[1]} "
        "steps)" + (" — CPU run" if att.device == "cpu" else ""),
        title_justify="left",
    )
    for col, just in (
        ("op", "left"),
        ("N", "right"),
        ("K", "right"),
        ("backend", "left"),
        ("kernel families", "left"),
        ("launches/step", "right"),
        ("ms/step", "right"),
        ("share", "right"),
        ("MB/step", "right"),
        (_unit(gib), "right"),
        ("% ceiling", "right"),
        ("us/call over ceiling", "right"),
    ):
        t.add_column(col, justify=just)
    for op in att.ops:
        pct = att.ceiling_pct(op)
        t.add_row(
            escape(op.label),
            _f(op.n, 0),
            _f(op.k, 0),
            escape(", ".join(op.backends)) or "–",
            _short(", ".join(op.families), 50),
            f"{op.launches_per_step:.3f}",
            f"{op.ms_per_step:.4f}",
            f"{100 * op.share:.1f}%",
            _f(None if op.bytes_per_step is None else op.bytes_per_step / 1e6, 2),
            _f(_bw(op.gbps, gib), 1),
            _f(pct, 1),
            _f(att.excess_us_per_call(op), 2),
        )
    if att.unattributed:
        t.add_section()
        for kd in att.unattributed[:10]:
            t.add_row(
                f"[dim]{UNATTRIBUTED}",
                "",
                "",
                "",
                _short(kd.name, 50),
                f"{kd.launches_per_step:.3f}",
                f"{kd.ms_per_step:.4f}",
                f"{100 * kd.ms_per_step / att.ms_per_step:.1f}%" if att.ms_per_step > 0 else "–",
                "",
                "",
                "",
            )
        if len(att.unattributed) > 10:
            t.add_row(f"[dim]… {len(att.unattributed) - 10} more unattributed kernels", *[""] * 10)
    t.add_section()
    t.add_row(
        "[bold]total (all kernels)",
        "",
        "",
        "",
        "",
        f"{att.launches_per_step:.3f}",
        f"{att.ms_per_step:.4f}",
        "100%",
        "",
        "",
        "",
    )
    return t


def print_attribution(att: Attribution, console: Console, gib: bool = False) -> None:
    if att.device == "cpu":
        console.print(f"[yellow]{CPU_BANNER}")
    console.print(_op_table(att, gib))
    t = Table(title="Per step", title_justify="left", show_header=False)
    t.add_column("what")
    t.add_column("value", justify="right")
    for what, value in step_summary(att):
        t.add_row(what, value)
    console.print(t)
    for note in att.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    report_host.print_host(att, console)
    report_host.print_launch_checks(att, console)
    print_mismatches(att, console)


def print_mismatches(att: Attribution, console: Console) -> None:
    for m in att.mismatches:
        console.print(f"[bold red]error:[/] {escape(m.message())}")
    if att.mismatches:
        console.print("[bold red]The dispatch decision and what ran disagree.")


def _ops_and_kernels(side) -> str:
    ops = escape(", ".join(side.labels)) or "–"
    fams = ", ".join(_short(f, 48) for f in side.families)
    return f"{ops}\n[dim]{fams}[/]" if fams else ops


def print_comparison(cmp: Comparison, console: Console, gib: bool = False) -> None:
    a, b = escape(cmp.a.arm), escape(cmp.b.arm)  # the title and headers are rich markup
    title = f"Levers: {a} vs {b}, per decode step, delta = {a} − {b}, largest first" + (
        " (CPU run)" if cmp.a.device == "cpu" else ""
    )
    t = Table(title=title, title_justify="left", show_lines=True)
    t.add_column("group", overflow="fold")
    for col in (
        f"{a} ms",
        f"{b} ms",
        "delta ms",
        f"{a} {_unit(gib)}",
        f"{b} {_unit(gib)}",
        "launches",
    ):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column(f"{a}: ops, kernels", overflow="fold", ratio=1)
    t.add_column(f"{b}: ops, kernels", overflow="fold", ratio=1)
    for r in cmp.rows:
        color = "red" if r.delta_ms > 0 else "green"
        t.add_row(
            escape(r.group),
            _f(r.a.ms_per_step, 4),
            _f(r.b.ms_per_step, 4),
            f"[{color}]{r.delta_ms:+.4f}",
            _f(_bw(r.a.gbps, gib), 1),
            _f(_bw(r.b.gbps, gib), 1),
            f"{r.a.launches_per_step:.2f} / {r.b.launches_per_step:.2f}",
            _ops_and_kernels(r.a),
            _ops_and_kernels(r.b),
        )
    t.add_row(
        "[bold]total (all kernels)",
        _f(cmp.a.ms_per_step, 4),
        _f(cmp.b.ms_per_step, 4),
        f"[bold]{cmp.delta_ms:+.4f}",
        "",
        "",
        f"{cmp.a.launches_per_step:.2f} / {cmp.b.launches_per_step:.2f}",
        "",
        "",
    )
    console.print(t)
    for att in (cmp.a, cmp.b):
        for c in att.launch_checks:
            if not c.ok:
                console.print(f"[bold red]error:[/] arm {escape(att.arm)}: {escape(c.message())}")
        print_mismatches(att, console)


# -- JSON / CSV --------------------------------------------------------------------------------


def write_json(path: str | Path, doc: dict) -> Path:
    """Strict JSON: a NaN or infinite figure is an error, never a `NaN` token in the file
    (readers validate their inputs, so this is a last guard, not the check)."""
    path = Path(path)
    try:
        text = json.dumps(doc, indent=1, allow_nan=False)
    except ValueError as e:
        raise TraceError(f"not writing JSON with a non-finite figure ({e})", path) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return path


def _write_csv(path: str | Path, table: tuple[list[str], list[list]]) -> Path:
    path = Path(path)
    header, rows = table
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def write_attribution_csv(path: str | Path, att: Attribution) -> Path:
    return _write_csv(path, tables.attribution_table(att))


def write_comparison_csv(path: str | Path, cmp: Comparison) -> Path:
    return _write_csv(path, tables.comparison_table(cmp))


def diff_csv(path: str | Path, diff: DiffResult) -> Path:
    return _write_csv(path, tables.diff_table(diff))


# -- HTML ---------------------------------------------------------------------------------------


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _plots(atts: list[Attribution], cmp: Comparison | None, gib: bool) -> list[dict]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    plots = []
    colors = ["#3b6ea8", "#d9822b"]
    # 1: ms per step per op group, both arms
    groups, series = tables.time_bars(atts, cmp)
    y = np.arange(len(groups))
    h = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(groups) + 1.6))
    for i, (att, vals) in enumerate(zip(atts, series)):
        ax.barh(y + i * h, vals, h, label=_plain(att.arm), color=colors[i % 2])
    ax.set_yticks(y + h * (len(series) - 1) / 2, [_plain(g) for g in groups])
    ax.invert_yaxis()
    ax.set_xlabel("ms per decode step" + (" (CPU time)" if atts[0].device == "cpu" else ""))
    ax.legend()
    ax.grid(axis="x", alpha=0.3)
    ax.set_title("Time per step by op" + (" group (ranked by delta)" if cmp else ""))
    plots.append({"title": "ms per step by op", "src": _png(fig)})
    plt.close(fig)
    # 2: bandwidth per op against the read ceiling
    rows = tables.bandwidth_bars(atts, gib)
    if rows:
        fig, ax = plt.subplots(figsize=(9, 0.4 * len(rows) + 1.6))
        labels = [_plain(f"{arm}: {label}") for arm, label, _ in rows]
        ax.barh(
            np.arange(len(rows)),
            [v for _, _, v in rows],
            color=[colors[[a.arm for a in atts].index(arm) % 2] for arm, _, _ in rows],
        )
        ax.set_yticks(np.arange(len(rows)), labels)
        ax.invert_yaxis()
        ceiling = next((a.ceiling_gbps for a in atts if a.ceiling_gbps), None)
        if ceiling:
            src = next(a.ceiling_source for a in atts if a.ceiling_gbps)
            ax.axvline(
                _bw(ceiling, gib),
                color="#b22222",
                ls="--",
                label=f"read ceiling {_bw(ceiling, gib):,.0f} {_unit(gib)} ({src})",
            )
            ax.legend()
        ax.set_xlabel(_unit(gib) + (" (1 GiB = 2^30 B)" if gib else " (1 GB = 1e9 B)"))
        ax.grid(axis="x", alpha=0.3)
        ax.set_title("Bandwidth per op against the read ceiling")
        plots.append({"title": "bandwidth per op", "src": _png(fig)})
        plt.close(fig)
    return plots


def check_html_deps() -> None:
    """TraceError unless the HTML report's packages import (`trace report` asks before it
    reads any trace: a packaging audit, 2026-12-05, found it failing after all the work)."""
    try:
        import jinja2  # noqa: F401
        import matplotlib  # noqa: F401
    except ImportError as e:
        raise TraceError(
            f"the HTML report needs matplotlib and jinja2 ({e}); install them with "
            "pip install 'fp8tower[report]', or ask for no page (trace report --no-html)"
        ) from None


def write_html(
    path: str | Path, atts: list[Attribution], cmp: Comparison | None = None, gib: bool = False
) -> Path:
    """One self-contained page (plots embedded as base64 PNG): levers, per-op tables, per-step
    times, host launch statistics and launch-count checks, verification errors and notes."""
    check_html_deps()
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("fp8tower.trace", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
    )
    env.filters["f"] = _f
    env.filters["bw"] = lambda x: _f(_bw(x, gib), 1)
    env.filters["pct"] = lambda x: "–" if x is None else f"{100 * x:.1f}%"
    page = env.get_template("report.html.j2").render(
        atts=atts,
        cmp=cmp,
        unit=_unit(gib),
        gib=gib,
        cpu=atts[0].device == "cpu",
        cpu_banner=CPU_BANNER,
        plots=_plots(atts, cmp, gib),
        step_summary=step_summary,
        host_report=tables.host_report,
        unattributed=UNATTRIBUTED,
        escape=html.escape,
        generated=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)
    return path
