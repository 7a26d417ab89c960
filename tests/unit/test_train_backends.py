"""Both training backends and both workflows, end to end through spark-submit, as the DAG
runs them.

``spark_jobs.train.main`` stops its SparkSession, so each run is a real ``spark-submit``
on ``local[2]`` with the job archive on ``--py-files``, logging to a real MLflow server.
Each backend must give the same outputs for each workflow: a manifest naming the backend
and the workflow, an MLflow run with its params and per-epoch metrics from rank 0 (the
workflow's metric: accuracy for MNIST, RMSE for diabetes), and a model with the workflow's
tensor signature that loads and predicts; and, once the model is logged, no checkpoint
left behind. What a reviewer reads in MLflow is checked on the same runs: validation curves
(the held-out rows) beside the training ones, the run's name and description naming the
DAG run and window, the training data as the run's datasets, the experiment's kind; and,
after the register job ran on one run per workflow, MLflow's held-out evaluation on the
training run.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import package_jobs
from local_stack import LocalStack, free_port
from ml_platform.job_arguments import RegisterArguments, TrainArguments
from spark_jobs import workflows
from spark_jobs.sample_data import make_rows
from spark_jobs.schema import curated_arrow_table

DS = "2026-11-28"
ROWS = 600
# Diabetes epochs are cheap (a 10-32-16-1 MLP); enough of them to see its RMSE fall.
EPOCHS = {"mnist": 2, "diabetes": 6}
METRIC = {"mnist": "train_accuracy", "diabetes": "train_rmse"}
VAL_METRIC = {"mnist": "val_accuracy", "diabetes": "val_rmse"}
WORKFLOWS = tuple(EPOCHS)
BACKENDS = ("torch_distributor", "horovod")
SUBMIT_TIMEOUT_S = 300
# The DAG run the tests' training runs say they come from (the DAGs pass these tags).
DAG_ID, DAG_RUN_ID = "mnist_nightly_retrain", "scheduled__2026-11-29T02:00:00+00:00"


def write_curated(curated_root: Path, workflow: str, ds: str, rows: int) -> None:
    """One curated partition of ``workflow``'s sample rows, as ingest writes it."""
    wf = workflows.load(workflow)
    labels, features = make_rows(wf, ds, rows)
    partition = curated_root / f"ds={ds}"
    partition.mkdir(parents=True)
    pq.write_table(curated_arrow_table(wf, np.arange(rows), labels, features), partition / "part-00000.parquet")


@pytest.fixture(scope="module")
def training_stack(tmp_path_factory):
    """The job archive, one small curated partition per workflow and an MLflow server, made once."""
    root = tmp_path_factory.mktemp("train-backends")
    # Its own archive: the shared build/spark_jobs.zip may be in use by other runs.
    archive = package_jobs.package_jobs(root / "spark_jobs.zip")
    for workflow in WORKFLOWS:
        write_curated(root / "curated" / workflow, workflow, DS, ROWS)
    stack = LocalStack(state_dir=root / "stack", mlflow_port=free_port())
    stack.start_mlflow()
    try:
        yield {"root": root, "archive": archive, "stack": stack, "tracking_uri": stack.tracking_uri}
    finally:
        stack.stop_mlflow()


def work_dir(stack: dict, workflow: str, backend: str) -> Path:
    return stack["root"] / f"{workflow}-{backend}"


def submit_training(stack: dict, workflow: str, backend: str) -> tuple[subprocess.CompletedProcess, Path, float]:
    """spark-submit the train entry point the way the DAG does; returns (process, manifest, seconds)."""
    work = work_dir(stack, workflow, backend)
    work.mkdir()
    manifest = work / "train.json"
    args = TrainArguments(
        workflow=workflow,
        curated_root=stack["root"] / "curated" / workflow,
        start_ds=DS,
        end_ds=DS,
        work_dir=work / "scratch",
        output_manifest=manifest,
        experiment_name=f"train-backends-{workflow}",
        backend=backend,
        epochs=EPOCHS[workflow],
        num_ranks=2,
        checkpoint_dir=work / "checkpoints",
        tags=(f"airflow_dag_id={DAG_ID}", f"airflow_run_id={DAG_RUN_ID}"),
    ).argv()
    started = time.monotonic()
    proc = stack["stack"].spark_submit("train", args, archive=stack["archive"], cwd=work, timeout=SUBMIT_TIMEOUT_S)
    return proc, manifest, time.monotonic() - started


