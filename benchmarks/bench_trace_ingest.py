"""Trace ingest speed and memory on the CPU (no GPU needed).

Generates, in the real torch-profiler (kineto) layout:
- the pair of a 208-GEMM decode tower at 8 and 136 steps (~85k kernel events, CUDA graph
  replays: kernels share their cudaGraphLaunch correlation id);
- one trace of ~1M kernel events;
then times `load_trace` + `diff_traces` on the pair against a plain json.load of the pair,
and measures time and peak memory (peak RSS of a fresh process, and tracemalloc's peak) of
ingesting the 1M-event trace. Writes benchmarks/results/trace_ingest_cpu.json.

Usage: python benchmarks/bench_trace_ingest.py [--events 1000000] [--repeat 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fp8tower import provenance
from fp8tower.trace import diff_traces, load_trace
from fp8tower.trace.synth import tower_kernels, write_torch_trace

RESULTS = Path(__file__).parent / "results" / "trace_ingest_cpu.json"

_CHILD = """
import json, sys, time, tracemalloc
def status_kb(key):  # VmHWM is this process's own peak; ru_maxrss would include the parent's
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
from fp8tower.trace import load_trace
base = status_kb("VmRSS")
t = time.perf_counter()
trace = load_trace(sys.argv[1])
dt = time.perf_counter() - t
peak = status_kb("VmHWM")
n = len(trace.kernels)
del trace
tracemalloc.start()
load_trace(sys.argv[1])
tm_peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"seconds": dt, "kernels": n, "rss_base_kb": base, "rss_peak_kb": peak,
                  "tracemalloc_peak_bytes": tm_peak}))
"""


def raw_size(path: Path) -> int:
    n = 0
    with gzip.open(path, "rb") as f:
        while chunk := f.read(16 << 20):
            n += len(chunk)
    return n


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="kernel events of the big trace")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    specs = tower_kernels()  # 590 kernels per step, 208 of them GEMMs
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        short = write_torch_trace(tmp / "short.json.gz", 8, specs, seed=8)
        long = write_torch_trace(tmp / "long.json.gz", 136, specs, seed=136)
        pair_raw = raw_size(short) + raw_size(long)
        pair_gz = short.stat().st_size + long.stat().st_size

        def ingest_and_diff():
            return diff_traces(load_trace(short), load_trace(long), (8, 136))

        result = ingest_and_diff()
        assert result.integral and round(result.launches_per_step) == len(specs)
        ours = timed(ingest_and_diff, args.repeat)

        def plain_json():
            for p in (short, long):
                with gzip.open(p, "rb") as f:
                    json.load(f)

        baseline = timed(plain_json, args.repeat)

        big_steps = -(-args.events // len(specs))
        t = time.perf_counter()
        big = write_torch_trace(tmp / "big.json.gz", big_steps, specs, seed=1)
        gen_s = time.perf_counter() - t
        big_raw, big_gz = raw_size(big), big.stat().st_size
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, str(big)], check=True, capture_output=True, text=True
        )
        mem = json.loads(child.stdout.strip().splitlines()[-1])

    doc = {
        "benchmark": "trace ingest (torch profiler Chrome JSON, gzipped) on the CPU",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "versions": provenance.versions(None),  # numpy / python matter most; torch too
        "machine": {
            "cpu": cpu_name(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "platform": platform.platform(),
        },
        "pair": {
            "steps": [8, 136],
            "kernel_events": round(result.launches_per_step) * 144,
            "raw_json_bytes": pair_raw,
            "gzip_bytes": pair_gz,
            "ingest_and_diff_s": {
                "median": statistics.median(ours),
                "min": min(ours),
                "runs": ours,
            },
            "json_load_s": {
                "median": statistics.median(baseline),
                "min": min(baseline),
                "runs": baseline,
            },
            "speedup_vs_json_load": statistics.median(baseline) / statistics.median(ours),
            "budget_s": 1.5,
        },
        "big": {
            "kernel_events": mem["kernels"],
            "raw_json_bytes": big_raw,
            "gzip_bytes": big_gz,
            "generate_s": gen_s,
            "ingest_s": mem["seconds"],
            "budget_s": 15,
            "peak_rss_bytes": mem["rss_peak_kb"] * 1024,
            "rss_after_imports_bytes": mem["rss_base_kb"] * 1024,
            "peak_rss_over_raw_json": mem["rss_peak_kb"] * 1024 / big_raw,
            "tracemalloc_peak_bytes": mem["tracemalloc_peak_bytes"],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    p, b = doc["pair"], doc["big"]
    print(
        f"pair ({p['kernel_events']} kernels, {pair_raw / 1e6:.0f} MB JSON, {pair_gz / 1e6:.1f} MB "
        f"gz): ingest+diff {p['ingest_and_diff_s']['median']:.3f} s (json.load "
        f"{p['json_load_s']['median']:.3f} s, x{p['speedup_vs_json_load']:.1f})"
    )
    print(
        f"big ({b['kernel_events']} kernels, {big_raw / 1e6:.0f} MB JSON): ingest "
        f"{b['ingest_s']:.2f} s, peak RSS {b['peak_rss_bytes'] / 1e6:.0f} MB "
        f"({100 * b['peak_rss_over_raw_json']:.0f}% of the raw JSON), tracemalloc peak "
        f"{b['tracemalloc_peak_bytes'] / 1e6:.0f} MB"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
