"""Ingest's vectorised path: a batch of raw CSV lines parsed and checked with pyarrow.

:mod:`spark_jobs.ingest` hands every data line of a drop to :func:`decide_batches` inside
``mapInArrow``. A batch is parsed by ``pyarrow.csv`` with the workflow's column types and
checked with numpy (nothing empty, every value in its declared range, floats finite); the
lines it accepts leave as curated rows (label, dense features), the others leave as they
arrived, and Spark's per-row checks (:func:`spark_jobs.ingest.with_rejection_reason`) decide
each of them and name the field and the rule for the quarantine.

The vectorised path only takes lines written plainly: the workflow's field count, each
field an integer (``-?[0-9]{1,18}``) or, for a float field, a decimal number in the per-row
path's own grammar (:data:`DECIMAL_TOKEN`). On such lines pyarrow and the per-row path read
the same numbers (a float as a double, range-checked before rounding to float32 on both),
and what pyarrow reads more leniently (spaces or tabs around a value, ``0x1F`` hexadecimal
integers, quotes, a byte-order mark) never reaches it. A batch whose bytes are all digits,
commas and number signs is parsed whole; any other batch, or one pyarrow refuses, is
parsed again without the lines that do not match that line grammar (one regular expression
over the batch), which the per-row path decides.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ml_contract.workflows import FIELD_NAME
from spark_jobs.features import FEATURES_COL, encode
from spark_jobs.schema import LABEL_COL, ROW_ID_COL

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_jobs.workflows import Workflow

# What the vectorised path reads and writes (mapInArrow's columns; see spark_jobs.ingest).
LINE = "_line"  # the raw line followed by "\n", as bytes
SOURCE_FILE = "source_file"
BLOCK_START = "_block_start"
RAW_LINE = "_raw_line"  # a refused line as it arrived (no "\n"); null for an accepted one

_DIGITS = b"0123456789"
# A plain number, as the vectorised path takes it: an integer that fits int64 (no sign but
# "-"; the per-row path also takes "+5" and spaces, and decides such lines), and a decimal
# number exactly as the per-row path's grammar has it (spark_jobs.ingest builds its Java
# regex from this one).
INTEGER_TOKEN = r"-?[0-9]{1,18}"
DECIMAL_TOKEN = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
# What the driver reads of each file: enough to recognise its encoding and, mostly, its
# first line; a header line is judged on its first SNIFF_BYTES characters.
SNIFF_BYTES = 64 * 1024
# One column name of a header line; the same pattern for Python's re and Java's regex.
COLUMN_NAME = rf' *"?{FIELD_NAME}"? *'


@dataclass(frozen=True)
class ParsedLines:
    """The outcome of a batch: which lines were accepted, and their values in order."""

    accepted: np.ndarray  # bool, one per line
    labels: np.ndarray  # [accepted lines], the label's dtype
    features: np.ndarray  # [accepted lines, size], the features' dtype


@dataclass(frozen=True)
class LineParser:
    """The workflow's rules in the form the vectorised path checks them (small, picklable)."""

    fields: tuple[str, ...]
    label_dtype: str
    label_min: float
    label_max: float
    feature_dtype: str
    mins: tuple[float, ...]
    maxs: tuple[float, ...]

    @classmethod
    def of(cls, workflow: Workflow) -> LineParser:
        layout, label = workflow.features, workflow.label
        return cls(
            fields=tuple(workflow.raw_fields),
            label_dtype=label.dtype,
            label_min=float(label.min),
            label_max=float(label.max),
            feature_dtype=layout.dtype,
            mins=tuple(float(v) for v in layout.mins),
            maxs=tuple(float(v) for v in layout.maxs),
        )

    # --- derived once per Python worker -------------------------------------------------

    @functools.cached_property
    def _feature_names(self) -> list[str]:
        return list(self.fields[1:])

    @functools.cached_property
    def _plain_bytes(self) -> bytes:
        """Bytes a line may hold and still be parsed vectorised (besides its final newline)."""
        floats = any(_is_float(d) for d in (self.label_dtype, self.feature_dtype))
        return _DIGITS + b",-" + (b".eE+" if floats else b"")

    @functools.cached_property
    def _line_pattern(self) -> str:
        label, feature = (
            DECIMAL_TOKEN if _is_float(d) else INTEGER_TOKEN for d in (self.label_dtype, self.feature_dtype)
        )
        return rf"\A{label}(?:,{feature})*\n\z"

    def _column_types(self, wide: bool) -> dict[str, pa.DataType]:
        """Each field's Arrow type: the stored dtype itself (a value it cannot hold fails the
        parse), or, ``wide``, int64 / float64 so that only a malformed token fails it."""
        import pyarrow as pa

        def arrow_type(dtype: str) -> pa.DataType:
            if _is_float(dtype):
                return pa.float64()  # range-checked as written, then rounded (as the per-row path)
            return pa.int64() if wide else pa.from_numpy_dtype(np.dtype(dtype))

        feature_type = arrow_type(self.feature_dtype)
        return {self.fields[0]: arrow_type(self.label_dtype), **dict.fromkeys(self._feature_names, feature_type)}

    @functools.cached_property
    def _types(self) -> dict[str, pa.DataType]:
        return self._column_types(wide=False)

    @functools.cached_property
    def _wide_types(self) -> dict[str, pa.DataType]:
        return self._column_types(wide=True)

    # --- the parse ------------------------------------------------------------------------

    def parse(self, lines: pa.BinaryArray) -> ParsedLines:
        """Parse and check ``lines`` (each value one raw line ending in ``\\n``)."""
        import pyarrow as pa

        n = len(lines)
        if n == 0:
            return self._nothing_accepted(0)
        data = _contiguous_data(lines)
        if not data.to_pybytes().translate(None, self._plain_bytes + b"\n"):
            try:
                table = self._read(data, self._types)
            except pa.ArrowInvalid:
                table = None
            if table is not None and table.num_rows == n:
                return self._checked(table)
        return self._parse_plain_lines(lines)

    def _parse_plain_lines(self, lines: pa.BinaryArray) -> ParsedLines:
        """The lines written plainly (:meth:`_plain_lines`) parsed apart from the others."""
        plain = self._plain_lines(lines)
        if not plain.any():
            return self._nothing_accepted(len(lines))
        parsed = self._parse_or_halve(lines.filter(plain) if not plain.all() else lines)
        accepted = np.zeros(len(lines), dtype=bool)
        accepted[np.flatnonzero(plain)[parsed.accepted]] = True
        return ParsedLines(accepted, parsed.labels, parsed.features)

    def _plain_lines(self, lines: pa.BinaryArray) -> np.ndarray:
        """Per line: the workflow's field count, each field a plain number of its kind
        (:data:`INTEGER_TOKEN`, :data:`DECIMAL_TOKEN`), the line's newline at its end."""
        import pyarrow.compute as pc

        shaped = pc.match_substring_regex(lines, self._line_pattern)
        counted = pc.equal(pc.count_substring(lines, ","), len(self.fields) - 1)
        return np.asarray(pc.and_(shaped, counted).to_numpy(zero_copy_only=False), dtype=bool)

    def _parse_or_halve(self, lines: pa.BinaryArray) -> ParsedLines:
        """Parse plain lines, with the stored types, else (a value they cannot hold) with wide
        ones. Should pyarrow still refuse a batch (a number grammar edge no test has found),
        halve it until the lines it refuses stand alone; they are refused, and the per-row
        path decides them."""
        import pyarrow as pa

        data = _contiguous_data(lines)
        for types in [self._types] if self._types == self._wide_types else [self._types, self._wide_types]:
            try:
                table = self._read(data, types)
            except pa.ArrowInvalid:
                continue
            if table.num_rows == len(lines):
                return self._checked(table)
        if len(lines) == 1:
            return self._nothing_accepted(1)
        half = len(lines) // 2
        first, second = self._parse_or_halve(lines.slice(0, half)), self._parse_or_halve(lines.slice(half))
        return ParsedLines(
            np.concatenate([first.accepted, second.accepted]),
            np.concatenate([first.labels, second.labels]),
            np.concatenate([first.features, second.features]),
        )

    def _read(self, data: pa.Buffer, types: dict[str, pa.DataType]) -> pa.Table:
        import pyarrow as pa
        import pyarrow.csv as pa_csv

        return pa_csv.read_csv(
            pa.BufferReader(data),
            read_options=pa_csv.ReadOptions(
                column_names=list(self.fields), use_threads=False, block_size=max(1 << 20, data.size + 1)
            ),
            parse_options=pa_csv.ParseOptions(quote_char=False, escape_char=False, ignore_empty_lines=False),
            convert_options=pa_csv.ConvertOptions(
                column_types=types, null_values=[""], strings_can_be_null=False, quoted_strings_can_be_null=False
            ),
        )

    def _checked(self, table: pa.Table) -> ParsedLines:
        """Which parsed rows hold every value, each in its range (floats finite), and their
        values converted to the stored dtypes."""
        label_col = table.column(0)
        feature_table = table.select(self._feature_names)
        accepted = np.ones(table.num_rows, dtype=bool)
        for column in table.columns:
            if column.null_count:
                accepted &= column.is_valid().to_numpy(zero_copy_only=False)
        labels = label_col.to_numpy(zero_copy_only=False) if not label_col.null_count else _filled(label_col)
        accepted &= _in_range(labels, self.label_min, self.label_max)
        features = _matrix(feature_table)
        accepted &= _rows_in_range(features, np.array(self.mins), np.array(self.maxs))
        if not accepted.all():
            labels, features = labels[accepted], features[accepted]
        return ParsedLines(
            accepted,
            labels.astype(np.dtype(self.label_dtype), copy=False),
            features.astype(np.dtype(self.feature_dtype).newbyteorder("<"), copy=False),
        )

    def _nothing_accepted(self, n: int) -> ParsedLines:
        return ParsedLines(
            np.zeros(n, dtype=bool),
            np.zeros(0, dtype=np.dtype(self.label_dtype)),
            np.zeros((0, len(self._feature_names)), dtype=np.dtype(self.feature_dtype)),
        )

    def is_header(self, line: bytes) -> bool:
        """Whether ``line`` (no newline) is this workflow's header: the rule of
        :func:`spark_jobs.ingest.check_header` on its first characters."""
        text = line.decode("utf-8", errors="replace")[:SNIFF_BYTES]
        return column_names(text) == [name.lower() for name in self.fields]


