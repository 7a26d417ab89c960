"""The drift check's statistics: calibrated false alarms, power, the family-wise rate, the
stored formats, untrusted day values, row summaries and the picture.

Rates are measured over hundreds of simulated days, each against a fresh reference (with
one fixed reference the days would not be independent trials), and judged against the
declared rate plus three binomial standard errors. Seeds are fixed: every run draws the
same days.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs import drift

RATE = 0.05
DAYS = 400
REFERENCE_ROWS = 2000  # above the 1024 kept quantiles: the compressed reference is tested
CLASS_SHARES = np.array([0.3, 0.2, 0.15, 0.1, 0.08, 0.07, 0.05, 0.03, 0.015, 0.005])
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FUZZ = settings(
    max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def within_rate(alarms: int, days: int, rate: float = RATE) -> bool:
    """Whether ``alarms`` of ``days`` is at most the rate plus 3 binomial standard errors."""
    return alarms / days <= rate + 3 * math.sqrt(rate * (1 - rate) / days)


def alarm_count(draw, days: int, n: int, *, classes: int | None = None, rng: np.random.Generator) -> int:
    """Days of ``n`` rows alarmed, each compared with a fresh reference of the same distribution."""
    categorical = {"s": classes} if classes else None
    alarms = 0
    for _ in range(days):
        reference = drift.build_reference({"s": draw(rng, REFERENCE_ROWS)}, categorical=categorical)
        alarms += drift.compare(reference, {"s": draw(rng, n)}, false_alarm_rate=RATE).outcome == drift.DRIFT
    return alarms


def normal(rng, size):
    return rng.normal(size=size)


def zero_one(rng, size):
    return (rng.random(size) < 0.3).astype(np.float32)


def predicted_class(rng, size):
    return rng.choice(len(CLASS_SHARES), size=size, p=CLASS_SHARES)


# --- calibration and power ----------------------------------------------------------------
@pytest.mark.parametrize("n", [100, 1000, 20_000])
@pytest.mark.parametrize(
    "draw, classes", [(normal, None), (zero_one, None), (predicted_class, 10)], ids=["continuous", "zero_one", "class"]
)
def test_false_alarms_stay_at_the_declared_rate_whatever_the_day_size(draw, classes, n):
    alarms = alarm_count(draw, DAYS, n, classes=classes, rng=np.random.default_rng([n, DAYS]))
    assert within_rate(alarms, DAYS), f"{alarms} of {DAYS} same-distribution days alarmed"
    if draw is normal:  # calibrated, not merely conservative (a 0/1 column is, by design)
        assert alarms / DAYS >= RATE - 3 * math.sqrt(RATE * (1 - RATE) / DAYS), alarms


def test_classes_predicted_rarely_do_not_alarm_small_days():
    """A prediction of a class with 0.5 % of the reference's rows is not a shift: rare
    classes are pooled (unpooled, the chi-square test alarms on about 13 % of these days)."""
    shares = np.r_[0.96, [0.005] * 8]

    def mostly_one_class(rng, size):
        return rng.choice(len(shares), size=size, p=shares)

    alarms = alarm_count(mostly_one_class, DAYS, 30, classes=len(shares), rng=np.random.default_rng(7))
    assert within_rate(alarms, DAYS), alarms


def detection_share(shift, n: int, days: int, *, base=normal, reference_rows: int = 20_000) -> float:
    rng = np.random.default_rng([n, days, reference_rows])
    reference = drift.build_reference({"s": base(rng, reference_rows)})
    flagged = sum(
        drift.compare(reference, {"s": shift(base(rng, n))}, false_alarm_rate=RATE).outcome == drift.DRIFT
        for _ in range(days)
    )
    return flagged / days


def lab_value(rng, size):
    """A positive measurement (gamma, mean 8, sd 2.8) like the diabetes workflow's columns."""
    return rng.gamma(8.0, 1.0, size=size)


def test_a_half_sd_shift_and_a_rescale_are_detected_at_100_rows():
    assert detection_share(lambda x: x + 0.5, 100, 100) >= 0.9
    assert detection_share(lambda x: x * 1.5, 100, 100, base=lab_value) >= 0.95


