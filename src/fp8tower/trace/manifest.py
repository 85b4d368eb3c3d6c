"""The capture manifest: what a capture directory holds and what each step was meant to run.

`manifest.json` (schema "fp8tower.trace.manifest/1")::

    {"schema": "fp8tower.trace.manifest/1",
     "arm": "merged", "model": "qwen3.5-27b", "m": 1, "device": "cuda",
     "steps": {"short": 8, "long": 136},
     "traces": {"short": "trace_8.json.gz", "long": "trace_136.json.gz"},
     "step_range": "fp8tower.step",
     "event_ms": {"short": 11.2, "long": 190.4},    # optional: CUDA-event time of each run
     "read_ceiling_gbps": 4200.0,                   # optional: measured read bandwidth
     "ops": [{"label": "gdn.in_proj_qkvz", "group": "gdn.in_proj", "n": 16384, "k": 5120,
              "bytes": 83906560, "backend": "cublaslt", "kernel_regex": "nvjet|cutlass",
              "kernels": 1}, ...],                  # the per-step op sequence, in launch order
     "meta": {...}}                                 # anything else the capture recorded

`ops` lists one entry per op call of a step (a 64-layer tower has 64 entries per projection);
`label` is the row key of reports (repeated across layers), `group` the key on which two arms
are compared (e.g. merged "in_proj_qkvz" and unmerged "in_proj_qkv" + "in_proj_z" share the
group "gdn.in_proj"), `bytes` the bytes one call moves, `kernels` how many kernels one call
launches (counted from an eager profile, see capture.count_kernels_per_op).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import TraceError

SCHEMA = "fp8tower.trace.manifest/1"
FILENAME = "manifest.json"


@dataclass(frozen=True)
class OpRecord:
    """One op call of a decode step."""

    label: str
    n: int
    k: int
    bytes: int
    backend: str
    kernel_regex: str
    kernels: int = 1
    group: str | None = None

    @property
    def group_key(self) -> str:
        return self.group or self.label

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, d: dict, where: str = "op") -> OpRecord:
        if not isinstance(d, dict):
            raise TraceError(f"{where}: expected an object, got {type(d).__name__}")
        missing = [f for f in ("label", "n", "k", "bytes", "backend", "kernel_regex") if f not in d]
        if missing:
            raise TraceError(f"{where}: missing field(s) {', '.join(missing)}")
        try:
            op = cls(
                str(d["label"]),
                int(d["n"]),
                int(d["k"]),
                int(d["bytes"]),
                str(d["backend"]),
                str(d["kernel_regex"]),
                int(d.get("kernels", 1)),
                None if d.get("group") is None else str(d["group"]),
            )
        except (TypeError, ValueError) as e:
            raise TraceError(f"{where}: bad value ({e})") from None
        if op.kernels < 1:
            raise TraceError(f"{where}: kernels must be >= 1, got {op.kernels}")
        try:
            re.compile(op.kernel_regex)
        except re.error as e:
            raise TraceError(f"{where}: kernel_regex {op.kernel_regex!r} is not a regex ({e})")
        return op


@dataclass
class Manifest:
    arm: str
    steps: tuple[int, int]
    device: str
    ops: list[OpRecord]
    traces: tuple[str, str]
    model: str | None = None
    m: int | None = None
    step_range: str = "fp8tower.step"
    event_ms: tuple[float, float] | None = None
    read_ceiling_gbps: float | None = None
    meta: dict = field(default_factory=dict)
    directory: Path | None = None

    @property
    def kernels_per_step(self) -> int:
        return sum(op.kernels for op in self.ops)

    def trace_paths(self) -> tuple[Path, Path]:
        base = self.directory or Path(".")
        return base / self.traces[0], base / self.traces[1]

    def to_json(self) -> dict:
        d = {
            "schema": SCHEMA,
            "arm": self.arm,
            "model": self.model,
            "m": self.m,
            "device": self.device,
            "steps": {"short": self.steps[0], "long": self.steps[1]},
            "traces": {"short": self.traces[0], "long": self.traces[1]},
            "step_range": self.step_range,
            "ops": [op.to_json() for op in self.ops],
            "meta": self.meta,
        }
        if self.event_ms is not None:
            d["event_ms"] = {"short": self.event_ms[0], "long": self.event_ms[1]}
        if self.read_ceiling_gbps is not None:
            d["read_ceiling_gbps"] = self.read_ceiling_gbps
        return d

    def write(self, directory: str | Path) -> Path:
        path = Path(directory) / FILENAME
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        tmp.replace(path)
        return path


def read_manifest(path: str | Path) -> Manifest:
    """Read ``path`` (a capture directory or its manifest.json)."""
    path = Path(path)
    if path.is_dir():
        path = path / FILENAME
    if not path.exists():
        raise TraceError("no manifest.json here (is this a capture directory?)", path)
    try:
        d = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise TraceError(f"manifest is not valid JSON ({e})", path) from None
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        raise TraceError(f"not an fp8tower capture manifest (schema must be {SCHEMA!r})", path)
    try:
        steps = (int(d["steps"]["short"]), int(d["steps"]["long"]))
        traces = (str(d["traces"]["short"]), str(d["traces"]["long"]))
        ops = [OpRecord.from_json(o, f"ops[{i}]") for i, o in enumerate(d["ops"])]
        ev = d.get("event_ms")
        return Manifest(
            arm=str(d["arm"]),
            steps=steps,
            device=str(d.get("device", "cuda")),
            ops=ops,
            traces=traces,
            model=d.get("model"),
            m=d.get("m"),
            step_range=str(d.get("step_range", "fp8tower.step")),
            event_ms=(float(ev["short"]), float(ev["long"])) if ev else None,
            read_ceiling_gbps=(
                float(d["read_ceiling_gbps"]) if d.get("read_ceiling_gbps") else None
            ),
            meta=dict(d.get("meta") or {}),
            directory=path.parent,
        )
    except TraceError as e:
        raise TraceError(str(e), path) from None
    except (KeyError, TypeError, ValueError) as e:
        raise TraceError(
            f"manifest field missing or invalid ({type(e).__name__}: {e})", path
        ) from None
