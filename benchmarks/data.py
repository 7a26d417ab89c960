"""Benchmark data, generated here: curated partitions and raw CSV drops of a workflow.

Rows come from ``spark_jobs.sample_data`` (the workflow's sample generator: augmented
digits for MNIST), so every benchmark scores and trains on the same kind of rows the demo
does. Curated partitions are written with pyarrow in the ingest job's dense layout
(``spark_jobs.schema.curated_arrow_table``: ``row_id``, ``label``, ``features``, the Spark
schema in the footer), a few files per day as a Spark write would leave them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ml_contract.layout import partition_path
from spark_jobs import workflows
from spark_jobs.sample_data import make_rows, write_drop
from spark_jobs.schema import curated_arrow_table

# The workflow benchmarks use unless they name another.
DEFAULT_WORKFLOW = "mnist"
# MNIST's generator holds a chunk as float64 images: 25k rows are about 160 MB.
CHUNK_ROWS = 25_000


def write_curated_day(
    root: Path, ds: str, rows: int, files: int = 1, seed: int = 0, workflow: str = DEFAULT_WORKFLOW
) -> Path:
    """``rows`` curated rows for ``ds`` in ``files`` Parquet files; returns the partition folder."""
    import pyarrow.parquet as pq

    wf = workflows.load(workflow)
    partition = Path(partition_path(root, ds))
    partition.mkdir(parents=True, exist_ok=True)
    per_file = -(-rows // files)
    for index, first in enumerate(range(0, rows, per_file)):
        count = min(per_file, rows - first)
        writer = None
        try:
            for offset in range(0, count, CHUNK_ROWS):
                n = min(CHUNK_ROWS, count - offset)
                labels, features = make_rows(wf, ds, n, seed=seed * 1_000_003 + first + offset)
                row_ids = np.arange(first + offset, first + offset + n, dtype=np.int64)
                table = curated_arrow_table(wf, row_ids, labels, features)
                if writer is None:
                    writer = pq.ParquetWriter(partition / f"part-{index:05d}.parquet", table.schema)
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()
    return partition


def write_curated_days(
    root: Path, days: list[str], rows_per_day: int, files_per_day: int = 1, workflow: str = DEFAULT_WORKFLOW
) -> None:
    for ds in days:
        if not Path(partition_path(root, ds)).exists():
            write_curated_day(root, ds, rows_per_day, files_per_day, workflow=workflow)


def write_raw_drop(root: Path, ds: str, rows: int, workflow: str = DEFAULT_WORKFLOW) -> Path:
    """The day's raw CSV drop exactly as ``python -m spark_jobs.sample_data`` writes it."""
    target = Path(partition_path(root, ds)) / f"{workflow}.csv"
    return target if target.exists() else write_drop(workflow, root, ds, rows)
