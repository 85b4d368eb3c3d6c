"""Save a converted transformers model as fp8tower's checkpoint (format:
fp8tower/checkpoint/native.py), which :func:`~fp8tower.from_pretrained` loads back.

``convert`` makes a converted model's ``save_pretrained`` this module's (through
``conversion.ON_CONVERTED``: conversion imports nothing of the writers)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from torch import nn

from ..formats import Scheme
from ..nn.linear import Fp8Linear
from ..nn.merged import MergedFp8Linear
from . import conversion
from .conversion import ConvertError, MergedProjection
from .write import _ShardWriter, _stored_scale, native_config


def save_pretrained(model, out: str | os.PathLike[str], *,
                    max_shard_bytes: int = 4 * 10**9) -> dict:
    """Write a model that :func:`~fp8tower.convert` or :func:`~fp8tower.from_pretrained`
    converted as fp8tower's checkpoint (checkpoint/native.py), which
    ``fp8tower.from_pretrained(out)`` loads back to the same numbers, merged or not.

    A converted model's ``model.save_pretrained(out)`` calls this: transformers' own wrote
    the merged groups' tensors under ``<merged>.linear.*`` and a bf16 model's FP8 linears
    without any quantization config, so neither loaded back (2026-12-05 audit). Each
    ``Fp8Linear`` is written as it computes (its FP8 weight, scales and bias), a merged group
    as one stored linear with per-member scales, every other tensor of ``model.state_dict()``
    as it is (a tied one once); config.json is the model's with fp8tower's
    ``quantization_config``, plus generation_config.json where the model has one. ``out``
    must be new or empty; a write that fails leaves it as it found it. Returns ``{"path",
    "files", "bytes", "modules", "merged"}`` (the counts of stored linears and merged
    groups). fp8tower's format is read by fp8tower only: to serve with another engine, keep
    the source checkpoint."""
    if (not isinstance(max_shard_bytes, int) or isinstance(max_shard_bytes, bool)
            or max_shard_bytes <= 0):
        raise ValueError(f"max_shard_bytes: expected a positive int (bytes), got "
                         f"{max_shard_bytes!r}")
    owners: dict[str, nn.Module] = {}
    aliases: list[str] = []  # another name of an owner (one module set on two parents)
    owned: set[int] = set()
    inside: tuple[str, ...] = ()  # "<owner or alias>.": a merged group's own Fp8Linear
    for fqn, mod in model.named_modules(remove_duplicate=False):
        if inside and fqn.startswith(inside):
            continue
        if id(mod) in owned:
            aliases.append(fqn)
            inside += (fqn + ".",)
        elif isinstance(mod, (MergedProjection, Fp8Linear)):
            owners[fqn] = mod
            owned.add(id(mod))
            inside += (fqn + ".",)
        elif isinstance(mod, MergedFp8Linear):  # its members are not modules of the model
            raise ConvertError(f"{fqn}: a MergedFp8Linear made by hand; save_pretrained writes "
                               "models that fp8tower.convert / from_pretrained converted")
    if not owners:
        raise ConvertError(f"{type(model).__name__} has no fp8tower linear: convert it first "
                           "(fp8tower.convert), or save it with transformers")
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        raise ConvertError(f"{type(model).__name__} has no transformers config to write")
    meta = next((n for n, t in model.state_dict().items() if t.device.type == "meta"), None)
    if meta is not None:  # before anything is written
        raise ConvertError(f"{meta}: on the meta device (never loaded); nothing to write")
    dst = Path(out).expanduser()
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise ConvertError(f"{dst}: exists and is not an empty directory (save_pretrained "
                           "writes a new checkpoint directory)")
    existed = dst.exists()
    made = dst.absolute()  # the outermost folder this save creates (parents too)
    while not made.parent.exists():
        made = made.parent
    try:
        return _save(model, config, owners, aliases, dst, max_shard_bytes)
    except BaseException:
        if existed:
            for f in dst.iterdir():
                f.unlink()
        else:
            shutil.rmtree(made, ignore_errors=True)
        raise


def _save(model, config, owners: dict, aliases: list[str], dst: Path,
          max_shard_bytes: int) -> dict:
    dst.mkdir(parents=True, exist_ok=True)
    writer = _ShardWriter(dst, max_shard_bytes)
    modules: dict[str, dict] = {}
    merged_cfg: dict[str, dict] = {}
    for fqn, mod in owners.items():
        lin = mod.linear if isinstance(mod, MergedProjection) else mod
        w = lin.fp8_weight()
        if isinstance(mod, MergedProjection):
            parent = fqn.rpartition(".")[0]
            members = [f"{parent}.{n}" if parent else n for n in mod.names]
            merged_cfg[fqn] = {"members": members, "sizes": list(mod.sizes)}
        scale = _scale(fqn, mod, w)
        writer.add(f"{fqn}.weight", w.data)
        writer.add(f"{fqn}.weight_scale", scale)
        if w.act_scale is not None:
            writer.add(f"{fqn}.input_scale", w.act_scale.float().reshape(()))
        if lin.bias is not None:
            writer.add(f"{fqn}.bias", lin.bias)
        modules[fqn] = {"scheme": str(w.scheme), "static_input_scale": w.act_scale is not None}
    seen: set[tuple] = set()  # a tied parameter (lm_head / embed_tokens) is written once
    written_by = tuple(f"{o}." for o in [*owners, *aliases])
    for name, t in model.state_dict().items():  # every other tensor
        if name.startswith(written_by):
            continue
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.dtype)
        if t.numel() and key in seen:  # (empty tensors share the null pointer, not values)
            continue
        seen.add(key)
        writer.add(name, t)
    files = writer.finish()

    cfg = config.to_dict()
    cfg.pop("compression_config", None)
    cfg["architectures"] = [type(model).__name__]
    cfg["quantization_config"] = native_config(
        {"format": "model", "class": type(model).__name__}, modules, merged_cfg,
        (fqn for fqn, m in model.named_modules() if isinstance(m, nn.Linear)))
    (dst / "config.json").write_text(json.dumps(cfg, indent=2, default=str))
    gen = getattr(model, "generation_config", None)
    if gen is not None and hasattr(gen, "save_pretrained"):
        gen.save_pretrained(dst)
    return {"path": str(dst), "files": files, "bytes": writer.total, "modules": len(modules),
            "merged": len(merged_cfg)}


def _scale(fqn: str, mod, w) -> torch.Tensor:
    """The weight scale as checkpoint/native.py stores it: per_tensor one scalar, or one per
    member of a merged group; a per_tensor module with per-row scales that are not one a
    linear (a shape Fp8Linear takes) has no such form and is refused, named."""
    if w.scheme is not Scheme.PER_TENSOR or w.scale.numel() == 1:
        return _stored_scale(w)
    s = w.scale.float().reshape(-1)
    sizes = list(mod.sizes) if isinstance(mod, MergedProjection) else [w.n]
    parts = s.split(sizes)
    if any(bool((p != p[0]).any()) for p in parts):
        raise ConvertError(f"{fqn}: a per_tensor weight with a scale per row "
                           f"({tuple(w.scale.shape)}) that is not one a linear: fp8tower's "
                           "format stores one per linear (channel_token has one per row)")
    firsts = torch.stack([p[0] for p in parts])
    return firsts if isinstance(mod, MergedProjection) else firsts.reshape(())


def _shard_bytes(size) -> int:
    """transformers' ``max_shard_size``: bytes, or "5GB" / "500MB" / "2GiB"."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    units = {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}
    text = str(size).strip().upper()
    for unit, mult in units.items():
        number = text.removesuffix(unit)
        if number != text and number.strip().isdigit() and int(number) > 0:
            return int(number) * mult
    raise ValueError(f"max_shard_size: expected a positive int (bytes) or a size such as "
                     f"'5GB', '500MB', '2GiB', got {size!r}")


