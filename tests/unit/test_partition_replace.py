"""Partition replacement is atomic: a reader sees each day old or new, whole, and a bulk
replacement all at once, whatever point a writer dies at; the next writer completes it.

Every protocol path runs: the local exchange (``renameat2``), local renames (a file system
without the exchange) and Hadoop FileSystem calls only (what HDFS/ABFS/WASB roots get).
A "kill" is an exception raised at one step of the swap: like a dead process, the writer
leaves its journal and staging behind and swaps nothing further.
"""

from __future__ import annotations

import json
import os
import threading
from functools import reduce

import pytest
from pyspark.sql import DataFrame

from spark_jobs import partitions
from spark_jobs.partitions import read_partitions, replace_partitions

D1, D2, D3 = "2026-11-01", "2026-11-02", "2026-11-03"


class Killed(BaseException):
    """Stands for the writer's death (not an Exception, so no handler in the job catches it)."""


@pytest.fixture(params=["exchange", "renames", "hadoop"])
def mode(request, monkeypatch) -> str:
    if request.param != "exchange":
        monkeypatch.setattr(partitions, "_rename_exchange", lambda a, b: False)
    if request.param == "hadoop":
        monkeypatch.setattr(partitions, "_local_os_path", lambda spark, path: None)
    return request.param


def days_df(spark, version: str, rows: dict[str, int]) -> DataFrame:
    frames = [
        spark.range(n).selectExpr("id AS row_id", f"'{version}' AS version", f"'{ds}' AS ds") for ds, n in rows.items()
    ]
    return reduce(DataFrame.unionByName, frames)


def seen(spark, root, start=D1, end=D3) -> dict[str, dict[str, int]]:
    """``{ds: {version: rows}}`` as read_partitions returns them."""
    out: dict[str, dict[str, int]] = {}
    for row in read_partitions(spark, str(root), start, end).groupBy("ds", "version").count().collect():
        out.setdefault(row["ds"], {})[row["version"]] = row["count"]
    return out


def kill_at_rename_in(monkeypatch, day: str) -> None:
    """Die after the old ``day`` went aside, before the new one is renamed in (the moment a
    delete-then-rename commit leaves the day missing). Rename modes only."""
    for cls in (partitions._LocalTree, partitions._HadoopTree):
        real = cls.rename

        def rename(self, src, dst, real=real):
            if dst == f"ds={day}":
                raise Killed(f"killed before renaming {src} in")
            return real(self, src, dst)

        monkeypatch.setattr(cls, "rename", rename)


def kill_after_exchange(monkeypatch, day: str) -> None:
    """Die right after the exchange of ``day``, before the old copy left the staging folder."""
    real = partitions._LocalTree.delete

    def delete(self, rel, real=real):
        if rel.endswith(f"/data/ds={day}") and self.exists(f"ds={day}"):
            raise Killed(f"killed after exchanging ds={day}")
        return real(self, rel)

    monkeypatch.setattr(partitions._LocalTree, "delete", delete)


def kill_mid_swap(monkeypatch, mode: str, day: str) -> None:
    (kill_after_exchange if mode == "exchange" else kill_at_rename_in)(monkeypatch, day)


def leftovers(root) -> list[str]:
    """Files of the replacement machinery still on disk (the lock file stays, by design)."""
    found = []
    for folder in ("_staging", "_txn"):
        for dirpath, _, files in os.walk(root / folder):
            found += [os.path.join(dirpath, f) for f in files if "swap.lock" not in f]
    return found


def test_replacement_replaces_exactly_the_days_written(spark, tmp_path, mode):
    root = tmp_path / "scored"
    replace_partitions(days_df(spark, "v1", {D1: 3, D2: 4}), str(root))
    replace_partitions(days_df(spark, "v2", {D2: 5, D3: 2}), str(root))
    replace_partitions(days_df(spark, "v3", {D3: 1}).limit(0), str(root))  # nothing to replace
    assert seen(spark, root) == {D1: {"v1": 3}, D2: {"v2": 5}, D3: {"v2": 2}}
    assert leftovers(root) == []


def test_killed_mid_swap_a_reader_sees_the_day_whole_and_the_next_writer_completes_it(
    spark, tmp_path, mode, monkeypatch
):
    root = tmp_path / "scored"
    replace_partitions(days_df(spark, "old", {D1: 7}), str(root))
    with monkeypatch.context() as patch:
        kill_mid_swap(patch, mode, D1)
        with pytest.raises(Killed):
            replace_partitions(days_df(spark, "new", {D1: 5}), str(root))
    if mode != "exchange":
        assert not (root / f"ds={D1}").exists(), "the kill did not land between the two renames"
    # Committed: readers get the new day, whole, while the live directory is missing.
    assert seen(spark, root) == {D1: {"new": 5}}

    replace_partitions(days_df(spark, "other", {D2: 2}), str(root))
    assert seen(spark, root) == {D1: {"new": 5}, D2: {"other": 2}}
    assert (root / f"ds={D1}").is_dir()
    assert leftovers(root) == []


