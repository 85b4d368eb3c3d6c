"""The format-independent part of a checkpoint: which linears are quantized, their scales'
validation, and loading them as ``Fp8Weight``.

A format module (modelopt, compressed_tensors, block_fp8, unquantized) subclasses
``Checkpoint`` and says three things: how a module name matches its ignore list, which scheme a
stored FP8 linear has, and the names of its scale tensors. Everything checkable from the
headers (presence, dtype, shape of every weight and scale; no other tensor under a linear's
name but KV-cache scales) is checked at open; scale *values* (finite, positive) when a linear is
loaded, so that opening reads no tensor data.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from ..formats import BLOCK, Fp8Weight, ScaleError, Scheme

# each format's ignore-list rule, shared with fp8tower.models (a spec and its loader agree on
# what is FP8): re-exported for the format modules
from ..quant_rules import match_exact_or_regex, match_hf_not_convert, match_modelopt  # noqa: F401
from .reader import FLOAT_DTYPES, CheckpointError, CheckpointReader, TensorInfo

FP8_STORED = "F8_E4M3"
# FP8 KV-cache / attention scales stored under a projection or the attention module: ModelOpt
# writes k_proj.k_scale and v_proj.v_scale, compressed-tensors {q,k,v}_proj.output_scale and
# self_attn.prob_output_scale (vLLM moves both onto its attention layer: get_cache_scale,
# maybe_remap_kv_scale_name). They do not enter a linear's math; fp8tower quantizes no cache.
KV_SCALES = ("k_scale", "v_scale", "q_scale", "prob_scale", "prob_output_scale")
KV_OUTPUT_SCALE_OF = ("q_proj", "k_proj", "v_proj")
# transformers 5 fuses a MoE block's experts into 3-D parameters (not nn.Linear); checkpoints
# store them per expert: <block>.experts.<i>.<proj>
MOE_EXPERT = re.compile(r"(^|\.)experts\.\d+\.")


@dataclass
class LoadedLinear:
    weight: Fp8Weight
    bias: torch.Tensor | None = None


@dataclass(frozen=True)
class LinearSpec:
    """Where a quantized linear's tensors are and how to read them."""

    fqn: str
    scheme: Scheme
    n: int
    k: int
    scale: str | None  # weight scale tensor name (None: quantized at load from a bf16 weight)
    input_scale: str | None = None  # static per_tensor activation scale


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def module_of(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


def is_kv_scale(name: str) -> bool:
    """A KV-cache / attention scale tensor (see KV_SCALES), which fp8tower does not read."""
    module, _, attr = name.rpartition(".")
    return attr in KV_SCALES or (attr == "output_scale"
                                 and module.rpartition(".")[2] in KV_OUTPUT_SCALE_OF)


class Checkpoint:
    """A checkpoint directory opened for lazy, module-by-module loading (see the package doc)."""

    format: str = ""
    scale_suffix = "weight_scale"  # block_fp8 stores "weight_scale_inv"
    config_field = "quantization_config"  # where the format's fields sit, for errors

    def __init__(self, reader: CheckpointReader, qconfig: dict, qconfig_file: Path):
        self._reader = reader
        self.path: Path = reader.path
        self.config: dict = reader.config
        self.quant_config: dict = qconfig
        self.quant_config_file: Path = qconfig_file
        self._linears: dict[str, LinearSpec] = {}

    # --- what a format provides -----------------------------------------------------------

    def is_ignored(self, fqn: str) -> bool:
        """Listed in the format's ignore/exclude list (the module stays bf16)."""
        raise NotImplementedError

    def _scheme_of_stored(self, fqn: str) -> Scheme:
        """The scheme of a linear stored in FP8 (raise CheckpointError if the config says none)."""
        raise NotImplementedError

    def _has_static_input_scale(self, fqn: str) -> bool:
        return False

    # --- discovery and header checks --------------------------------------------------------

    def _err(self, info_or_where, msg: str) -> CheckpointError:
        where = info_or_where.where() if isinstance(info_or_where, TensorInfo) else info_or_where
        return CheckpointError(f"{where}: {msg}")

    def _field_err(self, field: str, expected: str, got) -> CheckpointError:
        return CheckpointError(f"{self.quant_config_file}: {self.config_field}.{field}: "
                               f"expected {expected}, got {got!r}")

    def _string_list(self, field: str, value, items: str = "module names",
                     item: str = "a module name") -> list[str]:
        """A config list of names or patterns (None: empty); anything else is an error naming
        the field (and the entry)."""
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._field_err(field, f"a list of {items}", value)
        for i, e in enumerate(value):
            if not isinstance(e, str):
                raise self._field_err(f"{field}[{i}]", f"{item} (a string)", e)
        return list(value)

    def _discover_fp8(self) -> None:
        """Every module with an FP8 weight (any F8_ dtype) or a weight scale is a quantized
        linear: check it. Stored input scales the config leaves unused get one warning."""
        tensors = self._reader.tensors
        suffix = "." + self.scale_suffix
        fqns = {module_of(n) for n, t in tensors.items()
                if n.endswith(".weight") and t.dtype.startswith("F8_")}
        fqns |= {n[: -len(suffix)] for n in tensors if n.endswith(suffix)}
        for fqn in sorted(fqns):
            self._linears[fqn] = self._check_stored_linear(fqn)
        unused = [f"{f}.input_scale" for f, spec in sorted(self._linears.items())
                  if spec.input_scale is None and f"{f}.input_scale" in tensors]
        if unused:
            warnings.warn(f"fp8tower: {self.path}: {len(unused)} stored input_scale tensor(s) "
                          f"are not used (e.g. {unused[0]!r}): by {self.quant_config_file.name} "
                          "activations are quantized dynamically (or not at all)", stacklevel=4)
        self._check_linear_tensors(self._linears)

    def linear_tensor_attrs(self) -> set[str]:
        """The names a quantized linear's own tensors have (``<fqn>.<attr>``): all its math
        reads. Others under its name are KV-cache scales (copied through by write_merged) or
        refused at open."""
        return {"weight", "bias", "input_scale", self.scale_suffix}

    def _check_linear_tensors(self, linears) -> None:
        """Refuse a tensor under a quantized linear's name that fp8tower would not read but
        that changes its output (an AWQ/SmoothQuant ``pre_quant_scale``, an asymmetric zero
        point, ...); warn once about KV-cache scales, which it does not use."""
        own, kv = self.linear_tensor_attrs(), []
        for name, info in self._reader.tensors.items():
            if is_kv_scale(name):
                kv.append(name)
                continue
            owner = _owner(name, linears)
            if owner is not None and name[len(owner) + 1:] not in own:
                raise self._err(info, f"quantized linear {owner!r} has a tensor fp8tower does "
                                      f"not read, {name[len(owner) + 1:]!r}, which would change "
                                      f"its output; expected only {', '.join(sorted(own))} "
                                      "(and KV-cache scales)")
        if kv:
            warnings.warn(f"fp8tower: {self.path}: {len(kv)} KV-cache scale tensor(s) are not "
                          f"used (e.g. {min(kv)!r}): fp8tower quantizes no KV cache; "
                          "write_merged copies them through", stacklevel=5)

    def _check_stored_linear(self, fqn: str) -> LinearSpec:
        r = self._reader
        wname, sname = f"{fqn}.weight", f"{fqn}.{self.scale_suffix}"
        if not r.has(wname):
            raise self._err(r.info(sname), f"scale without a weight: {wname!r} is missing")
        w = r.info(wname)
        if w.dtype != FP8_STORED:
            why = (f"its module has {self.scale_suffix!r}" if r.has(sname)
                   else f"and its scale {sname!r} is missing")
            raise self._err(w, f"FP8 weight must have dtype {FP8_STORED} (torch.float8_e4m3fn), "
                               f"got {w.dtype} ({why})")
        if len(w.shape) != 2:
            raise self._err(w, f"FP8 weight must be 2-D [N, K], got shape {list(w.shape)}")
        if self.is_ignored(fqn):
            raise self._err(w, f"module {fqn!r} is in the ignore list of "
                               f"{self.quant_config_file.name} but is stored in FP8")
        scheme = self._scheme_of_stored(fqn)
        n, k = w.shape
        if not r.has(sname):
            shapes = " or ".join(str(list(s)) for s in self._stored_scale_shapes(fqn, scheme, n, k))
            # the other convention's name beside it (weight_scale is a multiplier, as
            # ModelOpt and compressed-tensors store it; weight_scale_inv, block FP8's name)
            other = (sname[:-len("_inv")] if sname.endswith("_inv") else sname + "_inv")
            hint = (f"; the checkpoint has {other!r} instead, the name "
                    + ("block FP8 (Qwen / DeepSeek) checkpoints" if other.endswith("_inv")
                       else "ModelOpt and compressed-tensors")
                    + " give it: config.json's quantization_config does not match how these "
                    "tensors were saved" if r.has(other) else "")
            if not hint and r.has(f"{fqn}.scale"):  # DeepSeek's own names (V3's inference
                # code, V4's release): transformers' FP8 loader renames .scale on load
                hint = (f"; the checkpoint has {fqn + '.scale'!r} instead, DeepSeek's own "
                        "naming, which fp8tower does not read: it reads the Hugging Face names "
                        f"({self.scale_suffix!r})")
            raise self._err(w, f"missing scale: expected tensor {sname!r} ({scheme} scale of "
                               f"shape {shapes}){hint}")
        self._check_scale_meta(r.info(sname), self._stored_scale_shapes(fqn, scheme, n, k))
        input_scale = None
        if self._has_static_input_scale(fqn):
            input_scale = f"{fqn}.input_scale"
            if not r.has(input_scale):
                raise self._err(w, f"missing scale: static per_tensor activations need tensor "
                                   f"{input_scale!r} (one float)")
            self._check_scale_meta(r.info(input_scale), [(), (1,)])
        return LinearSpec(fqn, scheme, n, k, sname, input_scale)

    def _stored_scale_shapes(self, fqn: str, scheme: Scheme, n: int, k: int):
        """The weight scale shapes the format stores for this module (default: the scheme's)."""
        return self._scale_shapes(scheme, n, k)

    def _scale_shapes(self, scheme: Scheme, n: int, k: int) -> list[tuple[int, ...]]:
        if scheme is Scheme.PER_TENSOR:
            return [(), (1,)]
        if scheme in (Scheme.CHANNEL_TOKEN, Scheme.WEIGHT_ONLY):
            return [(n,), (n, 1)]
        return [(ceil_div(n, BLOCK), ceil_div(k, BLOCK))]

    def _check_scale_meta(self, info: TensorInfo, shapes: list[tuple[int, ...]]) -> None:
        if info.dtype not in FLOAT_DTYPES:
            raise self._err(info, f"scale must have dtype F32, BF16 or F16, got {info.dtype}")
        if tuple(info.shape) not in shapes:
            want = " or ".join(str(list(s)) for s in shapes)
            raise self._err(info, f"scale must have shape {want}, got {list(info.shape)}")

    def _load_scale(self, name: str, device) -> torch.Tensor:
        t = self._reader.load(name).float()
        bad = ~torch.isfinite(t) | (t <= 0)
        if bool(bad.any()):
            idx = tuple(int(i) for i in bad.nonzero()[0].tolist()) if t.dim() else ()
            raise self._err(self._reader.info(name),
                            f"scale must be finite and positive; {int(bad.sum())} value(s) are "
                            f"not, the first is {t[idx].item()} at index {idx}")
        return t.to(device) if device is not None else t

    # --- the public API ----------------------------------------------------------------------

    def tensor_names(self) -> list[str]:
        return sorted(self._reader.tensors)

    def linear_names(self) -> list[str]:
        """The fully qualified name of every quantized linear (the prefix before ".weight")."""
        return sorted(self._linears)

    def scheme_for(self, fqn: str) -> Scheme | None:
        """The module's scheme; None when it is not quantized (ignored, or not a linear)."""
        spec = self._linears.get(fqn)
        return None if spec is None else spec.scheme

    def kept_unless_asked(self, fqn: str) -> bool:
        """A linear the format keeps in high precision by default but quantizes at load when a
        filter asks for it (an unquantized checkpoint's lm_head); not in ``linear_names``."""
        return False

    def linear_spec(self, fqn: str) -> LinearSpec:
        """Shape, scheme and scale tensor names of a quantized linear (from the headers)."""
        return self._spec(fqn)

    def _spec(self, fqn: str) -> LinearSpec:
        spec = self._linears.get(fqn)
        if spec is None:
            why = ("it is in the ignore list" if self.is_ignored(fqn)
                   else "no such quantized linear")
            raise CheckpointError(f"{self.path}: cannot load {fqn!r} as an FP8 linear: {why} "
                                  "(load_tensor reads it as stored)")
        return spec

    def load_linear(self, fqn: str, device=None) -> LoadedLinear:
        """The module's Fp8Weight (and bias, as stored), read now, tensor by tensor."""
        spec = self._spec(fqn)
        data = self._reader.load(f"{fqn}.weight", device=device)
        scale = self._load_scale(spec.scale, device)
        if spec.scheme is Scheme.PER_TENSOR:
            scale = scale.reshape(())
        elif spec.scheme is not Scheme.BLOCK128:
            scale = scale.reshape(-1).expand(spec.n).contiguous()
        act = None
        if spec.input_scale is not None:
            act = self._load_scale(spec.input_scale, device).reshape(())
        return LoadedLinear(self._fp8_weight(spec, f"{fqn}.weight", data, scale, act),
                            self._bias(fqn, device))

    def _fp8_weight(self, spec: LinearSpec, weight_name: str, data, scale, act) -> Fp8Weight:
        """Fp8Weight's own checks (e.g. a static input scale out of fp32's normal range) as a
        CheckpointError naming the stored tensor, not a bare ValueError."""
        # E4M3FN's NaN codes (S.1111.111): a corrupt weight would give NaN outputs far from
        # their cause (one pass over the codes, where they were loaded)
        nan = (data.view(torch.uint8) & 0x7F) == 0x7F
        if bool(nan.any()):
            first = tuple(int(i) for i in nan.nonzero()[0].tolist())
            raise self._err(self._reader.info(weight_name),
                            f"{int(nan.sum())} FP8 code(s) are NaN (0x7F / 0xFF), the first "
                            f"at index {first}")
        try:
            return Fp8Weight(data, scale, spec.scheme, act)
        except ValueError as e:  # a ScaleError names the Fp8Weight field: blame its tensor
            field = e.field if isinstance(e, ScaleError) else None
            blame = {"scale": spec.scale, "act_scale": spec.input_scale}.get(field) or weight_name
            raise self._err(self._reader.info(blame), str(e)) from None

    def _bias(self, fqn: str, device) -> torch.Tensor | None:
        name = f"{fqn}.bias"
        return self._reader.load(name, device=device) if self._reader.has(name) else None

    def load_tensor(self, name: str, device=None, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Any tensor as stored (embeddings, norms, ignored linears, ...), read now."""
        return self._reader.load(name, device=device, dtype=dtype)

    def tensors_not_read(self) -> list[str]:
        """The stored tensors no load has read so far (stored names), less those the open
        warned about already: KV-cache scales and input scales the config leaves unused."""
        return sorted(n for n in set(self._reader.tensors) - self._reader.read
                      if not is_kv_scale(n) and not (n.endswith(".input_scale")
                                                     and module_of(n) in self._linears))

    def nbytes(self) -> int:
        """Bytes of all tensors, as stored."""
        return self._reader.nbytes()

    def moe_expert_linears(self) -> list[str]:
        """The quantized linears of MoE experts (``<block>.experts.<i>.<proj>``): loadable one
        by one, but fp8tower converts no MoE experts (see MOE_EXPERT)."""
        return sorted(f for f in self._linears if MOE_EXPERT.search(f))

    def moe_experts_note(self) -> str:
        """'' or a clause for an error message: the MoE expert linears fp8tower leaves out."""
        experts = self.moe_expert_linears()
        if not experts:
            return ""
        return (f"; the checkpoint stores {len(experts)} MoE expert linear(s) (e.g. "
                f"{experts[0]!r}), which fp8tower does not convert: from_pretrained fills "
                "transformers' fused 3-D expert parameters from them, dequantized, where every "
                "expert's gate_proj / up_proj / down_proj is stored (docs/models.md, Known "
                "limits)")

    def describe(self) -> dict:
        """What the checkpoint holds (for `fp8tower convert` reports). MoE expert linears are
        listed apart, under "moe_experts_not_converted", not among the quantized linears."""
        experts = set(self.moe_expert_linears())
        schemes = {f: str(s.scheme) for f, s in sorted(self._linears.items())
                   if f not in experts}
        counts: dict[str, int] = {}
        for s in schemes.values():
            counts[s] = counts.get(s, 0) + 1
        weights = sorted(module_of(n) for n, t in self._reader.tensors.items()
                         if n.endswith(".weight") and len(t.shape) == 2)
        ignored = [f for f in weights if f not in self._linears and self.is_ignored(f)]
        return {
            "path": str(self.path),
            "format": self.format,
            "quant_config_file": str(self.quant_config_file),
            "model_type": self.config.get("model_type"),
            "schemes": schemes,
            "scheme_counts": counts,
            "static_act_scale": sorted(f for f in schemes if self._linears[f].input_scale),
            "moe_experts_not_converted": {f: str(self._linears[f].scheme) for f in sorted(experts)},
            "ignored": ignored,
            "not_quantized": [f for f in weights if f not in self._linears],
            "n_tensors": len(self._reader.tensors),
            "bytes": self.nbytes(),
            "bytes_by_dtype": self._bytes_by_dtype(),
        }

    def _bytes_by_dtype(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self._reader.tensors.values():
            out[t.dtype] = out.get(t.dtype, 0) + t.nbytes
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def close(self) -> None:
        self._reader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({str(self.path)!r}, format={self.format!r}, "
                f"{len(self._linears)} quantized linears)")


def _owner(name: str, modules) -> str | None:
    """The longest module name in ``modules`` that ``name`` lies under (at a dot), if any."""
    pos = len(name)
    while (pos := name.rfind(".", 0, pos)) > 0:
        if name[:pos] in modules:
            return name[:pos]
    return None
