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
