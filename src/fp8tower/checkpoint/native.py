"""fp8tower's own FP8 checkpoints, as ``fp8tower.hf.write_merged`` writes them.

config.json ``quantization_config``::

    {"quant_method": "fp8tower", "format_version": 1,
     "modules": {"<fqn>": {"scheme": "per_tensor", "static_input_scale": false}, ...},
     "merged": {"<parent>.qkv_proj": {"members": ["<parent>.q_proj", ...], "sizes": [..]}},
     "ignore": ["lm_head", ...]}

Every quantized linear is listed in ``modules`` by its stored name (nothing is inferred); a
merged group is one stored linear (its name in ``modules`` and in ``merged``). Tensors per
stored linear, in the decode-scale convention of :class:`~fp8tower.formats.Fp8Weight`:

- ``weight`` F8_E4M3 [N, K] (a merged group: its members' rows stacked in order);
- ``weight_scale`` F32: per_tensor [] (a merged group: [len(members)], one per member, or
  [] when one scale serves all), channel_token / weight_only [N], block128
  [ceil(N/128), ceil(K/128)] (a merged group's members but the last have N % 128 == 0);
- ``input_scale`` F32 [] for a static per_tensor activation scale; ``bias`` as the model's;
- KV-cache scales (``k_proj.k_scale``, ...) as the source stored them, under their own names,
  a merged group's members' too (fp8tower does not use them).

The members of a merged group are this checkpoint's linears (``linear_names``); each loads
as its slice of the stored tensor, so ``convert(merge=False)`` works as on any checkpoint,
and ``convert(merge=True)`` merges them back into the same tensor.
"""

from __future__ import annotations

from ..formats import BLOCK, Scheme
from .base import Checkpoint, LinearSpec, LoadedLinear, ceil_div, module_of
from .reader import CheckpointError, CheckpointReader

QUANT_METHOD = "fp8tower"
FORMAT_VERSION = 1


