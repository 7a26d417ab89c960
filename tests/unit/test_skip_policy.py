"""A skipped test fails the run unless its reason is on the allow-list (tests/skip_policy.py):
the rule itself, and pytest runs of a small test folder with it, in one process and under
pytest-xdist (where the skips are reported to the controller)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from skip_policy import skip_allowed

TESTS = Path(__file__).resolve().parents[1]

SKIPPING = """
import pytest

def test_runs():
    pass

def test_needs_a_server():
    pytest.skip("PostgreSQL is not listening")

@pytest.mark.skipif(True, reason="Azurite not installed")
def test_needs_azurite():
    pass

@pytest.mark.xfail(reason="a known bug", strict=True)
def test_known_bug():
    assert False
"""
SKIPPING_MODULE = """
import pytest

pytest.skip("chromium is missing", allow_module_level=True)

def test_browser():
    pass
"""
NO_GPU = """
import pytest

def test_runs():
    pass

def test_on_a_gpu():
    pytest.skip("no GPU: torch.cuda.is_available() is False")
"""


@pytest.mark.parametrize(
    ("reason", "allowed"),
    [
        ("no GPU", True),
        ("no GPU: torch.cuda.is_available() is False", True),
        ("Skipped: no GPU on this machine", True),
        ("PostgreSQL is not listening on a port", False),
        ("Skipped: Azurite not installed", False),
        ("needs no GPU, but a server", False),
        ("", False),
    ],
)
def test_only_a_missing_gpu_may_skip(reason, allowed):
    assert skip_allowed(reason) is allowed


def run_pytest(folder: Path, files: dict[str, str], *options: str) -> subprocess.CompletedProcess:
    folder.mkdir()
    (folder / "pytest.ini").write_text("[pytest]\n")
    (folder / "conftest.py").write_text(
        "import skip_policy\n\n\ndef pytest_configure(config):\n    skip_policy.register(config)\n"
    )
    for name, text in files.items():
        (folder / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env["PYTHONPATH"] = str(TESTS)
    return subprocess.run(
        # A basetemp of its own: a pytest that picks one in /tmp/pytest-of-<user> makes that
        # folder private again, locking servers of this session run as another user out.
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--basetemp={folder / 'tmp'}", *options],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("options", [("-n", "0"), ("-n", "2")], ids=["one-process", "xdist"])
def test_a_skip_fails_the_run_and_is_named(tmp_path, options):
    run = run_pytest(tmp_path / "suite", {"test_a.py": SKIPPING, "test_browser.py": SKIPPING_MODULE}, *options)
    out = run.stdout + run.stderr
    assert run.returncode == pytest.ExitCode.TESTS_FAILED, out
    assert "skipped tests fail the run" in out
    assert "test_a.py::test_needs_a_server: PostgreSQL is not listening" in out
    assert "test_a.py::test_needs_azurite: Azurite not installed" in out
    assert "test_browser.py: chromium is missing" in out
    assert "test_known_bug" not in out.split("skipped tests fail the run", 1)[1]  # an xfail is no skip


@pytest.mark.parametrize("options", [("-n", "0"), ("-n", "2")], ids=["one-process", "xdist"])
def test_a_skip_for_a_missing_gpu_leaves_the_run_green(tmp_path, options):
    run = run_pytest(tmp_path / "suite", {"test_gpu.py": NO_GPU}, *options)
    out = run.stdout + run.stderr
    assert run.returncode == pytest.ExitCode.OK, out
    assert "1 passed, 1 skipped" in out
    assert "skipped tests fail the run" not in out
