"""A writer killed while it replaces a partition leaves the old or the new day, whole.

The writer is a real process (its own SparkSession, as a spark-submit driver has): the test
watches the live ``ds=`` directory and SIGKILLs the writer's whole process group the moment
the old partition starts to change (a file of it gone, or the directory moved). That is the
worst moment for a replacement: a delete-then-rename commit dies with the day half deleted
or missing. A reader must then see the old rows or the new rows, all of them, and the next
writer of the dataset completes what the dead one left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from local_stack import REPO

DS = "2026-10-05"
OTHER_DS = "2026-10-06"
OLD_FILES = 300  # enough files that deleting them takes a few milliseconds
NEW_ROWS = 50

WRITER = """
import sys
from spark_jobs import partitions
from spark_jobs.session import build_spark_session

root, ds, rows, mode = sys.argv[1:5]
if mode == "hadoop":
    # The path every non-local storage root takes: Hadoop FileSystem renames only.
    partitions._local_os_path = lambda spark, path: None
spark = build_spark_session(
    "swap-kill", master="local[1]",
    extra_conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1"},
)
new_df = spark.range(int(rows)).selectExpr("id AS row_id", "'new' AS version", f"'{ds}' AS ds")
print("writing", flush=True)
partitions.replace_partitions(new_df.coalesce(1), root)
print("replaced", flush=True)
"""


def write_old_partition(day_dir: Path, files: int) -> set[str]:
    """One row per Parquet file, so that removing the day takes many file deletions."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    day_dir.mkdir(parents=True)
    for i in range(files):
        table = pa.table({"row_id": pa.array([i], pa.int64()), "version": pa.array(["old"])})
        pq.write_table(table, day_dir / f"part-{i:05d}-old.parquet")
    return set(os.listdir(day_dir))


def kill_when_partition_changes(proc: subprocess.Popen, day_dir: Path, original: set[str]) -> bool:
    """Busy-watch the live day directory; SIGKILL the writer's process group as soon as one
    original file is gone or the directory is missing. False if the writer exited first."""
    while proc.poll() is None:
        try:
            current = set(os.listdir(day_dir))
        except FileNotFoundError:
            current = set()
        if not original <= current:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
            return True
    return False


def version_counts(spark, root: Path, ds: str) -> dict[str, int]:
    from spark_jobs.partitions import read_partitions

    rows = read_partitions(spark, str(root), ds, ds).groupBy("version").count().collect()
    return {row["version"]: row["count"] for row in rows}


@pytest.mark.parametrize("mode", ["local", "hadoop"])
def test_writer_killed_mid_replacement_leaves_a_whole_partition(ingest_spark, tmp_path, mode):
    root = tmp_path / "predictions"
    original = write_old_partition(root / f"ds={DS}", OLD_FILES)

    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), DS, str(NEW_ROWS), mode],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout.readline().strip() == "writing"
        killed = kill_when_partition_changes(proc, root / f"ds={DS}", original)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
    assert killed, f"the writer finished (exit {proc.returncode}) before the partition changed"

    seen = version_counts(ingest_spark, root, DS)
    assert seen in ({"old": OLD_FILES}, {"new": NEW_ROWS}), f"a reader saw {seen} after the kill"

    # The next writer of the dataset finishes the dead writer's replacement and its leftovers.
    from spark_jobs.partitions import replace_partitions

    other_df = ingest_spark.range(3).selectExpr("id AS row_id", "'other' AS version", f"'{OTHER_DS}' AS ds")
    replace_partitions(other_df, str(root))
    after = version_counts(ingest_spark, root, DS)
    assert after in ({"old": OLD_FILES}, {"new": NEW_ROWS}), f"after the next write a reader saw {after}"
    if seen == {"new": NEW_ROWS}:
        assert after == seen, "a replacement readers already saw was rolled back"
    assert version_counts(ingest_spark, root, OTHER_DS) == {"other": 3}
    leftovers = sorted(p.name for p in root.iterdir() if p.name.startswith(("_", ".")) and p.name != "_SUCCESS")
    for name in leftovers:
        assert not [f for f in (root / name).rglob("*") if f.is_file() and "lock" not in f.name], (
            f"the dead writer's files are still under {root / name}"
        )
