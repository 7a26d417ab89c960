"""Every DAG imports cleanly, quickly, and carries the house conventions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from machine_speed import REFERENCE_LOOP_S, slowdown
from ml_platform.workflows import declared

REPO = Path(__file__).resolve().parents[2]
DAGS_DIR = REPO / "dags"
DAG_FILES = sorted(p for p in DAGS_DIR.glob("*.py"))
# Airflow's own guidance: a DAG file must parse well under a second; we hold ours to 0.3 s,
# measured cold (the fastest of PARSE_REPEATS parses, each in a freshly forked child), in CPU
# seconds: what a parse costs the DAG processor, less inflated than the wall time by what
# else the machine runs meanwhile (the wall time is reported beside it).
# The limit holds on the reference machine (machine_speed.REFERENCE_LOOP_S) and scales with
# this machine's measured slowdown (never tightened): on 2026-12-06 19:03 the same files took
# 317-360 ms here, where the loop took 1.36 CPU s (0.72 on the reference).
MAX_PARSE_SECONDS = 0.3
PARSE_REPEATS = 5


def python_as_dag_processor(*args: str, cwd: Path, timeout: float) -> Any:
    """Run ``python *args`` in a fresh interpreter with dags/ and plugins/ on sys.path, as the
    DAG processor has them; returns the JSON its last line of output holds."""
    env = {**os.environ, "PYTHONPATH": f"{DAGS_DIR}:{REPO / 'plugins'}"}
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert {"mnist_nightly_retrain"} <= set(dagbag.dag_ids)


@pytest.fixture(scope="module")
def parse_seconds() -> dict[str, dict[str, list[float]]]:
    """Parse times of every DAG file, measured by ``benchmarks.parse_dags`` in a fresh
    interpreter: ``cold``, each parse in a child forked after Airflow (and the ``airflow.*``
    modules the file imports) is imported, as the DAG processor parses; ``warm``, the file
    parsed again in a process that has parsed it. Keyed by file name."""
    times = python_as_dag_processor(
        "-m", "benchmarks.parse_dags", "--repeats", str(PARSE_REPEATS), *map(str, DAG_FILES), cwd=REPO, timeout=300
    )
    return {Path(path).name: seconds for path, seconds in times.items()}


@pytest.fixture(scope="module")
def parse_limit(report_figure) -> float:
    """MAX_PARSE_SECONDS at this machine's speed, measured as the parse times are read."""
    factor = slowdown()
    report_figure(
        f"DAG parse limit: {MAX_PARSE_SECONDS * factor:.3f} CPU s (this machine {factor:.2f}x "
        f"the reference's loop time, {REFERENCE_LOOP_S} s)"
    )
    return MAX_PARSE_SECONDS * factor


@pytest.mark.parametrize("dag_file", DAG_FILES, ids=lambda p: p.name)
def test_parse_time_per_file(dag_file, parse_seconds, parse_limit, report_figure):
    import statistics

    times = parse_seconds[dag_file.name]
    # The fastest parse, as the speed loop's fastest run: both the least disturbed by what
    # else runs (the median of five parses beside a spark-submit, against the fastest loop,
    # failed at 317-378 ms with the loop at the reference's speed, 2026-12-07).
    cold, cold_cpu = min(times["cold"]), min(times["cold_cpu"])
    warm = statistics.median(times["warm"])
    report_figure(
        f"DAG parse time {dag_file.name}: {cold_cpu * 1000:.1f} ms CPU, {cold * 1000:.1f} ms wall cold "
        f"(forked child, fastest of {PARSE_REPEATS}), {warm * 1000:.1f} ms warm"
    )
    assert cold_cpu < parse_limit, (
        f"{dag_file.name} took {cold_cpu:.3f} CPU s to parse in a fresh child "
        f"(limit {parse_limit:.3f}: {MAX_PARSE_SECONDS} s on the reference machine, scaled to this one's speed)"
    )


def test_conventions(dagbag):
    for dag_id, dag in dagbag.dags.items():
        assert dag.tags, f"{dag_id} has no tags"
        assert dag.doc_md, f"{dag_id} has no doc_md"
        assert dag.max_active_runs is not None and dag.max_active_runs <= 4, dag_id
        for task in dag.tasks:
            assert task.owner == "ml-platform", f"{dag_id}.{task.task_id} owner {task.owner}"
            assert task.retries >= 1, f"{dag_id}.{task.task_id} has no retries"
            assert task.retry_delay.total_seconds() == 60, f"{dag_id}.{task.task_id} retry delay"


RETRY_DELAY_PROBE = """
import json
from ml_platform.config import DEFAULT_ARGS
print(json.dumps(DEFAULT_ARGS["retry_delay"].total_seconds()))
"""


def test_the_retry_delay_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("ML_RETRY_DELAY_SECONDS", "7.5")
    assert python_as_dag_processor("-c", RETRY_DELAY_PROBE, cwd=DAGS_DIR, timeout=120) == 7.5


def test_every_pool_used_is_defined_in_conf_pools(dagbag):
    pools = json.loads((REPO / "conf" / "pools.json").read_text())
    used = {task.pool for dag in dagbag.dags.values() for task in dag.tasks} - {"default_pool"}
    assert used and used <= set(pools), f"pools used but not in conf/pools.json: {used - set(pools)}"
    assert pools["ml_registry"]["slots"] == 1


def test_on_demand_params_are_typed_and_bounded(dagbag):
    from airflow.sdk.definitions.param import ParamValidationError

    params = dagbag.dags["mnist_train_on_demand"].params
    for name in ("epochs", "learning_rate", "batch_size", "num_ranks", "window_days", "backend", "promote"):
        assert "type" in params.get_param(name).schema, name
    for name, bad in (("epochs", -1), ("epochs", "ten"), ("learning_rate", 0), ("backend", "mpi"), ("batch_size", 1e9)):
        with pytest.raises(ParamValidationError):
            params.get_param(name).resolve(bad)


def test_nightly_chain_and_operators(dagbag):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from ml_registry.operators import ModelRegistryGateOperator

    dag = dagbag.dags["mnist_nightly_retrain"]
    order = [
        "wait_for_raw_drop",
        "claim_curated",
        "ingest_raw_drop",
        "train_model",
        "register_model",
        "gate_model",
        "claim_predictions",
        "score_partition",
    ]
    # Scoring also reads the gate's output (the pinned model URI), so it is its upstream too.
    takes_output_of = {"score_partition": {"gate_model"}}
    for upstream, downstream in zip(order, order[1:], strict=False):
        assert dag.get_task(downstream).upstream_task_ids == {upstream, *takes_output_of.get(downstream, ())}
    for task_id in ("ingest_raw_drop", "train_model", "register_model", "score_partition"):
        assert isinstance(dag.get_task(task_id), SparkSubmitOperator)
    assert isinstance(dag.get_task("gate_model"), ModelRegistryGateOperator)
    assert dag.catchup is False
    assert dag.timetable.expression == "0 2 * * *"


SCORING = ("nightly_retrain", "batch_scoring", "bulk_backfill_scoring", "score_on_new_champion")


@pytest.mark.parametrize("kind", SCORING)
def test_every_scoring_run_is_checked_for_drift_and_can_signal_it(dagbag, kind):
    """Each scoring job writes its days' drift reports (``--monitoring-data``), ``check_drift``
    reads them after it, and ``signal_drift`` alone updates the retraining evidence Asset,
    which the retraining DAG is scheduled on."""
    from ml_registry.drift_check import DriftCheckOperator

    for workflow in declared():
        dag = dagbag.dags[f"{workflow}_{kind}"]
        writer = next(t for t in dag.tasks if t.task_id in ("score_partition", "score_range"))
        args = writer.application_args
        assert args[args.index("--monitoring-data") + 1].endswith(f"/monitoring/{workflow}"), args
        check, signal = dag.get_task("check_drift"), dag.get_task("signal_drift")
        assert isinstance(check, DriftCheckOperator) and [link.name for link in check.operator_extra_links] == [
            "Drift report"
        ]
        assert writer.task_id in check.upstream_task_ids and signal.upstream_task_ids == {"check_drift"}
        evidence = [o for t in dag.tasks for o in t.outlets if o.name.endswith(".retraining_evidence")]
        assert [o.name for o in signal.outlets] == [e.name for e in evidence] and len(evidence) == 1
        retrain = dagbag.dags[f"{workflow}_retrain_on_drift"]
        assert [a.name for a in retrain.timetable.asset_condition.objects] == [evidence[0].name]


SHADOW_PROBE = """
import json, sys
sys.path[:0] = [sys.argv[1]]
import batch_scoring
args = batch_scoring.mnist_batch_scoring.get_task("score_partition").application_args
print(json.dumps([str(arg) for arg in args]))
"""


def test_a_workflow_declaring_shadow_scores_the_challenger_beside_the_champion(tmp_path):
    """``[monitoring] shadow = true``: the scoring job is told to score the challenger too."""
    declarations = tmp_path / "workflows"
    shutil.copytree(REPO / "spark_jobs" / "workflows", declarations, ignore=shutil.ignore_patterns("__pycache__"))
    mnist = declarations / "mnist.toml"
    mnist.write_text(mnist.read_text().replace("[monitoring]\n", "[monitoring]\nshadow = true\n", 1))
    os.environ["ML_WORKFLOWS_DIR"] = str(declarations)
    try:
        args = python_as_dag_processor("-c", SHADOW_PROBE, str(DAGS_DIR), cwd=DAGS_DIR, timeout=120)
    finally:
        del os.environ["ML_WORKFLOWS_DIR"]
    assert args[args.index("--shadow-alias") + 1] == "challenger"
    assert args[args.index("--monitoring-data") + 1].endswith("/monitoring/mnist")


