"""The boundary timeline (benchmarks/results/boundary_timeline_H200_2026-12-04/) on the CPU:
its patch applies to today's kernel and writes one record a program under the interpreter,
and its decomposition adds up (the benchmark itself needs a GPU)."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

_ROOT = Path(__file__).resolve().parents[1]
_DIR = _ROOT / "benchmarks" / "results" / "boundary_timeline_H200_2026-12-04"
_spec = importlib.util.spec_from_file_location("bench_boundary", _DIR / "bench_boundary.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_boundary"] = bench  # its dataclasses look their module up there
_spec.loader.exec_module(bench)

W = bench.STAMP_WORDS


def _records(rows: list[dict]) -> torch.Tensor:
    rec = torch.zeros(len(rows), W, dtype=torch.int64)
    for i, r in enumerate(rows):
        for k, v in r.items():
            rec[i, bench.COL[k]] = v
        rec[i, bench.COL["written"]] = 1
    return rec


def test_a_slot_is_summarized_in_us_after_t0_and_a_partial_one_refused():
    rec = _records([
        {"t_start": 1000, "t_wait": 3000, "t_loop": 9000, "t_end": 10000, "smid": 0,
         "reducer": 1, "c_start": 0, "c_wait": 4000, "c_end": 20000},
        {"t_start": 2000, "t_wait": 3000, "t_loop": 11000, "t_end": 12000, "smid": 1,
         "reducer": 0, "c_start": 0, "c_wait": 2000, "c_end": 20000},
        {"t_start": 3000, "t_wait": 4000, "t_loop": 12000, "t_end": 16000, "smid": 1,
         "reducer": 1, "c_start": 0, "c_wait": 2000, "c_end": 24000},
    ])
    s = bench.summarize_slot(rec, 1000, ghz=2.0)
    assert s["start_first"] == 0.0 and s["start"] == 1.0  # us after t0
    assert (s["wait_first"], s["wait"], s["wait_last"]) == (2.0, 2.0, 3.0)
    assert (s["end"], s["end_last"], s["loop"]) == (11.0, 15.0, 10.0)
    assert s["end_p90"] == pytest.approx(11.0 + 0.8 * 4.0)  # between the 2nd and 3rd of 3
    assert (s["programs"], s["sms"], s["reducers"]) == (3, 2, 2)
    assert s["resident_clock"] == 1.0  # 2000 cycles at 2 GHz
    assert s["body_clock"] == 9.0
    # SM 1: from its first begin (2000 ns, 0 cycles) to its last end (16000 ns, 24000 cycles)
    assert bench.clock_ghz(rec, min_span_ns=10_000) == pytest.approx(24000 / 14000)
    assert bench.clock_ghz(rec) is None  # no SM spans 20 us
    rec[1, bench.COL["written"]] = 0
    with pytest.raises(RuntimeError, match="1 of 3 programs wrote no record"):
        bench.summarize_slot(rec, 1000, ghz=None)
    rec[:, bench.COL["written"]] = 0
    assert bench.summarize_slot(rec, 1000, ghz=None) is None


def _slot(start, wait, end, end_last, n=64, k=128, x_fp8=False):
    return {"x_fp8": x_fp8, "start_first": start, "start": start + 0.1, "wait_first": wait,
            "wait": wait, "wait_last": wait, "loop": end - 0.5, "end": end, "end_last": end_last,
            "end_p90": end_last,
            "programs": 4, "sms": 4, "reducers": 4, "n": n, "k": k}


OPS = [
    {"what": "gemm", "label": "a", "n": 64, "k": 128, "bytes": 4_000_000},
    {"what": "standin", "label": "s", "n": 128, "k": 128, "bytes": 0},
    {"what": "gemm", "label": "b", "n": 64, "k": 128, "bytes": 8_000_000},
    {"what": "gemm", "label": "c", "n": 64, "k": 128, "bytes": 2_000_000},
]
GEMMS = [0, 2, 3]


def test_the_terms_sum_to_the_interval_and_name_what_lies_between():
    ceiling = 4000.0  # GB/s: 4 MB take 1 us
    b = {"x_fp8": True}  # b reads x from its pre-pass
    replays = [[_slot(0.0, 1.0, 3.0, 3.5), _slot(2.0, 5.0, 8.0, 8.2, **b),
                _slot(7.0, 9.0, 10.0, 10.5)],
               [_slot(0.0, 1.0, 3.2, 3.6), _slot(2.0, 5.2, 8.0, 8.4, **b),
                _slot(7.0, 9.0, 10.0, 10.5)]]
    out = bench.analyze(replays, OPS, GEMMS, ceiling)
    a, b, c = out["gemms"]
    assert a["next"] == "standin+prepass" and b["next"] == "gemm" and c["next"] is None
    assert a["at_ceiling"] == 1.0 and b["at_ceiling"] == 2.0
    assert a["interval"] == pytest.approx(4.1)  # (4.0 + 4.2) / 2
    assert a["body_excess"] == pytest.approx(1.1) and a["tail"] == pytest.approx(0.45)
    assert a["release"] == pytest.approx(1.55)
    for r in (a, b):
        terms = r["at_ceiling"] + r["body_excess"] + r["tail"] + r["release"]
        assert terms == pytest.approx(r["interval"])
        assert r["beyond"] == pytest.approx(r["interval"] - r["at_ceiling"])
    assert b["early"] == pytest.approx(3.55 - 2.0)  # a's last program ended after b began
    assert "interval" not in c and c["resident"] == pytest.approx(1.9)
    assert out["by_next"]["gemm"]["count"] == 1
    assert out["by_next"]["standin+prepass"]["release"] == pytest.approx(1.55)


def test_a_replay_whose_launches_are_not_the_steps_gemms_is_refused():
    good = [_slot(0.0, 1.0, 3.0, 3.5), _slot(2.0, 5.0, 8.0, 8.2), _slot(7.0, 9.0, 10.0, 10.5)]
    with pytest.raises(ValueError, match="2 stamped launches, the step has 3"):
        bench.analyze([good[:2]], OPS, GEMMS, 4000.0)
    swapped = [good[0], {**good[1], "n": 32}, good[2]]
    with pytest.raises(ValueError, match="launch 1: 32x128 where the step runs b 64x128"):
        bench.analyze([swapped], OPS, GEMMS, 4000.0)


def test_the_book_hands_out_disjoint_slices_and_says_when_it_is_full():
    book = bench.StampBook(words=3 * W, device="cpu")
    a = book.take(2, {"n": 1})
    b = book.take(1, {"n": 2})
    assert a.numel() == 2 * W and b.numel() == W and b.data_ptr() == a.data_ptr() + 2 * W * 8
    assert [s.offset for s in book.slots] == [0, 2 * W]
    with pytest.raises(RuntimeError, match="stamp buffer full"):
        book.take(1, {})
    book.reset()
    assert book.used == 0 and book.slots == []


_RUN = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import bench_boundary as bench
from fp8tower.kernels import fp8_gemm
book = bench.StampBook(words=4096, device="cpu")
bench.install(book)
torch.manual_seed(0)
n, k, m = 64, 512, 1
w = (torch.randn(n, k) * 0.1).to(torch.float8_e4m3fn)
x = (torch.randn(m, k) * 0.02).to(torch.float8_e4m3fn).to(torch.bfloat16)  # exact in FP8 / 0.02
ws, xs = torch.full((n,), 0.01), torch.tensor([0.02])
out = {}
for split in (1, 2):
    ys = []
    for on in (False, True):
        book.enabled = on
        y = torch.empty(m, n, dtype=torch.bfloat16)
        part = torch.zeros(split, 16, n) if split > 1 else None
        cnt = torch.zeros(2, dtype=torch.int32) if split > 1 else None
        grid = fp8_gemm.launch(w, x, y, ws, xs, None, part, cnt, scheme_id=0, x_fp8=False,
                               block_n=32, block_m=16, block_k=128, split_k=split,
                               num_warps=4, num_stages=2)
        ys.append(y)
    s = book.slots[-1]
    rec = book.buf[s.offset:s.offset + s.programs * bench.STAMP_WORDS].view(-1, bench.STAMP_WORDS)
    out[split] = {"grid": list(grid), "programs": s.programs, "meta": s.meta,
                  "written": rec[:, bench.COL["written"]].tolist(),
                  "prog": rec[:, bench.COL["prog"]].tolist(),
                  "reducers": int(rec[:, bench.COL["reducer"]].sum()),
                  "smid": rec[:, bench.COL["smid"]].tolist(),
                  "same_bits": bool(torch.equal(ys[0], ys[1]))}
from fp8tower.formats import Scheme
from fp8tower.kernels import act_quant as aq
xq = torch.randn(2, 384).to(torch.bfloat16)
for scheme in (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.BLOCK128, Scheme.WEIGHT_ONLY):
    qs = []
    for on in (False, True):
        book.enabled = on
        grid, args, kw, q, scale = aq.quantize_args(
            xq, scheme, torch.tensor(0.02) if scheme is Scheme.PER_TENSOR else None)
        aq._fp8_act_quant_kernel[grid](*args, **kw)
        qs.append((q.view(torch.uint8).clone(), scale.clone()))
    s = book.slots[-1]
    rec = book.buf[s.offset:s.offset + s.programs * bench.STAMP_WORDS].view(-1, bench.STAMP_WORDS)
    out[scheme.value] = {"programs": s.programs, "meta": s.meta,
                         "written": rec[:, bench.COL["written"]].tolist(),
                         "prog": rec[:, bench.COL["prog"]].tolist(),
                         "same_bits": bool(torch.equal(qs[0][0], qs[1][0])
                                           and torch.equal(qs[0][1], qs[1][1]))}
print(json.dumps(out))
"""


