"""The registry gate against a real MLflow tracking server (see conftest.py); no mocked client.

The operator's ``execute`` is called directly with the only context key it reads,
``logical_date``; the connection comes from ``AIRFLOW_CONN_MLFLOW_DEFAULT``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, TaskDeferred
from structlog.testing import capture_logs

from ml_registry.hooks import MlflowRegistryHook, MlflowServerUnavailableError
from ml_registry.links import MlflowModelVersionLink
from ml_registry.operators import ModelRegistryGateOperator

UTC = dt.UTC
REPO = Path(__file__).resolve().parents[2]


def run_gate(logical_date: dt.datetime | None = None, **kwargs):
    """Execute a gate the way a worker would, minus Airflow's bookkeeping. A deferral is
    carried out as Airflow does it: the trigger rebuilt from its serialized form (as the
    triggerer loads it), run until its event, then the gate resumed with that event."""
    gate = ModelRegistryGateOperator(task_id="gate_model", **kwargs)
    context = {"logical_date": logical_date or dt.datetime.now(UTC)}
    try:
        return gate.execute(context)
    except TaskDeferred as deferred:
        event = asyncio.run(first_event(deferred.trigger))
        return getattr(gate, deferred.method_name)(context, event=event.payload, **(deferred.kwargs or {}))


async def first_event(trigger):
    classpath, kwargs = trigger.serialize()
    module, name = classpath.rsplit(".", 1)
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    async for event in rebuilt.run():
        return event
    raise AssertionError(f"{classpath} ended without an event")


def set_status(db_path: Path, name: str, version: str, status: str) -> None:
    """Put a version in a registration state through the server's own store.

    The OSS server registers synchronously: every version it creates is READY at once, and
    no API sets the status. Writing the status into its SQLite store makes the real server
    answer PENDING_REGISTRATION / FAILED_REGISTRATION the way an asynchronous registry does.
    """
    with sqlite3.connect(db_path) as db:
        updated = db.execute(
            "UPDATE model_versions SET status = ? WHERE name = ? AND version = ?", (status, name, int(version))
        ).rowcount
    assert updated == 1


# -- selection and pinning ------------------------------------------------------------------


@pytest.mark.both_stores
def test_alias_resolves_and_pins_a_version(mlflow_conn, mlflow_server, make_model, logged_models):
    name = make_model((0, 1), champion=2)

    pinned = run_gate(model_name=name)

    assert pinned == {
        "name": name,
        "version": "2",
        "uri": f"models:/{name}/2",
        "run_id": logged_models[1].run_id,
        "source": logged_models[1].model_uri,
        "alias": "champion",
        "selected_by": "alias:champion",
        "ui_url": mlflow_server.uri,
    }
    assert json.loads(json.dumps(pinned)) == pinned  # a plain JSON XCom


def test_alias_moved_after_the_gate_still_scores_the_pinned_version(mlflow_conn, client, make_model):
    import mlflow
    import pandas as pd

    name = make_model((0, 1), champion=1)
    pinned = run_gate(model_name=name)
    client.set_registered_model_alias(name, "champion", "2")  # a promotion lands mid-run

    model = mlflow.pyfunc.load_model(pinned["uri"])  # what the scoring task does with the XCom
    rows = pd.DataFrame({"pixel0": [1, 2], "pixel1": [3, 4]}, dtype="int32")
    assert pinned["uri"] == f"models:/{name}/1"
    assert list(model.predict(rows)) == [0, 0]
    assert run_gate(model_name=name)["version"] == "2"  # the next run sees the move


@pytest.mark.parametrize("version", ["1", 1, " 1 "])
def test_explicit_version_ignores_the_alias(mlflow_conn, make_model, version):
    name = make_model((0, 1), champion=2)

    pinned = run_gate(model_name=name, version=version)

    assert (pinned["version"], pinned["uri"], pinned["alias"], pinned["selected_by"]) == (
        "1",
        f"models:/{name}/1",
        None,
        "version",
    )


def test_empty_version_means_the_alias(mlflow_conn, make_model):
    name = make_model((0, 1), champion=2)
    assert run_gate(model_name=name, version="")["selected_by"] == "alias:champion"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"version": "latest"}, "version must be a positive integer"),
        ({"version": "0"}, "version must be a positive integer"),
        ({"policy": "newest"}, "policy must be one of"),
        ({"alias": None}, "either an alias or a version"),
        ({"version": "1", "policy": "as_of"}, "exclude each other"),
        ({"policy": "as_of", "as_of": "last tuesday"}, "not an ISO-8601"),
    ],
)
def test_bad_parameters_fail_even_with_skip_if_no_model(mlflow_conn, make_model, kwargs, match):
    name = make_model((0,), champion=1)
    with pytest.raises(AirflowFailException, match=match):
        run_gate(model_name=name, skip_if_no_model=True, **kwargs)


def test_missing_model_fails(mlflow_conn):
    with pytest.raises(AirflowFailException, match=r"model 'no-such-model' is not eligible: registered model does not"):
        run_gate(model_name="no-such-model")


def test_missing_alias_fails_and_lists_the_aliases(mlflow_conn, client, make_model):
    name = make_model((0, 1))
    client.set_registered_model_alias(name, "challenger", "2")
    with pytest.raises(AirflowFailException, match=r"alias 'champion' is not set \(aliases: challenger->2\)"):
        run_gate(model_name=name)


def test_missing_version_fails(mlflow_conn, make_model):
    name = make_model((0,))
    with pytest.raises(
        AirflowFailException, match=rf"model '{name}' version 7 is not eligible: version does not exist"
    ):
        run_gate(model_name=name, version=7)


# -- readiness ------------------------------------------------------------------------------


def test_pending_version_fails_without_waiting(mlflow_conn, mlflow_server, make_model):
    name = make_model((0,), champion=1)
    set_status(mlflow_server.db_path, name, "1", "PENDING_REGISTRATION")
    with pytest.raises(
        AirflowFailException, match=r"version 1 is not eligible: status is PENDING_REGISTRATION, only READY"
    ):
        run_gate(model_name=name)


def pokes(logs: list[dict]) -> int:
    """How many times the gate found the version not yet usable and waited (its log)."""
    return sum("; checking again in" in entry["event"] for entry in logs)


def test_wait_for_ready_pokes_until_registration_finishes(mlflow_conn, mlflow_server, make_model):
    name = make_model((0,), champion=1)
    set_status(mlflow_server.db_path, name, "1", "PENDING_REGISTRATION")
    ready_from: list[float] = []

    def finish_registration() -> None:
        ready_from.append(time.monotonic())  # before the write: the gate cannot see READY earlier
        set_status(mlflow_server.db_path, name, "1", "READY")

    finish = threading.Timer(1.0, finish_registration)
    timeout = 30
    started = time.monotonic()
    finish.start()
    try:
        with capture_logs() as logs:
            pinned = run_gate(model_name=name, wait_for_ready_timeout=timeout, poke_interval=0.2)
        returned = time.monotonic()
    finally:
        finish.join()
    assert pinned["version"] == "1"
    # It waited while the version was registering, and returned once it was READY, not at
    # its timeout (a gate that slept through the timeout would return after it).
    assert pokes(logs) >= 1
    assert ready_from[0] < returned < started + timeout


def test_waiting_for_ready_is_deferred_not_slept_in_the_worker(mlflow_conn, mlflow_server, make_model):
    """execute() hands the wait to a trigger at once (no worker slot held while it waits);
    the trigger names the connection, never its credentials."""
    name = make_model((0,), champion=1)
    set_status(mlflow_server.db_path, name, "1", "PENDING_REGISTRATION")
    gate = ModelRegistryGateOperator(
        task_id="gate_model", model_name=name, wait_for_ready_timeout=3600, poke_interval=30
    )
    started = time.monotonic()
    with pytest.raises(TaskDeferred) as deferred:
        gate.execute({"logical_date": dt.datetime.now(UTC)})
    assert time.monotonic() - started < 30  # not one poke interval slept
    classpath, kwargs = deferred.value.trigger.serialize()
    assert classpath == "ml_registry.triggers.ModelVersionReadyTrigger"
    assert kwargs == {
        "mlflow_conn_id": "mlflow_default",
        "model_name": name,
        "version": "1",
        "poke_interval": 30.0,
        "timeout": 3600.0,
    }
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.kwargs == {"version": "1", "selected_by": "alias:champion", "alias": "champion"}


def test_wait_for_ready_gives_up_after_the_timeout(mlflow_conn, mlflow_server, make_model):
    name = make_model((0,), champion=1)
    set_status(mlflow_server.db_path, name, "1", "PENDING_REGISTRATION")
    timeout, poke_interval = 0.6, 0.2
    started = time.monotonic()
    with (
        capture_logs() as logs,
        pytest.raises(AirflowFailException, match=r"status is PENDING_REGISTRATION after waiting 0.6s"),
    ):
        run_gate(model_name=name, wait_for_ready_timeout=timeout, poke_interval=poke_interval)
    # It waited its whole timeout, then gave up: no more checks than the timeout leaves room
    # for, however slowly each one went.
    assert time.monotonic() - started >= timeout
    assert 1 <= pokes(logs) <= round(timeout / poke_interval) + 1


def test_failed_registration_fails_at_once_even_when_waiting(mlflow_conn, mlflow_server, make_model):
    name = make_model((0,), champion=1)
    set_status(mlflow_server.db_path, name, "1", "FAILED_REGISTRATION")
    timeout = 30
    started = time.monotonic()
    with capture_logs() as logs, pytest.raises(AirflowFailException, match="status is FAILED_REGISTRATION"):
        run_gate(model_name=name, wait_for_ready_timeout=timeout, poke_interval=0.2)
    # Not one check more: a version that failed to register never becomes READY.
    assert pokes(logs) == 0
    assert time.monotonic() - started < timeout


# -- checks ---------------------------------------------------------------------------------


def test_min_version(mlflow_conn, make_model):
    name = make_model((0, 1), champion=1)
    with pytest.raises(
        AirflowFailException, match=rf"model '{name}' version 1 is not eligible: min_version: .* below 2"
    ):
        run_gate(model_name=name, min_version=2)
    assert run_gate(model_name=name, min_version=1)["version"] == "1"


def test_required_tag_missing(mlflow_conn, make_model):
    name = make_model((0,), champion=1)
    with pytest.raises(
        AirflowFailException, match=r"version 1 is not eligible: required_tags: tag 'validation_status' is miss"
    ):
        run_gate(model_name=name, required_tags={"validation_status": "passed"})


def test_required_tag_wrong_value(mlflow_conn, client, make_model):
    name = make_model((0,), champion=1)
    client.set_model_version_tag(name, "1", "validation_status", "failed")
    with pytest.raises(AirflowFailException, match=r"tag 'validation_status' is 'failed', required 'passed'"):
        run_gate(model_name=name, required_tags={"validation_status": "passed"})
    client.set_model_version_tag(name, "1", "validation_status", "passed")
    assert run_gate(model_name=name, required_tags={"validation_status": "passed"})["version"] == "1"


def test_max_age_is_measured_at_the_logical_date(mlflow_conn, make_model):
    name = make_model((0,), champion=1)
    now = dt.datetime.now(UTC)

    assert run_gate(now, model_name=name, max_age=dt.timedelta(days=1))["version"] == "1"
    with pytest.raises(
        AirflowFailException, match=r"version 1 is not eligible: max_age: registered .* more than 1 day"
    ):
        run_gate(now + dt.timedelta(days=2), model_name=name, max_age=dt.timedelta(days=1))


@pytest.mark.both_stores
def test_failed_checks_are_reported_together(mlflow_conn, make_model):
    name = make_model((0,), champion=1)
    with pytest.raises(AirflowFailException) as failure:
        run_gate(model_name=name, min_version=3, required_tags={"validation_status": "passed"})
    assert "min_version" in str(failure.value) and "required_tags" in str(failure.value)


def test_signature_satisfied_by_expected_schema(mlflow_conn, make_model):
    name = make_model((0,), champion=1)
    assert run_gate(model_name=name, expected_schema={"pixel0": "integer", "pixel1": "integer", "label": "long"})


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ({"pixel0": "integer"}, r"input column 'pixel1' \(integer\) is missing from expected_schema"),
        (
            {"pixel0": "integer", "pixel1": "long"},
            r"column 'pixel1' is long in expected_schema, the model needs integer",
        ),
        (
            {"pixel0": "double", "pixel1": "integer"},
            r"column 'pixel0' is double in expected_schema, the model needs integer",
        ),
    ],
)
def test_signature_mismatch_with_expected_schema(mlflow_conn, make_model, schema, match):
    name = make_model((0,), champion=1)
    with pytest.raises(AirflowFailException, match=rf"model '{name}' version 1 is not eligible: signature: .*{match}"):
        run_gate(model_name=name, expected_schema=schema)


def write_partition(root: Path, columns: dict[str, pa.DataType]) -> Path:
    partition = root / "curated" / "ds=2026-11-28"
    partition.mkdir(parents=True)
    table = pa.table({name: pa.array([0, 255], type=arrow_type) for name, arrow_type in columns.items()})
    pq.write_table(table, partition / "part-00000.parquet")
    return partition


def test_signature_satisfied_by_a_parquet_partition(mlflow_conn, make_model, tmp_path):
    name = make_model((0,), champion=1)
    partition = write_partition(tmp_path, {"pixel0": pa.int32(), "pixel1": pa.int32(), "label": pa.int64()})
    assert run_gate(model_name=name, dataset_path=str(partition))["version"] == "1"


@pytest.mark.parametrize(
    ("columns", "match"),
    [
        ({"pixel0": pa.int32()}, r"input column 'pixel1' \(integer\) is missing from dataset"),
        (
            {"pixel0": pa.int32(), "pixel1": pa.int64()},
            r"column 'pixel1' is long in dataset .*, the model needs integer",
        ),
    ],
)
def test_signature_mismatch_with_a_parquet_partition(mlflow_conn, make_model, tmp_path, columns, match):
    name = make_model((0,), champion=1)
    partition = write_partition(tmp_path, columns)
    with pytest.raises(AirflowFailException, match=match):
        run_gate(model_name=name, dataset_path=str(partition))


def test_unreadable_dataset_path_fails(mlflow_conn, make_model, tmp_path):
    name = make_model((0,), champion=1)
    with pytest.raises(AirflowFailException, match="dataset_path .* cannot read a Parquet dataset"):
        run_gate(model_name=name, dataset_path=str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(AirflowFailException, match="no Parquet files"):
        run_gate(model_name=name, dataset_path=str(tmp_path / "empty"))


# -- tensor signatures (every workflow's model) ----------------------------------------------


def write_curated(root: Path, workflow, *, files: int = 1) -> Path:
    """A curated partition exactly as ``spark_jobs`` writes it without Spark (its footer
    carries the Spark schema with the ``features`` column's ``ml_tensor`` metadata)."""
    import numpy as np

    from spark_jobs.schema import curated_arrow_table

    partition = root / "curated" / "ds=2026-11-28"
    partition.mkdir(parents=True)
    for index in range(files):
        rows = np.zeros((3, *workflow.features.shape))
        table = curated_arrow_table(workflow, np.arange(3) + 3 * index, np.zeros(3), rows)
        pq.write_table(table, partition / f"part-{index:05d}.parquet")
    return partition


def layout_variant(name: str, **features):
    """A workflow whose features differ from the declared one (dtype or shape)."""
    from dataclasses import replace

    from spark_jobs import workflows

    workflow = workflows.load(name)
    return replace(workflow, features=replace(workflow.features, **features))


def test_tensor_signature_satisfied_by_a_curated_partition(mlflow_conn, make_tensor_model, tmp_path):
    from spark_jobs import workflows

    name = make_tensor_model()
    partition = write_curated(tmp_path, workflows.load("mnist"), files=2)
    assert run_gate(model_name=name, dataset_path=str(partition))["version"] == "1"
    # The dataset root (every day, partition column ds) reads the same.
    assert run_gate(model_name=name, dataset_path=str(partition.parent))["version"] == "1"


@pytest.mark.parametrize(
    ("workflow", "holds"),
    [
        (("diabetes", {}), r"float32 \[10\]"),  # another workflow's data: dtype and shape differ
        (("mnist", {"dtype": "float32"}), r"float32 \[28, 28\]"),  # wrong dtype
        (("mnist", {"shape": (784,)}), r"uint8 \[784\]"),  # wrong shape, same bytes per row
    ],
    ids=["other-workflow", "wrong-dtype", "wrong-shape"],
)
def test_tensor_signature_refuses_a_partition_of_another_layout(
    mlflow_conn, make_tensor_model, tmp_path, workflow, holds
):
    name = make_tensor_model()
    partition = write_curated(tmp_path, layout_variant(workflow[0], **workflow[1]))
    with pytest.raises(
        AirflowFailException,
        match=rf"version 1 is not eligible: signature: the model takes uint8 \[28, 28\]; "
        rf"dataset .*ds=2026-11-28 holds {holds}$",
    ):
        run_gate(model_name=name, dataset_path=str(partition))


def test_tensor_signature_refuses_a_partition_without_tensor_metadata(mlflow_conn, make_tensor_model, tmp_path):
    name = make_tensor_model()
    partition = tmp_path / "curated" / "ds=2026-11-28"
    partition.mkdir(parents=True)
    table = pa.table({"row_id": pa.array([1], pa.int64()), "features": pa.array([bytes(784)], pa.binary())})
    pq.write_table(table, partition / "part-00000.parquet")  # no Spark schema in the footer
    with pytest.raises(
        AirflowFailException,
        match=r"signature: the model takes uint8 \[28, 28\]; dataset .* has no 'ml_tensor' metadata on its 'features'",
    ):
        run_gate(model_name=name, dataset_path=str(partition))


def test_tensor_signature_refuses_a_partition_without_binary_features(mlflow_conn, make_tensor_model, tmp_path):
    name = make_tensor_model()
    partition = write_partition(tmp_path, {"pixel0": pa.int32(), "pixel1": pa.int32()})
    with pytest.raises(
        AirflowFailException,
        match=r"the model takes uint8 \[28, 28\] as 'features'; dataset .* has no 'features' column",
    ):
        run_gate(model_name=name, dataset_path=str(partition))
    other = write_partition(tmp_path / "ints", {"features": pa.int32()})
    with pytest.raises(AirflowFailException, match=r"holds 'features' as int32, not as binary tensors"):
        run_gate(model_name=name, dataset_path=str(other))


def test_tensor_signature_refuses_files_that_disagree(mlflow_conn, make_tensor_model, tmp_path):
    from spark_jobs import workflows

    name = make_tensor_model()
    partition = write_curated(tmp_path, workflows.load("mnist"))
    stray = write_curated(tmp_path / "stray", layout_variant("mnist", shape=(784,)))
    (stray / "part-00000.parquet").rename(partition / "part-00001.parquet")
    with pytest.raises(
        AirflowFailException, match=r"the files of dataset .* disagree: they hold uint8 \[28, 28\], uint8 \[784\]"
    ):
        run_gate(model_name=name, dataset_path=str(partition))


def test_tensor_signature_checked_against_expected_schema(mlflow_conn, make_tensor_model):
    name = make_tensor_model()
    assert run_gate(model_name=name, expected_schema={"features": {"dtype": "uint8", "shape": [28, 28]}})
    with pytest.raises(
        AirflowFailException, match=r"signature: the model takes uint8 \[28, 28\]; expected_schema holds float32 \[10\]"
    ):
        run_gate(model_name=name, expected_schema={"features": {"dtype": "float32", "shape": [10]}})
    with pytest.raises(
        AirflowFailException, match=r"the model takes uint8 \[28, 28\] as 'features'; expected_schema has no 'features'"
    ):
        run_gate(model_name=name, expected_schema={"pixel0": "integer"})
    with pytest.raises(AirflowFailException, match=r"expected_schema\['features'\] must be \{'dtype': ..., 'shape'"):
        run_gate(model_name=name, expected_schema={"features": "binary"})


def test_a_column_model_against_a_curated_partition_names_the_missing_columns(mlflow_conn, make_model, tmp_path):
    from spark_jobs import workflows

    name = make_model((0,), champion=1)
    partition = write_curated(tmp_path, workflows.load("mnist"))
    with pytest.raises(AirflowFailException, match=r"input column 'pixel0' \(integer\) is missing from dataset"):
        run_gate(model_name=name, dataset_path=str(partition))


# -- as_of ----------------------------------------------------------------------------------


def promote(client, name: str, version: str, logical_time: dt.datetime, moved_at: dt.datetime) -> None:
    """Promote the way the register job does (its own writer of the history), at ``moved_at``."""
    from spark_jobs.promotion import promote_to_champion

    assert promote_to_champion(client, name, version, logical_time=logical_time, clock=lambda: moved_at).moved


@pytest.fixture
def promoted_twice(client, make_model) -> str:
    """v1 champion from the nightly of Nov 1, v2 from the nightly of Nov 15 (logical time
    02:00, alias moved at 02:30)."""
    name = make_model((0, 1))
    for version, night in (
        ("1", dt.datetime(2026, 11, 1, 2, tzinfo=UTC)),
        ("2", dt.datetime(2026, 11, 15, 2, tzinfo=UTC)),
    ):
        promote(client, name, version, night, night.replace(minute=30))
    return name


@pytest.mark.both_stores
def test_as_of_picks_the_champion_of_that_date(mlflow_conn, promoted_twice):
    pinned = run_gate(model_name=promoted_twice, policy="as_of", as_of="2026-11-10")
    assert (pinned["version"], pinned["alias"], pinned["selected_by"]) == (
        "1",
        "champion",
        "as_of:champion@2026-11-10T00:00:00+00:00",
    )
    assert run_gate(model_name=promoted_twice, policy="as_of", as_of="2026-11-15T02:00:00Z")["version"] == "2"
    assert run_gate(model_name=promoted_twice, policy="as_of", as_of="2026-11-15T01:59:59Z")["version"] == "1"
    # The current policy sees only where the alias points now.
    assert run_gate(model_name=promoted_twice)["version"] == "2"


@pytest.mark.both_stores
def test_as_of_defaults_to_the_logical_date(mlflow_conn, promoted_twice):
    pinned = run_gate(dt.datetime(2026, 11, 14, 2, 0, tzinfo=UTC), model_name=promoted_twice, policy="as_of")
    assert (pinned["version"], pinned["selected_by"]) == ("1", "as_of:champion@2026-11-14T02:00:00+00:00")


@pytest.mark.both_stores
def test_as_of_refuses_a_date_before_any_champion(mlflow_conn, promoted_twice):
    refusal = (
        r"no version held alias 'champion' at 2026-10-01T00:00:00\+00:00: the first recorded promotion \(version 1\)"
    )
    with pytest.raises(AirflowFailException, match=refusal):
        run_gate(model_name=promoted_twice, policy="as_of", as_of="2026-10-01")


def test_as_of_without_history_fails(mlflow_conn, make_model):
    name = make_model((0,), champion=1)
    with pytest.raises(
        AirflowFailException, match="no promotion history recorded in registered-model tags 'champion_hist"
    ):
        run_gate(model_name=name, policy="as_of", as_of="2026-11-20")


def test_as_of_still_reads_the_legacy_single_tag_history(mlflow_conn, client, make_model):
    name = make_model((0, 1), champion=1)
    legacy = [{"version": "1", "since": "2026-10-01T02:00:00+00:00"}]
    client.set_registered_model_tag(name, "champion_history", json.dumps(legacy))
    promote(client, name, "2", dt.datetime(2026, 11, 15, 2, tzinfo=UTC), dt.datetime(2026, 11, 15, 2, 5, tzinfo=UTC))
    assert run_gate(model_name=name, policy="as_of", as_of="2026-10-01T02:00:00Z")["version"] == "1"
    assert run_gate(model_name=name, policy="as_of", as_of="2026-11-15T02:00:00Z")["version"] == "2"


def test_as_of_checks_the_version_it_picked(mlflow_conn, promoted_twice):
    with pytest.raises(AirflowFailException, match=rf"model '{promoted_twice}' version 1 is not eligible: min_version"):
        run_gate(model_name=promoted_twice, policy="as_of", as_of="2026-11-10", min_version=2)


@pytest.mark.both_stores
def test_batch_scoring_rescores_a_day_with_the_version_the_nightly_scored_it_with(
    mlflow_conn, client, make_model, parse_dags
):
    """Day 2026-11-28 was first scored by the nightly with logical time 11-29 02:00, which
    promoted v2 at 02:05 and scored at 02:10. A backfill of that day (its run's logical
    date is 11-28 00:00, when v1 was champion) must pick v2."""
    name = make_model((0, 1))
    promote(client, name, "1", dt.datetime(2026, 11, 1, 2, tzinfo=UTC), dt.datetime(2026, 11, 1, 2, 5, tzinfo=UTC))
    promote(client, name, "2", dt.datetime(2026, 11, 29, 2, tzinfo=UTC), dt.datetime(2026, 11, 29, 2, 5, tzinfo=UTC))
    from airflow.sdk.execution_time import macros

    dag = parse_dags().dags["mnist_batch_scoring"]
    gate = dag.get_task("gate_model")
    day = dt.datetime(2026, 11, 28, tzinfo=UTC)
    dag_run = SimpleNamespace(
        data_interval_start=day, data_interval_end=day + dt.timedelta(days=1), logical_date=day, run_after=day
    )
    as_of = dag.get_template_env().from_string(gate.as_of).render(macros=macros, dag_run=dag_run)

    pinned = run_gate(day, model_name=name, policy="as_of", as_of=as_of)
    assert (pinned["version"], pinned["selected_by"]) == ("2", "as_of:champion@2026-11-29T02:00:00+00:00")


# -- outcomes: retryable, failed, skipped --------------------------------------------------


def test_unreachable_server_is_retryable_while_ineligible_is_not(mlflow_conn, unreachable_conn, make_model):
    name = make_model((0,))  # no champion: ineligible

    with pytest.raises(AirflowFailException):
        run_gate(model_name=name)
    for skip in (False, True):  # skip_if_no_model must not turn an outage into a silent skip
        with pytest.raises(MlflowServerUnavailableError) as outage:
            run_gate(model_name=name, mlflow_conn_id=unreachable_conn.conn_id, skip_if_no_model=skip)
        assert not isinstance(outage.value, (AirflowFailException, AirflowSkipException))
        assert unreachable_conn.uri in str(outage.value)


@pytest.mark.both_stores
def test_skip_if_no_model_skips_only_while_there_is_no_champion(mlflow_conn, make_model):
    name = make_model((0,))
    with pytest.raises(AirflowSkipException, match=r"alias 'champion' is not set"):
        run_gate(model_name=name, skip_if_no_model=True)
    with pytest.raises(AirflowSkipException, match=r"registered model does not exist"):
        run_gate(model_name="never-registered", skip_if_no_model=True)


@pytest.mark.both_stores
def test_skip_if_no_model_still_fails_an_ineligible_champion(mlflow_conn, mlflow_server, client, make_model):
    """A champion that fails validation or does not fit the data is a problem to see (a red
    run), not a reason to go green without predictions."""
    name = make_model((0,), champion=1)
    client.set_model_version_tag(name, "1", "validation_status", "failed")
    with pytest.raises(AirflowFailException, match=r"tag 'validation_status' is 'failed'"):
        run_gate(model_name=name, required_tags={"validation_status": "passed"}, skip_if_no_model=True)
    with pytest.raises(AirflowFailException, match=r"signature: input column 'pixel1'"):
        run_gate(model_name=name, expected_schema={"pixel0": "integer"}, skip_if_no_model=True)
    with pytest.raises(AirflowFailException, match=r"version 7 is not eligible: version does not exist"):
        run_gate(model_name=name, version=7, skip_if_no_model=True)
    with pytest.raises(AirflowFailException, match=r"no version held alias"):
        run_gate(model_name=name, policy="as_of", as_of="2026-11-20", skip_if_no_model=True)
    if mlflow_server.db_path is not None:
        set_status(mlflow_server.db_path, name, "1", "FAILED_REGISTRATION")
        with pytest.raises(AirflowFailException, match=r"status is FAILED_REGISTRATION"):
            run_gate(model_name=name, skip_if_no_model=True)


# -- hook -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("conn", "uri"),
    [
        ({"host": "127.0.0.1", "port": 5000, "schema": "http"}, "http://127.0.0.1:5000"),
        ({"host": "127.0.0.1", "port": 5000}, "http://127.0.0.1:5000"),
        ({"host": "http://127.0.0.1:5000"}, "http://127.0.0.1:5000"),
        ({"host": "https://mlflow.example.com/"}, "https://mlflow.example.com"),
        ({"host": "mlflow.example.com", "schema": "https", "port": 8443}, "https://mlflow.example.com:8443"),
        ({"host": "https://mlflow.example.com/tracking", "port": 8443}, "https://mlflow.example.com:8443/tracking"),
        ({"host": "https://user:secret@mlflow.example.com"}, "https://mlflow.example.com"),
    ],
)
def test_hook_tracking_uri(monkeypatch, conn, uri):
    monkeypatch.setenv("AIRFLOW_CONN_MLFLOW_URI_TEST", json.dumps({"conn_type": "http", **conn}))
    hook = MlflowRegistryHook(mlflow_conn_id="mlflow_uri_test")
    assert hook.tracking_uri == uri
    assert hook.client_env() == {"MLFLOW_TRACKING_URI": uri}


