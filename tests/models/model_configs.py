"""Small configs shared by the models tests (a plain module: `from conftest import` would
find whichever conftest was imported first)."""

QWEN35_TEXT = {
    "model_type": "qwen3_5_text",
    "hidden_size": 512,
    "num_hidden_layers": 8,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"]
    + ["linear_attention"] * 3 + ["full_attention"],
    "linear_num_key_heads": 4,
    "linear_key_head_dim": 32,
    "linear_num_value_heads": 8,
    "linear_value_head_dim": 48,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "attn_output_gate": True,
    "intermediate_size": 1376,
}
