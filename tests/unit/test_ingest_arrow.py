"""Ingest's vectorised path (pyarrow in ``mapInArrow``) against its per-row path.

A line the vectorised path accepts must be one the per-row checks accept, with the same
label, the same float32/uint8 bytes and the same content-hash ``row_id``; every other line
goes to the per-row path, so the drop's curated rows, quarantine and reasons are the per-row
path's own. The parser alone is checked on many generated batches (no Spark: any line, the
same decision alone as within a batch, accepted values equal to what the line says); the
two paths are compared through Spark on fewer, larger ones. The header of a file is found
from the head the driver reads, split as Spark's text reader splits it.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from spark_jobs import workflows
from spark_jobs.ingest import (
    RAW_RECORD_COL,
    REASON_COL,
    SNIFF_BYTES,
    SOURCE_FILE_COL,
    IngestError,
    decide_lines,
    filter_data_lines,
    first_line_of,
    ingest_partition,
    refused_lines,
    select_curated,
    with_parsed_values,
    with_rejection_reason,
)
from spark_jobs.ingest_arrow import BLOCK_START, LineParser

MNIST = workflows.load("mnist")
DIABETES = workflows.load("diabetes")
DS = "2026-11-28"
# Spellings of a decimal number a CSV writer may produce (all of them plain bytes).
FLOAT_FORMATS = [repr, "{:.3f}".format, "{:g}".format, "{:.9g}".format, "{:e}".format, "{:+}".format]
# Tokens at the edges of both grammars: what pyarrow reads and the per-row path does not
# (spaces, tabs, hexadecimal, quotes, a byte-order mark), plain bytes that are no number,
# overflows, non-finite numbers, other digits.
ODD_TOKENS = [
    "",
    "-",
    "+",
    ".",
    "e",
    "1e",
    "1e+",
    "1-2",
    "--5",
    "+-5",
    "1.2.3",
    "1.e1",
    ".5e1",
    "0x1F",
    "0X1",
    "1e999",
    "-1e999",
    "1e-999",
    "nan",
    "NaN",
    "inf",
    "-Infinity",
    "1_0",
    " 5",
    "5 ",
    "\t5",
    "5\t",
    '"5"',
    "\ufeff5",
    "99999999999",
    "99999999999999999999",
    "256",
    "-1",
    "-0",
    "+0",
    "0.0",
    "1.",
    "+.5",
    "00.5",
    "0255",
    "\u0665",
    "\x00",
    "\r",
    "5\r",
    ",",
    ",,",
    "3.4028236e38",
]
token = st.sampled_from(ODD_TOKENS) | st.text(alphabet="0123456789.eE+-x \t,", max_size=6)


def plain_value(low: float, high: float, is_float: bool) -> st.SearchStrategy[str]:
    if not is_float:
        return st.tuples(st.integers(int(low), int(high)), st.integers(0, 2)).map(lambda vz: "0" * vz[1] + str(vz[0]))
    return (
        st.tuples(st.floats(low, high, allow_nan=False), st.sampled_from(FLOAT_FORMATS))
        .map(lambda vf: vf[1](vf[0]))
        .filter(lambda text: low <= float(text) <= high)  # a rounded spelling may leave the range
    )


def plain_row(wf: workflows.Workflow) -> st.SearchStrategy[list[str]]:
    """A valid row's fields, written plainly: the vectorised path must take it."""
    label, layout = wf.label, wf.features
    fields = [plain_value(label.min, label.max, label.dtype.startswith("float"))]
    fields += [plain_value(c.min, c.max, layout.dtype.startswith("float")) for c in layout.columns]
    return st.tuples(*fields).map(list)


@st.composite
def damaged_row(draw, wf: workflows.Workflow) -> str:
    fields = draw(plain_row(wf))
    for _ in range(draw(st.integers(1, 3))):
        fields[draw(st.integers(0, len(fields) - 1))] = draw(token)
    if draw(st.integers(0, 9)) == 0:
        fields = fields[:-1] if draw(st.booleans()) else [*fields, "0"]
    return ",".join(fields)


def lines_of(wf: workflows.Workflow) -> st.SearchStrategy[tuple[bytes, bool]]:
    """(a raw line, whether it was generated plain and valid)."""
    return st.one_of(
        plain_row(wf).map(lambda f: (",".join(f).encode(), True)),
        damaged_row(wf).map(lambda s: (s.encode(), False)),
        st.binary(max_size=60).map(lambda b: (b, False)),
        st.text(alphabet="0123456789,.-e ", max_size=40).map(lambda s: (s.encode(), False)),
    )


