"""Shared bits of the trace tests (a module, not conftest, so tests can import it)."""

from __future__ import annotations

from pathlib import Path

from fp8tower.trace.synth import KernelSpec

DATA = Path(__file__).parent.parent / "data" / "trace"

GEMM = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT"
REDUCE = (
    "void cublasLt::splitKreduce_kernel<32, 16, int, float>(cublasLt::cublasSplitKParams<float>)"
)
NORM = "void (anonymous namespace)::rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, int)"

#: a small step: a split-K GEMM (2 kernels), a norm, a second GEMM
STEP = [
    KernelSpec(GEMM, 50.0, (132, 1, 4)),
    KernelSpec(REDUCE, 4.0, (80, 1, 1)),
    KernelSpec(NORM, 3.0, (1, 1, 1), (256, 1, 1)),
    KernelSpec(GEMM, 30.0, (64, 1, 1)),
]


def cli(*args):
    """``fp8tower trace ARGS`` through typer's runner: a bad input may exit, never raise."""
    from typer.testing import CliRunner

    from fp8tower.cli.trace import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def edit_trace(src, dst, fn, *, json_path: bool = False):
    """Write the gzipped torch trace ``src`` to ``dst`` with ``fn`` applied to its event list
    (events -> events). ``json_path``: every event's keys in reverse order, so the reader's
    fast scan gives up and json.load reads it."""
    import gzip
    import json

    doc = json.loads(gzip.decompress(Path(src).read_bytes()))
    doc["traceEvents"] = fn(doc["traceEvents"])
    if json_path:
        doc["traceEvents"] = [dict(reversed(e.items())) for e in doc["traceEvents"]]
    Path(dst).write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst
