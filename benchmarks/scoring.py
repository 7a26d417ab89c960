"""Scoring: rows/s of the score job against its ceiling and two naive UDFs.

- **score job**: ``spark_jobs.score.score_partitions`` (``mapInArrow`` over the dense
  ``features`` column with the pinned model: read, score, replace the partition, read the
  counts back) on local[2], in one warm session (steady state) and through
  ``spark-submit`` (end to end, JVM start and model download included).
- **ceiling**: the same model (``mlflow.pytorch.load_model``, prepared as the score job
  prepares it: ``inference.prepared_for_inference``) in one Python process, over the same
  rows already in memory as the decoded ``uint8 [n, 28, 28]`` array, in the forward chunks
  the score job uses, with 2 torch threads; and, as diagnostics, the model as logged
  (unprepared) and ``pyfunc.predict`` on the same arrays.
- **per-batch-load UDF**: a pandas UDF that loads the model from the registry in every
  Arrow batch; **closure UDF**: a model captured from the driver in the UDF's closure.
  Both are read -> UDF -> write jobs over the ``features`` column that do less than the
  score job (no counts).
- **score job with its drift check**: the same job given ``--monitoring-data`` (as every
  DAG runs it), the model's reference profile logged first: what checking each scored day
  against the version's reference costs (target: at most 10 % of the score job).
- **no-op mapInArrow** (diagnostic): the score job's data path with a function that
  returns nothing useful: what moving the dense column from Parquet through the JVM to
  Arrow and back costs.

The second workflow (``diabetes``: ten float32 columns in, one value out) is measured the
same way over a partition of as many rows, score job against its ceiling and the no-op
``mapInArrow``, with the settings tuned on MNIST.

Settings that matter are tuned first on a smaller partition, in the same session: Arrow
batch size, CPUs per task (``spark.task.cpus``: the torch threads each scoring task
uses), input partitions.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.core import BenchResult, Ratio, Target, log, repeat
from benchmarks.data import write_curated_day
from benchmarks.env import MODEL_WORKFLOW, BenchEnv, Benchmark
from benchmarks.sizes import Sizes
from ml_contract.layout import partition_path
from ml_platform.job_arguments import ScoreArguments

MAIN_DS, TUNE_DS, NAIVE_DS, WARM_DS = "2026-10-01", "2026-10-02", "2026-10-03", "2026-10-04"
# The other workflows scored beside MNIST, and their partition (score_rows rows).
OTHER_WORKFLOWS = ("diabetes",)
OTHER_DS = "2026-10-05"
CEILING_TARGET = 0.8
# The drift check may cost at most 10 % of the scoring job: watched / plain rows/s >= 1 / 1.1.
DRIFT_CHECK_SHARE = 0.10
WARM_ROWS = 2000
ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"
TASK_CPUS = "spark.task.cpus"
MAX_PARTITION_BYTES = "spark.sql.files.maxPartitionBytes"
SPARK_DEFAULTS = {
    ARROW_BATCH: "10000",
    TASK_CPUS: "1 (2 tasks at a time on local[2], 1 torch thread each)",
    MAX_PARTITION_BYTES: "128m",
}


def tuning_grid() -> list[dict[str, str]]:
    """Arrow batch x CPUs per task, then input split size at the default batch."""
    grid = [{TASK_CPUS: str(cpus), ARROW_BATCH: str(batch)} for cpus in (1, 2) for batch in (10000, 50000)]
    # Small splits: more, smaller input partitions (better balance across the 2 slots).
    grid.append({TASK_CPUS: "1", ARROW_BATCH: "10000", MAX_PARTITION_BYTES: "4m"})
    return grid


def workflow(name: str = MODEL_WORKFLOW):
    from spark_jobs import workflows

    return workflows.load(name)


def read_features(partition, name: str = MODEL_WORKFLOW) -> np.ndarray:
    """All rows' features of a curated partition, decoded (``[rows, *shape]``), in memory."""
    import pyarrow.parquet as pq

    from spark_jobs.features import FEATURES_COL, decode

    table = pq.read_table(partition, columns=[FEATURES_COL])
    return np.array(decode(table.column(FEATURES_COL), workflow(name).features))


