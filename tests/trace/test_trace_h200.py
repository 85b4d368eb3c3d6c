"""Real captures of the Qwen3.5-27B FP8 tower on an H200 (torch 2.11, 2026-11-29), M=1:
unmerged arm on cuBLASLt, merged arm on our Triton kernels, 8 and 136 graph-replayed steps
(tests/data/trace/h200_27b_m1, from `tower.capture_arm`)."""

from pathlib import Path

import pytest

from fp8tower.trace import attribute, compare, load_arm

DATA = Path(__file__).parent.parent / "data" / "trace" / "h200_27b_m1"


@pytest.fixture(scope="module")
def arms():
    return {name: attribute(load_arm(DATA / name)) for name in
            ("unmerged_cublaslt", "merged_triton")}


@pytest.mark.parametrize("name,gemms", [("unmerged_cublaslt", 208), ("merged_triton", 128)])
def test_real_capture_is_integral_and_fully_attributed(arms, name, gemms):
    a = arms[name]
    assert a.device == "cuda" and a.integral
    assert a.mismatches == [], "every op's kernels match its backend's regex"
    assert abs(a.unattributed_launches) < 1e-3 and abs(a.unattributed_ms) < 1e-3
    gemm_calls = sum(op.launches_per_step for op in a.ops if not op.label.startswith("standin"))
    assert gemm_calls >= gemms  # cuBLASLt ops also launch their activation-quant kernel
    # The span of a step agrees with the CUDA-event step time of the same capture run.
    assert a.event_ms_per_step is not None
    assert abs(a.step_times.span_ms / a.event_ms_per_step - 1) < 0.03


def test_real_comparison_ranks_the_merge_lever(arms):
    c = compare(arms["unmerged_cublaslt"], arms["merged_triton"])
    top = {row.group for row in c.rows[:2]}
    assert top == {"attention.qkv", "gdn.gdn_in"}
    assert arms["merged_triton"].ms_per_step < arms["unmerged_cublaslt"].ms_per_step


def test_real_merged_gemms_pay_a_fixed_cost_per_call(arms):
    """Each merged GEMM, 31 MB or 84 MB, takes 4-6 us beyond its bytes at the ceiling: the
    fixed per-call cost that separates the tower from the read ceiling (issue #5)."""
    a = arms["merged_triton"]
    gemms = [op for op in a.ops if not op.label.startswith("standin")]
    assert len(gemms) == 4
    for op in gemms:
        assert 4.0 < a.excess_us_per_call(op) < 6.0, op.label
