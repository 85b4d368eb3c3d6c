"""Config loading and dispatch: config.json (shipped name or path) -> TowerSpec."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from ..quant_rules import modelopt_algo
from . import deepseek, deepseek_v4, llama, qwen
from ._fields import Fields
from .quant import parse_quant_config
from .spec import ConfigError, TowerSpec
from .tp import KV_HEADS, REPLICATED, ROLES, ROW, TpError, check_block_shards, check_tp, shard

BUILDERS = {**{t: qwen.build for t in qwen.MODEL_TYPES},
            **{t: llama.build for t in llama.MODEL_TYPES},
            **{t: deepseek.build for t in deepseek.MODEL_TYPES},
            **{t: deepseek_v4.build for t in deepseek_v4.MODEL_TYPES}}
SUPPORTED_MODEL_TYPES = tuple(BUILDERS)


def _shipped() -> dict[str, Any]:
    root = resources.files(__package__) / "configs"
    return {p.name[:-5]: p for p in root.iterdir() if p.name.endswith(".json")}


def list_models() -> list[str]:
    """Names of the configs shipped with the package (e.g. "qwen3.5-27b", "tiny-hybrid")."""
    return sorted(_shipped())


def _parse_json(text: str, where: str) -> dict[str, Any]:
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError("config.json", where, f"valid JSON ({e})") from None
    except RecursionError:
        raise ConfigError("config.json", where, "valid JSON not nested too deeply") from None
    if not isinstance(config, dict):
        raise ConfigError("config.json", where, "a JSON object at the top level")
    return config


def _resolve(path_or_name: str | os.PathLike[str]) -> tuple[str, Path | None]:
    """(model name, the config.json path; None for a shipped config)."""
    key = str(path_or_name)
    shipped = _shipped()
    stem = key[:-5] if key.lower().endswith(".json") else key
    if stem.lower() in shipped and not Path(key).exists():
        return stem.lower(), None
    path = Path(key)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError("model", key, f"a shipped name ({', '.join(sorted(shipped))}) or a "
                          "path to a config.json or to a directory holding one")
    return (path.parent.name if path.name == "config.json" else path.stem), path


def load_config(path_or_name: str | os.PathLike[str]) -> dict[str, Any]:
    """The config.json dict of a shipped model name or of a path (file, or directory with one)."""
    name, path = _resolve(path_or_name)
    if path is None:
        return _parse_json(_shipped()[name].read_text(encoding="utf-8"), name)
    return _parse_json(_read_text(path), str(path))


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError("config.json", str(path), f"UTF-8 JSON text ({e.reason})") from None


def text_config(config: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The dict holding the decoder's fields, and whether it was nested under text_config."""
    text = config.get("text_config")
    if text is None:
        return config, False
    if not isinstance(text, dict):
        raise ConfigError("text_config", text, "an object holding the text model's fields")
    return text, True


def _names_only_modelopt(qc: Any) -> bool:
    """config.json's quantization_config names the ModelOpt method but no quant_algo: the
    checkpoint keeps the rest in hf_quant_config.json (checkpoint/modelopt.py reads it so)."""
    return (isinstance(qc, dict) and str(qc.get("quant_method", "")).lower() == "modelopt"
            and not modelopt_algo(qc))


