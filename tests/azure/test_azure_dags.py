"""The DAGs with the Azure settings: a landing zone before ingest, checkpoints, and Spark
jobs on an Azure Synapse pool instead of spark-submit.

Azure Synapse is a cloud service that cannot run here (there is no emulator): these tests
check what the DAGs would send it, down to the JSON body of the Livy batch request, with the
Synapse client's submit call as the edge. The job must get exactly what its spark-submit
twin gets (entry point, arguments, ``--py-files`` archive), and no secret.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta
from types import SimpleNamespace

import pytest

from azure_support import REPO, render

LANDING = {"ML_LANDING_CONTAINER": "landing", "ML_LANDING_CONN_ID": "wasb_landing"}
SYNAPSE = {
    "ML_SPARK_SUBMIT_TARGET": "synapse",
    "ML_SYNAPSE_POOL": "mlpool",
    "ML_SYNAPSE_CONN_ID": "synapse_workspace",
    "ML_SYNAPSE_EXECUTORS": "3",
}
CHECKPOINTS = {"ML_CHECKPOINT_ROOT": "abfss://ml@account.dfs.core.windows.net/checkpoints"}
AZURE_SETTINGS = (*LANDING, *SYNAPSE, *CHECKPOINTS, "ML_STORAGE_CONN_ID")
# The DAGs' Spark settings that name files of this deployment, not of a Synapse pool.
LOCAL_SPARK_CONF = ("spark.pyspark.python", "spark.pyspark.driver.python", "spark.driver.extraJavaOptions")
MAX_PARSE_SECONDS = 0.3  # as tests/dags holds the default settings to


@pytest.fixture
def parse(parse_dags, monkeypatch):
    """``parse_dags`` starting from the default settings, whatever this shell has set."""
    for name in AZURE_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    return parse_dags


def spark_tasks(bag) -> list[tuple[str, str]]:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    return [
        (dag.dag_id, t.task_id) for dag in bag.dags.values() for t in dag.tasks if isinstance(t, SparkSubmitOperator)
    ]


def test_default_settings_add_no_landing_tasks(parse):
    bag = parse()
    for dag in bag.dags.values():
        assert "stage_raw_drop" not in dag.task_ids, dag.dag_id
        if "wait_for_raw_drop" in dag.task_ids:  # the drop awaited in the storage root instead
            assert dag.get_task("wait_for_raw_drop").op_args[0].startswith("/"), dag.dag_id
    # Every partition writer runs between its partition lock's claim and release.
    assert bag.dags["mnist_nightly_retrain"].get_task("ingest_raw_drop").upstream_task_ids == {"claim_curated"}
    assert bag.dags["mnist_batch_scoring"].get_task("ingest_raw_drop").upstream_task_ids == {"claim_curated"}
    assert bag.dags["mnist_batch_scoring"].get_task("claim_curated").upstream_task_ids == {"wait_for_raw_drop"}
    assert bag.dags["mnist_batch_scoring"].get_task("wait_for_raw_drop").upstream_task_ids == {"check_conf"}
    assert "--checkpoint-dir" not in bag.dags["mnist_nightly_retrain"].get_task("train_model").application_args


@pytest.mark.parametrize(
    "dag_id, before_wait", [("mnist_nightly_retrain", set()), ("mnist_batch_scoring", {"check_conf"})]
)
def test_landing_zone_waits_then_stages_before_ingest(parse, dag_id, before_wait):
    dag = parse(**LANDING).dags[dag_id]
    wait, stage, ingest = (dag.get_task(t) for t in ("wait_for_raw_drop", "stage_raw_drop", "ingest_raw_drop"))
    assert wait.upstream_task_ids == before_wait
    # Staging writes the files ingest reads, so it runs inside the partition lock; the wait does not.
    assert dag.get_task("claim_curated").upstream_task_ids == {"wait_for_raw_drop"}
    assert stage.upstream_task_ids == {"claim_curated"}
    assert ingest.upstream_task_ids == {"stage_raw_drop"}
    # Reschedule mode: a drop that is hours late holds no worker slot; past its deadline the
    # wait is skipped, not failed (tests/azure/test_landing_zone.py runs it against Azurite).
    assert wait.mode == "reschedule" and wait.soft_fail is True
    assert wait.poke_interval == timedelta(minutes=5).total_seconds()
    for task in (wait, stage):
        assert task.owner == "ml-platform" and task.retries >= 1, task.task_id
    render(wait)
    assert wait.op_args[0] == "raw/mnist/ds=2026-11-28/"  # the day's prefix in the landing container


def test_checkpoint_root_gives_each_run_its_checkpoint_dir(parse):
    train = parse(**CHECKPOINTS).dags["mnist_nightly_retrain"].get_task("train_model")
    render(train)
    args = train.application_args
    from ml_platform.partitions import run_key

    assert args[args.index("--checkpoint-dir") + 1] == (
        "abfss://ml@account.dfs.core.windows.net/checkpoints/mnist_nightly_retrain/"
        + run_key("scheduled__2026-11-29T02:00:00+00:00")
    )


@pytest.mark.parametrize("dag_file", ["mnist_nightly_retrain.py", "mnist_batch_scoring.py"])
def test_azure_settings_keep_parse_time_within_the_limit(parse, report_figure, dag_file):
    from airflow.dag_processing.dagbag import DagBag

    parse(**LANDING, **SYNAPSE, **CHECKPOINTS)  # the settings are in place; imports warm
    started = time.perf_counter()
    bag = DagBag(dag_folder=str(REPO / "dags" / dag_file))
    elapsed = time.perf_counter() - started
    report_figure(f"DAG parse time {dag_file} with the Azure settings: {elapsed * 1000:.1f} ms")
    assert bag.import_errors == {}
    assert elapsed < MAX_PARSE_SECONDS, f"{dag_file} took {elapsed:.3f} s to parse"


@pytest.mark.parametrize(
    "path, uri",
    [
        ("abfss://ml@acct.dfs.core.windows.net/data/raw", "abfs://ml/data/raw"),
        ("wasbs://ml@acct.blob.core.windows.net/data", "abfs://ml/data"),
        ("abfs://ml/data", "abfs://ml/data"),
        ("/srv/data", "file:///srv/data"),
        ("hdfs://namenode/data", "hdfs://namenode/data"),
    ],
)
def test_airflow_tasks_read_azure_storage_urls_in_adlfs_form(path, uri):
    """Airflow's object storage reads ``<container>@`` as a connection id: the container
    goes into the path, the account comes from ``ML_STORAGE_CONN_ID``."""
    from ml_platform.config import PlatformConfig

    assert PlatformConfig.object_storage_uri(path) == uri


@pytest.mark.parametrize(
    "env, message",
    [
        ({"ML_SPARK_SUBMIT_TARGET": "emr"}, "ML_SPARK_SUBMIT_TARGET"),
        ({"ML_SPARK_SUBMIT_TARGET": "synapse"}, "ML_SYNAPSE_POOL"),
    ],
)
def test_bad_submit_target_settings_are_refused_by_name(monkeypatch, env, message):
    from ml_platform.config import load_config

    monkeypatch.delenv("ML_SYNAPSE_POOL", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        load_config()


# -- Azure Synapse ----------------------------------------------------------------------------


def test_synapse_jobs_get_exactly_what_spark_submit_gets(parse):
    """Every Spark task of every DAG, rendered for the same run, both ways."""
    from ml_registry.synapse import MlflowSynapseSparkBatchOperator

    spark_bag = parse()
    synapse_bag = parse(**SYNAPSE)
    jobs = spark_tasks(spark_bag)
    assert {
        ("mnist_nightly_retrain", t) for t in ("ingest_raw_drop", "train_model", "register_model", "score_partition")
    } <= set(jobs)
    assert spark_tasks(synapse_bag) == []
    for dag_id, task_id in jobs:
        submit = spark_bag.dags[dag_id].get_task(task_id)
        batch = synapse_bag.dags[dag_id].get_task(task_id)
        assert isinstance(batch, MlflowSynapseSparkBatchOperator), (dag_id, task_id)
        render(submit)
        render(batch)
        payload = batch.payload
        assert payload["file"] == submit.application
        assert payload["arguments"] == submit.application_args
        assert payload["python_files"] == [submit.py_files]
        assert payload["name"] == submit.name
        # The same Spark settings, less the ones naming files on this machine.
        assert payload["configuration"] == {k: v for k, v in submit.conf.items() if k not in LOCAL_SPARK_CONF}
        assert (payload["executor_count"], payload["executor_cores"], payload["executor_memory"]) == (3, 4, "28g")
        assert (batch.spark_pool, batch.azure_synapse_conn_id) == ("mlpool", "synapse_workspace")
        assert (batch.pool, batch.retries, batch.outlets) == (submit.pool, submit.retries, submit.outlets)
        assert "{{" not in json.dumps(payload), (dag_id, task_id)


def test_synapse_request_carries_the_tracking_uri_and_no_secret(parse, monkeypatch):
    from airflow.providers.microsoft.azure.hooks.synapse import AzureSynapseHook
    from azure.synapse.spark import models
    from msrest import Serializer

    password, token = uuid.uuid4().hex, uuid.uuid4().hex
    mlflow_conn = {
        "conn_type": "http",
        "host": "mlflow.example.com",
        "port": 443,
        "schema": "https",
        "login": "svc-ml",
        "password": password,
        "extra": {"token": token},
    }
    monkeypatch.setenv("AIRFLOW_CONN_MLFLOW_DEFAULT", json.dumps(mlflow_conn))
    submitted = []
    monkeypatch.setattr(
        AzureSynapseHook, "run_spark_job", lambda self, payload: submitted.append(payload) or SimpleNamespace(id=7)
    )
    monkeypatch.setattr(AzureSynapseHook, "wait_for_job_run_status", lambda self, **_: True)

    train = parse(**SYNAPSE, **CHECKPOINTS).dags["mnist_nightly_retrain"].get_task("train_model")
    context = render(train)
    args = list(train.payload["arguments"])
    train.execute(context)

    (options,) = submitted
    assert isinstance(options, models.SparkBatchJobOptions)
    body = Serializer({k: v for k, v in vars(models).items() if isinstance(v, type)}).body(
        options, "SparkBatchJobOptions"
    )
    assert body["file"].endswith("spark_jobs/entrypoints/train.py")
    assert body["args"] == args and "--checkpoint-dir" in args
    assert body["pyFiles"][0].endswith("spark_jobs.zip")
    from ml_platform.partitions import run_key

    assert body["name"] == f"train-mnist_nightly_retrain-{run_key('scheduled__2026-11-29T02:00:00+00:00')}"
    assert (body["numExecutors"], body["driverMemory"]) == (3, "28g")
    for prefix in ("spark.yarn.appMasterEnv.", "spark.executorEnv."):
        assert body["conf"][f"{prefix}MLFLOW_TRACKING_URI"] == "https://mlflow.example.com:443"
    sent = json.dumps(body)
    for secret in (password, token, "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "svc-ml"):
        assert secret not in sent
