"""``torch.ops.fp8tower.fp8_linear``: fp8_linear as one opaque torch.library custom op.

Under ``torch.compile`` Dynamo cannot trace the dispatch (cache lookups, ``data_ptr``, the
Triton launch), so :func:`fp8tower.fp8_linear` and :class:`fp8tower.Fp8Linear` call this op
when compiling: the graph holds one node per linear, its fake (meta) implementation gives
the output's shape and dtype, and the real one resolves the backend and runs it at run
time. Eager calls skip the op (no dispatcher overhead) and run the same code directly, but
for calls that want a gradient: the op carries the autograd formula (at the end).

The op takes the weight's tensors, not an :class:`~fp8tower.formats.Fp8Weight`. The
Fp8Weight (which caches each backend's prepared weight, e.g. Triton's split-K counters) is
found in a registry keyed by its tensors' addresses and held weakly: its owner (an
Fp8Linear, or the caller of fp8_linear) keeps it alive, and while it lives its tensors do,
so an address cannot be reused by another tensor. Nothing is stored on the tensors (a
tensor attribute would end up in checkpoints saved with ``keep_vars=True`` and break
``torch.load(weights_only=True)``). A call whose Fp8Weight is not registered builds a
temporary one (prepared again on every call: correct, slower).
"""

# No `from __future__ import annotations` here: torch.library.custom_op reads the op's
# schema from its annotations, and real Optional[...] objects work on every torch we support.
import contextlib
import threading
import weakref
from typing import Optional

import torch
from torch import Tensor

from .. import dispatch
from ..backends import Backend, other_cuda_device
from ..formats import ON_REASSIGN, Fp8Weight, Scheme
from ..problem import GemmProblem
from . import plan as _plan

_LIVE: dict[tuple, weakref.ref] = {}
_LOCK = threading.Lock()


def _key(data: Tensor, scale: Tensor, act_scale: Tensor | None, scheme: Scheme) -> tuple:
    return (data.device, data.data_ptr(), tuple(data.shape), scale.data_ptr(),
            tuple(scale.shape), None if act_scale is None else act_scale.data_ptr(), scheme)


def versions(data: Tensor, scale: Tensor, act_scale: Tensor | None) -> tuple | None:
    """In-place edit counters of a weight's tensors (None for inference-mode tensors, which
    have none)."""
    if data.is_inference() or scale.is_inference() or (
            act_scale is not None and act_scale.is_inference()):
        return None
    return (data._version, scale._version, -1 if act_scale is None else act_scale._version)


def register(weight: Fp8Weight) -> Fp8Weight:
    """Let compiled calls on ``weight``'s tensors find it (and its prepared forms)."""
    if getattr(weight, "_ops_key", None) is not None:  # the eager hot path: already done
        return weight
    if weight.data.data_ptr() == 0:  # meta or empty tensors: no address to key on
        return weight
    key = _key(weight.data, weight.scale, weight.act_scale, weight.scheme)
    weight._ops_key = key
    weight._ops_versions = versions(weight.data, weight.scale, weight.act_scale)

    def drop(ref, key=key):
        with _LOCK:
            if _LIVE.get(key) is ref:
                del _LIVE[key]

    with _LOCK:
        ref = _LIVE.get(key)
        if ref is None or ref() is not weight:
            _LIVE[key] = weakref.ref(weight, drop)
    return weight


def forget(weight: Fp8Weight | None) -> None:
    """Unregister ``weight`` (its values changed in place: its prepared forms are stale)."""
    if weight is None:
        return
    key = getattr(weight, "_ops_key", None)
    weight._ops_key = None
    with _LOCK:
        ref = _LIVE.get(key)
        if ref is not None and ref() is weight:
            del _LIVE[key]


ON_REASSIGN.append(forget)  # a reassigned field: the registration by the old tensors goes


def refresh_if_edited(weight: Fp8Weight, now: tuple | None = None) -> None:
    """Clear a registered weight's prepared forms if its tensors were edited in place since
    they were prepared: ``now``, the version counters of the tensors the call got (default:
    the weight's own), against those it was prepared at."""
    if getattr(weight, "_ops_key", None) is None:
        return
    if now is None:
        now = versions(weight.data, weight.scale, weight.act_scale)
    if now != weight._ops_versions:
        weight.packed.clear()
        # edited in place: its new values are checked once, as a new weight's (2026-12-05
        # audit: act_scale.fill_(-0.01) ran, Triton -143.36 against the reference's 30.72);
        # refused, the versions stay old and every call refuses it again
        weight.check_scales()
        weight._ops_versions = now


