import pytest
from typer.testing import CliRunner

from fp8tower import __version__
from fp8tower.cli import app


def test_version_and_info():
    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0 and __version__ in r.output
    r = CliRunner().invoke(app, ["info"])
    assert r.exit_code == 0, r.output
    for word in ("torch", "triton", "reference", "cublaslt", "available"):
        assert word in r.output


def test_package_exports_are_all_importable():
    import fp8tower

    assert set(fp8tower.__all__) == {"__version__", *fp8tower._EXPORTS}
    for name in fp8tower.__all__:
        assert getattr(fp8tower, name) is not None


def test_write_json_to_an_unwritable_path_is_one_error_line(tmp_path, capsys):
    import typer

    from fp8tower.cli._common import write_json

    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(typer.Exit) as e:
        write_json(blocker / "out.json", {"a": 1})
    assert e.value.exit_code == 2
    err = capsys.readouterr().err
    assert "cannot write" in err and "out.json" in err and "Traceback" not in err
    write_json(tmp_path / "new" / "out.json", {"a": 1})
    assert (tmp_path / "new" / "out.json").read_text() == '{\n "a": 1\n}\n'


def test_trace_capture_help_names_what_model_takes():
    """--model said "see fp8tower models", a command that does not exist."""
    from fp8tower.models import list_models

    res = CliRunner().invoke(app, ["trace", "capture", "--help"], terminal_width=200)
    out = " ".join(res.output.split())
    assert res.exit_code == 0 and "fp8tower models" not in out
    assert f"Shipped name ({', '.join(list_models())}) or a config.json / directory" in out


@pytest.mark.parametrize("args,value,lo", [
    (["bench", "tower", "--replays", "0"], 0, 1),
    (["bench", "tower", "--steps", "0"], 0, 1),
    (["bench", "generate", "--context", "0"], 0, 1),
    (["bench", "generate", "--steps", "-2"], -2, 1),
    (["bench", "generate", "--rounds", "0"], 0, 1),
    (["tune", "--shapes", "8x8", "--max-configs", "-1"], -1, 0),
    (["trace", "diff", "a", "b", "--top", "-1"], -1, 0),
    (["trace", "capture", "--model", "tiny-hybrid", "--arm", "merged", "--out", "o",
      "--m", "0"], 0, 1),
    (["trace", "capture-model", "--model", "tiny-hybrid", "--arm", "bf16", "--out", "o",
      "--m", "0"], 0, 1),
    (["trace", "capture-model", "--model", "tiny-hybrid", "--arm", "bf16", "--out", "o",
      "--context", "0"], 0, 1),
    (["trace", "capture-model", "--model", "tiny-hybrid", "--arm", "bf16", "--out", "o",
      "--layers", "0"], 0, 1),
])
def test_an_integer_out_of_range_is_named(args, value, lo):
    """typer's own range check said only "Input should be greater than or equal to 1"."""
    res = CliRunner().invoke(app, args)
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and f"{value}: expected an integer >= {lo}" in out, out


def test_info_says_what_serves_untuned_on_each_gpu(monkeypatch):
    """The measured rule on the GPUs it was measured on, cuBLASLt elsewhere (dispatch's
    safe_default); a user reads which one applies from `fp8tower info`."""
    from fp8tower.cli.info import untuned_default

    assert "rule measured on this GPU" in untuned_default("NVIDIA H100 80GB HBM3")
    assert "rule measured on this GPU" in untuned_default("NVIDIA H200")
    assert untuned_default("NVIDIA H100 PCIe").startswith("cuBLASLt")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert untuned_default(None).startswith("no GPU: the reference backend")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # dispatch then resolves CPU problems to Triton
    assert untuned_default(None).startswith("no GPU: the Triton kernels, interpreted")
    monkeypatch.delenv("TRITON_INTERPRET")
    r = CliRunner().invoke(app, ["info"], env={"COLUMNS": "250"})
    assert r.exit_code == 0 and "untuned default" in r.output


def test_missing_transformers_is_one_line_naming_the_extra(tmp_path):
    """Without transformers, a command that builds a model says which install provides it,
    in one line (before: a traceback, or, in bench generate, any ImportError blamed on it)."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['transformers'] = None\n"
            "from fp8tower.cli import main\n"
            "sys.argv = ['fp8tower', 'bench', 'generate', '--model', 'tiny-hybrid', '--batch',"
            " '1', '--steps', '1', '--rounds', '1', '--context', '4']\n"
            "main()\n")
    r = subprocess.run([sys.executable, "-c", code], check=False, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == ("error: this needs transformers >= 5.17: "
                                "pip install 'fp8tower[hf]'"), r.stderr
