"""Ingest: one day's raw MNIST-format CSV drop -> typed, validated curated Parquet partition.

Accepts both common MNIST CSV shapes (Kaggle's ``label,pixel0..pixel783`` header, or no
header at all), plain or compressed (``.csv.gz``, ``.bz2``, ...), UTF-8 with or without a
byte-order mark. Every non-blank line other than a file's header is counted: it lands
either in the curated partition or in the quarantine partition with the reason it was
rejected, so ``rows_in == rows_curated + rows_quarantined`` always holds, whatever a line
holds (no single row can fail the job). Each run records the counts in a manifest.

Only a file's first non-blank line can be its header, and only the contract's
``label,pixel0,...,pixel783`` in that order (names compared case-insensitively, spaces and
double quotes around them ignored). A first line of column names that differs (other
names, another order) fails the drop naming the file: columns are never mapped by name or
guessed, since a wrong mapping would publish every label wrong. Column names further down
a file (concatenated CSVs) are a quarantined row.

A file that cannot be read as UTF-8 text (truncated or corrupt compression, UTF-16,
binary data) fails the whole drop with an :class:`IngestError` naming the file, before
anything is written.

What a day's datasets hold always describes one drop, the one published last:
``<curated_root>/ds=<ds>``, ``<quarantine_root>/ds=<ds>`` and the manifest
``<curated_root>/_manifests/ds=<ds>/ingest.json`` (``outcome: published``). A drop that is
counted and then rejected (too many bad rows, or none valid) leaves all three as they were
and records itself beside them: its rejected rows under ``<quarantine_root>/_rejected/ds=<ds>``
and its manifest in ``.../_manifests/ds=<ds>/ingest.rejected.json`` (``outcome: rejected``), both
hidden from readers of the datasets; the next published drop of the day removes them.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TypeVar

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.partitions import parse_ds, partition_path, replace_partitions
from spark_jobs.schema import (
    LABEL_COL,
    LABEL_MAX,
    LABEL_MIN,
    NUM_PIXELS,
    PARTITION_COL,
    PIXEL_COLS,
    PIXEL_MAX,
    PIXEL_MIN,
    RAW_COLS,
    ROW_ID_COL,
)
from spark_jobs.session import build_spark_session, configure_job_logging
from spark_jobs.storage import delete_path, path_exists, read_head, write_json

log = logging.getLogger(__name__)
_T = TypeVar("_T")

REASON_COL = "reason"
RAW_RECORD_COL = "raw_record"
SOURCE_FILE_COL = "source_file"
# Position of a line in the scan of the drop (monotonically_increasing_id): the same in
# every pass over the same files, which is all finding each file's first line needs.
LINE_ID_COL = "_line_id"
_BLOCK_START = "_block_start"
_PLAIN = "_plain"
_FAST = "_fast"
_VALUES = "_values"
# Enough of each file to recognise its encoding; the rows themselves are checked one by one.
SNIFF_BYTES = 64 * 1024
_WIDE_BOMS = {
    b"\xff\xfe\x00\x00": "UTF-32 (little-endian)",
    b"\x00\x00\xfe\xff": "UTF-32 (big-endian)",
    b"\xff\xfe": "UTF-16 (little-endian)",
    b"\xfe\xff": "UTF-16 (big-endian)",
}
# C0 controls except tab, LF and CR, and DEL: binary data or a wide encoding read as UTF-8.
_CONTROL_CHARS = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"
# Unicode's other line terminators (NEL, LINE SEPARATOR, PARAGRAPH SEPARATOR): Spark's text
# reader splits lines on LF and CR only, so these stay inside a row.
_LINE_SEPARATORS = "[\u0085\u2028\u2029]"
# One column name of a header line; the same pattern for Python's re and Java's regex.
_COLUMN_NAME = r' *"?[A-Za-z_][A-Za-z0-9_]*"? *'
_REJECTED_DIR = "_rejected"


@dataclass(frozen=True)
class IngestReport:
    ds: str
    rows_in: int
    rows_curated: int
    rows_quarantined: int
    sample_reasons: list[str]

    @property
    def bad_ratio(self) -> float:
        return self.rows_quarantined / self.rows_in if self.rows_in else 0.0


class IngestError(RuntimeError):
    """The drop cannot be ingested; nothing was written to the curated dataset."""


def text_problem(head: bytes) -> str | None:
    """Why a file starting with ``head`` is not UTF-8 text, or None if it looks like it is."""
    for bom, encoding in _WIDE_BOMS.items():
        if head.startswith(bom):
            return f"is {encoding} text (byte-order mark {bom.hex(' ')}); expected UTF-8"
    nul = head.find(b"\x00")
    if nul >= 0:
        return f"contains a NUL byte at offset {nul}: binary data or UTF-16/32 text, expected UTF-8"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as err:
        # A multi-byte character cut off by the sniff window is not an error.
        if err.reason != "unexpected end of data" or err.end != len(head):
            return f"is not UTF-8 text (byte 0x{head[err.start]:02x} at offset {err.start}: {err.reason})"
    return None


def _root_cause(err: Exception) -> str:
    """The innermost Java cause of a py4j/Spark error (``java.io.EOFException: ...``)."""
    java_exc = getattr(err, "java_exception", None) or getattr(err, "_origin", None)
    if java_exc is not None:
        while java_exc.getCause() is not None:
            java_exc = java_exc.getCause()
        return str(java_exc.toString())
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    causes = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by: ")]
    return causes[-1] if causes else lines[0] if lines else repr(err)


def _reading(raw_path: str, action: Callable[[], _T]) -> _T:
    """Run a Spark action over the drop; a file that breaks further on than the head
    :func:`check_text_file` read (a truncated archive) fails it naming the file, instead of
    as a bare Java stack trace."""
    try:
        return action()
    except Exception as err:
        if "FAILED_READ_FILE" not in str(err):
            raise
        match = re.search(r"reading file (\S+?)\.?\s", str(err))
        path = match.group(1) if match else raw_path
        raise IngestError(f"cannot read raw file {path}: {_root_cause(err)}; nothing was ingested") from err


def check_text_file(spark: SparkSession, path: str) -> None:
    """Fail on a file Spark's text reader would turn into garbage rows or a Java stack trace."""
    try:
        head = read_head(spark, path, SNIFF_BYTES)
    except Exception as err:  # py4j surfaces the codec's IOException (truncated, not gzip, ...)
        raise IngestError(f"cannot read raw file {path}: {_root_cause(err)}; nothing was ingested") from err
    problem = text_problem(head)
    if problem:
        raise IngestError(f"raw file {path} {problem}; nothing was ingested")


