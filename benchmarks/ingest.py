"""Ingest: rows/s of CSV -> validated dense Parquet, the ingest job vs. single-process pyarrow.

- **ingest job**: ``spark_jobs.ingest.ingest_partition`` on local[2] in a warm session
  (steady state), and ``spark-submit spark_jobs/entrypoints/ingest.py`` end to end.
- **pyarrow**: one process reads the same CSV (``pyarrow.csv``, its 2 I/O and compute
  threads), checks the same rules vectorised (the workflow's fields, nothing empty, every
  value within its declared range, floats finite), splits valid and rejected rows and
  writes both as Parquet, the valid ones in the same dense curated layout
  (``spark_jobs.schema.curated_arrow_table``). It does less than the job: no per-row
  reason, no raw line kept for rejects, no content-hash row id, and a malformed token
  fails the whole file instead of one row.

Both run on MNIST (785 integer fields a row, the heavy case) and on diabetes (11 decimal
fields, the float parser and per-column ranges).

- **storage**: the bytes of the curated partition the ingest job wrote (its Parquet files)
  against the raw CSV compressed with gzip at its default level (6), per workflow.
"""

from __future__ import annotations

import gzip
import shutil
import time
from pathlib import Path

from benchmarks.core import BenchResult, Ratio, Target, repeat
from benchmarks.data import write_raw_drop
from benchmarks.env import BenchEnv, Benchmark
from benchmarks.sizes import Sizes
from ml_contract.layout import partition_path
from ml_platform.job_arguments import IngestArguments

DS = "2026-09-15"
SMALL_DS = "2026-09-16"  # the small drop's day
# (workflow, suffix of its measurement and ratio names): MNIST keeps the names it always had.
WORKFLOWS = (("mnist", ""), ("diabetes", "_diabetes"))


def parquet_bytes(folder: Path) -> int:
    """Bytes of the Parquet files under ``folder`` (Spark's checksums and markers left out)."""
    return sum(path.stat().st_size for path in folder.rglob("*.parquet"))


def gzip_bytes(path: Path) -> int:
    """Bytes of ``path`` compressed as ``gzip`` does by default (level 6)."""
    return len(gzip.compress(path.read_bytes(), compresslevel=6))


