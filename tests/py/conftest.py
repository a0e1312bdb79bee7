import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def mox_bin() -> Path:
    return Path(os.environ["MOX_BIN"])


@pytest.fixture(scope="session")
def tool_dir() -> Path:
    """Folder of the helper binaries built from tests/tool/*.cpp (quant_tool, gguf_tool, ...)."""
    return Path(os.environ["MOX_TOOL_DIR"])