def column_names(line: str) -> list[str] | None:
    """The normalised names of a header line (lower case, no quotes or spaces), or None when
    the line is not a line of column names (a data row, or anything else)."""
    fields = line.removeprefix("\ufeff").strip(" ").split(",")
    if not all(re.fullmatch(COLUMN_NAME, field) for field in fields):
        return None
    return [field.strip(" ").strip('"').lower() for field in fields]


def _is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def _offsets(lines: pa.BinaryArray) -> np.ndarray:
    import pyarrow as pa

    offset_type = np.int64 if pa.types.is_large_binary(lines.type) else np.int32
    raw = np.frombuffer(lines.buffers()[1], dtype=offset_type)
    return raw[lines.offset : lines.offset + len(lines) + 1].astype(np.int64)


def _contiguous_data(lines: pa.BinaryArray) -> pa.Buffer:
    """The bytes of all values of ``lines``, back to back (no copy)."""
    offsets = _offsets(lines)
    start, end = int(offsets[0]), int(offsets[-1])
    return lines.buffers()[2].slice(start, end - start)


def _filled(column: pa.ChunkedArray) -> np.ndarray:
    """A column with nulls as numpy, nulls as 0 (their rows are refused anyway)."""
    import pyarrow.compute as pc

    return pc.fill_null(column, 0).to_numpy(zero_copy_only=False)