@pytest.mark.parametrize(
    ("conn_uri", "uri"),
    [
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
        ("https://mlflow.example.com:8443", "https://mlflow.example.com:8443"),
    ],
)
def test_hook_tracking_uri_from_a_uri_form_connection(monkeypatch, conn_uri, uri):
    monkeypatch.setenv("AIRFLOW_CONN_MLFLOW_URI_TEST", conn_uri)
    hook = MlflowRegistryHook(mlflow_conn_id="mlflow_uri_test")
    assert hook.tracking_uri == uri
    assert hook.client_env() == {"MLFLOW_TRACKING_URI": uri}


@pytest.mark.parametrize(
    ("conn", "auth"),
    [
        (
            {"login": "alice", "password": "s3cret-pw"},
            {"MLFLOW_TRACKING_USERNAME": "alice", "MLFLOW_TRACKING_PASSWORD": "s3cret-pw"},
        ),
        ({"password": "tok-in-password"}, {"MLFLOW_TRACKING_TOKEN": "tok-in-password"}),
        ({"extra": {"token": "tok-in-extra"}}, {"MLFLOW_TRACKING_TOKEN": "tok-in-extra"}),
    ],
)
def test_hook_credentials_go_to_the_environment(monkeypatch, conn, auth):
    monkeypatch.setenv(
        "AIRFLOW_CONN_MLFLOW_AUTH_TEST", json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": 5000, **conn})
    )
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "left-over-from-another-connection")
    hook = MlflowRegistryHook(mlflow_conn_id="mlflow_auth_test")

    assert hook.client_env() == {"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000", **auth}
    client = hook.get_conn()
    assert client.tracking_uri == "http://127.0.0.1:5000"
    assert {k: v for k, v in os.environ.items() if k.startswith("MLFLOW_TRACKING_")} == hook.client_env()


