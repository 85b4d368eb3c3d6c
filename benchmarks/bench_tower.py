"""The FP8 tower's decode step, arm by arm (unmerged / merged x backends x M x schemes).

A thin wrapper over `fp8tower bench tower` (fp8tower.cli.bench -> fp8tower.tower.bench.bench_tower);
every option of the CLI works here. The JSON goes to benchmarks/results/ by default.

Usage (on a GPU, from the repository root):
    python benchmarks/bench_tower.py --model qwen3.5-27b --m 1,8,32 \\
        --arms unmerged,merged --backends cublaslt,auto --scheme per_tensor
On a CPU-only machine it runs tiny-hybrid with the reference backend (a CPU number).
"""

from __future__ import annotations

import sys

from fp8tower.cli.bench import app

if __name__ == "__main__":
    app(["tower", *sys.argv[1:]], prog_name="bench_tower.py")
