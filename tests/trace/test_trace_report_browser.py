"""The HTML report rendered by headless Chromium: a tower report (the committed H200 27B
capture pair) and a map-file report (a vLLM-style trace pair with a map).

Skipped where no Chromium is installed, except when FP8TOWER_REQUIRE_BROWSER=1 (.ci/run sets
it after installing Debian's chromium): then a missing browser fails the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest
from trace_helpers import DATA

from fp8tower.trace import attribute, compare, load_arm, report

#: the two arms' bar colours in the report's plots (report.py)
ARM_COLOURS = ((0x3B, 0x6E, 0xA8), (0xD9, 0x82, 0x2B))


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    if os.environ.get("FP8TOWER_REQUIRE_BROWSER") == "1":
        pytest.fail("FP8TOWER_REQUIRE_BROWSER=1 but no Chromium found (apt-get install chromium)")
    pytest.skip("headless Chromium not installed (apt-get install -y chromium)")


def _screenshot(page, tmp_path) -> np.ndarray:
    browser = _chromium()
    pytest.importorskip("matplotlib")
    pytest.importorskip("jinja2")
    Image = pytest.importorskip("PIL.Image")
    shot = tmp_path / (page.stem + ".png")
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1300,1800",
            f"--screenshot={shot}",
            page.resolve().as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    img = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert img.shape[0] >= 1000 and img.shape[1] >= 1000
    not_white = (img < 240).any(axis=2).mean()
    assert not_white > 0.03, f"screenshot of {page.name} is (nearly) blank"
    return img


def _colour_pixels(img: np.ndarray, rgb) -> int:
    return int((np.abs(img - rgb).sum(axis=2) < 30).sum())


def test_tower_report_renders(tmp_path):
    base = DATA / "h200_27b_m1"
    a = attribute(load_arm(base / "unmerged_cublaslt"))
    b = attribute(load_arm(base / "merged_triton"))
    page = report.write_html(tmp_path / "tower.html", [a, b], compare(a, b))
    assert page.read_text().count('<table class="host">') == 2  # each arm's host launches
    img = _screenshot(page, tmp_path)
    for rgb in ARM_COLOURS:  # both arms' bars of the embedded plots are on screen
        assert _colour_pixels(img, rgb) > 500


def test_map_file_report_renders(tmp_path):
    arm = load_arm(
        f"{DATA / 'vllm_2.json.gz'},{DATA / 'vllm_6.json.gz'}",
        map_path=DATA / "vllm_map.json",
        steps=(2, 6),
        step_pattern="^execute_model$",
    )
    att = attribute(arm)
    page = report.write_html(tmp_path / "map.html", [att])
    assert "<h2>Arm vllm_6" in page.read_text()
    assert '<table class="host">' in page.read_text()  # eager launches: a row per map label
    img = _screenshot(page, tmp_path)
    assert _colour_pixels(img, ARM_COLOURS[0]) > 500