def extract_raw_lines(spark: SparkSession, raw_path: str) -> DataFrame:
    """Raw lines of the drop with the file each came from; no parsing yet.

    Each file's head is checked first (:func:`check_text_file`), so a drop in the wrong
    encoding or a broken archive is refused as a whole instead of becoming quarantined rows.
    """
    if not path_exists(spark, raw_path):
        raise IngestError(f"raw drop {raw_path} does not exist")
    text_df = spark.read.text(raw_path)
    for path in text_df.inputFiles():
        check_text_file(spark, path)
    return text_df.select(
        F.col("value").alias(RAW_RECORD_COL),
        F.col("_metadata.file_path").alias(SOURCE_FILE_COL),
        F.col("_metadata.file_block_start").alias(_BLOCK_START),
        F.monotonically_increasing_id().alias(LINE_ID_COL),
    )


def _record() -> Column:
    """The raw line without surrounding spaces and without a UTF-8 byte-order mark."""
    return F.trim(F.regexp_replace(F.col(RAW_RECORD_COL), "^\ufeff", ""))


def _is_blank() -> Column:
    # A line starting with a digit is not blank; only the others need trimming.
    first_char = F.substring(F.col(RAW_RECORD_COL), 1, 1)
    return ~((first_char >= "0") & (first_char <= "9")) & (_record() == "")


def _is_column_names() -> Column:
    """True for a line of column names (a header), however many; the same rule as
    :func:`column_names`. Checked name by name: one regex over a line of a million names
    would overflow Java's regex stack."""
    name = f"\\A{_COLUMN_NAME}\\z"
    return F.forall(F.split(_record(), ","), lambda field: field.rlike(name))