def batch(raw_lines: list[bytes]) -> pa.BinaryArray:
    return pa.array([raw + b"\n" for raw in raw_lines], type=pa.binary())


def expected_values(raw: bytes, wf: workflows.Workflow) -> tuple[np.ndarray, np.ndarray]:
    """The numbers a line says, read the way any CSV reader reads them, in the stored dtypes."""
    tokens = raw.decode().split(",")

    def number(text: str, dtype: str) -> float:
        return float(text) if dtype.startswith("float") else int(text)

    label = np.array([number(tokens[0], wf.label.dtype)], dtype=wf.label.dtype)
    features = np.array([number(t, wf.features.dtype) for t in tokens[1:]], dtype=wf.features.numpy_dtype)
    return label, features


PARSER_SETTINGS = settings(max_examples=40, deadline=None)


@pytest.mark.parametrize("wf", [MNIST, DIABETES], ids=["mnist", "diabetes"])
@PARSER_SETTINGS
@given(data=st.data())
def test_parser_takes_plain_valid_lines_and_decides_each_line_alone(wf, data):
    """Any bytes: no error, one decision per line, the same one alone as within the batch
    (a refused neighbour changes nothing), every plainly written valid row accepted, and an
    accepted line's values what the line says, in range and finite."""
    lines = data.draw(st.lists(lines_of(wf), min_size=1, max_size=24))
    parser = LineParser.of(wf)
    raws = [raw for raw, _ in lines]
    parsed = parser.parse(batch(raws))
    assert parsed.accepted.shape == (len(raws),)
    assert len(parsed.labels) == len(parsed.features) == int(parsed.accepted.sum())
    alone = [parser.parse(batch([raw])) for raw in raws]
    assert parsed.accepted.tolist() == [bool(one.accepted[0]) for one in alone]
    for (raw, plain_valid), accepted in zip(lines, parsed.accepted, strict=True):
        assert accepted or not plain_valid, f"a plainly written valid row was refused: {raw!r}"
    at = 0
    for raw, accepted in zip(raws, parsed.accepted, strict=True):
        if not accepted:
            continue
        label, features = expected_values(raw, wf)
        numbers = [float(t) for t in raw.decode().split(",")]
        assert all(math.isfinite(n) for n in numbers)
        assert wf.label.min <= numbers[0] <= wf.label.max
        assert all(c.min <= n <= c.max for c, n in zip(wf.features.columns, numbers[1:], strict=True))
        assert parsed.labels[at : at + 1].tobytes() == label.tobytes()
        assert parsed.features[at].tobytes() == features.tobytes()
        at += 1


# --- the two paths through Spark ------------------------------------------------------------

SPARK_SETTINGS = settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
PATIENT = "151.5,59,2,32.1,101,157,93.2,38,4,4.8598,87"
ZEROS = ",".join(["0"] * 784)


def lines_df(spark, raw_lines: list[bytes]):
    """Lines as Spark's text reader hands them over (undecodable bytes kept), not a file's
    first block: no header to look for."""
    return spark.createDataFrame(
        [(raw.hex(), "file:/drop/day.csv", 1) for raw in raw_lines],
        f"hex string, {SOURCE_FILE_COL} string, {BLOCK_START} long",
    ).select(F.unhex("hex").cast("string").alias(RAW_RECORD_COL), SOURCE_FILE_COL, BLOCK_START)


def curated_rows(df) -> set[tuple]:
    return {(r["row_id"], r["label"], bytes(r["features"])) for r in df.collect()}


