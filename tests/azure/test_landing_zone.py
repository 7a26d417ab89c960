"""The landing zone on Azurite: the DAGs' sensor waits for the day's drop in the landing
container (``wasb`` connection) until its deadline, then is skipped with the reason; the
staging task copies a landed drop into the storage root, to the raw partition the ingest task
reads.

The tasks are the ones the nightly DAG builds with ``ML_LANDING_CONTAINER`` set, rendered
for its run of 2026-11-29 (partition 2026-11-28) and executed as a worker would, minus
Airflow's metadata database.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from azure_support import render
from spark_jobs.sample_data import write_drop

DS = "2026-11-28"
PREFIX = f"raw/mnist/ds={DS}/"


@pytest.fixture
def landing(blob_service):
    """A fresh landing container."""
    return blob_service.create_container(f"landing-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def drop(tmp_path: Path) -> dict[str, bytes]:
    """The day's drop: two MNIST-format CSV files, by name relative to the day's prefix."""
    return {
        f"part-{seed}.csv": write_drop("mnist", tmp_path / f"seed{seed}", DS, rows=40, seed=seed).read_bytes()
        for seed in (0, 1)
    }


@pytest.fixture
def nightly(parse_dags, wasb_conn, landing, monkeypatch):
    """``nightly(**env)``: the nightly DAG with the landing zone (and ``env``) configured."""
    monkeypatch.delenv("ML_STORAGE_CONN_ID", raising=False)

    def parse(**env: str):
        return parse_dags(ML_LANDING_CONTAINER=landing.container_name, ML_LANDING_CONN_ID=wasb_conn, **env).dags[
            "mnist_nightly_retrain"
        ]

    return parse


def upload(landing, files: dict[str, bytes], prefix: str = PREFIX) -> None:
    for name, data in files.items():
        landing.upload_blob(f"{prefix}{name}", data, overwrite=True)


def test_sensor_reschedules_until_the_days_drop_lands(nightly, landing, drop):
    from airflow.sdk.exceptions import AirflowRescheduleException

    # 720 hours after the day: the deadline is still ahead (the clock decides only how long to wait).
    sensor = nightly(ML_RAW_DROP_DEADLINE_HOURS="720").get_task("wait_for_raw_drop")
    context = render(sensor)
    assert sensor.op_args[0] == PREFIX
    with pytest.raises(AirflowRescheduleException):  # frees the worker slot until the next look
        sensor.execute(context)

    upload(landing, drop, prefix="raw/mnist/ds=2026-11-27/")  # yesterday's drop is not today's
    with pytest.raises(AirflowRescheduleException):
        sensor.execute(context)

    upload(landing, drop)
    sensor.execute(context)  # done: the run goes on to stage and ingest


def test_past_the_deadline_the_wait_is_skipped_naming_the_day_and_the_landing_prefix(nightly, landing):
    """A drop that never lands: the run's wait ends as skipped (the run's other tasks skip,
    nothing fails or retries), not failed after hours of pokes."""
    from airflow.sdk.exceptions import AirflowSkipException

    sensor = nightly(ML_RAW_DROP_DEADLINE_HOURS="24").get_task("wait_for_raw_drop")
    assert sensor.soft_fail is True
    with pytest.raises(AirflowSkipException) as skipped:
        sensor.execute(render(sensor))
    reason = str(skipped.value)
    assert reason.startswith(f"no raw drop for ds={DS} at wasb://{landing.container_name}/{PREFIX}"), reason
    assert "by its deadline 2026-11-30T00:00:00+00:00 (ML_RAW_DROP_DEADLINE_HOURS=24 after the day)" in reason


@pytest.fixture(params=["local", "blob"])
def storage_root(request, tmp_path, azurite, blob_service, wasb_conn) -> dict[str, str]:
    """The storage root as settings: a local folder, or a container in the URL form Spark's
    ``abfss://`` takes, reached from Airflow tasks through ``ML_STORAGE_CONN_ID``."""
    if request.param == "local":
        return {"ML_STORAGE_ROOT": str(tmp_path / "data")}
    container = blob_service.create_container(f"data-{uuid.uuid4().hex[:8]}")
    root = f"abfss://{container.container_name}@{azurite.account}.dfs.core.windows.net/root"
    return {"ML_STORAGE_ROOT": root, "ML_STORAGE_CONN_ID": wasb_conn}


def read_partition(raw_uri: str) -> dict[str, bytes]:
    """The files of a staged partition, through the storage root's own connection."""
    from ml_platform import tasks
    from ml_platform.config import load_config

    root = tasks.storage_path(load_config(), raw_uri)
    return {path.name: path.read_bytes() for path in root.iterdir()}


def test_stage_copies_the_drop_to_the_partition_ingest_reads(nightly, landing, drop, storage_root):
    dag = nightly(**storage_root)
    stage, ingest = dag.get_task("stage_raw_drop"), dag.get_task("ingest_raw_drop")
    upload(landing, drop)
    context = render(stage)
    render(ingest)
    raw_path = ingest.application_args[ingest.application_args.index("--raw-path") + 1]

    summary = stage.execute(context)
    assert summary["destination"].removeprefix("file://") == raw_path
    assert (summary["files"], summary["bytes"], summary["removed"]) == (2, sum(map(len, drop.values())), 0)
    assert read_partition(summary["destination"]) == drop

    # A retry, or a re-run after the drop was replaced: the partition holds exactly the drop.
    landing.delete_blob(f"{PREFIX}part-1.csv")
    again = stage.execute(context)
    assert (again["files"], again["removed"]) == (1, 1)
    assert read_partition(again["destination"]) == {"part-0.csv": drop["part-0.csv"]}


@pytest.mark.parametrize("escaping", ["a\\..\\..\\escaped.csv", "/{tmp}/absolute.csv"])
def test_a_blob_name_leaving_the_partition_fails_the_stage_and_copies_nothing(
    nightly, landing, drop, tmp_path, escaping
):
    """Azurite lists ``a\\..\\..\\x`` as ``a/../../x``; ``<prefix>//abs`` is an absolute path."""
    from airflow.sdk.exceptions import AirflowFailException

    data = tmp_path / "data"
    stage = nightly(ML_STORAGE_ROOT=str(data)).get_task("stage_raw_drop")
    escaping = escaping.format(tmp=str(tmp_path).strip("/"))
    upload(landing, {**drop, escaping: b"not a drop file"})
    context = render(stage)

    with pytest.raises(AirflowFailException) as refused:
        stage.execute(context)
    assert repr(PREFIX + escaping.replace("\\", "/")) in str(refused.value)
    staged = [p for p in data.rglob("*") if p.is_file()] if data.exists() else []
    assert staged == [] and list(tmp_path.rglob("escaped.csv")) == [] and not (tmp_path / "absolute.csv").exists()