def column_names(line: str) -> list[str] | None:
    """The normalised names of a header line (lower case, no quotes or spaces), or None when
    the line is not a line of column names (a data row, or anything else)."""
    fields = line.removeprefix("\ufeff").strip(" ").split(",")
    if not all(re.fullmatch(_COLUMN_NAME, field) for field in fields):
        return None
    return [field.strip(" ").strip('"').lower() for field in fields]


def _abbreviated(names: list[str]) -> str:
    shown = names if len(names) <= 5 else [*names[:3], "...", names[-1]]
    return ",".join(shown) + f" ({len(names)} columns)"


def check_header(path: str, first_line: str) -> bool:
    """Whether the file's first line is the contract's header (True) or a data row (False);
    raises :class:`IngestError` for any other line of column names, naming the file."""
    names = column_names(first_line)
    if names is None:
        return False
    if names == RAW_COLS:
        return True
    if sorted(names) == sorted(RAW_COLS):
        at = next(i for i, (got, want) in enumerate(zip(names, RAW_COLS, strict=False)) if got != want)
        detail = f"the expected columns in another order (column {at + 1} is '{names[at]}', expected '{RAW_COLS[at]}')"
    elif len(names) != len(RAW_COLS):
        detail = f"{len(names)} columns, expected {len(RAW_COLS)}"
    else:
        at = next(i for i, (got, want) in enumerate(zip(names, RAW_COLS, strict=False)) if got != want)
        detail = f"column {at + 1} is '{names[at]}', expected '{RAW_COLS[at]}'"
    raise IngestError(
        f"raw file {path} has the header {_abbreviated(names)}: {detail}. Expected no header or "
        f"{_abbreviated(RAW_COLS)} in that order; columns are not mapped by name. Nothing was ingested"
    )


def find_header_lines(lines_df: DataFrame, raw_path: str) -> dict[str, int]:
    """``{file: line id}`` of each file's header line; checks every file's first non-blank
    line (:func:`check_header`). One pass over the drop that parses nothing: a scan and
    each file's smallest line id.

    Computed in one aggregate, with no filter a scan could take over: a filter pushed into
    the scan could change how files are packed into partitions, and with it the line ids.
    """
    first = F.when(
        (F.col(_BLOCK_START) == 0) & ~_is_blank(),
        F.struct(F.col(LINE_ID_COL).alias("id"), F.substring(F.col(RAW_RECORD_COL), 1, SNIFF_BYTES).alias("text")),
    )
    rows = _reading(raw_path, lines_df.groupBy(SOURCE_FILE_COL).agg(F.min(first).alias("first")).collect)
    return {
        row[SOURCE_FILE_COL]: row["first"]["id"]
        for row in sorted(rows, key=lambda r: r[SOURCE_FILE_COL])
        if row["first"] is not None and check_header(row[SOURCE_FILE_COL], row["first"]["text"])
    }


def filter_data_lines(lines_df: DataFrame, header_lines: Mapping[str, int] | None = None) -> DataFrame:
    """Drop blank lines and each file's header (``header_lines``, from
    :func:`find_header_lines`); every other line is a row, a stray header line too."""
    rows_df = lines_df.where(~_is_blank())
    if not header_lines:
        return rows_df
    headers = F.create_map(*[F.lit(v) for item in sorted(header_lines.items()) for v in item])
    is_header = F.try_element_at(headers, F.col(SOURCE_FILE_COL)) == F.col(LINE_ID_COL)
    return rows_df.where(~F.coalesce(is_header, F.lit(False)))


def _first_index(flags: Column) -> Column:
    """0-based index of the first true element of a boolean array, or null."""
    positions = F.transform(flags, lambda flag, i: F.when(flag, i))
    return F.array_min(F.filter(positions, lambda p: p.isNotNull()))


def _plain_values() -> Column:
    """The row's integers, for a line of plain comma-separated 1-3 digit numbers; else null.

    The checks on the raw string (digits and commas only, no empty field, no number of four
    or more digits) leave only valid integers; most lines of a drop pass them. ``\\A`` and
    ``\\z`` anchor at the true ends of the string: Java's ``$`` also matches before a final
    line terminator (U+2028, U+0085, ...), which once let such a row through to a strict cast
    that failed the whole job. The cast is a ``try_cast`` all the same, so no row can.
    """
    raw = F.col(RAW_RECORD_COL)
    plain = (
        raw.rlike("\\A[0-9,]++\\z")
        & ~raw.contains(",,")
        & ~raw.startswith(",")
        & ~raw.endswith(",")
        & ~raw.rlike("[0-9]{4}")
    )
    return F.when(plain, F.split(raw, ",").try_cast("array<int>"))


