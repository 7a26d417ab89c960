"""How training rows reach the ranks: one Parquet file per rank, written by the driver.

A shard holds only what training reads, ``label`` and the dense ``features`` column; a
rank decodes its features with one :func:`spark_jobs.features.decode` (one buffer, not a
column per element).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs.features import FEATURES_COL
from spark_jobs.schema import LABEL_COL
from spark_jobs.storage import list_files

if TYPE_CHECKING:
    import numpy as np
    from pyspark.sql import DataFrame

    from spark_jobs.workflows import Workflow

SHARD_COLS = (LABEL_COL, FEATURES_COL)


def write_training_shards(train_df: DataFrame, shard_dir: str, num_ranks: int) -> list[str]:
    """Write the training rows as ``num_ranks`` Parquet files; return their paths, sorted."""
    train_df.select(*SHARD_COLS).repartition(num_ranks).write.mode("overwrite").parquet(shard_dir)
    return list_files(train_df.sparkSession, shard_dir, suffix=".parquet")


def training_label_dtype(workflow: Workflow) -> np.dtype:
    """What the loss takes: int64 class indices (``nll``), float32 values (``mse``)."""
    import numpy as np

    return np.dtype(np.int64) if workflow.label.dtype == "int32" else np.dtype(np.float32)


def read_rank_shard(files: list[str], workflow: Workflow) -> tuple[np.ndarray, np.ndarray]:
    """(features ``[n, *shape]`` in the workflow's dtype, labels ``[n]`` int64 or float32)
    from this rank's Parquet files."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_jobs.features import decode

    layout = workflow.features
    tables = [pq.read_table(f.removeprefix("file:"), columns=list(SHARD_COLS)) for f in files]
    if not tables:
        return np.zeros((0, *layout.shape), dtype=layout.numpy_dtype), np.zeros(0, dtype=training_label_dtype(workflow))
    table = pa.concat_tables(tables)
    labels = table.column(LABEL_COL).to_numpy().astype(training_label_dtype(workflow))
    return decode(table.column(FEATURES_COL), layout), labels
