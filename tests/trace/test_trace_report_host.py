"""The HTML report's host launch table and launch-count checks (tables.host_report, the
report template): parsed back from the page, every number equals the JSON's to the digits
shown; a graph capture (the committed real H200 pair), an eager capture (synthetic, with
launch checks) and map-file reports with and without host launch calls."""

from __future__ import annotations

import dataclasses
import gzip
import json
from html.parser import HTMLParser

import pytest
from trace_helpers import DATA

from fp8tower.trace import attribute, compare, load_arm, report, tables
from fp8tower.trace.launches import GRAPH_LAUNCH, UNATTRIBUTED
from fp8tower.trace.synth import KernelSpec, write_torch_trace

H200 = DATA / "h200_27b_m1"
#: host table columns: (JSON key, digits shown); the first two are text (label, APIs)
NUMBERS = [
    ("launches_per_step", 2),
    ("cpu_ms_per_step", 4),
    ("cpu_us_median", 2),
    ("cpu_us_p90", 2),
    ("delay_us_median", 2),
    ("delay_us_p90", 2),
    ("delay_us_max", 2),
]


@pytest.fixture(autouse=True)
def _html_deps():
    pytest.importorskip("matplotlib")
    pytest.importorskip("jinja2")


class _Page(HTMLParser):
    """Host tables (cell texts per row), check items and host-absent lines of a report."""

    def __init__(self, text: str):
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.checks: list[tuple[str, str]] = []  # (class, text)
        self.absent: list[str] = []
        self.explained: list[str] = []
        self._table = False
        self._cell: list[str] | None = None
        self._li: tuple[str, list[str]] | None = None
        self._p: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class") or ""
        if tag == "table" and cls == "host":
            self._table = True
            self.tables.append([])
        elif self._table and tag == "tr":
            self.tables[-1].append([])
        elif self._table and tag in ("td", "th"):
            self._cell = []
        elif tag == "li" and cls in ("ok", "bad"):
            self._li = (cls, [])
        elif tag == "p" and "host-absent" in cls:
            self._p = self.absent
        elif tag == "p" and "host-explained" in cls:
            self._p = self.explained

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = False
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "li" and self._li is not None:
            self.checks.append((self._li[0], "".join(self._li[1]).strip()))
            self._li = None
        elif tag == "p":
            self._p = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._li is not None:
            self._li[1].append(data)
        if self._p is not None:
            self._p.append(data)


def _num(cell: str) -> float:
    return float(cell.replace(",", ""))


def _assert_table_is_json(table: list[list[str]], host: dict) -> None:
    """Header, one row per JSON row (same order, same numbers to the digits shown), total."""
    header, *rows, total = table
    assert header[:2] == ["op", "API"] and len(header) == 2 + len(NUMBERS)
    assert [r[0] for r in rows] == [r["label"] for r in host["rows"]]
    for cells, want in zip(rows, host["rows"]):
        assert cells[1] == ", ".join(want["apis"])
        for cell, (key, digits) in zip(cells[2:], NUMBERS):
            assert want[key] is not None, key
            assert _num(cell) == pytest.approx(want[key], abs=0.51 * 10.0**-digits), (key, cell)
    assert total[0] == "total"
    assert _num(total[2]) == pytest.approx(host["launches_per_step"], abs=0.006)
    assert _num(total[3]) == pytest.approx(host["cpu_ms_per_step"], abs=6e-5)


def test_graph_capture_shows_one_graph_launch_row(tmp_path):
    """The committed real H200 pair (one cudaGraphLaunch per step), in a compare report: each
    arm's table is its JSON's, one (cudaGraphLaunch) row at 1 launch per step."""
    a = attribute(load_arm(H200 / "unmerged_cublaslt"))
    b = attribute(load_arm(H200 / "merged_triton"))
    page = _Page(report.write_html(tmp_path / "r.html", [a, b], compare(a, b)).read_text())
    assert len(page.tables) == 2 and len(page.explained) == 2 and not page.absent
    for att, table in zip((a, b), page.tables):
        host = tables.attribution_json(att)["host"]
        _assert_table_is_json(table, host)
        assert [r[0] for r in table[1:-1]] == [GRAPH_LAUNCH]
        assert _num(table[1][2]) == 1.0
    assert "a CUDA graph replay is one call" in page.explained[0]
    assert not page.checks  # the tower manifests ask for none