def with_parsed_values(rows_df: DataFrame, fast_path: bool = True) -> DataFrame:
    """Add ``_fast``, true for a row known valid from cheap checks alone, and ``_values``,
    the row's integers (null where a field is not an integer).

    A valid row in the usual form (plain digits, label 0..9, pixels 0..255) is recognised
    with a few string checks and one cast; only the other rows are split into trimmed
    tokens, and only those get a reason computed (:func:`with_rejection_reason`).
    ``fast_path=False`` sends every row the long way (the same outcome, slower).
    """
    plain = F.col(_PLAIN)
    fast = F.lit(fast_path) & F.coalesce(
        plain.isNotNull()
        & (F.size(plain) == len(RAW_COLS))
        & ~F.exists(plain, lambda v: v.isNull())
        & (plain.getItem(0) <= LABEL_MAX)
        & (F.array_max(plain) <= PIXEL_MAX),
        F.lit(False),
    )
    slow_values = F.transform(F.split(_record(), ","), lambda tok: F.trim(tok).try_cast("int"))
    return (
        rows_df.withColumn(_PLAIN, _plain_values())
        .withColumn(_FAST, fast)
        .withColumn(_VALUES, F.when(F.col(_FAST), plain).otherwise(slow_values))
        .drop(_PLAIN)
    )


def with_rejection_reason(parsed_df: DataFrame) -> DataFrame:
    """Add ``reason``: null for a valid row, else the first rule it breaks, naming the column.

    Rows marked ``_fast`` are valid without further checks.
    """
    tokens, values = F.split(_record(), ","), F.col(_VALUES)
    n_fields = F.size(tokens)
    label = values.getItem(0)
    pixels = F.slice(values, 2, NUM_PIXELS)
    bad_number = _first_index(F.transform(pixels, lambda v: v.isNull()))
    bad_range = _first_index(F.transform(pixels, lambda v: (v < PIXEL_MIN) | (v > PIXEL_MAX)))

    def pixel_value(idx: Column) -> Column:
        return F.element_at(tokens, idx + 2)

    control_char = F.regexp_extract(F.col(RAW_RECORD_COL), f"({_CONTROL_CHARS})", 1)
    line_separator = F.regexp_extract(F.col(RAW_RECORD_COL), f"({_LINE_SEPARATORS})", 1)
    reason = (
        # Spark's integer cast ignores control characters around digits: refuse them first.
        F.when(
            control_char != "",
            F.format_string(
                "control character U+%04X in the row: binary data or a non-UTF-8 encoding",
                F.ascii(control_char),
            ),
        )
        .when(
            ~F.is_valid_utf8(F.col(RAW_RECORD_COL)),
            F.lit("invalid UTF-8 in the row: a non-UTF-8 encoding (Latin-1, Windows-1252, ...)"),
        )
        .when(
            line_separator != "",
            F.format_string(
                "line separator U+%04X in the row: a line break no CSV reader agrees on",
                F.ascii(line_separator),
            ),
        )
        .when(
            _is_column_names(),
            F.lit("a header line (column names) inside the file: only a file's first line can be its header"),
        )
        .when(
            n_fields != len(RAW_COLS),
            F.format_string(f"wrong field count: expected {len(RAW_COLS)}, got %d", n_fields),
        )
        .when(
            label.isNull(),
            F.format_string("label is empty or not an integer: '%s'", tokens.getItem(0)),
        )
        .when(
            (label < LABEL_MIN) | (label > LABEL_MAX),
            F.format_string(f"label out of range {LABEL_MIN}..{LABEL_MAX}: %d", label),
        )
        .when(
            bad_number.isNotNull(),
            F.format_string("pixel%d is empty or not an integer: '%s'", bad_number, pixel_value(bad_number)),
        )
        .when(
            bad_range.isNotNull(),
            F.format_string(
                f"pixel%d out of range {PIXEL_MIN}..{PIXEL_MAX}: %s",
                bad_range,
                pixel_value(bad_range),
            ),
        )
    )
    return parsed_df.withColumn(REASON_COL, F.when(~F.col(_FAST), reason))


