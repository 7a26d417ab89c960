"""The guide docs/bring_your_own_model.md, followed step by step: a plain single-node
PyTorch script (docs/examples/wine/train_single_node.py) becomes the ``wine`` workflow by
adding two files to a copy of the package (nothing else changes), and that workflow's
nightly DAG then runs end to end: real spark-submit with the rebuilt archive, a real
MLflow server, 2 Horovod ranks, registration, the gate and scoring."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib

import pyarrow.dataset as pads
import pytest

from local_stack import REPO, VENV_BIN
from package_jobs import package_jobs

EXAMPLE = REPO / "docs" / "examples" / "wine"
WORKFLOW = "wine"
NIGHTLY_DATE, PARTITION = "2026-11-29", "2026-11-28"
ROWS = 1500


def test_the_starting_point_is_a_plain_single_node_script():
    source = (EXAMPLE / "train_single_node.py").read_text()
    for platform in ("pyspark", "airflow", "mlflow", "horovod", "spark_jobs"):
        assert f"import {platform}" not in source and f"from {platform}" not in source
    done = subprocess.run([sys.executable, str(EXAMPLE / "train_single_node.py")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert float(done.stdout.strip().splitlines()[-1].split()[2]) >= 0.85, done.stdout


def test_the_guide_shows_the_files_the_test_uses():
    guide = (REPO / "docs" / "bring_your_own_model.md").read_text()
    assert "cp docs/examples/wine/wine.py docs/examples/wine/wine.toml spark_jobs/workflows/" in guide
    assert "scripts/package_jobs.py" in guide
    declaration = tomllib.loads((EXAMPLE / "wine.toml").read_text())
    for line in ('name = "wine"', 'factory = "spark_jobs.workflows.wine:WineNet"', 'kind = "class_probabilities"'):
        assert line in guide and line in (EXAMPLE / "wine.toml").read_text()
    assert declaration["name"] == WORKFLOW


@pytest.fixture(scope="module")
def wine_package(tmp_path_factory):
    """Step 4 of the guide on a copy of the package: the two files added, the archive rebuilt."""
    root = tmp_path_factory.mktemp("byom")
    shutil.copytree(REPO / "spark_jobs", root / "spark_jobs", ignore=shutil.ignore_patterns("__pycache__"))
    # The contract the jobs' archive carries beside spark_jobs (the copy's plugins/ml_contract).
    contract = "plugins/ml_contract"
    shutil.copytree(REPO / contract, root / contract, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("wine.py", "wine.toml"):
        shutil.copy(EXAMPLE / name, root / "spark_jobs" / "workflows" / name)
    archive = package_jobs(root / "spark_jobs.zip", source_root=root)
    env = {
        "ML_WORKFLOWS_DIR": str(root / "spark_jobs" / "workflows"),
        "ML_WORKFLOWS": WORKFLOW,
        "ML_JOBS_ARCHIVE": str(archive),
    }
    return {"root": root, "archive": archive, "env": env}


@pytest.fixture(scope="module")
def wine_nightly(stack, mlflow_client, wine_package):
    raw = stack.storage_root / "raw" / WORKFLOW
    # The guide's sample-data command, run against the copy (where the wine workflow exists).
    subprocess.run(
        [str(VENV_BIN / "python"), "-m", "spark_jobs.sample_data", "--workflow", WORKFLOW, "--ds", PARTITION]
        + ["--rows", str(ROWS), "--out", str(raw)],
        cwd=wine_package["root"],
        check=True,
        env={**stack.env(), "PYTHONPATH": str(wine_package["root"])},
    )
    # From the copy's root, as a deployment runs from its own checkout: Spark's Python workers
    # and Horovod's ranks put their working directory first on sys.path, so run from the
    # repository they would import its spark_jobs (which has no wine) before the archive.
    done = stack.dags_test(
        f"{WORKFLOW}_nightly_retrain",
        NIGHTLY_DATE,
        check=False,
        capture_output=True,
        env=wine_package["env"],
        cwd=wine_package["root"],
    )
    output = done.stdout + done.stderr
    errors = [line for line in output.splitlines() if "ERROR" in line or "Error" in line or "Traceback" in line]
    assert done.returncode == 0, "\n".join(errors[-40:]) + output[-3000:]
    return mlflow_client.get_model_version_by_alias(WORKFLOW, "champion")


def test_the_new_workflow_is_trained_registered_gated_and_scored(stack, mlflow_client, wine_nightly):
    champion = wine_nightly
    assert champion.tags["validation_status"] == "passed", champion.tags
    assert champion.tags["workflow"] == WORKFLOW
    assert float(champion.tags["holdout_accuracy"]) >= 0.85
    run = mlflow_client.get_run(champion.run_id)
    assert run.data.params["num_ranks"] == "2" and run.data.params["workflow"] == WORKFLOW
    curated = pads.dataset(str(stack.storage_root / "curated" / WORKFLOW / f"ds={PARTITION}")).to_table()
    scored = pads.dataset(str(stack.storage_root / "predictions" / WORKFLOW / f"ds={PARTITION}")).to_table()
    assert curated.num_rows == scored.num_rows == ROWS
    assert scored.column_names == [
        "row_id",
        "prediction",
        "prob_0",
        "prob_1",
        "prob_2",
        "model_name",
        "model_version",
    ]
    assert set(scored.column("model_version").to_pylist()) == {champion.version}
    assert sorted(set(scored.column("row_id").to_pylist())) == sorted(curated.column("row_id").to_pylist())
