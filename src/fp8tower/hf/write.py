"""Write fp8tower's own merged FP8 checkpoint (format: fp8tower/checkpoint/native.py).

    >>> fp8tower.hf.write_merged("Qwen3.5-27B-FP8", "Qwen3.5-27B-FP8-merged")

Reads the source checkpoint module by module (any format fp8tower reads; a bf16 one with a
``scheme``), merges each sibling group that ``describe`` marks ``merge`` into one stored
tensor with per-member scales (exact; one rescaled per-tensor scale with
``requant_max``), and writes the other linears and every other tensor under their stored
names, in shards of at most ``max_shard_bytes``, with an index, a config.json whose
``quantization_config`` fp8tower's loader reads, and the source's other files (tokenizer,
generation config). No model is built and transformers is not imported.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from ..formats import Scheme
from ..nn.merged import MergeError, MergeMode, merge_weights
from .conversion import ConvertError, default_filter
from .pretrained import describe

_SKIP_FILES = {"config.json", "hf_quant_config.json", "model.safetensors.index.json"}
# Weights in other formats: unmerged copies of what is written here, stale beside it
_OTHER_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".gguf", ".bin.index.json")


class _ShardWriter:
    def __init__(self, out: Path, max_bytes: int):
        from safetensors.torch import save_file

        self._save = save_file
        self.out, self.max_bytes = out, max_bytes
        self.pending: dict[str, torch.Tensor] = {}
        self.pending_bytes = 0
        self.files: list[tuple[Path, list[str]]] = []
        self.total = 0

    def add(self, name: str, t: torch.Tensor) -> None:
        t = t.detach().to("cpu").contiguous()
        n = t.numel() * t.element_size()
        if self.pending and self.pending_bytes + n > self.max_bytes:
            self.flush()
        self.pending[name] = t
        self.pending_bytes += n
        self.total += n

    def flush(self) -> None:
        if not self.pending:
            return
        tmp = self.out / f".part-{len(self.files):05d}.safetensors"
        self._save(self.pending, str(tmp), metadata={"format": "pt"})
        self.files.append((tmp, sorted(self.pending)))
        self.pending, self.pending_bytes = {}, 0

    def finish(self) -> list[str]:
        self.flush()
        if len(self.files) == 1:
            self.files[0][0].rename(self.out / "model.safetensors")
            return ["model.safetensors"]
        weight_map, names = {}, []
        for i, (tmp, tensors) in enumerate(self.files):
            name = f"model-{i + 1:05d}-of-{len(self.files):05d}.safetensors"
            tmp.rename(self.out / name)
            names.append(name)
            weight_map.update(dict.fromkeys(tensors, name))
        (self.out / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": self.total}, "weight_map": weight_map}, indent=2))
        return names


def native_config(source: dict, modules: dict, merged: dict, ignore, **extra) -> dict:
    """The ``quantization_config`` checkpoint/native.py reads (write_merged's from a
    checkpoint, hf/save.py's from a converted model)."""
    from .. import __version__
    from ..checkpoint.native import FORMAT_VERSION, QUANT_METHOD

    return {"quant_method": QUANT_METHOD, "format_version": FORMAT_VERSION,
            "producer": {"name": "fp8tower", "version": __version__}, "source": source,
            **extra, "modules": modules, "merged": merged, "ignore": sorted(ignore)}


def _stored_scale(w, name: str = "") -> torch.Tensor:
    """An Fp8Weight's scale in native.py's stored shape: per_tensor one scalar, refused (a
    ConvertError naming ``name``) where it has a scale per row that differ (compressed-tensors
    channel weights under per-tensor activations load so: a crash on reshape before)."""
    s = w.scale.float()
    if w.scheme is Scheme.PER_TENSOR:
        flat = s.reshape(-1)
        if bool((flat != flat[0]).any()):
            raise ConvertError(
                f"{name}: a per_tensor weight with a scale per row, shape {tuple(s.shape)} "
                "(compressed-tensors channel weights under per-tensor activations load so): "
                "fp8tower's format stores one per linear; keep the source checkpoint, which "
                "fp8tower.from_pretrained reads")
        return flat[0].reshape(())
    if w.scheme is Scheme.BLOCK128:
        return s
    return s.reshape(-1)


def write_merged(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    scheme: Scheme | str | None = None,
    requant_max: bool = False,
    max_shard_bytes: int = 4 * 10**9,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Write ``path``'s checkpoint to ``out`` in fp8tower's format, sibling groups merged.

    ``scheme``: for a bf16/fp16 checkpoint, the scheme its linears are quantized to (lm_head,
    embeddings and vision towers stay as stored, as ``convert`` leaves them). Returns a
    report: ``{"path", "files", "bytes", "groups": [{"merged", "members", "written",
    "reason"}], "copied_through", "not_copied"}`` (``written``: "merged" or "separate", with
    the reason; every sibling group of the checkpoint has one; ``copied_through``: tensors
    under a linear's name that are not its weight, bias or scales, i.e. KV-cache scales such
    as ModelOpt's ``k_proj.k_scale`` (open_checkpoint refuses any other), written as stored
    under their names, a merged group's members' too; ``not_copied``: the source's
    subdirectories and weights in other formats). ``progress(done, total)`` is called as the
    stored tensors are read (a 27B checkpoint's copy takes minutes). A write that fails leaves
    ``out`` as it found it. A bf16 checkpoint is written only for the model types whose 2-D weights are
    linears by name (checkpoint/unquantized.py LINEARS_BY_NAME; GPT-2's Conv1D are not)."""
    from ..checkpoint import open_checkpoint

    if (not isinstance(max_shard_bytes, int) or isinstance(max_shard_bytes, bool)
            or max_shard_bytes <= 0):  # 0 or -5 wrote one shard per tensor, "4GB" failed late
        raise ValueError(f"max_shard_bytes: expected a positive int (bytes), got "
                         f"{max_shard_bytes!r}")
    src, dst = Path(path).expanduser(), Path(out).expanduser()
    if dst.exists() and not dst.is_dir():
        raise ConvertError(f"{dst}: is a file; write_merged writes a new (or empty) checkpoint "
                           "directory")
    if dst.exists() and (dst.resolve() == src.resolve() or any(dst.iterdir())):
        raise ConvertError(f"{dst}: exists and is not empty (write_merged writes a new "
                           "checkpoint directory)")
    mode = MergeMode.REQUANT_MAX if requant_max else MergeMode.EXACT
    ck = open_checkpoint(src, scheme=scheme)
    if ck.format == "unquantized" and scheme is None:  # it wrote a copy with no FP8 linear
        ck.close()
        raise ConvertError(f"{src}: a bf16/fp16 checkpoint: give the scheme to quantize its "
                           "linears to (scheme=, --scheme: per_tensor, channel_token, block128, "
                           "weight_only)")
    if ck.format == "unquantized" and not ck.linears_by_name:
        from ..checkpoint.unquantized import LINEARS_BY_NAME

        ck.close()
        raise ConvertError(f"{src}: model_type {ck.config.get('model_type')!r}: write_merged "
                           "quantizes a bf16 checkpoint only where its linears are known by "
                           f"name, for model_type {', '.join(LINEARS_BY_NAME)}; others may store "
                           "2-D weights that are not linears (GPT-2's Conv1D, MoE routers); "
                           "from_pretrained(path, scheme=...) converts the model's nn.Linear "
                           "modules instead")
    existed = dst.exists()
    try:
        return _write(ck, src, dst, mode, max_shard_bytes, progress)
    except BaseException:
        if existed:  # it was empty: take out what this write put there (files only)
            for f in dst.iterdir():
                f.unlink()
        else:
            shutil.rmtree(dst, ignore_errors=True)
        raise
    finally:
        ck.close()


def _write(ck, src: Path, dst: Path, mode: MergeMode, max_shard_bytes: int,
           progress: Callable[[int, int], None] | None = None) -> dict:
    info = describe(ck)
    linears = [f for f in ck.linear_names()
               if ck.format != "unquantized" or default_filter(None, f)]
    stored_merged = ck.stored_merged() if hasattr(ck, "stored_merged") else {}
    owners = set(linears) | set(stored_merged)
    dst.mkdir(parents=True, exist_ok=True)
    writer = _ShardWriter(dst, max_shard_bytes)
    # one step per merge group, per linear and per other tensor (the three loops below)
    steps = [0, len(info["merge_groups"]) + len(linears) + len(ck.tensor_names())]

    def tick() -> None:
        steps[0] += 1
        if progress is not None:
            progress(min(steps[0], steps[1]), steps[1])

    modules: dict[str, dict] = {}
    merged_cfg: dict[str, dict] = {}
    report_groups: list[dict] = []

    def put_linear(fqn: str, w, bias) -> None:
        writer.add(f"{fqn}.weight", w.data)
        writer.add(f"{fqn}.weight_scale", _stored_scale(w, fqn))
        if w.act_scale is not None:
            writer.add(f"{fqn}.input_scale", w.act_scale.float().reshape(()))
        if bias is not None:
            writer.add(f"{fqn}.bias", bias)
        modules[fqn] = {"scheme": str(w.scheme), "static_input_scale": w.act_scale is not None}

    done: set[str] = set()
    wanted = set(linears)
    for g in info["merge_groups"]:
        tick()
        members = g["members"]
        name = f"{g['parent']}.{g['merged']}" if g["parent"] else g["merged"]
        rec = {"merged": name, "members": members, "written": "merged", "reason": None}
        # requant_max merges what an exact merge keeps (static input scales that differ;
        # never a group the model's forward rules out, families.SiblingGroup.skip);
        # merge_weights says why where it cannot either
        tried = g["action"] in ("merge", "stored merged") or (
            mode is MergeMode.REQUANT_MAX and not g["skip"])
        if not tried or not set(members) <= wanted:
            rec["written"] = "separate"
            rec["reason"] = g.get("reason") or "not every member is a quantized linear here"
            report_groups.append(rec)
            continue
        loaded = [ck.load_linear(m) for m in members]
        weights = [x.weight for x in loaded]
        biases = [x.bias for x in loaded]
        # requant_max is per_tensor's; other schemes' groups merge exactly (one mode for all
        # refused every block128 / channel_token group: --requant-max merged none of them)
        group_mode = mode if weights[0].scheme is Scheme.PER_TENSOR else MergeMode.EXACT
        try:
            merged = merge_weights(weights, group_mode, members)
            if any(b is not None for b in biases) and any(b is None for b in biases):
                raise MergeError(f"some members have a bias and some do not: {members}")
        except MergeError as e:
            rec["written"], rec["reason"] = "separate", str(e)
            report_groups.append(rec)
            continue
        if merged.scheme is Scheme.PER_TENSOR and group_mode is MergeMode.EXACT:
            scalars = torch.stack([_stored_scale(w, m) for w, m in zip(weights, members)])
            same = bool((scalars == scalars[0]).all())
            scale = scalars[0] if same else scalars  # [] or [len(members)]: per member
        else:
            scale = _stored_scale(merged, name)
        bias = None if biases[0] is None else torch.cat(biases)
        writer.add(f"{name}.weight", merged.data)
        writer.add(f"{name}.weight_scale", scale)
        if merged.act_scale is not None:
            writer.add(f"{name}.input_scale", merged.act_scale.float().reshape(()))
        if bias is not None:
            writer.add(f"{name}.bias", bias)
        modules[name] = {"scheme": str(merged.scheme),
                         "static_input_scale": merged.act_scale is not None}
        merged_cfg[name] = {"members": members, "sizes": [w.n for w in weights]}
        done.update(members)
        report_groups.append(rec)
    for fqn in linears:
        tick()
        if fqn not in done:
            loaded = ck.load_linear(fqn)
            put_linear(fqn, loaded.weight, loaded.bias)
    from ..checkpoint.base import module_of

    own, copied_through = ck.linear_tensor_attrs(), []
    for name in ck.tensor_names():
        tick()
        owner = module_of(name)
        if owner in owners and name[len(owner) + 1:] in own:
            continue  # written above, merged or not
        if owner in owners:
            copied_through.append(name)
        writer.add(name, ck.load_tensor(name))
    files = writer.finish()

    cfg = dict(ck.config)
    cfg.pop("compression_config", None)
    cfg["quantization_config"] = native_config(
        {"format": ck.format, "path": str(src)}, modules, merged_cfg,
        set(info["not_quantized"]) | (set(ck.linear_names()) - set(linears)),
        merge_mode=mode.value)
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    not_copied = []
    for f in sorted(src.iterdir()):
        if f.is_dir() or f.name.endswith(_OTHER_WEIGHTS):
            not_copied.append(f.name)
        elif f.name not in _SKIP_FILES and f.suffix != ".safetensors":
            shutil.copy2(f, dst / f.name)
    return {"path": str(dst), "files": files, "bytes": writer.total, "groups": report_groups,
            "copied_through": copied_through, "not_copied": not_copied}

