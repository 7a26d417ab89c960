"""The curated table contract shared by every step, for any workflow.

``row_id`` (a content hash, stable across re-runs), ``label`` (the workflow's target) and
``features`` (the row's tensor as one dense binary value, :mod:`spark_jobs.features`),
partitioned by ``ds`` (:mod:`ml_contract.layout`). What the label and the tensor hold is the workflow's declaration
(:mod:`spark_jobs.workflows`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs.features import FEATURES_COL, features_field

if TYPE_CHECKING:
    from pyspark.sql import types as T

    from spark_jobs.workflows import Workflow

LABEL_COL = "label"
ROW_ID_COL = "row_id"
CURATED_COLS: list[str] = [ROW_ID_COL, LABEL_COL, FEATURES_COL]


def label_type(workflow: Workflow) -> T.DataType:
    """``int`` for a class label (``int32``), ``float`` for a value (``float32``)."""
    from pyspark.sql import types as T

    return T.IntegerType() if workflow.label.dtype == "int32" else T.FloatType()


def curated_schema(workflow: Workflow) -> T.StructType:
    """The curated table's columns (without the ``ds`` partition column)."""
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField(ROW_ID_COL, T.LongType(), nullable=False),
            T.StructField(LABEL_COL, label_type(workflow), nullable=False),
            features_field(workflow.features),
        ]
    )


def curated_arrow_table(workflow: Workflow, row_ids, labels, features):
    """A curated partition as a pyarrow table, for writers outside Spark (the local stack,
    tests, benchmarks): the same columns, and the Spark schema in the footer metadata so
    that Spark and the registry gate read the ``features`` layout as from a job's output.

    ``features`` is ``[n, *shape]`` (or ``[n, size]``) in any numeric dtype that fits.
    """
    import numpy as np
    import pyarrow as pa

    from ml_contract.tensors import SPARK_ROW_METADATA
    from spark_jobs.features import encode

    table = pa.table(
        {
            ROW_ID_COL: pa.array(np.asarray(row_ids, dtype=np.int64)),
            LABEL_COL: pa.array(np.asarray(labels, dtype=np.dtype(workflow.label.dtype))),
            FEATURES_COL: encode(np.asarray(features), workflow.features),
        }
    )
    return table.replace_schema_metadata({SPARK_ROW_METADATA: curated_schema(workflow).json().encode()})
