"""Build a decode step's FP8 tower built from a TowerSpec, run eagerly or as a CUDA graph.

:func:`build_tower` makes random FP8 weights of the spec's exact shapes (seeded, generated on
the device: bf16 randn scaled and cast, never a float32 copy of the tower) with random
positive scales of the scheme's shapes. ``arm="unmerged"``: one Fp8Linear per FP8 linear;
``arm="merged"``: one MergedFp8Linear per merge group (built by merging the very weights the
unmerged arm uses, so both arms compute the same step).

Data flow. Only the FP8 linears are the subject; everything between them is a cheap,
documented stand-in. The step is a chain of *stages*: the GEMMs that read one activation
(the spec's ``input``: ``hidden_norm``, ``gdn_core_out``, ``attn_core_out``,
``post_attn_norm``, ``mlp_act``; DeepSeek's ``q_a_norm``, ``shared_act``), in execution order. A stage's input is made from the
previous stage's outputs (the step input ``x`` for the first stage):

- pass-through: the previous stage has one output of exactly the width K (out_proj /
  o_proj / down_proj -> the next layer's hidden state, the hidden state -> MLP gate/up):
  the tensor itself, no kernel. Norms and residual adds are left out.
- mix (the token mixer / SwiGLU stand-in), one elementwise kernel: ``a + b`` where ``a`` is
  the first K columns of the first previous output at least K wide and ``b`` the last K
  columns of the last one. GDN: ``in_proj_qkv[:, :K] + in_proj_z`` (z); gated attention:
  query + gate (the two halves of q_proj); MLP: gate + up. It appears in :meth:`Tower.ops`
  as a ``standin`` op (a trace maps kernels to ops by position and must see it).
  Its cost depends on M: at M = 1 its operands are contiguous and torch runs its vectorized
  kernel, from M = 2 they are column slices (row stride the GEMM's N) and torch runs its
  strided one. Paired traces of the merged 27B tower (H200 2026-12-02,
  results/m32_gap_H200_2026-12-02/, per_tensor / channel_token / block128): 1.2 us a call at
  M = 1, 2.6-2.8 at M = 8 and 32, +0.09-0.10 ms a step, i.e. 4-5 points of a step's M = 8 or
  M = 32 ratio to M = 1 that no GEMM pays. :func:`standin_kernel` ("rows": one stride-aware
  Triton kernel, tower/standin.py, the same bits) takes that away: 1.19 us a call at M = 1,
  1.35 at M = 32 (results/standin_H200_2026-12-04/). "rows_fp8" (per_tensor only) also
  quantizes the sum with the consuming GEMM's static activation scale in that kernel, so the
  GEMM reads FP8 x and runs no pre-pass (:meth:`Tower.problem` poses its FP8-x key): the
  producer-fused quantization of an engine; the final mix (no consumer) stays "rows".

Magnitudes stay O(1) through any number of layers without norms: every GEMM's random
weights are scaled so its output has unit RMS given its input's RMS (``gain``: 1 for a
pass-through, sqrt(2) for a mix of independent halves); per_tensor's static activation
scale is 8 sigma of that input / 448 (the same for all GEMMs of a stage, so they merge
exactly). Non-FP8 linears (GDN in_proj_b / in_proj_a, BF16 in FP8 checkpoints) are not run.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

import torch

from .. import backends, dispatch, graph_edges
from ..backends import Backend
from ..formats import FP8_DTYPE, FP8_MAX, Fp8Weight, Scheme, weight_scale_shape
from ..models import DEFAULT_PARTS, GemmSpec, TowerSpec, get_spec
from ..nn.linear import Fp8Linear
from ..nn.merged import MergedFp8Linear, MergeMode
from ..problem import GemmProblem

ARMS = ("unmerged", "merged")
# FP8 data are drawn as randn * DATA_STD (max ~6.5 sigma = 208 < 448 even over 7e9 values).
DATA_STD = 32.0
# Random scale factors: exp(U(-SPREAD, SPREAD)).
SPREAD = 0.5
# per_tensor static activation scale: this many RMS of the input / 448.
ACT_SIGMAS = 8.0
# Kernels of a stand-in op: CUDA elementwise kernels; on the CPU, top-level aten ops.
STANDIN_REGEX = r"elementwise|^aten::"
STANDIN_BACKEND = "torch"
# The stand-in's kernel: "torch" (torch.add on the column slices, the tower's definition) or
# "rows" (standin.rows_add: one Triton kernel that reads each row at its stride; the same
# bits) or "rows_fp8" (standin.rows_add_fp8: that sum quantized for the next GEMM in the same
# kernel; per_tensor towers). Read at each call; set it with :func:`standin_kernel` (`bench
# tower --standin`, `trace capture --standin`, benchmarks/bench_standin.py).
STANDIN_KERNEL = "torch"
STANDIN_KERNELS = ("torch", "rows", "rows_fp8")
STANDIN_KERNEL_BACKEND = {"torch": STANDIN_BACKEND, "rows": "triton", "rows_fp8": "triton"}


@contextlib.contextmanager
def standin_kernel(name: str) -> Iterator[None]:
    """Inside the block, every tower's stand-ins run on kernel ``name`` (STANDIN_KERNELS);
    the previous kernel is restored after it. An unknown name is refused before the block."""
    global STANDIN_KERNEL
    if name not in STANDIN_KERNELS:
        raise ValueError(f"unknown stand-in kernel {name!r}: expected one of "
                         f"{', '.join(STANDIN_KERNELS)}")
    before, STANDIN_KERNEL = STANDIN_KERNEL, name
    try:
        yield
    finally:
        STANDIN_KERNEL = before


# ----------------------------------------------------------------------------- weights


def _generator(device: torch.device, seed: int, slot: int) -> torch.Generator:
    """A generator of its own for each slot (-1: the step input, i >= 0: the i-th linear)."""
    return torch.Generator(device=device).manual_seed(seed * 1_000_003 + 1 + slot)


def _scale_factors(shape: tuple[int, ...], gen, device) -> torch.Tensor:
    """Random positive factors exp(U(-SPREAD, SPREAD)); vectors normalized to mean square 1."""
    u = torch.rand(shape, generator=gen, device=device, dtype=torch.float32)
    f = torch.exp((2 * u - 1) * SPREAD)
    return f if f.dim() == 0 else f / f.square().mean().sqrt()


def random_fp8_weight(
    n: int,
    k: int,
    scheme: Scheme | str,
    *,
    std: float,
    act_scale: float | None = None,
    seed: int = 0,
    slot: int = 0,
    device: torch.device | str = "cpu",
) -> Fp8Weight:
    """A random (N, K) FP8 weight whose dequantized values have RMS ``std`` (vectors and
    blocks: on average), with random positive scales of the scheme's shapes. Made on the
    device from bf16 randn: no float32 copy of the weight."""
    scheme = Scheme.parse(scheme)
    device = torch.device(device)
    gen = _generator(device, seed, slot)
    data = torch.randn(n, k, generator=gen, device=device, dtype=torch.bfloat16)
    f = _scale_factors(weight_scale_shape(scheme, n, k), gen, device)
    if scheme is Scheme.PER_TENSOR:
        data.mul_(DATA_STD / f)  # one scalar: keep the dequantized RMS exactly std
    else:
        data.mul_(DATA_STD)
    fp8 = data.clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    del data
    act = None
    if act_scale is not None:
        act = torch.tensor(float(act_scale), dtype=torch.float32, device=device)
    return Fp8Weight(fp8, f * (std / DATA_STD), scheme, act)


# ----------------------------------------------------------------------------- step program


@dataclass(frozen=True)
class _Mix:
    """How a stage's input (width k) is made from the previous stage's outputs."""

    k: int
    a: tuple[int, int]  # (output index, first column)
    b: tuple[int, int] | None  # None: pass-through of output a
    gain: float  # RMS of the result for unit-RMS, independent outputs

    @property
    def passthrough(self) -> bool:
        return self.b is None

    def __call__(self, outs: Sequence[torch.Tensor],
                 fp8_scale: torch.Tensor | None = None) -> torch.Tensor:
        """The stage input; ``fp8_scale`` (the consumer's static per-tensor scale): with the
        "rows_fp8" kernel, that input quantized to FP8 in the same launch."""
        (ia, ca) = self.a
        if self.b is None:
            return outs[ia]
        (ib, cb) = self.b
        a, b = outs[ia][..., ca:ca + self.k], outs[ib][..., cb:cb + self.k]
        if STANDIN_KERNEL == "rows_fp8" and fp8_scale is not None:
            from .standin import rows_add_fp8

            return rows_add_fp8(a, b, fp8_scale)
        if STANDIN_KERNEL in ("rows", "rows_fp8"):  # rows_fp8 without a consumer: the sum
            from .standin import rows_add  # triton: imported only for this benchmark arm

            return rows_add(a, b)
        if STANDIN_KERNEL != "torch":
            raise ValueError(f"build.STANDIN_KERNEL must be one of {STANDIN_KERNELS}, got "
                             f"{STANDIN_KERNEL!r}")
        return torch.add(a, b)


def plan_mix(widths: Sequence[int], k: int, where: str = "stage") -> _Mix:
    """The stand-in that makes a width-k input from outputs of these widths (module doc)."""
    if len(widths) == 1 and widths[0] == k:
        return _Mix(k, (0, 0), None, 1.0)
    wide = [i for i, w in enumerate(widths) if w >= k]
    if not wide:
        raise ValueError(f"{where}: needs an input of width {k}, but the previous GEMMs' outputs "
                         f"are only {list(widths)} wide; the stand-in data flow cannot feed it")
    ia, ib = wide[0], wide[-1]
    cb = widths[ib] - k
    overlap = max(0, k - cb) / k if ia == ib else 0.0  # a = [0, k), b = [cb, cb + k)
    return _Mix(k, (ia, 0), (ib, cb), math.sqrt(2.0 + 2.0 * overlap))


def _short(name: str) -> str:
    """'layers.3.gdn_in' -> 'gdn_in'; 'layers.3.self_attn.q_proj' -> 'q_proj'."""
    return name.rsplit(".", 1)[-1]


@dataclass
class _Gemm:
    spec: GemmSpec
    module: Fp8Linear | MergedFp8Linear

    @property
    def label(self) -> str:
        return f"{self.spec.kind}." + "+".join(m.proj for m in self.spec.members)

    @property
    def group(self) -> str:
        first = self.spec.members[0]
        if first.merge_group is None:
            return self.label
        return f"{self.spec.kind}.{_short(first.merge_group)}"

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.module(x)
        return y if isinstance(y, tuple) else (y,)


@dataclass
class _Stage:
    input: str
    layer: int
    mix: _Mix
    gemms: list[_Gemm]
    # per_tensor: the static activation scale all its GEMMs share (build_tower draws one a
    # stage), which the "rows_fp8" stand-in quantizes with; None for the other schemes
    act_scale: torch.Tensor | None = None

    @property
    def fp8_input(self) -> bool:
        """Whether the stage's GEMMs read FP8 x: a "rows_fp8" stand-in made it."""
        return STANDIN_KERNEL == "rows_fp8" and not self.mix.passthrough

    def input_from(self, outs: Sequence[torch.Tensor]) -> torch.Tensor:
        if self.fp8_input and self.act_scale is None:
            raise ValueError("the rows_fp8 stand-in quantizes with the next GEMM's static "
                             "per-tensor activation scale: only per_tensor towers have one "
                             "(use rows for the other schemes)")
        return self.mix(outs, self.act_scale)


@dataclass(frozen=True)
class TowerOp:
    """One op call of a decode step: a GEMM, or a stand-in between GEMMs (``kind``)."""

    label: str  # row key, repeated across layers: "gdn.in_proj_qkv", "standin.gdn_core_out"
    group: str  # key on which two arms are compared: "gdn.gdn_in" for merged and unmerged
    name: str  # full name: "layers.0.linear_attn.in_proj_qkv", "layers.0.gdn_in"
    layer: int
    kind: str  # "gemm" | "standin"
    n: int
    k: int
    bytes: int  # N*K FP8 + scales (0 for a stand-in)
    bytes_moved: int  # what one call moves: weights + scales + activations in + output
    backend: str  # chosen by dispatch ("torch" for a stand-in)
    kernel_family: str  # regex of the kernels it launches
    members: tuple[str, ...] = ()


# ----------------------------------------------------------------------------- the tower


@dataclass(repr=False)
class Tower:
    """The FP8 linears of one decode step; see the module doc for the data flow."""

    spec: TowerSpec
    scheme: Scheme
    arm: str
    backend: str
    m: int
    device: torch.device
    dtype: torch.dtype
    parts: tuple[str, ...]
    merge_mode: MergeMode
    seed: int
    stages: list[_Stage]
    final: _Mix
    static_x: torch.Tensor
    static_y: torch.Tensor | None = None
    _graph: object = None
    _graph_steps: int = 0
    _warm: bool = False
    # the STANDIN_KERNEL the warm-up (and so the graph) ran: another one runs other kernels
    # and, with rows_fp8, poses other dispatch keys, which that warm-up did not resolve
    _standin: str | None = None

    def __repr__(self) -> str:
        return (f"Tower({self.spec.name}, arm={self.arm}, scheme={self.scheme.value}, "
                f"backend={self.backend}, m={self.m}, device={self.device}, "
                f"gemms={self.gemm_count()}, fp8_bytes={self.fp8_bytes():,})")

    # ------------------------------------------------------------------ running

    def step(self, x: torch.Tensor) -> torch.Tensor:
        """One decode step: (M, hidden) -> (M, hidden)."""
        outs: Sequence[torch.Tensor] = (x,)
        for stage in self.stages:
            inp = stage.input_from(outs)
            outs = tuple(y for g in stage.gemms for y in g(inp))
        return self.final(outs)

    def op_calls(self, x: torch.Tensor | None = None) -> list[tuple[str, Callable[[], object]]]:
        """(label, callable) per op of :meth:`ops`, in order, bound to the inputs of one
        eager step from ``x`` (default: the static input); calling them repeats that op."""
        x = self.static_x if x is None else x
        calls: list[tuple[str, Callable[[], object]]] = []
        outs: Sequence[torch.Tensor] = (x,)
        for stage in self.stages:
            if not stage.mix.passthrough:
                calls.append((f"standin.{_short(stage.input)}", partial(stage.input_from, outs)))
            inp = stage.input_from(outs)
            new: list[torch.Tensor] = []
            for g in stage.gemms:
                calls.append((g.label, partial(g, inp)))
                new.extend(g(inp))
            outs = tuple(new)
        if not self.final.passthrough:
            calls.append(("standin.hidden", partial(self.final, outs)))
        return calls

    def _gemms(self) -> list[_Gemm]:
        return [g for stage in self.stages for g in stage.gemms]

    def modules(self) -> list[Fp8Linear | MergedFp8Linear]:
        return [g.module for g in self._gemms()]

    def problem(self, g: _Gemm, fp8_input: bool = False) -> GemmProblem:
        """The dispatch key one call of ``g`` poses at this tower's M (as fp8_linear builds it);
        ``fp8_input``: x made FP8 by a "rows_fp8" stand-in (:meth:`gemm_problems` says)."""
        weight = g.module.fp8_weight()
        dtype = FP8_DTYPE if fp8_input else self.dtype
        x = torch.empty(self.m, weight.k, dtype=dtype, device=self.device)
        return GemmProblem.for_call(x, weight, self.dtype)

    def _problems(self) -> list[tuple[_Gemm, GemmProblem]]:
        return [(g, self.problem(g, stage.fp8_input)) for stage in self.stages
                for g in stage.gemms]

    def gemm_problems(self) -> list[GemmProblem]:
        """The dispatch key of every GEMM call of one step, in order (keys repeat)."""
        return [p for _, p in self._problems()]

    def _resolve(self, p: GemmProblem) -> Backend:
        """What serves ``p`` in the tower's CUDA graph (on the CPU: its eager steps)."""
        return dispatch.resolve(p, self.backend, graph=self.device.type == "cuda")[0]

    def unservable(self) -> str | None:
        """Why the requested backend cannot serve some GEMM of the step; None if it can."""
        if self.backend == "auto":
            return None
        b = backends.get(self.backend)
        for g, p in self._problems():
            reason = b.unavailable_reason() or b.check(p)
            if reason is not None:
                return f"backend {b.name} cannot serve {g.spec.name} ({p.key()}): {reason}"
        return None

    def reconfigure(self, *, backend: str | None = None, m: int | None = None) -> None:
        """Change the backend and/or M; drops the captured graph (warm up again)."""
        if backend is not None:
            self.backend = backend
            for mod in self.modules():
                mod.backend = backend
        if m is not None and m != self.m:
            self.m = m
            self.static_x = _step_input(self.spec, m, self.device, self.dtype, self.seed)
        self._graph, self.static_y, self._warm = None, None, False

    def _drop_if_stale(self) -> None:
        """Forget the warm-up and graph made under another stand-in kernel."""
        if self._standin != STANDIN_KERNEL:
            self._graph, self.static_y, self._warm = None, None, False

    def warmup(self, steps: int = 2) -> None:
        """Eager steps: dispatch resolves (and on a GPU tunes, when allowed) every GEMM, Triton
        compiles, split-K scratch is allocated; then every GEMM's dispatch is checked resolved.
        With ``auto``, the step's untuned shapes are tuned together first (dispatch.pretune:
        kernels built in parallel, sibling M buckets seeded), where the policy allows tuning."""
        if self.backend == "auto":
            d = dispatch.default_dispatcher()
            todo = [p for p in self.gemm_problems() if d.may_tune(p)]
            if todo:
                dispatch.pretune(todo, progress=False)
        self.step(self.static_x)  # first on the current stream: tuning happens here
        if self.device.type == "cuda":  # the rest on a side stream, as torch advises
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(steps - 1):
                    self.step(self.static_x)
            torch.cuda.current_stream(self.device).wait_stream(side)
            torch.cuda.synchronize(self.device)
        else:
            for _ in range(steps - 1):
                self.step(self.static_x)
        for p in self.gemm_problems():
            self._resolve(p)
        self._drop_if_stale()  # a graph of another stand-in kernel
        self._warm, self._standin = True, STANDIN_KERNEL

    def capture(self, steps: int = 1, *, early: bool | None = None):
        """A CUDA graph of ``steps`` chained decode steps from ``static_x`` to ``static_y``;
        ``early``: move its PDL kernels' edges to early launch (graph_edges; default: on
        unless FP8TOWER_EARLY_LAUNCH=0)."""
        if self.device.type != "cuda":
            raise RuntimeError(f"CUDA graphs need a CUDA device; this tower is on {self.device} "
                               "(run Tower.step eagerly)")
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        if not self.warm:
            self.warmup()
        self._graph = None
        misses = dispatch.stats().get("capture_misses", 0)
        graph = graph_edges.new_graph()
        with graph_edges.capture(graph, early=early):
            h = self.static_x
            for _ in range(steps):
                h = self.step(h)
        if dispatch.stats().get("capture_misses", 0) != misses:
            raise RuntimeError("a GEMM's dispatch was not resolved before capture (the graph "
                               "holds safe defaults): warm up with the same backend and M")
        self._graph, self._graph_steps, self.static_y = graph, steps, h
        return graph

    def replay(self, n: int = 1) -> None:
        """Replay the captured graph ``n`` times (``n * graph_steps`` decode steps)."""
        self._drop_if_stale()
        if self._graph is None:
            raise RuntimeError("no captured graph (or one of another stand-in kernel): call "
                               "Tower.capture() first")
        for _ in range(n):
            self._graph.replay()

    @property
    def warm(self) -> bool:
        """Warmed up under the current STANDIN_KERNEL (under another: not, graph dropped)."""
        self._drop_if_stale()
        return self._warm

    @property
    def graph_steps(self) -> int:
        return self._graph_steps

    # ------------------------------------------------------------------ the manifest

    def ops(self) -> list[TowerOp]:
        """The per-step op sequence: GEMMs with the backend dispatch chose (resolving it, so
        on a GPU call this after :meth:`warmup`), and the stand-ins between them."""
        out: list[TowerOp] = []
        for stage in self.stages:
            if not stage.mix.passthrough:
                out.append(self._standin_op(stage.input, stage.layer, stage.mix,
                                            stage.fp8_input))
            for g in stage.gemms:
                p = self.problem(g, stage.fp8_input)
                b = self._resolve(p)
                w = g.module.fp8_weight()
                out.append(TowerOp(
                    label=g.label, group=g.group, name=g.spec.name, layer=g.spec.layer,
                    kind="gemm", n=w.n, k=w.k, bytes=w.nbytes(),
                    bytes_moved=p.bytes_moved(), backend=b.name,
                    kernel_family=b.kernel_family,
                    members=tuple(m.name for m in g.spec.members),
                ))
        if not self.final.passthrough:
            out.append(self._standin_op("hidden", self.spec.num_layers - 1, self.final))
        return out

    def _standin_op(self, name: str, layer: int, mix: _Mix, fp8_out: bool = False) -> TowerOp:
        item = torch.empty((), dtype=self.dtype).element_size()
        return TowerOp(
            label=f"standin.{_short(name)}", group=f"standin.{_short(name)}", name=name,
            layer=layer, kind="standin", n=mix.k, k=mix.k, bytes=0,
            bytes_moved=(2 * item + (1 if fp8_out else item)) * self.m * mix.k,
            backend=STANDIN_KERNEL_BACKEND.get(STANDIN_KERNEL, STANDIN_BACKEND),
            kernel_family=STANDIN_REGEX,
        )

    def gemm_count(self) -> int:
        return len(self._gemms())

    def fp8_bytes(self) -> int:
        """FP8 weight bytes per step (N*K summed; scales excluded): spec.fp8_bytes(parts)."""
        return sum(g.module.fp8_weight().data.numel() for g in self._gemms())

    def weight_bytes(self) -> int:
        """FP8 weights + scales per step."""
        return sum(g.module.fp8_weight().nbytes() for g in self._gemms())

    def bytes_per_step(self) -> int:
        """Bytes the GEMMs of one step move at this M (weights, scales, activations, outputs)."""
        return sum(p.bytes_moved() for p in self.gemm_problems())


def _shared_act_scale(gemms: list[_Gemm]) -> torch.Tensor | None:
    """The static per-tensor activation scale of a stage's GEMMs (per_tensor: one a stage, so
    the merged arm merges exactly), None where they have none."""
    scales = [g.module.fp8_weight().act_scale for g in gemms]
    if scales[0] is None:
        return None
    if any(s is None or not torch.equal(s, scales[0]) for s in scales[1:]):
        raise RuntimeError("a stage's GEMMs must share one static activation scale")
    return scales[0].float().reshape(1)


def _step_input(spec: TowerSpec, m: int, device, dtype, seed: int) -> torch.Tensor:
    gen = _generator(device, seed, -1)
    return torch.randn(m, spec.hidden_size, generator=gen, device=device,
                       dtype=torch.float32).to(dtype)


def _stages(gemms: list[GemmSpec]) -> list[list[GemmSpec]]:
    """Consecutive GEMMs reading the same input."""
    out: list[list[GemmSpec]] = []
    for g in gemms:
        if out and out[-1][0].input == g.input:
            out[-1].append(g)
        else:
            out.append([g])
    return out


def build_tower(
    spec: TowerSpec | str,
    *,
    scheme: Scheme | str = Scheme.PER_TENSOR,
    arm: str = "unmerged",
    backend: str = "auto",
    m: int = 1,
    device: torch.device | str | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.bfloat16,
    parts: Sequence[str] | str = DEFAULT_PARTS,
    merge_mode: MergeMode | str = MergeMode.EXACT,
) -> Tower:
    """A tower of random FP8 weights of ``spec``'s shapes (a TowerSpec or a model name)."""
    spec = get_spec(spec) if isinstance(spec, str) else spec
    scheme = Scheme.parse(scheme)
    merge_mode = MergeMode.parse(merge_mode)
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}: expected one of {', '.join(ARMS)}")
    backends.check_name(backend)  # unknown names fail here, listing auto and the registered ones
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    parts = (parts,) if isinstance(parts, str) else tuple(parts)
    linears = spec.linears(parts, fp8_only=True)
    if not linears:
        raise ValueError(f"{spec.name}: no FP8 linears in parts {parts}")
    index = {lin.name: i for i, lin in enumerate(linears)}
    gemms = spec.gemms(parts, merged=arm == "merged", fp8_only=True)

    stages: list[_Stage] = []
    widths = [spec.hidden_size]
    for group in _stages(gemms):
        first = group[0]
        mix = plan_mix(widths, first.k, first.input)
        std = 1.0 / (math.sqrt(first.k) * mix.gain)  # unit-RMS outputs
        act = ACT_SIGMAS * mix.gain / FP8_MAX if scheme is Scheme.PER_TENSOR else None
        built = []
        for g in group:
            weights = [random_fp8_weight(lin.n, lin.k, scheme, std=std, act_scale=act,
                                         seed=seed, slot=index[lin.name], device=device)
                       for lin in g.members]
            # No bias, even where the spec's linear has one (LinearSpec.bias: Qwen2's q/k/v,
            # attention_bias / mlp_bias): such a GEMM poses the bias-free key here, the -bias
            # one in the model (`tune --model` tunes the model's; `--in-context` refuses it)
            if g.merged:
                module = MergedFp8Linear.from_weights(weights, [lin.name for lin in g.members],
                                                      merge_mode, backend=backend)
            else:
                module = Fp8Linear.from_weight(weights[0], backend=backend)
            built.append(_Gemm(g, module))
        stages.append(_Stage(first.input, first.layer, mix, built, _shared_act_scale(built)))
        widths = [lin.n for g in group for lin in g.members]
    final = plan_mix(widths, spec.hidden_size, "the step output")
    return Tower(spec, scheme, arm, backend, m, device, dtype, parts, merge_mode, seed, stages,
                 final, _step_input(spec, m, device, dtype, seed))
