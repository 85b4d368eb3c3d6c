"""Copy a tuning cache, stamped with this machine's and this source tree's metadata
(tuning.cache.environment_meta), into one or more cache directories: the tree on PYTHONPATH
then serves its entries (a cache made with other kernel code is ignored as stale). For
before/after runs at the same cached configs: ab_tower.sh (once per tree), retune_ab.sh.
``--prefetch N``: every Triton config launched with PDL gets PREFETCH N, for a cache tuned
before configs.PDL_PAIR's depth changed (the same choices at the new depth; the timings kept
in it were measured at the old one).

The stamp includes ``early_launch`` (whether this process's timed graphs would launch PDL
kernels early: FP8TOWER_EARLY_LAUNCH and the driver's edge API, tuning.timer.early_launch_state):
run it on the GPU machine, with the FP8TOWER_EARLY_LAUNCH of the runs that will read the copy.

    PYTHONPATH=src python3 benchmarks/restamp_cache.py CACHE_JSON OUT_DIR [OUT_DIR ...]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os


def read_cache(path: str) -> dict:
    """The JSON at ``path``, or at ``path + ".gz"`` when only that exists (the results folders
    keep their tuning caches gzipped: benchmarks/compact_results.py), or gzipped at ``path``."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path += ".gz"
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def set_prefetch(node, depth: int) -> int:
    """Set ``prefetch`` to ``depth`` in every Triton config with ``pdl`` under ``node`` (an
    entry's choice, its candidates, its context rows); returns how many it set."""
    count = 0
    if isinstance(node, dict):
        cfg = node.get("config")
        if node.get("backend") == "triton" and isinstance(cfg, dict) and cfg.get("pdl"):
            cfg["prefetch"] = depth
            count += 1
        for v in node.values():
            count += set_prefetch(v, depth)
    elif isinstance(node, list):
        count += sum(set_prefetch(v, depth) for v in node)
    return count


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache", help="a tuning cache file (e.g. a results tuning_cache.json; its "
                                  ".json.gz is read where only that exists)")
    ap.add_argument("out_dirs", nargs="+", help="cache directories to write it into")
    ap.add_argument("--gpu", help="the GPU's name (default: torch's current CUDA device)")
    ap.add_argument("--prefetch", type=int, help="set PREFETCH of every Triton PDL config")
    args = ap.parse_args(argv)
    if args.prefetch is not None and args.prefetch < 0:
        ap.error(f"--prefetch must be >= 0, got {args.prefetch}")
    try:
        data = read_cache(args.cache)
    except (OSError, ValueError) as e:
        ap.error(f"cannot read the tuning cache {args.cache}: {e}")
    if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
        ap.error(f"{args.cache} is not a tuning cache (expected an object with 'entries')")
    missing = [d for d in args.out_dirs if not os.path.isdir(d)]
    if missing:
        ap.error(f"not a directory: {', '.join(missing)}")

    import torch

    from fp8tower import provenance
    from fp8tower.tuning import cache

    if args.gpu is None and not torch.cuda.is_available():
        ap.error("no CUDA GPU visible: name the GPU with --gpu")
    gpu = args.gpu or torch.cuda.get_device_name()
    found = data.get("meta") if isinstance(data.get("meta"), dict) else {}
    data["meta"] = cache.environment_meta(gpu)
    if args.prefetch is not None:
        print("prefetch set on", set_prefetch(data["entries"], args.prefetch), "Triton PDL configs")
    print("kernels", provenance.kernel_code(), "meta changed:",
          {k: (found.get(k), v) for k, v in data["meta"].items() if found.get(k) != v})
    for out in args.out_dirs:
        path = os.path.join(out, cache.cache_file_name(gpu))
        with open(path, "w") as f:
            json.dump(data, f)
        print("wrote", path)


if __name__ == "__main__":
    main()
