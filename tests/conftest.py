import os

import pytest
import torch


HAS_CUDA = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def interpret(monkeypatch):
    """Run Triton kernels on the CPU interpreter (the env var is read at launch)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pytest.importorskip("triton")
    yield


# CLI output must not depend on the terminal that runs the tests (rich wraps at COLUMNS).
os.environ["COLUMNS"] = "200"
os.environ.setdefault("FP8TOWER_CACHE_DIR", os.path.join(os.path.dirname(__file__), ".cache"))
