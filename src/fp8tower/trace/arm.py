"""An arm: the two traces of one configuration plus what maps their kernels to ops.

An arm is given either as a capture directory (manifest.json + its two traces), or as
"SHORT,LONG" trace paths with the step counts and a map file (foreign traces).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .diff import check_steps
from .errors import TraceError
from .events import STEP_RANGE, Trace
from .ingest import load_trace
from .manifest import FILENAME, Manifest, read_manifest
from .mapfile import Rule, read_map


@dataclass
class Arm:
    name: str
    short: Trace
    long: Trace
    steps: tuple[int, int]
    manifest: Manifest | None = None
    rules: list[Rule] | None = None
    step_pattern: str = re.escape(STEP_RANGE)

    @property
    def device(self) -> str:
        return self.long.device


def load_arm(
    spec: str | Path,
    *,
    map_path: str | Path | None = None,
    steps: tuple[int, int] | None = None,
    name: str | None = None,
    step_pattern: str | None = None,
    device: str = "auto",
) -> Arm:
    """Load an arm from a capture directory or from "SHORT,LONG" (+ ``steps`` and a map).

    With a capture directory, a ``map_path`` replaces the manifest's positional mapping and
    ``steps`` must agree with the manifest's.
    """
    spec_s = str(spec)
    rules = read_map(map_path) if map_path else None
    path = Path(spec_s)
    if path.is_dir() or spec_s.endswith(FILENAME):
        manifest = read_manifest(path)
        if steps is not None and tuple(steps) != manifest.steps:
            raise TraceError(
                f"--steps {steps[0]} {steps[1]} disagree with the manifest's "
                f"{manifest.steps[0]} {manifest.steps[1]}",
                path,
            )
        short_p, long_p = manifest.trace_paths()
        dev = "cpu" if manifest.device == "cpu" else device
        pattern = step_pattern or re.escape(manifest.step_range)
        return Arm(
            name or manifest.arm,
            load_trace(short_p, dev),
            load_trace(long_p, dev),
            manifest.steps,
            manifest,
            rules,
            pattern,
        )
    parts = spec_s.split(",")
    if len(parts) != 2 or not all(parts):
        missing = " (no such file or directory)" if not Path(spec_s).exists() else ""
        raise TraceError(f"arm {spec_s!r}{missing}: expected a capture directory or SHORT,LONG "
                         "trace paths")
    if steps is None:
        raise TraceError(f"arm {spec_s!r}: traces without a manifest need --steps SHORT LONG")
    if rules is None:
        raise TraceError(f"arm {spec_s!r}: traces without a manifest need a map file (--map)")
    short, long = load_trace(parts[0], device), load_trace(parts[1], device)
    return Arm(
        name or Path(parts[1]).name.split(".")[0],
        short,
        long,
        check_steps(steps),
        None,
        rules,
        step_pattern or re.escape(STEP_RANGE),
    )