@pytest.fixture(scope="module")
def trained(training_stack):
    """``trained(workflow, backend)``: that finished run, submitted once per module."""
    runs: dict[tuple[str, str], tuple[subprocess.CompletedProcess, dict]] = {}

    def run(workflow: str, backend: str) -> tuple[subprocess.CompletedProcess, dict]:
        if (workflow, backend) not in runs:
            proc, manifest_path, seconds = submit_training(training_stack, workflow, backend)
            print(f"\n[train-backends] {workflow} {backend}: spark-submit took {seconds:.1f} s")
            assert proc.returncode == 0, (
                f"{workflow} {backend} training failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
            )
            runs[workflow, backend] = proc, json.loads(manifest_path.read_text())
        return runs[workflow, backend]

    return run


def metric_values(client, run_id: str, key: str) -> list[float]:
    return [m.value for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


@pytest.mark.parametrize("workflow", WORKFLOWS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_trains_and_logs_a_run_with_the_workflows_metrics(training_stack, trained, workflow, backend):
    from mlflow import MlflowClient

    _, manifest = trained(workflow, backend)
    assert manifest["backend"] == backend
    assert manifest["workflow"] == workflow
    assert manifest["num_ranks"] == 2
    assert 0 < manifest["train_rows"] < ROWS
    assert manifest["final_metrics"]["epoch"] == EPOCHS[workflow]

    client = MlflowClient(tracking_uri=training_stack["tracking_uri"])
    run = client.get_run(manifest["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.params["backend"] == backend
    assert run.data.params["workflow"] == workflow
    assert run.data.params["num_ranks"] == "2"
    # The workflow's training defaults where the command line gives none.
    defaults = workflows.load(workflow).model.training
    assert float(run.data.params["learning_rate"]) == defaults.learning_rate
    assert int(run.data.params["batch_size"]) == defaults.batch_size
    assert int(run.data.params["epochs"]) == EPOCHS[workflow]  # given: overrides the default
    for metric in ("train_loss", METRIC[workflow], "val_loss", VAL_METRIC[workflow], "samples_per_second"):
        history = client.get_metric_history(run.info.run_id, metric)
        assert sorted(m.step for m in history) == list(range(1, EPOCHS[workflow] + 1)), metric
    for other in {"mnist": ("train_rmse", "val_rmse"), "diabetes": ("train_accuracy", "val_accuracy")}[workflow]:
        assert client.get_metric_history(run.info.run_id, other) == [], other


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_manifest_times_every_start_up_phase_in_order(trained, backend):
    """The start-up breakdown of the benchmark reads the manifest's timeline: every mark of
    ``TIMELINE``, from the driver's start to rank 0's first step, each no earlier than the one
    before, all within the job's own run."""
    from spark_jobs.train import TIMELINE

    _, manifest = trained("mnist", backend)
    timeline = manifest["timeline"]
    assert set(timeline) == set(TIMELINE), timeline
    marks = [timeline[mark] for mark in TIMELINE]
    assert marks == sorted(marks), timeline
    assert 0 < marks[-1] - marks[0] < 600, timeline


@pytest.mark.parametrize("backend", BACKENDS)
def test_horovod_rank_0_ran_on_a_core_of_its_own_where_the_ranks_fill_the_cores(trained, backend):
    """local[2] with 2 Horovod ranks: on 2 cores each rank is bound to one (rank 0 to the
    first); on a larger machine they fill none exactly and run unbound. TorchDistributor's
    ranks (a torchrun node each) are never bound."""
    _, manifest = trained("mnist", backend)
    allowed = sorted(os.sched_getaffinity(0))
    fill = backend == "horovod" and len(allowed) == manifest["num_ranks"]
    assert manifest["rank0_cores"] == (allowed[:1] if fill else allowed)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_regressor_learns(training_stack, trained, backend):
    """Diabetes, in raw units (progression about 150 +- 77): the RMSE falls below the first
    epoch's and keeps well below it (SGD may give back a little from one epoch to the next),
    the MSE loss is its square, and the model ends well below predicting the mean."""
    from mlflow import MlflowClient

    _, manifest = trained("diabetes", backend)
    client = MlflowClient(tracking_uri=training_stack["tracking_uri"])
    rmse = metric_values(client, manifest["run_id"], "train_rmse")
    loss = metric_values(client, manifest["run_id"], "train_loss")
    assert len(rmse) == EPOCHS["diabetes"]
    assert max(rmse[1:]) < rmse[0] and rmse[-1] < 0.85 * rmse[0], rmse
    np.testing.assert_allclose(np.sqrt(loss), rmse, rtol=1e-9)
    assert rmse[-1] < 65, rmse  # the labels' own spread (predicting the mean) is about 77


@pytest.mark.parametrize("workflow", WORKFLOWS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_logged_model_has_the_workflows_tensor_signature_and_predicts(training_stack, trained, workflow, backend):
    import mlflow

    _, manifest = trained(workflow, backend)
    wf = workflows.load(workflow)
    mlflow.set_tracking_uri(training_stack["tracking_uri"])
    try:
        info = mlflow.models.get_model_info(manifest["model_uri"])
        model = mlflow.pyfunc.load_model(manifest["model_uri"])
    finally:
        mlflow.set_tracking_uri(None)
    assert info.metadata == {"workflow": workflow}
    (inputs,) = info.signature.inputs.inputs
    (outputs,) = info.signature.outputs.inputs
    expected_output = (-1, 10) if workflow == "mnist" else (-1,)
    assert (inputs.type, inputs.shape) == (np.dtype(wf.features.dtype), (-1, *wf.features.shape))
    assert (outputs.type, outputs.shape) == (np.dtype("float32"), expected_output)
    if workflow == "mnist":
        assert (inputs.type, inputs.shape) == (np.dtype("uint8"), (-1, 28, 28))

    # Rows as the curated table's features column decodes them.
    _, features = make_rows(wf, DS, 8, seed=1)
    predicted = np.asarray(model.predict(features))
    assert predicted.dtype == np.float32
    assert predicted.shape == (8, *expected_output[1:])
    if workflow == "mnist":
        np.testing.assert_allclose(predicted.sum(axis=1), 1.0, rtol=1e-4)
    else:
        assert np.isfinite(predicted).all() and 0 < predicted.mean() < 500


@pytest.mark.parametrize("workflow", WORKFLOWS)
def test_backends_run_the_same_training(training_stack, trained, workflow):
    """Same shards, seeds, thread count and loop: the backends differ only in how ranks
    talk, and with two ranks that changes no bit (with the run-to-run determinism of the
    loop, tests/unit/test_training_loop.py, this makes either backend reproducible: the
    same window, seed and ranks give the same held-out metric). A sum of two floats does not depend on
    their order, and halving one is exact (subnormals aside), whether the gradients are
    halved before the all-reduce (DistributedDataParallel) or after it (Horovod). So every
    epoch's loss and metric are equal, not only close: any difference means the backends
    did not train alike (other shards, seeds, learning rate, label scaling or gradient
    averaging)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=training_stack["tracking_uri"])
    manifests = [trained(workflow, backend)[1] for backend in BACKENDS]
    assert manifests[0]["train_rows"] == manifests[1]["train_rows"]
    for key in ("train_loss", METRIC[workflow]):
        per_epoch = [metric_values(client, manifest["run_id"], key) for manifest in manifests]
        assert len(per_epoch[0]) == EPOCHS[workflow] and per_epoch[0] == per_epoch[1], key
        assert manifests[0]["final_metrics"][key] == manifests[1]["final_metrics"][key], key


@pytest.mark.parametrize("workflow", WORKFLOWS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_finished_run_leaves_no_checkpoint_to_resume_from(training_stack, trained, workflow, backend):
    """A successful run cleared in Airflow must train again: with its last checkpoint left
    behind it would resume after the last epoch, train nothing and register the old weights
    as a new version."""
    from spark_jobs.training.checkpoints import Checkpoints

    proc, manifest = trained(workflow, backend)
    assert manifest["resumed_from_epoch"] == 0
    checkpoint_dir = work_dir(training_stack, workflow, backend) / "checkpoints"
    assert Checkpoints(str(checkpoint_dir)).latest_epoch() == 0
    assert not checkpoint_dir.exists()
    # Not vacuous: rank 0 did checkpoint; the driver removed them after logging the model.
    assert f"removed the checkpoints of epochs [{EPOCHS[workflow]}]" in proc.stdout + proc.stderr


def submit_registration(stack: dict, workflow: str, manifest_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """spark-submit the register entry point on a training run, as the DAG's task does
    (without promotion: the held-out evaluation is what is looked at here)."""
    output = manifest_path.parent / "register.json"
    args = RegisterArguments(
        workflow=workflow,
        train_manifest=manifest_path,
        output_manifest=output,
        curated_root=stack["root"] / "curated" / workflow,
        start_ds=DS,
        end_ds=DS,
        model_name=f"train-backends-{workflow}",
        logical_time="2026-11-29T02:00:00+00:00",
        airflow_run_id=DAG_RUN_ID,
        promote=False,
    ).argv()
    proc = stack["stack"].spark_submit(
        "register", args, archive=stack["archive"], cwd=manifest_path.parent, timeout=SUBMIT_TIMEOUT_S
    )
    return proc, output


@pytest.fixture(scope="module")
def registered(training_stack, trained):
    """``registered(workflow)``: the register job's manifest for that workflow's Horovod run."""
    done: dict[str, dict] = {}

    def run(workflow: str) -> dict:
        if workflow not in done:
            trained(workflow, "horovod")
            manifest_path = work_dir(training_stack, workflow, "horovod") / "train.json"
            proc, output = submit_registration(training_stack, workflow, manifest_path)
            assert proc.returncode == 0, (
                f"{workflow} registration failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
            )
            done[workflow] = json.loads(output.read_text())
        return done[workflow]

    return run


@pytest.mark.parametrize("workflow", WORKFLOWS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_run_is_named_and_described_after_the_dag_run_and_window(training_stack, trained, workflow, backend):
    from mlflow import MlflowClient

    _, manifest = trained(workflow, backend)
    run = MlflowClient(tracking_uri=training_stack["tracking_uri"]).get_run(manifest["run_id"])
    assert run.info.run_name == f"{DAG_ID}/{DAG_RUN_ID} {DS}"
    description = run.data.tags["mlflow.note.content"]
    assert f"`{DAG_ID}`, run `{DAG_RUN_ID}`" in description
    assert f"window {DS}" in description
    assert (
        f"{manifest['train_rows']:,} training rows, {manifest['validation_rows']:,} held-out validation rows"
        in description
    )
    assert f"{backend} ranks" in description


@pytest.mark.parametrize("workflow", WORKFLOWS)
def test_the_held_out_rows_are_evaluated_every_epoch(training_stack, trained, workflow):
    """The validation rows are the window's held-out rows (every row is trained on or held
    out, never both); their curve is logged per epoch and moves with the weights."""
    from mlflow import MlflowClient

    _, manifest = trained(workflow, "horovod")
    client = MlflowClient(tracking_uri=training_stack["tracking_uri"])
    params = client.get_run(manifest["run_id"]).data.params
    assert manifest["train_rows"] + manifest["validation_rows"] == ROWS
    assert 0.1 * ROWS <= manifest["validation_rows"] <= 0.3 * ROWS  # --holdout-pct 20
    assert int(params["validation_rows"]) == manifest["validation_rows"]
    curve = metric_values(client, manifest["run_id"], VAL_METRIC[workflow])
    assert len(curve) == EPOCHS[workflow] and curve[0] != curve[-1], curve
    assert manifest["final_metrics"][VAL_METRIC[workflow]] == curve[-1]
    best = (max if workflow == "mnist" else min)(curve)
    assert manifest["best_metrics"][VAL_METRIC[workflow]] == best
    assert manifest["best_metrics"]["epoch"] == manifest["best_epoch"] == curve.index(best) + 1


@pytest.mark.parametrize("workflow", WORKFLOWS)
def test_the_training_data_is_the_runs_dataset(training_stack, trained, workflow):
    from mlflow import MlflowClient

    _, manifest = trained(workflow, "torch_distributor")
    client = MlflowClient(tracking_uri=training_stack["tracking_uri"])
    inputs = client.get_run(manifest["run_id"]).inputs.dataset_inputs
    by_context = {
        next(t.value for t in i.tags if t.key == "mlflow.data.context"): (i.dataset, {t.key: t.value for t in i.tags})
        for i in inputs
    }
    assert set(by_context) == {"training", "validation"}
    for context, rows in (("training", manifest["train_rows"]), ("validation", manifest["validation_rows"])):
        dataset, tags = by_context[context]
        assert dataset.name == f"{workflow} curated {DS} {context}"
        assert json.loads(dataset.source) == {"path": str(training_stack["root"] / "curated" / workflow)}
        assert json.loads(dataset.profile) == {"num_rows": rows, "start_ds": DS, "end_ds": DS}
        assert (tags["start_ds"], tags["end_ds"]) == (DS, DS)


def test_the_experiment_opens_on_model_training_views(training_stack, trained):
    """MLflow's UI reads the experiment kind from this tag: "custom_model_development" is its
    "Machine learning" kind (runs and model metrics), not the GenAI traces view."""
    from mlflow import MlflowClient

    _, manifest = trained("mnist", "horovod")
    client = MlflowClient(tracking_uri=training_stack["tracking_uri"])
    experiment = client.get_experiment(client.get_run(manifest["run_id"]).info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"


def test_the_register_job_logs_mlflows_evaluation_of_a_classifier_to_the_training_run(
    training_stack, registered, tmp_path
):
    import mlflow.artifacts
    from mlflow import MlflowClient

    registration = registered("mnist")
    client = MlflowClient(tracking_uri=training_stack["tracking_uri"])
    run = client.get_run(registration["run_id"])
    assert run.info.status == "FINISHED"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"holdout_confusion_matrix.png", "per_class_metrics.csv", "holdout_sample_predictions.json"} <= artifacts
    metrics = run.data.metrics
    # The evaluator's accuracy is the gate's: the same predictions of the same held-out rows.
    assert (
        metrics["holdout_example_count"]
        == registration["holdout_rows"]
        == int(run.data.tags["holdout_evaluation_rows"])
    )
    assert metrics["holdout_accuracy_score"] == pytest.approx(registration["holdout_value"], abs=1e-9)
    assert {"holdout_f1_score", "holdout_precision_score", "holdout_recall_score"} <= set(metrics)
    # The gate's number is the best epoch's on the validation curve: the same rows, the
    # same weights (the best epoch's, restored before logging), tagged on run and version.
    best = int(run.data.tags["best_epoch"])
    curve = metric_values(client, run.info.run_id, "val_accuracy")
    assert best == curve.index(max(curve)) + 1
    assert curve[best - 1] == pytest.approx(registration["holdout_value"])
    version = client.get_model_version(registration["model_name"], registration["version"])
    assert version.tags["best_epoch"] == str(best) and version.tags["stop_reason"] == run.data.tags["stop_reason"]

    folder = Path(
        mlflow.artifacts.download_artifacts(
            run_id=run.info.run_id, dst_path=str(tmp_path), tracking_uri=training_stack["tracking_uri"]
        )
    )
    assert (folder / "holdout_confusion_matrix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    per_class = pd.read_csv(folder / "per_class_metrics.csv")
    assert sorted(per_class["positive_class"]) == list(range(10))
    assert {"precision", "recall"} <= {c.removesuffix("_score") for c in per_class.columns}
    sample = json.loads((folder / "holdout_sample_predictions.json").read_text())
    assert {"row_id", "label", "prediction", "prob_0", "prob_9"} <= set(sample["columns"])
    assert 0 < len(sample["data"]) <= 50


def test_the_register_job_logs_mlflows_evaluation_of_a_regressor_to_the_training_run(training_stack, registered):
    from mlflow import MlflowClient

    registration = registered("diabetes")
    client = MlflowClient(tracking_uri=training_stack["tracking_uri"])
    run = client.get_run(registration["run_id"])
    metrics = run.data.metrics
    assert metrics["holdout_root_mean_squared_error"] == pytest.approx(registration["holdout_value"], rel=1e-6)
    assert {"holdout_mean_absolute_error", "holdout_r2_score"} <= set(metrics)
    curve = metric_values(client, run.info.run_id, "val_rmse")
    best = int(run.data.tags["best_epoch"])
    assert best == curve.index(min(curve)) + 1
    assert curve[best - 1] == pytest.approx(registration["holdout_value"], rel=1e-4)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert "holdout_sample_predictions.json" in artifacts
    assert "holdout_confusion_matrix.png" not in artifacts  # a value, not classes
