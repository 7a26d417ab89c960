"""Reading and replacing ``ds=YYYY-MM-DD`` partitions: the only place that knows the layout.

Replacement is atomic per day and committed as a whole per job. Under a dataset root, next
to the live days, the machinery lives under names Spark's partition discovery skips::

    <root>/ds=2026-11-28/                 live partitions
    <root>/_staging/<job>/owner.json      the writer: host, pid, process start, start time
    <root>/_staging/<job>/data/ds=.../    the job's complete new output
    <root>/_staging/<job>/old/ds=.../     a replaced day on its way out
    <root>/_txn/<commit>-<job>.json       journal: the job's days and one file name of each
    <root>/_txn/swap.lock                 held by the one writer swapping days in

:func:`replace_partitions`

1. writes the whole DataFrame to its own staging folder (the long part: a kill here changes
   nothing a reader sees; the folder is removed by a later writer once its process is
   gone, or after two days when it ran on another host);
2. takes the dataset's swap lock and completes any journal a dead writer left, oldest first;
3. commits: writes its journal under a temporary name and renames it into ``_txn/``;
4. swaps each day in: on a local file system with one ``renameat2(RENAME_EXCHANGE)``, so
   the live directory never goes missing; elsewhere (HDFS, ABFS, WASB through Hadoop's
   FileSystem API, or where the kernel refuses the exchange) by renaming the old day
   aside and the new one in;
5. deletes its journal and staging folder, releases the lock.

:func:`read_partitions` serves every day of a committed journal from its new copy, staged
or already live (the journal's file name of the day tells which), so a bulk job's days
appear together at its commit and no reader sees a day missing or mixed. A kill during
the swaps leaves each live day whole, old or new; until the next writer of the dataset (a
retry of the same job, too) completes the journal, readers see the new days from staging.

Limits. A Spark query that listed a day's files before a swap and reads them after fails
with Spark's file-not-found error, never with a partial answer (any replacement by rename
does this): run it again. A reader of ``<root>/ds=D`` that bypasses read_partitions can
find the day missing between the two renames on non-local storage. Where a directory
rename is not atomic (WASB, ABFS without hierarchical namespace copy blob by blob) a kill
is still completed by the next writer, but a reader during the copy can see it half done.
"""

from __future__ import annotations

import abc
import argparse
import contextlib
import ctypes
import datetime as dt
import errno
import functools
import json
import logging
import os
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ml_contract.layout import PARTITION_COL
from spark_jobs.storage import (
    delete_path,
    list_children,
    local_os_path,
    make_dirs,
    path_exists,
    read_text,
    rename_path,
    write_text,
)

log = logging.getLogger(__name__)


