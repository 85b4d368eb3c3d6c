"""Printing host launch statistics and launch-count checks (report layer; their JSON and
CSV cells are in :mod:`fp8tower.trace.tables`)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .attribute import Attribution


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
        t.add_row(escape(r.label), escape(",".join(r.apis)), _f(r.launches_per_step, 1),
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