def _eager_arm(tmp_path, gemms_per_layer_expected: int):
    """SYNTHETIC eager capture of arm_merged's ops (2 layers: a cutlass GEMM, an nvjet GEMM),
    one cudaLaunchKernel per kernel (4 us of CPU each, synth.py), with launch checks."""
    d = tmp_path / "eager"
    d.mkdir()
    step = [
        KernelSpec("cutlass_fp8_gemm_kernel", 130.0, (128, 1, 1)),
        KernelSpec("nvjet_sm90_tst_128x16", 40.0, (40, 1, 1)),
    ] * 2
    for n in (2, 6):
        write_torch_trace(
            d / f"trace_{n}.json.gz",
            n,
            step,
            graph=False,
            seed=n,
            prologue=[KernelSpec("fill_kernel", 2.0, (64, 1, 1))],
        )
    man = json.loads((DATA / "arm_merged" / "manifest.json").read_text())
    man["arm"] = "eager"
    man["meta"] = {
        "mode": "eager",
        "min_attributed_share": 0.99,
        "expected_launches": [
            {"label": "gdn.in_proj_qkvz", "modules": 2, "kernel_regex": "cutlass", "what": "GEMM"},
            {
                "label": "gdn.out_proj",
                "modules": gemms_per_layer_expected,
                "kernel_regex": "nvjet",
                "what": "GEMM",
            },
        ],
    }
    (d / "manifest.json").write_text(json.dumps(man))
    return attribute(load_arm(d))


def test_eager_capture_shows_a_row_per_op_and_the_checks(tmp_path):
    att = _eager_arm(tmp_path, 2)
    page = _Page(report.write_html(tmp_path / "e.html", [att]).read_text())
    host = tables.attribution_json(att)["host"]
    (table,) = page.tables
    _assert_table_is_json(table, host)
    labels = [r[0] for r in table[1:-1]]
    # the prologue fill runs outside the steps: no host row (it was "(unattributed)")
    assert sorted(labels) == ["gdn.in_proj_qkvz", "gdn.out_proj"]
    for r in table[1:-1]:  # 2 launches per step, 4 us of CPU each (synth.py)
        assert r[1] == "cudaLaunchKernel"
        assert (_num(r[2]), _num(r[3]), _num(r[4])) == (2.0, 0.008, 4.0)
    assert _num(table[-1][2]) == pytest.approx(4.0)
    assert [c for c, _ in page.checks] == ["ok"] * 3
    assert page.checks[0][1] == "gdn.in_proj_qkvz: GEMM per step: expected 2, observed 2 [ok]"
    assert [m for _, m in page.checks] == [c["message"] for c in tables.checks_json(att)]


def test_failed_launch_check_is_an_error_on_top(tmp_path):
    att = _eager_arm(tmp_path, 3)  # the model "should" launch 3 nvjet GEMMs per step
    text = report.write_html(tmp_path / "bad.html", [att]).read_text()
    page = _Page(text)
    assert [c for c, _ in page.checks] == ["ok", "bad", "ok"]
    assert "expected 3, observed 2 [FAILED]" in page.checks[1][1]
    top = text[: text.index("<h2>")]
    assert "differ from what the model should launch" in top and "[FAILED]" in top


def _vllm_arm(short, long):
    return load_arm(
        f"{short},{long}",
        map_path=DATA / "vllm_map.json",
        steps=(2, 6),
        step_pattern="^execute_model$",
    )


def test_map_file_report_with_eager_launches(tmp_path):
    """The committed vLLM-style pair launches eagerly: a row per map label."""
    att = attribute(_vllm_arm(DATA / "vllm_2.json.gz", DATA / "vllm_6.json.gz"))
    page = _Page(report.write_html(tmp_path / "m.html", [att]).read_text())
    (table,) = page.tables
    _assert_table_is_json(table, tables.attribution_json(att)["host"])
    assert {r[0] for r in table[1:-1]} == {"gdn.in_proj_qkvz", "gdn.out_proj", UNATTRIBUTED}
    assert not page.checks  # no manifest, no checks


def _strip_launch_calls(src, dst):
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "cuda_runtime"]
    with gzip.open(dst, "wt") as f:
        json.dump(doc, f)
    return dst


def test_map_file_report_without_launch_calls_says_why(tmp_path):
    s, lg = (
        _strip_launch_calls(DATA / f"vllm_{n}.json.gz", tmp_path / f"v{n}.json.gz") for n in (2, 6)
    )
    att = attribute(_vllm_arm(s, lg))
    assert att.host is not None and not att.host.rows
    page = _Page(report.write_html(tmp_path / "m.html", [att]).read_text())
    assert not page.tables and not page.explained
    (why,) = page.absent
    assert why.startswith("No host launch table:") and "no launch calls" in why
    assert tables.host_report(att)["host"] is None


def test_cpu_run_and_unreadable_calls_say_why():
    att = attribute(load_arm(H200 / "merged_triton"))
    cpu = dataclasses.replace(att, device="cpu", host=None)
    assert tables.host_absent(cpu) == "CPU run: no GPU launch calls were traced"
    note = "no host launch statistics: cannot read the runtime calls (x)"
    bad = dataclasses.replace(att, host=None, notes=[*att.notes, note])
    assert tables.host_absent(bad) == note
    assert tables.host_absent(att) is None
