"""Raw lines are untrusted: whatever a line holds, ingest accounts for it and never fails.

Lines are built as bytes and handed to Spark the way its text reader hands them over
(``binary`` cast to ``string``, undecodable bytes kept), then go through the job's own row
validation, for each workflow's rules: MNIST's integers (a tensor with one range) and
diabetes' decimal numbers (named columns, a range each). Every non-blank line is either
curated or quarantined with a reason, the fast path decides exactly as the full checks, a
row generated valid is curated, and a curated row holds exactly the numbers it was written
with.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from spark_jobs import workflows
from spark_jobs.ingest import (
    RAW_RECORD_COL,
    REASON_COL,
    SOURCE_FILE_COL,
    count_rows,
    filter_data_lines,
    select_quarantine,
    with_parsed_values,
    with_rejection_reason,
)

MNIST = workflows.load("mnist")
DIABETES = workflows.load("diabetes")
RAW_COLS = MNIST.raw_fields
PIXEL_COLS = MNIST.features.raw_fields
LABEL_MAX = int(MNIST.label.max)
PIXEL_MAX = int(MNIST.features.maxs.max())
NUM_PIXELS = MNIST.features.size
DS = "2026-11-28"
BOM = "\ufeff"
# Characters that end or break a line somewhere (Java's regex, Unicode, Windows, old Macs),
# invisible ones, and ones Spark's integer cast treats specially.
ODD_CHARS = [
    "\u2028",
    "\u2029",
    "\u0085",
    "\r",
    "\n",
    "\r\n",
    BOM,
    "\x00",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x7f",
    "\t",
    " ",
    "\u00a0",
    "\u3000",
    "\u200b",
    "\uff10",
    "\u0663",
    "+",
    "-",
    ".",
    ",",
    ",,",
    '"',
    "e",
    "L",
]

valid_row = st.tuples(
    st.integers(0, LABEL_MAX),
    st.lists(st.integers(0, PIXEL_MAX), min_size=NUM_PIXELS, max_size=NUM_PIXELS),
).map(lambda row: ",".join(str(v) for v in (row[0], *row[1])))


@st.composite
def corrupted_row(draw) -> str:
    """A valid row with one odd character inserted or substituted somewhere, often at an end."""
    row = draw(valid_row)
    odd = draw(st.sampled_from(ODD_CHARS) | st.characters(codec="utf-8"))
    at = draw(st.sampled_from([0, len(row)]) | st.integers(0, len(row)))
    replace = draw(st.booleans()) and at < len(row)
    return row[:at] + odd + row[at + int(replace) :]


digits_and_commas = st.text(alphabet="0123456789,", max_size=40)
# Long lines of numbers, or of names (a header-looking line of thousands of columns).
long_line = st.tuples(st.sampled_from(["0123456789,", "ab_,"]), st.integers(1, 6)).flatmap(
    lambda ak: st.text(alphabet=ak[0], min_size=ak[1] * 1000, max_size=ak[1] * 1000 + 50)
)
header_like = st.sampled_from([",".join(RAW_COLS), ",".join([*PIXEL_COLS, "class"]), "label", "Label,pixel0"])
odd_text = st.lists(st.sampled_from(ODD_CHARS) | st.characters(codec="utf-8"), max_size=40).map("".join)

# (bytes of the line, whether the line was generated as a valid row)
line = st.one_of(
    valid_row.map(lambda s: (s.encode(), True)),
    corrupted_row().map(lambda s: (s.encode(), False)),
    (valid_row | digits_and_commas).flatmap(
        lambda s: st.sampled_from(ODD_CHARS).map(lambda sep: ((s + sep).encode(), False))
    ),
    digits_and_commas.map(lambda s: (s.encode(), False)),
    long_line.map(lambda s: (s.encode(), False)),
    header_like.map(lambda s: (s.encode(), False)),
    odd_text.map(lambda s: (s.encode(), False)),
    st.binary(max_size=80).map(lambda b: (b, False)),
)


def is_blank(raw: bytes) -> bool:
    """Blank as ingest defines it: nothing but spaces, after an optional byte-order mark."""
    return raw.removeprefix(BOM.encode()).strip(b" ") == b""


def check_accounting(spark, lines: list[tuple[bytes, bool]], workflow) -> list[tuple]:
    """Run the job's row validation over ``lines`` with and without its fast path; assert
    the accounting; return the decided ``(raw, label, values, reason)`` rows."""
    lines_df = spark.createDataFrame(
        [(raw.hex(), "file:/drop/day.csv") for raw, _ in lines], "hex string, source_file string"
    ).select(
        F.unhex("hex").cast("string").alias(RAW_RECORD_COL),  # bytes as Spark's text reader keeps them
        F.col(SOURCE_FILE_COL),
    )
    rows_df = filter_data_lines(lines_df)
    checked_df = with_rejection_reason(with_parsed_values(rows_df, workflow), workflow)
    # Each row decided with the fast path and without it, in one job.
    slow_df = with_rejection_reason(with_parsed_values(rows_df, workflow, fast_path=False), workflow)
    columns = [RAW_RECORD_COL, "_label", "_values", REASON_COL]
    both = (
        checked_df.select(*columns, F.lit(True).alias("fast"))
        .unionByName(slow_df.select(*columns, F.lit(False).alias("fast")))
        .collect()
    )
    decided = [(r[RAW_RECORD_COL], r["_label"], r["_values"], r[REASON_COL]) for r in both if r["fast"]]
    quarantined = select_quarantine(checked_df, DS).collect()
    counts = count_rows(checked_df, "fuzz")  # the job's own accounting, as in its manifest

    assert counts.curated + counts.quarantined == sum(not is_blank(raw) for raw, _ in lines)
    assert counts.quarantined == len(quarantined)
    assert counts.curated == sum(reason is None for *_, reason in decided)
    assert all(r[REASON_COL] for r in quarantined), "a quarantined row without a reason"
    label, layout = workflow.label, workflow.features
    for _, label_value, values, reason in decided:
        if reason is None:
            assert label.min <= label_value <= label.max
            assert len(values) == layout.size
            assert all(c.min <= v <= c.max for c, v in zip(layout.columns, values, strict=True))
    valid = {raw.decode() for raw, generated_valid in lines if generated_valid}
    assert not valid & {r[RAW_RECORD_COL] for r in quarantined}, "a valid row was quarantined"
    assert decided == [(r[RAW_RECORD_COL], r["_label"], r["_values"], r[REASON_COL]) for r in both if not r["fast"]]
    return decided


VALID = ",".join(["7", *["0"] * 783, "255"])
# Each example costs a few Spark jobs (seconds) whatever its size, a line costs next to
# nothing: few examples, many lines in each (about as many lines in all as 25 examples of
# up to 8 lines would hold).
FUZZ_SETTINGS = settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@FUZZ_SETTINGS
@given(lines=st.lists(line, min_size=1, max_size=24))
# Lines that once failed the job or vanished: a row ending in a Unicode line terminator
# (Java's "$" matched before it, then the strict cast failed), a stray header line.
@example(lines=[((VALID + sep).encode(), False) for sep in ("\u2028", "\u2029", "\u0085")])
@example(lines=[(VALID.encode(), True), (",".join(RAW_COLS).encode(), False)])
def test_every_line_is_curated_or_quarantined_with_a_reason(spark, lines):
    check_accounting(spark, lines, MNIST)


# --- diabetes: decimal numbers, a range per named column -----------------------------------

DIABETES_FIELDS = DIABETES.raw_fields
# Spellings of one value a CSV writer may produce: shortest repr, fixed decimals, exponent.
FLOAT_FORMATS = [repr, "{:.3f}".format, "{:g}".format, "{:.9g}".format, "{:e}".format, "{:+}".format]


def in_range(low: float, high: float) -> st.SearchStrategy[str]:
    return (
        st.tuples(st.floats(low, high, allow_nan=False), st.sampled_from(FLOAT_FORMATS))
        .map(lambda vf: vf[1](vf[0]))
        .filter(lambda text: low <= float(text) <= high)
    )  # a rounded spelling may leave the range


valid_patient = st.tuples(
    in_range(DIABETES.label.min, DIABETES.label.max), *[in_range(c.min, c.max) for c in DIABETES.features.columns]
).map(",".join)
# Any float at all, or a word Spark's double cast would take: out of range, NaN, "1.5f".
any_number = st.one_of(
    st.floats().map(repr),
    st.floats(width=32).map("{:g}".format),
    st.sampled_from(["nan", "NaN", "inf", "-Infinity", "1.5f", "2d", "0x1p3", "1e999", "-0", ".", "-", "1.2.3", ""]),
)


@st.composite
def patient_with_any_field(draw) -> str:
    fields = draw(valid_patient).split(",")
    fields[draw(st.integers(0, len(fields) - 1))] = draw(any_number)
    return ",".join(fields)


@st.composite
def corrupted_patient(draw) -> str:
    row = draw(valid_patient)
    odd = draw(st.sampled_from(ODD_CHARS) | st.characters(codec="utf-8"))
    at = draw(st.sampled_from([0, len(row)]) | st.integers(0, len(row)))
    replace = draw(st.booleans()) and at < len(row)
    return row[:at] + odd + row[at + int(replace) :]


numeric_text = st.text(alphabet="0123456789.,-+eE", max_size=60)
diabetes_line = st.one_of(
    valid_patient.map(lambda s: (s.encode(), True)),
    patient_with_any_field().map(lambda s: (s.encode(), False)),
    corrupted_patient().map(lambda s: (s.encode(), False)),
    (valid_patient | numeric_text).flatmap(
        lambda s: st.sampled_from(ODD_CHARS).map(lambda sep: ((s + sep).encode(), False))
    ),
    numeric_text.map(lambda s: (s.encode(), False)),
    long_line.map(lambda s: (s.encode(), False)),
    st.sampled_from([",".join(DIABETES_FIELDS), ",".join(DIABETES_FIELDS[::-1]), "progression"]).map(
        lambda s: (s.encode(), False)
    ),
    odd_text.map(lambda s: (s.encode(), False)),
    st.binary(max_size=80).map(lambda b: (b, False)),
)

PATIENT = "151.5,59,2,32.1,101,157,93.2,38,4,4.8598,87"


# Rows of 11 fields are cheaper still: fewer examples, more lines in each.
@settings(FUZZ_SETTINGS, max_examples=6)
@given(lines=st.lists(diabetes_line, min_size=1, max_size=48))
@example(lines=[((PATIENT + sep).encode(), False) for sep in ("\u2028", "\u2029", "\u0085")])
@example(lines=[(PATIENT.encode(), True), (",".join(DIABETES_FIELDS).encode(), False)])
@example(lines=[(PATIENT.replace("32.1", v).encode(), False) for v in ("nan", "inf", "1e39", "3.4028236e38", "")])
def test_every_diabetes_line_is_curated_or_quarantined_and_keeps_its_numbers(spark, lines):
    decided = check_accounting(spark, lines, DIABETES)
    for raw, label, values, reason in decided:
        if reason is None:
            # What the job stores (rounded to float32 from the checked double) is what the
            # line says, read the way any CSV reader reads a decimal number.
            numbers = [float(token) for token in raw.removeprefix(BOM).strip(" ").split(",")]
            assert all(math.isfinite(n) for n in numbers)
            assert np.float32(label) == np.float32(numbers[0])
            assert np.array_equal(np.array(values, dtype=np.float32), np.array(numbers[1:], dtype=np.float32))
