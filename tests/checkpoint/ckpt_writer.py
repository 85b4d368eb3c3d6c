"""Write small checkpoints in each format the way the real ones ship them (tensor names,
dtypes, shapes, config JSON), from random weights.

The quantization here is plain torch, written independently of fp8tower.formats, so the tests
compare fp8tower's loader against it. Usage:

    spec = build("compressed_tensors", preset="FP8_BLOCK")   # tensors + config, editable
    spec.tensors[...] = ...                                   # (malformed cases)
    save(spec, tmp_path, shards=2)

``spec.reference[fqn]`` is what the linear must dequantize to: ``(fp8 data, decode scale
broadcastable to [N, K] after expand_ref, static input scale or None)``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

E4M3_MAX = 448.0

# A tiny Qwen3 (the real config.json fields transformers' Qwen3Config reads). N and K are not
# multiples of 128, so block128 has partial blocks: hidden 192 = 1.5 blocks, intermediate 320.
QWEN3_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 192,
    "intermediate_size": 320,
    "num_hidden_layers": 2,
    "num_attention_heads": 3,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "vocab_size": 256,
    "attention_bias": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}

PROJS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
         "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
# Projections that read the same input: a static checkpoint calibrates one input_scale for them
# (ModelOpt and llm-compressor observe the one tensor they all read)
SIBLINGS = (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
            ("mlp.gate_proj", "mlp.up_proj"))


def input_of(fqn: str) -> str:
    """The first sibling of ``fqn`` (itself when it has none): who shares its input."""
    for group in SIBLINGS:
        for member in group:
            if fqn.endswith("." + member):
                return fqn[: -len(member)] + group[0]
    return fqn


def linear_shapes(cfg: dict) -> dict[str, tuple[int, int]]:
    h, i, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    per = {"self_attn.q_proj": (q, h), "self_attn.k_proj": (kv, h), "self_attn.v_proj": (kv, h),
           "self_attn.o_proj": (h, q), "mlp.gate_proj": (i, h), "mlp.up_proj": (i, h),
           "mlp.down_proj": (h, i)}
    return {f"model.layers.{layer}.{p}": s for layer in range(cfg["num_hidden_layers"])
            for p, s in per.items()}


@dataclass
class Spec:
    format: str
    config: dict
    tensors: dict[str, torch.Tensor]
    reference: dict[str, tuple] = field(default_factory=dict)  # fqn -> (data, scale, act)
    ignored: list[str] = field(default_factory=list)  # fqns left in bf16
    hf_quant_config: dict | None = None


# --- independent reference quantization (plain torch) -------------------------------------


def q_tensor(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    s = w.abs().max().float() / E4M3_MAX
    return (w.float() / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), s


def q_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    s = w.abs().amax(dim=1, keepdim=True).float() / E4M3_MAX  # [N, 1]
    return (w.float() / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), s


def q_block(w: torch.Tensor, b: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    n, k = w.shape
    nb, kb = math.ceil(n / b), math.ceil(k / b)
    s = torch.empty(nb, kb)
    q = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    for i in range(nb):
        for j in range(kb):
            blk = w[i * b:(i + 1) * b, j * b:(j + 1) * b].float()
            s[i, j] = blk.abs().max() / E4M3_MAX
            q[i * b:(i + 1) * b, j * b:(j + 1) * b] = (blk / s[i, j]).clamp(
                -E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, s


def expand_ref(data: torch.Tensor, scale: torch.Tensor, blocks: bool | None = None) -> torch.Tensor:
    """Dequantize with plain loops over blocks/broadcasting (independent of fp8tower).
    ``blocks``: the scale is [ceil(N/128), ceil(K/128)] (None: guessed from its shape, which
    cannot tell a K <= 128 block scale [nb, 1] from a per-channel [N, 1] one)."""
    d = data.float()
    s = scale.float()
    if blocks is None:
        blocks = s.dim() == 2 and s.shape[1] != 1
    if blocks:
        out = torch.empty_like(d)
        for i in range(s.shape[0]):
            for j in range(s.shape[1]):
                out[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = (
                    d[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] * s[i, j])
        return out
    if s.numel() == 1:
        return d * s.reshape(())
    return d * s.reshape(-1, 1)


# (format, preset, activation mode of OracleLinear)
CASES = [("modelopt", "FP8", "static"), ("modelopt", "FP8_PER_CHANNEL_PER_TOKEN", "token"),
         ("compressed_tensors", "FP8", "static"), ("compressed_tensors", "FP8_DYNAMIC", "token"),
         ("compressed_tensors", "FP8_BLOCK", "group"), ("block_fp8", "FP8", "group"),
         ("fp8_per_tensor", "static", "static"), ("fp8_per_tensor", "dynamic", "tensor")]


def _fq(t, s):
    return (t / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float() * s


class OracleLinear(torch.nn.Module):
    """A linear holding a dequantized weight, its input fake-quantized in plain torch:
    mode 'static' (per-tensor, given scale), 'tensor' (per-tensor, amax of the whole x),
    'token' (per row), 'group' (1x128)."""

    def __init__(self, w, act, mode, bias=None):
        super().__init__()
        self.w, self.act, self.mode, self.b = w, act, mode, bias

    def forward(self, x):
        x2 = x.reshape(-1, x.shape[-1]).float()
        if self.mode == "static":
            x2 = _fq(x2, self.act.float().reshape(()))
        elif self.mode == "tensor":
            x2 = _fq(x2, x2.abs().amax() / E4M3_MAX)
        elif self.mode == "token":
            x2 = _fq(x2, x2.abs().amax(dim=1, keepdim=True) / E4M3_MAX)
        else:
            m, k = x2.shape
            kb = -(-k // 128)
            pad = torch.zeros(m, kb * 128)
            pad[:, :k] = x2
            s = pad.abs().view(m, kb, 128).amax(-1) / E4M3_MAX
            x2 = _fq(pad.view(m, kb, 128), s[..., None]).view(m, -1)[:, :k]
        return F.linear(x2, self.w).to(x.dtype).reshape(*x.shape[:-1], -1)



# --- building ------------------------------------------------------------------------------


def base_tensors(cfg: dict, seed: int, dtype=torch.bfloat16) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h, v, hd = cfg["hidden_size"], cfg["vocab_size"], cfg["head_dim"]
    t = {"model.embed_tokens.weight": torch.randn(v, h, generator=g).to(dtype),
         "model.norm.weight": (1 + 0.1 * torch.randn(h, generator=g)).to(dtype),
         "lm_head.weight": (0.05 * torch.randn(v, h, generator=g)).to(dtype)}
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        for norm in ("input_layernorm", "post_attention_layernorm"):
            t[f"{p}.{norm}.weight"] = (1 + 0.1 * torch.randn(h, generator=g)).to(dtype)
        for norm in ("self_attn.q_norm", "self_attn.k_norm"):
            t[f"{p}.{norm}.weight"] = (1 + 0.1 * torch.randn(hd, generator=g)).to(dtype)
    for fqn, (n, k) in linear_shapes(cfg).items():
        # rows of different magnitude so per-channel and per-block scales differ
        rows = torch.exp(torch.randn(n, 1, generator=g))
        t[f"{fqn}.weight"] = (0.02 * rows * torch.randn(n, k, generator=g)).to(dtype)
    return t


def _ct_group(preset: str) -> dict:
    w = {"num_bits": 8, "type": "float", "symmetric": True, "group_size": None,
         "block_structure": None, "dynamic": False, "actorder": None, "observer": "minmax",
         "observer_kwargs": {}}
    a = dict(w, observer=None)
    if preset == "FP8":
        w["strategy"], a["strategy"] = "tensor", "tensor"
        a["dynamic"], a["observer"] = False, "minmax"
    elif preset == "FP8_DYNAMIC":
        w["strategy"], a["strategy"], a["dynamic"] = "channel", "token", True
    elif preset == "FP8_BLOCK":
        w["strategy"], w["block_structure"] = "block", [128, 128]
        a["strategy"], a["group_size"], a["dynamic"] = "group", 128, True
    else:
        raise ValueError(preset)
    return {"targets": ["Linear"], "weights": w, "input_activations": a,
            "output_activations": None, "format": "float-quantized"}


def build(fmt: str, *, preset: str = "FP8", ignore: tuple[str, ...] = ("lm_head",),
          ignored_fqns: tuple[str, ...] = (), scale_dtype=torch.float32, seed: int = 0,
          config_in: str = "config", cfg: dict | None = None,
          shared_input_scales: bool = True) -> Spec:
    """fmt: modelopt (preset FP8 | FP8_PER_CHANNEL_PER_TOKEN; config_in "config" or
    "hf_quant_config"), compressed_tensors (preset FP8 | FP8_DYNAMIC | FP8_BLOCK), block_fp8,
    fp8_per_tensor (AutoFP8's; preset static | dynamic, its activation_scheme), unquantized.
    ``ignore`` goes into the config's ignore list as is; ``ignored_fqns`` are the linears
    left in bf16 (list them in ``ignore`` too, in the format's own syntax). Static
    input scales: siblings share one, as calibrated checkpoints do (``shared_input_scales``;
    False: one drawn per linear)."""
    cfg = json.loads(json.dumps(cfg or QWEN3_CONFIG))
    t = base_tensors(cfg, seed)
    spec = Spec(fmt, cfg, t, ignored=list(ignored_fqns))
    if fmt == "unquantized":
        return spec
    g = torch.Generator().manual_seed(seed + 2)
    acts: dict[str, float] = {}
    for fqn in linear_shapes(cfg):
        if fqn in ignored_fqns:
            continue
        w = t[f"{fqn}.weight"].float()
        act = None
        if fmt == "block_fp8" or (fmt == "compressed_tensors" and preset == "FP8_BLOCK"):
            q, s = q_block(w)
            sname = "weight_scale_inv" if fmt == "block_fp8" else "weight_scale"
        elif preset in ("FP8_DYNAMIC", "FP8_PER_CHANNEL_PER_TOKEN"):
            q, s = q_channel(w)
            if fmt == "modelopt":
                s = s.reshape(-1)  # ModelOpt per-channel: [N]
            sname = "weight_scale"
        else:
            q, s = q_tensor(w)
            # ModelOpt scalars are shape []; compressed-tensors tensor strategy (1,)
            s = s.reshape(()) if fmt in ("modelopt", "fp8_per_tensor") else s.reshape(1)
            sname = "weight_scale"
            if fmt == "fp8_per_tensor" and preset == "dynamic":
                t[f"{fqn}.weight"], t[f"{fqn}.{sname}"] = q, s.float()
                spec.reference[fqn] = (q, s, None)
                continue
            key = input_of(fqn) if shared_input_scales else fqn
            act = torch.tensor(acts.setdefault(key, 0.5 + torch.rand(1, generator=g).item()))
            act = act / E4M3_MAX * 4
            act = act.reshape(()) if fmt in ("modelopt", "fp8_per_tensor") else act.reshape(1)
            t[f"{fqn}.input_scale"] = act.float()
        s = s.to(scale_dtype if fmt == "compressed_tensors" else torch.float32)
        t[f"{fqn}.weight"] = q
        t[f"{fqn}.{sname}"] = s
        spec.reference[fqn] = (q, s, act)
    if fmt == "modelopt":
        if config_in == "config":
            cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": preset,
                                          "kv_cache_quant_algo": None, "ignore": list(ignore),
                                          "producer": {"name": "modelopt", "version": "0.37.0"}}
        else:
            spec.hf_quant_config = {"producer": {"name": "modelopt", "version": "0.37.0"},
                                    "quantization": {"quant_algo": preset,
                                                     "kv_cache_quant_algo": None,
                                                     "exclude_modules": list(ignore)}}
    elif fmt == "compressed_tensors":
        cfg["quantization_config"] = {
            "quant_method": "compressed-tensors", "format": "float-quantized",
            "quantization_status": "compressed", "config_groups": {"group_0": _ct_group(preset)},
            "ignore": list(ignore), "kv_cache_scheme": None, "global_compression_ratio": None,
            "sparsity_config": {}, "version": "0.12.2"}
    elif fmt == "block_fp8":
        cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                      "activation_scheme": "dynamic",
                                      "weight_block_size": [128, 128],
                                      "modules_to_not_convert": list(ignore)}
    elif fmt == "fp8_per_tensor":  # AutoFP8's save_quantized
        if preset not in ("static", "dynamic"):
            raise ValueError(preset)
        cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": preset,
                                      "ignored_layers": list(ignore)}
    else:
        raise ValueError(fmt)
    return spec


def save(spec: Spec, path: Path, *, shards: int = 1) -> Path:
    """Write config.json, (hf_quant_config.json), the tensors in ``shards`` files (an index
    when more than one), as transformers/ModelOpt/llm-compressor name them."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(spec.config, indent=2))
    if spec.hf_quant_config is not None:
        (path / "hf_quant_config.json").write_text(json.dumps(spec.hf_quant_config, indent=2))
    names = sorted(spec.tensors)
    if shards == 1:
        save_file({n: spec.tensors[n].contiguous() for n in names},
                  str(path / "model.safetensors"), metadata={"format": "pt"})
        return path
    weight_map, total = {}, 0
    for i in range(shards):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: spec.tensors[n].contiguous() for j, n in enumerate(names) if j % shards == i}
        save_file(part, str(path / fname), metadata={"format": "pt"})
        for n, tt in part.items():
            weight_map[n] = fname
            total += tt.numel() * tt.element_size()
    (path / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return path


# --- Qwen3.5 as its checkpoints ship: Qwen3_5ForConditionalGeneration's names -----------------

# A tiny Qwen3.5 (config.json as the real ones: model_type qwen3_5, text_config, vision_config).
# Chosen so that some groups are 128-aligned (in_proj_qkv 2*2*32 + 4*32 = 256, in_proj_z 128,
# gate/up 256, q_proj with its output gate 2*64*2 = 256) and some are not (k/v 64, b/a 4).
QWEN3_5_CONFIG = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "tie_word_embeddings": False,
    "image_token_id": 250, "video_token_id": 251,
    "vision_start_token_id": 252, "vision_end_token_id": 253,
    "text_config": {
        "model_type": "qwen3_5_text", "vocab_size": 256, "hidden_size": 160,
        "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 64, "layer_types": ["linear_attention",
                                                                  "full_attention"],
        "linear_num_key_heads": 2, "linear_key_head_dim": 32, "linear_num_value_heads": 4,
        "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "tie_word_embeddings": False,
        "rms_norm_eps": 1e-6, "max_position_embeddings": 128, "dtype": "bfloat16",
    },
    "vision_config": {"depth": 1, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2,
                      "out_hidden_size": 160, "patch_size": 16, "spatial_merge_size": 2,
                      "temporal_patch_size": 2, "in_channels": 3},
}
QWEN3_5_PREFIX = "model.language_model."  # where the real checkpoints keep the text model


