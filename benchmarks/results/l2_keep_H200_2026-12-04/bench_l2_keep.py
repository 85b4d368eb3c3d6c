"""Session 29 (issue #12): can L2 hold the next GEMM's first weight tiles while this GEMM streams?

Four L2 prefetch designs lost before (sessions 6, 14, 17, 27), each "not profiled": whether the
prefetched lines were still in L2 when read was never measured. Four parts:

``micro``: a region R (--region MB) is asked of L2 (``prefetch.global.L2``, with or without
``::evict_last``), then Y MB of other data stream through (loads with the default or the
evict_first hint), then R is read and timed, cold L2 before each trial. Against R read cold
and R read just after a full read of it (hot), per set-aside of L2 for persisting lines
(``cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE)``: 0 or the device's maximum). Also a
rolling run (regions R1..Rn one after another, no reset), to see whether lines kept with
evict_last leave the set-aside when read with the default hint.

``gran``: what one prefetch brings: R asked in pieces of 128 / 64 / 32 bytes (plain or
evict_last) or by bulk prefetches of 128 B to 4 KB, then read, with the L2 fetch granularity
limit at its default and at 128 bytes.

``pfstep``: the merged tower with the GEMM's own W prefetch before its wait (its first PREFETCH
tiles) in pieces of 64 or 32 bytes (``stepS``), or as one-byte loads (``ld128``, ``ld64``): the
kernel's source rewritten and loaded as a module of its own (``_gemm_kernel_variant``).

``tower``: the merged 27B tower (``auto``, the cache in FP8TOWER_CACHE_DIR) with a small
prefetch kernel P per Triton GEMM asking L2 for the first T K-tiles of every program of the
NEXT GEMM (its own tiles, layout and split), arms alternated (benchmarks/tower_ab.py):
``side``: P on a side stream, forked from the op before GEMM i, so it runs while GEMM i
streams and never delays the main chain; ``chain``: P in the stream after GEMM i, launched with
PDL (early launch: it starts with GEMM i) and waiting for GEMM i before it exits. Arm names:
``none``, or ``side|chain:T:normal|last:SETASIDE_MB`` (``max``: the device's maximum).
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
import tower_ab

# ----------------------------------------------------------------------------- L2 control


@functools.cache
def _cuda():
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuCtxSetLimit.argtypes = [ctypes.c_int, ctypes.c_size_t]
    lib.cuCtxGetLimit.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
    lib.cuDeviceGetAttribute.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int]
    return lib


LIMIT_PERSISTING_L2 = 0x06  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE
LIMIT_FETCH_GRAN = 0x05  # CU_LIMIT_MAX_L2_FETCH_GRANULARITY
ATTR_MAX_PERSISTING_L2 = 108  # CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE


def max_setaside() -> int:
    v = ctypes.c_int()
    rc = _cuda().cuDeviceGetAttribute(ctypes.byref(v), ATTR_MAX_PERSISTING_L2,
                                      torch.cuda.current_device())
    if rc:
        raise RuntimeError(f"cuDeviceGetAttribute: {rc}")
    return v.value


def set_setaside(nbytes: int) -> int:
    """Set the persisting set-aside; returns what the context reports back."""
    torch.cuda.synchronize()
    rc = _cuda().cuCtxSetLimit(LIMIT_PERSISTING_L2, nbytes)
    if rc:
        raise RuntimeError(f"cuCtxSetLimit({nbytes}): {rc}")
    got = ctypes.c_size_t()
    _cuda().cuCtxGetLimit(ctypes.byref(got), LIMIT_PERSISTING_L2)
    reset_persisting()
    return got.value


def reset_persisting() -> None:
    torch.cuda.synchronize()
    rc = _cuda().cuCtxResetPersistingL2Cache()
    if rc:
        raise RuntimeError(f"cuCtxResetPersistingL2Cache: {rc}")


# ----------------------------------------------------------------------------- kernels

_STATS = {"p_launches": 0}


@triton.jit
def _prefetch_chunks(p, nbytes, splits, row_stride, split_stride, lines_per_chunk, total_lines,
                     HINT: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr,
                     STEP: tl.constexpr = 128):
    """Ask L2 for chunk c = (row, split) of ``lines_per_chunk`` pieces of STEP bytes at
    row * row_stride + split * split_stride (clamped below nbytes), every chunk, one prefetch
    a piece; HINT 0 plain, 1 evict_last, 2 one bulk prefetch of STEP bytes.
    PDL: let the next kernel launch at once, and exit only after the previous kernel."""
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    for start in range(pid * BLOCK, total_lines, step):
        line = tl.minimum(start + tl.arange(0, BLOCK), total_lines - 1)
        c = line // lines_per_chunk
        j = line - c * lines_per_chunk
        row = c // splits
        s = c - row * splits
        off = row.to(tl.int64) * row_stride + s.to(tl.int64) * split_stride + j * STEP
        if HINT == 2:
            ptrs = p + tl.minimum(off, nbytes - STEP)
            size = tl.full([BLOCK], STEP, tl.int32)
            tl.inline_asm_elementwise("cp.async.bulk.prefetch.L2.global [$1], $2;\n\tmov.u32 $0, 0;",
                                      "=r,l,r", [ptrs, size], dtype=tl.int32, is_pure=False, pack=1)
        elif HINT == 1:
            ptrs = p + tl.minimum(off, nbytes - 1)  # a hint, but in bounds
            tl.inline_asm_elementwise("prefetch.global.L2::evict_last [$1];\n\tmov.u32 $0, 0;",
                                      "=r,l", [ptrs], dtype=tl.int32, is_pure=False, pack=1)
        else:
            ptrs = p + tl.minimum(off, nbytes - 1)
            tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;",
                                      "=r,l", [ptrs], dtype=tl.int32, is_pure=False, pack=1)
    if PDL:
        tl.extra.cuda.gdc_wait()


@triton.jit
def _read(p, out, n, BLOCK: tl.constexpr, EVICT_FIRST: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(pid * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        if EVICT_FIRST:
            acc += tl.load(p + offs, mask=offs < n, other=0.0, eviction_policy="evict_first")
        else:
            acc += tl.load(p + offs, mask=offs < n, other=0.0)
    tl.store(out + pid, tl.sum(acc))


def read(buf: torch.Tensor, out: torch.Tensor, programs: int, evict_first=False):
    _read[(programs,)](buf, out, buf.numel(), BLOCK=2048, EVICT_FIRST=evict_first, num_warps=8,
                       num_stages=1)


def prefetch(w: torch.Tensor, *, rows: int, splits: int, row_stride: int, split_stride: int,
             chunk_bytes: int, hint: int, pdl: bool = False, programs: int = 132, step: int = 128):
    lines = max(1, chunk_bytes // step)
    total = rows * splits * lines
    kw = {"launch_pdl": True} if pdl else {}
    _STATS["p_launches"] += 1
    nbytes = w.numel() * w.element_size()
    _prefetch_chunks[(programs,)](w.view(torch.uint8), nbytes, splits, row_stride, split_stride, lines, total, HINT=hint,
                                  BLOCK=256, PDL=pdl, STEP=step, num_warps=2, **kw)


# ----------------------------------------------------------------------------- micro


def micro(args) -> dict:
    MB = 1 << 20
    dev = "cuda"
    out = torch.empty(4096, dtype=torch.float32, device=dev)
    flush = torch.ones(512 * MB // 4, dtype=torch.float32, device=dev)
    other = torch.ones(256 * MB // 4, dtype=torch.float32, device=dev)
    nreg = args.rolling
    regions = [torch.ones(args.region * MB // 4, dtype=torch.float32, device=dev) for _ in range(nreg)]
    smax = max_setaside()
    res = {"max_setaside": smax, "l2_bytes": torch.cuda.get_device_properties(0).L2_cache_size,
           "region_mb": args.region, "rows": [], "rolling": []}
    print("max set-aside", smax, "L2", res["l2_bytes"], flush=True)

    def trial(pre: str, y_mb: int, evict_first: bool, r: torch.Tensor) -> float:
        read(flush, out, 1056)
        if pre == "hot":
            read(r, out, 1056)
        elif pre in ("pf", "pf_last"):
            prefetch(r, rows=1, splits=1, row_stride=0, split_stride=0,
                     chunk_bytes=r.numel() * 4, hint=1 if pre == "pf_last" else 0)
        if y_mb:
            read(other[: y_mb * MB // 4], out, 80, evict_first)  # a GEMM-like 80-program grid
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        read(r, out, 264)
        e1.record()
        return e0, e1

    for sa in (0, smax):
        got = set_setaside(sa)
        for pre in ("cold", "hot", "pf", "pf_last"):
            for y in (0, 16, 48, 96, 192):
                for ef in (False, True):
                    if y == 0 and ef:
                        continue
                    evs = []
                    for _ in range(args.reps):
                        reset_persisting()
                        evs.append(trial(pre, y, ef, regions[0]))
                    torch.cuda.synchronize()
                    us = [a.elapsed_time(b) * 1e3 for a, b in evs]
                    row = {"setaside": got, "pre": pre, "stream_mb": y, "evict_first": ef,
                           "read_us": round(statistics.median(us), 3),
                           "min_us": round(min(us), 3)}
                    res["rows"].append(row)
                    print(json.dumps(row), flush=True)
        # rolling: R1..Rn each prefetched evict_last, 48 MB streamed, read; no reset between
        for hint in ("pf", "pf_last"):
            reset_persisting()
            read(flush, out, 1056)
            evs = []
            for _ in range(2):
                for r in regions:
                    if hint == "pf_last":
                        prefetch(r, rows=1, splits=1, row_stride=0, split_stride=0,
                                 chunk_bytes=r.numel() * 4, hint=1)
                    else:
                        prefetch(r, rows=1, splits=1, row_stride=0, split_stride=0,
                                 chunk_bytes=r.numel() * 4, hint=0)
                    read(other[: 48 * MB // 4], out, 80)
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    read(r, out, 264)
                    e1.record()
                    evs.append((e0, e1))
            torch.cuda.synchronize()
            row = {"setaside": got, "pre": hint,
                   "read_us": [round(a.elapsed_time(b) * 1e3, 2) for a, b in evs]}
            res["rolling"].append(row)
            print(json.dumps(row), flush=True)
    set_setaside(0)
    return res


def gran(args) -> dict:
    """What one prefetch instruction brings: R read after R asked of L2 in pieces of STEP bytes
    (one prefetch.global.L2 a piece, or one bulk prefetch), with 0 or 16 MB (evict_first) of
    other reads between, cold L2 before each trial; and with the L2 fetch granularity limit
    (CU_LIMIT_MAX_L2_FETCH_GRANULARITY) at 128 bytes."""
    MB = 1 << 20
    out = torch.empty(4096, dtype=torch.float32, device="cuda")
    flush = torch.ones(512 * MB // 4, dtype=torch.float32, device="cuda")
    other = torch.ones(64 * MB // 4, dtype=torch.float32, device="cuda")
    r = torch.ones(args.region * MB // 4, dtype=torch.float32, device="cuda")
    rows = []
    arms = [("cold", 0, 0), ("hot", 0, 0), ("pf", 0, 128), ("pf", 0, 64), ("pf", 0, 32),
            ("pf", 1, 128), ("pf", 1, 64), ("bulk", 2, 128), ("bulk", 2, 1024), ("bulk", 2, 4096)]
    lim = ctypes.c_size_t()
    _cuda().cuCtxGetLimit(ctypes.byref(lim), LIMIT_FETCH_GRAN)
    default_gran = lim.value
    for gran_limit in (default_gran, 128):
        torch.cuda.synchronize()
        _cuda().cuCtxSetLimit(LIMIT_FETCH_GRAN, gran_limit)
        _cuda().cuCtxGetLimit(ctypes.byref(lim), LIMIT_FETCH_GRAN)
        for kind, hint, step in arms:
            for y in (0, 16):
                evs = []
                for _ in range(args.reps):
                    read(flush, out, 1056)
                    if kind == "hot":
                        read(r, out, 1056)
                    elif kind != "cold":
                        prefetch(r, rows=1, splits=1, row_stride=0, split_stride=0,
                                 chunk_bytes=r.numel() * 4, hint=hint, step=step)
                    if y:
                        read(other[: y * MB // 4], out, 80, True)
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    read(r, out, 264)
                    e1.record()
                    evs.append((e0, e1))
                torch.cuda.synchronize()
                us = [a.elapsed_time(b) * 1e3 for a, b in evs]
                row = {"fetch_granularity": lim.value, "pre": kind, "hint": hint, "step": step,
                       "stream_mb": y, "read_us": round(statistics.median(us), 3),
                       "min_us": round(min(us), 3)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    torch.cuda.synchronize()
    _cuda().cuCtxSetLimit(LIMIT_FETCH_GRAN, default_gran)
    return {"region_mb": args.region, "default_fetch_granularity": default_gran, "rows": rows}


# ----------------------------------------------------------------------------- GEMM prefetch step


PREFETCH_ASM = 'prefetch.global.L2 [$1];\\n\\tmov.u32 $0, 0;'
LOAD_ASM = {"ld128": "ld.global.L2::128B.u8 $0, [$1];", "ld64": "ld.global.u8 $0, [$1];"}


def _gemm_kernel_variant(arm: str):
    """fp8_gemm's kernel with its W prefetch before the wait (PREFETCH tiles) changed (the
    source rewritten, loaded as its own module): ``stepS`` asks L2 in pieces of S bytes instead
    of 128; ``ld128`` loads one byte a 128-byte line (``.L2::128B``: the whole line comes to
    L2), ``ld64`` one byte a 64-byte piece, the result unused: a load is never dropped, where a
    prefetch may be. The program does not wait for these loads (nothing reads the register)."""
    import importlib.util
    import inspect

    from fp8tower.kernels import fp8_gemm

    src = inspect.getsource(fp8_gemm)
    a, b = src.index("def _prefetch_w_l2_packed"), src.index("def _div_by_scale")
    part = src[a:b]
    step = 64 if arm == "ld64" else int(arm.removeprefix("step")) if arm.startswith("step") else 128
    if step != 128:
        part = part.replace("// 128", f"// {step}").replace("* 128", f"* {step}")
    if arm in LOAD_ASM:
        asm = PREFETCH_ASM  # as the source spells it: a backslash and an n
        if part.count(asm) != 2:
            raise RuntimeError(f"prefetch helpers not as expected: {part}")
        part = part.replace(asm, LOAD_ASM[arm])
    if part == src[a:b]:
        raise RuntimeError(f"{arm}: nothing changed")
    name = f"fp8tower.kernels._fp8_gemm_{arm}"
    path = f"/tmp/_fp8_gemm_{arm}.py"
    with open(path, "w") as f:
        f.write(src[:a] + part + src[b:])
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod._fp8_gemm_decode_kernel


def pfstep(args) -> list[dict]:
    from fp8tower.kernels import fp8_gemm

    kernels = {"step128": fp8_gemm._fp8_gemm_decode_kernel}
    arms = args.arms.split(",")
    for a in arms:
        if a not in kernels:
            kernels[a] = _gemm_kernel_variant(a)

    def set_arm(a):
        fp8_gemm._fp8_gemm_decode_kernel = kernels[a]

    return tower_ab.run_arms(args.model, args.schemes.split(","),
                             [int(m) for m in args.m.split(",")], arms, set_arm, args.rounds,
                             args.steps, args.replays)


# ----------------------------------------------------------------------------- tower

_RECORDS: dict[int, dict] = {}  # row-major weight data_ptr -> what its GEMM reads first
_ARM: dict = {"mode": "none"}


def parse_arm(text: str) -> dict:
    if text == "none":
        return {"mode": "none", "setaside": 0}
    try:
        mode, tiles, hint, sa = text.split(":")
        if mode not in ("side", "chain") or hint not in ("normal", "last"):
            raise ValueError
        return {"mode": mode, "tiles": int(tiles), "hint": 1 if hint == "last" else 0,
                "setaside": sa}
    except ValueError:
        raise SystemExit(f"--arms: {text!r} is not none or side|chain:T:normal|last:MB|max")


def _record_plans() -> None:
    """Record, per Triton plan, where each program of its GEMM starts reading W."""
    from fp8tower.kernels import fp8_gemm
    from fp8tower.nn import plan

    native_args = fp8_gemm.launch_args
    last: dict = {}

    def launch_args(w, x, *a, **kw):
        grid, args, kwargs = native_args(w, x, *a, **kw)
        bn, bk, split = kwargs["BLOCK_N"], kwargs["BLOCK_K"], kwargs["SPLIT_K"]
        k_per_split, stride = args[11], args[12]
        if kwargs["PACKED"]:  # tile-major: program i's tiles contiguous, stride apart
            rec = {"rows": grid[0], "row_stride": stride, "split_stride": k_per_split * bn,
                   "tile_bytes": bn * bk}
        else:
            rec = {"rows": args[9], "row_stride": stride, "split_stride": k_per_split,
                   "tile_bytes": bk}
        last.update(w=w, splits=split, **rec)
        return grid, args, kwargs

    native_plan = plan._triton_plan

    def triton_plan(x2, weight, *a, **kw):
        last.clear()
        out = native_plan(x2, weight, *a, **kw)
        if last:
            _RECORDS[weight.data.data_ptr()] = dict(last)
        return out

    fp8_gemm.launch_args = launch_args
    plan._triton_plan = triton_plan


def _patch_tower() -> None:
    from fp8tower.tower import build

    native_call = build._Gemm.__call__
    native_step = build.Tower.step
    side: dict = {}

    def launch_p(g, pdl: bool):
        nxt = getattr(g, "_next", None)
        rec = _RECORDS.get(nxt.module.fp8_weight().data.data_ptr()) if nxt is not None else None
        if rec is None:
            return False
        prefetch(rec["w"], rows=rec["rows"], splits=rec["splits"], row_stride=rec["row_stride"],
                 split_stride=rec["split_stride"], chunk_bytes=_ARM["tiles"] * rec["tile_bytes"],
                 hint=_ARM["hint"], pdl=pdl)
        return True

    def call(self, x):
        mode = _ARM["mode"]
        if mode == "side":
            main = torch.cuda.current_stream()
            s = side.setdefault(main.device, torch.cuda.Stream(main.device))
            s.wait_stream(main)
            with torch.cuda.stream(s):
                launch_p(self, pdl=False)
        y = native_call(self, x)
        if mode == "chain":
            launch_p(self, pdl=True)
        return y

    def step(self, x):
        y = native_step(self, x)
        if _ARM["mode"] == "side":
            main = torch.cuda.current_stream()
            s = side.get(main.device)
            if s is not None:
                main.wait_stream(s)
        return y

    build._Gemm.__call__ = call
    build.Tower.step = step


def tower(args) -> list[dict]:
    sys.path.insert(0, "benchmarks")
    import tower_ab

    from fp8tower.tower.build import build_tower

    def build(*a, **kw):
        t = build_tower(*a, **kw)
        gemms = t._gemms()
        for i, g in enumerate(gemms):
            g._next = gemms[(i + 1) % len(gemms)]
        return t

    tower_ab.build_tower = build
    _record_plans()
    _patch_tower()
    smax = max_setaside()
    arms = args.arms.split(",")
    parsed = {a: parse_arm(a) for a in arms}

    launches: dict[str, int] = {a: 0 for a in arms}
    current = {"arm": None, "at": 0}

    def set_arm(a):
        if current["arm"] is not None:
            launches[current["arm"]] += _STATS["p_launches"] - current["at"]
        current.update(arm=a, at=_STATS["p_launches"])
        p = parsed[a]
        _ARM.clear()
        _ARM.update(p)
        sa = p["setaside"]
        set_setaside(smax if sa == "max" else int(sa) << 20)

    rows = tower_ab.run_arms(args.model, args.schemes.split(","), [int(m) for m in args.m.split(",")],
                             arms, set_arm, args.rounds, args.steps, args.replays)
    launches[current["arm"]] += _STATS["p_launches"] - current["at"]
    set_setaside(0)
    print("prefetch kernels launched per arm (eager and captured):", launches, flush=True)
    for r in rows:
        r["max_setaside"] = smax
        r["p_launches_all_rows"] = launches
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="part", required=True)
    for name in ("micro", "gran"):
        sp = sub.add_parser(name)
        sp.add_argument("--region", type=int, default=16, help="MB asked of L2")
        sp.add_argument("--reps", type=int, default=15)
        sp.add_argument("--json", required=True)
        if name == "micro":
            sp.add_argument("--rolling", type=int, default=6, help="regions in the rolling run")
    for name, arms in (("pfstep", "step128,step64,step32"), ("tower", "none,side:2:last:max")):
        sp = sub.add_parser(name)
        tower_ab.add_arguments(sp)  # --model --m --rounds --steps --replays --json
        sp.add_argument("--arms", default=arms)
        sp.add_argument("--schemes", default="per_tensor")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_l2_keep needs a CUDA GPU")
    t0 = time.time()
    from fp8tower import provenance

    if args.part == "micro":
        doc = {**provenance.record(), **micro(args)}
    elif args.part == "gran":
        doc = {**provenance.record(), **gran(args)}
    elif args.part == "pfstep":
        doc = {**provenance.record(), "rows": pfstep(args)}
    else:
        doc = {**provenance.record(), "rows": tower(args)}
    doc["seconds"] = round(time.time() - t0, 1)
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)
    if args.part in ("tower", "pfstep"):
        tower_ab.print_rows(doc["rows"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
