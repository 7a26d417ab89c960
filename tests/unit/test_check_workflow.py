"""``make check WORKFLOW=<name>`` (scripts/check_workflow.py) in a fresh interpreter, as a
user runs it: every step of a shipped workflow passes; a bad declaration and a model that
TorchScript cannot compile each fail at their step in one line that says what to change."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STEPS = ("declaration", "model", "TorchScript", "forward pass", "DAGs")


def run_check(root: Path, *names: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(root / "scripts" / "check_workflow.py"), *names],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
    )


def test_a_shipped_workflow_passes_every_step():
    done = run_check(REPO, "diabetes")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert [line for line in done.stdout.splitlines() if line.startswith("[check]")] == [
        f"[check] diabetes: {step}: ok" for step in STEPS
    ]


@pytest.fixture
def tree(tmp_path) -> Path:
    """A copy of the package (what a team edits) to add broken workflows to."""
    for folder in ("dags", "plugins", "spark_jobs"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "check_workflow.py", tmp_path / "scripts")
    return tmp_path


def add_workflow(tree: Path, name: str, *edits: tuple[str, str]) -> None:
    text = (REPO / "spark_jobs" / "workflows" / "mnist.toml").read_text().replace('name = "mnist"', f'name = "{name}"')
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    (tree / "spark_jobs" / "workflows" / f"{name}.toml").write_text(text)


def failures(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stdout.splitlines() if "FAILED" in line]


def test_a_bad_key_fails_the_declaration_step_naming_it(tree):
    add_workflow(tree, "broken", ('loss = "nll"', 'loss = "cross_entropy"'))
    done = run_check(tree, "broken")
    assert done.returncode == 1
    assert failures(done) == [
        "[check] broken: declaration: FAILED: workflow broken.toml [model]: 'loss' is 'cross_entropy', "
        "allowed: nll, mse (fix spark_jobs/workflows/broken.toml)"
    ]


def test_a_model_torchscript_cannot_compile_fails_that_step_saying_why(tree):
    (tree / "spark_jobs" / "workflows" / "unscriptable.py").write_text(
        "import torch\n"
        "from spark_jobs.workflows.mnist import MnistNet\n\n"
        "SCALE = {'x': 255.0}\n\n\n"
        "class Net(MnistNet):\n"
        "    def forward(self, pixels: torch.Tensor) -> torch.Tensor:\n"
        "        return super().forward(pixels / SCALE['x'])\n"
    )
    add_workflow(
        tree,
        "unscriptable",
        ('factory = "spark_jobs.workflows.mnist:MnistNet"', 'factory = "spark_jobs.workflows.unscriptable:Net"'),
    )
    done = run_check(tree, "unscriptable")
    assert done.returncode == 1, done.stdout
    (line,) = failures(done)
    assert line.startswith("[check] unscriptable: TorchScript: FAILED: the model does not script with TorchScript")
    assert "no Python globals" in line
    assert "[check] unscriptable: model: ok" in done.stdout
