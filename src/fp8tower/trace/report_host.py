"""Printing and serializing host launch statistics and launch-count checks (report layer)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .attribute import Attribution
from .launches import HostRow

HOST_CSV_COLUMNS = [
    "host_launches_per_step",
    "host_cpu_ms_per_step",
    "launch_cpu_us_median",
    "launch_delay_us_median",
    "launch_delay_us_p90",
]


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def print_host(att: Attribution, console: Console, top: int = 25) -> None:
    h = att.host
    if h is None:
        return
    t = Table(
        title="Host launches (HTA kernel launch statistics: CPU time of each launch call, "
        "launch delay = kernel start - call start)",
        title_justify="left",
    )
    for col, just in (("op", "left"), ("API", "left"), ("launches/step", "right"),
                      ("host ms/step", "right"), ("CPU us/launch (median)", "right"),
                      ("p90", "right"), ("delay us (median)", "right"), ("p90", "right"),
                      ("max", "right")):
        t.add_column(col, justify=just)
    for r in h.rows[:top]:
        t.add_row(escape(r.label), ",".join(r.apis), _f(r.launches_per_step, 1),
                  _f(r.cpu_ms_per_step, 3), _f(r.cpu_us_median), _f(r.cpu_us_p90),
                  _f(r.delay_us_median), _f(r.delay_us_p90), _f(r.delay_us_max))
    if len(h.rows) > top:
        t.add_row(f"... {len(h.rows) - top} more", "", "", "", "", "", "", "", "")
    t.add_row("[bold]total", "", _f(h.launches_per_step, 1), _f(h.cpu_ms_per_step, 3),
              "", "", "", "", "")
    console.print(t)
    for note in h.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")


def print_launch_checks(att: Attribution, console: Console) -> None:
    for c in att.launch_checks:
        style = "green" if c.ok else "bold red"
        console.print(f"[{style}]launches:[/] {escape(c.message())}")


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


def host_csv_cells(att: Attribution, label: str) -> list:
    r = att.host.row(label) if att.host is not None else None
    if r is None:
        return [""] * len(HOST_CSV_COLUMNS)
    return [r.launches_per_step, r.cpu_ms_per_step, r.cpu_us_median, r.delay_us_median,
            r.delay_us_p90]
