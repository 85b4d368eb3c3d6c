"""Build small nsys SQLite exports following the real schema (`nsys export --type sqlite`).

Tables: StringIds, CUPTI_ACTIVITY_KIND_KERNEL (names as StringIds ids in demangledName /
shortName / mangledName; start/end ns, streamId, correlationId, gridX/Y/Z, blockX/Y/Z,
graphNodeId, graphId), CUPTI_ACTIVITY_KIND_RUNTIME (nameId, correlationId), NVTX_EVENTS
(text or textId), META_DATA_CAPTURE (name/value, or keyId/valueId in the older layout),
CUPTI_ACTIVITY_KIND_GRAPH_TRACE.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

GLOBAL_TID = 0x1000000 * 4242 + 4242  # nsys packs pid and tid into globalTid


@dataclass(frozen=True)
class K:
    name: str
    dur_ns: int
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (128, 1, 1)


def build_nsys(
    path: Path,
    steps: int,
    kernels: list[K],
    *,
    graph: bool = True,
    graph_columns: bool = True,
    mode: str | None = "node",
    meta_layout: str = "name_value",
    nvtx: bool = True,
    nvtx_text_ids: bool = False,
    graph_trace_rows: int = 0,
    drop_columns: tuple[str, ...] = (),
    prologue: list[K] = (),
) -> Path:
    """Write an export of ``steps`` steps, each launching ``kernels`` (one cudaGraphLaunch per
    step when ``graph``, else one cudaLaunchKernel per kernel)."""
    path = Path(path)
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        if s not in strings:
            strings[s] = len(strings) + 1
        return strings[s]

    kcols = [
        "start INT NOT NULL",
        "end INT NOT NULL",
        "deviceId INT NOT NULL",
        "contextId INT NOT NULL",
        "streamId INT NOT NULL",
        "correlationId INT",
        "globalPid INT",
        "demangledName INT NOT NULL",
        "shortName INT NOT NULL",
        "mangledName INT",
        "launchType INT",
        "cacheConfig INT",
        "registersPerThread INT",
        "gridX INT NOT NULL",
        "gridY INT NOT NULL",
        "gridZ INT NOT NULL",
        "blockX INT NOT NULL",
        "blockY INT NOT NULL",
        "blockZ INT NOT NULL",
        "staticSharedMemory INT",
        "dynamicSharedMemory INT",
        "localMemoryPerThread INT",
        "localMemoryTotal INT",
        "gridId INT",
        "sharedMemoryExecuted INT",
    ]
    if graph_columns:
        kcols += ["graphNodeId INT", "graphId INT"]
    kcols = [c for c in kcols if c.split()[0] not in drop_columns]
    names = [c.split()[0] for c in kcols]
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(kcols)})")
    con.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT NOT NULL, end INT NOT NULL, "
        "eventClass INT, globalTid INT, correlationId INT, nameId INT NOT NULL, "
        "returnValue INT, callchainId INT)"
    )
    if nvtx:
        con.execute(
            "CREATE TABLE NVTX_EVENTS (start INT NOT NULL, end INT, eventType INT NOT "
            "NULL, rangeId INT, category INT, color INT, text TEXT, globalTid INT, "
            "endGlobalTid INT, textId INT, domainId INT, uint64Value INT)"
        )
    if meta_layout == "name_value":
        con.execute("CREATE TABLE META_DATA_CAPTURE (name TEXT NOT NULL, value TEXT NOT NULL)")
        con.execute("INSERT INTO META_DATA_CAPTURE VALUES ('RUN_DURATION_MS', '1234')")
        if mode:
            con.execute(
                "INSERT INTO META_DATA_CAPTURE VALUES ('CUDA_GRAPH_TRACE_OPTIONS:MODE', ?)", (mode,)
            )
    elif meta_layout == "key_ids":
        con.execute("CREATE TABLE META_DATA_CAPTURE (keyId INT NOT NULL, valueId INT NOT NULL)")
        if mode:
            con.execute(
                "INSERT INTO META_DATA_CAPTURE VALUES (?, ?)",
                (sid("CUDA_GRAPH_TRACE_OPTIONS:MODE"), sid(mode)),
            )
    if graph_trace_rows:
        con.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INT NOT NULL, end INT "
            "NOT NULL, deviceId INT, contextId INT, greenContextId INT, streamId INT, "
            "correlationId INT, globalPid INT, graphId INT, graphExecId INT)"
        )
        for i in range(graph_trace_rows):
            con.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, 0, 1, 0, 7, ?, 0, 1, 1)",
                (i * 1000, i * 1000 + 900, 900 + i),
            )

    t = 1_000_000
    corr = 100

    def runtime(name: str, start: int, c: int) -> None:
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?, 0, 0)",
            (start, start + 3000, GLOBAL_TID, c, sid(name)),
        )

    def kernel(k: K, start: int, c: int, node: int) -> None:
        row = {
            "start": start,
            "end": start + k.dur_ns,
            "deviceId": 0,
            "contextId": 1,
            "streamId": 7,
            "correlationId": c,
            "globalPid": GLOBAL_TID & ~0xFFFFFF,
            "demangledName": sid(k.name),
            "shortName": sid(k.name.split("<")[0][:24]),
            "mangledName": sid("_Z" + k.name[:10]),
            "launchType": 0,
            "cacheConfig": 0,
            "registersPerThread": 64,
            "gridX": k.grid[0],
            "gridY": k.grid[1],
            "gridZ": k.grid[2],
            "blockX": k.block[0],
            "blockY": k.block[1],
            "blockZ": k.block[2],
            "staticSharedMemory": 0,
            "dynamicSharedMemory": 0,
            "localMemoryPerThread": 0,
            "localMemoryTotal": 0,
            "gridId": node,
            "sharedMemoryExecuted": 0,
            "graphNodeId": node if graph else 0,
            "graphId": 1 if graph else 0,
        }
        con.execute(
            f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(names)}) VALUES "
            f"({', '.join('?' * len(names))})",
            [row[n] for n in names],
        )

    gpu = t
    for k in prologue:
        corr += 1
        runtime("cudaLaunchKernel_v7000", t, corr)
        kernel(k, max(gpu, t + 4000), corr, 0)
        gpu = max(gpu, t + 4000) + k.dur_ns + 1000
        t += 5000
    for step in range(steps):
        start = t
        if graph:
            corr += 1
            runtime("cudaGraphLaunch_v10000", t + 1000, corr)
        gpu = max(gpu, t + 5000)
        for i, k in enumerate(kernels):
            if not graph:
                corr += 1
                runtime("cudaLaunchKernel_v7000", t + 1000 + 10 * i, corr)
            kernel(k, gpu, corr, 1000 + i)
            gpu += k.dur_ns + 1500
        t = max(t + 2000 + 10 * len(kernels), gpu) + 2000
        if nvtx:
            text, text_id = (
                ("fp8tower.step", None) if not nvtx_text_ids else (None, sid("fp8tower.step"))
            )
            con.execute(
                "INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, NULL, 0, 0, ?, ?, NULL, ?, 0, NULL)",
                (start, t, text, GLOBAL_TID, text_id),
            )
        t += 1000
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in strings.items()])
    con.commit()
    con.close()
    return path
