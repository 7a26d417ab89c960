"""Raw lines are untrusted: whatever a line holds, ingest accounts for it and never fails.

Lines are built as bytes and handed to Spark the way its text reader hands them over
(``binary`` cast to ``string``, undecodable bytes kept), then go through the job's own row
validation. Every non-blank line is either curated or quarantined with a reason, the fast
path decides exactly as the full checks, and a row generated valid is curated.
"""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

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
from spark_jobs.schema import LABEL_MAX, NUM_PIXELS, PIXEL_COLS, PIXEL_MAX, RAW_COLS

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


VALID = ",".join(["7", *["0"] * 783, "255"])


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(lines=st.lists(line, min_size=1, max_size=8))
# Lines that once failed the job or vanished: a row ending in a Unicode line terminator
# (Java's "$" matched before it, then the strict cast failed), a stray header line.
@example(lines=[((VALID + sep).encode(), False) for sep in ("\u2028", "\u2029", "\u0085")])
@example(lines=[(VALID.encode(), True), (",".join(RAW_COLS).encode(), False)])
def test_every_line_is_curated_or_quarantined_with_a_reason(spark, lines):
    lines_df = spark.createDataFrame(
        [(raw.hex(), "file:/drop/day.csv") for raw, _ in lines], "hex string, source_file string"
    ).select(
        F.unhex("hex").cast("string").alias(RAW_RECORD_COL),  # bytes as Spark's text reader keeps them
        F.col(SOURCE_FILE_COL),
    )
    rows_df = filter_data_lines(lines_df)
    checked_df = with_rejection_reason(with_parsed_values(rows_df))
    # Each row decided with the fast path and without it, in one job.
    slow_df = with_rejection_reason(with_parsed_values(rows_df, fast_path=False))
    columns = [RAW_RECORD_COL, "_values", REASON_COL]
    both = (
        checked_df.select(*columns, F.lit(True).alias("fast"))
        .unionByName(slow_df.select(*columns, F.lit(False).alias("fast")))
        .collect()
    )
    decided = [(r[RAW_RECORD_COL], r["_values"], r[REASON_COL]) for r in both if r["fast"]]
    quarantined = select_quarantine(checked_df, DS).collect()
    counts = count_rows(checked_df, "fuzz")  # the job's own accounting, as in its manifest

    assert counts.curated + counts.quarantined == sum(not is_blank(raw) for raw, _ in lines)
    assert counts.quarantined == len(quarantined)
    assert counts.curated == sum(reason is None for _, _, reason in decided)
    assert all(r[REASON_COL] for r in quarantined), "a quarantined row without a reason"
    for _, values, reason in decided:
        if reason is None:
            assert len(values) == len(RAW_COLS) and 0 <= values[0] <= LABEL_MAX
            assert all(0 <= v <= PIXEL_MAX for v in values[1:])
    valid = {raw.decode() for raw, generated_valid in lines if generated_valid}
    assert not valid & {r[RAW_RECORD_COL] for r in quarantined}, "a valid row was quarantined"
    assert decided == [(r[RAW_RECORD_COL], r["_values"], r[REASON_COL]) for r in both if not r["fast"]]
