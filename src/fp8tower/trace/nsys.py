"""Nsight Systems SQLite exports (`nsys export --type sqlite`) -> `Trace`, with stdlib sqlite3.

Tables read (columns checked with PRAGMA table_info, so older schemas work):
- CUPTI_ACTIVITY_KIND_KERNEL: start/end (ns), streamId, correlationId, gridX/Y/Z, blockX/Y/Z,
  demangledName/shortName (ids into StringIds), graphNodeId and graphId when present;
- CUPTI_ACTIVITY_KIND_RUNTIME: launch calls (nameId -> StringIds) and their correlationId;
- NVTX_EVENTS: ranges (text, or textId -> StringIds), e.g. the `fp8tower.step` ranges;
- META_DATA_CAPTURE: the CUDA graph trace mode (`CUDA_GRAPH_TRACE_OPTIONS:MODE`);
- CUPTI_ACTIVITY_KIND_GRAPH_TRACE: whole-graph executions, present only in graph-level mode.

A graph-level trace (`--cuda-graph-trace=graph`) records each graph replay as one event and
none of the kernels inside it, so per-kernel numbers cannot come from it: that is an error.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from .errors import TraceError
from .events import KernelTable, Launches, Range, Trace
from .validate import DIM_MAX, check_no_duplicates, show

_KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
_REQUIRED = ("start", "end", "streamId", "correlationId")


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in con.execute(f"PRAGMA table_info({table})")}


def table_names(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def check_integers(
    con: sqlite3.Connection,
    table: str,
    columns: list[str],
    path: Path,
    nullable: tuple[str, ...] = (),
    where: str = "",
) -> None:
    """Every value of ``columns`` is an SQLite integer (NULL too for ``nullable``): a text,
    real or blob value is one TraceError naming the table, the column and the value."""
    if not columns:
        return
    allowed = {c: ("'integer', 'null'" if c in nullable else "'integer'") for c in columns}
    cond = " OR ".join(f"typeof({c}) NOT IN ({allowed[c]})" for c in columns)
    sel = ", ".join(columns)
    extra = f"({where}) AND " if where else ""
    row = con.execute(f"SELECT {sel} FROM {table} WHERE {extra}({cond}) LIMIT 1").fetchone()
    if row is None:
        return
    for c, v in zip(columns, row):
        if not (isinstance(v, int) or (v is None and c in nullable)):
            kind = "NULL" if v is None else type(v).__name__
            raise TraceError(
                f"{table}.{c} holds {kind} {show(v, 40)}: expected an integer"
                + (" or NULL" if c in nullable else ""),
                path,
            )


def graph_trace_mode(con: sqlite3.Connection, tables: set[str]) -> str | None:
    """'node', 'graph', or None when the export does not say."""
    if "META_DATA_CAPTURE" not in tables:
        return None
    cols = _columns(con, "META_DATA_CAPTURE")
    if {"name", "value"} <= cols:
        rows = con.execute("SELECT name, value FROM META_DATA_CAPTURE").fetchall()
    elif {"keyId", "valueId"} <= cols and "StringIds" in tables:
        rows = con.execute(
            "SELECT k.value, v.value FROM META_DATA_CAPTURE m "
            "JOIN StringIds k ON m.keyId = k.id "
            "JOIN StringIds v ON m.valueId = v.id"
        ).fetchall()
    else:
        return None
    for name, value in rows:
        if "GRAPH_TRACE" in str(name).upper() and "MODE" in str(name).upper():
            v = str(value).strip().lower()
            return "graph" if "graph" in v else "node" if "node" in v else v or None
    return None


def connect_readonly(path: str | Path) -> sqlite3.Connection:
    """Open ``path`` read-only. The URI is built by as_uri, which escapes: a raw
    f"file:{path}?mode=ro" cuts "run#1/t.sqlite" at the '#' and creates an empty "run"."""
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    try:
        return sqlite3.connect(uri, uri=True)
    except sqlite3.Error as e:
        raise TraceError(f"cannot open as SQLite ({e})", path) from None


def load_nsys(path: str | Path, name_column: str = "demangledName") -> Trace:
    """Read an nsys SQLite export. ``name_column``: "demangledName" (default; the names
    torch traces show) or "shortName"."""
    path = Path(path)
    con = connect_readonly(path)
    try:
        return _load(con, path, name_column)
    except sqlite3.DatabaseError as e:
        raise TraceError(f"unreadable SQLite database ({e})", path) from None
    finally:
        con.close()


def _load(con: sqlite3.Connection, path: Path, name_column: str) -> Trace:
    tables = table_names(con)
    if _KERNEL_TABLE not in tables:
        raise TraceError(
            f"SQLite database without a {_KERNEL_TABLE} table: not an nsys export "
            "of a CUDA trace (nsys profile --trace=cuda; nsys export --type sqlite)",
            path,
        )
    if "StringIds" not in tables:
        raise TraceError(
            "nsys export without a StringIds table (kernel names are ids into it)", path
        )
    cols = _columns(con, _KERNEL_TABLE)
    missing = [c for c in _REQUIRED if c not in cols]
    if name_column not in cols:
        fallback = next(
            (c for c in ("demangledName", "shortName", "mangledName") if c in cols), None
        )
        if fallback is None:
            missing.append(name_column)
        name_column = fallback or name_column
    if missing:
        raise TraceError(
            f"{_KERNEL_TABLE} lacks column(s) {', '.join(missing)} "
            f"(has: {', '.join(sorted(cols))})",
            path,
        )

    if "deviceId" in cols:  # one GPU's kernels: as chrome.py's check_one_device
        devices = con.execute(f"SELECT deviceId, COUNT(*) FROM {_KERNEL_TABLE} "
                              "GROUP BY deviceId").fetchall()
        if len(devices) > 1:
            shown = ", ".join(f"device {d!r}: {n} kernels" for d, n in devices)
            raise TraceError(f"this trace holds kernels of {len(devices)} devices ({shown}): "
                             "capture one rank/GPU per trace", path)

    mode = graph_trace_mode(con, tables)
    graph_rows = 0
    if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables:
        graph_rows = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE").fetchone()[
            0
        ]
    if graph_rows:
        raise TraceError(
            f"graph-level CUDA graph trace ({graph_rows} whole-graph executions in "
            f"CUPTI_ACTIVITY_KIND_GRAPH_TRACE, mode {mode or 'not recorded'}): kernels inside "
            "CUDA graphs are not recorded one by one, so per-kernel numbers cannot come from "
            "this trace; re-capture with nsys profile --cuda-graph-trace=node",
            path,
        )

    dims = [c for c in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ") if c in cols]
    optional = [c for c in ("graphId", "graphNodeId") if c in cols]
    check_integers(
        con,
        _KERNEL_TABLE,
        ["start", "end", "streamId", "correlationId", *dims, *optional, name_column],
        path,
        nullable=("streamId", "correlationId", *optional, name_column),
    )

    def col(name: str, default: str) -> str:  # NULL -> absent (-1; grid/block 0)
        return f"COALESCE(k.{name}, {default})" if name in cols else default

    sql = (
        f"SELECT k.start, k.end, {col('streamId', '-1')}, {col('correlationId', '-1')}, "
        f"{col('gridX', '0')}, {col('gridY', '0')}, {col('gridZ', '0')}, "
        f"{col('blockX', '0')}, {col('blockY', '0')}, {col('blockZ', '0')}, "
        f"{col('graphId', '-1')}, {col('graphNodeId', '-1')}, {col(name_column, '-1')} "
        f"FROM {_KERNEL_TABLE} k ORDER BY k.start"
    )
    rows = con.execute(sql).fetchall()
    if not rows:
        raise TraceError(f"no kernel events ({_KERNEL_TABLE} is empty)", path)
    ints = np.array(rows, dtype=np.int64)  # SQLite integers are int64: checked above
    if np.any(ints[:, 1] < ints[:, 0]):
        i = int(np.flatnonzero(ints[:, 1] < ints[:, 0])[0])
        raise TraceError(
            f"{_KERNEL_TABLE}: a kernel ends before it starts (start {ints[i, 0]}, "
            f"end {ints[i, 1]}): expected end >= start",
            path,
        )
    bad = (ints[:, 4:10] < 0) | (ints[:, 4:10] > DIM_MAX)
    if bad.any():
        i, j = (int(v) for v in np.argwhere(bad)[0])
        name = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")[j]
        raise TraceError(
            f"{_KERNEL_TABLE}.{name} holds {ints[i, 4 + j]}: expected an integer in [0, 2^31)",
            path,
        )
    uniq, name_id = np.unique(ints[:, 12], return_inverse=True)
    strings = dict(con.execute("SELECT id, value FROM StringIds"))
    names = [str(strings.get(int(u), f"<unknown name id {int(u)}>")) for u in uniq]
    start = ints[:, 0].astype(np.float64)
    kernels = KernelTable(
        names,
        name_id.reshape(-1).astype(np.int32),
        start / 1000.0,
        (ints[:, 1] - ints[:, 0]).astype(np.float64) / 1000.0,
        ints[:, 2].copy(),
        ints[:, 3].copy(),
        ints[:, 4:7].astype(np.int32),
        ints[:, 7:10].astype(np.int32),
        ints[:, 10].copy(),
        ints[:, 11].copy(),
    )
    # graphNodeId 0 means "not from a graph" in nsys exports
    kernels.graph_node_id[kernels.graph_node_id == 0] = -1
    kernels.graph_id[kernels.graph_id == 0] = -1

    launches = _launches(con, tables, path)
    if mode == "graph" and launches.is_graph.any():
        raise TraceError(
            f"graph-level CUDA graph trace (mode graph, {int(launches.is_graph.sum())} graph "
            "launches): kernels inside CUDA graphs are not recorded one by one, so per-kernel "
            "numbers cannot come from this trace; re-capture with "
            "nsys profile --cuda-graph-trace=node",
            path,
        )
    kernels = kernels.sorted()
    check_no_duplicates(kernels, path)
    trace = Trace(str(path), "nsys", "cuda", kernels, _nvtx_ranges(con, tables, path), launches,
                  mode)
    if mode is None:
        trace.notes.append(
            "nsys export does not record the CUDA graph trace mode "
            "(META_DATA_CAPTURE); trust integral launch counts, not the mode"
        )
    elif mode == "graph":
        trace.notes.append("graph-level CUDA graph trace mode, but no graph was launched")
    return trace


def _nvtx_ranges(con: sqlite3.Connection, tables: set[str], path: Path) -> list[Range]:
    if "NVTX_EVENTS" not in tables:
        return []
    cols = _columns(con, "NVTX_EVENTS")
    if not {"start", "end"} <= cols:
        return []
    text = "e.text" if "text" in cols else "NULL"
    join = ""
    if "textId" in cols:
        text = f"COALESCE({text}, s.value)"
        join = "LEFT JOIN StringIds s ON e.textId = s.id"
    tid = "e.globalTid" if "globalTid" in cols else "-1"
    check_integers(
        con,
        "NVTX_EVENTS",
        ["start", "end"] + (["globalTid"] if "globalTid" in cols else []),
        path,
        nullable=("end", "globalTid"),
    )
    rows = con.execute(
        f"SELECT e.start, e.end, {text}, {tid} FROM NVTX_EVENTS e {join} "
        "WHERE e.end IS NOT NULL AND e.end > e.start"
    ).fetchall()
    return sorted(
        (
            Range(str(t or ""), s / 1000.0, e / 1000.0, int(g if g is not None else -1))
            for s, e, t, g in rows
        ),
        key=lambda r: r.start_us,
    )


def _launches(con: sqlite3.Connection, tables: set[str], path: Path) -> Launches:
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if table not in tables:
        return Launches.empty()
    cols = _columns(con, table)
    if not {"start", "correlationId", "nameId"} <= cols:
        return Launches.empty()
    tid = "r.globalTid" if "globalTid" in cols else "-1"
    check_integers(
        con,
        table,
        ["correlationId", "start"] + (["globalTid"] if "globalTid" in cols else []),
        path,
        nullable=("correlationId", "globalTid"),
    )
    rows = con.execute(
        f"SELECT r.correlationId, r.start, {tid}, s.value "
        f"FROM {table} r JOIN StringIds s ON r.nameId = s.id "
        "WHERE s.value LIKE '%aunch%' AND r.correlationId IS NOT NULL"
    ).fetchall()
    if not rows:
        return Launches.empty()
    corr, start, gtid, name = zip(*rows)
    return Launches(
        np.array(corr, np.int64),
        np.array(start, np.float64) / 1000.0,
        np.array([g if g is not None else -1 for g in gtid], np.int64),
        np.array(["GraphLaunch" in str(n) for n in name], bool),
    )
