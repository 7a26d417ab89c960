"""Ingest: rows/s of CSV -> validated Parquet, the ingest job vs. single-process pyarrow.

- **ingest job**: ``spark_jobs.ingest.ingest_partition`` on local[2] in a warm session
  (steady state), and ``spark-submit spark_jobs/entrypoints/ingest.py`` end to end.
- **pyarrow**: one process reads the same CSV (``pyarrow.csv``, its 2 I/O and compute
  threads), checks the same rules vectorised (785 integer fields, nothing empty, label
  0..9, pixels 0..255), splits valid and rejected rows and writes both as Parquet.
  It does less than the job: no per-row reason, no raw line kept for rejects, no
  content-hash row id, and a malformed token fails the whole file instead of one row.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from benchmarks.core import BenchResult, Ratio, Target, repeat
from benchmarks.data import write_raw_drop
from benchmarks.env import BenchEnv, Benchmark
from benchmarks.sizes import Sizes

DS = "2026-09-15"


def pyarrow_ingest(raw_csv: Path, curated_dir: Path, quarantine_dir: Path) -> int:
    """Validate ``raw_csv`` and write valid / rejected rows as Parquet; returns rows read."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    from spark_jobs.schema import (
        LABEL_COL,
        LABEL_MAX,
        LABEL_MIN,
        PIXEL_COLS,
        PIXEL_MAX,
        PIXEL_MIN,
        RAW_COLS,
        ROW_ID_COL,
    )

    table = pa_csv.read_csv(
        raw_csv, convert_options=pa_csv.ConvertOptions(column_types=dict.fromkeys(RAW_COLS, pa.int32()))
    )
    if table.column_names != RAW_COLS:
        raise ValueError(f"{raw_csv}: expected {len(RAW_COLS)} columns, got {table.num_columns}")
    pixels = np.column_stack([table.column(c).to_numpy(zero_copy_only=False) for c in PIXEL_COLS])
    labels = table.column(LABEL_COL).to_numpy(zero_copy_only=False)
    complete = np.logical_and.reduce([table.column(c).is_valid().to_numpy(zero_copy_only=False) for c in RAW_COLS])
    valid = (
        complete
        & (labels >= LABEL_MIN)
        & (labels <= LABEL_MAX)
        & ((pixels >= PIXEL_MIN) & (pixels <= PIXEL_MAX)).all(axis=1)
    )
    curated = table.filter(pa.array(valid)).add_column(0, ROW_ID_COL, pa.array(np.flatnonzero(valid), pa.int64()))
    for folder, rows in ((curated_dir, curated), (quarantine_dir, table.filter(pa.array(~valid)))):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        if rows.num_rows:
            pq.write_table(rows, folder / "part-00000.parquet")
    return table.num_rows


class IngestBench(Benchmark):
    name, title = "ingest", "Ingest: CSV -> validated Parquet vs. pyarrow"

    def __init__(self, env: BenchEnv, sizes: Sizes) -> None:
        super().__init__(env, sizes)
        self.raw = self.root / "raw"

    def job_args(self, out: str) -> dict[str, str]:
        return {
            "raw_path": str(self.raw / f"ds={DS}"),
            "ds": DS,
            "curated_root": str(self.root / out / "curated"),
            "quarantine_root": str(self.root / out / "quarantine"),
        }

    def in_session_seconds(self) -> float:
        from spark_jobs.ingest import ingest_partition

        spark = self.env.spark()
        started = time.perf_counter()
        report = ingest_partition(spark, max_bad_ratio=0.05, **self.job_args("session"))
        seconds = time.perf_counter() - started
        if report.rows_curated != self.sizes.ingest_rows:
            raise RuntimeError(f"ingest curated {report.rows_curated} of {self.sizes.ingest_rows} rows")
        return seconds

    def submit_seconds(self) -> float:
        paths = self.job_args("submit")
        return self.env.submit_job(
            "ingest",
            [
                "--ds",
                DS,
                "--raw-path",
                paths["raw_path"],
                "--curated-root",
                paths["curated_root"],
                "--quarantine-root",
                paths["quarantine_root"],
            ],
        ).seconds

    def pyarrow_seconds(self, csv: Path) -> float:
        started = time.perf_counter()
        rows = pyarrow_ingest(csv, self.root / "pyarrow" / "curated", self.root / "pyarrow" / "quarantine")
        seconds = time.perf_counter() - started
        if rows != self.sizes.ingest_rows:
            raise RuntimeError(f"pyarrow read {rows} of {self.sizes.ingest_rows} rows")
        return seconds

    def run(self) -> BenchResult:
        import pyarrow as pa

        s, r = self.sizes, self.result
        csv = write_raw_drop(self.raw, DS, s.ingest_rows)
        rows = s.ingest_rows
        pa.set_cpu_count(2)
        self.pyarrow_seconds(csv)  # warm-up: page cache, imports
        r.add(
            "pyarrow",
            "pyarrow, one process (2 threads)",
            "rows/s",
            [rows / t for t in repeat(s.repeats, lambda: self.pyarrow_seconds(csv))],
        )
        self.in_session_seconds()  # warm-up
        r.add(
            "ingest_job",
            "ingest job (ingest_partition, local[2], warm session)",
            "rows/s",
            [rows / t for t in repeat(s.repeats, self.in_session_seconds)],
        )
        self.env.stop_spark()
        r.ratios.append(Ratio("ingest_job", "pyarrow", "ingest job / pyarrow"))
        if s.e2e_repeats:
            r.add(
                "ingest_job_submit",
                "ingest job via spark-submit, end to end",
                "rows/s",
                [rows / t for t in repeat(s.e2e_repeats, self.submit_seconds)],
                note="JVM and Spark start included",
            )
            r.ratios.append(Ratio("ingest_job_submit", "pyarrow", "ingest job via spark-submit / pyarrow"))
        r.targets.append(Target("ingest >= 0.5x of pyarrow", "ingest job / pyarrow", ">=", 0.5))
        r.settings = {"rows": rows, "csv_bytes": csv.stat().st_size, "master": "local[2]", "pyarrow_threads": 2}
        return r
