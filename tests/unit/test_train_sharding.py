"""How training rows reach the ranks: one Parquet file per rank, all rows once, each row's
label with its own features, decoded from the dense column in the workflow's dtype."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from spark_jobs import workflows
from spark_jobs.dataset import filter_holdout_rows, filter_training_rows
from spark_jobs.sample_data import make_rows
from spark_jobs.schema import curated_arrow_table
from spark_jobs.training.shards import read_rank_shard, write_training_shards

DS = "2026-11-28"
# What the loss takes: class indices for nll, values for mse.
TRAINING_LABEL_DTYPE = {"mnist": np.int64, "diabetes": np.float32}


def curated_df(spark, tmp_path, workflow: str = "mnist", rows: int = 200):
    """A curated partition as ingest writes it, read back by Spark; and its (labels, features)."""
    wf = workflows.load(workflow)
    labels, features = make_rows(wf, DS, rows)
    partition = tmp_path / "curated" / f"ds={DS}"
    partition.mkdir(parents=True)
    pq.write_table(curated_arrow_table(wf, np.arange(rows), labels, features), partition / "part-00000.parquet")
    return spark.read.parquet(str(tmp_path / "curated")), labels, features


def test_split_is_deterministic_disjoint_and_complete(spark, tmp_path):
    df, _, _ = curated_df(spark, tmp_path)
    train_ids = {r["row_id"] for r in filter_training_rows(df, 20, 7).collect()}
    holdout_ids = {r["row_id"] for r in filter_holdout_rows(df, 20, 7).collect()}
    assert train_ids.isdisjoint(holdout_ids)
    assert len(train_ids | holdout_ids) == 200
    assert 20 <= len(holdout_ids) <= 60
    assert train_ids == {r["row_id"] for r in filter_training_rows(df, 20, 7).collect()}


@pytest.mark.parametrize("workflow", ["mnist", "diabetes"])
def test_each_rank_reads_its_own_shard_and_together_all_rows(spark, tmp_path, workflow):
    wf = workflows.load(workflow)
    df, labels, features = curated_df(spark, tmp_path, workflow)
    files = write_training_shards(df, str(tmp_path / "shards"), num_ranks=2)
    assert len(files) == 2
    # Only what training reads crosses to the ranks.
    assert pq.read_schema(files[0].removeprefix("file:")).names == ["label", "features"]
    shards = [read_rank_shard(files[rank::2], wf) for rank in range(2)]
    assert all(len(y) > 0 for _, y in shards)
    for x, y in shards:
        assert x.shape == (len(y), *wf.features.shape) and x.dtype == np.dtype(wf.features.dtype)
        assert y.dtype == TRAINING_LABEL_DTYPE[workflow]
    # Every row once, its label with its own features.
    read = sorted((float(label), row.tobytes()) for x, y in shards for label, row in zip(y, x, strict=True))
    written = sorted((float(label), row.tobytes()) for label, row in zip(labels, features, strict=True))
    assert read == written


@pytest.mark.parametrize("workflow", ["mnist", "diabetes"])
def test_rank_without_files_gets_an_empty_shard(workflow):
    wf = workflows.load(workflow)
    features, labels = read_rank_shard([], wf)
    assert features.shape == (0, *wf.features.shape) and features.dtype == np.dtype(wf.features.dtype)
    assert labels.shape == (0,) and labels.dtype == TRAINING_LABEL_DTYPE[workflow]
