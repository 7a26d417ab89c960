"""Ingest: one day's raw CSV drop of a workflow -> typed, validated curated Parquet partition.

What a valid row is comes from the workflow's declaration (:mod:`spark_jobs.workflows`):
its raw fields in order (the label, then every feature element), the label's dtype and
range, and each feature's dtype and range (one range for every element of a tensor layout,
one per named column of a tabular one). An integer field holds an integer, a ``float32``
field a decimal number (``-1.5``, ``2e3``; no NaN, no infinity, none of Java's ``1.5f`` or
``0x1p3``), spaces around a field ignored; nothing is empty. For MNIST that is Kaggle's
``label,pixel0..pixel783``, label 0..9, pixels 0..255.

Accepts a header or none, plain or compressed files (``.csv.gz``, ``.bz2``, ...), UTF-8
with or without a byte-order mark. Every non-blank line other than a file's header is
counted: it lands either in the curated partition or in the quarantine partition with the
reason it was rejected, naming the raw field (``pixel12 out of range 0..255: 300``,
``bmi out of range 5..80: 90.1``), so ``rows_in == rows_curated + rows_quarantined`` always
holds, whatever a line holds (no single row can fail the job). Each run records the counts
in a manifest.

Every data line is parsed and checked batch by batch with pyarrow inside ``mapInArrow``
(:mod:`spark_jobs.ingest_arrow`: plain numbers, vectorised); only the lines it refuses go
through the per-row checks (:func:`with_parsed_values`, :func:`with_rejection_reason`),
which decide each of them and name the field and the rule. A line both would accept gets
the same values and ``row_id`` either way. The drop is read and parsed once: the counts, the
quarantine and the curated write read the decided rows from Spark's cache.

A curated row is ``row_id`` (a content hash), ``label`` (int or float, as the workflow
declares) and ``features``: the row's elements as one dense binary value in the workflow's
dtype (:mod:`spark_jobs.features`; its ``ml_tensor`` field metadata, shape and dtype, is
kept in the Parquet footer), see :func:`spark_jobs.schema.curated_schema`.

Only a file's first non-blank line can be its header, and only the workflow's raw fields
in that order (names compared case-insensitively, spaces and double quotes around them
ignored). A first line of column names that differs (other names, another order) fails
the drop naming the file: columns are never mapped by name or guessed, since a wrong
mapping would publish every label wrong. Column names further down a file (concatenated
CSVs) are a quarantined row. Each file's first line is found in the head the encoding check
reads (a pass over the drop only for a first line longer than that).

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
import contextlib
import json
import logging
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, TypeVar

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ml_contract.layout import PARTITION_COL, partition_path
from spark_jobs import ingest_arrow as arrow_lines
from spark_jobs import workflows
from spark_jobs.features import FEATURES_COL, encode, tensor_metadata
from spark_jobs.ingest_arrow import (
    COLUMN_NAME,
    DECIMAL_TOKEN,
    SNIFF_BYTES,
    LineParser,
    column_names,
    decide_batches,
    feature_encoder,
)
from spark_jobs.partitions import parse_ds, replace_partitions
from spark_jobs.schema import LABEL_COL, ROW_ID_COL, curated_schema, label_type
from spark_jobs.session import build_spark_session, configure_job_logging
from spark_jobs.storage import delete_path, path_exists, read_head, write_json

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_jobs.workflows import TensorFeatures, Workflow

log = logging.getLogger(__name__)
_T = TypeVar("_T")

REASON_COL = "reason"
RAW_RECORD_COL = "raw_record"
SOURCE_FILE_COL = arrow_lines.SOURCE_FILE
# Position of a line in the scan of the drop (monotonically_increasing_id): the same in
# every pass over the same files, which is all finding each file's first line needs.
LINE_ID_COL = "_line_id"
_BLOCK_START = arrow_lines.BLOCK_START
_PLAIN_LABEL = "_plain_label"
_PLAIN_VALUES = "_plain_values"
_FAST = "_fast"
# The row's parsed label and feature elements (null where a field is not a number), by
# the declared dtypes: int for an integer dtype, double for float32 (checked, then rounded).
_LABEL = "_label"
_VALUES = "_values"
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
_REJECTED_DIR = "_rejected"
# How Hadoop's line reader (Spark's text source) ends a line, and the byte-order mark it
# drops at the start of a file.
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
_UTF8_BOM = b"\xef\xbb\xbf"


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


def check_text_file(spark: SparkSession, path: str) -> bytes:
    """Fail on a file Spark's text reader would turn into garbage rows or a Java stack trace;
    returns the file's head (its first :data:`SNIFF_BYTES`, decompressed)."""
    try:
        head = read_head(spark, path, SNIFF_BYTES)
    except Exception as err:  # py4j surfaces the codec's IOException (truncated, not gzip, ...)
        raise IngestError(f"cannot read raw file {path}: {_root_cause(err)}; nothing was ingested") from err
    problem = text_problem(head)
    if problem:
        raise IngestError(f"raw file {path} {problem}; nothing was ingested")
    return head


