"""The Airflow side of the drift check: reading the score job's reports (``check_drift``),
the link to a report, and what the retraining DAG makes of the evidence (its days, the
cooldown). End to end through Airflow: ``tests/e2e/test_drift_loop.py``."""

from __future__ import annotations

import json

import pytest
from retrain_on_drift import evidence_days, recent_retraining

from ml_contract.layout import days_between
from ml_registry.drift_check import DriftCheckOperator, LabelCheckOperator, summarise
from ml_registry.links import link_from_drift_check, run_artifact_url

UI = "http://127.0.0.1:5000"


def report(outcome: str, moved: list[str], ds: str) -> dict:
    return {
        "outcome": outcome,
        "moved": moved,
        "rows": 100,
        "model": "models:/diabetes_mlp/3",
        "run_id": "abc",
        "experiment_id": "7",
        "artifact": f"monitoring/drift/ds={ds}/drift.png",
        "tests": [],
    }


@pytest.fixture
def reports(tmp_path):
    days = {
        "2026-11-04": report("no_drift", [], "2026-11-04"),
        "2026-11-05": report("drift", ["bmi"], "2026-11-05"),
        "2026-11-06": report("drift", ["bmi", "s5", "prediction"], "2026-11-06"),
    }
    for ds, payload in days.items():
        (tmp_path / f"ds={ds}").mkdir()
        (tmp_path / f"ds={ds}" / "drift.json").write_text(json.dumps(payload))
    return tmp_path


@pytest.fixture(autouse=True)
def mlflow_connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_MLFLOW_DEFAULT", UI)


def test_the_check_reads_every_days_report_and_orders_the_drifted_by_what_moved(reports):
    check = DriftCheckOperator(
        task_id="check_drift", monitoring_root=reports.as_uri(), start_ds="2026-11-04", end_ds="2026-11-06"
    )
    result = check.execute({})  # type: ignore[arg-type]
    assert result["ui_url"] == UI and list(result["days"]) == ["2026-11-04", "2026-11-05", "2026-11-06"]
    assert result["drifted"] == ["2026-11-06", "2026-11-05"]
    assert result["days"]["2026-11-06"]["moved"] == ["bmi", "s5", "prediction"]
    assert link_from_drift_check(result) == (
        f"{UI}/#/experiments/7/runs/abc/artifactPath/monitoring/drift/ds%3D2026-11-06/drift.png"
    )


def test_a_scored_day_without_its_report_fails_the_check_naming_it(reports):
    check = DriftCheckOperator(
        task_id="check_drift", monitoring_root=reports.as_uri(), start_ds="2026-11-06", end_ds="2026-11-07"
    )
    with pytest.raises(FileNotFoundError, match=r"no drift report for 2026-11-07 \(.*ds=2026-11-07/drift.json\)"):
        check.execute({})  # type: ignore[arg-type]


def test_the_label_check_flags_degraded_days_and_links_to_their_report(tmp_path):
    for ds, outcome in (
        ("2026-11-04", "within_tolerance"),
        ("2026-11-05", "degraded"),
        ("2026-11-06", "too_few_labels"),
    ):
        (tmp_path / f"ds={ds}").mkdir()
        judged = {**report(outcome, ["realised accuracy"] if outcome == "degraded" else [], ds)}
        judged["artifact"] = f"monitoring/labels/ds={ds}/labels.json"
        (tmp_path / f"ds={ds}" / "labels.json").write_text(json.dumps(judged))
    check = LabelCheckOperator(
        task_id="check_labels", monitoring_root=tmp_path.as_uri(), start_ds="2026-11-04", end_ds="2026-11-06"
    )
    result = check.execute({})  # type: ignore[arg-type]
    assert result["drifted"] == ["2026-11-05"] and [link.name for link in check.operator_extra_links] == [
        "Label feedback report"
    ]
    assert link_from_drift_check(result).endswith("/artifactPath/monitoring/labels/ds%3D2026-11-05/labels.json")
    with pytest.raises(FileNotFoundError, match=r"no label feedback report for 2026-11-07"):
        LabelCheckOperator(task_id="check_labels", monitoring_root=tmp_path.as_uri(), start_ds="2026-11-07").execute({})  # type: ignore[arg-type]


def test_a_quiet_day_links_to_its_own_report_and_nothing_links_to_nowhere():
    quiet = summarise({"2026-11-04": report("no_drift", [], "2026-11-04")}, UI)
    assert quiet["drifted"] == [] and link_from_drift_check(quiet).endswith("ds%3D2026-11-04/drift.png")
    assert link_from_drift_check(None) == "" and link_from_drift_check({"days": {}}) == ""
    assert run_artifact_url(UI + "/", "1", "r", "a b.json") == f"{UI}/#/experiments/1/runs/r/artifactPath/a%20b.json"


def test_days_between_is_inclusive():
    assert days_between("2026-02-27", "2026-03-01") == ["2026-02-27", "2026-02-28", "2026-03-01"]
    assert days_between("2026-03-01", "2026-03-01") == ["2026-03-01"]


def test_the_evidence_is_the_union_of_the_events_days_and_reasons():
    extras = [
        {"reason": "drift", "days": ["2026-11-06", "2026-11-05"]},
        {"reason": "drift", "days": ["2026-11-07"]},
        {"reason": "realised_metric", "days": ["2026-11-05"]},
        {},
    ]
    assert evidence_days(extras) == (["2026-11-05", "2026-11-06", "2026-11-07"], ["drift", "realised_metric"])
    assert evidence_days([]) == ([], [])


@pytest.mark.parametrize(
    ("tagged", "end_ds", "cooldown", "expected"),
    [
        ({}, "2026-11-10", 7, None),
        ({"3": "2026-11-04"}, "2026-11-10", 7, ("3", "2026-11-04")),  # 6 days: within a week
        ({"3": "2026-11-03"}, "2026-11-10", 7, None),  # 7 days: the week is over
        ({"3": "2026-11-12"}, "2026-11-10", 7, ("3", "2026-11-12")),  # a backfill's earlier day
        ({"3": "2026-11-04", "5": "2026-11-09"}, "2026-11-10", 7, ("5", "2026-11-09")),  # the newest version
        ({"3": "2026-11-10"}, "2026-11-10", 0, None),  # no cooldown
        ({"3": "not a day"}, "2026-11-10", 7, None),
    ],
)
def test_the_cooldown_holds_a_retraining_back_within_its_days(tagged, end_ds, cooldown, expected):
    assert recent_retraining(tagged, end_ds, cooldown) == expected


def test_a_week_of_daily_drift_starts_one_retraining():
    """Seven drifted days in a row, each its own event: the first retrains, the next six
    find its version within the cooldown; the eighth day retrains again."""
    tagged: dict[str, str] = {}
    started = []
    for day in range(1, 9):
        ds = f"2026-11-{day:02d}"
        if recent_retraining(tagged, ds, 7) is None:
            tagged[str(len(tagged) + 1)] = ds
            started.append(ds)
    assert started == ["2026-11-01", "2026-11-08"]
