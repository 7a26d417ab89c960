from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from spark_jobs import workflows
from spark_jobs.features import decode, tensor_metadata_of_parquet_schema
from spark_jobs.ingest import (
    RAW_RECORD_COL,
    REASON_COL,
    IngestError,
    filter_data_lines,
    ingest_manifest_path,
    ingest_partition,
    main,
    rejected_manifest_path,
    select_curated,
    with_parsed_values,
    with_rejection_reason,
)

MNIST = workflows.load("mnist")
DIABETES = workflows.load("diabetes")
RAW_COLS = MNIST.raw_fields
PIXEL_COLS = MNIST.features.raw_fields
HEADER = ",".join(RAW_COLS)
STRAY_HEADER = "a header line (column names) inside the file: only a file's first line can be its header"


def line(label="3", pixels=None) -> str:
    pixels = pixels if pixels is not None else ["0"] * 784
    return ",".join([label, *pixels])


def checked(spark, lines: list[str], workflow=MNIST, fast_path: bool = True):
    df = spark.createDataFrame([(line, "f.csv") for line in lines], "raw_record string, source_file string")
    return with_rejection_reason(with_parsed_values(filter_data_lines(df), workflow, fast_path=fast_path), workflow)


def reasons(spark, lines: list[str], workflow=MNIST) -> list[str | None]:
    return [r[REASON_COL] for r in checked(spark, lines, workflow).collect()]


def test_valid_row_has_no_reason(spark):
    assert reasons(spark, [line("7", ["255"] + ["0"] * 783)]) == [None]


BAD_ROWS = [
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
    # Java's "$" matches before a final line terminator: these once passed the fast
    # path's regex and failed the whole job in its strict cast (CAST_INVALID_INPUT).
    (line() + "\u2028", "line separator U+2028 in the row: a line break no CSV reader agrees on"),
    (line() + "\u2029", "line separator U+2029 in the row: a line break no CSV reader agrees on"),
    (line() + "\u0085", "line separator U+0085 in the row: a line break no CSV reader agrees on"),
    (
        line(pixels=["7\u2028"] + ["0"] * 783),
        "line separator U+2028 in the row: a line break no CSV reader agrees on",
    ),
    (HEADER, STRAY_HEADER),
    (",".join([*PIXEL_COLS, "class"]), STRAY_HEADER),
    (" Label , pixel0", STRAY_HEADER),
]


def decided_reasons(spark, lines: list[str], workflow) -> dict[str, str | None]:
    """The reason of each line, all decided in one Spark job (a job per line would cost a
    second or so each; a row's reason depends on that row alone)."""
    rows = checked(spark, lines, workflow).select(RAW_RECORD_COL, REASON_COL).collect()
    decided = {r[RAW_RECORD_COL]: r[REASON_COL] for r in rows}
    assert len(rows) == len(decided) == len(set(lines)), "a line was dropped or repeated"
    return decided


@pytest.fixture(scope="module")
def bad_line_reasons(spark) -> dict[str, dict[str, str | None]]:
    """The reasons of the bad lines below (``BAD_ROWS``, ``BAD_PATIENTS``), by workflow."""
    tables = ((MNIST, BAD_ROWS), (DIABETES, BAD_PATIENTS))
    return {wf.name: decided_reasons(spark, [raw for raw, _ in table], wf) for wf, table in tables}


@pytest.mark.parametrize(("raw", "expected"), BAD_ROWS)
def test_bad_rows_name_the_rule_and_column(bad_line_reasons, raw, expected):
    assert bad_line_reasons["mnist"][raw] == expected


def checked_rows(spark, lines: list[str], fast_path: bool, workflow=MNIST) -> list[tuple]:
    rows = checked(spark, lines, workflow, fast_path=fast_path).collect()
    return [(r["raw_record"], r["_fast"], r["_label"], r["_values"], r[REASON_COL]) for r in rows]


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
    assert [r[4] is None for r in fast] == valid


def test_blank_lines_are_not_rows_and_column_names_are_one(spark):
    """Only a file's first line can be its header (see the header tests below): column
    names found among the rows are a quarantined row, counted like any other."""
    assert reasons(spark, ["", "   ", "\ufeff", HEADER, line()]) == [STRAY_HEADER, None]