def torch_seconds(model, x: np.ndarray) -> float:
    """One pass of ``model`` over ``x`` in the score job's forward chunks, no gradients."""
    import torch

    from spark_jobs.inference import FORWARD_ROWS

    started = time.perf_counter()
    with torch.inference_mode():
        for first in range(0, len(x), FORWARD_ROWS):
            model(torch.from_numpy(x[first : first + FORWARD_ROWS]))
    return time.perf_counter() - started


class ScoringBench(Benchmark):
    name, title = "scoring", "Scoring: score job vs. its ceiling"

    def __init__(self, env: BenchEnv, sizes: Sizes) -> None:
        super().__init__(env, sizes)
        self.curated = self.root / "curated"
        self.scored = self.root / "predictions"
        self._warmed = None

    def folders(self, name: str) -> tuple[Path, Path]:
        """Curated input and predictions of workflow ``name`` (MNIST's keep their names)."""
        if name == MODEL_WORKFLOW:
            return self.curated, self.scored
        return self.root / name / "curated", self.root / name / "predictions"

    # --- the measured variants ------------------------------------------------------
    def score_job_seconds(self, spark, ds: str, name: str = MODEL_WORKFLOW, *, watched: bool = False) -> float:
        """The score job on day ``ds``; ``watched``: with its drift check, as the DAGs run it."""
        from spark_jobs.inference import pin_model
        from spark_jobs.score import score_partitions

        curated, scored = self.folders(name)
        monitoring_root = str(self.root / name / "monitoring") if watched else None
        started = time.perf_counter()
        model = pin_model(self.env.model_uri(name))
        report = score_partitions(
            spark, model, workflow(name), str(curated), str(scored), ds, ds, monitoring_root=monitoring_root
        )
        seconds = time.perf_counter() - started
        if report["written"] != report["rows_in"]:
            raise RuntimeError(f"score job wrote {report['written']}, read {report['rows_in']}")
        if watched and report["drift"][ds]["outcome"] not in ("drift", "no_drift"):
            raise RuntimeError(f"the drift check did not judge {ds}: {report['drift'][ds]}")
        return seconds

    def log_reference(self, spark, ds: str, name: str = MODEL_WORKFLOW) -> None:
        """The reference profile the register job would log for the benchmark's model: its
        statistics over day ``ds`` and its predictions there."""
        from mlflow import MlflowClient

        from spark_jobs import monitoring
        from spark_jobs.inference import pin_model, with_predictions
        from spark_jobs.partitions import read_partitions

        model = pin_model(self.env.model_uri(name))
        window_df = read_partitions(spark, str(self.folders(name)[0]), ds, ds)
        profile = monitoring.reference_profile(
            window_df, with_predictions(window_df, model.uri, workflow(name)), workflow(name)
        )
        client = MlflowClient()
        monitoring.log_reference(client, client.get_model_version(model.name, model.version).run_id, profile)

    def drift_check(self, spark, ds: str, rows: int, name: str = MODEL_WORKFLOW) -> None:
        """The score job with and without its drift check, interleaved, on the same day, in
        the warm session (a diagnostic: no JVM or Spark start to hide the check's fixed cost)."""
        s, r = self.sizes, self.result
        suffix = "" if name == MODEL_WORKFLOW else f"_{name}"
        self.log_reference(spark, ds, name)
        self.score_job_seconds(spark, ds, name, watched=True)  # warm-up: matplotlib, the reference download
        plain, watched = [], []
        for _ in range(s.repeats):
            plain.append(rows / self.score_job_seconds(spark, ds, name))
            watched.append(rows / self.score_job_seconds(spark, ds, name, watched=True))
        r.add(f"score_job_plain{suffix}", f"score job without its drift check, warm session, {name}", "rows/s", plain)
        r.add(
            f"score_job_watched{suffix}",
            f"score job with its drift check (report, plot, MLflow), warm session, {name}",
            "rows/s",
            watched,
            note=f"{rows:,} rows, interleaved with the runs without",
        )
        r.ratios.append(
            Ratio(
                f"score_job_watched{suffix}", f"score_job_plain{suffix}", f"warm session, drift check / without, {name}"
            )
        )

    def drift_check_submit(self, ds: str, rows: int, conf: dict[str, str], name: str = MODEL_WORKFLOW) -> None:
        """The score job through ``spark-submit``, as the DAGs run it, with and without
        ``--monitoring-data``, interleaved: what the check adds to the day's scoring job."""
        s, r = self.sizes, self.result
        suffix = "" if name == MODEL_WORKFLOW else f"_{name}"
        plain, watched = [], []
        for _ in range(max(1, s.submit_repeats)):
            plain.append(rows / self.env.submit_job("score", self.score_args(ds, name), conf=conf).seconds)
            job = self.env.submit_job("score", self.score_args(ds, name, watched=True), conf=conf)
            watched.append(rows / job.seconds)
        r.add(f"score_submit_plain{suffix}", f"score job via spark-submit, {name}", "rows/s", plain)
        r.add(
            f"score_submit_watched{suffix}",
            f"score job via spark-submit with its drift check, {name}",
            "rows/s",
            watched,
            note=f"{rows:,} rows, interleaved with the runs without; JVM, Spark and model download included",
        )
        label = f"spark-submit, drift check / without, {name}"
        r.ratios.append(Ratio(f"score_submit_watched{suffix}", f"score_submit_plain{suffix}", label))
        r.targets.append(
            Target(
                f"drift check <= {DRIFT_CHECK_SHARE:.0%} of the day's score job, {name}",
                label,
                ">=",
                1 / (1 + DRIFT_CHECK_SHARE),
            )
        )

    def udf_job_seconds(self, spark, ds: str, udf, name: str = MODEL_WORKFLOW) -> float:
        """read -> ``udf`` (a column function, or a ``mapInArrow`` function) -> write Parquet:
        the plain job around a baseline."""
        from spark_jobs.features import FEATURES_COL
        from spark_jobs.partitions import read_partitions
        from spark_jobs.schema import ROW_ID_COL

        out = self.env.work / "scoring" / "baseline-out"
        started = time.perf_counter()
        curated_df = read_partitions(spark, str(self.folders(name)[0]), ds, ds).select(ROW_ID_COL, FEATURES_COL)
        if isinstance(udf, MapFunction):
            scored_df = curated_df.mapInArrow(udf.fn, udf.schema)
        else:
            scored_df = curated_df.select(ROW_ID_COL, udf(FEATURES_COL).alias("probs"))
        scored_df.write.mode("overwrite").parquet(str(out))
        seconds = time.perf_counter() - started
        shutil.rmtree(out, ignore_errors=True)
        return seconds

    def rows(self, ds: str) -> int:
        return {
            MAIN_DS: self.sizes.score_rows,
            TUNE_DS: self.sizes.score_tune_rows,
            NAIVE_DS: self.sizes.score_naive_rows,
            WARM_DS: WARM_ROWS,
        }[ds]

    def session(self, conf: dict[str, str]):
        """A session with ``conf``: CPUs per task need a new one (read when Spark starts),
        and it is warmed up (workers started, model loaded) when new; the SQL settings
        apply to the next query."""
        spark = self.env.spark({TASK_CPUS: conf[TASK_CPUS]})
        if self._warmed is not spark:
            # Twice, the second time on the tuning rows: JIT and caches warm for wide rows too.
            self.score_job_seconds(spark, WARM_DS)
            self.score_job_seconds(spark, TUNE_DS)
            self._warmed = spark
        for key in (ARROW_BATCH, MAX_PARTITION_BYTES):
            if key in conf:
                spark.conf.set(key, conf[key])
            else:
                spark.conf.unset(key)
        return spark

    # --- the benchmark ------------------------------------------------------------
    def prepare(self) -> None:
        s = self.sizes
        for ds, files in (
            (MAIN_DS, s.score_files),
            (TUNE_DS, max(2, s.score_files * s.score_tune_rows // s.score_rows)),
            (NAIVE_DS, 2),
            (WARM_DS, 2),
        ):
            if not Path(partition_path(self.curated, ds)).exists():
                write_curated_day(self.curated, ds, self.rows(ds), files)
        for name in OTHER_WORKFLOWS:
            curated = self.folders(name)[0]
            if not Path(partition_path(curated, OTHER_DS)).exists():
                write_curated_day(curated, OTHER_DS, s.score_rows, s.score_files, workflow=name)
        self.env.model_uri()

    def tune(self) -> dict[str, str]:
        if self.sizes.score_tuning == "off":
            return {TASK_CPUS: "1", ARROW_BATCH: "10000"}
        rows = self.rows(TUNE_DS)
        trials = []
        for conf in tuning_grid():
            spark = self.session(conf)
            rate = rows / self.score_job_seconds(spark, TUNE_DS)
            trials.append({**conf, "rows_per_second": round(rate, 1)})
            log(f"scoring tune {conf}: {rate:,.0f} rows/s")
        best = max(trials, key=lambda t: t["rows_per_second"])
        self.result.tables["tuning (score job, in-session, one run each)"] = [
            {
                "arrow_batch": t[ARROW_BATCH],
                "task_cpus (torch threads per task)": t[TASK_CPUS],
                "max_partition_bytes": t.get(MAX_PARTITION_BYTES, "128m (default)"),
                "rows_per_second": t["rows_per_second"],
            }
            for t in trials
        ]
        return {k: v for k, v in best.items() if k != "rows_per_second"}

    def run(self) -> BenchResult:
        s, r = self.sizes, self.result
        self.prepare()
        chosen = self.tune()
        batch = int(chosen[ARROW_BATCH])
        r.settings = {
            "model": self.env.model_uri(),
            "workflow": MODEL_WORKFLOW,
            "master": "local[2]",
            "rows": s.score_rows,
            "parquet_files": s.score_files,
            "chosen": chosen,
            "spark_defaults": SPARK_DEFAULTS,
        }
        log(f"scoring: chosen settings {chosen}")

        spark = self.session(chosen)
        main_rows = self.rows(MAIN_DS)
        r.add(
            "score_job",
            "score job (score_partitions, local[2], warm session)",
            "rows/s",
            [main_rows / t for t in repeat(s.repeats, lambda: self.score_job_seconds(spark, MAIN_DS))],
        )
        curve = {ds: self.rows(ds) / self.score_job_seconds(spark, ds) for ds in (NAIVE_DS, TUNE_DS)}
        curve[MAIN_DS] = r.measurements["score_job"].median

        r.add(
            "per_batch_load",
            "pandas UDF loading the model in every batch",
            "rows/s",
            self.udf_rates(spark, per_batch_load_udf(self.env.model_uri())),
            note=f"{s.score_naive_rows:,} rows; registry load per Arrow batch of {batch:,}",
        )
        self.closure(spark)
        r.add(
            "transfer_floor",
            "no-op mapInArrow over the same dense features column (diagnostic)",
            "rows/s",
            [
                main_rows / t
                for t in repeat(max(1, s.repeats - 2), lambda: self.udf_job_seconds(spark, MAIN_DS, noop_map()))
            ],
            note="JVM Parquet -> Arrow -> Python and back, no model",
        )
        for name in OTHER_WORKFLOWS:
            self.other_workflow_job(spark, name)
        self.drift_check(spark, MAIN_DS, main_rows)
        for name in OTHER_WORKFLOWS:
            self.drift_check(spark, OTHER_DS, s.score_rows, name)
        self.env.stop_spark()
        self.drift_check_submit(MAIN_DS, main_rows, chosen)
        for name in OTHER_WORKFLOWS:
            self.drift_check_submit(OTHER_DS, s.score_rows, chosen, name)

        submits = [self.env.submit_job("score", self.score_args(MAIN_DS), conf=chosen) for _ in range(s.e2e_repeats)]
        if submits:
            r.add(
                "score_job_submit",
                "score job via spark-submit, end to end",
                "rows/s",
                [main_rows / sub.seconds for sub in submits],
                note="JVM start, model download and Spark start included",
            )
            r.ratios.append(Ratio("score_job_submit", "ceiling", "score job via spark-submit / ceiling"))

        self.ceiling(batch, curve)
        for name in OTHER_WORKFLOWS:
            self.other_workflow_ceiling(name)
        r.ratios += [
            Ratio("score_job", "ceiling", "score job / ceiling"),
            Ratio("score_job", "per_batch_load", "score job / per-batch-load UDF"),
            Ratio("pyfunc_in_process", "ceiling", "pyfunc predict in-process / ceiling"),
            Ratio("transfer_floor", "ceiling", "no-op mapInArrow (data movement alone) / ceiling"),
        ]
        if "closure" in r.measurements:
            r.ratios.append(Ratio("score_job", "closure", "score job / closure UDF"))
        r.targets += [
            Target(f"scoring >= {CEILING_TARGET}x of its ceiling", "score job / ceiling", ">=", CEILING_TARGET),
            Target("scoring >= 5x the per-batch-load UDF", "score job / per-batch-load UDF", ">=", 5.0),
        ]
        return r

    def other_workflow_job(self, spark, name: str) -> None:
        """Workflow ``name``'s score job (warm session) and the no-op ``mapInArrow`` over its
        features, on ``score_rows`` rows."""
        s, r = self.sizes, self.result
        self.env.model_uri(name)
        self.score_job_seconds(spark, OTHER_DS, name)  # warm-up: model download, the new row shape
        r.add(
            f"score_job_{name}",
            f"score job (score_partitions, local[2], warm session), {name}",
            "rows/s",
            [s.score_rows / t for t in repeat(s.repeats, lambda: self.score_job_seconds(spark, OTHER_DS, name))],
            note=f"{s.score_rows:,} rows of {workflow(name).features.item_bytes} feature bytes",
        )
        r.add(
            f"transfer_floor_{name}",
            f"no-op mapInArrow over the same features column, {name} (diagnostic)",
            "rows/s",
            [
                s.score_rows / t
                for t in repeat(max(1, s.repeats - 2), lambda: self.udf_job_seconds(spark, OTHER_DS, noop_map(), name))
            ],
        )

    def other_workflow_ceiling(self, name: str) -> None:
        """Workflow ``name``'s model in this process over its rows in memory (2 torch threads)."""
        import mlflow.pytorch

        from spark_jobs.inference import prepared_for_inference

        r = self.result
        features = read_features(Path(partition_path(self.folders(name)[0], OTHER_DS)), name)
        model = prepared_for_inference(mlflow.pytorch.load_model(self.env.model_uri(name)))
        torch_seconds(model, features)  # warm-up
        r.add(
            f"ceiling_{name}",
            f"ceiling: torch, rows in memory, 2 threads, {name}",
            "rows/s",
            [len(features) / t for t in repeat(self.sizes.repeats, lambda: torch_seconds(model, features))],
        )
        r.ratios += [
            Ratio(f"score_job_{name}", f"ceiling_{name}", f"score job / ceiling ({name})"),
            Ratio(f"transfer_floor_{name}", f"ceiling_{name}", f"no-op mapInArrow / ceiling ({name})"),
        ]
        r.targets.append(
            Target(
                f"scoring >= {CEILING_TARGET}x of its ceiling ({name})",
                f"score job / ceiling ({name})",
                ">=",
                CEILING_TARGET,
            )
        )

    def score_args(self, ds: str, name: str = MODEL_WORKFLOW, *, watched: bool = False) -> list[str]:
        curated, scored = self.folders(name)
        return ScoreArguments(
            workflow=name,
            model=self.env.model_uri(name),
            input_data=curated,
            scored_data=scored,
            monitoring_data=self.root / name / "monitoring" if watched else None,
            ds=ds,
        ).argv()

    def udf_rates(self, spark, udf) -> list[float]:
        rows = self.rows(NAIVE_DS)
        self.udf_job_seconds(spark, WARM_DS, udf)  # the same warm-up the score job had
        return [rows / t for t in repeat(self.sizes.repeats, lambda: self.udf_job_seconds(spark, NAIVE_DS, udf))]

    def closure(self, spark) -> None:
        """A model captured from the driver: the pyfunc model (TorchScript inside) cannot be
        pickled; an eager ``nn.Module`` with the same weights can, and is measured."""
        import mlflow.pyfunc
        import torch

        from spark_jobs.workflows.mnist import MnistNet

        pyfunc_model = mlflow.pyfunc.load_model(self.env.model_uri())
        layout = workflow().features
        try:
            self.udf_job_seconds(spark, WARM_DS, closure_udf(pyfunc_model.predict, layout))
            self.result.notes.append("closure UDF: the pyfunc model captured in the closure ran")
        except Exception as err:  # the failure is the finding
            message = str(err).strip().splitlines()[0][:300]
            self.result.notes.append(
                f"closure UDF: capturing the pyfunc model (TorchScript inside) fails when Spark pickles the "
                f"UDF: {type(err).__name__}: {message}. Measured instead: an eager nn.Module (MnistNet with "
                "the same weights) captured in the closure, deserialised once per task."
            )
        scripted = pyfunc_model.get_raw_model()
        net = MnistNet()
        net.load_state_dict(scripted.net.state_dict())
        net.eval()

        def eager_predict(features: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return torch.exp(net(torch.from_numpy(features))).numpy()

        self.result.add(
            "closure",
            "pandas UDF with an eager model captured in its closure",
            "rows/s",
            self.udf_rates(spark, closure_udf(eager_predict, layout)),
            note=f"{self.sizes.score_naive_rows:,} rows",
        )

    def ceiling(self, batch: int, curve: dict[str, float]) -> None:
        """Pure torch on in-memory rows (2 threads), and pyfunc.predict on the same arrays."""
        import mlflow.pyfunc
        import mlflow.pytorch
        import torch

        from spark_jobs.inference import FORWARD_ROWS, prepared_for_inference

        torch.set_num_threads(2)
        features = read_features(Path(partition_path(self.curated, MAIN_DS)))
        logged = mlflow.pytorch.load_model(self.env.model_uri())
        logged.eval()
        model = prepared_for_inference(mlflow.pytorch.load_model(self.env.model_uri()))
        torch_seconds(model, features[:batch])  # warm-up
        torch_seconds(logged, features[:batch])
        prepared, as_logged = [], []
        for _ in range(self.sizes.repeats):  # interleaved: the two differ only by the preparation
            prepared.append(len(features) / torch_seconds(model, features))
            as_logged.append(len(features) / torch_seconds(logged, features))
        self.result.add(
            "ceiling",
            "ceiling: torch, rows in memory, 2 threads",
            "rows/s",
            prepared,
            note=f"forward passes of {FORWARD_ROWS:,} rows, as the score job's; the model frozen and optimised",
        )
        self.result.add(
            "ceiling_as_logged",
            "the same, the model as logged (not frozen or optimised for inference; diagnostic)",
            "rows/s",
            as_logged,
        )
        self.result.ratios.append(Ratio("ceiling", "ceiling_as_logged", "ceiling prepared / as logged"))

        def load_seconds() -> float:
            started = time.perf_counter()
            mlflow.pyfunc.load_model(self.env.model_uri())
            return time.perf_counter() - started

        self.result.add(
            "model_load",
            "one registry load of the model (what the per-batch UDF pays per batch)",
            "s",
            repeat(self.sizes.repeats, load_seconds),
            note="mlflow.pyfunc.load_model(models:/...) here",
        )
        pyfunc_model = mlflow.pyfunc.load_model(self.env.model_uri())
        sample = features[: max(batch, len(features) // 4)]
        chunks = [sample[first : first + batch] for first in range(0, len(sample), batch)]

        def pyfunc_seconds() -> float:
            started = time.perf_counter()
            for chunk in chunks:
                pyfunc_model.predict(chunk)
            return time.perf_counter() - started

        self.result.add(
            "pyfunc_in_process",
            "pyfunc.predict in-process on array batches (diagnostic)",
            "rows/s",
            [len(sample) / t for t in repeat(self.sizes.repeats, pyfunc_seconds)],
            note=f"{len(sample):,} rows in batches of {batch:,}; tensor schema enforcement, no Spark",
        )
        sizes = sorted(curve, key=self.rows)
        self.result.series["throughput_vs_rows"] = {
            "title": "Scoring throughput vs. rows",
            "xlabel": "rows scored",
            "ylabel": "rows/s",
            "lines": {
                "score job (warm session)": {"x": [self.rows(ds) for ds in sizes], "y": [curve[ds] for ds in sizes]},
                "ceiling (torch in memory)": {
                    "x": [self.rows(ds) for ds in sizes],
                    "y": [self.rows(ds) / torch_seconds(model, features[: self.rows(ds)]) for ds in sizes],
                },
            },
        }
        if "score_job_submit" in self.result.measurements:
            self.result.series["throughput_vs_rows"]["lines"]["score job via spark-submit"] = {
                "x": [self.rows(MAIN_DS)],
                "y": [self.result.measurements["score_job_submit"].median],
            }


class MapFunction:
    """A ``mapInArrow`` function and its output schema (what :meth:`ScoringBench.udf_job_seconds` runs)."""

    def __init__(self, fn: Callable, schema: str) -> None:
        self.fn, self.schema = fn, schema


def _decoded(features: pd.Series, layout) -> np.ndarray:
    """A pandas UDF's batch of ``features`` values as ``[n, *shape]`` (one join, one frombuffer)."""
    flat = np.frombuffer(b"".join(features), dtype=layout.numpy_dtype)
    return flat.reshape(len(features), *layout.shape)


def per_batch_load_udf(model_uri: str):
    """The naive UDF: ``mlflow.pyfunc.load_model(<registry uri>)`` inside every batch."""
    from pyspark.sql import types as T
    from pyspark.sql.functions import pandas_udf

    layout = workflow().features

    @pandas_udf(T.ArrayType(T.FloatType()))
    def predict(features: pd.Series) -> pd.Series:
        import mlflow.pyfunc

        model = mlflow.pyfunc.load_model(model_uri)
        return pd.Series(list(np.asarray(model.predict(_decoded(features, layout)), dtype=np.float32)))

    return predict


def noop_map() -> MapFunction:
    """Moves the rows to Python and a zero per row back: what the data movement alone costs."""

    def nothing(batches):
        import pyarrow as pa

        for batch in batches:
            yield pa.RecordBatch.from_arrays(
                [batch.column("row_id"), pa.array(np.zeros(batch.num_rows, dtype=np.float32))],
                names=["row_id", "probs"],
            )

    return MapFunction(nothing, "row_id long, probs float")


def closure_udf(predict_fn: Callable[[np.ndarray], Any], layout):
    """A pandas UDF calling ``predict_fn`` on the decoded batch; Spark pickles it with the UDF."""
    from pyspark.sql import types as T
    from pyspark.sql.functions import pandas_udf

    @pandas_udf(T.ArrayType(T.FloatType()))
    def predict(features: pd.Series) -> pd.Series:
        return pd.Series(list(np.asarray(predict_fn(_decoded(features, layout)), dtype=np.float32)))

    return predict
