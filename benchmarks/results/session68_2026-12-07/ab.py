"""Session 68: session 66's chain_pdl.sh A/B summed up from its logs (chain/logs.tgz:
per_tensor and channel_token, whose tuning caches and two tower JSONs did not come back, a
call returns at most 8 files; chain_b128/logs.tgz: block128, by chain_by_gpu.sh, with its
caches). Per scheme and M: the step (ms) of the tower tuned by today's tuner ("cur", timed
twice) and by the tuner timing CUTLASS with its plan's PDL pre-pass ("pdl", twice;
benchmarks/results/session67_2026-12-07/cutlass_prepass_pdl.patch), their ratio and what
each chose; where the caches came back, the keys the pdl tuner moved with both chains' best
times. Writes ab.json beside this file:
    .venv/bin/python benchmarks/results/session68_2026-12-07/ab.py
"""
import gzip
import json
import re
import tarfile
from pathlib import Path

HERE = Path(__file__).parent
CHAIN_PDL = ("BUDGET=590 SCHEMES=\"per_tensor channel_token\" OUT=$OUT bash "
             "benchmarks/results/session66_2026-12-07/chain_pdl.sh")
CHAIN_BY_GPU = "BUDGET=360 OUT=$OUT bash benchmarks/results/session68_2026-12-07/chain_by_gpu.sh"
ROW = re.compile(r"│ (\w+)\s+│\s+(\d+) │ merged │ auto\s+│\s+\d+ │\s+([\d.]+) │"  # scheme M ms
                 r".*│\s+[\d.]+x │ (.+?)\s+│")  # chosen


def tables(archive: Path) -> dict:
    """{(scheme, m): {arm: (ms, chosen)}} from every log's table."""
    out: dict = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            if not name.startswith("tower_"):
                continue
            arm = name.removesuffix(".log").rsplit("_", 1)[1]  # cur, cur2, pdl, pdl2
            for line in tar.extractfile(member).read().decode().splitlines():
                if m := ROW.search(line):
                    out.setdefault((m[1], int(m[2])), {})[arm] = (float(m[3]), m[4])
    return out


def moved(folder: Path, scheme: str) -> list:
    """The keys whose choice differs between the two caches, with each chain's best time of
    Triton and CUTLASS (us)."""
    cache = {}
    for arm in ("cur", "pdl"):
        with gzip.open(folder / f"tuning_cache_{scheme}_{arm}.json.gz") as f:
            cache[arm] = json.load(f)["entries"]

    def best(entry: dict, backend: str) -> float | None:
        times = [c["median_us"] for c in entry["candidates"]
                 if c["backend"] == backend and c["median_us"]]
        return round(min(times), 2) if times else None

    out = []
    for key, cur in sorted(cache["cur"].items()):
        pdl = cache["pdl"][key]
        if (cur["backend"], cur["config"]) != (pdl["backend"], pdl["config"]):
            out.append({"key": key, "cur": cur["backend"], "pdl": pdl["backend"],
                        "cur_chain_us": {b: best(cur, b) for b in ("triton", "cutlass")},
                        "pdl_chain_us": {b: best(pdl, b) for b in ("triton", "cutlass")}})
    return out


def main() -> None:
    gpus, rows, keys, found = set(), [], {}, {}
    for folder in ("chain", "chain_b128"):
        gpus.add((HERE / folder / "status.txt").read_text().splitlines()[0].removeprefix("gpu: "))
        found.update(tables(HERE / folder / "logs.tgz"))
    for scheme in ("block128",):
        keys[scheme] = moved(HERE / "chain_b128", scheme)
    for (scheme, m), arms in sorted(found.items()):
        cur = [arms[a][0] for a in ("cur", "cur2")]
        pdl = [arms[a][0] for a in ("pdl", "pdl2")]
        rows.append({"scheme": scheme, "m": m, "cur_ms": cur, "pdl_ms": pdl,
                     "pdl_over_cur": round(sum(pdl) / sum(cur), 4),
                     "cur_chosen": arms["cur"][1], "pdl_chosen": arms["pdl"][1]})
    for scheme in sorted({r["scheme"] for r in rows}):
        one = next(r for r in rows if r["scheme"] == scheme and r["m"] == 1)
        for r in rows:
            if r["scheme"] == scheme:
                r["cur_ratio_to_m1"] = round(sum(r["cur_ms"]) / sum(one["cur_ms"]), 4)
                r["pdl_ratio_to_m1"] = round(sum(r["pdl_ms"]) / sum(one["pdl_ms"]), 4)
    doc = {"gpu": sorted(gpus), "source": ["chain/logs.tgz", "chain_b128/logs.tgz"],
           "commands": [CHAIN_PDL, CHAIN_BY_GPU],
           "rows": rows, "moved_keys": keys}
    (HERE / "ab.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    for r in rows:
        print(f"{r['scheme']:14s} M={r['m']:2d} cur {r['cur_ms']} pdl {r['pdl_ms']} "
              f"pdl/cur {r['pdl_over_cur']:.4f}  M-ratio cur {r['cur_ratio_to_m1']} "
              f"pdl {r['pdl_ratio_to_m1']}  [{r['cur_chosen']} | {r['pdl_chosen']}]")
    for scheme, ks in keys.items():
        for k in ks:
            print(f"{scheme} moved {k}")


if __name__ == "__main__":
    main()
