"""A transformers model of a shipped or local config with random weights, for benchmarks
and traces (`bench generate`, `trace capture-model`, benchmarks/convert_27b.py).

Parameters are created on the meta device and then drawn once on the target device
(N(0, 0.02), norms included): no CPU-side init, so the Qwen3.5-27B-shaped model
materializes in seconds on an H200 and never exists twice. Buffers (rotary tables) are
computed as usual and moved.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

# Model types whose decode step `bench generate` and `trace capture-model` cannot run: they
# prefill into a StaticCache and replay one step, while DeepSeek-V4's compressor caches have no
# static form (transformers 5.25: StaticCache refused, _can_compile_fullgraph False) and its
# compressors fire every compress_rate tokens, so no two decode steps launch alike (a paired
# trace's difference assumes they do; 2026-12-06 audit: a raw KeyError after the build before)
NO_STATIC_DECODE = {
    "deepseek_v4": ("its compressed-attention caches have no static form (transformers' "
                    "StaticCache refuses them) and its compressors run every compress_rate "
                    "tokens, so its decode steps differ from one another; `bench tower "
                    "--model` and `tune --model` take its config"),
}


def text_config(name: str, layers: int | None = None):
    """A transformers config of the text decoder of ``name`` (a shipped config name or a
    config.json path); ``layers`` keeps only the first N decoder layers. A decode step needs
    an attention layer: where the first N are all linear attention, the last kept one becomes
    the model's first attention layer type."""
    from ..models import ConfigError
    from ..models.registry import (
        BUILDERS,
        SUPPORTED_MODEL_TYPES,
        load_config,
        tower_spec_from_config,
    )
    from ..models.registry import text_config as text_part
    from ..provenance import package_version
    from .requires import transformers as _transformers

    transformers = _transformers()

    raw = load_config(name)
    text, nested = text_part(raw)
    if (text.get("model_type") or raw.get("model_type")) in BUILDERS:
        # the fields its tower reads, checked as `bench tower` checks them (naming the
        # field): a missing hidden_size took transformers' default (4096) here (2026-12-05
        # audit). Other types (qwen3_moe, gemma2, phi3, ...) are built by transformers as given.
        tower_spec_from_config(raw, name=str(name))
    d = {k: v for k, v in text.items() if not k.startswith("_")}
    if layers is not None:
        total = d.get("num_hidden_layers")
        if not 1 <= layers <= (total or layers):
            raise ValueError(f"layers {layers}: {name} has {total} decoder layers "
                             f"(expected 1 to {total})")
        d["num_hidden_layers"] = layers
        types = d.get("layer_types")
        if isinstance(types, list):
            kept = types[:layers]
            attention = [t for t in types if t != "linear_attention"]
            if attention and not any(t != "linear_attention" for t in kept):
                kept[-1] = attention[0]  # transformers' masks need one attention layer
            d["layer_types"] = kept
    model_type = d.pop("model_type", None) or raw.get("model_type")
    if not isinstance(model_type, str):  # the message `fp8tower dispatch --model` gives
        raise ConfigError("model_type", model_type, f"one of {', '.join(SUPPORTED_MODEL_TYPES)}",
                          context=name)
    if model_type in NO_STATIC_DECODE:
        raise ValueError(f"{name}: model_type {model_type!r} is not run step by step here: "
                         f"{NO_STATIC_DECODE[model_type]}")
    known = transformers.CONFIG_MAPPING
    # a multimodal config's text part: Qwen3.5 registers its own "<type>_text" config; a
    # llava-style one nests a plain "llama" (no "llama_text" exists)
    if nested and not model_type.endswith("_text") and f"{model_type}_text" in known:
        model_type += "_text"
    if model_type not in known:  # its ValueError lists every type transformers knows
        raise ValueError(f"transformers {package_version('transformers')} has no model_type "
                         f"{model_type!r} (the text decoder of {name})")
    try:
        return transformers.AutoConfig.for_model(model_type, **d)
    except (KeyError, ValueError, TypeError, *_strict_dataclass_errors()) as e:
        raise ValueError(f"transformers {package_version('transformers')} cannot build "
                         f"model_type {model_type!r} of {name}: {e}") from None


def _strict_dataclass_errors() -> tuple[type[Exception], ...]:
    """huggingface_hub's field validation error (a wrong type in config.json), where it has
    one (it is no ValueError)."""
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:
        return ()
    return (StrictDataclassError,)


class NotEnoughMemory(ValueError):
    """A model's weights would not fit the memory free on its device (raised before any of
    them is allocated)."""


def free_bytes(device: torch.device) -> int | None:
    """Memory free for new tensors on ``device``: the GPU's free memory and the blocks torch's
    allocator caches unused, or on the CPU the kernel's MemAvailable, capped by a cgroup v2
    limit (a container's); None if unknown."""
    if device.type == "cuda":
        unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return torch.cuda.mem_get_info(device)[0] + unused
    if device.type != "cpu":
        return None
    free = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    free = int(line.split()[1]) * 1024
    except OSError:
        return None
    try:
        cgroup = Path("/sys/fs/cgroup")
        limit = (cgroup / "memory.max").read_text().strip()
        used = int((cgroup / "memory.current").read_text())
        if limit != "max":
            free = min(free, int(limit) - used) if free is not None else int(limit) - used
    except (OSError, ValueError):
        pass
    return free


def cache_kwarg(model: nn.Module) -> str:
    """The keyword ``model``'s forward takes its KV cache by: ``cache`` from transformers 5.25
    (``past_key_values`` warns there, deprecated), ``past_key_values`` before (the GPU
    machine's 5.17)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def weight_bytes(model: nn.Module) -> int:
    """Bytes of ``model``'s parameters, tied ones once."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def model_bytes(config, dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes of the weights of ``config``'s causal LM in ``dtype``, built on the meta device
    (no memory; about a second for an 8B model)."""
    from .pretrained import params_on_meta
    from .requires import transformers as _transformers

    transformers = _transformers()

    with params_on_meta():
        return weight_bytes(transformers.AutoModelForCausalLM.from_config(config, dtype=dtype))


def random_model(config, device: torch.device | str, *, dtype: torch.dtype = torch.bfloat16,
                 seed: int = 0) -> nn.Module:
    """The causal LM of ``config`` with N(0, 0.02) weights drawn on ``device``, in eval mode."""
    from .pretrained import params_on_meta
    from .requires import transformers as _transformers

    transformers = _transformers()

    with params_on_meta():
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    need = weight_bytes(model)
    free = free_bytes(torch.device(device))
    if free is not None and need > free:  # before allocating: else the OOM is a traceback
        hint = ("a smaller model (e.g. tiny-hybrid) or a GPU with more memory"
                if torch.device(device).type == "cuda"
                else "a GPU or a smaller model (e.g. tiny-hybrid)")
        raise NotEnoughMemory(f"{type(model).__name__} of this config needs {need / 1e9:.1f} GB "
                              f"of {dtype} weights on {device}, which has {free / 1e9:.1f} GB "
                              f"free: use {hint}")
    g = torch.Generator(device=device).manual_seed(seed)
    drawn: dict[int, nn.Parameter] = {}  # a tied parameter (tie_word_embeddings) drawn once
    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) not in drawn:
                t = torch.empty(p.shape, dtype=p.dtype, device=device)
                t.normal_(0.0, 0.02, generator=g)
                drawn[id(p)] = nn.Parameter(t, requires_grad=False)
            mod._parameters[name] = drawn[id(p)]
    return model.to(device).eval()
