"""Scheduler-driven runs on the real Airflow components (API server, scheduler, DAG
processor; LocalExecutor; Postgres metadata DB) on loopback: backfills with ``airflow backfill create``, the
``as_of`` model policy across a promotion, on-demand training triggered through the REST
API (valid and invalid conf), and a bulk backfill compared row for row with daily runs.

``ml_batch_scoring`` has data-interval semantics: ``--from-date 2026-11-01 --to-date
2026-11-03`` creates the runs that score ds 2026-11-01..2026-11-03.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pyarrow.dataset as pads
import pytest

from e2e_support import MODEL, wait_for

SCORING = "ml_batch_scoring"
ROWS = 1000
DAYS = [f"2026-11-0{d}" for d in range(1, 8)]  # ds 2026-11-01 .. 2026-11-07


@pytest.fixture(scope="module")
def services(airflow_services, champion):
    stack = airflow_services
    stack.generate_drops(DAYS, rows=ROWS, seed=3)
    for dag_id in (SCORING, "ml_train_on_demand", "ml_bulk_backfill_scoring"):
        wait_for(lambda dag_id=dag_id: stack.api("GET", f"/dags/{dag_id}")[0] == 200, 120, 2, f"{dag_id} parsed")
        stack.airflow("dags", "unpause", dag_id, capture_output=True)
    return stack


def backfill(stack, first_ds: str, last_ds: str, *extra: str, timeout: float = 900) -> float:
    """``airflow backfill create`` for the runs scoring first_ds..last_ds; waits for the
    backfill to complete and all its runs to succeed; returns the wall time."""
    started = time.monotonic()
    created = stack.airflow(
        "backfill",
        "create",
        "--dag-id",
        SCORING,
        "--from-date",
        first_ds,
        "--to-date",
        last_ds,
        "--max-active-runs",
        "2",
        *extra,
        check=False,
        capture_output=True,
    )
    assert created.returncode == 0, created.stdout[-3000:] + created.stderr[-3000:]
    _, listing = stack.api("GET", f"/backfills?dag_id={SCORING}&limit=100")
    backfill_id = max(b["id"] for b in listing["backfills"])
    wait_for(lambda: stack.api("GET", f"/backfills/{backfill_id}")[1].get("completed_at"), timeout, 5, "backfill done")
    _, runs = stack.api("GET", f"/dags/{SCORING}/dagRuns?limit=100&run_type=backfill")
    mine = [r for r in runs["dag_runs"] if r.get("backfill_id") == backfill_id] or runs["dag_runs"]
    failed = [(r["run_id"], r["state"]) for r in mine if r["state"] != "success"]
    assert not failed, f"backfill {backfill_id} runs not successful: {failed}"
    return time.monotonic() - started


def scored(stack, ds: str):
    path = stack.storage_root / "predictions" / "mnist" / f"ds={ds}"
    return pads.dataset(str(path), format="parquet").to_table().sort_by([("row_id", "ascending")])


def curated_rows(stack, ds: str) -> int:
    return pads.dataset(str(stack.storage_root / "curated" / "mnist" / f"ds={ds}"), format="parquet").count_rows()


@pytest.fixture(scope="module")
def backfills(services, champion):
    """Three days backfilled, then seven days with ``--reprocess-behavior completed`` (the
    first three are reprocessed, the other four are new), then one bulk run over the same
    seven days. Scored tables are kept after each step; wall times of the last two."""
    backfill(services, DAYS[0], DAYS[2])
    first = {ds: scored(services, ds) for ds in DAYS[:3]}
    # Reprocessed runs keep the conf of their earlier run unless one is given: say "current".
    daily_seconds = backfill(
        services,
        DAYS[0],
        DAYS[6],
        "--reprocess-behavior",
        "completed",
        "--dag-run-conf",
        json.dumps({"model_policy": "current"}),
    )
    daily = {ds: scored(services, ds) for ds in DAYS}
    started = time.monotonic()
    status, run = services.api(
        "POST",
        "/dags/ml_bulk_backfill_scoring/dagRuns",
        {"logical_date": None, "conf": {"start_ds": DAYS[0], "end_ds": DAYS[6]}},
    )
    assert status == 200, run
    final = wait_for(
        lambda: (
            (r := services.api("GET", f"/dags/ml_bulk_backfill_scoring/dagRuns/{run['dag_run_id']}")[1])["state"]
            in ("success", "failed")
            and r
        ),
        900,
        5,
        "bulk backfill run",
    )
    assert final["state"] == "success", final
    bulk_seconds = time.monotonic() - started
    bulk = {ds: scored(services, ds) for ds in DAYS}
    return {"first": first, "daily": daily, "bulk": bulk, "daily_seconds": daily_seconds, "bulk_seconds": bulk_seconds}


def test_backfill_scores_one_partition_per_day_with_one_pinned_version(services, backfills, champion):
    assert sorted(backfills["first"]) == DAYS[:3]
    for table in backfills["first"].values():
        assert table.num_rows == ROWS
        assert set(table.column("model_version").to_pylist()) == {champion.version}
    for ds in DAYS:
        assert backfills["daily"][ds].num_rows == curated_rows(services, ds) == ROWS


def test_reprocessing_completed_days_replaces_partitions_without_duplicates(backfills):
    for ds in DAYS[:3]:
        again = backfills["daily"][ds]
        assert again.num_rows == backfills["first"][ds].num_rows == ROWS
        assert len(set(again.column("row_id").to_pylist())) == ROWS
        assert again.column("row_id").equals(backfills["first"][ds].column("row_id"))


def test_bulk_backfill_matches_daily_runs_row_for_row(backfills, report_figure):
    for ds in DAYS:
        bulk, daily = backfills["bulk"][ds], backfills["daily"][ds]
        assert bulk.schema == daily.schema and bulk.num_rows == daily.num_rows == ROWS
        for name in bulk.column_names:
            if name.startswith("prob_"):
                # Same model, same rows; only the batching differs (float32 kernels may round differently).
                assert np.allclose(bulk.column(name).to_numpy(), daily.column(name).to_numpy(), atol=1e-5), (ds, name)
            else:
                assert bulk.column(name).equals(daily.column(name)), (
                    f"ds={ds}: column {name} differs between bulk and daily"
                )
    daily_seconds, bulk_seconds = backfills["daily_seconds"], backfills["bulk_seconds"]
    report_figure(
        f"backfill of 7 days x {ROWS} rows: daily runs {daily_seconds:.0f} s, bulk run {bulk_seconds:.0f} s, "
        f"daily/bulk {daily_seconds / bulk_seconds:.1f}x"
    )


def test_as_of_policy_scores_each_day_with_the_champion_of_that_day(services, backfills, mlflow_client, champion):
    """Version 'old' is champion until 2026-11-03T12:00, then 'new'. Day D resolves at the
    nightly's logical time for D (D+1 02:00 UTC, after that night's promotion): 11-02 at
    11-03 02:00 scores with old, 11-03 at 11-04 02:00 with new. Two days, one round of the
    DAG's two active runs. The history is in the legacy one-tag format, which is still read."""
    old = champion
    import mlflow

    mlflow.set_tracking_uri(services.tracking_uri)
    try:
        new = mlflow.register_model(old.source, MODEL, tags={"validation_status": "passed"})
    finally:
        mlflow.set_tracking_uri(None)
    history = [
        {"version": old.version, "since": "2026-10-01T00:00:00+00:00"},
        {"version": new.version, "since": "2026-11-03T12:00:00+00:00"},
    ]
    mlflow_client.set_registered_model_tag(MODEL, "champion_history", json.dumps(history))
    mlflow_client.set_registered_model_alias(MODEL, "champion", new.version)
    try:
        backfill(
            services,
            DAYS[1],
            DAYS[2],
            "--reprocess-behavior",
            "completed",
            "--dag-run-conf",
            json.dumps({"model_policy": "as_of"}),
        )
        versions = {ds: set(scored(services, ds).column("model_version").to_pylist()) for ds in DAYS[1:3]}
        assert versions == {DAYS[1]: {old.version}, DAYS[2]: {new.version}}
    finally:
        mlflow_client.set_registered_model_alias(MODEL, "champion", old.version)


