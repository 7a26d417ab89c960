"""Scheduler-driven runs on the real Airflow components (API server, scheduler, DAG
processor; LocalExecutor; Postgres metadata DB) on loopback: backfills with ``airflow backfill create``, the
``as_of`` model policy across a promotion, on-demand training triggered through the REST
API (a diverging rate, invalid conf), a bulk backfill (docs/scheduling.md's command, run as
written) compared row for row with daily runs,
undeclared conf keys arriving by the CLI, a
backfill and TriggerDagRunOperator, a future logical date from the CLI, a week of days whose
drops never came (skipped, not failed), and Airflow's own kills of a running Spark task.
(A valid on-demand run that promotes, and the champion Asset starting the re-scoring DAG,
run on the platform of ``make up``: tests/platform/test_platform_flows.py.)

``mnist_batch_scoring`` has data-interval semantics: ``--from-date 2026-11-01 --to-date
2026-11-03`` creates the runs that score ds 2026-11-01..2026-11-03.
"""

from __future__ import annotations

import inspect
import json
import time
from datetime import date, timedelta

import numpy as np
import pyarrow.dataset as pads
import pytest
from reader_shell import bash, block_after

from e2e_support import MODEL, backfills_done, finished_run, task_instances, task_log, wait_for
from e2e_support import backfill as backfill_runs
from local_stack import REPO
from process_markers import describe, marked_processes, wait_for_marked_process, wait_for_no_marked_processes

SCORING = "mnist_batch_scoring"
BULK = "mnist_bulk_backfill_scoring"
ROWS = 1000
DAYS = [f"2026-11-0{d}" for d in range(1, 4)]  # ds 2026-11-01 .. 2026-11-03
REPROCESSED = DAYS[1:]  # backfilled again, over completed runs, with the as_of policy
GUIDE = REPO / "docs" / "scheduling.md"
NO_DROP_WEEK = ("2026-10-01", "2026-10-07")  # days no test drops anything for
UNKNOWN_KEY = "unknown_key"  # the key tests/e2e/dags/e2e_airflow_paths.py triggers with
MARKER_VAR = "E2E_MARKER"  # ditto: set on every process of e2e_spark_kill's jobs


@pytest.fixture(scope="module")
def champion(scoring_champion):
    """This module's subject is scheduling: any passed champion will do (see scoring_champion)."""
    return scoring_champion


@pytest.fixture(scope="module")
def services(airflow_services, champion):
    stack = airflow_services
    stack.generate_drops(DAYS, rows=ROWS, seed=3)
    dags = (SCORING, "mnist_train_on_demand", BULK)
    for dag_id in (*dags, "e2e_trigger_with_unknown_key", "e2e_spark_kill"):
        wait_for(lambda dag_id=dag_id: stack.api("GET", f"/dags/{dag_id}")[0] == 200, 120, 2, f"{dag_id} parsed")
        stack.airflow("dags", "unpause", dag_id, capture_output=True)
    return stack


def assert_refused_at_check_conf(stack, dag_id: str, run_id: str) -> None:
    """The run failed at ``check_conf``, whose log names the undeclared key; nothing else ran."""
    run = finished_run(stack, dag_id, run_id)
    tis = task_instances(stack, dag_id, run_id)
    assert run["state"] == "failed" and tis["check_conf"]["state"] == "failed", (run, tis["check_conf"])
    ran = {
        task: ti["state"]
        for task, ti in tis.items()
        if task != "check_conf" and ti["state"] not in (None, "upstream_failed")
    }
    assert ran == {}, ran
    log = task_log(stack, dag_id, run_id, "check_conf")
    assert f"unknown parameter(s) ['{UNKNOWN_KEY}']" in log, log[-2000:]


def backfill(stack, first_ds: str, last_ds: str, *extra: str) -> float:
    """The scoring DAG backfilled over first_ds..last_ds (every run succeeded); the wall time."""
    started = time.monotonic()
    backfill_runs(stack, SCORING, first_ds, last_ds, *extra)
    return time.monotonic() - started


def scored(stack, ds: str):
    path = stack.storage_root / "predictions" / "mnist" / f"ds={ds}"
    return pads.dataset(str(path), format="parquet").to_table().sort_by([("row_id", "ascending")])


