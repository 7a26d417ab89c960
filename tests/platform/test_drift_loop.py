"""The monitoring loop on the platform of ``make up``, as the scheduler runs it: what was
scored is checked, evidence starts a retraining, the cooldown holds the next one back.

The champion is ``promoted_run``'s (trained on curated days 2026-12-01..03, its reference
profile logged by the register job). Then, through the REST API:

1. ten days from the training distribution re-scored in one bulk backfill: every day's
   drift report says ``no_drift``, ``signal_drift`` is skipped, no retraining starts;
2. late labels of one of those days, wrong on every row: the label feedback judges the day
   degraded and its evidence starts ``mnist_retrain_on_drift``, whose evidence check names
   the realised metric and the window ending that day; once its training has started it is
   stopped (marked failed): what a retraining then does, train, register with the evidence
   and let the promotion rule decide, the inverted day's shows;
3. an inverted day (every pixel ``255 - x``) scored: its drift report names what moved, the
   evidence starts a retraining again (more than the cooldown after the first);
4. the inverted day after it: drift again, and the retraining it starts is skipped by the
   cooldown, naming the version retrained on the day before.
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from platform_support import MODEL, finished, task_states

from local_stack import wait_until, write_curated_partition

BULK, FEEDBACK, RETRAIN = "mnist_bulk_backfill_scoring", "mnist_label_feedback", "mnist_retrain_on_drift"
# Days no other platform test writes (the README's backfill takes 2026-11-01..03).
QUIET = [f"2026-10-{day:02d}" for day in range(20, 30)]  # ten days like the training window
LABELLED = QUIET[0]
INVERTED = ["2026-11-10", "2026-11-11"]  # more than the cooldown after LABELLED
ROWS = 400


def curated(cli) -> str:
    return str(cli.state / "data" / "curated" / "mnist")


def write_inverted_day(cli, ds: str) -> None:
    """A curated day of the sample images, inverted (white digits on black become black on white)."""
    from ml_contract.layout import partition_path
    from spark_jobs import workflows
    from spark_jobs.sample_data import make_rows
    from spark_jobs.schema import curated_arrow_table

    workflow = workflows.load("mnist")
    labels, images = make_rows(workflow, ds, ROWS)
    folder = cli.state / "data" / "curated" / "mnist" / partition_path("", ds).lstrip("/")
    folder.mkdir(parents=True)
    pq.write_table(curated_arrow_table(workflow, np.arange(ROWS), labels, 255 - images), folder / "part-0.parquet")


def xcom(cli, dag_id: str, run_id: str, task_id: str):
    return cli.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value")["value"]


def run(cli, dag_id: str, conf: dict) -> dict:
    started = cli.api("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
    return finished(cli, dag_id, started["dag_run_id"])


def retrain_runs(cli) -> list[dict]:
    return cli.api("GET", f"/dags/{RETRAIN}/dagRuns?order_by=start_date&limit=100")["dag_runs"]


def evidence_days(cli, run_id: str) -> set[str]:
    """The days of the evidence Asset events a retraining run was started by."""
    events = cli.api("GET", f"/dags/{RETRAIN}/dagRuns/{run_id}/upstreamAssetEvents")["asset_events"]
    return {ds for event in events for ds in (event.get("extra") or {}).get("days", [])}


def retraining_started_by(cli, ds: str) -> dict:
    """The retraining run the evidence of day ``ds`` started (one, Asset-triggered)."""
    started = wait_until(
        lambda: [r for r in retrain_runs(cli) if ds in evidence_days(cli, r["dag_run_id"])],
        300,
        1,
        f"{RETRAIN} started by the evidence of {ds}",
    )
    assert [r["run_type"] for r in started] == ["asset_triggered"], started
    return started[0]


def retraining_for(cli, ds: str) -> dict:
    """The retraining run the evidence of day ``ds`` started, once finished."""
    return finished(cli, RETRAIN, retraining_started_by(cli, ds)["dag_run_id"])


@pytest.fixture(scope="module")
def loop(promoted_run):
    cli, _, client, _, champion, _ = promoted_run
    for dag_id in (BULK, FEEDBACK, RETRAIN):
        cli.api("PATCH", f"/dags/{dag_id}", {"is_paused": False})
    for ds in QUIET:
        write_curated_partition(cli.state / "data" / "curated" / "mnist", ds, ROWS)
    return cli, client, champion


def test_ten_days_like_the_training_window_start_no_retraining(loop):
    cli, _, champion = loop
    bulk = run(cli, BULK, {"start_ds": QUIET[0], "end_ds": QUIET[-1], "model_version": int(champion.version)})
    states = task_states(cli, BULK, bulk["dag_run_id"])
    assert bulk["state"] == "success", states
    assert (states["check_drift"], states["signal_drift"]) == ("success", "skipped"), states
    checked = xcom(cli, BULK, bulk["dag_run_id"], "check_drift")
    assert {ds: day["outcome"] for ds, day in checked["days"].items()} == dict.fromkeys(QUIET, "no_drift")
    assert checked["drifted"] == [] and {day["model"] for day in checked["days"].values()} == {
        f"models:/{MODEL}/{champion.version}"
    }
    report = cli.state / "data" / "monitoring" / "mnist" / f"ds={QUIET[-1]}"
    assert (report / "drift.json").exists() and (report / "drift.png").read_bytes()[:4] == b"\x89PNG"
    assert retrain_runs(cli) == []


def test_late_labels_of_a_degraded_day_start_a_retraining(loop):
    cli, client, champion = loop
    table = pq.read_table(f"{curated(cli)}/ds={LABELLED}", columns=["row_id", "label"])
    wrong = (np.asarray(table.column("label")) + 1) % 10  # every label the model predicts right is now wrong
    labels = cli.state / "data" / "labels" / "mnist" / f"ds={LABELLED}"
    labels.mkdir(parents=True)
    lines = [f"{row_id},{label}" for row_id, label in zip(table.column("row_id").to_pylist(), wrong, strict=True)]
    (labels / "labels.csv").write_text("\n".join(["row_id,label", *lines, "not-a-row,3"]) + "\n")

    feedback = run(cli, FEEDBACK, {"start_ds": LABELLED, "end_ds": LABELLED})
    states = task_states(cli, FEEDBACK, feedback["dag_run_id"])
    assert feedback["state"] == "success" and states["signal_degradation"] == "success", states
    judged = xcom(cli, FEEDBACK, feedback["dag_run_id"], "check_labels")["days"][LABELLED]
    assert judged["outcome"] == "degraded" and judged["rows"] == ROWS, judged
    realised = client.get_metric_history(champion.run_id, "realised_accuracy")
    assert [m.step for m in realised] == [int(LABELLED.replace("-", ""))] and realised[0].value < 0.2

    started = retraining_started_by(cli, LABELLED)
    # The retraining trains: its evidence check passed and its training task started.
    wait_until(
        lambda: task_states(cli, RETRAIN, started["dag_run_id"]).get("train_model") in ("running", "success"),
        300,
        1,
        f"{RETRAIN}'s training started",
    )
    evidence = xcom(cli, RETRAIN, started["dag_run_id"], "check_evidence")
    assert (evidence["reasons"], evidence["end_ds"]) == (["realised_metric"], LABELLED), evidence
    # Stopped there (the inverted day's retraining shows the rest): the run ends failed, its
    # training task with it, and it registers nothing.
    cli.mark_run_failed(RETRAIN, started["dag_run_id"])
    assert finished(cli, RETRAIN, started["dag_run_id"])["state"] == "failed"
    wait_until(
        lambda: task_states(cli, RETRAIN, started["dag_run_id"])["train_model"] not in ("running", "queued"),
        120,
        1,
        f"{RETRAIN}'s stopped training ended",
    )
    assert not client.search_model_versions(f"name = '{MODEL}' and tags.retraining_evidence_ds = '{LABELLED}'")


def test_an_inverted_day_is_flagged_and_retrains_once_per_cooldown(loop):
    cli, client, _ = loop
    for ds in INVERTED:
        write_inverted_day(cli, ds)
    outcomes = []
    for ds in INVERTED:
        bulk = run(cli, BULK, {"start_ds": ds, "end_ds": ds})
        states = task_states(cli, BULK, bulk["dag_run_id"])
        assert bulk["state"] == "success" and states["signal_drift"] == "success", states
        day = xcom(cli, BULK, bulk["dag_run_id"], "check_drift")["days"][ds]
        assert day["outcome"] == "drift" and "mean" in day["moved"], day
        retraining = retraining_for(cli, ds)
        outcomes.append(task_states(cli, RETRAIN, retraining["dag_run_id"]))
    first, second = outcomes
    assert first["check_evidence"] == "success" and first["register_model"] == "success", first
    (version,) = client.search_model_versions(f"name = '{MODEL}' and tags.retraining_evidence_ds = '{INVERTED[0]}'")
    assert version.tags["retraining_reason"] == "drift"
    # The promotion rule decided about it, as about any version.
    assert version.tags["validation_status"] in ("passed", "failed") and version.tags["validation_reason"]
    assert second["check_evidence"] == "skipped" and second["train_model"] == "skipped", second
    assert not client.search_model_versions(f"name = '{MODEL}' and tags.retraining_evidence_ds = '{INVERTED[1]}'")
