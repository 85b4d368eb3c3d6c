"""Compare two arms op group by op group; the deltas, largest first, are the levers.

Groups are the ops' `group` keys (default: the label), so a merged GEMM in one arm lines up
with the two GEMMs it replaces in the other. delta = first arm - second arm (ms per step):
a positive delta is time the first arm could win by doing what the second does.
"""

from __future__ import annotations

from dataclasses import dataclass

from .attribute import UNATTRIBUTED, Attribution, OpRow
from .errors import TraceError


@dataclass
class Side:
    """One arm's part of a group."""

    ops: list[OpRow]
    extra_ms: float = 0.0  # unattributed kernels (the UNATTRIBUTED group only)
    extra_launches: float = 0.0

    @property
    def labels(self) -> list[str]:
        return [op.label for op in self.ops]

    @property
    def ms_per_step(self) -> float:
        return sum(op.ms_per_step for op in self.ops) + self.extra_ms

    @property
    def launches_per_step(self) -> float:
        return sum(op.launches_per_step for op in self.ops) + self.extra_launches

    @property
    def bytes_per_step(self) -> float | None:
        if not self.ops or any(op.bytes_per_step is None for op in self.ops):
            return None
        return sum(op.bytes_per_step for op in self.ops)

    @property
    def gbps(self) -> float | None:
        b, ms = self.bytes_per_step, self.ms_per_step
        return None if b is None or ms <= 0 else b / ms / 1e6

    @property
    def families(self) -> list[str]:
        return sorted({f for op in self.ops for f in op.families})


@dataclass
class GroupRow:
    group: str
    a: Side
    b: Side

    @property
    def delta_ms(self) -> float:
        return self.a.ms_per_step - self.b.ms_per_step


@dataclass
class Comparison:
    a: Attribution
    b: Attribution
    rows: list[GroupRow]  # largest delta first; the unattributed group last

    @property
    def delta_ms(self) -> float:
        return self.a.ms_per_step - self.b.ms_per_step


def compare(a: Attribution, b: Attribution, *, other_m: bool = False) -> Comparison:
    """Pair the op groups of two attributions; rank by delta (a - b), largest first.
    ``other_m``: arms of one model at different M may be compared (where a larger M's time
    goes, session 21's use); otherwise they are refused."""
    if a.device != b.device:
        raise TraceError(
            f"cannot compare a {a.device} arm ({a.arm}) with a {b.device} arm ({b.arm})"
        )
    _check_one_model(a, b, ("model",) if other_m else ("model", "m"))
    groups: dict[str, GroupRow] = {}
    for side, att in (("a", a), ("b", b)):
        for op in att.ops:
            row = groups.setdefault(op.group, GroupRow(op.group, Side([]), Side([])))
            getattr(row, side).ops.append(op)
    rows = sorted(groups.values(), key=lambda r: (-r.delta_ms, r.group))
    un = GroupRow(
        UNATTRIBUTED,
        Side([], a.unattributed_ms, a.unattributed_launches),
        Side([], b.unattributed_ms, b.unattributed_launches),
    )
    rows.append(un)  # keeps the rows adding up to the totals
    return Comparison(a, b, rows)


def _check_one_model(a: Attribution, b: Attribution, keys=("model", "m")) -> None:
    """Levers are differences between two ways of running one model at one M: arms whose
    manifests name different models (or M, among ``keys``) are refused; an arm that names
    none (a map-file arm) is taken as given."""
    named = [k for k in keys if all(x.meta.get(k) not in (None, "") for x in (a, b))]
    # one tensor-parallel rank's shards (trace capture --tp) are another model's GEMMs
    if any(a.meta[k] != b.meta[k] for k in named) or a.meta.get("tp", 1) != b.meta.get("tp", 1):
        a_is, b_is = (
            f"{x.arm} is {x.meta.get('model') or 'an unnamed model'}"
            + (f" (one rank of tp {x.meta['tp']})" if x.meta.get("tp", 1) != 1 else "")
            + f" at M = {x.meta.get('m', '?')}"
            for x in (a, b)
        )
        if a.meta.get("tp", 1) != b.meta.get("tp", 1):  # --other-m refuses it too
            raise TraceError(f"cannot compare captures of different --tp: {a_is}, {b_is} (a "
                             "rank's shards are other GEMMs than the whole model's; compare "
                             "captures of one tp)")
        raise TraceError(f"cannot compare arms of different models or M: {a_is}, {b_is}"
                         + (" (--other-m compares one model at two M)" if "m" in keys else ""))