def scored_files(stack, ds: str) -> set[str]:
    return {p.name for p in (stack.storage_root / "predictions" / "mnist" / f"ds={ds}").glob("*.parquet")}


def bulk_block() -> str:
    """docs/scheduling.md's bulk-backfill command, as a reader runs it."""
    return block_after(GUIDE, "## Backfill, in bulk")


def bulk_range() -> list[str]:
    """The days the guide's bulk run covers (its ``start_ds..end_ds``)."""
    conf = json.loads(bulk_block().split("--conf '", 1)[1].split("'", 1)[0])
    first, last = date.fromisoformat(conf["start_ds"]), date.fromisoformat(conf["end_ds"])
    return [str(first + timedelta(days=n)) for n in range((last - first).days + 1)]


def curated_rows(stack, ds: str) -> int:
    return pads.dataset(str(stack.storage_root / "curated" / "mnist" / f"ds={ds}"), format="parquet").count_rows()


@pytest.fixture(scope="module")
def backfills(services, champion):
    """Three days backfilled with the README's flags (``--reprocess-behavior completed``, the
    conf stated; none of the days has run before), then one bulk run over the same three days
    and one more, never curated. Scored tables and files are kept after each step; wall
    times of both."""
    # Reprocessed runs keep the conf of their earlier run unless one is given: say "current".
    daily_seconds = backfill(
        services,
        DAYS[0],
        DAYS[-1],
        "--reprocess-behavior",
        "completed",
        "--dag-run-conf",
        json.dumps({"model_policy": "current"}),
    )
    daily = {ds: scored(services, ds) for ds in DAYS}
    # The bulk run, triggered by the guide's command as written, spans days never curated:
    # it writes the three it has, then fails naming the missing ones (its first try is
    # enough; the retries are stopped).
    started = time.monotonic()
    triggered = bash(bulk_block(), cwd=REPO, env=services.env())
    assert triggered.returncode == 0, triggered.stdout + triggered.stderr
    (run,) = services.api("GET", f"/dags/{BULK}/dagRuns")[1]["dag_runs"]
    run_id = run["dag_run_id"]
    score_range = wait_for(
        lambda: (
            (ti := task_instances(services, BULK, run_id).get("score_range"))
            and ti["state"] in ("up_for_retry", "failed")
            and ti
        ),
        900,
        1,
        "bulk backfill's first try",
    )
    bulk_seconds = time.monotonic() - started
    bulk_log = task_log(services, BULK, run_id, "score_range", score_range["try_number"])
    # Failing the task (not the run) lets its teardown release the predictions locks.
    path = f"/dags/{BULK}/dagRuns/{run_id}/taskInstances/score_range"
    assert services.api("PATCH", path, {"new_state": "failed"})[0] == 200
    assert finished_run(services, BULK, run_id)["state"] == "failed"
    bulk = {ds: scored(services, ds) for ds in DAYS}
    return {
        "daily": daily,
        "bulk": bulk,
        "bulk_log": bulk_log,
        "daily_seconds": daily_seconds,
        "bulk_seconds": bulk_seconds,
    }


@pytest.fixture(scope="module")
def as_of_reprocess(services, backfills, mlflow_client, champion):
    """Days 2-3, completed by the daily backfill, backfilled again (``--reprocess-behavior
    completed``) with the ``as_of`` policy across a promotion: version 'new' registered and
    made champion since 2026-11-03T12:00, 'old' (the module's champion) before. The history
    is in the legacy one-tag format, which is still read. Returns ``(old, new, the days'
    scored tables after it, their files before and after it)``; the champion is 'old' again
    afterwards."""
    import mlflow

    old = champion
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
    files_before = {ds: scored_files(services, ds) for ds in REPROCESSED}  # the bulk run's
    try:
        backfill(
            services,
            REPROCESSED[0],
            REPROCESSED[-1],
            "--reprocess-behavior",
            "completed",
            "--dag-run-conf",
            json.dumps({"model_policy": "as_of"}),
        )
    finally:
        mlflow_client.set_registered_model_alias(MODEL, "champion", old.version)
    again = {ds: scored(services, ds) for ds in REPROCESSED}
    return old, new, again, {ds: (files_before[ds], scored_files(services, ds)) for ds in REPROCESSED}