@dataclass(frozen=True)
class RawDrop:
    """A drop's text as Spark reads it, and each file's head as checked, by file path as
    Spark names it in ``_metadata.file_path`` (the quarantine's ``source_file``)."""

    text_df: DataFrame
    input_files: list[str]
    heads: dict[str, bytes]


def open_drop(spark: SparkSession, raw_path: str) -> RawDrop:
    """The drop's files, each one's head checked (:func:`check_text_file`) before any row
    is read, so a drop in the wrong encoding or a broken archive is refused as a whole
    instead of becoming quarantined rows."""
    if not path_exists(spark, raw_path):
        raise IngestError(f"raw drop {raw_path} does not exist")
    text_df = spark.read.text(raw_path)
    input_files = text_df.inputFiles()
    heads = {_spark_file_path(spark, path): check_text_file(spark, path) for path in input_files}
    return RawDrop(text_df, input_files, heads)


def _spark_file_path(spark: SparkSession, uri: str) -> str:
    """A file as ``_metadata.file_path`` names it (``file:/x``) from its ``inputFiles()``
    URI (``file:///x``): both are the Hadoop path, one as a string, one as a URI."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # the driver's view of the JVM
    return str(jvm.org.apache.hadoop.fs.Path(uri).toString())


def extract_raw_lines(spark: SparkSession, raw_path: str) -> DataFrame:
    """Raw lines of the drop with the file each came from; no parsing yet (the files are
    checked first, :func:`open_drop`)."""
    return _lines_of(open_drop(spark, raw_path).text_df)


def _lines_of(text_df: DataFrame) -> DataFrame:
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
    name = f"\\A{COLUMN_NAME}\\z"
    return F.forall(F.split(_record(), ","), lambda field: field.rlike(name))


def _abbreviated(names: list[str]) -> str:
    shown = names if len(names) <= 5 else [*names[:3], "...", names[-1]]
    return ",".join(shown) + f" ({len(names)} columns)"


def check_header(path: str, first_line: str, workflow: Workflow) -> bool:
    """Whether the file's first line is the workflow's header (True) or a data row (False);
    raises :class:`IngestError` for any other line of column names, naming the file."""
    names = column_names(first_line)
    if names is None:
        return False
    fields = workflow.raw_fields
    expected = [name.lower() for name in fields]
    if names == expected:
        return True
    if sorted(names) == sorted(expected):
        at = next(i for i, (got, want) in enumerate(zip(names, expected, strict=False)) if got != want)
        detail = f"the expected columns in another order (column {at + 1} is '{names[at]}', expected '{fields[at]}')"
    elif len(names) != len(expected):
        detail = f"{len(names)} columns, expected {len(expected)}"
    else:
        at = next(i for i, (got, want) in enumerate(zip(names, expected, strict=False)) if got != want)
        detail = f"column {at + 1} is '{names[at]}', expected '{fields[at]}'"
    raise IngestError(
        f"raw file {path} has the header {_abbreviated(names)}: {detail}. Expected no header or "
        f"{_abbreviated(fields)} in that order (workflow {workflow.name}); columns are not mapped by name. "
        "Nothing was ingested"
    )


def find_header_lines(lines_df: DataFrame, raw_path: str, workflow: Workflow) -> dict[str, int]:
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
        if row["first"] is not None and check_header(row[SOURCE_FILE_COL], row["first"]["text"], workflow)
    }


def first_line_of(head: bytes, *, whole_file: bool) -> tuple[bool, str | None]:
    """A file's first non-blank line as Spark's text reader splits it (on LF, CR or CRLF,
    a byte-order mark at the file's start dropped), from the file's ``head``:
    ``(True, line)``, ``(True, None)`` for a file of blank lines only, or ``(False, None)``
    when the line does not end within the head (``whole_file``: the head is the file)."""
    text = head.removeprefix(_UTF8_BOM)
    start = 0
    for match in _LINE_BREAK.finditer(text):
        line = text[start : match.start()]
        start = match.end()
        if not _blank_text(line):
            return True, line.decode("utf-8")
    rest = text[start:]
    if not whole_file:
        return False, None
    return True, None if _blank_text(rest) else rest.decode("utf-8")


def _blank_text(line: bytes) -> bool:
    """:func:`_is_blank` for a line's bytes."""
    return line.decode("utf-8", errors="replace").removeprefix("\ufeff").strip(" ") == ""


def header_files(drop: RawDrop, workflow: Workflow, raw_path: str) -> list[str]:
    """The files whose first line is the workflow's header, sorted; checks every file's
    first non-blank line (:func:`check_header`, which refuses any other line of column
    names). Read from the heads :func:`open_drop` checked: no pass over the drop, unless a
    file's first line is longer than its head (then :func:`find_header_lines`)."""
    found = []
    for path, head in sorted(drop.heads.items()):
        complete, line = first_line_of(head, whole_file=len(head) < SNIFF_BYTES)
        if not complete:
            return sorted(find_header_lines(_lines_of(drop.text_df), raw_path, workflow))
        if line is not None and check_header(path, line, workflow):
            found.append(path)
    return found


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


def _parse_type(dtype: str) -> str:
    """The Spark type a field of ``dtype`` is parsed into: ``int`` for an integer dtype,
    ``double`` for a float (range-checked as written, then rounded to the dtype)."""
    return "double" if dtype.startswith("float") else "int"


def _kind(dtype: str) -> str:
    return "a number" if dtype.startswith("float") else "an integer"


def _number_text(value: float) -> str:
    """A declared bound as it reads in a reason: ``255``, ``5``, ``0.5``, ``3.4e+38``."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(float(value))


def _range_text(low: float, high: float) -> str:
    return f"{_number_text(low)}..{_number_text(high)}"


def _uniform_range(layout: TensorFeatures) -> tuple[float, float] | None:
    """The one range every element shares (a tensor layout's), else None."""
    ranges = {(c.min, c.max) for c in layout.columns}
    return next(iter(ranges)) if len(ranges) == 1 else None


# A decimal number as the CSV contract allows it (after trimming spaces): Spark's cast to
# double also takes Java's "1.5f", "0x1p3", "NaN" and "Infinity", which are refused.
_DECIMAL = rf"\A{DECIMAL_TOKEN}\z"
_NON_FINITE = r"(?i)\A *[+-]?(?:nan|inf|infinity) *\z"


def _parsed(token: Column, dtype: str) -> Column:
    """A trimmed token as ``dtype``'s parse type, null when it is not one; never fails."""
    trimmed = F.trim(token)
    if _parse_type(dtype) == "int":
        return trimmed.try_cast("int")
    return F.when(trimmed.rlike(_DECIMAL), trimmed.try_cast("double"))


def _label_in_range(label: Column, workflow: Workflow) -> Column:
    # ``between`` is false for NaN (Spark orders NaN above every number); null stays null.
    return label.between(F.lit(workflow.label.min), F.lit(workflow.label.max))


def _out_of_range(values: Column, layout: TensorFeatures) -> Column:
    """Per element of ``values``: true where it lies outside its column's range."""
    uniform = _uniform_range(layout)
    if uniform is not None:
        low, high = F.lit(uniform[0]), F.lit(uniform[1])
        return F.transform(values, lambda v: ~v.between(low, high))
    lows = F.array(*[F.lit(float(c.min)) for c in layout.columns])
    highs = F.array(*[F.lit(float(c.max)) for c in layout.columns])
    return F.transform(values, lambda v, i: ~v.between(F.element_at(lows, i + 1), F.element_at(highs, i + 1)))


def _all_in_range(values: Column, layout: TensorFeatures) -> Column:
    uniform = _uniform_range(layout)
    if uniform is not None:
        return (F.array_min(values) >= F.lit(uniform[0])) & (F.array_max(values) <= F.lit(uniform[1]))
    return ~F.exists(_out_of_range(values, layout), lambda flag: flag)


def _plain_line(workflow: Workflow) -> Column:
    r"""True for a line that can only hold plain numbers of the features' dtype: for an
    integer dtype digits and commas, no empty field and no number longer than the largest
    declared bound; for a float dtype digits, commas, dots and minus signs (Spark's double
    cast of such a token is either a plain decimal number or null).

    ``\A`` and ``\z`` anchor at the true ends of the string: Java's ``$`` also matches
    before a final line terminator (U+2028, U+0085, ...), which once let such a row through
    to a strict cast that failed the whole job. The casts are ``try_cast`` all the same, so
    no row can.
    """
    raw = F.col(RAW_RECORD_COL)
    if workflow.features.is_integer:
        bounds = [abs(workflow.label.min), abs(workflow.label.max), *workflow.features.mins, *workflow.features.maxs]
        digits = len(str(int(max(bounds))))
        return (
            raw.rlike("\\A[0-9,]++\\z")
            & ~raw.contains(",,")
            & ~raw.startswith(",")
            & ~raw.endswith(",")
            & ~raw.rlike(f"[0-9]{{{digits + 1}}}")
        )
    return raw.rlike("\\A[0-9.,\\-]++\\z")


def with_parsed_values(rows_df: DataFrame, workflow: Workflow, fast_path: bool = True) -> DataFrame:
    """Add ``_fast``, true for a row known valid from cheap checks alone, ``_label`` and
    ``_values``, the row's label and feature elements parsed as the workflow declares them
    (null where a field is not a number of its dtype).

    A valid row in the usual form (plain numbers, everything in range) is recognised with
    a few string checks and one cast of the raw line's fields; only the other rows are
    split into trimmed tokens and parsed field by field, and only those get a reason
    computed (:func:`with_rejection_reason`). ``fast_path=False`` sends every row the long
    way (the same outcome, slower).
    """
    layout, n_fields = workflow.features, len(workflow.raw_fields)
    raw_tokens = F.split(F.col(RAW_RECORD_COL), ",")
    plain = _plain_line(workflow)
    plain_label, plain_values = F.col(_PLAIN_LABEL), F.col(_PLAIN_VALUES)
    fast = F.lit(fast_path) & F.coalesce(
        plain_values.isNotNull()
        & (F.size(raw_tokens) == n_fields)
        & ~F.exists(plain_values, lambda v: v.isNull())
        & _label_in_range(plain_label, workflow)
        & _all_in_range(plain_values, layout),
        F.lit(False),
    )
    tokens = F.split(_record(), ",")
    slow_label = _parsed(tokens.getItem(0), workflow.label.dtype)
    slow_values = F.transform(F.slice(tokens, 2, layout.size), lambda tok: _parsed(tok, layout.dtype))
    label_type_name = _parse_type(workflow.label.dtype)
    return (
        rows_df.withColumn(_PLAIN_LABEL, F.when(plain, raw_tokens.getItem(0).try_cast(label_type_name)))
        .withColumn(
            _PLAIN_VALUES,
            F.when(plain, F.slice(raw_tokens, 2, layout.size).try_cast(f"array<{_parse_type(layout.dtype)}>")),
        )
        .withColumn(_FAST, fast)
        .withColumn(_LABEL, F.when(F.col(_FAST), plain_label).otherwise(slow_label))
        .withColumn(_VALUES, F.when(F.col(_FAST), plain_values).otherwise(slow_values))
        .drop(_PLAIN_LABEL, _PLAIN_VALUES)
    )


def with_rejection_reason(parsed_df: DataFrame, workflow: Workflow) -> DataFrame:
    """Add ``reason``: null for a valid row, else the first rule it breaks, naming the field.

    Rows marked ``_fast`` are valid without further checks.
    """
    layout, label_spec, n_fields = workflow.features, workflow.label, len(workflow.raw_fields)
    tokens, label, values = F.split(_record(), ","), F.col(_LABEL), F.col(_VALUES)
    label_token = tokens.getItem(0)
    bad_number = _first_index(F.transform(values, lambda v: v.isNull()))
    bad_range = _first_index(_out_of_range(values, layout))
    names = F.array(*[F.lit(c.name) for c in layout.columns])
    uniform = _uniform_range(layout)
    ranges = (
        F.lit(_range_text(*uniform))
        if uniform is not None
        else F.array(*[F.lit(_range_text(c.min, c.max)) for c in layout.columns])
    )

    def field_name(idx: Column) -> Column:
        return F.element_at(names, idx + 1)

    def field_range(idx: Column) -> Column:
        return ranges if uniform is not None else F.element_at(ranges, idx + 1)

    def field_value(idx: Column) -> Column:
        return F.element_at(tokens, idx + 2)

    def not_a_number(name: Column, token: Column, dtype: str) -> Column:
        reason = F.format_string(f"%s is empty or not {_kind(dtype)}: '%s'", name, token)
        if _parse_type(dtype) == "int":
            return reason
        return F.when(
            F.trim(token).rlike(_NON_FINITE), F.format_string("%s is not a finite number: '%s'", name, token)
        ).otherwise(reason)

    control_char = F.regexp_extract(F.col(RAW_RECORD_COL), f"({_CONTROL_CHARS})", 1)
    line_separator = F.regexp_extract(F.col(RAW_RECORD_COL), f"({_LINE_SEPARATORS})", 1)
    label_name = F.lit(label_spec.name)
    label_range = _range_text(label_spec.min, label_spec.max)
    label_shown = label.cast("long").cast("string") if _parse_type(label_spec.dtype) == "int" else label_token
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
            F.size(tokens) != n_fields,
            F.format_string(f"wrong field count: expected {n_fields}, got %d", F.size(tokens)),
        )
        .when(label.isNull(), not_a_number(label_name, label_token, label_spec.dtype))
        .when(
            ~_label_in_range(label, workflow),
            F.format_string(f"%s out of range {label_range}: %s", label_name, label_shown),
        )
        .when(
            bad_number.isNotNull(),
            not_a_number(field_name(bad_number), field_value(bad_number), layout.dtype),
        )
        .when(
            bad_range.isNotNull(),
            F.format_string(
                "%s out of range %s: %s", field_name(bad_range), field_range(bad_range), field_value(bad_range)
            ),
        )
    )
    return parsed_df.withColumn(REASON_COL, F.when(~F.col(_FAST), reason))