def qwen3_5_text_tensors(seed: int = 0, dtype=torch.bfloat16) -> tuple[dict, list[str]]:
    """The causal LM's tensors in its own names (model.*, lm_head.*), random (std 0.08 for
    matrices so that logits vary), and the names of its linears (lm_head excluded)."""
    import transformers

    cfg = dict(QWEN3_5_CONFIG["text_config"])
    config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.08)
    linears = [n for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and n != "lm_head"]
    return {n: t.to(dtype) for n, t in model.state_dict().items()}, linears


QWEN3_5_NOT_QUANTIZED = ("in_proj_a", "in_proj_b")  # as Qwen's own FP8 checkpoints keep them


def build_qwen3_5(fmt: str = "unquantized", seed: int = 0) -> Spec:
    """A Qwen3.5 checkpoint in its real names: the text model under model.language_model.*,
    a vision tower under model.visual.* and an MTP head under mtp.* (bf16, not part of the
    causal LM). fmt "block_fp8": linears block-quantized except lm_head, the vision tower,
    mtp and in_proj_a/b, listed in modules_to_not_convert by their stored names."""
    cfg = json.loads(json.dumps(QWEN3_5_CONFIG))
    text, linears = qwen3_5_text_tensors(seed)
    g = torch.Generator().manual_seed(seed + 1)
    t = {(QWEN3_5_PREFIX + n[len("model."):] if n.startswith("model.") else n): v
         for n, v in text.items()}
    for name, shape in (("model.visual.blocks.0.attn.qkv.weight", (192, 64)),
                        ("model.visual.blocks.0.mlp.linear_fc1.weight", (128, 64)),
                        ("model.visual.merger.linear_fc1.weight", (256, 256)),
                        ("mtp.fc.weight", (160, 320)),
                        ("mtp.layers.0.mlp.gate_proj.weight", (256, 160))):
        t[name] = (0.05 * torch.randn(*shape, generator=g)).to(torch.bfloat16)
    spec = Spec(fmt, cfg, t)
    stored_linears = [QWEN3_5_PREFIX + n[len("model."):] for n in linears]
    if fmt == "unquantized":
        return spec
    if fmt != "block_fp8":
        raise ValueError(fmt)
    keep = [n for n in stored_linears if n.rsplit(".", 1)[-1] in QWEN3_5_NOT_QUANTIZED]
    for fqn in stored_linears:
        if fqn in keep:
            continue
        q, s = q_block(t[f"{fqn}.weight"].float())
        t[f"{fqn}.weight"], t[f"{fqn}.weight_scale_inv"] = q, s
        spec.reference[fqn] = (q, s, None)
    spec.ignored = keep
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                  "activation_scheme": "dynamic", "weight_block_size": [128, 128],
                                  "modules_to_not_convert": ["lm_head", "model.visual", "mtp",
                                                             *keep]}
    return spec


