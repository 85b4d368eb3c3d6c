"""Notes and output wording: negative op time, capture permissions, the bench baseline."""

from __future__ import annotations

import os
import shutil
import stat

import pytest
from trace_helpers import DATA, edit_trace

from fp8tower.tower.bench import BenchRow, add_speedups
from fp8tower.trace import attribute, load_arm


def test_negative_op_time_is_noted(tmp_path):
    arm = tmp_path / "arm_unmerged"
    shutil.copytree(DATA / "arm_unmerged", arm)
    def faster_out_proj(events):
        kernels = [e for e in events if e.get("cat") == "kernel"]
        # after one once-per-run kernel, each op block is qkv (2 launches), z, out_proj
        for i, e in enumerate(kernels[1:]):
            if i % 4 == 3:
                e["dur"] = 0.01  # the long run's out_proj far faster than the short run's
        return events

    edit_trace(arm / "trace_6.json.gz", arm / "trace_6.json.gz", faster_out_proj)
    att = attribute(load_arm(arm))
    out = {op.label: op for op in att.ops}["gdn.out_proj"]
    assert out.ms_per_step < 0
    note = [n for n in att.notes if n.startswith("negative ms/step")]
    assert len(note) == 1 and "gdn.out_proj" in note[0] and "gdn.in_proj_z" not in note[0]
    assert "noise-dominated at 2 and 6 steps" in note[0]


def test_no_negative_note_on_a_clean_capture():
    att = attribute(load_arm(DATA / "arm_unmerged"))
    assert not any(n.startswith("negative ms/step") for n in att.notes)


def test_capture_directory_follows_the_umask(tmp_path):
    pytest.importorskip("torch")
    from fp8tower.trace import capture_pair, fake_workload

    rs, ops, _ = fake_workload()
    old = os.umask(0o022)
    try:
        res = capture_pair(rs, ops, (1, 2), tmp_path / "cap", {"arm": "fake"}, device="cpu",
                           warmup_steps=0)
    finally:
        os.umask(old)
    assert stat.S_IMODE(res.directory.stat().st_mode) == 0o755


def _row(arm, backend, ms=None, status="ok"):
    return BenchRow(scheme="per_tensor", arm=arm, backend=backend, m=1, status=status,
                    ms_per_step=ms)


def test_cpu_baseline_does_not_say_cublaslt_was_expected():
    rows = [_row("unmerged", "reference", 2.0), _row("merged", "reference", 1.0)]
    add_speedups(rows)
    assert rows[0].baseline == "unmerged/reference (the first arm: unmerged/cublaslt not asked for)"
    assert "not run" not in rows[0].baseline and rows[1].speedup == 2.0


def test_gpu_baseline_wording_is_kept_when_cublaslt_cannot_serve():
    rows = [_row("unmerged", "cublaslt", status="skipped"), _row("unmerged", "auto", 2.0)]
    add_speedups(rows)
    assert rows[1].baseline == "unmerged/auto (the first arm: unmerged/cublaslt cannot serve it)"

