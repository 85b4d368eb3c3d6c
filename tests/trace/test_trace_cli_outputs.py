"""Session 34's new-user audit of the trace commands: output paths checked before any trace
is read, missing output folders made, and errors that say what the path is."""

from __future__ import annotations

from trace_helpers import DATA
from typer.testing import CliRunner

from fp8tower.cli.trace import app

runner = CliRunner()
UNMERGED, MERGED = str(DATA / "arm_unmerged"), str(DATA / "arm_merged")


def run(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result


def test_outputs_into_a_new_folder_are_written(tmp_path):
    out = tmp_path / "new" / "deeper"
    r = run("attribute", UNMERGED, "--json", out / "a.json", "--csv", out / "a.csv")
    assert r.exit_code == 0, r.output
    assert (out / "a.json").is_file() and (out / "a.csv").is_file()
    r = run("compare", UNMERGED, MERGED, "--html", out / "c.html", "--json", out / "c.json")
    assert r.exit_code == 0 and (out / "c.html").is_file() and (out / "c.json").is_file()


def test_an_output_that_is_a_directory_is_refused_before_reading(tmp_path):
    r = run("attribute", tmp_path / "no_such_arm", "--json", tmp_path)
    assert r.exit_code == 2 and f"--json {tmp_path}: is a directory" in " ".join(r.output.split())
    r = run("report", UNMERGED, "--html", tmp_path)
    assert r.exit_code == 2 and "--html" in r.output and "is a directory" in r.output


def test_a_map_that_is_a_directory_and_a_missing_arm_say_so(tmp_path):
    r = run("attribute", f"{DATA / 'vllm_2.json.gz'},{DATA / 'vllm_6.json.gz'}",
            "--steps", 2, 6, "--map", tmp_path)
    assert r.exit_code == 2 and "is a directory, not a map file" in " ".join(r.output.split())
    r = run("attribute", tmp_path / "nope")
    assert r.exit_code == 2 and "(no such file or directory)" in " ".join(r.output.split())
