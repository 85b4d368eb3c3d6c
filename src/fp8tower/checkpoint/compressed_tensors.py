"""compressed-tensors checkpoints, ``format: "float-quantized"`` or ``"naive-quantized"``
(llm-compressor's FP8 presets).

The config (config.json ``quantization_config``, ``quant_method: "compressed-tensors"``) is
parsed here from the JSON (the ``compressed-tensors`` package is not needed). Each entry of
``config_groups`` has ``targets`` (module names, ``re:`` regexes, or a class name such as
"Linear"), ``weights`` and ``input_activations`` (``strategy``, ``dynamic``, ``num_bits``,
``type``). The combinations read, and the scheme each maps onto:

==================  ===========================  ==========================  ==============
preset              weights (weight_scale)       input_activations           scheme
==================  ===========================  ==========================  ==============
FP8                 tensor, (1,)                 tensor, static (input_scale  per_tensor
                                                 (1,))                        (static act)
(dynamic tensor)    tensor, (1,)                 tensor, dynamic              per_tensor
FP8_DYNAMIC         channel, (N, 1)              token, dynamic               channel_token
FP8_BLOCK           block [128, 128],            group 128, dynamic           block128
                    (ceil(N/128), ceil(K/128))
(weight-only)       channel (N, 1) or tensor     none                         weight_only
(mixed)             channel, (N, 1)              tensor, static or dynamic    per_tensor,
                                                                              (N,) w. scale
(mixed)             tensor, (1,)                 token, dynamic               channel_token,
                                                                              scale to (N,)
==================  ===========================  ==========================  ==============

The two mixed rows are what vLLM's ``_is_fp8_w8a8`` accepts beside the presets; each is one of
fp8tower's schemes exactly: per_tensor takes a per-channel (N,) weight scale (as after a
merge), and a tensor scale expanded to (N,) is the same product. Other combinations are
refused, naming why (block weights need 1x128 activation groups; per-channel weight scales
vary within a 128-row block, so they cannot pair with activation groups).

``format``: ``float-quantized``, or ``naive-quantized``, which compressed-tensors 0.20's
``infer_module_format`` writes for FP8 weight-only schemes (and older llm-compressor for W8A8
with several weight schemes): its compressor is the same (``FloatQuantizationCompressor`` is
an alias subclass of ``NaiveQuantizationCompressor``: the weight cast to the type the scheme
says), so with type float, 8 bits the tensors are laid out alike; vLLM reads both.

``weight_scale`` may be bf16, fp16 or fp32 (llm-compressor writes the model's dtype); we load
it as fp32. ``ignore`` entries match a module name exactly or, as ``re:<regex>``, with
``re.match`` (vLLM's compressed_tensors utils read them that way).

A module that several groups target takes one group as compressed-tensors applies a config
(quant_rules.ct_match): its exact name, else the alphabetically first ``re:`` regex, else the
class ``Linear``. vLLM takes the first matching target in config order instead: where two
groups' regexes tie for a stored FP8 module, or vLLM's pick differs, one warning per pair of
groups names the module and both groups.
"""

from __future__ import annotations

import re
import warnings

from ..formats import Scheme
from ..quant_rules import ct_match
from .base import Checkpoint, LoadedLinear, match_exact_or_regex
from .reader import CheckpointError, CheckpointReader

FORMAT = "float-quantized"
# compressed-tensors' fallback compressor, the same layout (the weight cast to the scheme's
# type): FP8 when the weights are type float, 8 bits
NAIVE_FORMAT = "naive-quantized"


class _Group:
    def __init__(self, name: str, targets: list[str], scheme: Scheme, weight_strategy: str,
                 static_input: bool):
        self.name, self.targets, self.scheme = name, targets, scheme
        self.weight_strategy, self.static_input = weight_strategy, static_input


