"""Tower spec data types: which linears a decode step runs, their shapes and merge groups.

Names. ``LinearSpec.name`` is the module path below the decoder stack, e.g.
``layers.3.linear_attn.in_proj_qkv``. A checkpoint calls the same module
``model.layers.3.linear_attn.in_proj_qkv`` (text-only configs) or
``model.language_model.layers.3.linear_attn.in_proj_qkv`` (Qwen3.5's multimodal configs, whose
text fields sit under ``text_config``); ``TowerSpec.module_name`` gives the one for this
config, and quantization configs are matched against both spellings (see ``quant.py``).

Activations. ``LinearSpec.input`` names the tensor a linear reads, per layer:
``hidden_norm`` (input_layernorm output: GDN in_proj_*, attention q/k/v), ``gdn_core_out``
(gated-RMSNorm output of the delta rule: GDN out_proj), ``attn_core_out`` (gated attention
output: o_proj), ``post_attn_norm`` (post_attention_layernorm output: MLP gate/up),
``mlp_act`` (silu(gate) * up: MLP down); DeepSeek's MLA adds ``q_a_norm`` (q_a_layernorm
output: q_b_proj) and its shared experts ``shared_act``. Siblings that read the same input share a
``merge_group`` and may run as one GEMM with their N stacked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

KINDS = ("gdn", "attention", "mlp", "other")  # "other": reserved (lm_head etc., not modelled)
DEFAULT_PARTS = ("gdn", "attention")
ALL_PARTS = ("gdn", "attention", "mlp")

Parts = Iterable[str] | str


class ConfigError(ValueError):
    """A config field is missing, malformed or contradicts another one.

    ``field`` names the offending field (dotted for nested ones), ``value`` is what was found
    (``None`` when missing) and ``expected`` says what would have been accepted.
    """

    def __init__(self, field: str, value: object, expected: str, *, context: str = ""):
        self.field, self.value, self.expected = field, value, expected
        got = "missing" if value is None else f"got {value!r}"
        prefix = f"{context}: " if context else ""
        super().__init__(f"{prefix}{field}: {got}; expected {expected}")


@dataclass(frozen=True)
class LinearSpec:
    """One linear layer of the decode step: y[M, n] = x[M, k] @ W[n, k]^T."""

    name: str  # e.g. "layers.3.linear_attn.in_proj_qkv"
    n: int  # out features
    k: int  # in features
    layer: int
    kind: str  # gdn / attention / mlp / other
    proj: str  # in_proj_qkv, in_proj_z, out_proj, q_proj, ..., down_proj
    merge_group: str | None  # e.g. "layers.3.gdn_in"; None: no sibling to merge with
    input: str  # e.g. "layers.3.hidden_norm"
    fp8: bool  # whether the checkpoint's quantization config (or the default) makes it FP8
    bias: bool = False  # the HF module has a bias (attention_bias, mlp_bias, Qwen2's q/k/v)

    @property
    def weight_bytes_fp8(self) -> int:
        return self.n * self.k


@dataclass(frozen=True)
class GemmSpec:
    """One GEMM of a step: a single linear, or a merge group's members with N stacked."""

    name: str  # the linear's name, or the merge group's
    n: int
    k: int
    layer: int
    kind: str
    input: str
    members: tuple[LinearSpec, ...]

    @property
    def merged(self) -> bool:
        return len(self.members) > 1

    @property
    def fp8(self) -> bool:
        return all(m.fp8 for m in self.members)

    @property
    def bias(self) -> bool:
        """The call adds a bias (a merged group's: its members' concatenated)."""
        return any(m.bias for m in self.members)


def _check_parts(parts: Parts) -> tuple[str, ...]:
    parts = (parts,) if isinstance(parts, str) else tuple(parts)
    if parts == ("all",):
        return ALL_PARTS
    bad = [p for p in parts if p not in ALL_PARTS]  # "other" is a kind no tower models
    if bad or not parts:
        got = ",".join(parts) if all(isinstance(p, str) for p in parts) else repr(parts)
        raise ValueError(f"parts: got {got!r}; expected one or more of "
                         f"{', '.join(ALL_PARTS)} (comma-separated), or 'all'")
    return parts