def test_a_wider_spread_with_the_same_centre_needs_more_rows():
    """The Kolmogorov-Smirnov test's weak side: sd x 1.5 about the same mean moves the ECDF by
    at most 0.1, found in about two days of three at 100 rows, always at 1,000."""
    assert detection_share(lambda x: x * 1.5, 100, 100) >= 0.5
    assert detection_share(lambda x: x * 1.5, 1000, 50) >= 0.95


def test_a_small_shift_is_found_in_a_large_day_and_not_in_a_small_one():
    assert detection_share(lambda x: x + 0.05, 100_000, 5, reference_rows=100_000) == 1.0
    assert detection_share(lambda x: x + 0.05, 100, 100, reference_rows=100_000) <= 0.2


def test_more_statistics_do_not_raise_the_family_wise_rate():
    rng = np.random.default_rng(3)
    for count in (1, 10):
        alarms = uncorrected = 0
        for _ in range(DAYS):
            names = [f"f{i}" for i in range(count)]
            reference = drift.build_reference({name: rng.normal(size=500) for name in names})
            report = drift.compare(reference, {name: rng.normal(size=200) for name in names}, false_alarm_rate=RATE)
            alarms += report.outcome == drift.DRIFT
            uncorrected += min(t.p_value for t in report.tests) <= RATE
        assert within_rate(alarms, DAYS), (count, alarms)
        if count == 10:  # without the correction, ten statistics alarm about 40 % of days
            assert uncorrected / DAYS > 0.25, uncorrected


def test_what_moved_is_named_most_shifted_first_with_its_threshold():
    rng = np.random.default_rng(11)
    names = ["a", "b", "c", "d"]
    reference = drift.build_reference(
        {**{name: rng.normal(size=3000) for name in names}, "pred": predicted_class(rng, 3000)},
        categorical={"pred": 10},
    )
    day = {"a": rng.normal(size=1000), "b": rng.normal(1.0, size=1000), "c": rng.normal(0.3, size=1000)}
    day |= {"d": rng.normal(size=1000), "pred": np.zeros(1000, dtype=np.int64)}
    report = drift.compare(reference, day, false_alarm_rate=0.01)
    assert report.outcome == drift.DRIFT and report.rows == 1000
    assert report.moved == ["pred", "b", "c"]  # by effect: TV 0.7, D about 0.38, D about 0.12
    assert [t.name for t in report.tests[:3]] == report.moved
    pred = report.tests[0]
    assert pred.test == "chi2" and pred.effect == pytest.approx(0.7, abs=0.03)
    assert sorted(t.threshold for t in report.tests) == pytest.approx([0.01 / k for k in (5, 4, 3, 2, 1)])
    assert all(t.p_value <= t.threshold for t in report.tests if t.rejected)


# --- edge cases -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reference():
    rng = np.random.default_rng(0)
    return drift.build_reference(
        {"x": rng.normal(size=5000), "pred": rng.integers(0, 3, size=800)}, categorical={"pred": 3}
    )


def test_a_day_without_rows_is_no_data(reference):
    report = drift.compare(reference, {"x": np.array([]), "pred": np.array([])}, false_alarm_rate=RATE)
    assert (report.outcome, report.rows, report.tests, report.moved) == (drift.NO_DATA, 0, [], [])


def test_values_that_cannot_be_tested_are_reported_moved_with_the_reason(reference):
    x = np.random.default_rng(1).normal(size=100)
    x[[3, 50]] = [np.nan, np.inf]
    report = drift.compare(reference, {"x": x, "pred": np.r_[np.zeros(99), 7]}, false_alarm_rate=RATE)
    assert report.outcome == drift.DRIFT and sorted(report.moved) == ["pred", "x"]
    by_name = {t.name: t for t in report.tests}
    assert by_name["x"].reason == "2 of 100 day values are NaN or infinite" and by_name["x"].p_value == 0.0
    assert by_name["pred"].reason == "1 of 100 day values are not classes 0..2"
    json.dumps(report.to_json(), allow_nan=False)


