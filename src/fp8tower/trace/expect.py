"""Check a capture's launches per step against what the model should launch.

A model capture (fp8tower.hf.capture) writes, into the manifest's meta, what the model's own
structure says each step must launch, counted from its modules, not from any trace::

    "expected_launches": [{"label": "layers.*.linear_attn.in_proj_qkvz", "modules": 48,
                           "per_module": 1, "kernel_regex": "<GEMM kernels>",
                           "what": "GEMM"}, ...],
    "min_attributed_share": 0.99

Each entry: the op row ``label`` must launch ``modules * per_module`` kernels matching
``kernel_regex`` per step (e.g. one GEMM per converted linear or merged group); the rest
of the row's launches (activation quantization, amax) must be a whole number per module.
``min_attributed_share``: the named op rows must hold at least this share of the step's
kernel time. A failed check is a verification error (exit code 1), like a kernel mismatch.
The fields are checked where the manifest is read (manifest._check_expectations).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .diff import INTEGRAL_TOL, is_integral


@dataclass(frozen=True)
class LaunchCheck:
    label: str
    what: str
    expected: float
    observed: float
    ok: bool
    detail: str = ""

    def message(self) -> str:
        state = "ok" if self.ok else "FAILED"
        return (f"{self.label}: {self.what} per step: expected {self.expected:g}, "
                f"observed {self.observed:g} [{state}]{(' ' + self.detail) if self.detail else ''}")


def check_expected(manifest, rows, steps, total_ms: float | None = None) -> list[LaunchCheck]:
    """The checks the manifest's meta asks for (none when it asks for none). ``rows``: the
    attribution's OpRows."""
    if manifest is None:
        return []
    meta = manifest.meta or {}
    by_label = {r.label: r for r in rows}
    out: list[LaunchCheck] = []
    for e in meta.get("expected_launches") or []:
        label, regex = str(e["label"]), str(e.get("kernel_regex", ".*"))
        want = int(e["modules"]) * int(e.get("per_module", 1))
        what = str(e.get("what", "launches"))
        row = by_label.get(label)
        if row is None:
            out.append(LaunchCheck(label, what, want, 0.0, False, "(no such op row)"))
            continue
        pat = re.compile(regex)
        modules = int(e["modules"])
        got = sum(lps for name, lps in row.kernels.items() if pat.search(name))
        rest = row.launches_per_step - got
        per = rest / modules if modules else 0.0
        d = row.steps_diff
        if d > 0:  # exact, on the integer counts (OpRow.integral says why)
            got_more = sum(c for name, c in row.kernel_more.items() if pat.search(name))
            rest_more = row.launches_more - got_more
            whole = rest_more >= 0 and (rest_more % (modules * d) == 0 if modules else
                                        rest_more == 0)
            ok = got_more == want * d and whole
        else:
            whole = is_integral(per)
            ok = abs(got - want) <= INTEGRAL_TOL and whole
        detail = f"(+{per:g} other kernel(s) per module: activation quant / scale)" if per else ""
        if not whole:
            detail = f"(other kernels per module {per:g}: not a whole number)"
        out.append(LaunchCheck(label, what, want, got, ok, detail))
    share = meta.get("min_attributed_share")
    if share is not None and rows:
        named = sum(r.ms_per_step for r in rows)
        total = total_ms if total_ms else named
        got = named / total if total > 0 else 0.0
        detail = "" if total > 0 else f"(kernel time per step {total:g} ms is not positive)"
        out.append(LaunchCheck("(all op rows)", "share of kernel time attributed", float(share),
                               round(got, 5), got >= float(share) - 1e-9, detail))
    return out
