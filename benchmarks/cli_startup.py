"""How fast the `fp8tower` command starts (issue 9: `--version` and `--help` under 0.3 s, the
`trace diff` of the committed 27B graph pair under 1.0 s wall, on the CPU CI machine).

Each command runs ``--runs`` times as a fresh subprocess (``python -m fp8tower ...``, the
checkout's ``src`` first on PYTHONPATH); reported: median and min wall seconds, and median
CPU seconds (user + sys of the child: what the command costs when the machine is shared,
since wall time then includes waiting for a core). Also whether the command imported torch
(``-X importtime``). Writes JSON under benchmarks/results/ with fp8tower.provenance's record.

    python benchmarks/cli_startup.py [--runs 9] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from fp8tower import provenance

PAIR = "tests/data/trace/h200_27b_m1/merged_triton/trace_{}.json.gz"
COMMANDS = {
    "version": (["--version"], 0.3),
    "help": (["--help"], 0.3),
    "trace_diff_27b": (["trace", "diff", PAIR.format(8), PAIR.format(136), "--steps", "8", "136"],
                       1.0),
}


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    return env


def _once(args: list[str]) -> tuple[float, float]:
    """(wall s, child CPU s) of one run; raises if the command fails."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "fp8tower", *args], cwd=REPO, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"fp8tower {' '.join(args)} exited {proc.returncode}: {err[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime


def _imports_torch(args: list[str]) -> bool:
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "fp8tower", *args], cwd=REPO,
                       env=_env(), capture_output=True, text=True, check=True)
    return any(line.rsplit("|", 1)[-1].strip() == "torch" for line in r.stderr.splitlines())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error(f"--runs must be >= 1, got {args.runs}")
    rows = {}
    _once(["--version"])  # warm the page cache and the bytecode cache first
    for name, (cmd, target) in COMMANDS.items():
        runs = [_once(cmd) for _ in range(args.runs)]
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        rows[name] = {
            "command": "fp8tower " + " ".join(cmd),
            "target_wall_s": target,
            "wall_s_median": round(statistics.median(walls), 4),
            "wall_s_min": round(min(walls), 4),
            "cpu_s_median": round(statistics.median(cpus), 4),
            "meets_target": statistics.median(walls) < target,
            "imports_torch": _imports_torch(cmd),
        }
        r = rows[name]
        print(f"{name:16s} wall median {r['wall_s_median']:.3f} s (min {r['wall_s_min']:.3f}), "
              f"cpu {r['cpu_s_median']:.3f} s, target < {target} s: "
              f"{'ok' if r['meets_target'] else 'MISSED'}; imports torch: {r['imports_torch']}")
    load = os.getloadavg()
    doc = {
        "benchmark": "cli_startup",
        "provenance": provenance.record([sys.executable, *sys.argv]),
        "cpus": os.cpu_count(),
        "load_average_1_5_15": [round(x, 2) for x in load],
        "runs": args.runs,
        "units": {"wall_s": "seconds, wall clock of the subprocess",
                  "cpu_s": "seconds, user + sys CPU of the subprocess"},
        "results": rows,
    }
    path = args.json or provenance.result_path(REPO / "benchmarks/results", "cli_startup_cpu",
                                               doc["provenance"]["date"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"load average {load[0]:.1f} on {os.cpu_count()} CPUs; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