def test_a_day_naming_other_statistics_is_refused(reference):
    with pytest.raises(ValueError, match=r"the day lacks \['pred'\], and has \['y'\]"):
        drift.compare(reference, {"x": np.zeros(3), "y": np.zeros(3)}, false_alarm_rate=RATE)
    with pytest.raises(ValueError, match="one value per row"):
        drift.compare(reference, {"x": np.zeros(3), "pred": np.zeros(4)}, false_alarm_rate=RATE)
    with pytest.raises(ValueError, match="false_alarm_rate"):
        drift.compare(reference, {"x": np.zeros(3), "pred": np.zeros(3)}, false_alarm_rate=5)


def test_a_reference_is_built_from_clean_values_only():
    with pytest.raises(ValueError, match="'x': 1 non-finite"):
        drift.build_reference({"x": np.array([1.0, np.nan])})
    with pytest.raises(ValueError, match="'x': expected a non-empty"):
        drift.build_reference({"x": np.array([])})
    with pytest.raises(ValueError, match=r"outside the classes 0\.\.1"):
        drift.build_reference({"p": np.array([0, 2])}, categorical={"p": 2})


# --- formats ----------------------------------------------------------------------------
def test_reference_and_report_survive_json(reference):
    text = json.dumps(reference.to_json())
    assert json.loads(text)["format"] == drift.FORMAT_VERSION
    assert drift.ReferenceProfile.from_json(json.loads(text)) == reference
    rng = np.random.default_rng(2)
    report = drift.compare(reference, {"x": rng.normal(size=50), "pred": rng.integers(0, 3, 50)}, false_alarm_rate=RATE)
    assert drift.DriftReport.from_json(json.loads(json.dumps(report.to_json(), allow_nan=False))) == report


def test_a_profile_of_ten_statistics_over_100000_rows_is_under_100_kb():
    rng = np.random.default_rng(4)
    reference = drift.build_reference({f"f{i}": rng.normal(size=100_000) for i in range(10)})
    assert len(json.dumps(reference.to_json())) < 100_000
    assert all(len(s.quantiles or ()) == drift.DEFAULT_QUANTILES for s in reference.statistics.values())


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda d: {**d, "format": 2}, "format version 2"),
        (lambda d: {**d, "statistics": {"x": {**d["statistics"]["x"], "count": 3}}}, "quantiles for 3 values"),
        (
            lambda d: {
                **d,
                "statistics": {
                    "x": {"kind": "continuous", "count": 5, "quantiles": {"dtype": "float32", "base64": "!!"}}
                },
            },
            "not base64",
        ),  # noqa: E501
        (lambda d: {**d, "statistics": {"pred": {**d["statistics"]["pred"], "count": 1}}}, "add up to 800"),
    ],
)
def test_a_malformed_profile_is_refused(reference, mangle, message):
    with pytest.raises(ValueError, match=message):
        drift.ReferenceProfile.from_json(mangle(reference.to_json()))


# --- untrusted values -----------------------------------------------------------------
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
# Few distinct values make ties; tiny, huge and subnormal magnitudes come with `finite`.
values = st.one_of(
    st.lists(finite, min_size=1, max_size=60),
    st.lists(st.sampled_from([0.0, 1.0, -2.5, 1e300]), min_size=1, max_size=60),
).map(np.array)


@FUZZ
@given(reference_values=values, day_values=values, quantiles=st.integers(2, 16))
def test_any_finite_values_compare_with_p_values_in_range(reference_values, day_values, quantiles):
    reference = drift.build_reference({"s": reference_values}, quantiles=quantiles)
    report = drift.compare(reference, {"s": day_values}, false_alarm_rate=RATE)
    (test,) = report.tests
    assert 0.0 <= test.p_value <= 1.0 and 0.0 <= test.effect <= 1.0
    assert report.outcome in (drift.DRIFT, drift.NO_DRIFT)
    assert drift.ReferenceProfile.from_json(json.loads(json.dumps(reference.to_json()))) == reference


