"""A reader's shell: the README's and the guides' commands run exactly as written (read from
the Markdown) with bash, in a copy of the checkout, with none of the test session's own
settings. Used by tests/e2e (``make demo``, ``make up``, the guide) and tests/benchmarks
(``make bench``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from local_stack import REPO

# The test session's own settings, which a reader's shell does not have.
SESSION_PREFIXES = ("AIRFLOW", "ML_", "MLFLOW", "SPARK", "PYSPARK", "PYTHON", "PYTEST", "JAVA_TOOL")


def copy_of_checkout(root: Path) -> Path:
    """A copy of this checkout at ``root`` as a reader's clone is after the README's set-up:
    the files without ``var``, build output or caches, and this checkout's ``.venv``."""
    import shutil

    shutil.copytree(
        REPO,
        root,
        ignore=shutil.ignore_patterns(".git", ".venv", "var", "build", "__pycache__", ".*_cache", "node_modules"),
    )
    (root / ".venv").symlink_to(REPO / ".venv")
    return root


def block_after(document: Path, heading: str) -> str:
    """The first ``bash`` block after ``heading`` in ``document``."""
    text = document.read_text()
    return text[text.index(heading) :].split("```bash\n", 1)[1].split("```", 1)[0]


def commands(block: str) -> list[str]:
    """A block's commands, one per line, comments and continuations kept as written."""
    lines = block.replace("\\\n", " ").splitlines()
    return [line for line in lines if line.strip() and not line.strip().startswith("#")]


def bash(script: str, cwd, env, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-euc", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def readers_env() -> dict[str, str]:
    """This process's environment without the test session's own settings: a reader's shell."""
    import os

    return {k: v for k, v in os.environ.items() if k == "PATH" or not k.startswith(SESSION_PREFIXES)}