def _matrix(table: pa.Table) -> np.ndarray:
    """``[rows, columns]`` of one numeric type, row-major, nulls as 0."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if any(column.null_count for column in table.columns):
        table = pa.Table.from_arrays([pc.fill_null(c, 0) for c in table.columns], names=table.column_names)
    if table.num_rows == 0:
        return np.zeros((0, table.num_columns), dtype=table.schema.field(0).type.to_pandas_dtype())
    batch = table.combine_chunks().to_batches()[0]
    return np.asarray(batch.to_tensor(row_major=True))


def _in_range(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """Per value: within ``low..high`` (NaN and infinities are not)."""
    if np.issubdtype(values.dtype, np.integer):
        info = np.iinfo(values.dtype)
        if low <= info.min and high >= info.max:
            return np.ones(len(values), dtype=bool)
    with np.errstate(invalid="ignore"):
        return np.asarray((values >= low) & (values <= high))


def _rows_in_range(matrix: np.ndarray, lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
    """Per row: every element within its column's range (NaN and infinities are not)."""
    if np.issubdtype(matrix.dtype, np.integer):
        info = np.iinfo(matrix.dtype)
        if (lows <= info.min).all() and (highs >= info.max).all():
            return np.ones(len(matrix), dtype=bool)
        low, high = np.ceil(lows), np.floor(highs)
        if (low <= info.max).all() and (high >= info.min).all():
            # Bounds as the matrix's own type (clipping to it changes no answer), so the
            # comparison makes no float copy of the matrix.
            lows = np.clip(low, info.min, info.max).astype(matrix.dtype)
            highs = np.clip(high, info.min, info.max).astype(matrix.dtype)
    if (lows == lows[0]).all() and (highs == highs[0]).all():
        lows, highs = lows[:1], highs[:1]
    with np.errstate(invalid="ignore"):
        return np.asarray(((matrix >= lows) & (matrix <= highs)).all(axis=1))


