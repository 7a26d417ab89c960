from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import functions as F

from spark_jobs.ingest import (
    REASON_COL,
    IngestError,
    filter_data_lines,
    ingest_partition,
    select_curated,
    with_parsed_values,
    with_rejection_reason,
)
from spark_jobs.schema import PIXEL_COLS, RAW_COLS

HEADER = ",".join(RAW_COLS)


def line(label="3", pixels=None) -> str:
    pixels = pixels if pixels is not None else ["0"] * 784
    return ",".join([label, *pixels])


def reasons(spark, lines: list[str]) -> list[str | None]:
    df = spark.createDataFrame([(l, "f.csv") for l in lines], "raw_record string, source_file string")
    checked = with_rejection_reason(with_parsed_values(filter_data_lines(df)))
    return [r[REASON_COL] for r in checked.collect()]


def test_valid_row_has_no_reason(spark):
    assert reasons(spark, [line("7", ["255"] + ["0"] * 783)]) == [None]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (line() + ",9", "wrong field count: expected 785, got 786"),
        ("1,2,3", "wrong field count: expected 785, got 3"),
        (line(label="x"), "label is empty or not an integer: 'x'"),
        (line(label=""), "label is empty or not an integer: ''"),
        (line(label="10"), "label out of range 0..9: 10"),
        (line(label="-1"), "label out of range 0..9: -1"),
        (line(pixels=["0"] * 5 + ["abc"] + ["0"] * 778), "pixel5 is empty or not an integer: 'abc'"),
        (line(pixels=["0"] * 783 + [""]), "pixel783 is empty or not an integer: ''"),
        (line(pixels=["0"] * 10 + ["256"] + ["0"] * 773), "pixel10 out of range 0..255: 256"),
        (line(pixels=["-3"] + ["0"] * 783), "pixel0 out of range 0..255: -3"),
        (line(pixels=["1.5"] + ["0"] * 783), "pixel0 is empty or not an integer: '1.5'"),
    ],
)
def test_bad_rows_name_the_rule_and_column(spark, raw, expected):
    assert reasons(spark, [raw]) == [expected]


def checked_rows(spark, lines: list[str], fast_path: bool) -> list[tuple]:
    df = spark.createDataFrame([(l, "f.csv") for l in lines], "raw_record string, source_file string")
    checked = with_rejection_reason(with_parsed_values(filter_data_lines(df), fast_path=fast_path))
    return [(r["raw_record"], r["_fast"], r["_values"], r[REASON_COL]) for r in checked.collect()]


def test_fast_path_decides_exactly_as_the_full_checks(spark):
    """Lines near the fast path's edges: plain rows take it, every other one the long way,
    and each gets the same values and reason either way."""
    lines = [
        line("0", ["255"] * 784),
        line("9", [str(i % 256) for i in range(784)]),
        line("7", ["007"] + ["0"] * 783),  # a leading zero, still plain
        line("7", ["0255"] + ["0"] * 783),  # four digits: valid, the long way
        line("7", ["0256"] + ["0"] * 783),
        line("7", ["1000"] + ["0"] * 783),
        line("7", [" 12"] + ["0"] * 783),
        line("7", ["+5"] + ["0"] * 783),
        line("12", ["1"] * 784),
        line("7", ["256"] + ["0"] * 783),
        line("7", ["0"] * 783 + [""]),
        line("7") + ",",
        line("7") + ",5",
        "," + line("7"),
        " " + line("5") + " ",
        "\ufeff" + line("5"),
        line("7", ['"5"'] + ["0"] * 783),
        line("7", ["5\x01"] + ["0"] * 783),
    ]
    fast = checked_rows(spark, lines, fast_path=True)
    slow = checked_rows(spark, lines, fast_path=False)
    assert [r[0] for r in fast] == lines
    assert [r[2:] for r in fast] == [r[2:] for r in slow]
    assert [r[1] for r in fast] == [True, True, True] + [False] * (len(lines) - 3)
    valid = [True] * 4 + [False, False, True, True] + [False] * 6 + [True, True, False, False]
    assert [r[3] is None for r in fast] == valid


