"""Map files: how the kernels of a foreign trace (vLLM, SGLang, ...) map to ops.

A map is JSON or TOML (by file suffix: .json, .toml) with a list of rules. Each kernel of a
step takes the FIRST rule that matches it; kernels no rule matches are reported as
"(unattributed)". Rule keys:

- ``match`` (required): regular expression searched in the kernel name (`re.search`).
- ``grid``, ``block`` (optional): launch dims ``[x, y, z]``; an entry may be ``"*"`` for any.
- ``ordinal`` (optional): which occurrences within a step this rule takes, counted from 0
  over the kernels of the step that satisfy this rule's match/grid/block: an integer, a list
  of integers, or ``{"every": 3, "index": 1}`` (occurrences 1, 4, 7, ...). Needs step
  boundaries (`fp8tower.step` ranges, or another range name given with --step-range).
- ``label`` (required): the op row this kernel counts for, e.g. "gdn.in_proj_qkvz".
- ``group`` (optional, default = label): the key two arms are compared on; one label is in
  one group (rules of one label with two groups are refused).
- ``n``, ``k`` (optional): the GEMM shape, shown in reports.
- ``bytes`` (optional): bytes ONE launch moves (weights + scales + activations + output);
  without it the op has no GB/s.

JSON (the groups of fp8tower's own captures, "gdn.gdn_in" for merged
"gdn.in_proj_qkv+in_proj_z" and unmerged "gdn.in_proj_qkv" + "gdn.in_proj_z", and
"attention.o_proj", so that such a trace compares with them)::

    {"rules": [
      {"match": "cudnn_generated_fort_native_sm120", "grid": [64, 1, "*"],
       "label": "gdn.in_proj_qkvz", "group": "gdn.gdn_in", "n": 16384, "k": 5120,
       "bytes": 83906560},
      {"match": "^nvjet_.*qqtst", "ordinal": {"every": 4, "index": 3},
       "label": "attention.o_proj", "n": 5120, "k": 6144, "bytes": 31467520}
    ]}

TOML::

    [[rules]]
    match = "cudnn_generated_fort_native_sm120"
    grid = [64, 1, "*"]
    label = "gdn.in_proj_qkvz"
    group = "gdn.gdn_in"
    n = 16384
    k = 5120
    bytes = 83906560
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import TraceError
from .validate import DIM_MAX, INT64_MAX, check_one_group, show

_KEYS = {"match", "grid", "block", "ordinal", "label", "group", "n", "k", "bytes"}


@dataclass(frozen=True)
class Rule:
    match: re.Pattern
    label: str
    group: str
    grid: tuple | None = None  # entries: int or None (any)
    block: tuple | None = None
    ordinal: tuple[int, ...] | None = None  # explicit occurrence indices
    every: tuple[int, int] | None = None  # (every, index)
    n: int | None = None
    k: int | None = None
    bytes: int | None = None

    @property
    def has_ordinal(self) -> bool:
        return self.ordinal is not None or self.every is not None

    def matches_kernel(self, name: str, grid, block) -> bool:
        """Name and launch dims (not the ordinal)."""
        if not self.match.search(name):
            return False
        for want, got in ((self.grid, grid), (self.block, block)):
            if want is not None and any(w is not None and w != int(g) for w, g in zip(want, got)):
                return False
        return True

    def takes_occurrence(self, i: int) -> bool:
        if self.ordinal is not None:
            return i in self.ordinal
        if self.every is not None:
            return i % self.every[0] == self.every[1]
        return True


def _dims(value, where: str) -> tuple | None:
    if value is None:
        return None
    if not isinstance(value, list) or not 1 <= len(value) <= 3:
        raise TraceError(f"{where}: expected a list of up to 3 dims, got {value!r}")
    out = []
    for v in value:
        if v == "*" or v is None:
            out.append(None)
        elif isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= DIM_MAX:
            out.append(v)
        else:
            raise TraceError(f'{where}: dims must be integers in [0, 2^31) or "*", got {show(v)}')
    return tuple(out + [None] * (3 - len(out)))


def _int(value, where: str, lo: int = 0) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= INT64_MAX:
        what = "a non-negative" if lo == 0 else "a positive"
        raise TraceError(f"{where}: expected {what} integer (int64), got {show(value)}")
    return value


def parse_rule(d: dict, where: str) -> Rule:
    if not isinstance(d, dict):
        raise TraceError(f"{where}: expected a table/object, got {type(d).__name__}")
    unknown = set(d) - _KEYS
    if unknown:
        raise TraceError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))} "
            f"(known: {', '.join(sorted(_KEYS))})"
        )
    for key in ("match", "label"):
        if not isinstance(d.get(key), str) or not d[key]:
            raise TraceError(f"{where}: {key!r} is required and must be a non-empty string")
    if d.get("group") is not None and (not isinstance(d["group"], str) or not d["group"]):
        raise TraceError(f"{where}: 'group' must be a non-empty string, got {show(d['group'])}")
    try:
        rx = re.compile(d["match"])
    except (re.error, RecursionError, OverflowError) as e:
        raise TraceError(
            f"{where}: match {d['match']!r} is not a regular expression ({e})"
        ) from None
    ordinal = every = None
    o = d.get("ordinal")
    if isinstance(o, bool):
        raise TraceError(f"{where}: ordinal must be an integer, a list or {{every, index}}")
    if isinstance(o, int):
        ordinal = (_int(o, f"{where}.ordinal"),)
    elif isinstance(o, list):
        if not o:  # a rule that takes no occurrence takes nothing, silently
            raise TraceError(f"{where}: ordinal is an empty list (give the indices it takes)")
        ordinal = tuple(_int(v, f"{where}.ordinal") for v in o)
    elif isinstance(o, dict):
        if set(o) != {"every", "index"}:
            raise TraceError(f"{where}: ordinal table needs exactly 'every' and 'index'")
        e, i = (
            _int(o["every"], f"{where}.ordinal.every"),
            _int(o["index"], f"{where}.ordinal.index"),
        )
        if not e or i >= e:
            raise TraceError(f"{where}: ordinal needs every >= 1 and 0 <= index < every")
        every = (e, i)
    elif o is not None:
        raise TraceError(f"{where}: ordinal must be an integer, a list or {{every, index}}")
    return Rule(
        rx,
        d["label"],
        str(d.get("group") or d["label"]),
        _dims(d.get("grid"), f"{where}.grid"),
        _dims(d.get("block"), f"{where}.block"),
        ordinal,
        every,
        _int(d.get("n"), f"{where}.n", 1),
        _int(d.get("k"), f"{where}.k", 1),
        _int(d.get("bytes"), f"{where}.bytes", 1),
    )


def read_map(path: str | Path) -> list[Rule]:
    """Parse a map file (.json or .toml) into rules; errors name the file and the rule."""
    path = Path(path)
    if path.is_dir():
        raise TraceError("is a directory, not a map file (.json or .toml)", path)
    if not path.is_file():
        raise TraceError("no such map file", path)
    raw = path.read_bytes()
    try:
        if path.suffix.lower() == ".toml":
            try:
                import tomllib
            except ImportError:  # python 3.10
                raise TraceError("TOML maps need Python >= 3.11; use JSON", path) from None
            doc = tomllib.loads(raw.decode("utf-8"))
        elif path.suffix.lower() == ".json":
            doc = json.loads(raw)
        else:
            raise TraceError("map file must end in .json or .toml", path)
    except RecursionError:
        raise TraceError("cannot parse map (nested too deeply)", path) from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError, TOMLDecodeError
        raise TraceError(f"cannot parse map ({e})", path) from None
    rules = doc.get("rules") if isinstance(doc, dict) else None
    if not isinstance(rules, list) or not rules:
        raise TraceError("map needs a non-empty 'rules' list", path)
    try:
        out = [parse_rule(r, f"rules[{i}]") for i, r in enumerate(rules)]
        check_one_group(((f"rules[{i}]", r.label, r.group) for i, r in enumerate(out)), "rules")
        return out
    except TraceError as e:
        raise TraceError(str(e), path) from None