def test_late_labels_are_judged_then_checked_then_signalled(dagbag):
    """The label feedback job reads the day's labels and predictions and writes labels.json
    under the monitoring root; its check reads them; its signal updates the same evidence
    Asset as drift does."""
    from ml_registry.drift_check import LabelCheckOperator

    for workflow in declared():
        dag = dagbag.dags[f"{workflow}_label_feedback"]
        order = ["check_conf", "check_range", "realised_metric", "check_labels", "signal_degradation"]
        for upstream, downstream in zip(order, order[1:], strict=False):
            assert upstream in dag.get_task(downstream).upstream_task_ids, (upstream, downstream)
        args = dag.get_task("realised_metric").application_args
        for flag, dataset in (
            ("--labels-data", "labels"),
            ("--scored-data", "predictions"),
            ("--monitoring-data", "monitoring"),
        ):
            assert args[args.index(flag) + 1].endswith(f"/{dataset}/{workflow}"), args
        check = dag.get_task("check_labels")
        assert isinstance(check, LabelCheckOperator) and check.report_file == "labels.json"
        (evidence,) = dag.get_task("signal_degradation").outlets
        assert evidence.name.endswith(".retraining_evidence")
        assert set(dag.params.keys()) == {"start_ds", "end_ds"} and dag.schedule is None


def test_retraining_on_evidence_trains_registers_and_publishes(dagbag):
    dag = dagbag.dags["mnist_retrain_on_drift"]
    order = ["check_evidence", "train_model", "register_model", "publish_champion"]
    for upstream, downstream in zip(order, order[1:], strict=False):
        assert upstream in dag.get_task(downstream).upstream_task_ids
    args = dag.get_task("register_model").application_args
    tags = [args[i + 1] for i, a in enumerate(args) if a == "--tag"]
    assert [t.split("=")[0] for t in tags] == ["retraining_evidence_ds", "retraining_reason"]
    assert dag.max_active_runs == 1 and "monitoring" in dag.tags


WRITERS = {
    "ingest_raw_drop": "curated",
    "stage_raw_drop": "curated",
    "score_partition": "predictions",
    "score_range": "predictions",
}


def test_every_partition_writer_runs_between_its_lock_claim_and_release(dagbag):
    """Writers of the same (dataset, ds) in different runs or DAGs take turns: see
    ml_platform.partition_locks. The claim is a setup in reschedule mode, the release its teardown."""
    seen = set()
    for dag in dagbag.dags.values():
        for task in dag.tasks:
            if task.task_id not in WRITERS:
                continue
            dataset = WRITERS[task.task_id]
            claim, release = dag.get_task(f"claim_{dataset}"), dag.get_task(f"release_{dataset}")
            assert claim.task_id in task.get_flat_relative_ids(upstream=True), (dag.dag_id, task.task_id)
            assert task.task_id in release.get_flat_relative_ids(upstream=True), (dag.dag_id, task.task_id)
            assert claim.is_setup and release.is_teardown and claim.mode == "reschedule"
            seen.add(dag.dag_id)
    writers = ("nightly_retrain", "batch_scoring", "score_on_new_champion", "bulk_backfill_scoring")
    assert seen == {f"{workflow}_{dag}" for workflow in declared() for dag in writers}


# Job code and the libraries only the jobs need: importing any of them while parsing would
# slow every parse of every file (the DAG processor re-parses them all the time).
# numpy too: the workflow contract once imported it at the top, a quarter of a second of
# every cold parse (0.28-0.31 CPU s per file, against the 0.3 s limit).
HEAVY_MODULES = ("spark_jobs", "pyspark", "mlflow", "torch", "horovod", "pandas", "pyarrow", "sklearn", "numpy")

# Run in a fresh interpreter: what Airflow itself imports is taken first, then the DAG file is
# imported the way the DAG processor does (dags/ and plugins/ on sys.path), and the heavy
# top-level modules it added to sys.modules are printed.
IMPORT_PROBE = """
import importlib.util, json, sys
heavy = set(sys.argv[2:])
import airflow.sdk, airflow.providers.apache.spark.operators.spark_submit, airflow.providers.standard.operators.python
before = {name.partition(".")[0] for name in sys.modules}
spec = importlib.util.spec_from_file_location("dag_under_test", sys.argv[1])
spec.loader.exec_module(importlib.util.module_from_spec(spec))
after = {name.partition(".")[0] for name in sys.modules}
print(json.dumps(sorted((after - before) & heavy)))
"""


@pytest.mark.parametrize("dag_file", DAG_FILES, ids=lambda p: p.name)
def test_parsing_a_dag_file_imports_no_job_code_or_heavy_library(dag_file):
    imported = python_as_dag_processor("-c", IMPORT_PROBE, str(dag_file), *HEAVY_MODULES, cwd=DAGS_DIR, timeout=120)
    assert imported == [], f"parsing {dag_file.name} imported these"
