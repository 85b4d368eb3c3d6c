"""One test per hostile or careless input of issue 9 that used to give a wrong number with
exit code 0, or a traceback: each is now one clear line (TraceError; the CLI exits 2)."""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest
from nsys_db import K, build_nsys
from trace_helpers import DATA, STEP, cli

from fp8tower.trace import TraceError, diff_traces, load_trace
from fp8tower.trace.steps import segment_steps
from fp8tower.trace.synth import write_torch_trace


def _pair_files(tmp_path, short=2, long=6):
    return (
        write_torch_trace(tmp_path / "s.json", short, STEP, seed=1),
        write_torch_trace(tmp_path / "l.json", long, STEP, seed=2),
    )


# -- step counts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "match"),
    [
        ((4, 6), "2 step ranges .* SHORT is declared as 4 steps"),
        ((2, 12), "6 step ranges .* LONG is declared as 12 steps"),
        ((1, 3), "2 step ranges .* SHORT is declared as 1 steps"),  # 'halved'
    ],
)
def test_steps_disagreeing_with_the_step_ranges(tmp_path, steps, match):
    s, lg = _pair_files(tmp_path)
    with pytest.raises(TraceError, match=match):
        diff_traces(load_trace(s), load_trace(lg), steps)
    r = cli("diff", s, lg, "--steps", *steps)
    assert r.exit_code == 2 and "declared as" in r.output


def test_short_and_long_the_same_file(tmp_path):
    s, _ = _pair_files(tmp_path)
    r = cli("diff", s, s, "--steps", 2, 6)
    assert r.exit_code == 2 and "SHORT and LONG are the same file" in r.output


def test_short_and_long_the_same_trace_copied(tmp_path):
    s, _ = _pair_files(tmp_path)
    copy = shutil.copy(s, tmp_path / "copy.json")
    with pytest.raises(TraceError, match="hold the same trace"):
        diff_traces(load_trace(s), load_trace(copy), (2, 6))


def test_short_and_long_swapped(tmp_path):
    s, lg = _pair_files(tmp_path)
    r = cli("diff", lg, s, "--steps", 2, 6)
    assert r.exit_code == 2 and "SHORT and LONG are swapped" in r.output


def test_bad_step_range_regex(tmp_path):
    s, _ = _pair_files(tmp_path)
    with pytest.raises(TraceError, match=r"step range pattern '\(\[' .* not a regular expression"):
        segment_steps(load_trace(s), 2, "([")


# -- kernel durations and other numbers in a Chrome trace -----------------------------------


def _edit_first_kernel(path, edit):
    doc = json.loads(path.read_text())
    ev = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    edit(ev)
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda ev: ev.update(dur=float("nan")), r"'dur' must be a finite number .* got nan"),
        (lambda ev: ev.update(dur=float("inf")), r"'dur' must be a finite number .* got inf"),
        (lambda ev: ev.update(dur=-3.0), r"'dur' must be a finite number .*>= 0, got -3.0"),
        (lambda ev: ev.update(dur=True), r"'dur' must be a finite number .* got True"),
        (lambda ev: ev.pop("dur"), r"'dur' is missing"),
        (lambda ev: ev.update(ts=float("nan")), r"'ts' must be a finite number"),
        (lambda ev: ev.update(ts=2**70), r"'ts' must be a finite number .*2\^53"),
        (lambda ev: ev["args"].update(correlation=2**70), r"'correlation'\] must be an integer"),
        (lambda ev: ev["args"].update(stream=-(2**64)), r"'stream'\] must be an integer"),
        (lambda ev: ev["args"].update(grid=[2**40, 1, 1]), r"'grid'\] must be a list"),
        (lambda ev: ev["args"].update(grid=[1.5, 2]), r"'grid'\] must be a list"),
    ],
)
def test_bad_kernel_values_in_a_chrome_trace(tmp_path, edit, match):
    s, lg = _pair_files(tmp_path)
    _edit_first_kernel(s, edit)
    with pytest.raises(TraceError, match=match) as e:
        load_trace(s)
    assert str(s) in str(e.value) and "event #" in str(e.value)
    out = tmp_path / "d.json"
    r = cli("diff", s, lg, "--steps", 2, 6, "--json", out)
    assert r.exit_code == 2 and not out.exists()


def test_diff_json_is_valid_json(tmp_path):
    """The --json output of an accepted pair parses with a strict reader (no NaN)."""
    s, lg = _pair_files(tmp_path)
    out = tmp_path / "d.json"
    assert cli("diff", s, lg, "--steps", 2, 6, "--json", out).exit_code == 0

    def no_constants(name):
        raise AssertionError(f"{name} in --json output")

    json.loads(out.read_text(), parse_constant=no_constants)


# -- nsys exports ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "value", "match"),
    [
        (
            "start",
            "'abc'",
            r"CUPTI_ACTIVITY_KIND_KERNEL.start holds str 'abc': expected an integer",
        ),
        ("end", "1.5", r"\.end holds float 1.5"),
        ("end", "NULL", r"\.end holds NULL"),
        ("gridX", "X'00'", r"\.gridX holds bytes"),
        ("gridX", "-4", r"\.gridX holds -4: expected an integer in \[0, 2\^31\)"),
        ("correlationId", "'7'", r"\.correlationId holds str '7'"),
        ("end", "start - 5", r"ends before it starts"),
    ],
)
def test_bad_values_in_an_nsys_export(tmp_path, column, value, match):
    path = build_nsys(tmp_path / "t.sqlite", 2, [K("gemm", 5000), K("norm", 1000)])
    con = sqlite3.connect(path)
    # rebuild the table without NOT NULL / type constraints so any value can be stored
    con.execute("CREATE TABLE tmp AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    cols = [r[1] for r in con.execute("PRAGMA table_info(tmp)")]
    con.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(cols)})")
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM tmp")
    con.execute("DROP TABLE tmp")
    con.execute(
        f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET {column} = {value} "
        "WHERE rowid = (SELECT MIN(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)"
    )
    con.commit()
    con.close()
    with pytest.raises(TraceError, match=match) as e:
        load_trace(path)
    assert str(path) in str(e.value)