def test_backfill_scores_one_partition_per_day_with_one_pinned_version(services, backfills, champion):
    for ds in DAYS:
        table = backfills["daily"][ds]
        assert table.num_rows == curated_rows(services, ds) == ROWS
        assert len(set(table.column("row_id").to_pylist())) == ROWS
        assert set(table.column("model_version").to_pylist()) == {champion.version}


def test_reprocessing_completed_days_replaces_partitions_without_duplicates(backfills, as_of_reprocess):
    """A backfill over completed days (``--reprocess-behavior completed``) rewrites each of
    them (no file written before it is left), each row once, the same rows."""
    _, _, again, again_files = as_of_reprocess
    for ds in REPROCESSED:
        before, after = again_files[ds]
        assert before and after and not before & after, ds
        assert again[ds].num_rows == backfills["daily"][ds].num_rows == ROWS
        assert len(set(again[ds].column("row_id").to_pylist())) == ROWS
        assert again[ds].column("row_id").equals(backfills["daily"][ds].column("row_id"))


def test_bulk_backfill_matches_daily_runs_row_by_row_and_fails_for_missing_days(services, backfills, report_figure):
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
    covered = bulk_range()
    missing = [ds for ds in covered if ds not in DAYS]
    assert set(DAYS) < set(covered), (DAYS, covered)  # the guide's range: these days and more
    for ds in missing:
        assert not (services.storage_root / "predictions" / "mnist" / f"ds={ds}").exists()
    assert f"no curated partition for: {missing}" in backfills["bulk_log"], backfills["bulk_log"][-3000:]
    daily_seconds, bulk_seconds = backfills["daily_seconds"], backfills["bulk_seconds"]
    report_figure(
        f"backfill of {len(DAYS)} days x {ROWS} rows: daily runs {daily_seconds:.0f} s, bulk run {bulk_seconds:.0f} s, "
        f"daily/bulk {daily_seconds / bulk_seconds:.1f}x"
    )


def test_as_of_policy_scores_each_day_with_the_champion_of_that_day(services, as_of_reprocess):
    """Day D resolves at the nightly's logical time for D (D+1 02:00 UTC, after that night's
    promotion): 11-02 at 11-03 02:00 scores with 'old', 11-03 at 11-04 02:00 with 'new'.
    Two days, one round of the DAG's two active runs."""
    old, new, again, _ = as_of_reprocess
    versions = {ds: set(again[ds].column("model_version").to_pylist()) for ds in REPROCESSED}
    assert versions == {DAYS[1]: {old.version}, DAYS[2]: {new.version}}


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
    status, body = services.api("POST", "/dags/mnist_train_on_demand/dagRuns", {"logical_date": None, "conf": conf})
    assert 400 <= status < 500 and field in body["detail"], (status, body)


def test_a_diverging_rate_never_leaves_a_broken_version_promoted_or_unexplained(services, mlflow_client, champion):
    """A learning rate 100 times the workflow's default, through the on-demand DAG's Params:
    either the best epoch is logged, registered as challenger and refused with its reason
    (the champion stays), or training fails in one clear line and nothing is registered."""
    from spark_jobs import workflows

    rate = workflows.load("mnist").model.training.learning_rate * 100
    before = mlflow_client.get_model_version_by_alias(MODEL, "champion")
    conf = {"learning_rate": rate, "epochs": 2, "end_ds": DAYS[-1], "window_days": 1, "promote": True}
    status, run = services.api("POST", "/dags/mnist_train_on_demand/dagRuns", {"logical_date": None, "conf": conf})
    assert status == 200, run
    final = finished_run(services, "mnist_train_on_demand", run["dag_run_id"])
    tis = task_instances(services, "mnist_train_on_demand", run["dag_run_id"])
    (trained,) = mlflow_client.search_runs(
        mlflow_client.get_experiment_by_name(MODEL).experiment_id,
        filter_string=f"tags.airflow_run_id = '{run['dag_run_id']}'",
    )
    assert float(trained.data.params["learning_rate"]) == rate
    versions = mlflow_client.search_model_versions(f"name = '{MODEL}' and run_id = '{trained.info.run_id}'")
    assert mlflow_client.get_model_version_by_alias(MODEL, "champion").version == before.version
    if tis["train_model"]["state"] == "success":
        (version,) = versions
        assert version.tags["best_epoch"] == trained.data.tags["best_epoch"] != "0"
        assert version.tags["validation_status"] == "failed", version.tags
        assert "below the floor" in version.tags["validation_reason"]
        assert tis["publish_champion"]["state"] == "skipped" and final["state"] == "success"
    else:
        assert versions == [] and final["state"] == "failed"
        # Not retried: the same rate diverges again (the job's exit status says so).
        assert tis["train_model"]["try_number"] == 1 and tis["train_model"]["state"] == "failed", tis["train_model"]
        assert trained.info.status == "FAILED" and trained.data.tags["stop_reason"] == "diverged"
        log = task_log(services, "mnist_train_on_demand", run["dag_run_id"], "train_model")
        assert "TrainingDiverged: training diverged with no usable epoch" in log, log[-3000:]


