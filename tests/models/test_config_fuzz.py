"""Property-based fuzzing of the config.json reader (issue 9): hostile values end in a
ConfigError naming the field, never another traceback; an accepted spec has positive sizes."""

from __future__ import annotations

import copy
import json

import pytest
from fuzzhelpers import fuzz_settings, hostile
from hypothesis import given
from hypothesis import strategies as st
from model_configs import QWEN35_TEXT

from fp8tower.models.registry import get_spec, tower_spec_from_config
from fp8tower.models.spec import ConfigError

FUZZ = fuzz_settings(80)
HOSTILE = hostile(0.5, 512.0, "512", [["x"]], {"a": 1}, ["linear_attention"] * 8)
KEYS = sorted(QWEN35_TEXT) + ["full_attention_interval", "text_config", "quantization_config"]


@FUZZ
@given(
    edits=st.lists(st.tuples(st.sampled_from(KEYS), HOSTILE), min_size=1, max_size=3),
    layer_entry=st.one_of(st.none(), HOSTILE),
)
def test_fuzz_qwen_config(edits, layer_entry):
    cfg = copy.deepcopy(QWEN35_TEXT)
    for key, value in edits:
        cfg[key] = copy.deepcopy(value)  # sampled values are shared between examples
    if layer_entry is not None and isinstance(cfg.get("layer_types"), list) and cfg["layer_types"]:
        cfg["layer_types"][0] = layer_entry
    try:
        spec = tower_spec_from_config(cfg, name="fuzz")
    except ConfigError as e:
        assert "\n" not in str(e)
        return
    assert spec.all_linears
    for lin in spec.all_linears:
        assert isinstance(lin.n, int) and 0 < lin.n < 2**63
        assert isinstance(lin.k, int) and 0 < lin.k < 2**63


def test_deeply_nested_and_non_utf8_config_files(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ConfigError, match="nested too deeply"):
        get_spec(deep)
    binary = tmp_path / "bin.json"
    binary.write_bytes(b'{"model_type": "\xff\xfe"}')
    with pytest.raises(ConfigError, match="UTF-8"):
        get_spec(binary)
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(QWEN35_TEXT))
    assert get_spec(ok)