def test_bad_values_in_nsys_runtime_and_nvtx_tables(tmp_path):
    for table, column in (("CUPTI_ACTIVITY_KIND_RUNTIME", "start"), ("NVTX_EVENTS", "end")):
        path = build_nsys(tmp_path / f"{table}.sqlite", 2, [K("gemm", 5000)], graph=False)
        con = sqlite3.connect(path)
        con.execute(f"UPDATE {table} SET {column} = 'later'")
        con.commit()
        con.close()
        with pytest.raises(TraceError, match=rf"{table}\.{column} holds str 'later'"):
            load_trace(path)


# -- HTML report of arms given with a map file -----------------------------------------------

VLLM = f"{DATA / 'vllm_2.json.gz'},{DATA / 'vllm_6.json.gz'}"
VLLM_OPTS = ("--steps", 2, 6, "--step-range", "^execute_model$")


def test_report_html_of_a_map_arm(tmp_path):
    """Issue 9: the template read att.meta.model, absent for a map arm: UndefinedError."""
    html = tmp_path / "r.html"
    r = cli("report", VLLM, "--map-a", DATA / "vllm_map.json", *VLLM_OPTS, "--html", html)
    assert r.exit_code == 0, r.output
    page = html.read_text()
    assert "<h2>Arm vllm_6" in page and "gdn.in_proj" in page


def test_compare_html_of_a_map_arm_against_a_capture(tmp_path):
    html = tmp_path / "c.html"
    r = cli(
        "compare",
        VLLM,
        DATA / "arm_merged",
        "--map-a",
        DATA / "vllm_map.json",
        *VLLM_OPTS,
        "--html",
        html,
    )
    assert r.exit_code == 0, r.output
    assert "<h2>Arm vllm_6" in html.read_text() and "<h2>Arm merged" in html.read_text()


# -- option values ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["attribute", "report", "compare"])
@pytest.mark.parametrize("ceiling", ["0", "-5", "nan", "inf"])
def test_bad_ceiling_gbps(tmp_path, command, ceiling):
    """Issue 9: --ceiling-gbps 0 was a ZeroDivisionError; negative, NaN, inf were printed."""
    arm = DATA / "arm_merged"
    extra = {"attribute": [], "report": ["--html", tmp_path / "r.html"], "compare": [arm]}[command]
    r = cli(command, arm, *extra, "--ceiling-gbps", ceiling)
    assert r.exit_code == 2 and "--ceiling-gbps" in r.output and "must be a finite" in r.output


@pytest.mark.parametrize("command", ["attribute", "report"])
def test_bad_step_range_regexcli(tmp_path, command):
    extra = ["--html", tmp_path / "r.html"] if command == "report" else []
    r = cli(command, DATA / "arm_merged", *extra, "--step-range", "([")
    assert r.exit_code == 2 and "is not a regular expression" in r.output


# -- trace capture ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--model", "nosuch"], "--model: model: got 'nosuch'; expected a shipped name"),
        (["--model", "tiny-hybrid", "--backend", "nosuch"], "--backend nosuch: unknown backend"),
    ],
)
def test_capture_unknown_model_or_backend(tmp_path, args, match):
    out = tmp_path / "cap"
    r = cli("capture", *args, "--arm", "merged", "--out", out, "--steps", "1,2")
    assert r.exit_code == 2 and match in " ".join(r.output.split()), r.output
    assert not out.exists()


def test_capture_force(tmp_path):
    out = tmp_path / "cap"
    out.mkdir()
    (out / "manifest.json").write_text("{}")  # an existing (old) capture
    (out / "trace_8.json.gz").write_bytes(b"old")
    args = ["capture", "--model", "tiny-hybrid", "--arm", "merged", "--out", out, "--steps", "1,2"]
    r = cli(*args)
    assert r.exit_code == 2 and "already holds a capture; pass --force" in r.output
    assert (out / "trace_8.json.gz").read_bytes() == b"old"
    r = cli(*args, "--force")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json",
        "trace_1.json.gz",
        "trace_2.json.gz",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap"]
    assert cli("attribute", out).exit_code == 0


def test_write_json_refuses_non_finite_figures(tmp_path):
    from fp8tower.trace import report

    with pytest.raises(TraceError, match="non-finite figure"):
        report.write_json(tmp_path / "x.json", {"ms_per_step": float("nan")})
    assert not (tmp_path / "x.json").exists()


def test_manifest_op_that_is_not_a_gemm():
    """n = k = bytes = 0 marks a model capture's non-GEMM op (attention core, GDN core);
    one zero among real sizes is still refused."""
    from fp8tower.trace.manifest import OpRecord

    core = {"label": "layers.*.self_attn", "n": 0, "k": 0, "bytes": 0, "backend": "torch",
            "kernel_regex": "flash"}
    assert OpRecord.from_json(core).n == 0
    with pytest.raises(TraceError, match=r"op\.n must be an integer >= 1"):
        OpRecord.from_json({**core, "k": 5120, "bytes": 10})
    with pytest.raises(TraceError, match=r"op\.n"):
        OpRecord.from_json({**core, "n": False})
