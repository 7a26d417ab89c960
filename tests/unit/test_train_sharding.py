"""How training rows reach the Horovod ranks: one Parquet file per rank, all rows once."""

from __future__ import annotations

import numpy as np
from pyspark.sql import types as T

from spark_jobs.dataset import filter_holdout_rows, filter_training_rows
from spark_jobs.sample_data import make_rows
from spark_jobs.schema import CURATED_SCHEMA
from spark_jobs.train import read_rank_shard, write_training_shards


def curated_df(spark, rows=200):
    labels, pixels = make_rows("2026-11-28", rows)
    data = [
        (i, int(label), *map(int, p), "2026-11-28") for i, (label, p) in enumerate(zip(labels, pixels, strict=True))
    ]
    schema = T.StructType([*CURATED_SCHEMA.fields, T.StructField("ds", T.StringType())])
    return spark.createDataFrame(data, schema), labels


def test_split_is_deterministic_disjoint_and_complete(spark):
    df, _ = curated_df(spark)
    train_ids = {r["row_id"] for r in filter_training_rows(df, 20, 7).collect()}
    holdout_ids = {r["row_id"] for r in filter_holdout_rows(df, 20, 7).collect()}
    assert train_ids.isdisjoint(holdout_ids)
    assert len(train_ids | holdout_ids) == 200
    assert 20 <= len(holdout_ids) <= 60
    assert train_ids == {r["row_id"] for r in filter_training_rows(df, 20, 7).collect()}


def test_each_rank_reads_its_own_shard_and_together_all_rows(spark, tmp_path):
    df, labels = curated_df(spark)
    files = write_training_shards(df, str(tmp_path / "shards"), num_ranks=2)
    assert len(files) == 2
    shards = [read_rank_shard(files[rank::2]) for rank in range(2)]
    assert all(len(y) > 0 for _, y in shards)
    all_labels = np.concatenate([y for _, y in shards])
    assert sorted(all_labels.tolist()) == sorted(labels.tolist())
    pixels, _ = shards[0]
    assert pixels.shape[1] == 784 and pixels.dtype == np.float32


def test_rank_without_files_gets_an_empty_shard():
    pixels, labels = read_rank_shard([])
    assert pixels.shape == (0, 784) and labels.shape == (0,)