def test_header_and_blank_lines_are_not_rows(spark):
    assert reasons(spark, [HEADER, "", "   ", line()]) == [None]


def test_curated_row_is_typed_and_id_is_stable(spark):
    df = spark.createDataFrame([(line("4", ["9"] * 784), "f.csv")], "raw_record string, source_file string")
    checked = with_rejection_reason(with_parsed_values(filter_data_lines(df)))
    first = select_curated(checked, "2026-11-28").collect()
    again = select_curated(checked, "2026-11-28").collect()
    assert first[0]["label"] == 4 and first[0]["pixel783"] == 9
    assert first[0]["row_id"] == again[0]["row_id"]
    assert dict(select_curated(checked, "2026-11-28").dtypes)["pixel0"] == "int"


def write_csv(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path.parent


def run_ingest(spark, tmp_path, raw_dir, ds="2026-11-28", max_bad_ratio=0.5):
    return ingest_partition(
        spark,
        raw_path=str(raw_dir),
        ds=ds,
        curated_root=str(tmp_path / "curated"),
        quarantine_root=str(tmp_path / "quarantine"),
        max_bad_ratio=max_bad_ratio,
    )


def test_rows_are_accounted_for_and_rerun_replaces(spark, tmp_path):
    raw = write_csv(tmp_path / "raw" / "mnist.csv", [HEADER, line("1"), line("2"), line("x"), "1,2"])
    report = run_ingest(spark, tmp_path, raw)
    assert (report.rows_in, report.rows_curated, report.rows_quarantined) == (4, 2, 2)
    report = run_ingest(spark, tmp_path, raw)
    curated = spark.read.parquet(str(tmp_path / "curated"))
    quarantine = spark.read.parquet(str(tmp_path / "quarantine"))
    assert curated.count() == 2 and quarantine.count() == 2
    assert sorted(r["label"] for r in curated.select("label").collect()) == [1, 2]


def test_headerless_mnist_csv_ingests_the_same(spark, tmp_path):
    raw = write_csv(tmp_path / "raw" / "mnist_train.csv", [line("5"), line("6")])
    assert run_ingest(spark, tmp_path, raw).rows_curated == 2


def test_other_partitions_are_untouched(spark, tmp_path):
    run_ingest(spark, tmp_path, write_csv(tmp_path / "a" / "x.csv", [line("1")]), ds="2026-11-27")
    run_ingest(spark, tmp_path, write_csv(tmp_path / "b" / "x.csv", [line("2"), line("3")]), ds="2026-11-28")
    run_ingest(spark, tmp_path, write_csv(tmp_path / "b" / "x.csv", [line("4")]), ds="2026-11-28")
    counts = {
        r["ds"]: r["count"]
        for r in spark.read.parquet(str(tmp_path / "curated")).groupBy("ds").count().collect()
    }
    assert counts == {"2026-11-27": 1, "2026-11-28": 1}


def test_too_many_bad_rows_fails_and_keeps_previous_partition(spark, tmp_path):
    run_ingest(spark, tmp_path, write_csv(tmp_path / "good" / "x.csv", [line("1"), line("2")]))
    bad = write_csv(tmp_path / "bad" / "x.csv", [line("1"), line("x"), line("11")])
    with pytest.raises(IngestError, match=r"2 of 3 rows rejected.*label"):
        run_ingest(spark, tmp_path, bad, max_bad_ratio=0.1)
    curated = spark.read.parquet(str(tmp_path / "curated"))
    assert sorted(r["label"] for r in curated.collect()) == [1, 2]


def test_missing_and_empty_drops_are_clear_failures(spark, tmp_path):
    with pytest.raises(IngestError, match="does not exist"):
        run_ingest(spark, tmp_path, tmp_path / "nowhere")
    empty = write_csv(tmp_path / "empty" / "x.csv", [HEADER])
    with pytest.raises(IngestError, match="holds no data rows"):
        run_ingest(spark, tmp_path, empty)
    assert not (tmp_path / "curated").exists()