def _row_id(ds: str) -> Column:
    """The content hash of a raw line, stable across re-runs of the day."""
    return F.xxhash64(F.lit(ds), F.col(RAW_RECORD_COL)).alias(ROW_ID_COL)


def select_curated(checked_df: DataFrame, workflow: Workflow, ds: str) -> DataFrame:
    """Valid rows in the curated schema (:func:`spark_jobs.schema.curated_schema`) plus
    ``ds``: ``row_id`` is a content hash, stable across re-runs; ``features`` the row's
    elements as one dense value, encoded batch by batch in Python (one numpy buffer each).
    """
    valid_df = checked_df.where(F.col(REASON_COL).isNull()).select(
        _row_id(ds),
        F.col(_LABEL).cast(label_type(workflow)).alias(LABEL_COL),
        F.col(_VALUES),
    )
    encoded_df = valid_df.mapInArrow(_features_encoder(workflow.features), curated_schema(workflow))
    return encoded_df.withColumn(PARTITION_COL, F.lit(ds))


def _features_encoder(layout: TensorFeatures) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: each batch's parsed elements (one list array) become
    the dense ``features`` column, with one numpy conversion and one buffer per batch."""

    def encode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        for batch in batches:
            values = batch.column(_VALUES)
            flat = values.flatten().to_numpy(zero_copy_only=False)
            features = encode(flat.reshape(len(batch), layout.size), layout)
            yield pa.RecordBatch.from_arrays(
                [batch.column(ROW_ID_COL), batch.column(LABEL_COL), features],
                names=[ROW_ID_COL, LABEL_COL, FEATURES_COL],
            )

    return encode_batches


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


def replace_quarantine(
    spark: SparkSession, quarantine_df: DataFrame | None, quarantine_root: str, ds: str, rows: int
) -> None:
    """Replace the day's rejected rows; a clean drop (no rows, no DataFrame) removes the
    rejects of an earlier one (an empty write would replace nothing under dynamic partition
    overwrite)."""
    if rows:
        assert quarantine_df is not None  # rows were rejected: the per-row checks ran
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
    assert row is not None  # an aggregation without grouping has exactly one row
    return RowCounts(int(row["curated"]), int(row["quarantined"]), list(row["sample_reasons"]))


def decide_lines(lines_df: DataFrame, workflow: Workflow, ds: str) -> DataFrame:
    """Every data line of ``lines_df`` (:func:`extract_raw_lines`) parsed and checked batch by
    batch with pyarrow (:mod:`spark_jobs.ingest_arrow`), blank lines and each file's header
    left out. A line it accepts is a curated row (``row_id``, ``label``, ``features``); one it
    refuses keeps only its raw bytes and file, for the per-row checks (:func:`refused_lines`).

    ``row_id`` is computed here, in Spark, as the per-row path computes it
    (:func:`select_curated`), whichever path takes the line.
    """
    import pyarrow as pa

    label_arrow_type = pa.int32() if workflow.label.dtype == "int32" else pa.float32()
    decide = decide_batches(LineParser.of(workflow), label_arrow_type, feature_encoder(workflow))
    decided_schema = T.StructType(
        [
            T.StructField(ROW_ID_COL, T.LongType()),
            T.StructField(LABEL_COL, label_type(workflow)),
            T.StructField(FEATURES_COL, T.BinaryType()),
            T.StructField(arrow_lines.RAW_LINE, T.BinaryType()),
            T.StructField(SOURCE_FILE_COL, T.StringType()),
        ]
    )
    return (
        lines_df.where(~_is_blank())
        .select(
            _row_id(ds),
            F.concat(F.col(RAW_RECORD_COL), F.lit("\n")).cast("binary").alias(arrow_lines.LINE),
            F.col(SOURCE_FILE_COL),
            F.col(_BLOCK_START),
        )
        .mapInArrow(decide, decided_schema)
    )


def count_decided(decided_df: DataFrame, raw_path: str) -> tuple[int, int]:
    """How many lines of :func:`decide_lines` were accepted and refused, in one pass."""
    accepted = F.col(FEATURES_COL).isNotNull()
    row = _reading(
        raw_path,
        decided_df.agg(F.count_if(accepted).alias("accepted"), F.count_if(~accepted).alias("refused")).first,
    )
    assert row is not None  # an aggregation without grouping has exactly one row
    return int(row["accepted"]), int(row["refused"])


def refused_lines(decided_df: DataFrame) -> DataFrame:
    """The lines :func:`decide_lines` refused, as :func:`extract_raw_lines` has them, for
    :func:`with_parsed_values` and :func:`with_rejection_reason`."""
    return decided_df.where(F.col(FEATURES_COL).isNull()).select(
        # Bytes as the text reader kept them (undecodable ones too): the same string again.
        F.col(arrow_lines.RAW_LINE).cast("string").alias(RAW_RECORD_COL),
        # Never null for a refused line: coalesce says so to Spark, as the scan's column did.
        F.coalesce(F.col(SOURCE_FILE_COL), F.lit("")).alias(SOURCE_FILE_COL),
    )


def select_vectorised_curated(decided_df: DataFrame, workflow: Workflow, ds: str) -> DataFrame:
    """The curated rows :func:`decide_lines` accepted, as :func:`select_curated` selects them."""
    # Never null for an accepted line; coalesce says so to Spark, so that the columns are as
    # the curated schema declares them, whichever path wrote the rows.
    return decided_df.where(F.col(FEATURES_COL).isNotNull()).select(
        F.coalesce(F.col(ROW_ID_COL), F.lit(0)).alias(ROW_ID_COL),
        F.coalesce(F.col(LABEL_COL), F.lit(0).cast(label_type(workflow))).alias(LABEL_COL),
        F.coalesce(F.col(FEATURES_COL), F.lit(b"")).alias(FEATURES_COL, metadata=tensor_metadata(workflow.features)),
        F.lit(ds).alias(PARTITION_COL),
    )


@dataclass(frozen=True)
class DecidedDrop:
    """A drop's lines decided and counted: ``decided_df`` (:func:`decide_lines`) and, where
    it refused lines, their per-row decisions (``checked_df``, :func:`with_rejection_reason`)."""

    decided_df: DataFrame
    checked_df: DataFrame | None
    counts: RowCounts
    vectorised: int  # of counts.curated, the rows the vectorised path took

    def quarantine_df(self, ds: str) -> DataFrame | None:
        return select_quarantine(self.checked_df, ds) if self.checked_df is not None else None

    def curated_df(self, workflow: Workflow, ds: str) -> DataFrame:
        curated_df = select_vectorised_curated(self.decided_df, workflow, ds)
        if self.checked_df is None or self.counts.curated == self.vectorised:
            return curated_df
        return curated_df.unionByName(select_curated(self.checked_df, workflow, ds))


def decide_drop(decided_df: DataFrame, workflow: Workflow, raw_path: str) -> DecidedDrop:
    """Count the lines of ``decided_df`` and decide its refused ones row by row (the per-row
    plan is only built for a drop that has some: it costs a few tenths of a second)."""
    accepted, refused = count_decided(decided_df, raw_path)
    if not refused:
        return DecidedDrop(decided_df, None, RowCounts(accepted, 0, []), accepted)
    checked_df = with_rejection_reason(with_parsed_values(refused_lines(decided_df), workflow), workflow)
    by_row = count_rows(checked_df, raw_path)
    counts = RowCounts(accepted + by_row.curated, by_row.quarantined, by_row.sample_reasons)
    return DecidedDrop(decided_df, checked_df, counts, accepted)


def ingest_partition(
    spark: SparkSession,
    *,
    workflow: Workflow,
    raw_path: str,
    ds: str,
    curated_root: str,
    quarantine_root: str,
    max_bad_ratio: float,
    manifest_path: str | None = None,
) -> IngestReport:
    """Validate the drop against ``workflow``'s rules and replace the ``ds`` partitions of
    curated and quarantine data.

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
    drop = open_drop(spark, raw_path)
    with_header = header_files(drop, workflow, raw_path)
    # The counts, the quarantine and the curated write all read the lines parsed once: dense
    # rows of a few bytes a value (MNIST: 800 bytes a row), spilled to disk beyond memory.
    with _persisted(decide_lines(_lines_of(drop.text_df), workflow, ds)) as decided_df:
        decided = decide_drop(decided_df, workflow, raw_path)
        log.info(
            "ds=%s: %d rows curated (%d by the vectorised path), %d quarantined",
            ds,
            decided.counts.curated,
            decided.vectorised,
            decided.counts.quarantined,
        )
        counts = decided.counts
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
            "workflow": workflow.name,
            "bad_ratio": report.bad_ratio,
            "max_bad_ratio": max_bad_ratio,
            "raw_path": raw_path,
            "input_files": drop.input_files,
            "files_with_header": with_header,
            "curated_partition": partition_path(curated_root, ds),
        }
        quarantine_df = decided.quarantine_df(ds)
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
        replace_partitions(decided.curated_df(workflow, ds), curated_root)
        write_json(
            spark,
            manifest_path,
            {**manifest, "quarantine_partition": partition_path(quarantine_root, ds), "outcome": "published"},
        )
        # An earlier rejected drop of the day no longer describes anything that is live.
        delete_path(spark, rejected_path)
        delete_path(spark, partition_path(rejected_root, ds))
        return report


@contextlib.contextmanager
def _persisted(df: DataFrame) -> Iterator[DataFrame]:
    """``df`` cached (memory, then disk) while the block runs."""
    df.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        yield df
    finally:
        df.unpersist()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workflow",
        required=True,
        help="the workflow whose rows the drop holds (spark_jobs/workflows/<name>.toml)",
    )
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
    try:
        workflow = workflows.load(args.workflow)
    except workflows.WorkflowError as err:
        # Before Spark starts: a wrong name or declaration is a one-line error, no traceback.
        log.error("ingest failed: %s", err)
        raise SystemExit(1) from None
    spark = build_spark_session(f"ingest {workflow.name} ds={args.ds}")
    try:
        report = ingest_partition(
            spark,
            workflow=workflow,
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