def test_hook_ui_url_can_be_overridden(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_MLFLOW_UI_TEST",
        json.dumps(
            {"conn_type": "http", "host": "mlflow", "port": 5000, "extra": {"ui_url": "https://mlflow.example.com/"}}
        ),
    )
    hook = MlflowRegistryHook(mlflow_conn_id="mlflow_ui_test")
    assert (hook.tracking_uri, hook.ui_url) == ("http://mlflow:5000", "https://mlflow.example.com")


# -- extra link and plugin --------------------------------------------------------------------


def test_link_points_at_the_pinned_version(monkeypatch, mlflow_conn, mlflow_server, make_model):
    from airflow.sdk.execution_time.xcom import XCom

    name = make_model((0, 1), champion=2)
    pinned = run_gate(model_name=name)
    gate = ModelRegistryGateOperator(task_id="gate_model", model_name=name)
    ti_key = SimpleNamespace(dag_id="d", task_id="gate_model", run_id="r", map_index=-1, state="success")
    # The Task SDK answers XCom reads through the worker's supervisor, absent here: stand in
    # for that edge with the value the gate returned.
    xcoms = {"return_value": pinned}
    monkeypatch.setattr(XCom, "get_value", classmethod(lambda cls, *, ti_key, key: xcoms.get(key)))

    (link,) = [link for link in gate.operator_extra_links if isinstance(link, MlflowModelVersionLink)]
    assert link.name == "MLflow model version"
    assert link.get_link(gate, ti_key=ti_key) == f"{mlflow_server.uri}/#/models/{name}/versions/2"

    xcoms.clear()
    assert link.get_link(gate, ti_key=ti_key) == ""  # a failed or skipped gate pinned nothing