def write_qwen3_moe_block_fp8(path):
    """A one-layer qwen3_moe block-FP8 checkpoint in the hub's layout: each of its 2 experts'
    gate / up / down a linear of its own (transformers fuses them into 3-D parameters)."""
    import transformers

    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
           "hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 128,
           "num_experts": 2, "num_experts_per_tok": 1, "num_hidden_layers": 1,
           "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
           "vocab_size": 64, "decoder_sparse_step": 1, "mlp_only_layers": [],
           "tie_word_embeddings": False, "max_position_embeddings": 64}
    c = dict(cfg)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(c.pop("model_type"), **c))
    tensors = {}
    for k, v in model.state_dict().items():
        v = v.to(torch.bfloat16)
        if k.endswith("experts.gate_up_proj"):  # fused in transformers, one per expert on disk
            for e in range(v.shape[0]):
                g, u = v[e].chunk(2)
                tensors[k.replace("gate_up_proj", f"{e}.gate_proj.weight")] = g.contiguous()
                tensors[k.replace("gate_up_proj", f"{e}.up_proj.weight")] = u.contiguous()
        elif k.endswith("experts.down_proj"):
            for e in range(v.shape[0]):
                tensors[k.replace("down_proj", f"{e}.down_proj.weight")] = v[e].contiguous()
        else:
            tensors[k] = v
    for k in [k for k in tensors if k.endswith("proj.weight")]:
        q, s = q_block(tensors[k].float())
        tensors[k], tensors[k[:-len("weight")] + "weight_scale_inv"] = q, s
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                  "activation_scheme": "dynamic",
                                  "weight_block_size": [128, 128],
                                  "modules_to_not_convert": ["lm_head", "mlp.gate"]}
    return save(Spec("block_fp8", cfg, tensors), path)
