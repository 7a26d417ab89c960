"""Every declared workflow gets the same DAGs, built by the same factories from its declaration."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DECLARED = sorted(p.stem for p in (REPO / "spark_jobs" / "workflows").glob("*.toml"))
DAG_KINDS = (
    "nightly_retrain",
    "batch_scoring",
    "bulk_backfill_scoring",
    "score_on_new_champion",
    "train_on_demand",
    "retrain_on_drift",
    "label_feedback",
)
SPARK_JOBS = {"ingest_raw_drop", "train_model", "register_model", "score_partition", "score_range", "realised_metric"}


def declaration(name: str) -> dict:
    return tomllib.loads((REPO / "spark_jobs" / "workflows" / f"{name}.toml").read_text())


def test_both_workflows_are_declared():
    assert {"mnist", "diabetes"} <= set(DECLARED)


def test_every_workflow_has_every_dag_and_nothing_else(dagbag):
    assert set(dagbag.dag_ids) == {f"{workflow}_{kind}" for workflow in DECLARED for kind in DAG_KINDS}


@pytest.mark.parametrize("workflow", DECLARED)
def test_a_workflows_spark_jobs_run_that_workflow_on_its_own_datasets(dagbag, workflow):
    model_name = declaration(workflow)["model"].get("registered_name", workflow)
    for kind in DAG_KINDS:
        dag = dagbag.dags[f"{workflow}_{kind}"]
        assert workflow in dag.tags and dag.description and dag.description.startswith(f"{workflow}:")
        for task in dag.tasks:
            if task.task_id in SPARK_JOBS:
                args = task.application_args
                assert args[args.index("--workflow") + 1] == workflow, (dag.dag_id, task.task_id)
                for flag in ("--curated-root", "--input-data"):
                    if flag in args:
                        assert args[args.index(flag) + 1].endswith(f"/curated/{workflow}"), (dag.dag_id, args)
                if "--model-name" in args:
                    assert args[args.index("--model-name") + 1] == model_name
            if task.task_id == "gate_model":
                assert task.model_name == model_name


def test_workflows_share_no_dataset_model_or_asset(dagbag):
    seen: dict[str, set[str]] = {}
    for dag in dagbag.dags.values():
        workflow = dag.dag_id.split("_", 1)[0]
        for task in dag.tasks:
            values = list(getattr(task, "application_args", None) or [])
            values += [getattr(task, "model_name", None) or ""]
            values += [asset.name for asset in getattr(task, "outlets", [])]
            for value in values:
                if isinstance(value, str) and ("/curated/" in value or value.endswith(("_curated", ".champion"))):
                    seen.setdefault(value, set()).add(workflow)
    shared = {value: owners for value, owners in seen.items() if len(owners) > 1}
    assert seen and not shared


@pytest.mark.parametrize("workflow", DECLARED)
def test_nightly_and_on_demand_defaults_are_the_declared_training_defaults(dagbag, workflow):
    training = declaration(workflow)["model"]["training"]
    train = dagbag.dags[f"{workflow}_nightly_retrain"].get_task("train_model").application_args
    for key in ("epochs", "learning_rate", "batch_size"):
        flag = "--" + key.replace("_", "-")
        assert float(train[train.index(flag) + 1]) == float(training[key]), key
        assert dagbag.dags[f"{workflow}_train_on_demand"].params[key] == training[key], key


def test_ml_workflows_limits_the_dags_and_refuses_unknown_names(monkeypatch):
    from ml_platform import workflows

    monkeypatch.setenv("ML_WORKFLOWS", "diabetes")
    assert [w.name for w in workflows.enabled()] == ["diabetes"]
    monkeypatch.setenv("ML_WORKFLOWS", "diabetes,nope")
    with pytest.raises(ValueError, match=r"undeclared workflows \['nope'\]"):
        workflows.enabled()


def test_a_broken_declaration_fails_naming_its_file(tmp_path, monkeypatch):
    from ml_platform import workflows

    (tmp_path / "broken.toml").write_text('name = "broken"\n')
    monkeypatch.setenv("ML_WORKFLOWS_DIR", str(tmp_path))
    with pytest.raises(ValueError, match=r"broken\.toml: missing table \[dataset\]"):
        workflows.workflow("broken")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (('loss = "nll"', 'loss = "cross_entropy"'), r"\[model\]: 'loss' is 'cross_entropy', allowed: nll, mse"),
        (('optimizer = "adam"', 'optimizer = "adagrad"'), r"\[model.training\]: 'optimizer' is 'adagrad', allowed"),
        (("patience = 3", "patience = 0"), r"\[model.training.early_stopping\]: 'patience' is 0, allowed: >= 1"),
    ],
)
def test_a_bad_declaration_is_a_dag_import_error_naming_the_key(tmp_path, monkeypatch, edit, message):
    """The DAG files parse every declaration with the contract's parser, the jobs' own: a
    declaration the 02:00 job would refuse fails the DAG files' import, naming the key and
    what is allowed (what the DAG processor shows in the UI's import errors)."""
    import re

    from airflow.dag_processing.dagbag import DagBag

    for name in DECLARED:
        (tmp_path / f"{name}.toml").write_text(declaration_text(name))
    mnist = tmp_path / "mnist.toml"
    assert edit[0] in mnist.read_text()
    mnist.write_text(mnist.read_text().replace(edit[0], edit[1]))
    monkeypatch.setenv("ML_WORKFLOWS_DIR", str(tmp_path))
    _forget_parsed_declarations()
    try:
        bag = DagBag(dag_folder=str(REPO / "dags"))
    finally:
        _forget_parsed_declarations()
    assert bag.import_errors, "the DAG files imported a bad declaration"
    for path, error in bag.import_errors.items():
        assert re.search(message, error), (path, error[-600:])
        assert "mnist.toml" in error


def declaration_text(name: str) -> str:
    return (REPO / "spark_jobs" / "workflows" / f"{name}.toml").read_text()


def _forget_parsed_declarations() -> None:
    """The DAG side caches each declaration it parsed (per path); a test that edits one forgets them."""
    from ml_platform import workflows

    workflows._read.cache_clear()
