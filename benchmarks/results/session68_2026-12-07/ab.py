"""Session 68: session 66's chain_pdl.sh A/B summed up from its logs (chain/logs.tgz holds
every arm's `bench tower` table; two of the eight tower JSONs did not come back, a call
returns at most 8 files). Per scheme and M: the step (ms) of the tower tuned by today's
tuner ("cur", timed twice) and by the tuner timing CUTLASS with its plan's PDL pre-pass
("pdl", twice; benchmarks/results/session67_2026-12-07/cutlass_prepass_pdl.patch), their
ratio and what each chose. Writes ab.json beside this file:
    .venv/bin/python benchmarks/results/session68_2026-12-07/ab.py
"""
import json
import re
import tarfile
from pathlib import Path

HERE = Path(__file__).parent
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


def main() -> None:
    status = (HERE / "chain" / "status.txt").read_text().splitlines()
    rows = []
    for (scheme, m), arms in sorted(tables(HERE / "chain" / "logs.tgz").items()):
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
    doc = {"gpu": status[0].removeprefix("gpu: "), "source": "chain/logs.tgz",
           "command": "BUDGET=590 SCHEMES=\"per_tensor channel_token\" OUT=$OUT bash "
                      "benchmarks/results/session66_2026-12-07/chain_pdl.sh",
           "rows": rows}
    (HERE / "ab.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    for r in rows:
        print(f"{r['scheme']:14s} M={r['m']:2d} cur {r['cur_ms']} pdl {r['pdl_ms']} "
              f"pdl/cur {r['pdl_over_cur']:.4f}  M-ratio cur {r['cur_ratio_to_m1']} "
              f"pdl {r['pdl_ratio_to_m1']}  [{r['cur_chosen']} | {r['pdl_chosen']}]")


if __name__ == "__main__":
    main()