def test_curated_row_is_typed_dense_and_id_is_stable(spark):
    pixels = [str(i % 256) for i in range(784)]
    checked_df = checked(spark, [line("4", pixels)])
    curated_df = select_curated(checked_df, MNIST, "2026-11-28")
    first, again = curated_df.collect(), curated_df.collect()
    assert first[0]["label"] == 4 and first[0]["ds"] == "2026-11-28"
    assert first[0]["row_id"] == again[0]["row_id"]
    assert dict(curated_df.dtypes) == {"row_id": "bigint", "label": "int", "features": "binary", "ds": "string"}
    assert curated_df.schema["features"].metadata == {"ml_tensor": {"dtype": "uint8", "shape": [28, 28]}}
    features = decode(curated_df.toArrow().column("features"), MNIST.features)
    assert features.shape == (1, 28, 28) and features.dtype == np.uint8
    assert features.ravel().tolist() == [i % 256 for i in range(784)]


def write_csv(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path.parent


def run_ingest(spark, tmp_path, raw_dir, ds="2026-11-28", max_bad_ratio=0.5, workflow=MNIST):
    return ingest_partition(
        spark,
        workflow=workflow,
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
        r["ds"]: r["count"] for r in spark.read.parquet(str(tmp_path / "curated")).groupBy("ds").count().collect()
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


def read_json(path: str) -> dict:
    return json.loads(Path(path).read_text())


def quarantine_reasons(spark, tmp_path, root: str = "quarantine") -> list[str]:
    return sorted(r[REASON_COL] for r in spark.read.parquet(str(tmp_path / root)).collect())


def test_a_files_first_line_is_its_header_and_later_ones_are_rows(spark, tmp_path):
    raw = tmp_path / "raw"
    # Files concatenated with their headers: the second header is a row to quarantine.
    write_csv(raw / "a.csv", [HEADER, line("1"), HEADER, line("2")])
    # Blank lines before a header in other letter case, quoted, with spaces: still the header.
    write_csv(raw / "b.csv", ["", "  ", " " + ",".join(f'"{c.upper()}"' for c in RAW_COLS), line("3")])
    # No header, and a first line that is a damaged row, not column names: quarantined.
    write_csv(raw / "c.csv", [line("x"), line("4")])
    report = run_ingest(spark, tmp_path, raw)
    assert (report.rows_in, report.rows_curated, report.rows_quarantined) == (6, 4, 2)
    curated = spark.read.parquet(str(tmp_path / "curated"))
    assert sorted(r["label"] for r in curated.collect()) == [1, 2, 3, 4]
    assert quarantine_reasons(spark, tmp_path) == [STRAY_HEADER, "label is empty or not an integer: 'x'"]
    manifest = read_json(ingest_manifest_path(str(tmp_path / "curated"), "2026-11-28"))
    assert [Path(f).name for f in manifest["files_with_header"]] == ["a.csv", "b.csv"]


def test_the_header_is_found_in_a_file_split_across_partitions(spark, tmp_path):
    """A big file is read in several splits, small ones share one: only the true first line
    of each file is taken for its header."""
    raw = tmp_path / "raw"
    rows = [line(str(i % 10), [str(i % 256)] * 784) for i in range(60)]
    write_csv(raw / "big.csv", [HEADER, *rows[:40], HEADER, *rows[40:]])
    for i in range(3):
        write_csv(raw / f"small{i}.csv", [HEADER, line(str(i))])
    conf = {"spark.sql.files.maxPartitionBytes": "32k", "spark.sql.files.openCostInBytes": "1k"}
    before = {k: spark.conf.get(k) for k in conf}
    try:
        for k, v in conf.items():
            spark.conf.set(k, v)
        assert spark.read.text(str(raw)).rdd.getNumPartitions() > 3
        report = run_ingest(spark, tmp_path, raw)
    finally:
        for k, v in before.items():
            spark.conf.set(k, v)
    assert (report.rows_in, report.rows_curated, report.rows_quarantined) == (64, 63, 1)
    assert quarantine_reasons(spark, tmp_path) == [STRAY_HEADER]


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        ([*[f"pixel{i}" for i in range(1, 785)], "class"], "column 1 is 'pixel1', expected 'label'"),
        ([*PIXEL_COLS, "label"], r"the expected columns in another order \(column 1 is 'pixel0', expected 'label'\)"),
        (
            ["label", "pixel1", "pixel0", *PIXEL_COLS[2:]],
            r"the expected columns in another order \(column 2 is 'pixel1', expected 'pixel0'\)",
        ),
        (["label", "pixel0", "pixel1"], "3 columns, expected 785"),
    ],
    ids=["pixel1..pixel784,class", "label last", "two pixels swapped", "too few columns"],
)
def test_a_header_that_breaks_the_contract_fails_the_drop_naming_the_file(spark, tmp_path, header, detail):
    raw = write_csv(tmp_path / "raw" / "day.csv", [",".join(header), line("1"), line("2")])
    with pytest.raises(
        IngestError,
        match=rf"raw file \S+/day\.csv has the header .*: {detail}\. "
        r"Expected no header or label,pixel0,pixel1,\.\.\.,pixel783 \(785 columns\) in that order",
    ):
        run_ingest(spark, tmp_path, raw)
    assert not (tmp_path / "curated").exists() and not (tmp_path / "quarantine").exists()


