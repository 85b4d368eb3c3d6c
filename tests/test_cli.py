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
