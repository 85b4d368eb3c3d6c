"""`trace diff` checks the declared --steps against every step boundary the traces have (step
ranges, one cudaGraphLaunch per step), says so when they have none, refuses a LONG with no
more kernels than SHORT, names negative launch counts for what they are, and refuses a
negative --top. The traces are the committed ones of tests/data/trace, edited in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest
from trace_helpers import DATA, cli, edit_trace

from fp8tower.trace import TraceError, diff_traces, load_trace


def _edited(src: Path, dst: Path, keep=lambda e: True, shift_us: float = 0.0) -> Path:
    """A copy of the trace ``src`` with only the events ``keep`` accepts, times shifted."""
    def fn(events):
        kept = [e for e in events if keep(e)]
        for e in kept:
            if "ts" in e:
                e["ts"] = float(e["ts"]) + shift_us
        return kept

    return edit_trace(src, dst, fn)


def _without_ranges(tmp_path, arm="arm_unmerged"):
    """The graph-replay pair of ``arm`` without its step ranges: one cudaGraphLaunch per step."""

    def keep(e):
        return e.get("cat") not in ("user_annotation", "gpu_user_annotation")

    return (
        _edited(DATA / arm / "trace_2.json.gz", tmp_path / "s.json.gz", keep),
        _edited(DATA / arm / "trace_6.json.gz", tmp_path / "l.json.gz", keep),
    )


OLD = (DATA / "old_2.json.gz", DATA / "old_6.json.gz")
VLLM = (DATA / "vllm_2.json.gz", DATA / "vllm_6.json.gz")
NO_BOUNDARY = "per-step numbers rest on --steps alone"


# -- 1. the declared steps against the traces' step boundaries -------------------------------


def test_step_range_option_checks_foreign_ranges():
    r = cli("diff", *VLLM, "--steps", 2, 10, "--step-range", "execute_model")
    assert r.exit_code == 2
    assert "6 step ranges matching 'execute_model'" in r.output and "declared as 10" in r.output
    r = cli("diff", *VLLM, "--steps", 2, 6, "--step-range", "execute_model")
    assert r.exit_code == 0, r.output
    assert NO_BOUNDARY not in r.output and "6.000" in r.output


def test_step_range_option_rejects_a_bad_regex():
    r = cli("diff", *VLLM, "--steps", 2, 6, "--step-range", "(")
    assert r.exit_code == 2 and "not a regular expression" in r.output


@pytest.mark.parametrize("steps", [(2, 10), (4, 12), (2, 5)])
def test_graph_launches_check_the_steps(tmp_path, steps):
    s, lg = _without_ranges(tmp_path)
    with pytest.raises(TraceError, match=r"4 more cudaGraphLaunch calls in LONG \(6\) than in "):
        diff_traces(load_trace(s), load_trace(lg), steps)
    r = cli("diff", s, lg, "--steps", *steps)
    assert r.exit_code == 2 and "cudaGraphLaunch" in r.output and "--steps" in r.output


@pytest.mark.parametrize("arm", ["arm_unmerged", "arm_merged"])
def test_graph_launches_confirm_the_right_steps(tmp_path, arm):
    s, lg = _without_ranges(tmp_path, arm)
    d = diff_traces(load_trace(s), load_trace(lg), (2, 6))
    assert d.integral and not d.warnings
    r = cli("diff", s, lg, "--steps", 2, 6)
    assert r.exit_code == 0 and "warning" not in r.output, r.output


def test_several_graph_launches_per_step_are_not_taken_for_a_boundary(tmp_path):
    """2 per declared step: two graphs per step, or --steps halved; either way said."""
    s, lg = _without_ranges(tmp_path)
    r = cli("diff", s, lg, "--steps", 1, 3)
    assert r.exit_code == 0
    assert "2 cudaGraphLaunch calls per declared step" in r.output and NO_BOUNDARY in r.output


@pytest.mark.parametrize("steps", [(2, 6), (2, 10), (1, 3)])
def test_no_boundary_at_all_is_said(steps):
    """Traces without ranges or graph launches stay usable, but the output says what it rests on."""
    d = diff_traces(load_trace(OLD[0]), load_trace(OLD[1]), steps)
    assert len(d.warnings) == 1
    assert "no ranges matching" in d.warnings[0] and "no cudaGraphLaunch" in d.warnings[0]
    r = cli("diff", *OLD, "--steps", *steps)
    assert r.exit_code == 0 and "warning:" in r.output and NO_BOUNDARY in r.output


def test_foreign_ranges_not_asked_for_are_not_a_boundary():
    r = cli("diff", *VLLM, "--steps", 2, 10)
    assert r.exit_code == 0 and NO_BOUNDARY in r.output and "--step-range" in r.output


@pytest.mark.parametrize("bare", ["SHORT", "LONG"])
def test_step_ranges_in_one_trace_only_are_an_error(tmp_path, bare):
    """Audit: LONG without ranges, SHORT with them: LONG's length went unchecked (a 10-step run
    declared as 6 scaled every number by 1.5 silently)."""
    arm = DATA / "arm_unmerged"
    s, lg = arm / "trace_2.json.gz", arm / "trace_6.json.gz"
    no_ranges = _without_ranges(tmp_path)[0 if bare == "SHORT" else 1]
    s, lg = (no_ranges, lg) if bare == "SHORT" else (s, no_ranges)
    with pytest.raises(TraceError, match=f"{bare} holds no step ranges") as e:
        diff_traces(load_trace(s), load_trace(lg), (2, 6))
    assert str(e.value).startswith(str(no_ranges))
    r = cli("diff", s, lg, "--steps", 2, 6)
    assert r.exit_code == 2 and f"{bare} holds no step ranges" in r.output


@pytest.mark.parametrize("command", ["attribute", "compare", "report"])
def test_unchecked_steps_are_warned_by_every_command(tmp_path, command):
    """Audit: only `diff` printed the warning; attribute/compare/report scaled silently."""
    arm = f"{VLLM[0]},{VLLM[1]}"
    args = {
        "attribute": ("attribute", arm, "--map", DATA / "vllm_map.json"),
        "compare": ("compare", arm, arm, "--map-a", DATA / "vllm_map.json",
                    "--map-b", DATA / "vllm_map.json"),
        "report": ("report", arm, "--map-a", DATA / "vllm_map.json",
                   "--html", tmp_path / "r.html"),
    }[command]
    if command != "attribute":
        pytest.importorskip("matplotlib")
        pytest.importorskip("jinja2")
    r = cli(*args, "--steps", 2, 10)
    assert r.exit_code == 0, r.output
    assert "warning: arm vllm_6: no step boundaries to check --steps 2 10" in r.output
    assert NO_BOUNDARY in r.output


def test_unchecked_steps_are_an_attribution_note():
    from fp8tower.trace import attribute, load_arm

    arm = load_arm(f"{VLLM[0]},{VLLM[1]}", map_path=DATA / "vllm_map.json", steps=(2, 10))
    att = attribute(arm)
    assert att.diff.warnings and set(att.diff.warnings) <= set(att.notes)


def test_own_step_ranges_need_no_warning():
    pair = (DATA / "arm_unmerged" / "trace_2.json.gz", DATA / "arm_unmerged" / "trace_6.json.gz")
    r = cli("diff", *pair, "--steps", 2, 6)
    assert r.exit_code == 0 and "warning" not in r.output, r.output


# -- 2. LONG must hold more kernels than SHORT -----------------------------------------------


@pytest.mark.parametrize("src", [OLD[0], VLLM[0]])
def test_two_runs_of_the_same_length(tmp_path, src):
    s = _edited(src, tmp_path / "a.json.gz")
    lg = _edited(src, tmp_path / "b.json.gz", shift_us=7.0)  # a second run, same length
    n = len(load_trace(s).kernels)
    with pytest.raises(TraceError, match=f"LONG .* holds {n} kernels and SHORT .* {n}"):
        diff_traces(load_trace(s), load_trace(lg), (2, 6))
    r = cli("diff", s, lg, "--steps", 2, 6)
    assert r.exit_code == 2 and "must hold more kernels" in r.output


def test_swapped_pair_without_ranges():
    r = cli("diff", OLD[1], OLD[0], "--steps", 2, 6)
    assert r.exit_code == 2
    assert "holds 17 kernels and SHORT" in r.output and "49" in r.output
    assert "swapped" in r.output and "graph-level" not in r.output


# -- 3. negative launch counts ---------------------------------------------------------------


def test_two_different_arms_give_negative_counts():
    s = load_trace(DATA / "arm_unmerged" / "trace_2.json.gz")
    lg = load_trace(DATA / "arm_merged" / "trace_6.json.gz")
    d = diff_traces(s, lg, (2, 6))
    assert not d.integral
    msg = d.fractional_message()
    assert "negative" in msg and "different programs" in msg and "graph-level" not in msg
    assert "-1.000/step" in msg
    r = cli("diff", s.path, lg.path, "--steps", 2, 6)
    assert r.exit_code == 2 and "negative" in r.output and "graph-level" not in r.output


# -- 4. integer options ----------------------------------------------------------------------


@pytest.mark.parametrize("top", [-2, -1])
def test_negative_top_is_refused(top):
    r = cli("diff", *OLD, "--steps", 2, 6, "--top", top)
    assert r.exit_code == 2 and "--top" in r.output


def test_top_zero_and_top_n():
    r = cli("diff", *OLD, "--steps", 2, 6, "--top", 0)
    assert r.exit_code == 0 and "4 more" in r.output
    r = cli("diff", *OLD, "--steps", 2, 6, "--top", 1)
    assert r.exit_code == 0 and "3 more" in r.output
