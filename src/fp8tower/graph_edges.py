"""Early launch in CUDA graphs: a PDL kernel may start once its predecessor's blocks have all
begun, not only once they have all finished.

A kernel launched with programmatic dependent launch (PDL; our Triton GEMM with ``pdl``, the
activation pre-pass, the stream and CUTLASS ``pf`` kernels) calls ``griddepcontrol.wait``
before it reads anything its predecessor wrote; the weights it streams before that wait do
not depend on it. Stream capture records such a launch as a *programmatic* edge on the
predecessor's PROGRAMMATIC port: the kernel may start when every block of the predecessor
has triggered (``griddepcontrol.launch_dependents``) or exited. A predecessor that never
triggers - every torch kernel: the norms, adds and attention of a real model, the tower's
stand-ins - therefore holds it back until its last block exits, and the next GEMM's weight
stream starts a whole launch late.

:func:`early_launch` moves every programmatic edge of a captured graph to the predecessor's
LAUNCH_ORDER port (``CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER``, CUDA >= 12.3: "activates when
all blocks of the kernel have begun execution"). The edge stays programmatic, so
``griddepcontrol.wait`` still waits for the predecessor's completion and memory: what the
dependent reads after its wait is unchanged, only when it may start (and stream weights)
moves. Ordinary edges (a kernel launched without PDL, memcpy/memset nodes) are left alone:
such a kernel has no wait and must not start early. H200 2026-12-01
(results/early_launch_H200_2026-12-01/call5/early.json): the merged 27B tower, same configs,
0-3.9% faster a step (block128 M=1 2.404 -> 2.352 ms), the same bits.

The contract this relies on is PDL's own: a kernel launched with PDL reads its predecessors'
outputs only after ``griddepcontrol.wait`` (without it, even the PROGRAMMATIC port gives no
memory visibility). ``FP8TOWER_EARLY_LAUNCH=0`` turns the rewrite off; a torch or driver that
cannot edit graph edges leaves graphs as captured (warned once).

The driver API is reached with ctypes (libcuda, ``cu*_v2`` edge functions of CUDA >= 12.3),
loaded on first use: importing this module touches no CUDA.
"""

from __future__ import annotations

import ctypes
import functools
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from . import env

ENV = "FP8TOWER_EARLY_LAUNCH"
PORT_DEFAULT, PORT_PROGRAMMATIC, PORT_LAUNCH_ORDER = 0, 1, 2  # CU_GRAPH_KERNEL_NODE_PORT_*
TYPE_DEFAULT, TYPE_PROGRAMMATIC = 0, 1  # CU_GRAPH_DEPENDENCY_TYPE_*


class EdgeData(ctypes.Structure):
    """CUgraphEdgeData (cuda.h): ports and dependency type of one edge, 8 bytes."""

    _fields_ = [("from_port", ctypes.c_ubyte), ("to_port", ctypes.c_ubyte),
                ("type", ctypes.c_ubyte), ("reserved", ctypes.c_ubyte * 5)]


def enabled() -> bool:
    """Whether captures of fp8tower rewrite programmatic edges (``FP8TOWER_EARLY_LAUNCH``,
    default on; ``0`` / ``false`` / ``off`` turns it off)."""
    return env.flag(ENV, True)