def parse_ds(value: str) -> str:
    """argparse type for a partition date: strict ``YYYY-MM-DD``."""
    try:
        parsed = dt.date.fromisoformat(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD, got {value!r}") from err
    if parsed.isoformat() != value:
        raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD, got {value!r}")
    return value


def add_days_arguments(parser: argparse.ArgumentParser, what: str = "partition") -> None:
    """``--ds DAY``, or ``--start-ds`` and ``--end-ds``: the days a job works on."""
    days = parser.add_mutually_exclusive_group(required=True)
    days.add_argument("--ds", type=parse_ds, help=f"the one {what}")
    days.add_argument("--start-ds", type=parse_ds, help=f"first {what} of a range (with --end-ds)")
    parser.add_argument("--end-ds", type=parse_ds, help=f"last {what} of the range")


def resolve_days(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """After :func:`add_days_arguments`: ``args.start_ds`` and ``args.end_ds`` always set."""
    if args.start_ds and not args.end_ds:
        parser.error("--start-ds needs --end-ds")
    if args.ds:
        args.start_ds = args.end_ds = args.ds


def read_partitions(spark: SparkSession, root: str, start_ds: str, end_ds: str) -> DataFrame:
    """Rows of the partitions ``start_ds <= ds <= end_ds``, ``ds`` as a ``YYYY-MM-DD`` string.

    Partition discovery prunes to the requested days; a day a committed replacement has not
    swapped in yet is read from its staged copy (see the module docstring), so a reader
    sees each day whole and a bulk replacement all at once. Listing again when a directory
    moved under Spark's listing (a swap finished meanwhile) makes the result consistent;
    an absent dataset is an error that names the root rather than Spark's generic "path
    does not exist".
    """
    if not path_exists(spark, root):
        raise FileNotFoundError(f"dataset {root} does not exist (nothing ingested yet?)")
    tree = _tree(spark, root)
    for _ in range(_READ_ATTEMPTS - 1):
        try:
            return _read_resolved(spark, tree, start_ds, end_ds)
        except Exception as err:  # pyspark raises AnalysisException or a wrapped Java error
            if not any(sign in str(err) for sign in _MOVED_SIGNS):
                raise
            log.info("a partition of %s moved while it was listed (a swap finished); listing again", root)
    return _read_resolved(spark, tree, start_ds, end_ds)


def replace_partitions(df: DataFrame, root: str) -> None:
    """Write ``df`` partitioned by ``ds``, replacing exactly the days it contains, atomically.

    The whole output is staged first; only then are the days swapped in, under the dataset's
    swap lock, after a journal commits them (see the module docstring for the protocol and
    what a kill at each point leaves).
    """
    spark = df.sparkSession
    tree = _tree(spark, root)
    job = f"{_now_ms():013d}-{uuid.uuid4().hex[:12]}"
    staging = f"{_STAGING_DIR}/{job}"
    tree.write(f"{staging}/owner.json", json.dumps(_owner(job)))
    try:
        df.write.mode("errorifexists").partitionBy(PARTITION_COL).parquet(tree.uri(f"{staging}/data"))
        days = _staged_days(tree, staging)
    except BaseException:
        tree.delete(staging)
        raise
    with tree.swap_lock(job):
        _finish_abandoned(tree)
        if days:
            journal = {"job": job, "staging": staging, "days": days}
            name = _commit(tree, journal)
            for ds in sorted(days):
                _swap_day(tree, journal, ds)
            tree.delete(f"{_TXN_DIR}/{name}")
        tree.delete(staging)
        _remove_dead_staging(tree)
    log.info("replaced %d partition(s) under %s: %s", len(days), root, ", ".join(sorted(days)))


# Layout of the replacement machinery under a dataset root. The leading "_" hides these
# from Spark's partition discovery (a "." would too, but "_x=y" names would not be hidden).
_STAGING_DIR = "_staging"
_TXN_DIR = "_txn"
_LOCK_NAME = "swap.lock"
# A swap holds the lock for renames only (seconds); a lock older than this whose holder
# cannot be checked (another host) is taken over. Waiting longer than that is pointless.
SWAP_LOCK_STALE_AFTER_S = 900
SWAP_LOCK_WAIT_S = 1200
_LOCK_POLL_S = 0.2
# Staging of a writer on another host is removed once it is this old (a writer on this
# host is checked by its process instead).
STAGING_ABANDONED_AFTER_S = 2 * 24 * 3600
_READ_ATTEMPTS = 5
_MOVED_SIGNS = ("PATH_NOT_FOUND", "FileNotFoundException", "does not exist")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _process_start(pid: int) -> float | None:
    """When ``pid`` started (psutil's create time; None when no such process), so that a
    recycled pid does not pass for the writer that died."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _owner(job: str) -> dict[str, Any]:
    pid = os.getpid()
    return {
        "job": job,
        "host": socket.gethostname(),
        "pid": pid,
        "process_start": _process_start(pid),
        "started_ms": _now_ms(),
    }


def _writer_gone(owner: dict[str, Any], max_age_s: float) -> bool:
    """Whether the writer that recorded ``owner`` is certainly dead (same host: its process
    is gone) or, elsewhere, has been at it for longer than any live one would."""
    if owner.get("host") == socket.gethostname():
        return _process_start(int(owner["pid"])) != owner.get("process_start")
    return _now_ms() - int(owner["started_ms"]) > max_age_s * 1000


def _staged_days(tree: _Tree, staging: str) -> dict[str, str]:
    """``{ds: one file name of that day}`` of a finished staged write. The file name tells,
    after a kill, whether the live directory already holds the new day."""
    days = {}
    for name, is_dir in tree.listdir(f"{staging}/data"):
        if is_dir and name.startswith(f"{PARTITION_COL}="):
            files = sorted(
                n for n, sub in tree.listdir(f"{staging}/data/{name}") if not sub and not n.startswith((".", "_"))
            )
            days[name.split("=", 1)[1]] = files[0]
    return days


def _commit(tree: _Tree, journal: dict[str, Any]) -> str:
    """Write the journal under a temporary name, then rename it: from that rename on, the
    job's days count as replaced (readers serve them, a dead writer's are completed)."""
    name = f"{_now_ms():013d}-{journal['job']}.json"
    tree.write(f"{_TXN_DIR}/.{name}.tmp", json.dumps(journal), durable=True)
    tree.rename(f"{_TXN_DIR}/.{name}.tmp", f"{_TXN_DIR}/{name}")
    return name


def _journals(tree: _Tree) -> list[str]:
    """Committed journals, oldest commit first."""
    return sorted(
        n for n, is_dir in tree.listdir(_TXN_DIR) if not is_dir and n.endswith(".json") and not n.startswith(".")
    )


def _swap_day(tree: _Tree, journal: dict[str, Any], ds: str) -> None:
    """Make the journal's new copy of ``ds`` the live one; safe to repeat after a kill at
    any point (the journal's file name of the day tells which copy is where)."""
    live = f"{PARTITION_COL}={ds}"
    new = f"{journal['staging']}/data/{live}"
    old = f"{journal['staging']}/old/{live}"
    marker = journal["days"][ds]
    if tree.exists(f"{live}/{marker}"):
        # Already in: an exchange leaves the old day where the new one was staged.
        tree.delete(new)
        tree.delete(old)
        return
    if not tree.exists(new):
        log.warning("journal %s: no staged copy of %s and none live; leaving %s as it is", journal["job"], ds, live)
        return
    if tree.exists(live):
        if tree.exchange(live, new):
            tree.delete(new)
            return
        tree.delete(old)
        tree.mkdirs(f"{journal['staging']}/old")
        tree.rename(live, old)
    tree.rename(new, live)
    tree.delete(old)


def _finish_abandoned(tree: _Tree) -> None:
    """Complete every journal a dead writer left (the caller holds the swap lock, so no
    live writer is swapping), oldest first so the newest commit of a day ends up live."""
    for name in _journals(tree):
        journal = json.loads(tree.read(f"{_TXN_DIR}/{name}"))
        log.warning(
            "completing the replacement of %s left by job %s", ", ".join(sorted(journal["days"])), journal["job"]
        )
        for ds in sorted(journal["days"]):
            _swap_day(tree, journal, ds)
        tree.delete(f"{_TXN_DIR}/{name}")
        tree.delete(journal["staging"])
    for name, is_dir in tree.listdir(_TXN_DIR):
        if not is_dir and name.endswith(".json.tmp"):  # killed before its commit: nothing to complete
            tree.delete(f"{_TXN_DIR}/{name}")


def _remove_dead_staging(tree: _Tree) -> None:
    """Remove the staging of writers that died before they committed; a live writer's
    staging (its process still running, or started recently on another host) stays."""
    for job, is_dir in tree.listdir(_STAGING_DIR):
        if not is_dir:
            continue
        try:
            owner = json.loads(tree.read(f"{_STAGING_DIR}/{job}/owner.json"))
        except Exception:  # killed before its owner file was complete: judge by the job's age
            owner = {"started_ms": int(job.split("-", 1)[0]) if job.split("-", 1)[0].isdigit() else 0}
        if _writer_gone(owner, STAGING_ABANDONED_AFTER_S):
            log.info("removing the staging of dead writer %s", job)
            tree.delete(f"{_STAGING_DIR}/{job}")


def _read_resolved(spark: SparkSession, tree: _Tree, start_ds: str, end_ds: str) -> DataFrame:
    staged: dict[str, list[str]] = {}  # staged data folder -> days read from it
    decided: set[str] = set()
    for name in reversed(_journals(tree)):  # the newest commit of a day wins
        try:
            journal = json.loads(tree.read(f"{_TXN_DIR}/{name}"))
        except Exception:  # finished and deleted since the listing: its days are live
            continue
        for ds, marker in journal["days"].items():
            if not start_ds <= ds <= end_ds or ds in decided:
                continue
            decided.add(ds)
            data = f"{journal['staging']}/data"
            if not tree.exists(f"{PARTITION_COL}={ds}/{marker}") and tree.exists(
                f"{data}/{PARTITION_COL}={ds}/{marker}"
            ):
                staged.setdefault(data, []).append(ds)
    frames = []
    pending = sorted(ds for days in staged.values() for ds in days)
    if not pending or any(n.startswith(f"{PARTITION_COL}=") for n, _ in tree.listdir("")):
        live_df = spark.read.option("basePath", tree.uri("")).parquet(tree.uri(""))
        live_df = live_df.where(F.col(PARTITION_COL).between(start_ds, end_ds))
        if pending:
            live_df = live_df.where(~F.col(PARTITION_COL).isin(pending))
        frames.append(live_df)
    for data, days in sorted(staged.items()):
        paths = [tree.uri(f"{data}/{PARTITION_COL}={ds}") for ds in sorted(days)]
        frames.append(spark.read.option("basePath", tree.uri(data)).parquet(*paths))
    return functools.reduce(DataFrame.unionByName, frames)


class _Tree(abc.ABC):
    """File operations on a dataset root, by paths relative to it."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")

    def uri(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    @abc.abstractmethod
    def exists(self, rel: str) -> bool: ...

    @abc.abstractmethod
    def listdir(self, rel: str) -> list[tuple[str, bool]]:
        """``(name, is_directory)`` of each entry directly in ``rel``; empty when it is absent."""

    @abc.abstractmethod
    def mkdirs(self, rel: str) -> None: ...

    @abc.abstractmethod
    def delete(self, rel: str) -> None:
        """Remove a file or a whole directory; nothing when absent."""

    @abc.abstractmethod
    def rename(self, src: str, dst: str) -> None: ...

    def exchange(self, a: str, b: str) -> bool:
        """Atomically swap two directories; False where the file system cannot."""
        return False

    @abc.abstractmethod
    def read(self, rel: str) -> str: ...

    @abc.abstractmethod
    def write(self, rel: str, text: str, *, durable: bool = False) -> None:
        """Write a small UTF-8 file; ``durable``: on stable storage before this returns."""

    @abc.abstractmethod
    def swap_lock(self, job: str) -> contextlib.AbstractContextManager[None]:
        """Held by one writer of the dataset at a time, ``job`` naming the holder."""


class _LocalTree(_Tree):
    """A root on the local file system: POSIX renames, an exchange where the kernel has one,
    and an flock for the swap lock (released by the kernel when its holder dies)."""

    def __init__(self, root: str, os_root: str) -> None:
        super().__init__(root)
        self.os_root = os_root

    def _os(self, rel: str) -> str:
        return os.path.join(self.os_root, rel) if rel else self.os_root

    def exists(self, rel: str) -> bool:
        return os.path.exists(self._os(rel))

    def listdir(self, rel: str) -> list[tuple[str, bool]]:
        try:
            with os.scandir(self._os(rel)) as entries:
                return [(e.name, e.is_dir()) for e in entries]
        except FileNotFoundError:
            return []

    def mkdirs(self, rel: str) -> None:
        os.makedirs(self._os(rel), exist_ok=True)

    def delete(self, rel: str) -> None:
        path = self._os(rel)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.unlink(path)
            with contextlib.suppress(FileNotFoundError):  # written through Hadoop's local file system
                os.unlink(os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.crc"))

    def rename(self, src: str, dst: str) -> None:
        os.rename(self._os(src), self._os(dst))  # fails on a non-empty dst directory

    def exchange(self, a: str, b: str) -> bool:
        return _rename_exchange(self._os(a), self._os(b))

    def read(self, rel: str) -> str:
        with open(self._os(rel), encoding="utf-8") as f:
            return f.read()

    def write(self, rel: str, text: str, *, durable: bool = False) -> None:
        path = self._os(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())

    @contextlib.contextmanager
    def swap_lock(self, job: str) -> Iterator[None]:
        from filelock import FileLock, Timeout

        self.mkdirs(_TXN_DIR)
        # flock, never filelock's soft fallback (a marker file a dead holder leaves behind),
        # and the lock file kept (unlinking it would let a waiter lock a file nobody else sees).
        lock = FileLock(
            self._os(f"{_TXN_DIR}/{_LOCK_NAME}"),
            timeout=SWAP_LOCK_WAIT_S,
            mode=0o644,
            thread_local=False,
            poll_interval=_LOCK_POLL_S,
            fallback_to_soft=False,
            preserve_lock_file=True,
        )
        try:
            lock.acquire()
        except Timeout:
            held = f"{self.root}: another writer held the swap lock for over {SWAP_LOCK_WAIT_S} s"
            raise TimeoutError(held) from None
        try:
            yield
        finally:
            lock.release()


class _HadoopTree(_Tree):
    """A root on any Hadoop file system (HDFS, ABFS, WASB): renames, and a lock file
    created only if absent, taken over when its holder is dead or too old."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        super().__init__(root)
        self.spark = spark

    def exists(self, rel: str) -> bool:
        return path_exists(self.spark, self.uri(rel))

    def listdir(self, rel: str) -> list[tuple[str, bool]]:
        return list_children(self.spark, self.uri(rel))

    def mkdirs(self, rel: str) -> None:
        make_dirs(self.spark, self.uri(rel))

    def delete(self, rel: str) -> None:
        delete_path(self.spark, self.uri(rel))

    def rename(self, src: str, dst: str) -> None:
        rename_path(self.spark, self.uri(src), self.uri(dst))

    def read(self, rel: str) -> str:
        return read_text(self.spark, self.uri(rel))

    def write(self, rel: str, text: str, *, durable: bool = False) -> None:
        write_text(self.spark, self.uri(rel), text)  # durable once closed on these stores

    @contextlib.contextmanager
    def swap_lock(self, job: str) -> Iterator[None]:
        lock = f"{_TXN_DIR}/{_LOCK_NAME}"
        deadline = time.monotonic() + SWAP_LOCK_WAIT_S
        unreadable_since: float | None = None
        while not write_text(self.spark, self.uri(lock), json.dumps(_owner(job)), overwrite=False):
            try:
                holder = json.loads(self.read(lock))
                unreadable_since = None
                stale = _writer_gone(holder, SWAP_LOCK_STALE_AFTER_S)
            except Exception:  # being written, or just released
                holder = None
                unreadable_since = unreadable_since or time.monotonic()
                stale = time.monotonic() - unreadable_since > SWAP_LOCK_STALE_AFTER_S
            if stale:
                # A rename has one winner, so two writers cannot both take the lock over.
                taken = f"{_TXN_DIR}/.{_LOCK_NAME}.{job}"
                try:
                    self.rename(lock, taken)
                except Exception:
                    continue
                log.warning("took over the swap lock of %s, held by dead writer %s", self.root, holder)
                self.delete(taken)
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.root}: swap lock {self.uri(lock)} held by {holder} for over {SWAP_LOCK_WAIT_S} s"
                )
            time.sleep(_LOCK_POLL_S)
        try:
            yield
        finally:
            self.delete(lock)


def _tree(spark: SparkSession, root: str) -> _Tree:
    os_root = _local_os_path(spark, root)
    return _LocalTree(root, os_root) if os_root else _HadoopTree(spark, root)


_local_os_path = local_os_path  # a module attribute, so tests can force the Hadoop path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@functools.cache
def _renameat2() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    func = getattr(libc, "renameat2", None)  # glibc >= 2.28
    if func is not None:
        func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        func.restype = ctypes.c_int
    return func


def _rename_exchange(a: str, b: str) -> bool:
    """``renameat2(a, b, RENAME_EXCHANGE)``: both paths stay present throughout. False where
    the C library, kernel or file system lacks it (the caller then renames twice)."""
    func = _renameat2()
    if func is None:
        return False
    if func(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), a)
