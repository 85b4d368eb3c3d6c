"""Session 25: a copy of a tuning cache without the keys whose choice is a split Triton
program of at most configs.ALL_IN_FLIGHT_MAX_STEPS K steps, so that `auto` tunes them again
(with the tuner's refinements) in the run that reads it. --keep KEY_SUBSTRING keeps matching
keys (the tower's in-context choices).

    python3 drop_split_keys.py CACHE_JSON OUT_JSON [--keep block128 ...]
"""

import argparse
import json
import math
from pathlib import Path

from fp8tower.kernels.configs import ALL_IN_FLIGHT_MAX_STEPS

ap = argparse.ArgumentParser()
ap.add_argument("cache")
ap.add_argument("out")
ap.add_argument("--keep", nargs="*", default=[])
args = ap.parse_args()
doc = json.loads(Path(args.cache).read_text())
dropped = []
for key, e in list(doc["entries"].items()):
    cfg, k = e.get("config") or {}, e["problem"]["k"]
    if e["backend"] != "triton" or any(s in key for s in args.keep):
        continue
    steps = math.ceil(math.ceil(k / cfg["block_k"]) / cfg["split_k"])
    if cfg["split_k"] > 1 and steps <= ALL_IN_FLIGHT_MAX_STEPS:
        dropped.append(key)
        del doc["entries"][key]
Path(args.out).write_text(json.dumps(doc, indent=1))
print(f"dropped {len(dropped)} keys:", *dropped, sep="\n  ")
