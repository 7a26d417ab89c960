"""Orchestration: DAG parse time, the fixed cost of a spark-submit step, a DAG run per task.

- **parse**: each file of ``dags/`` with Airflow's own ``DagBag``, cold (in a child forked
  from a process with Airflow imported, as the DAG processor does) and warm (parsed
  again), against a minimal DAG file (one ``EmptyOperator``) parsed the same ways.
- **spark-submit fixed cost**: an empty application (session, one trivial job, stop)
  submitted like every DAG step, against starting the same Python interpreter for nothing.
- **DAG run**: ``airflow dags test`` of one DAG (``scripts/local_stack.py``, as the demo and
  the end-to-end tests run it); task start and end from the Airflow metadata DB, Spark
  application start and first job from Spark's event log (``spark.eventLog.enabled`` via
  ``SPARK_CONF_DIR``): the overhead of each SparkSubmitOperator step is its task start to
  the Spark application start (operator, spark-submit, JVM, Python driver, SparkContext).
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks.core import BenchResult, Ratio, Target, log, repeat
from benchmarks.env import REPO, Benchmark
from local_stack import VENV_BIN, LocalStack

# The nightly's held-out accuracy on the sample data must stay at or above this (a faster
# nightly may not buy its speed with a worse model).
NIGHTLY_ACCURACY = 0.95
# The nightly DAG at its default 5,000 rows (``airflow dags test``, the whole run) at or under this.
NIGHTLY_TARGET_S = 60.0

MINIMAL_DAG = '''"""A minimal DAG: the parse-time floor."""
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

with DAG(dag_id="minimal", schedule=None, tags=["minimal"]):
    EmptyOperator(task_id="nothing")
'''
# (logical date for ``airflow dags test``, the partition that run processes): the nightly
# run of 2026-11-29 processes 2026-11-28; a batch-scoring run processes the day of its
# logical date, however it was made (dags/ml_platform/partitions.py).
# DAG ids are per workflow (``<workflow>_nightly_retrain``); the benchmarks time MNIST's.
RUN_DATES = {
    "mnist_nightly_retrain": ("2026-11-29", "2026-11-28"),
    "mnist_batch_scoring": ("2026-11-01", "2026-11-01"),
}


def utc_seconds(value: str | None) -> float | None:
    """Epoch seconds of a metadata-DB timestamp (UTC, with or without an offset)."""
    if value is None:
        return None
    parsed = dt.datetime.fromisoformat(value)
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp()


def spark_applications(event_dir: Path) -> list[dict[str, float]]:
    """Start, first job and end (epoch seconds) of every application in an event-log folder."""
    apps = []
    for path in sorted(event_dir.iterdir()):
        app: dict[str, float] = {}
        # One JSON event per "\n"-terminated line. Not splitlines(): a plan description can
        # hold U+2028, U+2029 or U+0085 (ingest's row check names them), which it splits on.
        for line in path.read_text(encoding="utf-8").split("\n"):
            if not line:
                continue
            event = json.loads(line)
            kind = event.get("Event")
            if kind == "SparkListenerApplicationStart":
                app["start"] = event["Timestamp"] / 1000
            elif kind == "SparkListenerJobStart" and "first_job" not in app:
                app["first_job"] = event["Submission Time"] / 1000
            elif kind == "SparkListenerApplicationEnd":
                app["end"] = event["Timestamp"] / 1000
        if "start" in app:
            apps.append(app)
    return apps


class OrchestrationBench(Benchmark):
    name, title = "orchestration", "Orchestration: parse time, task overhead, DAG run per task"

    def parse(self) -> None:
        r = self.result
        minimal = self.root / "minimal_dag.py"
        minimal.write_text(MINIMAL_DAG)
        dag_files = sorted(str(p) for p in (REPO / "dags").glob("*.py"))
        # The DAG processor has dags/ and plugins/ on sys.path; so does the parse here.
        env = {**self.env.stack.env(), "PYTHONPATH": f"{REPO / 'dags'}:{REPO / 'plugins'}"}
        done = subprocess.run(
            [
                str(VENV_BIN / "python"),
                "-m",
                "benchmarks.parse_dags",
                "--repeats",
                str(self.sizes.repeats + 2),
                *dag_files,
                str(minimal),
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"parsing DAG files failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        out = done.stdout.splitlines()[-1]
        times = json.loads(out)
        floor = times.pop(str(minimal))
        slowest = max(times, key=lambda path: statistics.median(times[path]["cold"]))
        for kind, how in (("cold", "forked child, as the DAG processor"), ("warm", "file parsed before")):
            r.add(f"parse_{kind}_minimal", f"parse ({kind}): minimal DAG file, one EmptyOperator", "s", floor[kind])
            r.add(
                f"parse_{kind}_slowest",
                f"parse ({kind}): slowest file, dags/{Path(slowest).name}",
                "s",
                times[slowest][kind],
                note=how,
            )
        r.tables["DAG parse time per file (median, DagBag)"] = [
            {
                "file": f"dags/{Path(path).name}",
                "cold_s": round(statistics.median(t["cold"]), 4),
                "warm_s": round(statistics.median(t["warm"]), 4),
            }
            for path, t in sorted(times.items())
        ]
        r.ratios.append(Ratio("parse_cold_slowest", "parse_cold_minimal", "slowest DAG file / minimal DAG, cold parse"))
        r.targets.append(Target("DAG parse <= 0.3 s per file", "parse_cold_slowest", "<=", 0.3))

    def submit_cost(self) -> None:
        r = self.result
        empty = REPO / "benchmarks" / "empty_job.py"
        r.add(
            "submit_empty",
            "spark-submit of an empty application",
            "s",
            repeat(self.sizes.submit_repeats, lambda: self.env.spark_submit(empty, []).check("empty job").seconds),
        )

        def nothing() -> float:
            started = time.perf_counter()
            subprocess.run([str(VENV_BIN / "python"), "-c", "pass"], check=True)
            return time.perf_counter() - started

        r.add("python_nothing", "the same Python interpreter, doing nothing", "s", repeat(self.sizes.repeats, nothing))
        r.ratios.append(Ratio("submit_empty", "python_nothing", "empty spark-submit / bare interpreter start"))

    def dag_run(self) -> None:
        r, dag_id = self.result, self.sizes.orchestration_dag
        logical_date, ds = RUN_DATES[dag_id]
        event_dir = self.root / "spark-events"
        conf_dir = self.root / "spark-conf"
        for folder in (event_dir, conf_dir):
            folder.mkdir(parents=True, exist_ok=True)
        (conf_dir / "spark-defaults.conf").write_text(
            f"spark.eventLog.enabled true\nspark.eventLog.dir file://{event_dir}\n"
            "spark.eventLog.compress false\nspark.eventLog.rolling.enabled false\n"
        )
        env = self.env
        stack = LocalStack(
            state_dir=env.stack.state_dir,
            mlflow_port=env.stack.mlflow_port,
            api_port=env.stack.api_port,
            extra_env={"SPARK_CONF_DIR": str(conf_dir), "ML_JOBS_ARCHIVE": str(env.archive)},
        )
        env.model_uri()  # a passed champion, so the DAG's gate has a model
        stack.migrate()
        stack.generate_drops([ds], rows=self.sizes.orchestration_rows)
        log(f"orchestration: airflow dags test {dag_id} {logical_date}")
        started, started_wall = time.perf_counter(), time.time()
        done = stack.dags_test(dag_id, logical_date, check=False, capture_output=True)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"airflow dags test {dag_id} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")

        tasks = self.task_instances(stack.airflow_home / "airflow.db", dag_id)
        apps = spark_applications(event_dir)
        rows, overheads, first_jobs = [], [], []
        for task in tasks:
            app = next((a for a in apps if task["start"] <= a["start"] <= task["end"]), None)
            row = {
                "task": task["task_id"],
                "state": task["state"],
                "seconds": round(task["end"] - task["start"], 2),
                "share_of_dag_wall": round((task["end"] - task["start"]) / wall, 3),
                "task_start_to_spark_app_start_s": None,
                "task_start_to_first_spark_job_s": None,
            }
            if app:
                overheads.append(app["start"] - task["start"])
                row["task_start_to_spark_app_start_s"] = round(overheads[-1], 2)
                if "first_job" in app:
                    first_jobs.append(app["first_job"] - task["start"])
                    row["task_start_to_first_spark_job_s"] = round(first_jobs[-1], 2)
            rows.append(row)
        r.tables[f"{dag_id}: per task (airflow dags test, {self.sizes.orchestration_rows} rows)"] = rows
        busy = sum(t["end"] - t["start"] for t in tasks)
        r.add("dag_wall", f"{dag_id}: airflow dags test wall time", "s", [wall])
        r.add("dag_task_sum", f"{dag_id}: sum of task durations", "s", [busy])
        r.add(
            "spark_step_overhead",
            "SparkSubmitOperator step: task start to Spark application start",
            "s",
            overheads,
            note=f"one value per Spark task of {dag_id}",
        )
        r.add("spark_step_first_job", "SparkSubmitOperator step: task start to first Spark job", "s", first_jobs)
        spark_busy = sum(
            t["end"] - t["start"] for t in tasks if any(t["start"] <= a["start"] <= t["end"] for a in apps)
        )
        r.add("spark_task_sum", f"{dag_id}: sum of Spark task durations", "s", [spark_busy])
        r.add("spark_overhead_sum", f"{dag_id}: sum of step overheads", "s", [sum(overheads)])
        r.ratios += [
            Ratio("dag_task_sum", "dag_wall", "task time / DAG wall time"),
            Ratio("spark_overhead_sum", "spark_task_sum", "step overhead / Spark task time"),
        ]
        if dag_id.endswith("_nightly_retrain"):
            r.targets.append(
                Target(
                    f"nightly DAG (airflow dags test) <= {NIGHTLY_TARGET_S:.0f} s", "dag_wall", "<=", NIGHTLY_TARGET_S
                )
            )
            self.nightly_metric(dag_id.removesuffix("_nightly_retrain"), started_wall)
        r.settings.update(
            {
                "dag": dag_id,
                "logical_date": logical_date,
                "partition": ds,
                "rows": self.sizes.orchestration_rows,
                "spark_applications": len(apps),
            }
        )

    def nightly_metric(self, workflow_name: str, since: float) -> None:
        """The held-out metric of the version the nightly run registered (its version tag),
        with the workflow's floor as a target: speed must not come from a worse model."""
        from mlflow import MlflowClient

        from spark_jobs import workflows
        from spark_jobs.register import holdout_tag

        wf = workflows.load(workflow_name)
        versions = MlflowClient().search_model_versions(f"name = '{wf.model.registered_name}'")
        (version,) = [v for v in versions if v.creation_timestamp / 1000 >= since]
        value = float(version.tags[holdout_tag(wf.metric.name)])
        label = f"held-out {wf.metric.name} of the nightly's model (version {version.version})"
        self.result.add("nightly_holdout", label, wf.metric.name, [value])
        op = ">=" if wf.metric.direction == "max" else "<="
        threshold = NIGHTLY_ACCURACY if wf.metric.name == "accuracy" else wf.promotion.floor
        self.result.targets.append(
            Target(f"nightly's held-out {wf.metric.name} {op} {threshold}", "nightly_holdout", op, threshold)
        )

    def task_instances(self, db: Path, dag_id: str) -> list[dict]:
        with sqlite3.connect(db) as conn:
            conn.row_factory = sqlite3.Row
            run_id = conn.execute(
                "SELECT run_id FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1", (dag_id,)
            ).fetchone()[0]
            rows = conn.execute(
                "SELECT task_id, state, start_date, end_date FROM task_instance WHERE dag_id = ? AND run_id = ? "
                "ORDER BY start_date",
                (dag_id, run_id),
            ).fetchall()
        return [
            {
                "task_id": t["task_id"],
                "state": t["state"],
                "start": utc_seconds(t["start_date"]),
                "end": utc_seconds(t["end_date"]),
            }
            for t in rows
            if t["start_date"] and t["end_date"]
        ]

    def run(self) -> BenchResult:
        self.root.mkdir(parents=True, exist_ok=True)
        self.parse()
        self.submit_cost()
        self.dag_run()
        return self.result