@FUZZ
@given(source=values, quantiles=st.integers(2, 2048))
def test_a_reference_never_finds_drift_in_its_own_values(source, quantiles):
    reference = drift.build_reference({"s": source}, quantiles=quantiles)
    report = drift.compare(reference, {"s": source}, false_alarm_rate=0.5)
    assert report.outcome == drift.NO_DRIFT and report.tests[0].effect == 0.0


@FUZZ
@given(
    reference_labels=st.lists(st.integers(0, 4), min_size=1, max_size=80),
    day_labels=st.lists(st.integers(-1, 5), min_size=1, max_size=80),
)
def test_any_class_predictions_compare_and_their_own_never_drift(reference_labels, day_labels):
    reference = drift.build_reference({"p": np.array(reference_labels)}, categorical={"p": 5})
    (test,) = drift.compare(reference, {"p": np.array(day_labels)}, false_alarm_rate=RATE).tests
    assert 0.0 <= test.p_value <= 1.0 and 0.0 <= test.effect <= 1.0
    own = drift.compare(reference, {"p": np.array(reference_labels)}, false_alarm_rate=RATE)
    assert own.outcome == drift.NO_DRIFT


# --- row summaries, columns, the picture --------------------------------------------------
def test_row_summaries_match_a_per_row_loop():
    rng = np.random.default_rng(5)
    images = (rng.random((drift.SUMMARY_CHUNK_ROWS + 37, 6, 5)) < 0.4) * rng.integers(0, 256, (1, 6, 5))
    images = images.astype(np.uint8)
    summaries = drift.row_summaries(images, drift.SUMMARIES)
    for name, summary in (("mean", np.mean), ("std", np.std), ("nonzero", lambda r: np.count_nonzero(r) / r.size)):
        expected = np.array([summary(row.astype(np.float64)) for row in images])
        np.testing.assert_allclose(summaries[name], expected, rtol=1e-12, atol=1e-12)
    assert list(drift.row_summaries(images[:0], ["std"])) == ["std"]
    with pytest.raises(ValueError, match=r"unknown row summaries \['max'\]"):
        drift.row_summaries(images, ["max"])


@FUZZ
@given(
    dtype=st.sampled_from([np.uint8, np.int8, np.uint16, np.int16, np.float32, np.float64]),
    shape=st.tuples(st.integers(0, 40), st.integers(1, 30), st.integers(1, 3)),
    seed=st.integers(0, 2**32 - 1),
    subset=st.lists(st.sampled_from(list(drift.SUMMARIES)), min_size=1, unique=True),
)
def test_row_summaries_of_any_layout_match_float64_numpy(dtype, shape, seed, subset):
    """The integer path (sums of values and squares, no float64 copy) and the float path
    agree with numpy's float64 mean, std and share of non-zero elements of each row."""
    info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else None
    rng = np.random.default_rng(seed)
    values = (rng.integers(info.min, info.max, shape, endpoint=True) if info else rng.normal(0, 1e3, shape)) * (
        rng.random(shape) < 0.5
    )
    rows = values.astype(dtype)
    got = drift.row_summaries(rows, subset)
    flat = rows.reshape(len(rows), math.prod(shape[1:])).astype(np.float64)
    expected = {
        "mean": flat.mean(axis=1),
        "std": flat.std(axis=1),
        "nonzero": np.count_nonzero(flat, axis=1) / flat.shape[1],
    }
    assert list(got) == subset
    for name in subset:
        scale = max(1.0, float(np.abs(flat).max(initial=0.0)))
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-9, atol=1e-9 * scale)


def test_tabular_columns_are_named_views():
    rows = np.arange(12, dtype=np.float32).reshape(4, 3)
    columns = drift.tabular_columns(rows, ["a", "b", "c"])
    np.testing.assert_array_equal(columns["b"], [1, 4, 7, 10])
    with pytest.raises(ValueError, match="2 columns"):
        drift.tabular_columns(rows, ["a", "b"])
    with pytest.raises(ValueError, match="repeat"):
        drift.tabular_columns(rows, ["a", "b", "a"])