def pyarrow_ingest(workflow_name: str, raw_csv: Path, curated_dir: Path, quarantine_dir: Path) -> int:
    """Validate ``raw_csv`` by the workflow's rules and write valid / rejected rows as
    Parquet, the valid ones in the curated dense layout; returns rows read."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    from spark_jobs import workflows
    from spark_jobs.schema import curated_arrow_table

    wf = workflows.load(workflow_name)
    layout, fields = wf.features, wf.raw_fields

    def arrow_type(dtype: str) -> pa.DataType:
        return pa.float64() if dtype.startswith("float") else pa.int32()

    types = {wf.label.name: arrow_type(wf.label.dtype), **dict.fromkeys(layout.raw_fields, arrow_type(layout.dtype))}
    table = pa_csv.read_csv(raw_csv, convert_options=pa_csv.ConvertOptions(column_types=types))
    if table.column_names != fields:
        raise ValueError(f"{raw_csv}: expected {len(fields)} columns, got {table.num_columns}")
    features = np.column_stack([table.column(c).to_numpy(zero_copy_only=False) for c in layout.raw_fields])
    labels = table.column(wf.label.name).to_numpy(zero_copy_only=False)
    complete = np.logical_and.reduce([table.column(c).is_valid().to_numpy(zero_copy_only=False) for c in fields])
    with np.errstate(invalid="ignore"):  # NaN compares false: out of range
        valid = (
            complete
            & (labels >= wf.label.min)
            & (labels <= wf.label.max)
            & ((features >= layout.mins) & (features <= layout.maxs)).all(axis=1)
        )
    rows = np.flatnonzero(valid)
    curated = curated_arrow_table(wf, rows, labels[valid], features[valid])
    for folder, part in ((curated_dir, curated), (quarantine_dir, table.filter(pa.array(~valid)))):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        if part.num_rows:
            pq.write_table(part, folder / "part-00000.parquet")
    return table.num_rows


class IngestBench(Benchmark):
    name, title = "ingest", "Ingest: CSV -> validated dense Parquet vs. pyarrow"

    def __init__(self, env: BenchEnv, sizes: Sizes) -> None:
        super().__init__(env, sizes)
        self.raw = self.root / "raw"

    def job_args(self, workflow: str, out: str, ds: str = DS) -> dict[str, str]:
        return {
            "raw_path": partition_path(self.raw / workflow, ds),
            "ds": ds,
            "curated_root": str(self.root / out / workflow / "curated"),
            "quarantine_root": str(self.root / out / workflow / "quarantine"),
        }

    def in_session_seconds(self, workflow: str, rows: int, ds: str = DS) -> float:
        from spark_jobs import workflows
        from spark_jobs.ingest import ingest_partition

        spark = self.env.spark()
        started = time.perf_counter()
        report = ingest_partition(
            spark, workflow=workflows.load(workflow), max_bad_ratio=0.05, **self.job_args(workflow, "session", ds)
        )
        seconds = time.perf_counter() - started
        if report.rows_curated != rows:
            raise RuntimeError(f"ingest {workflow} curated {report.rows_curated} of {rows} rows")
        return seconds

    def submit_seconds(self, workflow: str) -> float:
        paths = self.job_args(workflow, "submit")
        return self.env.submit_job("ingest", IngestArguments(workflow=workflow, **paths).argv()).seconds

    def pyarrow_seconds(self, workflow: str, csv: Path, rows: int) -> float:
        out = self.root / "pyarrow" / workflow
        started = time.perf_counter()
        read = pyarrow_ingest(workflow, csv, out / "curated", out / "quarantine")
        seconds = time.perf_counter() - started
        if read != rows:
            raise RuntimeError(f"pyarrow read {read} of {rows} {workflow} rows")
        return seconds

    def compare(self, workflow: str, suffix: str, rows: int, ds: str, size: str) -> Path:
        """pyarrow and the in-session job on one drop of ``rows`` rows, and their ratio;
        ``size`` ("" for the drop the target is judged at, else "small") names them."""
        s, r = self.sizes, self.result
        csv = write_raw_drop(self.raw / workflow, ds, rows, workflow=workflow)
        r.settings[f"csv_bytes{'_' + size if size else ''}{suffix}"] = csv.stat().st_size
        key, shown = (f"_{size}", f", {rows:,} rows") if size else ("", "")
        self.pyarrow_seconds(workflow, csv, rows)  # warm-up: page cache, imports
        r.add(
            f"pyarrow{key}{suffix}",
            f"pyarrow, one process (2 threads), {workflow}{shown}",
            "rows/s",
            [rows / t for t in repeat(s.repeats, lambda: self.pyarrow_seconds(workflow, csv, rows))],
        )
        self.in_session_seconds(workflow, rows, ds)  # warm-up
        r.add(
            f"ingest_job{key}{suffix}",
            f"ingest job (ingest_partition, local[2], warm session), {workflow}{shown}",
            "rows/s",
            [rows / t for t in repeat(s.repeats, lambda: self.in_session_seconds(workflow, rows, ds))],
        )
        label = "ingest job / pyarrow" + (f" ({workflow}{shown})" if suffix or size else "")
        r.ratios.append(Ratio(f"ingest_job{key}{suffix}", f"pyarrow{key}{suffix}", label))
        return csv

    def run(self) -> BenchResult:
        import pyarrow as pa

        s, r = self.sizes, self.result
        rows = s.ingest_rows
        pa.set_cpu_count(2)
        r.settings = {"rows": rows, "small_rows": s.ingest_small_rows, "master": "local[2]", "pyarrow_threads": 2}
        for workflow, suffix in WORKFLOWS:
            csv = self.compare(workflow, suffix, rows, DS, "")
            self.storage(workflow, suffix, csv)
            # A small drop beside it: the job's fixed cost per drop, which the large one hides.
            self.compare(workflow, suffix, s.ingest_small_rows, SMALL_DS, "small")
        self.env.stop_spark()
        if s.e2e_repeats:
            r.add(
                "ingest_job_submit",
                "ingest job via spark-submit, end to end, mnist",
                "rows/s",
                [rows / t for t in repeat(s.e2e_repeats, lambda: self.submit_seconds("mnist"))],
                note="JVM and Spark start included",
            )
            r.ratios.append(Ratio("ingest_job_submit", "pyarrow", "ingest job via spark-submit / pyarrow"))
        return r

    def storage(self, workflow: str, suffix: str, csv: Path) -> None:
        """Curated Parquet bytes (the in-session job's output) against the gzipped CSV, and
        both targets of ``workflow``."""
        r = self.result
        curated = Path(self.job_args(workflow, "session")["curated_root"])
        r.add(f"curated_bytes{suffix}", f"curated partition, Parquet, {workflow}", "bytes", [parquet_bytes(curated)])
        r.add(f"csv_gzip_bytes{suffix}", f"raw CSV, gzip -6, {workflow}", "bytes", [gzip_bytes(csv)])
        in_brackets = f" ({workflow})" if suffix else ""
        storage = f"curated Parquet / gzipped CSV ({workflow})"
        r.ratios.append(Ratio(f"curated_bytes{suffix}", f"csv_gzip_bytes{suffix}", storage))
        r.targets += [
            Target(f"ingest >= 0.5x of pyarrow{in_brackets}", f"ingest job / pyarrow{in_brackets}", ">=", 0.5),
            Target(f"curated storage <= the raw CSV gzipped ({workflow})", storage, "<=", 1.0),
        ]