def test_link_of_a_skipped_gate_is_empty_without_an_xcom_lookup(monkeypatch):
    from airflow.sdk.execution_time.xcom import XCom

    def no_lookup(cls, *, ti_key, key):
        raise AssertionError("looked up the XCom of a skipped task")

    monkeypatch.setattr(XCom, "get_value", classmethod(no_lookup))
    skipped_ti = SimpleNamespace(dag_id="d", task_id="gate_model", run_id="r", map_index=-1, state="skipped")
    gate = ModelRegistryGateOperator(task_id="gate_model", model_name="mnist")
    assert MlflowModelVersionLink().get_link(gate, ti_key=skipped_ti) == ""


def test_plugin_loads_from_the_plugins_folder_and_the_link_serializes(tmp_path):
    """In a fresh interpreter, as the scheduler would: no import errors, no heavy imports."""
    script = """
import json, sys
from airflow import plugins_manager
from airflow.sdk import DAG
from airflow.serialization.serialized_objects import DagSerialization
plugins, errors = plugins_manager._get_plugins()
from ml_registry.operators import ModelRegistryGateOperator
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"mlflow", "pyarrow", "pandas", "pyspark"})
with DAG("gate_link", schedule=None) as dag:
    ModelRegistryGateOperator(task_id="gate_model", model_name="mnist")
serialized = DagSerialization.to_dict(dag)
task = DagSerialization.from_dict(json.loads(json.dumps(serialized))).get_task("gate_model")
print(json.dumps({
    "plugins": sorted(p.name for p in plugins),
    "errors": errors,
    "links": [type(l).__name__ for p in plugins for l in p.operator_extra_links],
    "heavy": heavy,
    "serialized_links": serialized["dag"]["tasks"][0]["__var"].get("_operator_extra_links"),
    "ui_links": {name: type(link).__name__ for name, link in task.operator_extra_link_dict.items()},
}))
"""
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PYTHONPATH": str(REPO / "plugins"),
    }
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])

    assert "ml_registry" in report["plugins"]
    assert report["errors"] == {}
    assert "MlflowModelVersionLink" in report["links"]
    assert report["heavy"] == []
    assert report["serialized_links"] == {"MLflow model version": "_link_MlflowModelVersionLink"}
    # What the API server holds: the link read back from the XCom the worker pushed.
    assert report["ui_links"] == {"MLflow model version": "XComOperatorLink"}


def test_max_age_without_a_run_time_is_refused_not_measured_at_the_wall_clock(mlflow_conn, make_model):
    name = make_model((0,), champion=1)
    gate = ModelRegistryGateOperator(task_id="gate_model", model_name=name, max_age=dt.timedelta(days=1))
    with pytest.raises(AirflowFailException, match="max_age: the run has neither a logical date nor run_after"):
        gate.execute({"logical_date": None})