def test_the_plot_is_a_png_of_the_most_shifted_statistics(reference, tmp_path):
    rng = np.random.default_rng(6)
    day = {"x": rng.normal(0.4, size=300), "pred": rng.integers(0, 2, size=300)}
    report = drift.compare(reference, day, false_alarm_rate=RATE)
    path = tmp_path / "drift.png"
    drift.plot_report(report, reference, day, path)
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    empty = drift.compare(reference, {"x": np.array([]), "pred": np.array([])}, false_alarm_rate=RATE)
    drift.plot_report(empty, reference, {"x": np.array([]), "pred": np.array([])}, tmp_path / "empty.png")
    assert (tmp_path / "empty.png").read_bytes().startswith(PNG_MAGIC)


def test_a_score_job_without_a_check_imports_neither_scipy_nor_matplotlib():
    """The score job imports this module; scipy's distribution functions and matplotlib load
    only for a check (``load_libraries``, on a thread while the executors score), and
    ``scipy.stats`` (1.1-1.4 s of CPU) not even then: a check against a reference of quantiles
    does without it."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, numpy as np, spark_jobs.score\n"
        "from spark_jobs import drift\n"
        "names = ('scipy.special', 'scipy.stats', 'matplotlib.figure')\n"
        "loaded = lambda: sorted(m for m in names if m in sys.modules)\n"
        "print(loaded())\n"
        "drift.load_libraries()\n"
        "print(loaded())\n"
        "rng = np.random.default_rng(0)\n"
        "rows = lambda n: {'x': rng.normal(size=n), 'c': rng.integers(0, 4, n)}\n"
        "ref = drift.build_reference(rows(5000), categorical={'c': 4})\n"
        "report = drift.compare(ref, rows(300), false_alarm_rate=0.05)\n"
        "print(report.outcome, loaded())\n"
    )
    root = Path(drift.__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == [
        "[]",
        "['matplotlib.figure', 'scipy.special']",
        "no_drift ['matplotlib.figure', 'scipy.special']",
    ], done.stdout


@FUZZ
@given(n=st.integers(1, 20_000), distance=st.floats(0, 1))
def test_the_ks_p_value_bounds_scipys_from_above_and_matches_it_where_tests_reject(n, distance):
    """``ks_sf`` (2 smirnov) against ``scipy.stats.kstwo.sf``: never below it (the test alarms
    no more often than declared), equal to 1e-6 where p <= 0.05, within 0.2 % below p = 0.25."""
    from scipy import stats

    exact, bound = float(stats.kstwo.sf(distance, n)), drift.ks_sf(distance, n)
    assert 0.0 <= exact <= bound + 1e-12 <= 1.0 + 1e-12
    if bound <= 0.05:
        assert bound - exact <= 1e-6
    elif bound <= 0.25:
        assert bound - exact <= 0.002 * exact


@FUZZ
@given(
    table=st.integers(2, 12).flatmap(
        lambda k: st.lists(st.lists(st.integers(1, 5000), min_size=k, max_size=k), min_size=2, max_size=2)
    )
)
def test_the_class_test_is_scipys_chi2_contingency(table):
    from scipy import stats

    observed = np.array(table, dtype=np.float64)
    statistic, p_value = drift._chi2_contingency(observed)
    expected = stats.chi2_contingency(observed)
    assert statistic == pytest.approx(expected.statistic, rel=1e-9, abs=1e-12)
    assert p_value == pytest.approx(float(np.clip(expected.pvalue, 0, 1)), rel=1e-9, abs=1e-15)


@FUZZ
@given(
    first=st.lists(st.floats(-1e6, 1e6) | st.integers(-3, 3), min_size=1, max_size=200),
    second=st.lists(st.floats(-1e6, 1e6) | st.integers(-3, 3), min_size=1, max_size=200),
)
def test_the_ks_distance_is_scipys_statistic(first, second):
    from scipy import stats

    a, b = np.array(first, dtype=np.float64), np.array(second, dtype=np.float64)
    assert drift.ks_distance(a, b) == pytest.approx(stats.ks_2samp(a, b, method="asymp").statistic, abs=1e-12)
