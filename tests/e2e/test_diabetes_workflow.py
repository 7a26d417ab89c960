"""The second workflow, ``diabetes`` (tabular float features, a regression, RMSE: lower is
better), end to end on the same shared code as MNIST: its nightly DAG through ``airflow
dags test`` (real spark-submit, a real MLflow server, 2 Horovod ranks), then a backfill of
its batch-scoring DAG under the scheduler. It shows that the metric direction, the
promotion rule and the output schema are the workflow's declaration, not MNIST's."""

from __future__ import annotations

import math
import tomllib

import pyarrow.compute as pc
import pyarrow.dataset as pads
import pytest

from e2e_support import backfill, wait_for
from local_stack import REPO

WORKFLOW = "diabetes"
DECLARATION = tomllib.loads((REPO / "spark_jobs" / "workflows" / f"{WORKFLOW}.toml").read_text())
MODEL = DECLARATION["model"]["registered_name"]
FLOOR = DECLARATION["promotion"]["floor"]
NIGHTLY_DATE, PARTITION = "2026-11-29", "2026-11-28"
ROWS = 3000
BACKFILL_DAYS = ["2026-11-20"]
BACKFILL_ROWS = 500


def table(stack, dataset: str, ds: str):
    path = stack.storage_root / dataset / WORKFLOW / f"ds={ds}"
    assert path.is_dir(), f"{path} was not written"
    return pads.dataset(str(path), format="parquet").to_table().sort_by([("row_id", "ascending")])


def rmse(scored, curated) -> float:
    assert scored.column("row_id").equals(curated.column("row_id"))
    error = pc.subtract(scored.column("prediction"), pc.cast(curated.column("label"), "double"))
    return math.sqrt(pc.mean(pc.multiply(error, error)).as_py())


@pytest.fixture(scope="module")
def nightly(stack, mlflow_client):
    stack.generate_drops([PARTITION], rows=ROWS, seed=4, workflow=WORKFLOW)
    done = stack.dags_test(f"{WORKFLOW}_nightly_retrain", NIGHTLY_DATE, check=False, capture_output=True)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]
    return {
        "champion": mlflow_client.get_model_version_by_alias(MODEL, "champion"),
        "curated": table(stack, "curated", PARTITION),
        "scored": table(stack, "predictions", PARTITION),
    }


def test_the_regressor_is_registered_by_its_own_metric_and_floor(nightly):
    tags = nightly["champion"].tags
    assert tags["validation_status"] == "passed", tags
    assert tags["workflow"] == WORKFLOW and tags["holdout_metric"] == "rmse"
    # Lower is better: a champion's held-out RMSE is at or below the declared floor.
    assert float(tags["holdout_rmse"]) <= FLOOR
    assert "holdout_accuracy" not in tags


def test_training_ran_two_ranks_with_the_declared_defaults(nightly, mlflow_client):
    run = mlflow_client.get_run(nightly["champion"].run_id)
    training = DECLARATION["model"]["training"]
    assert run.data.params["num_ranks"] == "2" and run.data.params["backend"] == "horovod"
    assert run.data.params["workflow"] == WORKFLOW
    assert int(run.data.params["epochs"]) == training["epochs"]
    assert float(run.data.params["learning_rate"]) == training["learning_rate"]
    history = mlflow_client.get_metric_history(run.info.run_id, "train_rmse")
    assert [m.step for m in history] == list(range(1, training["epochs"] + 1))
    assert history[-1].value < history[0].value


def test_every_row_is_scored_once_with_a_value_naming_the_version(nightly):
    scored, curated = nightly["scored"], nightly["curated"]
    assert curated.num_rows == ROWS and scored.num_rows == ROWS
    assert scored.column_names == ["row_id", "prediction", "model_name", "model_version"]
    assert str(scored.schema.field("prediction").type) == "double"
    assert set(scored.column("model_name").to_pylist()) == {MODEL}
    assert set(scored.column("model_version").to_pylist()) == {nightly["champion"].version}
    # The predictions are the model's: over the whole day (training rows included) they
    # are as close to the labels as the held-out rows were, give or take.
    assert rmse(scored, curated) <= FLOOR


