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