def select_curated(checked_df: DataFrame, ds: str) -> DataFrame:
    """Valid rows in the curated schema; ``row_id`` is a content hash, stable across re-runs."""
    values = F.col(_VALUES)
    return checked_df.where(F.col(REASON_COL).isNull()).select(
        F.xxhash64(F.lit(ds), F.col(RAW_RECORD_COL)).alias(ROW_ID_COL),
        values.getItem(0).alias(LABEL_COL),
        *[values.getItem(i + 1).alias(name) for i, name in enumerate(PIXEL_COLS)],
        F.lit(ds).alias(PARTITION_COL),
    )


def select_quarantine(checked_df: DataFrame, ds: str) -> DataFrame:
    """Rejected rows as they arrived, with the reason and source file.

    Spark keeps undecodable bytes in its strings; written to Parquet they would make the
    partition unreadable for strict readers (pyarrow, pandas), so they become U+FFFD.
    """
    return checked_df.where(F.col(REASON_COL).isNotNull()).select(
        F.col(SOURCE_FILE_COL),
        F.make_valid_utf8(F.col(RAW_RECORD_COL)).alias(RAW_RECORD_COL),
        F.col(REASON_COL),
        F.lit(ds).alias(PARTITION_COL),
    )


def replace_quarantine(spark: SparkSession, quarantine_df: DataFrame, quarantine_root: str, ds: str, rows: int) -> None:
    """Replace the day's rejected rows; a clean drop removes the rejects of an earlier one
    (an empty write would replace nothing under dynamic partition overwrite)."""
    if rows:
        replace_partitions(quarantine_df, quarantine_root)
    else:
        delete_path(spark, partition_path(quarantine_root, ds))


def ingest_manifest_path(curated_root: str, ds: str) -> str:
    """Where a run's counts are recorded: beside the partition, in a folder readers skip."""
    manifests_root = curated_root.rstrip("/") + "/_manifests"
    return partition_path(manifests_root, ds) + "/ingest.json"


def rejected_manifest_path(manifest_path: str) -> str:
    """Where a rejected drop records itself: beside the published drop's manifest
    (``ingest.json`` -> ``ingest.rejected.json``), which it leaves alone."""
    return manifest_path.removesuffix(".json") + ".rejected.json"


def rejected_quarantine_root(quarantine_root: str) -> str:
    """Where a rejected drop's bad rows go: a dataset under the quarantine root that
    readers of the quarantine skip (the leading ``_``)."""
    return f"{quarantine_root.rstrip('/')}/{_REJECTED_DIR}"


@dataclass(frozen=True)
class RowCounts:
    curated: int
    quarantined: int
    sample_reasons: list[str]


def count_rows(checked_df: DataFrame, raw_path: str) -> RowCounts:
    """Valid and rejected rows and up to five distinct reasons, in one pass."""
    reason = F.col(REASON_COL)
    row = _reading(
        raw_path,
        checked_df.agg(
            F.count_if(reason.isNull()).alias("curated"),
            F.count_if(reason.isNotNull()).alias("quarantined"),
            F.slice(F.array_sort(F.collect_set(reason)), 1, 5).alias("sample_reasons"),
        ).first,
    )
    return RowCounts(int(row["curated"]), int(row["quarantined"]), list(row["sample_reasons"]))