def test_a_rejected_redrop_leaves_the_published_day_whole_and_is_recorded(spark, tmp_path):
    ds, curated_root = "2026-11-28", str(tmp_path / "curated")
    published = ingest_manifest_path(curated_root, ds)
    run_ingest(spark, tmp_path, write_csv(tmp_path / "good" / "x.csv", [line("1"), line("2"), line("y")]))
    first_manifest = read_json(published)

    bad = write_csv(tmp_path / "bad" / "x.csv", [line("3"), line("x"), line("11"), "1,2"])
    with pytest.raises(IngestError, match=r"3 of 4 rows rejected.*left as they were.*ingest\.rejected\.json"):
        run_ingest(spark, tmp_path, bad, max_bad_ratio=0.4)
    # Curated data, quarantine and manifest still describe the published drop ...
    assert sorted(r["label"] for r in spark.read.parquet(curated_root).collect()) == [1, 2]
    assert quarantine_reasons(spark, tmp_path) == ["label is empty or not an integer: 'y'"]
    assert read_json(published) == first_manifest
    # ... and the rejected drop is recorded beside them, its rows where readers do not look.
    rejected = read_json(rejected_manifest_path(published))
    assert rejected["outcome"] == "rejected" and rejected["raw_path"] == str(bad)
    assert (rejected["rows_in"], rejected["rows_curated"], rejected["rows_quarantined"]) == (4, 1, 3)
    assert rejected["published_manifest"] == published
    rejected_rows = spark.read.parquet(rejected["quarantine_partition"])
    assert rejected_rows.count() == 3

    # The next published drop of the day replaces everything and clears the rejected record.
    run_ingest(spark, tmp_path, write_csv(tmp_path / "next" / "x.csv", [line("5")]))
    assert read_json(published)["rows_in"] == 1
    assert not Path(rejected_manifest_path(published)).exists()
    assert not Path(rejected["quarantine_partition"]).exists()


def test_curated_parquet_footer_carries_the_tensor_layout(spark, tmp_path):
    """The registry gate reads a partition's layout from the footer, without its data."""
    run_ingest(spark, tmp_path, write_csv(tmp_path / "raw" / "x.csv", [line("1"), line("2")]))
    files = sorted((tmp_path / "curated" / "ds=2026-11-28").glob("*.parquet"))
    assert files
    for file in files:
        assert tensor_metadata_of_parquet_schema(pq.read_schema(file)) == {"dtype": "uint8", "shape": [28, 28]}
    assert spark.read.parquet(str(tmp_path / "curated")).schema["features"].metadata["ml_tensor"]["shape"] == [28, 28]