@functools.cache
def _driver():
    """The driver functions used here, typed; RuntimeError naming what is missing."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise RuntimeError(f"early launch needs the CUDA driver (libcuda.so.1): {e}") from None
    node_p = ctypes.POINTER(ctypes.c_void_p)
    sigs = {
        "cuGraphGetEdges_v2": [ctypes.c_void_p, node_p, node_p, ctypes.POINTER(EdgeData),
                               ctypes.POINTER(ctypes.c_size_t)],
        "cuGraphRemoveDependencies_v2": [ctypes.c_void_p, node_p, node_p,
                                         ctypes.POINTER(EdgeData), ctypes.c_size_t],
        "cuGraphAddDependencies_v2": [ctypes.c_void_p, node_p, node_p,
                                      ctypes.POINTER(EdgeData), ctypes.c_size_t],
        "cuGetErrorString": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    }
    fns = {}
    for name, argtypes in sigs.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise RuntimeError(f"early launch needs {name} (a CUDA >= 12.3 driver), which "
                               "this driver lacks (FP8TOWER_EARLY_LAUNCH=0 skips it)") from None
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
        fns[name] = fn
    return fns


def _check(rc: int, what: str) -> None:
    if rc != 0:
        msg = ctypes.c_char_p()
        _driver()["cuGetErrorString"](rc, ctypes.byref(msg))
        text = msg.value.decode() if msg.value else "unknown error"
        raise RuntimeError(f"{what} failed: CUDA error {rc} ({text})")


def edges(graph_handle: int) -> list[tuple[int, int, EdgeData]]:
    """(from node, to node, edge data) of every edge of a raw ``CUgraph`` handle."""
    d = _driver()
    n = ctypes.c_size_t(0)
    _check(d["cuGraphGetEdges_v2"](graph_handle, None, None, None, ctypes.byref(n)),
           "cuGraphGetEdges")
    count = n.value
    if count == 0:
        return []
    src, dst = (ctypes.c_void_p * count)(), (ctypes.c_void_p * count)()
    data = (EdgeData * count)()
    _check(d["cuGraphGetEdges_v2"](graph_handle, src, dst, data, ctypes.byref(n)),
           "cuGraphGetEdges")
    return [(src[i], dst[i], data[i]) for i in range(n.value)]


def early_launch(graph) -> int:
    """Move every programmatic edge of ``graph`` (a ``torch.cuda.CUDAGraph`` made with
    ``keep_graph=True``, captured, not yet instantiated; or a raw ``CUgraph`` handle) from
    its predecessor's PROGRAMMATIC port to its LAUNCH_ORDER port (module doc). Returns how
    many edges moved."""
    handle = graph if isinstance(graph, int) else graph.raw_cuda_graph()
    todo = [(a, b, e) for a, b, e in edges(handle)
            if e.type == TYPE_PROGRAMMATIC and e.from_port == PORT_PROGRAMMATIC]
    if not todo:
        return 0
    d = _driver()
    count = len(todo)
    src = (ctypes.c_void_p * count)(*[a for a, _, _ in todo])
    dst = (ctypes.c_void_p * count)(*[b for _, b, _ in todo])
    old = (EdgeData * count)(*[e for _, _, e in todo])
    new = (EdgeData * count)()
    for i in range(count):
        new[i].from_port, new[i].to_port, new[i].type = PORT_LAUNCH_ORDER, 0, TYPE_PROGRAMMATIC
    _check(d["cuGraphRemoveDependencies_v2"](handle, src, dst, old, count),
           "cuGraphRemoveDependencies")
    _check(d["cuGraphAddDependencies_v2"](handle, src, dst, new, count),
           "cuGraphAddDependencies")
    return count


def new_graph():
    """A ``torch.cuda.CUDAGraph`` whose raw graph stays editable after capture (torch >= 2.8:
    ``keep_graph``); with an older torch a plain one, which :func:`capture` leaves as is."""
    import torch

    try:
        graph = torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:  # torch without keep_graph
        graph = torch.cuda.CUDAGraph()
        graph.fp8tower_editable = False
    else:
        graph.fp8tower_editable = True
    return graph


_warned: set[str] = set()


def _warn_once(why: str) -> None:
    if why not in _warned:
        _warned.add(why)
        warnings.warn(f"fp8tower: CUDA graphs run without early launch: {why}", RuntimeWarning,
                      stacklevel=4)


@contextmanager
def capture(graph, *, early: bool | None = None, **graph_kwargs) -> Iterator[None]:
    """``torch.cuda.graph(graph, **graph_kwargs)``, then (``early``; default: :func:`enabled`)
    :func:`early_launch`, then instantiate. ``graph`` from :func:`new_graph`. Where this
    torch or driver cannot edit graph edges, the graph runs as captured (warned once): slower,
    never wrong. ``graph.early_edges``: how many edges moved."""
    import torch

    with torch.cuda.graph(graph, **graph_kwargs):
        yield
    graph.early_edges = 0
    if enabled() if early is None else early:
        if not getattr(graph, "fp8tower_editable", False):
            _warn_once("this torch cannot keep a captured graph editable (keep_graph, torch "
                       ">= 2.8)")
        else:
            try:
                _driver()
            except RuntimeError as e:
                _warn_once(str(e))
            else:
                graph.early_edges = early_launch(graph)
    if getattr(graph, "fp8tower_editable", False):
        graph.instantiate()