class NativeCheckpoint(Checkpoint):
    format = "fp8tower"

    def __init__(self, reader: CheckpointReader, qconfig: dict):
        super().__init__(reader, qconfig, reader.path / "config.json")
        version = qconfig.get("format_version")
        if version != FORMAT_VERSION:
            raise self._field_err("format_version", str(FORMAT_VERSION), version)
        modules, merged = qconfig.get("modules"), qconfig.get("merged", {})
        if not isinstance(modules, dict):
            raise self._field_err("modules", "an object {module name: {scheme, "
                                  "static_input_scale}}", modules)
        if not isinstance(merged, dict):
            raise self._field_err("merged", "an object {merged name: {members, sizes}}", merged)
        self.ignore = self._string_list("ignore", qconfig.get("ignore"))
        self._modules: dict[str, tuple[Scheme, bool]] = {}
        for fqn, m in modules.items():
            try:
                scheme = Scheme.parse(m["scheme"])
            except (TypeError, KeyError, ValueError):
                raise self._field_err(f"modules.{fqn}", "an object with a 'scheme' (per_tensor, "
                                      "channel_token, block128, weight_only)", m) from None
            static = m.get("static_input_scale", False)
            if not isinstance(static, bool):  # bool("false") was True
                raise self._field_err(f"modules.{fqn}.static_input_scale", "true or false (a "
                                      "JSON bool)", static)
            self._modules[fqn] = (scheme, static)
        self._merged: dict[str, dict] = {}
        self._member: dict[str, tuple[str, int, int]] = {}  # member -> (merged, index, row0)
        for name, g in merged.items():
            self._add_merged(name, g)
        self._check_names_once()
        unlisted = sorted({module_of(n) for n, t in reader.tensors.items()
                           if t.dtype.startswith("F8_")} - set(self._modules))
        if unlisted:
            raise CheckpointError(f"{reader.info(unlisted[0] + '.weight').where()}: stored in "
                                  f"FP8 but not listed in quantization_config.modules of "
                                  f"{self.quant_config_file}")
        for fqn in sorted(self._modules):
            spec = self._check_stored_linear(fqn)
            if fqn not in self._merged:
                self._linears[fqn] = spec
                continue
            g = self._merged[fqn]
            if sum(g["sizes"]) != spec.n:
                raise self._err(reader.info(fqn + ".weight"), f"merged weight has N={spec.n}, "
                                f"its members' sizes {g['sizes']} add up to {sum(g['sizes'])}")
            row0 = 0
            for i, (member, n) in enumerate(zip(g["members"], g["sizes"])):
                if spec.scheme is Scheme.BLOCK128 and row0 % BLOCK:
                    raise self._err(reader.info(fqn + ".weight"), f"block128 member {member!r} "
                                    f"starts at row {row0}, not a multiple of {BLOCK}")
                self._linears[member] = LinearSpec(member, spec.scheme, n, spec.k, spec.scale,
                                                   spec.input_scale)
                self._member[member] = (fqn, i, row0)
                row0 += n
        self._check_linear_tensors(set(self._linears) | set(self._merged))

    def _check_names_once(self) -> None:
        """Each module name means one thing: a stored linear (``modules``), a member of one
        merged group, or an ignored module."""
        seen = dict.fromkeys(self._modules, "in quantization_config.modules")
        named = [(f"merged.{n}.members", m) for n, g in self._merged.items() for m in g["members"]]
        for field, fqn in named + [("ignore", f) for f in self.ignore]:
            if fqn in seen:
                raise self._err(self.quant_config_file, f"quantization_config.{field}: {fqn!r} "
                                f"is also {seen[fqn]}; expected each module in one place (a "
                                "stored linear, a member of one merged group, or ignored)")
            seen[fqn] = f"in quantization_config.{field}"

    def _add_merged(self, name: str, g) -> None:
        ok = (isinstance(g, dict) and isinstance(g.get("members"), list)
              and all(isinstance(m, str) for m in g["members"])
              and isinstance(g.get("sizes"), list) and len(g["members"]) == len(g["sizes"]) >= 2
              and all(isinstance(s, int) and s > 0 for s in g["sizes"]))
        if not ok:
            raise self._field_err(f"merged.{name}", "{'members': [2 or more names], 'sizes': "
                                  "[as many positive ints]}", g)
        if name not in self._modules:
            raise self._field_err(f"merged.{name}", "a name listed in 'modules' too", name)
        self._merged[name] = {"members": list(g["members"]), "sizes": list(g["sizes"])}

    def is_ignored(self, fqn: str) -> bool:
        return fqn in self.ignore

    def _scheme_of_stored(self, fqn: str) -> Scheme:
        return self._modules[fqn][0]

    def _has_static_input_scale(self, fqn: str) -> bool:
        return self._modules[fqn][1]

    def _stored_scale_shapes(self, fqn: str, scheme: Scheme, n: int, k: int):
        if scheme is Scheme.PER_TENSOR:
            g = self._merged.get(fqn)
            return [()] + ([(len(g["sizes"]),)] if g else [])
        if scheme in (Scheme.CHANNEL_TOKEN, Scheme.WEIGHT_ONLY):
            return [(n,)]
        return [(ceil_div(n, BLOCK), ceil_div(k, BLOCK))]

    def stored_merged(self) -> dict[str, dict]:
        """{merged name: {"members": [...], "sizes": [...]}} as stored."""
        return {k: dict(v) for k, v in self._merged.items()}

    def load_linear(self, fqn: str, device=None) -> LoadedLinear:
        if fqn not in self._member:
            return super().load_linear(fqn, device)
        spec = self._spec(fqn)
        merged, i, r0 = self._member[fqn]
        data = self._reader.load_rows(f"{merged}.weight", r0, r0 + spec.n, device)
        scale = self._load_scale(spec.scale, device)
        if spec.scheme is Scheme.PER_TENSOR:
            scale = scale.reshape(-1)[i if scale.numel() > 1 else 0].reshape(())
        elif spec.scheme is Scheme.BLOCK128:
            scale = scale[r0 // BLOCK: ceil_div(r0 + spec.n, BLOCK)]
        else:
            scale = scale.reshape(-1)[r0:r0 + spec.n]
        act = None
        if spec.input_scale is not None:
            act = self._load_scale(spec.input_scale, device).reshape(())
        bias = self._bias(merged, device)
        if bias is not None:
            bias = bias[r0:r0 + spec.n]
        weight = self._fp8_weight(spec, f"{merged}.weight", data.contiguous(),
                                  scale.contiguous(), act)
        return LoadedLinear(weight, bias)

    def describe(self) -> dict:
        info = super().describe()
        info["not_quantized"] = [f for f in info["not_quantized"] if f not in self._merged]
        info["stored_merged"] = self.stored_merged()
        return info