def ingest_partition(
    spark: SparkSession,
    *,
    raw_path: str,
    ds: str,
    curated_root: str,
    quarantine_root: str,
    max_bad_ratio: float,
    manifest_path: str | None = None,
) -> IngestReport:
    """Validate the drop and replace the ``ds`` partitions of curated and quarantine data.

    The manifest (default :func:`ingest_manifest_path`) is written last, for every run
    that counted its rows. A published drop replaces the curated and quarantine partitions
    and the manifest (``outcome: published``) and removes the day's rejected record. A
    rejected one (bad-row ratio exceeded, or no valid row) leaves all three describing the
    drop published before and writes its bad rows under :func:`rejected_quarantine_root` and
    its manifest (``outcome: rejected``) to :func:`rejected_manifest_path`.
    """
    manifest_path = manifest_path or ingest_manifest_path(curated_root, ds)
    rejected_path = rejected_manifest_path(manifest_path)
    rejected_root = rejected_quarantine_root(quarantine_root)
    lines_df = extract_raw_lines(spark, raw_path)
    input_files = lines_df.inputFiles()
    header_lines = find_header_lines(lines_df, raw_path)
    # Not cached: each pass (count, quarantine, curated) reads the text again, which costs
    # less than holding every row's 785 parsed values in memory (the driver's heap on local[N]).
    checked_df = with_rejection_reason(with_parsed_values(filter_data_lines(lines_df, header_lines)))
    counts = count_rows(checked_df, raw_path)
    rows_curated, rows_quarantined, sample_reasons = counts.curated, counts.quarantined, counts.sample_reasons
    report = IngestReport(
        ds=ds,
        rows_in=rows_curated + rows_quarantined,
        rows_curated=rows_curated,
        rows_quarantined=rows_quarantined,
        sample_reasons=sample_reasons,
    )
    if report.rows_in == 0:
        raise IngestError(f"raw drop {raw_path} for ds={ds} holds no data rows")
    manifest = {
        **asdict(report),
        "bad_ratio": report.bad_ratio,
        "max_bad_ratio": max_bad_ratio,
        "raw_path": raw_path,
        "input_files": input_files,
        "files_with_header": sorted(header_lines),
        "curated_partition": partition_path(curated_root, ds),
    }
    quarantine_df = select_quarantine(checked_df, ds)
    if report.bad_ratio > max_bad_ratio or rows_curated == 0:
        # Recorded beside the published drop, never over it: the day's curated rows,
        # rejects and manifest keep describing one drop. The bad rows stay inspectable.
        replace_quarantine(spark, quarantine_df, rejected_root, ds, rows_quarantined)
        write_json(
            spark,
            rejected_path,
            {
                **manifest,
                "quarantine_partition": partition_path(rejected_root, ds),
                "published_manifest": manifest_path,
                "outcome": "rejected",
            },
        )
        problem = (
            f"no valid rows among {report.rows_in}"
            if rows_curated == 0
            else f"{rows_quarantined} of {report.rows_in} rows rejected "
            f"({report.bad_ratio:.1%} > max_bad_ratio {max_bad_ratio:.1%})"
        )
        raise IngestError(
            f"ds={ds}: {problem}; the day's curated data, quarantine and manifest were left as they were, "
            f"this drop is recorded in {rejected_path}. Examples: {sample_reasons}"
        )
    replace_quarantine(spark, quarantine_df, quarantine_root, ds, rows_quarantined)
    replace_partitions(select_curated(checked_df, ds), curated_root)
    write_json(
        spark,
        manifest_path,
        {**manifest, "quarantine_partition": partition_path(quarantine_root, ds), "outcome": "published"},
    )
    # An earlier rejected drop of the day no longer describes anything that is live.
    delete_path(spark, rejected_path)
    delete_path(spark, partition_path(rejected_root, ds))
    return report


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ds", type=parse_ds, required=True, help="partition date YYYY-MM-DD")
    parser.add_argument("--raw-path", required=True, help="the day's raw CSV file or folder")
    parser.add_argument("--curated-root", required=True, help="curated dataset root")
    parser.add_argument("--quarantine-root", required=True, help="quarantine dataset root")
    parser.add_argument(
        "--max-bad-ratio",
        type=float,
        default=0.05,
        help="fail when more than this share of rows is rejected (default 0.05)",
    )
    parser.add_argument(
        "--manifest-path",
        help="where to write the run's row counts (default <curated-root>/_manifests/ds=<ds>/ingest.json)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    configure_job_logging()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    spark = build_spark_session(f"ingest ds={args.ds}")
    try:
        report = ingest_partition(
            spark,
            raw_path=args.raw_path,
            ds=args.ds,
            curated_root=args.curated_root,
            quarantine_root=args.quarantine_root,
            max_bad_ratio=args.max_bad_ratio,
            manifest_path=args.manifest_path,
        )
    except IngestError as err:
        # The drop's fault, not the code's: one line saying what is wrong, no traceback.
        log.error("ingest failed: %s", err)
        raise SystemExit(1) from None
    finally:
        spark.stop()
    log.info("ingest report: %s", json.dumps(asdict(report)))