def test_an_unknown_workflow_is_a_one_line_error_before_spark_starts(monkeypatch, caplog):
    def no_spark(*args, **kwargs):
        raise AssertionError("Spark started")

    monkeypatch.setattr("spark_jobs.ingest.build_spark_session", no_spark)
    args = ["--workflow", "nope", "--ds", "2026-11-28", "--raw-path", "r", "--curated-root", "c"]
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--quarantine-root", "q"])
    assert exit_info.value.code == 1
    assert f"ingest failed: no workflow 'nope': declared are {', '.join(workflows.available())}" in caplog.text


# --- the diabetes workflow: float32 label and ten named float32 columns -----------------

DIABETES_FIELDS = DIABETES.raw_fields
DIABETES_HEADER = ",".join(DIABETES_FIELDS)
PATIENT = {
    "progression": "151.5",
    "age": "59",
    "sex": "2",
    "bmi": "32.1",
    "bp": "101",
    "s1": "157",
    "s2": "93.2",
    "s3": "38",
    "s4": "4",
    "s5": "4.8598",
    "s6": "87",
}


def patient(**fields: str) -> str:
    assert set(fields) <= set(PATIENT)
    return ",".join({**PATIENT, **fields}[name] for name in DIABETES_FIELDS)


def diabetes_reasons(spark, lines: list[str]) -> list[str | None]:
    return reasons(spark, lines, DIABETES)


def test_a_valid_patient_has_no_reason(spark):
    lines = [
        patient(),
        patient(bmi="2.5e1", s5="+4.5", age=" 60 "),
        patient(progression="0", s4="20"),
        patient(progression="500.0", sex="0"),
        patient(bmi="5", s1=".5", s2="7."),
        patient(s3="-0"),
    ]
    assert diabetes_reasons(spark, lines) == [None] * len(lines)


BAD_PATIENTS = [
    (patient(bmi="90.1"), "bmi out of range 5..80: 90.1"),
    (patient(bmi="4.99"), "bmi out of range 5..80: 4.99"),
    (patient(age="-1"), "age out of range 0..120: -1"),
    (patient(s4="20.000001"), "s4 out of range 0..20: 20.000001"),
    (patient(s6="1e999"), "s6 out of range 0..250: 1e999"),
    (patient(progression="500.5"), "progression out of range 0..500: 500.5"),
    (patient(progression="-3"), "progression out of range 0..500: -3"),
    (patient(progression="x"), "progression is empty or not a number: 'x'"),
    (patient(progression=""), "progression is empty or not a number: ''"),
    (patient(progression="NaN"), "progression is not a finite number: 'NaN'"),
    (patient(bmi="nan"), "bmi is not a finite number: 'nan'"),
    (patient(bmi="inf"), "bmi is not a finite number: 'inf'"),
    (patient(s1="-Infinity"), "s1 is not a finite number: '-Infinity'"),
    (patient(s3=""), "s3 is empty or not a number: ''"),
    (patient(s2="1.5f"), "s2 is empty or not a number: '1.5f'"),
    (patient(s2="0x1p3"), "s2 is empty or not a number: '0x1p3'"),
    (patient(s2="1,5"), "wrong field count: expected 11, got 12"),
    (patient(s2="1.2.3"), "s2 is empty or not a number: '1.2.3'"),
    (patient(s2="-"), "s2 is empty or not a number: '-'"),
    (patient(s2="1_0"), "s2 is empty or not a number: '1_0'"),
    (",".join(PATIENT.values()) + ",1", "wrong field count: expected 11, got 12"),
    (DIABETES_HEADER, STRAY_HEADER),
    (patient() + "\u2028", "line separator U+2028 in the row: a line break no CSV reader agrees on"),
    (patient(bmi="3\x002"), "control character U+0000 in the row: binary data or a non-UTF-8 encoding"),
]


@pytest.mark.parametrize(("raw", "expected"), BAD_PATIENTS)
def test_bad_patients_name_the_rule_and_the_column(bad_line_reasons, raw, expected):
    assert bad_line_reasons["diabetes"][raw] == expected