def test_bulk_job_killed_mid_loop_is_seen_all_new_and_a_retry_completes_it(spark, tmp_path, mode, monkeypatch):
    root = tmp_path / "scored"
    replace_partitions(days_df(spark, "old", {D1: 3, D2: 3, D3: 3}), str(root))
    bulk = {D1: 4, D2: 5, D3: 6}
    with monkeypatch.context() as patch:
        kill_mid_swap(patch, mode, D2)
        with pytest.raises(Killed):
            replace_partitions(days_df(spark, "new", bulk), str(root))
    # On disk D1 is new and D3 still old; readers see the whole job or nothing of it.
    assert seen(spark, root) == {ds: {"new": n} for ds, n in bulk.items()}
    assert seen(spark, root, D3, D3) == {D3: {"new": 6}}

    replace_partitions(days_df(spark, "new", bulk), str(root))  # the retry
    assert seen(spark, root) == {ds: {"new": n} for ds, n in bulk.items()}
    assert leftovers(root) == []


def test_job_killed_while_computing_changes_nothing(spark, tmp_path):
    from pyspark.sql import functions as F

    root = tmp_path / "scored"
    replace_partitions(days_df(spark, "old", {D1: 3, D2: 3}), str(root))
    failing = days_df(spark, "new", {D1: 4, D2: 4}).withColumn(
        "version", F.when(F.col("row_id") == 3, F.raise_error(F.lit("scoring failed"))).otherwise(F.col("version"))
    )
    with pytest.raises(Exception, match="scoring failed"):
        replace_partitions(failing, str(root))
    assert seen(spark, root) == {D1: {"old": 3}, D2: {"old": 3}}
    assert leftovers(root) == []


def test_first_write_of_a_dataset_killed_after_its_commit_is_readable(spark, tmp_path, monkeypatch):
    root = tmp_path / "scored"
    monkeypatch.setattr(partitions, "_rename_exchange", lambda a, b: False)
    kill_at_rename_in(monkeypatch, D1)
    with pytest.raises(Killed):
        replace_partitions(days_df(spark, "new", {D1: 2}), str(root))
    assert not any(p.name.startswith("ds=") for p in root.iterdir())
    assert seen(spark, root) == {D1: {"new": 2}}


def test_staging_of_dead_writers_is_removed_and_a_live_writers_kept(spark, tmp_path):
    root = tmp_path / "scored"
    replace_partitions(days_df(spark, "v1", {D1: 1}), str(root))
    me = partitions._owner("0000000000001-live")
    dead = {**me, "job": "0000000000002-dead", "process_start": "-1"}  # this pid, another process's start
    remote_old = {**me, "job": "0000000000003-remote", "host": "elsewhere", "started_ms": 0}
    remote_new = {**me, "job": "0000000000004-remote", "host": "elsewhere", "started_ms": partitions._now_ms()}
    for owner in (me, dead, remote_old, remote_new):
        staged = root / "_staging" / owner["job"]
        (staged / "data" / f"ds={D2}").mkdir(parents=True)
        (staged / "owner.json").write_text(json.dumps(owner))
    (root / "_txn" / ".0000000000002-0000000000002-dead.json.tmp").write_text("{")  # killed before its commit
    replace_partitions(days_df(spark, "v2", {D1: 1}), str(root))
    assert sorted(os.listdir(root / "_staging")) == [me["job"], remote_new["job"]]
    assert sorted(os.listdir(root / "_txn")) == ["swap.lock"]
    assert seen(spark, root) == {D1: {"v2": 1}}


def test_swap_lock_of_a_dead_writer_on_hadoop_storage_is_taken_over(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(partitions, "_local_os_path", lambda spark, path: None)
    root = tmp_path / "scored"
    (root / "_txn").mkdir(parents=True)
    dead = {**partitions._owner("0000000000001-dead"), "process_start": "-1"}
    (root / "_txn" / "swap.lock").write_text(json.dumps(dead))
    replace_partitions(days_df(spark, "v1", {D1: 2}), str(root))
    assert seen(spark, root) == {D1: {"v1": 2}}
    assert not (root / "_txn" / "swap.lock").exists()


def test_a_reader_during_repeated_replacements_sees_each_day_whole(spark, tmp_path):
    """The writer alternates 40 and 60 rows for two days in one job each time; every
    successful read sees both days from the same job. A query whose listed files moved
    away before it read them fails with Spark's file-not-found error (documented), never
    with a wrong count."""
    root = tmp_path / "scored"
    versions = {"a": {D1: 40, D2: 40}, "b": {D1: 60, D2: 60}}
    replace_partitions(days_df(spark, "a", versions["a"]), str(root))
    frames = {v: days_df(spark, v, rows) for v, rows in versions.items()}
    done, read_whole = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def write_repeatedly():
        # Each replacement waits for one read to have succeeded since the one before (a
        # cold JVM reads slower than it replaces: every read could otherwise overlap one
        # and fail, leaving nothing checked); the reads keep overlapping the replacements.
        try:
            for i in range(6):
                read_whole.wait(timeout=120)
                read_whole.clear()
                replace_partitions(frames["b" if i % 2 == 0 else "a"], str(root))
        except BaseException as err:
            errors.append(err)
        finally:
            done.set()

    writer = threading.Thread(target=write_repeatedly)
    writer.start()
    answers = []
    while not done.is_set():
        try:
            answers.append(seen(spark, root, D1, D2))
            read_whole.set()
        except Exception as err:
            # The same error by its three names: Hadoop's, Spark's, and java.nio's (local files).
            assert any(name in str(err) for name in ("FileNotFound", "FILE_NOT_EXIST", "NoSuchFileException")), err
    writer.join()
    assert not errors, errors
    expected = [{ds: {v: n} for ds, n in rows.items()} for v, rows in versions.items()]
    assert answers and all(answer in expected for answer in answers), answers