def tower_spec_from_config(
    config: dict[str, Any], *, name: str | None = None, quant_config: dict[str, Any] | None = None,
    tp: int = 1,
) -> TowerSpec:
    """Build the decode-step TowerSpec of a HF config.json dict.

    ``quant_config`` (a quantization_config, or a ModelOpt hf_quant_config.json) overrides the
    config's own ``quantization_config``; with neither, the default FP8 policy applies.
    ``tp`` > 1: the linears one GPU of a tensor-parallel deployment of that size runs
    (``tp.py``: N / tp column-parallel, K / tp row-parallel, as vLLM splits them); a model that
    cannot be split so raises a ``TpError`` naming the field and its value.
    """
    tp = check_tp(tp)
    if not isinstance(config, dict):
        raise ConfigError("config", type(config).__name__, "a dict parsed from config.json")
    text, nested = text_config(config)
    model_type = text.get("model_type") or config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise ConfigError("model_type", model_type, f"one of {', '.join(SUPPORTED_MODEL_TYPES)}")
    name_or_path = config.get("_name_or_path")
    name = name or (name_or_path if isinstance(name_or_path, str) else None) or model_type or "model"
    if model_type not in BUILDERS:
        raise ConfigError("model_type", model_type,
                          f"one of {', '.join(SUPPORTED_MODEL_TYPES)}", context=name)
    built = BUILDERS[model_type](Fields(text, name), model_type)
    if tp > 1 and built.get("tp_refused"):
        raise TpError("tp", tp, f"1 for {model_type}: {built['tp_refused']}", context=name)
    sharded = shard(built["linears"], tp, built["tp_fields"], context=name)

    notes = list(built["notes"])
    own_qc = config.get("quantization_config") or text.get("quantization_config")
    if quant_config is not None and _names_only_modelopt(own_qc):
        notes.append("config.json's quantization_config names only the method (modelopt): "
                     "the quantization config passed in (hf_quant_config.json) gives the rest")
    elif quant_config is not None and own_qc is not None:
        notes.append("the quantization_config passed in replaces config.json's own")
    policy = parse_quant_config(quant_config if quant_config is not None else own_qc,
                                context=name)
    notes += policy.notes
    if policy.method is None:
        notes.append("no quantization config: FP8 follows the default policy")
    notes.append("lm_head and embeddings are not included")
    linears = tuple(replace(lin, fp8=policy.is_fp8(lin.name, lin.fp8)) for lin in sharded)
    if tp > 1:
        if policy.scheme_hint == "block128":  # the checkpoint's blocks must split whole
            check_block_shards(linears, tp, context=name, fields=built["tp_fields"],
                               fix="the checkpoint is block128: use another tp")
        notes += _tp_notes(tp, built["tp_fields"], linears)
    return TowerSpec(
        name=name,
        model_type=model_type,
        hidden_size=built["hidden_size"],
        num_layers=built["num_layers"],
        layer_types=built["layer_types"],
        all_linears=linears,
        module_prefix="model.language_model." if nested else "model.",
        intermediate_size=built["intermediate_size"],
        mlp_in_scope=built["mlp_in_scope"],
        quant_method=policy.method,
        scheme_hint=policy.scheme_hint,
        static_act_hint=policy.static_act,
        channel_scale_hint=policy.channel_scale,
        notes=tuple(notes),
        tp=tp,
        tp_fields=tuple(built["tp_fields"].items()),
    )


def _tp_notes(tp: int, fields: dict[str, int], linears: tuple) -> list[str]:
    notes = [(f"tp {tp}: one GPU's shards, as vLLM splits them: column-parallel linears "
              f"(q/k/v, gate/up, GDN in_proj_*) N / {tp}, row-parallel ones (o_proj, "
              f"down_proj, GDN out_proj) K / {tp} (sizes the notes above give are the "
              "model's, unsharded); the all-reduce after each row-parallel GEMM is not "
              "modelled")]
    replicated = sorted({lin.proj for lin in linears
                         if ROLES.get((lin.kind, lin.proj)) == REPLICATED})
    if replicated:
        notes.append(f"{' / '.join(replicated)}: replicated on every rank, whole (vLLM's "
                     "ReplicatedLinear)")
    kv = fields.get(KV_HEADS)
    if kv is not None and kv < tp:
        notes.append(f"num_key_value_heads {kv} < tp {tp}: each rank holds one kv head "
                     "(k_proj / v_proj N = head_dim), replicated over "
                     f"{tp // kv} ranks, as vLLM does")
    if any(lin.bias and ROLES.get((lin.kind, lin.proj)) == ROW for lin in linears):
        notes.append("vLLM adds a row-parallel linear's bias on rank 0 only: the other ranks "
                     "run those GEMMs without it")
    return notes


def get_spec(
    name_or_path: str | os.PathLike[str],
    *,
    name: str | None = None,
    quant_config: dict[str, Any] | None = None,
    tp: int = 1,
) -> TowerSpec:
    """TowerSpec of a shipped model name or a config path (``tp``: one tensor-parallel rank's
    shards, see :func:`tower_spec_from_config`).

    A checkpoint directory's ``hf_quant_config.json`` (ModelOpt) is used when config.json has
    no quantization_config, or one naming only the modelopt method, and none is passed.
    """
    check_tp(tp)
    model, path = _resolve(name_or_path)
    config = load_config(name_or_path)
    if quant_config is None and path is not None:
        hf_quant = path.parent / "hf_quant_config.json"
        text, _ = text_config(config)
        own = config.get("quantization_config") or text.get("quantization_config")
        if hf_quant.is_file() and (not own or _names_only_modelopt(own)):
            quant_config = _parse_json(_read_text(hf_quant), str(hf_quant))
    return tower_spec_from_config(config, name=name or model, quant_config=quant_config, tp=tp)