def test_float_fast_path_decides_exactly_as_the_full_checks(spark):
    lines = [
        patient(),
        patient(bmi="25.", s1="0.5", s3="-0"),
        patient(bmi="1-2"),  # fast-path characters, not a number
        patient(bmi="--5"),
        patient(bmi="."),
        patient(bmi="90"),
        patient(progression="-1"),
        patient(bmi="2.5e1"),  # valid, the long way
        patient(bmi=" 25"),
        patient(bmi="+25"),
        patient(bmi="NaN"),
        patient(s6=""),
        patient() + ",",
        "," + patient(),
        "\ufeff" + patient(),
    ]
    fast = checked_rows(spark, lines, fast_path=True, workflow=DIABETES)
    slow = checked_rows(spark, lines, fast_path=False, workflow=DIABETES)
    assert [r[0] for r in fast] == lines
    assert [r[2:] for r in fast] == [r[2:] for r in slow]
    assert [r[1] for r in fast] == [True, True] + [False] * (len(lines) - 2)
    valid = [True, True, False, False, False, False, False, True, True, True, False, False, False, False, True]
    assert [r[4] is None for r in fast] == valid


def test_diabetes_rows_are_accounted_for_and_decode_to_the_parsed_float32(spark, tmp_path):
    good = [
        patient(),
        patient(progression="25.123456789", bmi="33.333333333", s5="4.1e0"),
        patient(progression="7.77", age="18.000000000000001", s1="299.99997", s4="0.1"),
    ]
    bad = [patient(bmi="90.1"), patient(s3="nan"), "1,2"]
    raw = write_csv(tmp_path / "raw" / "diabetes.csv", [DIABETES_HEADER, *good, "", *bad])
    report = run_ingest(spark, tmp_path, raw, workflow=DIABETES)
    assert (report.rows_in, report.rows_curated, report.rows_quarantined) == (6, 3, 3)
    assert report.sample_reasons == [
        "bmi out of range 5..80: 90.1",
        "s3 is not a finite number: 'nan'",
        "wrong field count: expected 11, got 2",
    ]
    table = pq.read_table(tmp_path / "curated" / "ds=2026-11-28")
    assert str(table.schema.field("label").type) == "float"
    labels, features = table.column("label").to_pylist(), decode(table.column("features"), DIABETES.features)
    by_label = dict(zip(labels, features, strict=True))
    assert len(by_label) == 3
    for row in good:
        values = np.array([float(v) for v in row.split(",")], dtype=np.float32)
        features = by_label[float(values[0])]
        assert features.dtype == np.float32 and features.shape == (10,)
        assert features.tobytes() == values[1:].tobytes()  # bit for bit
    for file in (tmp_path / "curated" / "ds=2026-11-28").glob("*.parquet"):
        assert tensor_metadata_of_parquet_schema(pq.read_schema(file)) == {"dtype": "float32", "shape": [10]}
    assert quarantine_reasons(spark, tmp_path) == sorted(report.sample_reasons)


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        (["age", "progression", *DIABETES_FIELDS[2:]], "the expected columns in another order"),
        (["target", *DIABETES_FIELDS[1:]], "column 1 is 'target', expected 'progression'"),
        (DIABETES_FIELDS[:-1], "10 columns, expected 11"),
        (RAW_COLS, "785 columns, expected 11"),
    ],
    ids=["label second", "other label name", "a column missing", "an MNIST header"],
)
def test_a_diabetes_header_must_be_the_workflows_fields(spark, tmp_path, header, detail):
    raw = write_csv(tmp_path / "raw" / "day.csv", [",".join(header), patient()])
    with pytest.raises(
        IngestError,
        match=rf"day\.csv has the header .*: {detail}.*Expected no header or "
        r"progression,age,sex,\.\.\.,s6 \(11 columns\) in that order \(workflow diabetes\)",
    ):
        run_ingest(spark, tmp_path, raw, workflow=DIABETES)
    assert not (tmp_path / "curated").exists()


def test_a_diabetes_header_in_any_letter_case_is_the_header(spark, tmp_path):
    raw = write_csv(tmp_path / "raw" / "day.csv", [DIABETES_HEADER.upper(), patient(), patient(age="60")])
    report = run_ingest(spark, tmp_path, raw, workflow=DIABETES)
    assert (report.rows_in, report.rows_curated) == (2, 2)
