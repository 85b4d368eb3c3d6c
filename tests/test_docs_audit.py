"""The docs audit (2026-12-05): what README.md and docs/ promise, checked against the code."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from torch import nn
from typer.testing import CliRunner

from fp8tower import Fp8Linear
from fp8tower.cli import app

_ROOT = Path(__file__).resolve().parents[1]


def _run(*args):
    r = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "250"})
    assert "Traceback" not in r.output and r.exception is None, r.output
    return r


# ---------------------------------------------------------------- convert: a kept group


@pytest.mark.parametrize("ignore,reason", [
    # one member of layer 0's qkv in the ignore list: that group is kept, with no scheme,
    # beside layer 1's block128 one (sorting the rows compared None with "block128")
    (("lm_head", "model.layers.0.self_attn.q_proj"), "the ignore list covers only q_proj"),
    (("lm_head", "model.layers.0"), "not quantized in the checkpoint"),
])
def test_convert_reports_a_group_kept_beside_quantized_ones(tmp_path, ignore, reason):
    """docs/models.md: an ignore list that covers only some members of a group ... and
    `fp8tower convert` reports the group as kept. It raised a TypeError instead (no table,
    no --json)."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(_ROOT / "tests" / "checkpoint"))
    from ckpt_writer import build, linear_shapes, save

    spec = build("block_fp8")
    fqns = tuple(f for f in linear_shapes(spec.config)
                 if any(f == i or f.startswith(i + ".") for i in ignore))
    src = save(build("block_fp8", ignore=ignore, ignored_fqns=fqns), tmp_path / "ck")
    out = tmp_path / "report.json"
    r = _run("convert", src, "--json", out)
    assert r.exit_code == 0, r.output
    rows = [line for line in r.output.splitlines() if "self_attn.qkv_proj" in line]
    assert any("keep" in row and "│ - " in row for row in rows), r.output  # no scheme: "-"
    assert any("keep" in row and "block128" in row for row in rows), r.output
    assert reason in " ".join(r.output.split())
    groups = json.loads(out.read_text())["checkpoint"]["merge_groups"]
    kept = [g for g in groups if g["parent"] == "model.layers.0.self_attn"]
    assert [(g["action"], g["scheme"], g["reason"].startswith(reason)) for g in kept] == [
        ("keep", None, True)]


# ---------------------------------------------------------------- docs/trace.md's manifest


def _doc_manifest() -> dict:
    text = (_ROOT / "docs" / "trace.md").read_text()
    section = text[text.index("### manifest.json"):]
    return json.loads(re.search(r"```json\n(.*?)```", section, re.DOTALL).group(1))


def _missing_keys(doc, real, path="") -> list[str]:
    """Keys of ``doc`` (nested dicts, list items against the real list's) that ``real``
    lacks."""
    if isinstance(doc, dict) and isinstance(real, dict):
        out = [f"{path}.{k}" for k in doc if k not in real]
        for k in doc.keys() & real.keys():
            out += _missing_keys(doc[k], real[k], f"{path}.{k}")
        return out
    if isinstance(doc, list) and isinstance(real, list) and real:
        return [m for item in doc for m in _missing_keys(item, real[0], f"{path}[]")]
    return []


def test_the_manifest_example_is_what_a_capture_writes(tmp_path):
    """docs/trace.md's manifest.json example: every key it shows (top level, ops, meta) is
    one a real capture writes (it showed a "captured" meta key no capture writes)."""
    r = _run("trace", "capture", "--model", "tiny-hybrid", "--arm", "merged", "--steps", "2,6",
             "--out", tmp_path / "cap")
    assert r.exit_code == 0, r.output
    real = json.loads((tmp_path / "cap" / "manifest.json").read_text())
    doc = _doc_manifest()
    assert _missing_keys(doc, real) == []
    assert doc["ops"] and doc["meta"]  # the parser found the example, not an empty one
    assert {op["label"] for op in doc["ops"]} <= {op["label"] for op in real["ops"]}
    assert {op["group"] for op in doc["ops"]} <= {op["group"] for op in real["ops"]}


# ---------------------------------------------------------------- load_state_dict's key


def _fp8(act_scale=None):
    lin = nn.Linear(64, 32)
    return Fp8Linear.from_linear(lin, "per_tensor", act_scale=act_scale)


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("name,bad", [("weight_scale", 0.0), ("input_scale", float("nan"))])
def test_a_bad_scale_in_load_state_dict_names_its_key(nested, name, bad):
    """README: a bad scale in a state dict is reported with its key. It named the module
    only (and a top-level Fp8Linear, neither)."""
    m = _fp8(act_scale=0.02)
    model = nn.Module()
    model.layer = m
    target = model if nested else m
    sd = {k: v.clone() for k, v in target.state_dict().items()}
    key = f"layer.{name}" if nested else name
    sd[key].fill_(bad)
    with pytest.raises(RuntimeError, match=rf"state_dict key {re.escape(key)}: .*must be finite "
                                           r"and > 0"):
        target.load_state_dict(sd)


@pytest.mark.parametrize("name,bad,reword", [
    ("input_scale", float("nan"), "the static activation scale: {}"),
    ("weight_scale", 0.0, "act_scale is fine; {}"),
])
def test_a_bad_scale_is_named_by_its_field_not_its_message(monkeypatch, name, bad, reword):
    """The key was guessed from the message ("act_scale" first: input_scale): a reworded
    message named the wrong key. Now it follows the ScaleError's field."""
    from fp8tower.nn import linear

    real = linear.Fp8Weight

    def reworded(*args, **kw):  # Fp8Weight's checks, the same error with another message
        try:
            return real(*args, **kw)
        except ValueError as e:
            e.args = (reword.format(e),)
            raise

    m = _fp8(act_scale=0.02)
    sd = {k: v.clone() for k, v in m.state_dict().items()}
    sd[name].fill_(bad)
    monkeypatch.setattr(linear, "Fp8Weight", reworded)
    with pytest.raises(RuntimeError, match=rf"state_dict key {name}: {reword[:10]}"):
        m.load_state_dict(sd)


@pytest.mark.parametrize("field,where", [
    ("packed", "state_dict key layer.packed: odd"),  # a field with no buffer: as it is
    (None, r"Fp8Linear\(.*\) \(state_dict prefix 'layer.'\): odd"),  # no field: the module
])
def test_a_load_error_without_a_known_field_guesses_no_key(monkeypatch, field, where):
    from fp8tower.formats import ScaleError
    from fp8tower.nn import linear

    real = linear.Fp8Weight

    def refusing(*args, check_values=True, **kw):
        if check_values:
            raise ValueError("odd") if field is None else ScaleError("odd", field)
        return real(*args, check_values=check_values, **kw)

    model = nn.Module()
    model.layer = _fp8(act_scale=0.02)
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    monkeypatch.setattr(linear, "Fp8Weight", refusing)
    with pytest.raises(RuntimeError, match=where):
        model.load_state_dict(sd)