def test_invalid_conf_through_the_cli_is_refused_naming_the_field(services):
    result = services.airflow(
        "dags",
        "trigger",
        "mnist_train_on_demand",
        "--conf",
        json.dumps({"epochs": 0}),
        check=False,
        capture_output=True,
    )
    assert result.returncode != 0 and "epochs" in result.stdout + result.stderr


def test_a_future_logical_date_through_the_cli_is_refused_naming_it(services):
    """``airflow dags trigger`` writes its run to the metadata DB itself, past the API's door:
    the platform's guard (plugins/airflow_local_settings.py) refuses it there, and no run exists."""
    result = services.airflow(
        "dags",
        "trigger",
        "mnist_train_on_demand",
        "--logical-date",
        "2099-01-01T00:00:00+00:00",
        check=False,
        capture_output=True,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "logical_date 2099-01-01T00:00:00+00:00 is in the future" in output, output[-3000:]
    status, runs = services.api("GET", "/dags/mnist_train_on_demand/dagRuns?logical_date_gte=2099-01-01T00:00:00Z")
    assert status == 200 and runs["dag_runs"] == [], runs


def test_undeclared_conf_key_from_the_cli_fails_the_run_at_check_conf(services):
    run_id = "e2e_cli_unknown_key"
    created = services.airflow(
        "dags",
        "trigger",
        "mnist_train_on_demand",
        "--run-id",
        run_id,
        "--conf",
        json.dumps({UNKNOWN_KEY: 1}),
        check=False,
        capture_output=True,
    )
    assert created.returncode == 0, created.stdout[-2000:] + created.stderr[-2000:]
    assert_refused_at_check_conf(services, "mnist_train_on_demand", run_id)


def test_undeclared_conf_key_from_trigger_dag_run_operator_fails_the_run_at_check_conf(services):
    status, run = services.api("POST", "/dags/e2e_trigger_with_unknown_key/dagRuns", {"logical_date": None})
    assert status == 200, run
    assert finished_run(services, "e2e_trigger_with_unknown_key", run["dag_run_id"])["state"] == "success"
    assert_refused_at_check_conf(services, "mnist_train_on_demand", f"{run['dag_run_id']}__triggered")


def test_undeclared_conf_key_in_a_backfill_fails_its_run_at_check_conf(services):
    ds = "2026-10-20"  # a day no other test runs: the run must fail before any ingest
    created = services.airflow(
        "backfill",
        "create",
        "--dag-id",
        SCORING,
        "--from-date",
        ds,
        "--to-date",
        ds,
        "--dag-run-conf",
        json.dumps({UNKNOWN_KEY: 1}),
        check=False,
        capture_output=True,
    )
    assert created.returncode == 0, created.stdout[-3000:] + created.stderr[-3000:]
    run = wait_for(
        lambda: next(
            (
                r
                for r in services.api("GET", f"/dags/{SCORING}/dagRuns?run_type=backfill&limit=100")[1]["dag_runs"]
                if r["logical_date"].startswith(ds)
            ),
            None,
        ),
        120,
        2,
        f"backfill run of {ds}",
    )
    assert_refused_at_check_conf(services, SCORING, run["dag_run_id"])
    backfills_done(services, SCORING)  # the next backfill of the DAG may start


def test_a_week_without_drops_ends_skipped_with_the_reason_never_failed_or_retried(services):
    """Seven days whose raw drop never came, past their deadline: each run's wait_for_raw_drop
    is skipped once with the reason in its log, everything after it skipped, the run a success
    (nothing failed, nothing retried, nothing ingested)."""
    first, last = NO_DROP_WEEK
    runs = backfill_runs(services, SCORING, first, last, "--dag-run-conf", json.dumps({"model_policy": "current"}))
    assert len(runs) == 7 and set(runs.values()) == {"success"}, runs
    for run_id in runs:
        tis = task_instances(services, SCORING, run_id)
        wait = tis["wait_for_raw_drop"]
        assert (wait["state"], wait["try_number"]) == ("skipped", 1), wait
        ran = {task: ti["state"] for task, ti in tis.items() if task not in ("check_conf", "wait_for_raw_drop")}
        assert set(ran.values()) == {"skipped"}, ran
        ds = services.api("GET", f"/dags/{SCORING}/dagRuns/{run_id}")[1]["logical_date"][:10]
        log = task_log(services, SCORING, run_id, "wait_for_raw_drop")
        assert f"no raw drop for ds={ds} at " in log and "ML_RAW_DROP_DEADLINE_HOURS=24" in log, log[-2000:]
        assert not (services.storage_root / "curated" / "mnist" / f"ds={ds}").exists()


def test_airflow_kills_of_a_running_spark_task_leave_no_process_of_the_job(services):
    """Two Spark tasks run with their Python workers up; one is marked failed through the
    REST API (the worker's supervisor sees it at its next heartbeat and SIGTERMs the task),
    the other reaches its ``execution_timeout`` (the task runner's alarm). Both paths run
    the operator's ``on_kill``, whose tree kill must fit inside Airflow's own escalation
    from SIGTERM to SIGKILL of the task process, or the job would outlive the task."""
    from airflow.sdk.execution_time.supervisor import ActivitySubprocess

    from ml_registry.spark_submit import MlflowSparkSubmitOperator

    airflow_escalation = inspect.signature(ActivitySubprocess.kill).parameters["escalation_delay"].default
    grace = inspect.signature(MlflowSparkSubmitOperator.__init__).parameters["kill_grace_period"].default
    assert grace < airflow_escalation, (grace, airflow_escalation)

    status, run = services.api("POST", "/dags/e2e_spark_kill/dagRuns", {"logical_date": None})
    assert status == 200, run
    run_id = run["dag_run_id"]
    markers = {task: f"{run_id}/{task}" for task in ("held", "timed_out")}
    # Both jobs are real: each reaches its pyspark workers before anything is killed.
    for marker in markers.values():
        wait_for_marked_process(MARKER_VAR, marker, "pyspark.daemon", timeout=300)
    tree = {task: describe(marked_processes(MARKER_VAR, marker)) for task, marker in markers.items()}

    path = f"/dags/e2e_spark_kill/dagRuns/{run_id}/taskInstances/held"
    status, body = services.api("PATCH", path, {"new_state": "failed"})
    assert status == 200, body
    final = finished_run(services, "e2e_spark_kill", run_id, timeout=600)
    tis = task_instances(services, "e2e_spark_kill", run_id)
    assert final["state"] == "failed" and {t: ti["state"] for t, ti in tis.items()} == {
        "held": "failed",
        "timed_out": "failed",
    }
    for task, marker in markers.items():
        left = wait_for_no_marked_processes(MARKER_VAR, marker, timeout=30)
        assert left == [], f"{task}: processes of the job outlived the task (tree was {tree[task]}): {left}"
        log = task_log(services, "e2e_spark_kill", run_id, task)
        assert "Terminating spark-submit" in log, log[-3000:]
    assert "AirflowTaskTimeout" in task_log(services, "e2e_spark_kill", run_id, "timed_out")


WRITERS = ("ingest_raw_drop", "score_partition")  # write curated/quarantine and predictions of the day


def test_two_runs_writing_one_partition_take_turns(services):
    """A manual re-run of a day started while that day's run is still going: two runs of
    mnist_batch_scoring with the same data interval, at once (the DAG allows two active runs).
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
            1,
            f"run {run_id}",
        )
        for run_id in run_ids
    ]
    assert [r["state"] for r in runs] == ["success", "success"], runs
    tis = [task_instances(services, SCORING, run_id) for run_id in run_ids]

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
