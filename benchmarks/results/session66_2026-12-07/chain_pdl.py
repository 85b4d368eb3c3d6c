"""Session 66's prepared A/B (not run): the tuner's chain times CUTLASS with the pre-pass its
launch plan runs. A CUTLASS call run unplanned (the tuner's chain, backends/cutlass._run)
quantizes x with a pre-pass launched without PDL; its plan (nn/plan._quant_first_plan)
launches that pre-pass with PDL where the config has ``pdl``. So the chain rates CUTLASS
below what the step runs (session 60: 0.52 us a GEMM at M = 32; at M <= 8 the step ran it
1.45 us worse than the chain, for other reasons). ``apply()`` (before any dispatcher exists)
makes the unplanned CUTLASS call quantize as its plan does: ``python3 -c "import sys;
sys.path.insert(0, 'benchmarks/results/session66_2026-12-07'); import chain_pdl;
chain_pdl.apply(); from fp8tower.cli import main; main()" bench tower ...``."""
import dataclasses
import threading

from fp8tower import backends
from fp8tower.backends import act_quant, cutlass
from fp8tower.formats import FP8_DTYPE

_state = threading.local()


class _PlanQuant:
    """``act_quant`` as cutlass._run sees it: for_gemm launches the pre-pass with PDL while
    the call's config has ``pdl`` (as the plan does); everything else is act_quant's."""

    def __getattr__(self, name):
        return getattr(act_quant, name)

    @staticmethod
    def for_gemm(x, weight, act_scale):
        if x.dtype == FP8_DTYPE or not getattr(_state, "pdl", False):
            return act_quant.for_gemm(x, weight, act_scale)
        static = act_scale if act_scale is not None else weight.act_scale
        return act_quant.quantize(x, weight.scheme, static, pdl=True)


def apply() -> None:
    be = backends.get("cutlass")
    run = be.run

    def planlike_run(x, weight, packed, **kw):
        _state.pdl = bool((kw.get("config") or {}).get("pdl"))
        try:
            return run(x, weight, packed, **kw)
        finally:
            _state.pdl = False

    cutlass.act_quant = _PlanQuant()
    backends._load()["cutlass"] = dataclasses.replace(be, run=planlike_run)
