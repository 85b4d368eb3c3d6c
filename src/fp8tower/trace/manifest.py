"""The capture manifest: what a capture directory holds and what each step was meant to run.

`manifest.json` (schema "fp8tower.trace.manifest/1")::

    {"schema": "fp8tower.trace.manifest/1",
     "arm": "merged", "model": "tiny-hybrid", "m": 1, "device": "cpu",
     "steps": {"short": 2, "long": 6},
     "traces": {"short": "trace_2.json.gz", "long": "trace_6.json.gz"},
     "step_range": "fp8tower.step",
     "ops": [{"label": "gdn.in_proj_qkv+in_proj_z", "n": 512, "k": 256, "bytes": 134656,
              "backend": "reference", "kernel_regex": ".*", "kernels": 21,
              "group": "gdn.gdn_in"}, ...],        # the per-step op sequence, in launch order
     "meta": {"gpu": "cpu", "driver": "n/a", "cuda": "none", "torch": "2.13.0+cpu", ...,
              "date": "2026-12-05T13:41:02+00:00", "command": "...", "env": {}, ...,
              "scheme": "per_tensor", "backend": "auto", ...},  # provenance.record() and
                                                                # the capture's settings
     "event_ms": {"short": ..., "long": ...},  # optional: CUDA-event time of each run
                                               # (captures of CUDA-graph replays)
     "read_ceiling_gbps": ...}                 # optional: measured read bandwidth (GPU)

`ops` lists one entry per op call of a step (a 64-layer tower has 64 entries per projection);
`label` is the row key of reports (repeated across layers), `group` the key on which two arms
are compared (e.g. merged "gdn.in_proj_qkv+in_proj_z" and unmerged "gdn.in_proj_qkv" +
"gdn.in_proj_z" share the group "gdn.gdn_in"), `bytes` the bytes one call moves, `kernels` how
many kernels one call launches (counted from an eager profile, see capture.count_kernels_per_op).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import TraceError
from .validate import check_one_group, int_field, loads, num_field, show, str_field

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
        group = d.get("group")
        # n = k = bytes = 0: an op that is not a GEMM (a model capture's attention or GDN core)
        lo = 0 if all(d[f] == 0 and type(d[f]) is int for f in ("n", "k", "bytes")) else 1
        op = cls(
            str_field(d["label"], f"{where}.label"),
            int_field(d["n"], f"{where}.n", lo=lo),
            int_field(d["k"], f"{where}.k", lo=lo),
            int_field(d["bytes"], f"{where}.bytes", lo=lo),
            str_field(d["backend"], f"{where}.backend"),
            str_field(d["kernel_regex"], f"{where}.kernel_regex"),
            int_field(d.get("kernels", 1), f"{where}.kernels", lo=1),
            None if group is None else str_field(group, f"{where}.group"),
        )
        _regex(op.kernel_regex, f"{where}: kernel_regex")
        return op


def _regex(value: str, where: str) -> str:
    try:
        re.compile(value)
    except (re.error, RecursionError, OverflowError) as e:
        raise TraceError(f"{where} {show(value)} is not a regex ({e})") from None
    return value


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
        raw = path.read_bytes()
    except OSError as e:
        raise TraceError(f"cannot read the manifest ({e.strerror})", path) from None
    d = loads(raw, path, "manifest")
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        raise TraceError(f"not an fp8tower capture manifest (schema must be {SCHEMA!r})", path)
    try:
        return _manifest(d, path)
    except TraceError as e:
        raise TraceError(str(e), path) from None


def _pair(d: dict, key: str) -> tuple[object, object]:
    v = d.get(key)
    if not isinstance(v, dict) or "short" not in v or "long" not in v:
        raise TraceError(f"{key} must be an object with 'short' and 'long', got {show(v)}")
    return v["short"], v["long"]


def _manifest(d: dict, path: Path) -> Manifest:
    s, lg = _pair(d, "steps")
    steps = (int_field(s, "steps.short", lo=1), int_field(lg, "steps.long", lo=1))
    if steps[1] <= steps[0]:
        raise TraceError(f"steps must have short < long, got short {steps[0]}, long {steps[1]}")
    t_s, t_l = _pair(d, "traces")
    traces = (str_field(t_s, "traces.short"), str_field(t_l, "traces.long"))
    if traces[0] == traces[1]:
        raise TraceError(f"traces.short and traces.long are the same file {traces[0]!r}")
    ops = d.get("ops")
    if not isinstance(ops, list):
        raise TraceError(f"ops must be a list of op objects, got {show(ops)}")
    ops = [OpRecord.from_json(o, f"ops[{i}]") for i, o in enumerate(ops)]
    check_one_group(((f"ops[{i}]", op.label, op.group_key) for i, op in enumerate(ops)), "ops")
    event_ms = None
    if d.get("event_ms") is not None:
        e_s, e_l = _pair(d, "event_ms")
        event_ms = (
            num_field(e_s, "event_ms.short", lo=0.0),
            num_field(e_l, "event_ms.long", lo=0.0),
        )
        if event_ms[1] <= event_ms[0]:  # read as a negative or zero step time
            raise TraceError(
                f"event_ms.long ({event_ms[1]}) must be more than event_ms.short "
                f"({event_ms[0]}): the longer run takes longer"
            )
    ceiling = d.get("read_ceiling_gbps")
    if ceiling is not None:
        ceiling = num_field(ceiling, "read_ceiling_gbps", lo=0.0, lo_open=True)
    device = d.get("device", "cuda")
    if device not in ("cuda", "cpu"):
        raise TraceError(f"device must be 'cuda' or 'cpu', got {show(device)}")
    m = d.get("m")
    if m is not None:
        m = int_field(m, "m", lo=1)
    model = d.get("model")
    if model is not None:
        model = str_field(model, "model")
    meta = d.get("meta") or {}
    if not isinstance(meta, dict):
        raise TraceError(f"meta must be an object, got {show(meta)}")
    _check_expectations(meta)
    step_range = str_field(d.get("step_range", "fp8tower.step"), "step_range")
    return Manifest(
        arm=str_field(d.get("arm"), "arm"),
        steps=steps,
        device=device,
        ops=ops,
        traces=traces,
        model=model,
        m=m,
        step_range=step_range,
        event_ms=event_ms,
        read_ceiling_gbps=ceiling,
        meta=dict(meta),
        directory=path.parent,
    )


def _check_expectations(meta: dict) -> None:
    """The meta fields trace/expect.py reads (see there), checked here: unchecked, a missing
    "modules", a bad regex or a text share was a KeyError / re.error / ValueError traceback."""
    entries = meta.get("expected_launches")
    if entries is not None and not isinstance(entries, list):
        raise TraceError(f"meta.expected_launches must be a list of objects, got {show(entries)}")
    for i, e in enumerate(entries or []):
        where = f"meta.expected_launches[{i}]"
        if not isinstance(e, dict):
            raise TraceError(f"{where} must be an object, got {show(e)}")
        str_field(e.get("label"), f"{where}.label")
        int_field(e.get("modules"), f"{where}.modules", lo=0)
        int_field(e.get("per_module", 1), f"{where}.per_module", lo=0)
        str_field(e.get("what", "launches"), f"{where}.what")
        _regex(str_field(e.get("kernel_regex", ".*"), f"{where}.kernel_regex"),
               f"{where}.kernel_regex")
    share = meta.get("min_attributed_share")
    if share is not None:
        # above 1 is allowed: a check that always fails (tests use 2.0 to force one)
        num_field(share, "meta.min_attributed_share", lo=0.0)