def decide_batches(
    parser: LineParser, label_type: pa.DataType, features_encoder: Callable[[np.ndarray], pa.Array]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function over a drop's non-blank lines (columns ``row_id``,
    ``_line``, ``source_file``, ``_block_start``, in file order within a partition).

    Drops each file's header: the first line of a file's first block, when it is the
    workflow's header (the driver has refused any other line of column names there). Yields
    the accepted lines as curated rows (``row_id``, ``label``, ``features``) and the refused
    ones as they arrived (``_raw_line``, ``source_file``), in batches of one kind each.
    """

    def decide(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        seen_first_lines: set[str] = set()
        for batch in batches:
            lines = batch.column(LINE)
            keep = _not_headers(batch, parser, seen_first_lines)
            if keep is not None:
                batch, lines = batch.filter(keep), lines.filter(keep)
            if batch.num_rows == 0:
                continue
            parsed = parser.parse(lines)
            accepted = np.flatnonzero(parsed.accepted)
            refused = np.flatnonzero(~parsed.accepted)
            if len(accepted):
                yield _output(
                    len(accepted),
                    label_type,
                    row_id=batch.column(ROW_ID_COL).take(pa.array(accepted)),
                    label=pa.array(parsed.labels, type=label_type),
                    features=features_encoder(parsed.features),
                )
            if len(refused):
                import pyarrow.compute as pc

                indices = pa.array(refused)
                yield _output(
                    len(refused),
                    label_type,
                    raw=pc.binary_slice(lines.take(indices), 0, -1),
                    source_file=batch.column(SOURCE_FILE).take(indices),
                )

    return decide


def _not_headers(batch: pa.RecordBatch, parser: LineParser, seen: set[str]) -> np.ndarray | None:
    """A mask dropping the header lines of ``batch`` (None: keep every line). ``seen``
    holds the files whose first line this partition has already met."""
    first_block = np.flatnonzero(batch.column(BLOCK_START).to_numpy(zero_copy_only=False) == 0)
    if not len(first_block):
        return None
    files = batch.column(SOURCE_FILE).take(first_block).dictionary_encode()
    names = files.dictionary.to_pylist()
    _, first = np.unique(files.indices.to_numpy(zero_copy_only=False), return_index=True)
    keep = None
    for at in first:
        row = int(first_block[at])
        name = names[files.indices[at].as_py()]
        if name in seen:
            continue
        seen.add(name)
        if parser.is_header(batch.column(LINE)[row].as_py().removesuffix(b"\n")):
            if keep is None:
                keep = np.ones(batch.num_rows, dtype=bool)
            keep[row] = False
    return keep


def _output(
    n: int,
    label_type: pa.DataType,
    *,
    row_id: pa.Array | None = None,
    label: pa.Array | None = None,
    features: pa.Array | None = None,
    raw: pa.Array | None = None,
    source_file: pa.Array | None = None,
) -> pa.RecordBatch:
    import pyarrow as pa

    columns = {
        ROW_ID_COL: (row_id, pa.int64()),
        LABEL_COL: (label, label_type),
        FEATURES_COL: (features, pa.binary()),
        RAW_LINE: (raw, pa.binary()),
        SOURCE_FILE: (source_file, pa.string()),
    }
    return pa.RecordBatch.from_arrays(
        [array if array is not None else pa.nulls(n, type=arrow_type) for array, arrow_type in columns.values()],
        names=list(columns),
    )


def feature_encoder(workflow: Workflow) -> Callable[[np.ndarray], pa.Array]:
    """Rows of features as the dense binary column (:func:`spark_jobs.features.encode`)."""
    return functools.partial(encode, layout=workflow.features)