@pytest.mark.parametrize(
    ("conf", "field"),
    [
        ({"epochs": -1}, "epochs"),
        ({"backend": "mpi"}, "backend"),
        ({"learning_rate": "fast"}, "learning_rate"),
        ({"batch_size": 2.5}, "batch_size"),
        ({"end_ds": "2026-13-45"}, "end_ds"),
        ({"jars": "/tmp/evil.jar"}, "jars"),
    ],
)
def test_invalid_training_conf_is_refused_at_trigger_time(services, conf, field):
    status, body = services.api("POST", "/dags/ml_train_on_demand/dagRuns", {"logical_date": None, "conf": conf})
    assert 400 <= status < 500 and field in body["detail"], (status, body)


def test_invalid_conf_through_the_cli_is_refused_naming_the_field(services):
    result = services.airflow(
        "dags", "trigger", "ml_train_on_demand", "--conf", json.dumps({"epochs": 0}), check=False, capture_output=True
    )
    assert result.returncode != 0 and "epochs" in result.stdout + result.stderr


def test_valid_training_conf_runs_with_those_parameters(services, mlflow_client):
    conf = {"epochs": 1, "end_ds": DAYS[2], "window_days": 1, "promote": False}
    status, run = services.api("POST", "/dags/ml_train_on_demand/dagRuns", {"logical_date": None, "conf": conf})
    assert status == 200, run
    final = wait_for(
        lambda: (
            (r := services.api("GET", f"/dags/ml_train_on_demand/dagRuns/{run['dag_run_id']}")[1])["state"]
            in ("success", "failed")
            and r
        ),
        900,
        5,
        "on-demand training run",
    )
    assert final["state"] == "success"
    (trained,) = mlflow_client.search_runs(
        mlflow_client.get_experiment_by_name(MODEL).experiment_id,
        filter_string=f"tags.airflow_run_id = '{run['dag_run_id']}'",
    )
    assert trained.data.params["epochs"] == "1"
    assert trained.data.params["data_start_ds"] == trained.data.params["data_end_ds"] == DAYS[2]


