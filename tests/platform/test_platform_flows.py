"""The on-demand flow on the platform of ``make up`` (the one of ``conftest.py``), as a
system drives it: ``mnist_train_on_demand`` triggered through the REST API with typed params
trains on a window of curated days, registers and promotes its model, and the champion
Asset event of its ``publish_champion`` starts ``mnist_score_on_new_champion``, which
scores the newest curated day with the new version. (The browser tests trigger the same DAG
from the UI form; test_platform_up_down runs the README's backfill; tests/e2e/test_scheduling.py
reprocesses with the same flags.)"""

from __future__ import annotations

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
