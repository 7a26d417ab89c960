"""The MNIST table contract shared by every step: ``label`` plus 784 pixel columns."""

from __future__ import annotations

from pyspark.sql import types as T

IMAGE_SIDE = 28
NUM_PIXELS = IMAGE_SIDE * IMAGE_SIDE
NUM_CLASSES = 10
LABEL_COL = "label"
PIXEL_COLS: list[str] = [f"pixel{i}" for i in range(NUM_PIXELS)]
RAW_COLS: list[str] = [LABEL_COL, *PIXEL_COLS]
ROW_ID_COL = "row_id"
PARTITION_COL = "ds"
PROB_COLS: list[str] = [f"prob_{c}" for c in range(NUM_CLASSES)]

PIXEL_MIN, PIXEL_MAX = 0, 255
LABEL_MIN, LABEL_MAX = 0, NUM_CLASSES - 1

CURATED_SCHEMA = T.StructType(
    [
        T.StructField(ROW_ID_COL, T.LongType(), nullable=False),
        T.StructField(LABEL_COL, T.IntegerType(), nullable=False),
        *[T.StructField(c, T.IntegerType(), nullable=False) for c in PIXEL_COLS],
    ]
)
