"""The dense feature column's metadata, written by the jobs and read by the registry gate.

A curated row's features are one binary value in column :data:`FEATURES_COL`; the column's
Spark field metadata :data:`TENSOR_METADATA_KEY` holds the tensor's ``dtype`` and ``shape``
(:func:`tensor_metadata`). Spark writes its schema, field metadata included, into each
Parquet footer under :data:`SPARK_ROW_METADATA`, so the gate checks a model's tensor
signature against a partition from the footers alone (:func:`footer_tensor_metadata`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

FEATURES_COL = "features"
TENSOR_METADATA_KEY = "ml_tensor"
SPARK_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"


def tensor_metadata(dtype: str, shape: Sequence[int]) -> dict[str, Any]:
    """The Spark field metadata of the dense column of a ``dtype`` tensor of ``shape`` (per row)."""
    return {TENSOR_METADATA_KEY: {"dtype": dtype, "shape": list(shape)}}


def footer_tensor_metadata(footer: Mapping[bytes, bytes] | None, column: str = FEATURES_COL) -> dict[str, Any] | None:
    """The ``ml_tensor`` metadata of ``column`` in a Parquet footer's key-value metadata
    (``pyarrow.Schema.metadata``); None when the footer has none or cannot be read."""
    raw = (footer or {}).get(SPARK_ROW_METADATA)
    try:
        fields = json.loads(raw).get("fields", []) if raw else []
        for field in fields:
            if field.get("name") == column:
                found = (field.get("metadata") or {}).get(TENSOR_METADATA_KEY)
                return found if isinstance(found, dict) else None
    except (ValueError, TypeError, AttributeError):
        return None
    return None
