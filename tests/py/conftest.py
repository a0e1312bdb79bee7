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


# The architecture golden tests (test_goldens_<arch>.py): each module names its folder GOLDEN (and
# optionally OUTTYPES); these fixtures convert it and run `mox logits` on the device under test.
# (test_goldens.py and test_hybrid.py define their own.)
@pytest.fixture(scope="module")
def ids_file(request, tmp_path_factory):
    import json
    golden = request.module.GOLDEN
    path = tmp_path_factory.mktemp("ids") / "ids.txt"
    path.write_text(",".join(map(str, json.loads((golden / "goldens.json").read_text())["prompt_ids"])))
    return path


@pytest.fixture(scope="module")
def converted(request, mox_bin, tmp_path_factory):
    from goldens_util import convert_all
    outtypes = getattr(request.module, "OUTTYPES", ["f32", "q8_0"])
    return convert_all(mox_bin, request.module.GOLDEN, tmp_path_factory.mktemp("conv"), outtypes)


@pytest.fixture(scope="module")
def run_logits(device_args):
    from goldens_util import logits

    def run(mox_bin, model, ids_file, out, *extra):
        return logits(mox_bin, model, ids_file, out, device_args, *extra)
    return run


# Skips are part of the result: every skip must match a pattern in expected_skips.txt (one line per
# expected skip: a pattern of the test id where only * is a wildcard, then the reason it may skip; lines starting with
# "cuda:" apply only to the GPU run, MOX_TEST_DEVICE=cuda). An unexpected skip (a missing package, a
# claim silently dropped) fails the session.
_skipped = []


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skipped.append((report.nodeid, reason))


def _expected_skip_patterns():
    on_gpu = bool(os.environ.get("MOX_TEST_DEVICE"))
    patterns = []
    for line in (Path(__file__).with_name("expected_skips.txt")).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("cuda:"):
            if not on_gpu:
                continue
            line = line[len("cuda:"):].strip()
        patterns.append(line.split()[0])
    return patterns


def _matches(nodeid, pattern):
    """`*` matches any run of characters; everything else (brackets of parametrized ids too) is literal."""
    import re
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), nodeid) is not None


def pytest_sessionfinish(session, exitstatus):
    patterns = _expected_skip_patterns()
    unexpected = [(n, r) for n, r in _skipped if not any(_matches(n, p) for p in patterns)]
    if unexpected:
        print("\nunexpected skips (tests/py/expected_skips.txt lists the expected ones):")
        for nodeid, reason in unexpected:
            print(f"  {nodeid}: {reason}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