def test_the_patched_kernels_write_one_record_a_program_under_the_interpreter(tmp_path):
    """stamps.patch applied to a copy of today's package: every program's record written,
    its program id, one reducer a tile with split-K; y the same bits as without stamps; the
    same for the activation pre-pass of every scheme."""
    pytest.importorskip("triton")
    src = tmp_path / "src"
    shutil.copytree(_ROOT / "src" / "fp8tower", src / "fp8tower",
                    ignore=shutil.ignore_patterns("__pycache__"))
    applied = subprocess.run(["git", "apply", str(_DIR / "stamps.patch")], cwd=tmp_path,
                             capture_output=True, text=True, check=False)
    assert applied.returncode == 0, f"stamps.patch no longer applies: {applied.stderr}"
    env = {**os.environ, "PYTHONPATH": f"{src}:{_ROOT / 'benchmarks'}", "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", _RUN, str(_DIR)], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for split, tiles in (("1", 2), ("2", 2)):
        r = out[split]
        programs = r["grid"][0] * r["grid"][1] * r["grid"][2]
        assert r["programs"] == programs == tiles * int(split)
        assert r["written"] == [1] * programs
        assert r["prog"] == list(range(programs))
        assert r["reducers"] == tiles  # unsplit: every program; split: the last of each tile
        assert r["smid"] == [-1] * programs  # the interpreter has no SM ids
        assert r["same_bits"]
        assert r["meta"]["n"] == 64 and r["meta"]["k"] == 512 and r["meta"]["split_k"] == int(split)
        assert r["meta"]["kind"] == "gemm"
    # the pre-pass: every exit of its kernel (per_tensor / channel_token at the end, block128's
    # groups a program and weight_only's split return early) writes the record
    for scheme in ("per_tensor", "channel_token", "block128", "weight_only"):
        r = out[scheme]
        assert r["meta"]["kind"] == "prepass" and r["meta"]["k"] == 384, scheme
        assert r["written"] == [1] * r["programs"] and r["programs"] >= 2, scheme
        assert r["prog"] == list(range(r["programs"])), scheme
        assert r["same_bits"], scheme


