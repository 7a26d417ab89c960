"""Bad input at ingest, and an ingest killed while it replaces a partition.

The story of one day's partition (``STORY_DS``), shared by the assertions below, every
step a real ``spark-submit`` of the ingest entry point:

1. a drop of good rows, one row for each way a row can be malformed, and the odd but valid
   shapes (header, blank lines, CRLF, UTF-8 byte-order mark, gzip, spaces) is published;
2. a drop whose gzip file is truncated fails, naming the file; the partition is untouched;
3. a clean replacement drop is SIGKILLed (its whole process group) once it has written
   data files of the new partition, before it can commit them (the test holds the dataset's
   swap lock meanwhile); the previous partition is still there, same rows, no duplicates;
4. the replacement re-run publishes exactly its rows.

Unreadable files (wrong encoding, broken archives, empty drops) are also tried through
``ingest_partition`` on an in-process Spark session: same code, no JVM start per case.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pyarrow.dataset as pads
import pytest

from faults_support import WORKFLOW, wait_for_no_orphans
from spark_jobs import partitions, sample_data, workflows
from spark_jobs.ingest import SNIFF_BYTES, IngestError, ingest_manifest_path, ingest_partition, rejected_manifest_path

MNIST = workflows.load(WORKFLOW)
RAW_COLS = MNIST.raw_fields
PIXEL_COLS = MNIST.features.raw_fields
STORY_DS = "2026-10-05"
HEADER = ",".join(RAW_COLS)
ZEROS = ["0"] * 784


def row(label: str = "3", pixels: list[str] | None = None, sep: str = ",") -> str:
    return sep.join([label, *(pixels if pixels is not None else ZEROS)])


def with_pixel(index: int, value: str) -> list[str]:
    pixels = list(ZEROS)
    pixels[index] = value
    return pixels


LINE_SEPARATOR = "line separator U+{:04X} in the row: a line break no CSV reader agrees on"

# (what is wrong, the raw line, the reason ingest must give). Each one is a distinct bad input.
BAD_ROWS = [
    ("too few fields", "1,2,3", "wrong field count: expected 785, got 3"),
    ("too many fields", row() + ",0", "wrong field count: expected 785, got 786"),
    ("label not a number", row(label="seven"), "label is empty or not an integer: 'seven'"),
    ("label empty", row(label=""), "label is empty or not an integer: ''"),
    ("label above 9", row(label="10"), "label out of range 0..9: 10"),
    ("label negative", row(label="-1"), "label out of range 0..9: -1"),
    ("pixel not a number", row(pixels=with_pixel(5, "abc")), "pixel5 is empty or not an integer: 'abc'"),
    ("pixel empty (null)", row(pixels=with_pixel(783, "")), "pixel783 is empty or not an integer: ''"),
    ("pixel above 255", row(pixels=with_pixel(10, "256")), "pixel10 out of range 0..255: 256"),
    ("pixel negative", row(pixels=with_pixel(0, "-3")), "pixel0 out of range 0..255: -3"),
    ("pixel a decimal", row(pixels=with_pixel(1, "1.5")), "pixel1 is empty or not an integer: '1.5'"),
    (
        "pixel overflows int",
        row(pixels=with_pixel(2, "99999999999")),
        "pixel2 is empty or not an integer: '99999999999'",
    ),
    ("quoted fields", ",".join(f'"{v}"' for v in ["3", *ZEROS]), "label is empty or not an integer: '\"3\"'"),
    ("semicolon separated", row(sep=";"), "wrong field count: expected 785, got 1"),
    ("tab separated", row(sep="\t"), "wrong field count: expected 785, got 1"),
    ("every field empty", ",".join([""] * 785), "label is empty or not an integer: ''"),
    (
        "NUL byte inside a row",
        "3\x00," + ",".join(ZEROS),
        "control character U+0000 in the row: binary data or a non-UTF-8 encoding",
    ),
    (
        "Latin-1 byte, invalid UTF-8",
        row(pixels=with_pixel(4, "\xe9")).encode("latin-1"),
        "invalid UTF-8 in the row: a non-UTF-8 encoding (Latin-1, Windows-1252, ...)",
    ),
    # Java's "$" matched before these, and the strict cast then failed the whole job.
    ("row ending in LINE SEPARATOR", row() + "\u2028", LINE_SEPARATOR.format(0x2028)),
    ("row ending in PARAGRAPH SEPARATOR", row() + "\u2029", LINE_SEPARATOR.format(0x2029)),
    ("row ending in NEXT LINE (NEL)", row() + "\u0085", LINE_SEPARATOR.format(0x85)),
    (
        "header line in the middle of a file",
        HEADER,
        "a header line (column names) inside the file: only a file's first line can be its header",
    ),
]
# Odd but valid: these rows must all be curated.
GOOD_ROWS, GZIP_ROWS, BOM_ROWS = 60, 20, 10


def csv_lines(ds: str, rows: int, seed: int) -> list[str]:
    return sample_data.csv_lines(MNIST, *sample_data.make_rows(MNIST, ds, rows, seed=seed))


def write_story_drop(folder: Path) -> dict[str, int]:
    """Three files; the bad rows sit after SNIFF_BYTES of good ones (the file check reads the head)."""
    folder.mkdir(parents=True, exist_ok=True)
    good = csv_lines(STORY_DS, GOOD_ROWS, seed=1)
    body = "\n".join([HEADER, *good, "", "   "]) + "\n"
    assert len(body.encode()) > SNIFF_BYTES, "bad rows must come after the sniffed head"
    bad = b"".join((line if isinstance(line, bytes) else line.encode()) + b"\n" for _, line, _ in BAD_ROWS)
    (folder / "a.csv").write_bytes(body.encode() + bad)
    crlf = "\r\n".join([HEADER, *csv_lines(STORY_DS, GZIP_ROWS, seed=2)]) + "\r\n"
    (folder / "b.csv.gz").write_bytes(gzip.compress(crlf.encode()))
    spaced = [" " + line.replace(",", " , ", 3) + " " for line in csv_lines(STORY_DS, BOM_ROWS, seed=3)]
    (folder / "c.csv").write_bytes(b"\xef\xbb\xbf" + ("\n".join([HEADER, *spaced]) + "\n").encode())
    return {"good": GOOD_ROWS + GZIP_ROWS + BOM_ROWS, "bad": len(BAD_ROWS)}


def partition(root: Path, ds: str, columns: list[str] | None = None):
    return pads.dataset(str(root / f"ds={ds}"), format="parquet").to_table(columns=columns)


def curated_ids(fs, ds: str) -> list[int]:
    return partition(fs.dataset("curated"), ds, ["row_id"]).column("row_id").to_pylist()


def read_manifest(fs, ds: str) -> dict:
    return json.loads(Path(ingest_manifest_path(str(fs.dataset("curated")), ds)).read_text())


@pytest.fixture(scope="module")
def story(faults_stack, tmp_path_factory):
    fs, jobs = faults_stack, faults_stack.jobs
    drops = tmp_path_factory.mktemp("drops")
    seen: dict = {}

    # 1. the mixed drop, published with a generous bad-row ratio
    seen["expected"] = write_story_drop(drops / "mixed")
    job = jobs.run("ingest", fs.ingest_args(STORY_DS, drops / "mixed", "--max-bad-ratio", "0.5"))
    assert job.returncode == 0, job.output[-4000:]
    seen["published"] = {
        "ids": curated_ids(fs, STORY_DS),
        "quarantine": partition(fs.dataset("quarantine"), STORY_DS).to_pylist(),
        "manifest": read_manifest(fs, STORY_DS),
    }

    # 2. a gzip file cut in half: readable head, broken stream further on
    broken = drops / "truncated"
    broken.mkdir()
    payload = gzip.compress(("\n".join(csv_lines(STORY_DS, 200, seed=4)) + "\n").encode())
    (broken / "day.csv.gz").write_bytes(payload[: len(payload) // 2])
    job = jobs.run("ingest", fs.ingest_args(STORY_DS, broken))
    seen["truncated"] = {
        "rc": job.returncode,
        "output": job.output,
        "ids": curated_ids(fs, STORY_DS),
        "manifest": read_manifest(fs, STORY_DS),
    }

    # 3. a clean, bigger replacement, killed (SIGKILL to its process group) once it has
    # written data files of the new partition. Meanwhile the test holds the dataset's swap
    # lock, as a writer swapping its own days would: the job stages its whole output and then
    # waits for the lock, so it is still before its commit whenever the test sees the files.
    replacement = drops / "replacement"
    replacement.mkdir()
    replacement_rows = 3000
    (replacement / "day.csv").write_text("\n".join([HEADER, *csv_lines(STORY_DS, replacement_rows, seed=5)]) + "\n")
    curated_root = fs.dataset("curated")
    with partitions._LocalTree(str(curated_root), str(curated_root)).swap_lock("faults-test-writer"):
        job = jobs.start("ingest", fs.ingest_args(STORY_DS, replacement))
        deadline = time.monotonic() + 600
        while True:
            # A data file of the new partition in the replacement's staging area.
            part_file = next(iter(curated_root.glob("_staging/*/data/**/*.parquet")), None)
            if part_file is not None or job.returncode is not None or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        running_when_killed = job.returncode is None
        if running_when_killed:
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    seen["killed"] = {
        "caught_before_commit": part_file is not None and running_when_killed,
        "output": job.output,
        "orphans": wait_for_no_orphans(job.marker, timeout=30),
        "ids": curated_ids(fs, STORY_DS),
        "manifest": read_manifest(fs, STORY_DS),
        "leftover_staging": sorted(p.name for p in curated_root.glob("_staging/*")),
        # What a reader of the whole dataset sees (staging and manifest folders are hidden).
        "dataset_rows": pads.dataset(str(curated_root), format="parquet", partitioning="hive")
        .to_table(columns=["row_id"], filter=pads.field("ds") == STORY_DS)
        .num_rows,
    }

    # 4. the replacement again, to completion
    job = jobs.run("ingest", fs.ingest_args(STORY_DS, replacement))
    assert job.returncode == 0, job.output[-4000:]
    quarantine_dir = fs.dataset("quarantine") / f"ds={STORY_DS}"
    seen["rerun"] = {
        "rows": replacement_rows,
        "ids": curated_ids(fs, STORY_DS),
        "quarantine_rows": partition(fs.dataset("quarantine"), STORY_DS).num_rows if quarantine_dir.exists() else 0,
        "manifest": read_manifest(fs, STORY_DS),
    }
    return seen


def test_every_malformed_row_is_quarantined_with_its_reason(story):
    quarantine = story["published"]["quarantine"]
    assert Counter(r["reason"] for r in quarantine) == Counter(reason for _, _, reason in BAD_ROWS)
    assert {Path(r["source_file"]).name for r in quarantine} == {"a.csv"}


def test_odd_but_valid_shapes_are_curated_and_rows_accounted_for(story):
    published, expected = story["published"], story["expected"]
    manifest = published["manifest"]
    assert len(published["ids"]) == expected["good"]  # header, blanks, CRLF, BOM, gzip, spaces
    assert len(set(published["ids"])) == len(published["ids"])
    assert manifest["outcome"] == "published"
    assert (manifest["rows_in"], manifest["rows_curated"], manifest["rows_quarantined"]) == (
        expected["good"] + expected["bad"],
        expected["good"],
        expected["bad"],
    )
    assert manifest["rows_in"] == manifest["rows_curated"] + manifest["rows_quarantined"]
    assert manifest["sample_reasons"] and set(manifest["sample_reasons"]) <= {r for _, _, r in BAD_ROWS}
    assert len(manifest["input_files"]) == 3


def test_truncated_gzip_fails_naming_the_file_and_keeps_the_partition(story):
    truncated, published = story["truncated"], story["published"]
    assert truncated["rc"] != 0
    assert "ingest failed: cannot read raw file" in truncated["output"]
    assert "day.csv.gz: java.io.EOFException: Unexpected end of input stream" in truncated["output"]
    assert sorted(truncated["ids"]) == sorted(published["ids"])
    assert truncated["manifest"] == published["manifest"]


def test_ingest_killed_mid_write_leaves_the_previous_partition(story):
    killed, published = story["killed"], story["published"]
    assert killed["caught_before_commit"], "the job ended, or wrote nothing, before it could be killed"
    assert sorted(killed["ids"]) == sorted(published["ids"]), "previous partition changed or lost rows"
    assert killed["dataset_rows"] == len(published["ids"])  # the half-written staging files are not read
    assert killed["manifest"] == published["manifest"]
    assert killed["orphans"] == []


def test_rerun_after_the_kill_publishes_exactly_the_new_rows(story):
    rerun = story["rerun"]
    assert len(rerun["ids"]) == rerun["rows"]
    assert len(set(rerun["ids"])) == rerun["rows"]
    # A clean drop replaces the day's quarantine too: no stale rejects from the first drop.
    assert rerun["quarantine_rows"] == 0
    manifest = rerun["manifest"]
    assert (manifest["rows_in"], manifest["rows_curated"], manifest["rows_quarantined"]) == (
        rerun["rows"],
        rerun["rows"],
        0,
    )


# --- unreadable and empty drops, in-process -----------------------------------------------


FILE_DS = "2026-10-06"


@pytest.fixture(scope="module")
def previous_partition(ingest_spark, tmp_path_factory):
    """Roots holding a good partition for FILE_DS, which no failed ingest may touch."""
    roots = tmp_path_factory.mktemp("file-cases")
    good = roots / "good"
    good.mkdir()
    (good / "day.csv").write_text("\n".join([HEADER, *csv_lines(FILE_DS, 25, seed=6)]) + "\n")
    report = run_ingest(ingest_spark, roots, good)
    assert report.rows_curated == 25
    return roots


def run_ingest(spark, roots: Path, raw: Path, max_bad_ratio: float = 0.05):
    return ingest_partition(
        spark,
        workflow=MNIST,
        raw_path=str(raw),
        ds=FILE_DS,
        curated_root=str(roots / "curated"),
        quarantine_root=str(roots / "quarantine"),
        max_bad_ratio=max_bad_ratio,
    )


def _utf16(folder: Path) -> None:
    (folder / "day.csv").write_bytes(("\n".join([HEADER, row()]) + "\n").encode("utf-16"))


def _utf16_no_bom(folder: Path) -> None:
    (folder / "day.csv").write_bytes(("\n".join([HEADER, row()]) + "\n").encode("utf-16-le"))


def _binary(folder: Path) -> None:
    (folder / "day.csv").write_bytes(random.Random(7).randbytes(20_000))


def _latin1(folder: Path) -> None:
    (folder / "day.csv").write_bytes(("label;comment\n3;caf\xe9\n").encode("latin-1"))


def _parquet(folder: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"label": [3], "pixel0": [0]}), folder / "day.csv")


def _gzip_cut_in_header(folder: Path) -> None:
    (folder / "day.csv.gz").write_bytes(gzip.compress((row() + "\n").encode())[:15])


def _not_gzip(folder: Path) -> None:
    (folder / "day.csv.gz").write_text(row() + "\n")


def _empty_file(folder: Path) -> None:
    (folder / "day.csv").write_bytes(b"")


def _header_only(folder: Path) -> None:
    (folder / "day.csv").write_text(HEADER + "\n\n")


def _no_files(folder: Path) -> None:
    pass


def _good_and_utf16(folder: Path) -> None:
    (folder / "a.csv").write_text(row() + "\n")
    (folder / "b.csv").write_bytes((row() + "\n").encode("utf-16"))


def _mostly_bad(folder: Path) -> None:
    (folder / "day.csv").write_text("\n".join([row(), row(label="11"), "1,2", row(pixels=with_pixel(3, "x"))]) + "\n")


def _nothing_valid(folder: Path) -> None:
    (folder / "day.csv").write_text("\n".join(["1,2", row(label="x")]) + "\n")


def _header(names: list[str]):
    def write(folder: Path) -> None:
        (folder / "day.csv").write_text("\n".join([",".join(names), row(), row()]) + "\n")

    return write


# (what is wrong, how to write it, the error it must raise, the bad-row ratio allowed)
BAD_FILES = [
    ("UTF-16 with byte-order mark", _utf16, r"day\.csv is UTF-16 \(little-endian\) text", 0.05),
    ("UTF-16 without byte-order mark", _utf16_no_bom, r"day\.csv contains a NUL byte at offset 1", 0.05),
    ("binary garbage", _binary, r"day\.csv (contains a NUL byte|is not UTF-8 text)", 0.05),
    ("Latin-1 text", _latin1, r"day\.csv is not UTF-8 text \(byte 0xe9 at offset 19", 0.05),
    ("Parquet file named .csv", _parquet, r"day\.csv (contains a NUL byte|is not UTF-8 text)", 0.05),
    (
        "gzip cut inside its header",
        _gzip_cut_in_header,
        r"cannot read raw file \S+day\.csv\.gz: java\.io\.EOFException",
        0.05,
    ),
    (
        "plain text named .gz",
        _not_gzip,
        r"cannot read raw file \S+day\.csv\.gz: java\.io\.IOException: not a gzip file",
        0.05,
    ),
    ("empty file", _empty_file, r"holds no data rows", 0.05),
    ("header only", _header_only, r"holds no data rows", 0.05),
    ("folder without files", _no_files, r"holds no data rows", 0.05),
    ("one good file, one UTF-16 file", _good_and_utf16, r"b\.csv is UTF-16", 0.05),
    ("too many bad rows", _mostly_bad, r"3 of 4 rows rejected \(75\.0% > max_bad_ratio 5\.0%\).*Examples", 0.05),
    ("no valid row at all", _nothing_valid, r"no valid rows", 1.0),
    (
        "header pixel1..pixel784,class",
        _header([*[f"pixel{i}" for i in range(1, 785)], "class"]),
        r"day\.csv has the header pixel1,pixel2,pixel3,\.\.\.,class \(785 columns\): "
        r"column 1 is 'pixel1', expected 'label'",
        0.05,
    ),
    (
        "header with label last",
        _header([*PIXEL_COLS, "label"]),
        r"day\.csv has the header .*: the expected columns in another order \(column 1 is 'pixel0', expected 'label'\)",
        0.05,
    ),
    (
        "header with pixels in another order",
        _header(["label", *reversed(PIXEL_COLS)]),
        r"day\.csv has the header .*: the expected columns in another order "
        r"\(column 2 is 'pixel783', expected 'pixel0'\)",
        0.05,
    ),
    (
        "header of other names",
        _header(["y", *[f"x{i}" for i in range(784)]]),
        r"day\.csv has the header y,x0,x1,\.\.\.,x783 \(785 columns\): column 1 is 'y', expected 'label'",
        0.05,
    ),
]


COUNTED = {"too many bad rows", "no valid row at all"}


@pytest.mark.parametrize(("case", "write", "error", "max_bad_ratio"), BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_unreadable_or_empty_drop_fails_clearly_and_keeps_the_partition(
    ingest_spark, previous_partition, tmp_path, case, write, error, max_bad_ratio
):
    roots = previous_partition
    manifest = Path(ingest_manifest_path(str(roots / "curated"), FILE_DS))
    manifest_before = manifest.read_text()
    raw = tmp_path / "drop"
    raw.mkdir()
    write(raw)
    with pytest.raises(IngestError, match=error):
        run_ingest(ingest_spark, roots, raw, max_bad_ratio)
    # The day still describes the published drop: its rows, no rejects, its manifest.
    curated = partition(roots / "curated", FILE_DS, ["row_id"])
    assert curated.num_rows == 25 and len(set(curated.column("row_id").to_pylist())) == 25
    assert not (roots / "quarantine" / f"ds={FILE_DS}").exists()
    assert manifest.read_text() == manifest_before
    rejected_record = Path(rejected_manifest_path(str(manifest)))
    if case in COUNTED:  # its rows were counted: recorded as a rejected drop beside the manifest
        rejected = json.loads(rejected_record.read_text())
        assert rejected["outcome"] == "rejected"
        assert rejected["rows_in"] == rejected["rows_curated"] + rejected["rows_quarantined"]
        assert partition(roots / "quarantine" / "_rejected", FILE_DS).num_rows == rejected["rows_quarantined"]
        rejected_record.unlink()
    else:
        assert not rejected_record.exists()


def test_missing_drop_fails_clearly(ingest_spark, previous_partition, tmp_path):
    with pytest.raises(IngestError, match=r"raw drop \S+nowhere does not exist"):
        run_ingest(ingest_spark, previous_partition, tmp_path / "nowhere")
    assert partition(previous_partition / "curated", FILE_DS, ["row_id"]).num_rows == 25


def test_an_unknown_workflow_fails_the_job_in_one_line(faults_stack, tmp_path):
    """The DAGs pass ``--workflow``; a name no declaration has stops the job before its
    SparkSession: one error line naming it, no traceback, exit status 1."""
    job = faults_stack.jobs.run("ingest", faults_stack.ingest_args(FILE_DS, tmp_path, workflow="nope"))
    assert job.returncode == 1, job.output[-4000:]
    errors = [line for line in job.output.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "ingest failed: no workflow 'nope'" in errors[0], job.output[-4000:]
    assert "Traceback" not in job.output