def model_save_pretrained(model, save_directory, *, max_shard_size=4 * 10**9,
                          safe_serialization: bool = True, is_main_process: bool = True,
                          push_to_hub: bool = False, state_dict=None, **kwargs) -> None:
    """``model.save_pretrained`` of a converted model (set by :func:`~fp8tower.convert`):
    :func:`save_pretrained` with transformers' arguments where they apply. ``state_dict``
    (transformers' Trainer passes the model's own) is taken when it holds the model's own
    tensors; another one is refused (fp8tower writes the model as it is)."""
    if push_to_hub:
        raise ValueError("save_pretrained(push_to_hub=True): fp8tower writes local "
                         "directories only; upload the written directory yourself")
    if not safe_serialization:
        raise ValueError("save_pretrained(safe_serialization=False): fp8tower writes "
                         "safetensors only")
    if kwargs:
        raise TypeError(f"save_pretrained of a model fp8tower converted takes max_shard_size, "
                        f"safe_serialization, is_main_process, push_to_hub, state_dict; got "
                        f"{', '.join(sorted(kwargs))}")
    if state_dict is not None:
        _check_own_state(model, state_dict)
    if is_main_process:
        save_pretrained(model, save_directory, max_shard_bytes=_shard_bytes(max_shard_size))


def _check_own_state(model, state_dict) -> None:
    own = model.state_dict()
    other = [k for k, t in state_dict.items() if k not in own or not isinstance(t, torch.Tensor)
             or t.data_ptr() != own[k].data_ptr() or t.shape != own[k].shape]
    missing = sorted(set(own) - set(state_dict))
    if other or missing:
        raise ValueError(
            "save_pretrained(state_dict=...) of a model fp8tower converted writes the model's "
            "own tensors; this state_dict "
            + (f"has other tensors or keys ({', '.join(sorted(other)[:3])}"
               f"{', ...' if len(other) > 3 else ''})" if other else
               f"lacks {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}")
            + ": load it into the model first, or save without state_dict")