def _chain(gemms: int, tick_ns: int, ghz: float = 1.98,
           gap_ns: int = 5_000) -> tuple[list[tuple], list[int]]:
    """One replay's records of ``gemms`` GEMMs of two programs (SM 0 and 1, whose clock64
    counters differ by an offset), about ``gap_ns`` apart; globaltimer rounded down to ``tick_ns``
    (the chain's phase against the tick varies, as a real one's does); and the true waits."""
    recs, waits = [], []
    sm_offset = {0: 7_000_000, 1: 123_456_789}  # cycles
    phase = random.Random(0)
    for g in range(gemms):
        wait = 10_000 + gap_ns * g + phase.randrange(1000)  # ns
        waits.append(wait)
        rows = []
        for sm, end in ((0, wait + 3_000), (1, wait + 3_400)):
            true = {"start": wait - 1_500, "wait": wait, "loop": end - 300, "end": end}
            row = {"smid": sm, "reducer": 1}
            for f, t in true.items():
                row["t_" + f] = 1_700_000_000_000_000_000 + (t // tick_ns) * tick_ns
                row["c_" + f] = int(t * ghz) + sm_offset[sm]
            rows.append(row)
        recs.append((_records(rows), {"n": 64, "k": 128, "x_fp8": False}))
    return recs, waits


def test_clock64_aligned_stamps_recover_what_a_coarse_globaltimer_rounds_away():
    ops = [{"what": "gemm", "label": f"g{i}", "n": 64, "k": 128, "bytes": 4_000_000}
           for i in range(40)]
    gemms = list(range(40))
    recs, waits = _chain(40, tick_ns=1000)
    out = bench.decompose([recs], ops, gemms, ceiling=4000.0)
    assert out["clock_ghz"] == [pytest.approx(1.98, rel=5e-3)]  # a 1 us tick over 200 us
    rows = out["aligned"]["gemms"]
    for r in rows:  # each within 0.1 us of the truth
        assert r["tail"] == pytest.approx(0.2, abs=0.1)
        assert r["body_excess"] == pytest.approx(3.2 - 1.0, abs=0.1)
    for r, w, w_next in zip(rows, waits, waits[1:]):
        assert r["release"] == pytest.approx((w_next - w - 3400) / 1e3, abs=0.1)
    # globaltimer alone, rounded to 1 us, cannot see the 0.2 us tail of any single GEMM
    assert all(r["tail"] in (0.0, 0.5, 1.0) for r in out["raw"]["gemms"])


def test_launches_of_several_steps_keep_the_last_steps_and_odd_counts_are_refused():
    ops = [{"what": "gemm", "label": f"g{i}", "n": 64, "k": 128, "bytes": 4_000_000}
           for i in range(4)]
    out = bench.decompose([_chain(8, tick_ns=1)[0]], ops, list(range(4)), ceiling=4000.0)
    assert len(out["raw"]["gemms"]) == 4
    _, waits = _chain(8, tick_ns=1)
    t0 = waits[0] - 1500  # the first program's begin
    assert out["first_replay"][0]["wait"] == pytest.approx((waits[4] - t0) / 1e3)
    with pytest.raises(RuntimeError, match="7 stamped launches, not a multiple"):
        bench.decompose([_chain(7, tick_ns=1)[0]], ops, list(range(4)), ceiling=4000.0)


class _FakeTower:
    """A step of GEMM, stand-in, GEMM, GEMM: reconfigure takes the Triton GEMMs' slots from
    the book as plan builds would; each replay writes their programs' records there."""

    def __init__(self, book):
        from types import SimpleNamespace as NS

        self.book, self.device, self.replays = book, torch.device("cpu"), 0
        self.static_y = torch.ones(1, 4)
        g = {"kind": "gemm", "backend": "triton", "n": 64, "k": 128, "bytes_moved": 4_000_000}
        self._ops = [NS(label="a", **g), NS(label="s", kind="standin", backend="torch", n=128,
                                             k=128, bytes_moved=0),
                     NS(label="b", **g), NS(label="c", **{**g, "backend": "cutlass"}),
                     NS(label="d", **g)]

    def reconfigure(self, m):
        if self.book.enabled:  # three Triton GEMMs, two programs each
            self.slots = [self.book.take(2, {"n": 64, "k": 128, "x_fp8": False})
                          for _ in range(3)]

    def ops(self):
        return self._ops

    def replay(self, n):
        self.replays += 1
        recs, _ = _chain(3, tick_ns=1, ghz=2.0, gap_ns=20_000)
        for view, (rec, _) in zip(self.slots, recs):
            view.copy_(rec.flatten())


def test_a_row_of_the_benchmark_runs_end_to_end_on_a_fake_tower(capsys):
    from types import SimpleNamespace as NS

    book = bench.StampBook(words=64 * W, device="cpu")
    tower = _FakeTower(book)
    timed = []

    def time_tower(t, replays, steps, early):
        timed.append((book.enabled, early))
        return NS(ms_per_step=2.0 if book.enabled else 1.9)

    args = NS(rounds=2, replays=5, steps=8, no_early=True, timeline_replays=3,
              override="cached")
    row = bench.measure_row(tower, book, "per_tensor", 1, args, 4000.0, time_tower=time_tower,
                            reset=lambda: None)
    assert timed == [(False, False), (True, False)] * 2  # arms alternated, early launch off
    assert row["on_over_off"] == pytest.approx(2.0 / 1.9, abs=1e-4) and row["bits_equal"]
    assert (row["triton_gemms"], row["ops"]) == (3, 5)
    assert row["other_ops"] == ["gemm:cutlass", "standin"] and tower.replays == 3
    assert row["clock_ghz"] == [pytest.approx(2.0, rel=1e-3)] * 3
    a, b, d = row["aligned"]["gemms"]
    assert (a["next"], b["next"], d["next"]) == ("standin", "gemm:cutlass", None)
    assert a["launch"] == {"n": 64, "k": 128, "x_fp8": False}  # what the launch recorded
    for r in (a, b):  # about 20 us apart; each ends 3.4 us after its release
        assert r["interval"] == pytest.approx(20.0, abs=1.0)
        assert r["release"] == pytest.approx(r["interval"] - 3.4, abs=0.01)
    json.dumps(row)  # the JSON the benchmark writes
    bench.print_groups(row["aligned"]["by_next"])
    assert "standin" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's refusal")
def test_without_a_gpu_the_benchmark_says_so(tmp_path):
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        bench.main(["--json", str(tmp_path / "b.json")])
    why = "--override: 'prequant=maybe': prequant='maybe' is neither an integer"
    with pytest.raises(SystemExit, match=why):
        bench.main(["--json", str(tmp_path / "b.json"), "--override", "prequant=maybe"])


def test_a_prepass_between_two_gemms_splits_their_release():
    """GEMM a, then b's pre-pass p, then b: release(a) = to p + p's body + after p."""
    def rec(start, wait, end, kind_meta):
        rows = [{"t_start": start, "t_wait": wait, "t_loop": end, "t_end": end + d, "smid": sm,
                 "c_start": 2 * start, "c_wait": 2 * wait, "c_loop": 2 * end,
                 "c_end": 2 * (end + d)} for sm, d in ((0, 0), (1, 200))]
        return _records(rows), kind_meta

    gemm = {"kind": "gemm", "n": 64, "k": 128, "x_fp8": False}
    recs = [rec(0, 1_000, 4_000, gemm),
            rec(2_000, 5_000, 5_800, {"kind": "prepass", "m": 1, "k": 128, "grid": [1, 2]}),
            rec(3_000, 7_000, 9_000, {**gemm, "x_fp8": True})]
    ops = [{"what": "gemm", "label": lab, "n": 64, "k": 128, "bytes": 4_000_000}
           for lab in "ab"]
    a, b = bench.decompose([recs], ops, [0, 1], ceiling=4000.0)["raw"]["gemms"]
    assert a["next"] == "prepass" and b["next"] is None
    assert a["release"] == pytest.approx(7.0 - 4.2)  # b released 2.8 us after a's last end
    assert a["release_to_prepass"] == pytest.approx(5.0 - 4.2)
    assert a["prepass_body"] == pytest.approx(6.0 - 5.0)
    assert a["release_after_prepass"] == pytest.approx(7.0 - 6.0)
    parts = sum(a[t] for t in bench.PREPASS_TERMS)
    assert parts == pytest.approx(a["release"])
    # a pre-pass whose GEMM is not stamped (cuBLASLt / CUTLASS read the same pre-pass) is
    # dropped; the one just before a stamped GEMM is attached (session 35's channel_token crash)
    p1, p2, g = {"kind": "prepass", "id": 1}, {"kind": "prepass", "id": 2}, {"kind": "gemm"}
    assert bench.attach_prepasses([p1, p2, g]) == [{**g, "prepass": p2}]
    assert bench.attach_prepasses([p1, g, g]) == [{**g, "prepass": p1}, g]