WRITERS = ("ingest_raw_drop", "score_partition")  # write curated/quarantine and predictions of the day


def task_instances(stack, run_id: str) -> dict[str, dict]:
    _, listing = stack.api("GET", f"/dags/{SCORING}/dagRuns/{run_id}/taskInstances?limit=100")
    return {ti["task_id"]: ti for ti in listing["task_instances"]}


def test_two_runs_writing_one_partition_take_turns(services):
    """A manual re-run of a day started while that day's run is still going: two runs of
    ml_batch_scoring with the same data interval, at once (the DAG allows two active runs).
    Each writer of the day's partitions must run alone; the day ends written once."""
    from datetime import datetime

    import sqlalchemy

    ds = "2026-11-09"  # a day no other test writes
    services.generate_drops([ds], rows=ROWS, seed=5)
    # Free the DAG's two active-run slots: catch-up runs the scheduler made for recent days.
    _, active = services.api("GET", f"/dags/{SCORING}/dagRuns?state=queued&state=running&limit=100")
    for other in active["dag_runs"]:
        services.api("PATCH", f"/dags/{SCORING}/dagRuns/{other['dag_run_id']}", {"state": "failed"})
    interval = {"data_interval_start": f"{ds}T00:00:00Z", "data_interval_end": "2026-11-10T00:00:00Z"}
    run_ids = []
    for second in ("00", "01"):
        status, run = services.api(
            "POST",
            f"/dags/{SCORING}/dagRuns",
            {"logical_date": f"{ds}T00:00:{second}Z", **interval, "conf": {"model_policy": "current"}},
        )
        assert status == 200, run
        run_ids.append(run["dag_run_id"])
    runs = [
        wait_for(
            lambda run_id=run_id: (
                (r := services.api("GET", f"/dags/{SCORING}/dagRuns/{run_id}")[1])["state"] in ("success", "failed")
                and r
            ),
            900,
            5,
            f"run {run_id}",
        )
        for run_id in run_ids
    ]
    assert [r["state"] for r in runs] == ["success", "success"], runs
    tis = [task_instances(services, run_id) for run_id in run_ids]

    def span(ti: dict) -> tuple[datetime, datetime]:
        return datetime.fromisoformat(ti["start_date"]), datetime.fromisoformat(ti["end_date"])

    for writer in WRITERS:
        (a_start, a_end), (b_start, b_end) = span(tis[0][writer]), span(tis[1][writer])
        assert a_end <= b_start or b_end <= a_start, (
            f"{writer} of both runs overlapped: {a_start}-{a_end}, {b_start}-{b_end}"
        )

    # The runs did run at once: both asked for the day's ingest lock before either ingest ended,
    # and one of them had to wait for it (its claim was rescheduled), so the turns above come
    # from the lock, not from the scheduler running one run after the other.
    first_ingest_end = min(span(ti["ingest_raw_drop"])[1] for ti in tis)
    engine = sqlalchemy.create_engine(services.extra_env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    with engine.connect() as db:
        pokes = db.execute(
            sqlalchemy.text(
                "SELECT ti.run_id, count(tr.id), min(coalesce(tr.start_date, ti.start_date)) FROM task_instance ti "
                "LEFT JOIN task_reschedule tr ON tr.ti_id = ti.id "
                "WHERE ti.dag_id = :dag AND ti.task_id = 'claim_curated' AND ti.run_id IN :runs GROUP BY ti.run_id"
            ).bindparams(sqlalchemy.bindparam("runs", expanding=True)),
            {"dag": SCORING, "runs": run_ids},
        ).all()
    engine.dispose()
    assert len(pokes) == 2 and sum(count for _, count, _ in pokes) >= 1, pokes
    assert all(first_poke < first_ingest_end for _, _, first_poke in pokes), (pokes, first_ingest_end)

    assert curated_rows(services, ds) == ROWS
    table = scored(services, ds)
    assert table.num_rows == ROWS and len(set(table.column("row_id").to_pylist())) == ROWS
    assert not list((services.storage_root / "_locks").rglob("*.lock"))  # both released