SHIFTED_DAY = "2026-11-21"  # the day after the backfilled one


@pytest.fixture(scope="module")
def backfilled(airflow_services, nightly) -> dict[str, str]:
    """One backfill of the regressor's batch scoring over two days: a day sampled like the
    nightly's window, and the next with ``bmi`` rescaled by 1.3 (every other column as
    sampled). Returns {run_id: state}."""
    from spark_jobs.sample_data import csv_lines, make_rows
    from spark_jobs.workflows import load

    stack = airflow_services
    dag_id = f"{WORKFLOW}_batch_scoring"
    stack.generate_drops(BACKFILL_DAYS, rows=BACKFILL_ROWS, seed=5, workflow=WORKFLOW)
    workflow = load(WORKFLOW)
    labels, features = make_rows(workflow, SHIFTED_DAY, BACKFILL_ROWS, seed=6)
    bmi = workflow.features.raw_fields.index("bmi")
    features[:, bmi] = features[:, bmi] * 1.3
    drop = stack.storage_root / "raw" / WORKFLOW / f"ds={SHIFTED_DAY}"
    drop.mkdir(parents=True)
    (drop / f"{WORKFLOW}.csv").write_text(
        "\n".join([",".join(workflow.raw_fields), *csv_lines(workflow, labels, features)]) + "\n"
    )
    wait_for(lambda: stack.api("GET", f"/dags/{dag_id}")[0] == 200, 120, 2, f"{dag_id} parsed")
    stack.airflow("dags", "unpause", dag_id, capture_output=True)
    return backfill(stack, dag_id, BACKFILL_DAYS[0], SHIFTED_DAY)


def test_a_backfill_of_the_regressors_batch_scoring_scores_each_day_once(airflow_services, nightly, backfilled):
    stack = airflow_services
    for ds in [*BACKFILL_DAYS, SHIFTED_DAY]:
        scored, curated = table(stack, "predictions", ds), table(stack, "curated", ds)
        assert scored.num_rows == curated.num_rows == BACKFILL_ROWS
        assert set(scored.column("model_version").to_pylist()) == {nightly["champion"].version}
    # Like the training window: the regressor meets its floor there.
    for ds in BACKFILL_DAYS:
        assert rmse(table(stack, "predictions", ds), table(stack, "curated", ds)) <= FLOOR


def test_a_day_with_bmi_rescaled_is_flagged_naming_bmi_and_signalled(airflow_services, nightly, backfilled):
    """The drift check under the scheduler, on the regressor: the backfilled day like the
    nightly's window is not flagged; the day whose ``bmi`` was rescaled is, naming ``bmi``,
    and its run updates the retraining evidence."""
    import json

    from e2e_support import task_instances

    stack = airflow_services
    dag_id = f"{WORKFLOW}_batch_scoring"

    def report(ds: str) -> dict:
        return json.loads((stack.storage_root / "monitoring" / WORKFLOW / f"ds={ds}" / "drift.json").read_text())

    quiet = report(BACKFILL_DAYS[0])
    assert (quiet["outcome"], quiet["model"]) == ("no_drift", f"models:/{MODEL}/{nightly['champion'].version}")
    shifted = report(SHIFTED_DAY)
    assert shifted["outcome"] == "drift" and shifted["moved"][0] == "bmi", shifted["moved"]
    assert {t["name"] for t in shifted["tests"] if not t["rejected"]} >= {"age", "sex", "s1"}
    (run_id,) = [
        run_id
        for run_id in backfilled
        if stack.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")[1]["logical_date"].startswith(SHIFTED_DAY)
    ]
    states = {task: ti["state"] for task, ti in task_instances(stack, dag_id, run_id).items()}
    assert (states["check_drift"], states["signal_drift"]) == ("success", "success"), states