def assert_paths_agree(spark, raw_lines: list[bytes], wf: workflows.Workflow) -> None:
    """The vectorised path's accepted rows are the per-row path's, id and bytes; its refused
    lines, decided row by row, give the rest of the per-row path's curated rows and every
    one of its reasons."""
    df = lines_df(spark, raw_lines)
    decided_df = decide_lines(df, wf, DS)
    accepted = curated_rows(decided_df.where(F.col("features").isNotNull()))
    refused_df = refused_lines(decided_df)
    refused_checked_df = with_rejection_reason(with_parsed_values(refused_df, wf), wf)
    by_row_of_refused = curated_rows(select_curated(refused_checked_df, wf, DS))
    checked_df = with_rejection_reason(with_parsed_values(filter_data_lines(df), wf), wf)
    by_row = curated_rows(select_curated(checked_df, wf, DS))
    assert accepted <= by_row, "the vectorised path took a line the per-row path refuses, or read it otherwise"
    assert accepted | by_row_of_refused == by_row
    reasons = sorted(r[REASON_COL] for r in checked_df.where(F.col(REASON_COL).isNotNull()).collect())
    refused_reasons = sorted(r[REASON_COL] for r in refused_checked_df.where(F.col(REASON_COL).isNotNull()).collect())
    assert refused_reasons == reasons
    assert decided_df.count() == checked_df.count()  # every non-blank line decided once


@SPARK_SETTINGS
@given(lines=st.lists(lines_of(DIABETES), min_size=1, max_size=80))
@example(
    lines=[((PATIENT.replace("32.1", v)).encode(), False) for v in ["1e-999", " 32", "\t32", "0x1F", "3.4028236e38"]]
)
def test_the_paths_agree_on_diabetes_lines(spark, lines):
    assert_paths_agree(spark, [raw for raw, _ in lines], DIABETES)


@SPARK_SETTINGS
@given(lines=st.lists(lines_of(MNIST), min_size=1, max_size=40))
@example(lines=[(f"{v},{ZEROS}".encode(), False) for v in ["0x1", "-0", "+5", " 5", "\t5", "007", "10"]])
def test_the_paths_agree_on_mnist_lines(spark, lines):
    assert_paths_agree(spark, [raw for raw, _ in lines], MNIST)


# --- a file's first line, from its head -------------------------------------------------------

file_text = st.lists(st.sampled_from(["\n", "\r", "\r\n", " ", "\ufeff", "a", "1", ",", "\t", "é"]), max_size=30).map(
    "".join
)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.tuples(st.booleans(), file_text), min_size=1, max_size=10))
def test_the_first_line_from_the_head_is_the_first_line_spark_reads(spark, tmp_path_factory, files):
    folder = tmp_path_factory.mktemp("heads")
    heads = {}
    for i, (bom, text) in enumerate(files):
        content = (b"\xef\xbb\xbf" if bom else b"") + text.encode()
        (folder / f"f{i}.csv").write_bytes(content)
        heads[f"f{i}.csv"] = content
    text_df = spark.read.text(str(folder)).select(
        F.col("value").alias(RAW_RECORD_COL),
        F.col("_metadata.file_name").alias(SOURCE_FILE_COL),
        F.monotonically_increasing_id().alias("at"),
    )
    spark_first: dict[str, str] = {}
    for row in sorted(filter_data_lines(text_df).collect(), key=lambda r: r["at"]):
        spark_first.setdefault(row[SOURCE_FILE_COL], row[RAW_RECORD_COL])
    for name, content in heads.items():
        assert first_line_of(content, whole_file=True) == (True, spark_first.get(name))


def run_ingest(spark, tmp_path, raw):
    return ingest_partition(
        spark,
        workflow=DIABETES,
        raw_path=str(raw),
        ds=DS,
        curated_root=str(tmp_path / "curated"),
        quarantine_root=str(tmp_path / "quarantine"),
        max_bad_ratio=0.5,
    )


def test_a_first_line_longer_than_the_head_is_looked_at_by_a_pass_over_the_drop(spark, tmp_path):
    """Beyond the head, the header is found as before (a Spark pass on the line's first
    SNIFF_BYTES characters): a row of 40,000 fields is a quarantined row, a header of 40,000
    names fails the drop naming the file."""
    long_row = ",".join(["1"] * 40_000)
    assert len(long_row) > SNIFF_BYTES
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "day.csv").write_text("\n".join([long_row, PATIENT, PATIENT]) + "\n")
    report = run_ingest(spark, tmp_path, raw)
    assert (report.rows_in, report.rows_curated, report.sample_reasons) == (
        3,
        2,
        ["wrong field count: expected 11, got 40000"],
    )
    (raw / "day.csv").write_text("\n".join([",".join(f"c{i}" for i in range(40_000)), PATIENT]) + "\n")
    header = r"day\.csv has the header c0,c1,c2,\.\.\.,c\d+ \(\d+ columns\): \d+ columns, expected 11"
    with pytest.raises(IngestError, match=header):
        run_ingest(spark, tmp_path, raw)
