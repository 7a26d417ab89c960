"""Benchmark data, generated here: curated partitions and raw CSV drops in MNIST format.

Rows come from ``spark_jobs.sample_data`` (augmented digits), so every benchmark scores
and trains on the same kind of rows the demo does. Curated partitions are written with
pyarrow in the ingest job's schema, a few files per day as a Spark write would leave them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spark_jobs.sample_data import make_rows, write_drop
from spark_jobs.schema import CURATED_SCHEMA, PIXEL_COLS

# make_rows holds a chunk as float64 images: 25k rows are about 160 MB.
CHUNK_ROWS = 25_000


def write_curated_day(root: Path, ds: str, rows: int, files: int = 1, seed: int = 0) -> Path:
    """``rows`` curated rows for ``ds`` in ``files`` Parquet files; returns the partition folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(CURATED_SCHEMA)
    partition = root / f"ds={ds}"
    partition.mkdir(parents=True, exist_ok=True)
    per_file = -(-rows // files)
    for index, first in enumerate(range(0, rows, per_file)):
        count = min(per_file, rows - first)
        with pq.ParquetWriter(partition / f"part-{index:05d}.parquet", schema) as writer:
            for offset in range(0, count, CHUNK_ROWS):
                n = min(CHUNK_ROWS, count - offset)
                labels, pixels = make_rows(ds, n, seed=seed * 1_000_003 + first + offset)
                columns = [
                    pa.array(np.arange(first + offset, first + offset + n, dtype=np.int64)),
                    pa.array(labels.astype(np.int32)),
                ]
                columns += [pa.array(pixels[:, i].astype(np.int32)) for i in range(len(PIXEL_COLS))]
                writer.write_table(pa.Table.from_arrays(columns, schema=schema))
    return partition


def write_curated_days(root: Path, days: list[str], rows_per_day: int, files_per_day: int = 1) -> None:
    for ds in days:
        if not (root / f"ds={ds}").exists():
            write_curated_day(root, ds, rows_per_day, files_per_day)


def write_raw_drop(root: Path, ds: str, rows: int) -> Path:
    """The day's raw CSV drop exactly as ``python -m spark_jobs.sample_data`` writes it."""
    target = root / f"ds={ds}" / "mnist.csv"
    return target if target.exists() else write_drop(root, ds, rows)


def read_pixels(partition: Path) -> np.ndarray:
    """All pixels of a curated partition as float32 ``[rows, 784]``, in memory."""
    import pyarrow.parquet as pq

    table = pq.read_table(partition, columns=PIXEL_COLS)
    return np.column_stack([table.column(c).to_numpy() for c in PIXEL_COLS]).astype(np.float32)