def weight_for(
    data: Tensor, scale: Tensor, act_scale: Tensor | None, scheme: Scheme | str
) -> Fp8Weight:
    """The registered Fp8Weight over these tensors, else a temporary one."""
    scheme = Scheme.parse(scheme)
    ref = _LIVE.get(_key(data, scale, act_scale, scheme)) if data.data_ptr() else None
    w = ref() if ref is not None else None
    if w is not None:  # edited in place since it was prepared: prepare again
        refresh_if_edited(w, versions(data, scale, act_scale))
    # a temporary view of buffers checked when their module was built or loaded: no value
    # check here, which would read the scales (a GPU sync) on every call
    return w if w is not None else Fp8Weight(data, scale, scheme, act_scale, check_values=False)


def run_2d(  # the op's body; eager fp8_linear calls it directly (no dispatcher overhead)

    x: torch.Tensor,
    weight: Fp8Weight,
    *,
    bias: torch.Tensor | None,
    act_scale: torch.Tensor | None,
    backend: str | Backend,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """Resolve the backend for a validated, contiguous 2-D x and run it (never under autocast:
    the reference backend's float32 matmul would run in the autocast dtype)."""
    if torch._C._is_any_autocast_enabled():
        with torch.autocast(x.device.type, enabled=False):
            return run_2d(x, weight, bias=bias, act_scale=act_scale, backend=backend,
                          out_dtype=out_dtype)
    problem = GemmProblem.for_call(x, weight, out_dtype, act_scale, bias=bias)
    # under a CUDA graph capture the graph's choice (fp8tower.dispatch's module doc)
    be, config = dispatch.resolve(problem, backend, graph=x.is_cuda and _plan.IS_CAPTURING())
    return be.run(
        x, weight, be.packed_for(weight),
        act_scale=act_scale, bias=bias, out_dtype=out_dtype, config=config,
    )


# A compiled graph without a CUDA graph calls the op once per linear and step, on the host's
# clock. Resolved afresh each call (dispatch, problem, Triton's JIT launcher) it cost about
# 150 us a call: a Qwen3-8B-shaped step, torch.compile'd, ran 4.2x bf16's time on an H100
# (results/session43_2026-12-05/call1). So the op keeps launch plans as Fp8Linear's eager
# path does (plan.py), per registered weight, in its prepared forms (an edit in place, which
# clears those, drops them too). Read once: FP8TOWER_PLAN=0 turns them off for A/B runs.
_PLANS = "op_plans"  # Fp8Weight.packed key
_OP_PLANS = _plan.plans_enabled_default()


def _plan_key(x: Tensor, w: Fp8Weight, bias: Tensor | None, act_scale: Tensor | None,
              backend: str, out_dtype: torch.dtype) -> tuple | None:
    """The op's launch-plan key of this call; None where Fp8Linear's eager path would not
    plan either (a per-call act_scale, FP8 or large x, a capture: a graph keeps the dispatch
    choice), and for an unregistered weight (a temporary one, built again on every call)."""
    if (not _OP_PLANS or act_scale is not None or getattr(w, "_ops_key", None) is None
            or torch._C._is_any_autocast_enabled() or other_cuda_device(x)
            or not _plan.plannable(x, x.shape[0], w.k, w.data.device)):
        return None
    return (x.shape, x.dtype, x.device, backend, out_dtype,
            None if bias is None else bias.data_ptr(), dispatch._generation)


def _first_call(x: Tensor, w: Fp8Weight, bias: Tensor | None, act_scale: Tensor | None,
                backend: str, out_dtype: torch.dtype, key: tuple | None) -> Tensor:
    """A call without a plan: build this key's plan and run it, else the dispatch choice."""
    if key is None:  # no plan kept (other_cuda_device: a compiled graph's call, on x's GPU)
        with torch.cuda.device(x.device) if other_cuda_device(x) else contextlib.nullcontext():
            return run_2d(x, w, bias=bias, act_scale=act_scale, backend=backend,
                          out_dtype=out_dtype)
    plans = w.packed.setdefault(_PLANS, {})
    if len(plans) >= _plan.MAX_PLANS_PER_MODULE:
        plans.clear()
    p = plans[key] = _plan.build(x, w, bias=bias, out_dtype=out_dtype, backend=backend)
    if p.warm is not None:
        # as Fp8Linear's: load the graph's choice's kernels now, which a capture will run
        # (a kernel cannot be loaded while a stream captures: a compiled step whose only
        # warm-up was planned failed its first capture; 2026-12-05 review)
        p.warm(x)
    return p(x)


def _graph_pool_warmup(device: torch.device) -> bool:
    """Whether this call is torch.compile(mode="reduce-overhead")'s warm-up run: Inductor's
    CUDA graph trees then send every allocation of this thread to the graph's private pool,
    and refuse to record while one of them outlives the run untracked (the weight's prepared
    forms, split-K counters and launch plans do: "Detected 2 tensor(s) in the cudagraph pool
    not tracked as outputs", H100, results/session44_2026-12-06/call2)."""
    import sys

    trees = sys.modules.get("torch._inductor.cudagraph_trees")
    # the warm-up runs on the tree's own stream, never the default one (raw handle 0): one C
    # call keeps unplanned calls elsewhere off the manager lookup
    if trees is None or device.type != "cuda" or not _plan._RAW_STREAM(device.index):
        return False
    try:  # private API (torch 2.6 - 2.13): an unknown layout is taken as no warm-up
        mgr = trees.get_manager(device.index, create_if_none_exists=False)
        return bool(mgr is not None and mgr.in_warmup
                    and torch.cuda.current_stream(device) == mgr.stream)
    except Exception:  # noqa: BLE001
        return False


def _off_pool(device: torch.device, fn, *args) -> Tensor:
    """``fn(*args)`` on a helper thread, on this thread's current stream: the pool routing
    of a graph warm-up is per thread (torch >= 2.8), so what the call allocates (and keeps)
    comes from the caching allocator's general pool, as in an eager call. torch 2.6 / 2.7
    route by stream (no ``_cuda_beginAllocateCurrentThreadToPool``): there the helper runs
    on a side stream, ordered after and before this one (not run on a GPU: the GPU machine
    has torch 2.11). Thread-local modes (a default device, FlopCounterMode, profiler
    ranges) do not see this one call."""
    stream, box = torch.cuda.current_stream(device) if device.type == "cuda" else None, {}
    by_stream = stream is not None and not hasattr(torch._C,
                                                   "_cuda_beginAllocateCurrentThreadToPool")
    side = torch.cuda.Stream(device) if by_stream else None

    def work():
        try:
            with contextlib.ExitStack() as on:
                if stream is not None:
                    on.enter_context(torch.cuda.device(device))
                    if side is not None:
                        side.wait_stream(stream)
                    on.enter_context(torch.cuda.stream(side or stream))
                box["y"] = fn(*args)
            if side is not None:
                stream.wait_stream(side)
        except BaseException as e:  # noqa: BLE001 - raised again on the caller's thread
            box["error"] = e

    t = threading.Thread(target=work, name="fp8tower-off-pool", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["y"]


@torch.library.custom_op("fp8tower::fp8_linear", mutates_args=())
def fp8_linear_op(
    x: Tensor,
    weight: Tensor,
    weight_scale: Tensor,
    input_scale: Optional[Tensor],  # noqa: UP045 (see the import note)
    act_scale: Optional[Tensor],  # noqa: UP045
    bias: Optional[Tensor],  # noqa: UP045
    scheme: str,
    backend: str,
    out_dtype: torch.dtype,
) -> Tensor:
    """y (M, N) = x (M, K) @ W.T (+ bias) for a 2-D contiguous x; see nn.linear.fp8_linear."""
    w = weight_for(weight, weight_scale, input_scale, scheme)
    key = _plan_key(x, w, bias, act_scale, backend, out_dtype)
    p = None if key is None else w.packed.get(_PLANS, {}).get(key)
    if p is not None:
        y = p(x)
    elif _graph_pool_warmup(x.device):
        # what the call keeps comes from the general pool, its output from the graph's: the
        # warm-up checks that (an output made on the helper thread failed it, session44 call3)
        y = _off_pool(x.device, _first_call, x, w, bias, act_scale, backend, out_dtype,
                      key).clone()
    else:
        y = _first_call(x, w, bias, act_scale, backend, out_dtype, key)
    # A custom op's output may not be a view (cuBLASLt pads M and returns a slice).
    return y if y._base is None else y.clone()


@fp8_linear_op.register_fake
def _fp8_linear_fake(x, weight, weight_scale, input_scale, act_scale, bias, scheme, backend,
                     out_dtype):
    return x.new_empty((x.shape[0], weight.shape[0]), dtype=out_dtype)


# Gradients (w.r.t. x and a bias; the FP8 weight and its scales are constants): the
# straight-through estimator of the activation quantization, dL/dx = dL/dy @ deq(W), in x's
# dtype as nn.Linear's backward computes it; dL/dbias = dL/dy summed over the rows. Eager
# fp8_linear calls this op when a gradient is wanted, so every backend has the same one.
def _setup_context(ctx, inputs, output):
    x, weight, weight_scale, _, _, bias, scheme, _, _ = inputs
    ctx.save_for_backward(weight, weight_scale)
    ctx.scheme, ctx.x_dtype = scheme, x.dtype
    ctx.bias_dtype = None if bias is None else bias.dtype


def _backward(ctx, grad):
    weight, weight_scale = ctx.saved_tensors
    grad_x = grad_bias = None
    if ctx.needs_input_grad[0]:
        w = Fp8Weight(weight, weight_scale, ctx.scheme, check_values=False)
        grad_x = grad.to(ctx.x_dtype) @ w.dequantize(ctx.x_dtype)
    if ctx.needs_input_grad[5]:
        grad_bias = grad.sum(0).to(ctx.bias_dtype)
    return grad_x, None, None, None, None, grad_bias, None, None, None


fp8_linear_op.register_autograd(_backward, setup_context=_setup_context)