class CompressedTensorsCheckpoint(Checkpoint):
    format = "compressed_tensors"

    def __init__(self, reader: CheckpointReader, qconfig: dict):
        super().__init__(reader, qconfig, reader.path / "config.json")
        self.ignore: list[str] = self._patterns("ignore", qconfig.get("ignore"))
        groups = qconfig.get("config_groups")
        if not isinstance(groups, dict) or not groups:
            raise self._field_err("config_groups", "a non-empty object of quantization groups",
                                  groups)
        sparsity = qconfig.get("sparsity_config") or {}
        if not isinstance(sparsity, dict) or sparsity.get("format", "dense") != "dense":
            raise self._field_err("sparsity_config.format", "'dense' (or no sparsity_config): "
                                  "fp8tower reads no compressed sparse weights",
                                  sparsity)
        for key in ("transform_config", "transforms_config"):
            # llm-compressor's QuIP / SpinQuant write online Hadamard transforms here (of x and
            # of the output at run time): the weights alone would give wrong outputs
            if qconfig.get(key):
                t = qconfig[key]
                got = f"an object with {sorted(t)}" if isinstance(t, dict) else t
                raise self._field_err(key, "null or absent: fp8tower applies no online "
                                      "transforms (QuIP / SpinQuant Hadamard rotations)", got)
        top_format = qconfig.get("format")
        self.groups = [self._parse_group(name, g, top_format) for name, g in groups.items()]
        self._discover_fp8()
        self._warn_overlaps()

    def _patterns(self, field: str, entries) -> list[str]:
        """A list of module names / ``re:`` regexes, each regex compiled once to check it."""
        entries = self._string_list(field, entries, "module names / 're:' regexes",
                                    "a module name or 're:' regex")
        for i, e in enumerate(entries):
            if e.startswith("re:"):
                try:
                    re.compile(e[3:])
                except re.error as err:
                    raise self._field_err(f"{field}[{i}]", f"a valid regex after 're:' ({err})",
                                          e) from None
        return entries

    def _parse_group(self, name: str, g: dict, top_format) -> _Group:
        where = f"config_groups.{name}"
        if not isinstance(g, dict):
            raise self._field_err(where, "an object", g)
        fmt = g.get("format") or top_format
        if fmt not in (FORMAT, NAIVE_FORMAT):
            raise self._field_err(f"{where}.format", f"{FORMAT!r} or {NAIVE_FORMAT!r} with "
                                  "FP8 weights (type float, num_bits 8)", fmt)
        targets = self._patterns(f"{where}.targets", g.get("targets"))
        if not targets:
            raise self._field_err(f"{where}.targets", "a non-empty list of module names / 're:' "
                                  "regexes", g.get("targets"))
        w, a = g.get("weights"), g.get("input_activations")
        for field, args in (("weights", w), ("input_activations", a)):
            if args is None and field == "input_activations":
                continue
            if not isinstance(args, dict):
                raise self._field_err(f"{where}.{field}", "an object", args)
            if args.get("type") != "float" or args.get("num_bits") != 8:
                why = (f" (format {fmt!r} stores the weights in the type and bit width "
                       "they give; fp8tower reads FP8 only)"
                       if fmt == NAIVE_FORMAT and field == "weights" else "")
                raise self._field_err(f"{where}.{field}", f"type 'float' with num_bits 8 "
                                      f"(FP8){why}",
                                      {"type": args.get("type"), "num_bits": args.get("num_bits")})
            # asymmetric: real = (q - zero_point) * scale; vLLM's compressed-tensors FP8
            # schemes need symmetric, static weights too (compressed-tensors' default: true)
            if args.get("symmetric", True) is not True:
                raise self._field_err(f"{where}.{field}.symmetric", "true (fp8tower reads no "
                                      "zero points)", args.get("symmetric"))
        if w.get("dynamic", False) is not False:
            raise self._field_err(f"{where}.weights.dynamic", "false (FP8 weights are stored "
                                  "with their scales)", w.get("dynamic"))
        if g.get("output_activations") is not None:
            raise self._field_err(f"{where}.output_activations", "null (fp8tower does not "
                                  "quantize outputs)", g.get("output_activations"))
        ws = w.get("strategy")
        if a is None:
            if ws not in ("tensor", "channel"):
                raise self._field_err(f"{where}.weights.strategy",
                                      "'tensor' or 'channel' for weight-only FP8", ws)
            return _Group(name, targets, Scheme.WEIGHT_ONLY, ws, False)
        as_, dyn = a.get("strategy"), a.get("dynamic", False)  # compressed-tensors' default
        if not isinstance(dyn, bool):
            raise self._field_err(f"{where}.input_activations.dynamic", "true or false", dyn)
        if ws in ("tensor", "channel") and as_ == "tensor":
            # channel: per_tensor with the (N,) weight scale (the product is the same)
            return _Group(name, targets, Scheme.PER_TENSOR, ws, not dyn)
        if ws in ("tensor", "channel") and as_ == "token" and dyn:
            # tensor: the one weight scale expanded to (N,) (the product is the same)
            return _Group(name, targets, Scheme.CHANNEL_TOKEN, ws, False)
        if ws == "block" and as_ == "group" and dyn:
            bs, gs = w.get("block_structure"), a.get("group_size")
            if list(bs or []) != [128, 128] or gs != 128:
                raise self._field_err(where, "block_structure [128, 128] with activation "
                                      "group_size 128", {"block_structure": bs, "group_size": gs})
            return _Group(name, targets, Scheme.BLOCK128, ws, False)
        got = {"weights.strategy": ws, "input_activations.strategy": as_, "dynamic": dyn}
        if ws == "block" or (as_ == "group" and ws in ("tensor", "channel")):
            why = ("block weights pair with dynamic 1x128 activation groups only (block128)"
                   if ws == "block" else f"{ws} weights with activation groups: fp8tower's "
                   "group activations (block128) need 128x128 block weight scales")
            raise self._field_err(where, f"a combination fp8tower computes exactly; {why}",
                                  got)
        raise self._field_err(
            where, "one of the FP8 presets: weights tensor + activations tensor (FP8), channel "
            "+ dynamic token (FP8_DYNAMIC), block + dynamic group (FP8_BLOCK), or no "
            "activations; or weights channel + activations tensor, tensor + dynamic token",
            got)

    def group_for(self, fqn: str) -> _Group | None:
        """The group that quantized module ``fqn``: its best-ranked target (exact name, then
        the alphabetically first ``re:`` regex, then the class ``Linear``), as
        compressed-tensors applies a config and the tower specs rank it (quant_rules.ct_match).
        2026-12-05 audits: any target containing "linear" counted as the class, and a regex
        group listed before an exact one won here while the spec took the exact one; of two
        matching regexes the first in config order won (vLLM's rule, not the format's)."""
        m = ct_match((g.targets for g in self.groups), (fqn,))
        return None if m is None else self.groups[m.group]

    def _warn_overlaps(self) -> None:
        """One warning per (group applied, groups passed over) for the stored FP8 modules that
        two groups' regexes tie for, or that vLLM assigns to another group (it takes the first
        matching target in config order): the module's scheme may differ there. None where
        every group involved reads its tensors alike (scheme, weight strategy, static x)."""
        seen: dict[tuple, list[str]] = {}
        for fqn in sorted(self._linears):
            m = ct_match((g.targets for g in self.groups), (fqn,))
            if m is None or (not m.tied and m.vllm_group == m.group):
                continue
            involved = {m.group, m.vllm_group, *(j for j, _ in m.tied)}
            if len({(self.groups[j].scheme, self.groups[j].weight_strategy,
                     self.groups[j].static_input) for j in involved}) == 1:
                continue
            seen.setdefault((m.group, m.target, m.tied, m.vllm_group, m.vllm_target),
                            []).append(fqn)
        for (gi, target, tied, vi, vtarget), fqns in seen.items():
            g = self.groups[gi]
            more = f" (and {len(fqns) - 1} other stored FP8 module(s))" if len(fqns) > 1 else ""
            if tied:
                others = " and ".join(f"{self.groups[j].name!r} ({t!r})" for j, t in tied)
                clash = (f"config_groups {g.name!r} ({target!r}) and {others} both match "
                         f"module {fqns[0]!r} by regex{more}")
            else:
                clash = (f"config_groups {g.name!r} ({target!r}, an exact name) and "
                         f"{self.groups[vi].name!r} ({vtarget!r}, listed first) both match "
                         f"module {fqns[0]!r}{more}")
            if vi != gi:
                vllm = (f"vLLM takes the first matching target in config order, "
                        f"{self.groups[vi].name!r} ({self.groups[vi].scheme}), and reads "
                        "these modules differently")
            else:
                vllm = "vLLM (first in config order) takes it too"
            warnings.warn(f"fp8tower: {self.path}: {clash}: fp8tower applies {g.name!r} "
                          f"({g.scheme}), as compressed-tensors does (an exact name, else its "
                          f"alphabetically first regex target); {vllm}", stacklevel=4)

    def is_ignored(self, fqn: str) -> bool:
        return any(match_exact_or_regex(fqn, t) for t in self.ignore)

    def _group(self, fqn: str) -> _Group:
        g = self.group_for(fqn)
        if g is None:
            raise CheckpointError(f"{self._reader.info(fqn + '.weight').where()}: stored in FP8 "
                                  f"but no quantization_config.config_groups entry targets "
                                  f"{fqn!r} (in {self.quant_config_file})")
        return g

    def _scheme_of_stored(self, fqn: str) -> Scheme:
        return self._group(fqn).scheme

    def _has_static_input_scale(self, fqn: str) -> bool:
        return self._group(fqn).static_input

    def _stored_scale_shapes(self, fqn: str, scheme: Scheme, n: int, k: int):
        if self._group(fqn).weight_strategy == "tensor":
            return [(1,), ()]
        if scheme is Scheme.BLOCK128:
            return self._scale_shapes(scheme, n, k)
        return [(n, 1), (n,)]

    def load_linear(self, fqn: str, device=None) -> LoadedLinear:
        """As stored; channel weights under per_tensor activations keep their (N,) scale (the
        base reads per_tensor's as one value)."""
        spec = self._spec(fqn)
        if spec.scheme is not Scheme.PER_TENSOR or self._group(fqn).weight_strategy != "channel":
            return super().load_linear(fqn, device)
        data = self._reader.load(f"{fqn}.weight", device=device)
        scale = self._load_scale(spec.scale, device).reshape(-1)
        act = None
        if spec.input_scale is not None:
            act = self._load_scale(spec.input_scale, device).reshape(())
        return LoadedLinear(self._fp8_weight(spec, f"{fqn}.weight", data, scale, act),
                            self._bias(fqn, device))
