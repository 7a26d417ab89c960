"""The guide docs/bring_your_own_model.md, followed as a reader follows it: a plain
single-node PyTorch script (docs/examples/wine/train_single_node.py) becomes the ``wine``
workflow by adding two files to a copy of the checkout (nothing else changes), and the
guide's command blocks, run exactly as written, check it and run its nightly end to end:
real spark-submit with the rebuilt archive, a real MLflow server, 2 Horovod ranks,
registration, the gate and scoring."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib

import pyarrow.dataset as pads
import pytest
from mlflow import MlflowClient
from reader_shell import copy_of_checkout, readers_env

from local_stack import REPO

EXAMPLE = REPO / "docs" / "examples" / "wine"
GUIDE = REPO / "docs" / "bring_your_own_model.md"
WORKFLOW = "wine"


def test_the_starting_point_is_a_plain_single_node_script():
    source = (EXAMPLE / "train_single_node.py").read_text()
    for platform in ("pyspark", "airflow", "mlflow", "horovod", "spark_jobs"):
        assert f"import {platform}" not in source and f"from {platform}" not in source
    done = subprocess.run([sys.executable, str(EXAMPLE / "train_single_node.py")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert float(done.stdout.strip().splitlines()[-1].split()[2]) >= 0.85, done.stdout


def test_the_guide_shows_the_files_the_test_uses():
    guide = GUIDE.read_text()
    assert "cp docs/examples/wine/wine.py docs/examples/wine/wine.toml spark_jobs/workflows/" in guide
    assert "scripts/package_jobs.py" in guide
    declaration = tomllib.loads((EXAMPLE / "wine.toml").read_text())
    for line in ('name = "wine"', 'factory = "spark_jobs.workflows.wine:WineNet"', 'kind = "class_probabilities"'):
        assert line in guide and line in (EXAMPLE / "wine.toml").read_text()
    assert declaration["name"] == WORKFLOW


def guide_blocks() -> list[str]:
    """Every ``bash`` block of the guide: the commands a reader is told to run, in order."""
    return re.findall(r"```bash\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)


@pytest.fixture(scope="module")
def guide_followed(tmp_path_factory):
    """The guide's command blocks, exactly as written (read from the Markdown), run one after
    the other with bash in a copy of the checkout, as a reader runs them in theirs: the two
    files copied in and the archive rebuilt, then ``make check WORKFLOW=wine`` and ``make demo
    WORKFLOW=wine`` (its nightly for today on the embedded stack, sample drops included). The
    copy shares this checkout's ``.venv`` (the set-up the README's commands made); nothing of
    the test session's environment reaches it. Returns ``(the copy, each block's output)``."""
    root = copy_of_checkout(tmp_path_factory.mktemp("byom") / "checkout")
    env = readers_env()
    outputs = []
    for block in guide_blocks():
        done = subprocess.run(["bash", "-euc", block], cwd=root, env=env, capture_output=True, text=True, timeout=1500)
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{block}\n{output[-6000:]}"
        outputs.append(output)
    return root, outputs


def test_the_guides_commands_are_the_ones_run():
    blocks = guide_blocks()
    assert blocks[0].startswith("cp docs/examples/wine/wine.py docs/examples/wine/wine.toml spark_jobs/workflows/")
    assert "make check WORKFLOW=wine" in blocks[-1] and "make demo WORKFLOW=wine" in blocks[-1]


def test_the_new_workflow_is_checked_trained_registered_gated_and_scored(guide_followed):
    root, outputs = guide_followed
    checked = [line for line in outputs[-1].splitlines() if line.startswith("[check]")]
    assert len(checked) == 5 and all(line.startswith(f"[check] {WORKFLOW}: ") for line in checked), checked
    assert all(line.endswith(": ok") for line in checked) and checked[-1].endswith(": DAGs: ok"), checked
    summary = json.loads(re.search(r"^\[nightly\] (\{.*?\n\})", outputs[-1], flags=re.DOTALL | re.MULTILINE).group(1))
    partition = summary["partition"]
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'var' / 'mlflow' / 'mlflow.db'}")
    champion = client.get_model_version_by_alias(WORKFLOW, "champion")
    assert summary["model"] == f"models:/{WORKFLOW}/{champion.version}"
    assert champion.tags["validation_status"] == "passed", champion.tags
    assert champion.tags["workflow"] == WORKFLOW
    assert float(champion.tags["holdout_accuracy"]) >= 0.85
    run = client.get_run(champion.run_id)
    assert run.data.params["num_ranks"] == "2" and run.data.params["workflow"] == WORKFLOW
    data = root / "var" / "data"
    curated = pads.dataset(str(data / "curated" / WORKFLOW / f"ds={partition}")).to_table()
    scored = pads.dataset(str(data / "predictions" / WORKFLOW / f"ds={partition}")).to_table()
    assert curated.num_rows == scored.num_rows == summary["scored_rows"] > 0
    assert scored.column_names == [
        "row_id",
        "prediction",
        "prob_0",
        "prob_1",
        "prob_2",
        "model_name",
        "model_version",
    ]
    assert set(scored.column("model_version").to_pylist()) == {str(champion.version)}  # (an int from a SQL store)
    assert sorted(set(scored.column("row_id").to_pylist())) == sorted(curated.column("row_id").to_pylist())
