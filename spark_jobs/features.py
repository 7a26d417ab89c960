"""The dense feature column: one binary value per row, a fixed-shape tensor's bytes.

The curated table stores a row's features in column ``features``: its elements in the
workflow's dtype, little-endian, row-major, exactly ``TensorFeatures.item_bytes`` long.
Spark reads it as ``binary`` (Arrow offsets + one data buffer), so a whole batch decodes
with one :func:`numpy.frombuffer` (:func:`decode`), and one Parquet column replaces one
column per element (784 for MNIST).

The column carries its shape and dtype in its Spark field metadata (``ml_tensor``, :mod:`ml_contract.tensors`), which
Spark keeps in the Parquet footer: the registry gate checks a model's tensor signature
against a partition without reading any data (:func:`tensor_metadata_of_parquet_schema`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ml_contract.tensors import FEATURES_COL, footer_tensor_metadata
from ml_contract.tensors import tensor_metadata as layout_metadata

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_jobs.workflows import TensorFeatures


def tensor_metadata(layout: TensorFeatures) -> dict:
    """The Spark field metadata of the ``features`` column for ``layout``."""
    return layout_metadata(layout.dtype, layout.shape)


def features_field(layout: TensorFeatures):
    """The Spark ``StructField`` of the dense column."""
    from pyspark.sql import types as T

    return T.StructField(FEATURES_COL, T.BinaryType(), nullable=False, metadata=tensor_metadata(layout))


def encode(values: np.ndarray, layout: TensorFeatures) -> pa.BinaryArray:
    """Rows of ``values`` (``[n, *shape]`` or ``[n, size]``) as one Arrow binary array."""
    import pyarrow as pa

    rows = np.ascontiguousarray(values, dtype=layout.numpy_dtype)
    rows = rows.reshape(len(rows), -1) if len(rows) else rows.reshape(0, layout.size)
    if rows.shape[1] != layout.size:
        raise ValueError(f"expected {layout.size} elements per row, got {rows.shape[1]}")
    offsets = np.arange(len(rows) + 1, dtype=np.int32) * layout.item_bytes
    return pa.Array.from_buffers(pa.binary(), len(rows), [None, pa.py_buffer(offsets), pa.py_buffer(rows.tobytes())])


def decode(column: pa.Array | pa.ChunkedArray, layout: TensorFeatures) -> np.ndarray:
    """``[n, *shape]`` array of the layout's dtype from a binary column, without copying.

    Raises ``ValueError`` when a value is null or not exactly one tensor long: the table
    does not hold this layout.
    """
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    n = len(column)
    if n == 0:
        return np.zeros((0, *layout.shape), dtype=layout.numpy_dtype)
    if column.null_count:
        raise ValueError(f"{column.null_count} null {FEATURES_COL} values")
    offset_type: type[np.int32 | np.int64]
    if pa.types.is_large_binary(column.type):
        offset_type = np.int64
    elif pa.types.is_binary(column.type):
        offset_type = np.int32
    else:
        raise ValueError(f"{FEATURES_COL} is {column.type}, expected binary")
    buffers = column.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offset_type)[column.offset : column.offset + n + 1]
    start = int(offsets[0])
    if not np.array_equal(offsets - start, np.arange(n + 1, dtype=offset_type) * layout.item_bytes):
        lengths = np.diff(offsets)
        bad = int(np.flatnonzero(lengths != layout.item_bytes)[0])
        raise ValueError(
            f"{FEATURES_COL} value {bad} is {int(lengths[bad])} bytes, expected {layout.item_bytes} "
            f"({layout.dtype} {list(layout.shape)})"
        )
    flat = np.frombuffer(buffers[2], dtype=layout.numpy_dtype, count=n * layout.size, offset=start)
    return flat.reshape(n, *layout.shape)


def tensor_metadata_of_parquet_schema(schema: pa.Schema) -> dict | None:
    """The ``ml_tensor`` metadata of a Parquet file's ``features`` column (Spark writes
    field metadata into the footer's row metadata), or None (:mod:`ml_contract.tensors`)."""
    return footer_tensor_metadata(schema.metadata)
