from __future__ import annotations

from pathlib import Path

import pytest
from trace_helpers import DATA


@pytest.fixture
def data() -> Path:
    return DATA
