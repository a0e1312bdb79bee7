import os
import stat
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def mox_bin() -> Path:
    return Path(os.environ["MOX_BIN"])


@pytest.fixture(scope="session")
def tool_dir() -> Path:
    """Folder of the helper binaries built from tests/tool/*.cpp (quant_tool, gguf_tool, ...)."""
    return Path(os.environ["MOX_TOOL_DIR"])


@pytest.fixture(scope="session")
def device_args() -> list:
    """Extra flags that put the model on another device: MOX_TEST_DEVICE=cuda runs the end-to-end
    tests that use this fixture on the GPU (the GPU machine's run; CI has no GPU and leaves it unset)."""
    device = os.environ.get("MOX_TEST_DEVICE", "")
    return ["--device", device] if device else []


@pytest.fixture
def stand_in(tmp_path):
    """Writes an executable stand-in program (a script's text, e.g. a fake mox) into tmp_path and
    returns a function that gives its path."""
    def write(text: str, name: str = "mox") -> Path:
        path = tmp_path / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return path
    return write