@dataclass(frozen=True)
class TowerSpec:
    """The linear layers of one decode step of a model, in execution order.

    ``all_linears`` holds every modelled linear, FP8 or not, per layer: token-mixer
    projections, then the MLP's. The helpers filter by ``parts`` (the ``kind`` values to
    include, or 'all'; default GDN + attention, the report's "FP8 tower") and, where they say
    so, by ``fp8``. ``notes`` lists what the spec leaves out or assumed.
    """

    name: str
    model_type: str
    hidden_size: int
    num_layers: int
    layer_types: tuple[str, ...]  # per layer: "linear_attention" / "full_attention" (V4: its own)
    all_linears: tuple[LinearSpec, ...]
    module_prefix: str = "model."  # prepended to LinearSpec.name: the checkpoint's name
    intermediate_size: int | None = None  # dense MLP width; None when the MLP is out of scope
    # False where every MLP is a mixture of experts without a shared expert (Mixtral): the
    # routed experts are not modelled
    mlp_in_scope: bool = True
    quant_method: str | None = None  # quantization_config's method; None: default policy
    scheme_hint: str | None = None  # per_tensor / channel_token / block128 / None
    # per_tensor: static activation scale (None: not said), (N,) weight scales (QuantPolicy)
    static_act_hint: bool | None = None
    channel_scale_hint: bool = False
    notes: tuple[str, ...] = field(default=())
    # tensor-parallel size: > 1, all_linears are one rank's shards (models/tp.py); the other
    # fields (hidden_size, intermediate_size) stay the model's
    tp: int = 1
    # the config values a split must divide, as (field, value): those models/tp.py checks
    tp_fields: tuple[tuple[str, object], ...] = ()

    def module_name(self, linear: LinearSpec) -> str:
        return self.module_prefix + linear.name

    def _parts(self, parts: Parts) -> tuple[str, ...]:
        parts = _check_parts(parts)
        if "mlp" in parts and not self.mlp_in_scope:
            raise ValueError(
                f"{self.name} ({self.model_type}): MLP parts requested, but its MLPs are all "
                "mixtures of experts without a shared expert, and routed experts are not "
                "modelled; request parts=('gdn', 'attention')"
            )
        return parts

    def linears(self, parts: Parts = DEFAULT_PARTS, *, fp8_only: bool = False) -> list[LinearSpec]:
        """The linears of ``parts`` in execution order; only the FP8 ones if ``fp8_only``."""
        parts = self._parts(parts)
        return [
            lin for lin in self.all_linears if lin.kind in parts and (lin.fp8 or not fp8_only)
        ]

    def fp8_bytes(self, parts: Parts = DEFAULT_PARTS) -> int:
        """FP8 weight bytes read per step: sum of N*K over the FP8 linears (scales excluded)."""
        return sum(lin.weight_bytes_fp8 for lin in self.linears(parts, fp8_only=True))

    def merge_groups(
        self, parts: Parts = DEFAULT_PARTS, *, fp8_only: bool = True
    ) -> dict[str, list[LinearSpec]]:
        """Group name -> members in execution order. A group merges only when its members are
        all FP8 (with ``fp8_only=False`` also: all not FP8): one an ignore list covers in part
        stays unmerged, its FP8 members run as their own GEMMs, as convert and the loaders keep
        it (docs/models.md, "What stays as it is")."""
        groups: dict[str, list[LinearSpec]] = {}
        for lin in self.linears(parts):
            if lin.merge_group is not None:
                groups.setdefault(lin.merge_group, []).append(lin)
        return {g: members for g, members in groups.items()
                if len(members) > 1 and len({m.fp8 for m in members}) == 1
                and (members[0].fp8 or not fp8_only)}

    def gemms(
        self, parts: Parts = DEFAULT_PARTS, *, merged: bool = False, fp8_only: bool = True
    ) -> list[GemmSpec]:
        """The step's GEMMs in execution order; a merged group runs where its first member did."""
        groups = self.merge_groups(parts, fp8_only=fp8_only) if merged else {}
        out: list[GemmSpec] = []
        for lin in self.linears(parts, fp8_only=fp8_only):
            members = groups.get(lin.merge_group) if lin.merge_group else None
            if members is None:
                out.append(GemmSpec(lin.name, lin.n, lin.k, lin.layer, lin.kind, lin.input, (lin,)))
            elif lin is members[0]:
                n = sum(m.n for m in members)
                out.append(GemmSpec(lin.merge_group, n, lin.k, lin.layer, lin.kind, lin.input,
                                    tuple(members)))
        return out

    def shapes(
        self, parts: Parts = DEFAULT_PARTS, *, merged: bool = False, fp8_only: bool = True
    ) -> dict[tuple[int, int], int]:
        """Distinct (N, K) -> GEMMs per step with that shape, in first-seen order."""
        return dict(Counter((g.n, g.k) for g in self.gemms(parts, merged=merged,
                                                             fp8_only=fp8_only)))

    def summary(self, parts: Parts = DEFAULT_PARTS) -> str:
        """A few human-readable lines (for the CLI and logs)."""
        types = self.layer_types
        counts = Counter(types)
        classic = ("linear_attention", "full_attention")  # both named, even at 0
        kinds = ", ".join(f"{counts[t]} {t}" for t in (
            classic if set(counts) <= set(classic) else counts))
        head = (f"{self.name} ({self.model_type}): hidden {self.hidden_size}, {self.num_layers}"
                f" layers ({kinds})")
        if self.tp > 1:
            head += f", one rank of tp {self.tp}"
        tower = (f"parts {'+'.join(self._parts(parts))}: {len(self.gemms(parts))} FP8 GEMMs/step"
                 f" ({len(self.gemms(parts, merged=True))} merged),"
                 f" {self.fp8_bytes(parts):,} B/step, scheme_hint {self.scheme_hint}")
        how = ([{True: "static", False: "dynamic"}[self.static_act_hint] + " activation scale"]
               if self.static_act_hint is not None else [])
        how += ["(N,) weight scales"] if self.channel_scale_hint else []
        if how:
            tower += f" ({', '.join(how)})"
        lines = [head, tower]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)