_CONVERTED = "_fp8tower_converted"  # the instance flag the class-level save_pretrained reads


class _Flag:
    """The flag's value. A model unpickled in another process brings its flag but not the
    override on its class (a review, 2026-12-05: `torch.load(...).save_pretrained(out)` wrote
    transformers' format again): unpickling this flag imports this module and installs the
    override on transformers' PreTrainedModel, which every model class inherits it from."""

    def __bool__(self) -> bool:
        return True

    def __reduce__(self):
        return _unpickled_flag, ()


def _unpickled_flag() -> _Flag:
    import transformers  # being unpickled with a transformers model: already imported

    _patch(transformers.PreTrainedModel)
    return _FLAG


_FLAG = _Flag()


def _patch(cls) -> None:
    """``cls.save_pretrained`` serves instances flagged converted with fp8tower's writer and
    the others with its own (once a class)."""
    if "_fp8tower_own_save" in cls.__dict__:
        return
    own = cls.save_pretrained

    def save_pretrained(self, save_directory, *args, **kwargs):
        if self.__dict__.get(_CONVERTED):
            if args:
                raise TypeError("save_pretrained of a model fp8tower converted takes its "
                                "options by keyword")
            return model_save_pretrained(self, save_directory, **kwargs)
        return own(self, save_directory, *args, **kwargs)

    # fp8tower's name and help: a converted model's options are model_save_pretrained's (not
    # functools.wraps: inspect.signature would show transformers' own through __wrapped__)
    save_pretrained.__doc__ = model_save_pretrained.__doc__
    save_pretrained.__qualname__ = f"{cls.__qualname__}.save_pretrained"
    cls._fp8tower_own_save = own
    cls.save_pretrained = save_pretrained


def _install(model) -> None:
    """Make a converted transformers model's ``save_pretrained`` write fp8tower's format
    (transformers' own writes what no loader reads back after a conversion); another class's
    own (PEFT's adapters) stays.

    The override sits on the model's class, once, and serves only instances flagged
    converted; others get transformers' own. It held the model weakly from the instance's
    ``__dict__`` before: a strong reference there made a cycle (`del model` freed nothing,
    GPU memory included, until a garbage collection; 2026-12-05 review), and a weak one
    died in one expression (`convert(model, s).save_pretrained(out)`: ReferenceError, a
    lifecycle audit the same day). The flag copies and pickles with its model (_Flag)."""
    cls = type(model)
    if not any(c.__name__ == "PreTrainedModel" for c in cls.__mro__):
        return
    object.__setattr__(model, _CONVERTED, _FLAG)
    _patch(cls)


conversion.ON_CONVERTED.append(_install)
