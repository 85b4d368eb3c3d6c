"""Report outputs: terminal tables, JSON, CSV, the HTML page (rendered by headless Chromium in
test_trace_report_browser.py)."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from rich.console import Console
from trace_helpers import DATA

from fp8tower.trace import attribute, compare, diff_traces, load_arm, load_trace, report, tables


@pytest.fixture(scope="module")
def arms():
    a = attribute(load_arm(DATA / "arm_unmerged"))
    b = attribute(load_arm(DATA / "arm_merged"))
    return a, b, compare(a, b)


def _text(fn, *args, **kw) -> str:
    buf = io.StringIO()
    fn(*args, Console(file=buf, width=250, color_system=None), **kw)
    return buf.getvalue()


def test_terminal_tables(arms):
    a, _, cmp = arms
    out = _text(report.print_comparison, cmp)
    assert "Levers: unmerged vs merged" in out and "+0.11" in out
    assert out.index("gdn.in_proj") < out.index("gdn.out_proj") < out.index("total")
    out = _text(report.print_attribution, a)
    assert "gdn.in_proj_qkv" in out and "GB/s" in out and "read ceiling (measured)" in out
    assert "span, first kernel start to last kernel end" in out and "CUDA-event" in out
    assert "GiB/s" in _text(report.print_attribution, a, gib=True)
    d = diff_traces(load_trace(DATA / "old_2.json.gz"), load_trace(DATA / "old_6.json.gz"), (2, 6))
    out = _text(report.print_diff, d)
    assert "8.000" in out and "yes" in out


def test_gib_is_labelled_and_converted(arms):
    a, _, _ = arms
    doc = tables.attribution_json(a, gib=True)
    op = doc["ops"][0]
    assert op["gibps"] == pytest.approx(op["gbps"] * 1e9 / 2**30)
    assert "2**30" in doc["units"]["bandwidth"]
    assert "gibps" not in tables.attribution_json(a)["ops"][0]


def test_attribution_json(arms, tmp_path):
    a, _, _ = arms
    path = report.write_json(tmp_path / "a.json", tables.attribution_json(a))
    doc = json.loads(path.read_text())
    assert doc["arm"] == "unmerged" and doc["cpu_run"] is False and doc["verify"]["ok"]
    assert doc["ceiling"] == {"gbps": 4000.0, "source": "measured"}
    assert doc["step"]["boundaries"] == "host ranges" and doc["step"]["event_ms"] > 0
    assert doc["total"]["ms_per_step"] == pytest.approx(a.ms_per_step)
    op = next(o for o in doc["ops"] if o["label"] == "gdn.in_proj_qkv")
    assert op["launches_per_step"] == 4 and op["calls_per_step"] == 2
    assert op["kernel_families"] and op["ceiling_pct"] == pytest.approx(op["gbps"] / 40)
    assert op["excess_us_per_call"] is not None


def test_csv(arms, tmp_path):
    a, _, cmp = arms
    rows = list(
        csv.DictReader(report.write_attribution_csv(tmp_path / "a.csv", a).read_text().splitlines())
    )
    assert [r["label"] for r in rows] == [op.label for op in a.ops]
    rows = list(
        csv.DictReader(
            report.write_comparison_csv(tmp_path / "c.csv", cmp).read_text().splitlines()
        )
    )
    assert rows[0]["group"] == "gdn.in_proj" and float(rows[0]["delta_ms"]) > 0.1
    assert rows[-1]["group"] == "total"


def _needs_html_deps():
    pytest.importorskip("matplotlib")
    pytest.importorskip("jinja2")


def test_html_is_self_contained(arms, tmp_path):
    _needs_html_deps()
    a, b, cmp = arms
    page = report.write_html(tmp_path / "r.html", [a, b], cmp).read_text()
    assert page.count("data:image/png;base64,") == 2
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing fetched from outside
    assert "Levers: unmerged vs merged" in page and "CPU run" not in page
    single = report.write_html(tmp_path / "one.html", [a]).read_text()
    assert "Levers" not in single and "gdn.in_proj_qkv" in single


def test_html_shows_verification_errors(tmp_path, arms):
    _needs_html_deps()
    a, _, _ = arms
    from fp8tower.trace.attribute import Mismatch

    a.mismatches = [Mismatch("gdn.in_proj_z", "triton", "^_fp8", "nvjet_x", 12)]
    try:
        page = report.write_html(tmp_path / "bad.html", [a]).read_text()
    finally:
        a.mismatches = []
    assert "Verification failed" in page and "nvjet_x" in page
