"""The on-demand flow on the platform of ``make up`` (the one of ``conftest.py``), as a
system drives it: ``mnist_train_on_demand`` triggered through the REST API with typed params
trains on a window of curated days, registers and promotes its model, and the champion
Asset event of its ``publish_champion`` starts ``mnist_score_on_new_champion``, which
scores the newest curated day with the new version. (The browser tests trigger the same DAG
from the UI form; test_platform_up_down runs the README's backfill; tests/e2e/test_scheduling.py
reprocesses with the same flags.) At the API's door: a trigger for a future logical date, or for
one a run already holds, is refused with the reason."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pyarrow.dataset as pads
from platform_support import CONF, DAYS, MODEL, ON_DEMAND, ON_NEW_CHAMPION, ROWS_PER_DAY, task_states


def test_a_rest_triggered_run_trains_with_its_params_and_promotes_its_model(promoted_run):
    cli, run, _, trained, champion, _ = promoted_run
    assert run["triggered_by"] == "rest_api"
    assert {k: run["conf"][k] for k in CONF} == CONF
    assert trained.data.params["epochs"] == str(CONF["epochs"])
    assert (trained.data.params["data_start_ds"], trained.data.params["data_end_ds"]) == (DAYS[0], DAYS[-1])
    assert task_states(cli, ON_DEMAND, run["dag_run_id"])["publish_champion"] == "success"
    assert champion.run_id == trained.info.run_id
    assert champion.tags.get("validation_status") == "passed"


def test_the_promotion_starts_the_asset_triggered_scoring_of_the_newest_day(promoted_run):
    cli, _, _, _, champion, rescore = promoted_run
    assert rescore["state"] == "success", task_states(cli, ON_NEW_CHAMPION, rescore["dag_run_id"])
    scored = pads.dataset(str(cli.state / "data" / "predictions" / "mnist" / f"ds={DAYS[-1]}"), format="parquet")
    table = scored.to_table(columns=["row_id", "model_name", "model_version"])
    assert table.num_rows == ROWS_PER_DAY and len(set(table.column("row_id").to_pylist())) == ROWS_PER_DAY
    assert set(table.column("model_name").to_pylist()) == {MODEL}
    assert set(table.column("model_version").to_pylist()) == {champion.version}


def post(cli, path: str, body: dict) -> tuple[int, dict]:
    """``(status, answer)`` of a POST to the platform's REST API, a refusal included."""
    try:
        return 200, cli.api("POST", path, body)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def test_a_future_logical_date_is_refused_at_the_door_naming_it(shared_platform):
    """The API server refuses it (the trigger form posts to the same endpoint) instead of
    creating a run the scheduler never starts; no run is created."""
    cli, _ = shared_platform
    status, answer = post(cli, f"/dags/{ON_DEMAND}/dagRuns", {"logical_date": "2099-01-01T00:00:00Z", "conf": {}})
    assert status == 400, answer
    assert answer["detail"].startswith("logical_date 2099-01-01T00:00:00+00:00 is in the future"), answer
    runs = cli.api("GET", f"/dags/{ON_DEMAND}/dagRuns?limit=100")["dag_runs"]
    assert not [run for run in runs if (run["logical_date"] or "").startswith("2099")], runs


def test_a_taken_logical_date_is_refused_naming_the_run_that_holds_it(shared_platform):
    cli, _ = shared_platform
    dag_id, logical_date = "mnist_nightly_retrain", "2026-10-01T02:00:00Z"  # a day no other test runs
    cli.api("PATCH", f"/dags/{dag_id}", {"is_paused": True})  # the run is only held, never started
    status, first = post(cli, f"/dags/{dag_id}/dagRuns", {"logical_date": logical_date})
    assert status == 200, first
    try:
        status, answer = post(cli, f"/dags/{dag_id}/dagRuns", {"logical_date": logical_date})
        assert status == 409, answer
        assert f"of dag {dag_id} is held by run {first['dag_run_id']!r} (manual, queued)" in answer["detail"], answer
    finally:
        request = urllib.request.Request(
            f"{cli.record['airflow_url']}/api/v2/dags/{dag_id}/dagRuns/{first['dag_run_id']}",
            method="DELETE",
            headers={"Authorization": f"Bearer {cli.token()}"},
        )
        urllib.request.urlopen(request, timeout=30).close()
