"""What tuning/cache.apply_held_layouts serves from the caches the towers were tuned into
from cold (session 62's H200 "iso" caches, this session's H100 weight_only one): each key
whose served choice differs from the one the file stored (the tie rule before it), with the
tile its siblings hold. The decode step's own verdict on each is in moves.txt.

No GPU:  python benchmarks/results/session63_2026-12-07/held_check.py > .../held_check.txt
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from fp8tower.tuning.cache import config_label, read_cache_file

RESULTS = Path(__file__).resolve().parents[1]
CACHES = ["session62_2026-12-07/ctx/tuning_cache_per_tensor_iso.json.gz",
          "session62_2026-12-07/ctxb/tuning_cache_channel_token_iso.json.gz",
          "session62_2026-12-07/ctxb/tuning_cache_block128_iso.json.gz",
          "session63_2026-12-07/wo_ctx/tuning_cache_weight_only_iso.json.gz"]


def main() -> None:
    for name in CACHES:
        path = RESULTS / name
        stored = json.loads(gzip.decompress(path.read_bytes()))
        served = read_cache_file(path).entries
        print(f"{name} ({stored['meta']['gpu']}): {len(served)} keys")
        for key, e in sorted(served.items()):
            raw = stored["entries"][key]
            if (raw["backend"], raw["config"]) != (e.backend, e.config):
                print(f"  {key}: held {sorted(e.held)}\n    stored {raw['backend']}["
                      f"{config_label(raw['config'])}]\n    served {e.backend}["
                      f"{config_label(e.config)}]")


if __name__ == "__main__":
    main()
