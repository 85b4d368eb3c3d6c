"""`fp8tower bench` result files: default names never overwrite an earlier record, and an
unwritable --json is refused before anything is measured."""

import datetime
import json

import pytest
from typer.testing import CliRunner

from fp8tower.cli.bench import app
from fp8tower.provenance import result_path

runner = CliRunner()
FAST = ("--model", "tiny-hybrid", "--replays", "1", "--steps", "1", "--arms", "merged",
        "--backends", "reference")


def run(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result


def test_result_path_never_collides(tmp_path):
    when = datetime.datetime(2026, 12, 2, 9, 8, 7, tzinfo=datetime.timezone.utc)
    got = []
    for _ in range(4):
        p = result_path(tmp_path / "r", "tower_x_cpu", when)
        p.parent.mkdir(exist_ok=True)
        p.write_text("{}")
        got.append(p.name)
    assert got == ["tower_x_cpu_2026-12-02.json", "tower_x_cpu_2026-12-02_090807.json",
                   "tower_x_cpu_2026-12-02_090807-2.json", "tower_x_cpu_2026-12-02_090807-3.json"]


def test_two_default_tower_runs_on_one_day_keep_both_records(tmp_path, monkeypatch):
    """Found: `--m 1` then `--m 8 --scheme channel_token` left one file, the second's."""
    monkeypatch.chdir(tmp_path)  # no benchmarks/results here: the current folder
    assert run("tower", *FAST, "--m", "1").exit_code == 0
    assert run("tower", *FAST, "--m", "3").exit_code == 0
    files = sorted(tmp_path.glob("tower_tiny-hybrid_cpu_*.json"))
    assert len(files) == 2, files
    assert sorted(json.loads(f.read_text())["rows"][0]["m"] for f in files) == [1, 3]


def test_explicit_json_is_overwritten_as_given(tmp_path):
    out = tmp_path / "t.json"
    out.write_text("old")
    assert run("tower", *FAST, "--m", "1", "--json", out).exit_code == 0
    assert json.loads(out.read_text())["schema"] == "fp8tower.bench.tower/1"


@pytest.fixture
def no_timing(monkeypatch):
    """bench_tower / bench_generate fail the test if called: the path is checked first."""
    import fp8tower.hf.generate
    import fp8tower.tower.bench

    def called(*a, **k):
        raise AssertionError("measured before the --json path was checked")

    monkeypatch.setattr(fp8tower.tower.bench, "bench_tower", called)
    monkeypatch.setattr(fp8tower.hf.generate, "bench_generate", called)


@pytest.mark.parametrize("command", ["tower", "generate"])
def test_a_directory_json_is_refused_before_measuring(tmp_path, no_timing, command):
    args = FAST[:2] if command == "generate" else FAST
    r = run(command, *args, "--json", tmp_path)
    assert r.exit_code == 2, r.output
    out = " ".join(r.output.split())
    assert f"error: --json {tmp_path}: is a directory" in out


def test_a_json_under_a_file_is_refused_before_measuring(tmp_path, no_timing):
    (tmp_path / "f").write_text("")
    r = run("tower", *FAST, "--json", tmp_path / "f" / "sub" / "t.json")
    assert r.exit_code == 2, r.output
    assert f"{tmp_path / 'f'} is not a directory" in " ".join(r.output.split())


def test_default_generate_name_never_collides(tmp_path, monkeypatch):
    import fp8tower.hf.generate
    from fp8tower.provenance import now_iso

    monkeypatch.chdir(tmp_path)
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)  # as in a checkout
    monkeypatch.setattr(fp8tower.hf.generate, "bench_generate", lambda *a, **k: {
        "gpu": None, "rows": [], "model_type": "tiny", "date": now_iso()})
    for _ in range(2):
        assert run("generate", "--model", "tiny-hybrid").exit_code == 0
    assert len(list((tmp_path / "benchmarks" / "results").glob("generate_*.json"))) == 2
