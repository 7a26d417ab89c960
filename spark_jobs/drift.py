"""Drift of a scored day against the reference profile of the model version that scored it.

When a version is registered, :func:`build_reference` summarises what it was trained and
checked on: the distribution of each feature over the training window (a tabular layout's
named columns, :func:`tabular_columns`; a tensor layout's per-row summaries,
:func:`row_summaries`) and the model's predictions on the held-out rows. After a scoring
run, :func:`compare` tests the day's values of the same statistics against it and answers
``no_drift`` or ``drift``, naming what moved (:class:`DriftReport`).

The thresholds are calibrated to both sample sizes: each statistic gets a two-sample test
whose p-value accounts for the m reference values and the n day values, and the declared
false-alarm rate is split over the statistics (Holm). On days drawn from the reference's
distribution the workflow is alarmed at most at its declared rate, whether the day has 100
rows or 100,000. A fixed PSI cut-off cannot: its noise shrinks with the day's size, so one
cut-off alarms on many small days like the reference and stays silent on shifts that a
large day shows clearly.

- **Continuous statistics** (features, row summaries, regression predictions): the
  two-sample Kolmogorov-Smirnov test. The reference keeps ``quantiles`` evenly spaced
  order statistics of its m values (all of them when m <= ``quantiles``) in float32, and m:
  a few kilobytes per statistic, whatever m. See :func:`ks_test` for the ECDF bounds and
  the p-value.
- **Class predictions** (an index 0..k-1): the chi-square test of homogeneity of the
  reference's and the day's class counts (:func:`chi_square_test`).
- **Many statistics**: Holm's step-down procedure over all of them holds the family-wise
  false-alarm rate at the declared rate (the outcome is the same as Bonferroni's, ``drift``
  exactly when the smallest p-value is below rate / K; Holm names more of what moved).

Edge cases: a day without rows is outcome ``no_data`` (no test is run: there is nothing to
compare, which is not the same as a day like the reference); a day statistic with NaN or
infinite values, or classes the model does not have, is reported drifted with the reason
(p-value 0), never raised; a day naming other statistics than the reference raises
``ValueError`` naming them.

numpy and scipy's distribution functions (``scipy.special``, imported when a test runs;
``scipy.stats`` only for the exact two-sample test of a small reference); matplotlib is
imported by :func:`plot_report` and :func:`load_libraries` alone.
"""

from __future__ import annotations

import base64
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np

from ml_contract.workflows import ROW_SUMMARIES

SUMMARIES = ROW_SUMMARIES  # the contract's: what [monitoring] statistics may name
CONTINUOUS: Final = "continuous"
CATEGORICAL: Final = "categorical"
NO_DRIFT, DRIFT, NO_DATA = "no_drift", "drift", "no_data"
FORMAT_VERSION = 1
DEFAULT_QUANTILES = 1024
PLOT_POINTS = 2048
# Cochran's rule: the chi-square approximation holds when every expected count is >= 5.
MIN_EXPECTED = 5.0
# The float type quantiles are kept in (and day values rounded to before comparing).
STORED_DTYPE = np.dtype("<f4")
SUMMARY_CHUNK_ROWS = 4096

Kind = Literal["continuous", "categorical"]


# --- the statistics of a day's rows -------------------------------------------------------
def row_summaries(features: np.ndarray, summaries: Sequence[str] = SUMMARIES) -> dict[str, np.ndarray]:
    """Per-row summaries of a tensor layout's rows ``[n, *shape]``: ``mean`` and ``std`` of
    the row's elements (float64), ``nonzero`` the share of its elements that are not zero.

    Rows are converted to float64 a chunk at a time, so 100,000 MNIST rows need tens of
    megabytes, not the 600 MB of the whole array in float64.
    """
    unknown = [name for name in summaries if name not in SUMMARIES]
    if unknown:
        raise ValueError(f"unknown row summaries {unknown}; available: {list(SUMMARIES)}")
    features = np.asarray(features)
    if features.ndim < 2:
        raise ValueError(f"row summaries need rows of elements [n, *shape], got shape {features.shape}")
    rows = features.reshape(len(features), math.prod(features.shape[1:]))
    if rows.shape[1] == 0:
        raise ValueError(f"rows of shape {features.shape[1:]} have no elements to summarise")
    out = {name: np.empty(len(rows), dtype=np.float64) for name in summaries}
    width = rows.shape[1]
    # Small integers (MNIST's bytes) sum exactly in integers: the mean and the spread from
    # the sums of values and of squares, with no float64 copy (2.3x faster). Others: float64.
    exact = rows.dtype.kind in "ui" and rows.dtype.itemsize <= 2
    square_type = np.int32 if exact and rows.dtype.itemsize == 1 and width * 255**2 < 2**31 else np.int64
    for start in range(0, len(rows), SUMMARY_CHUNK_ROWS):
        stop = min(start + SUMMARY_CHUNK_ROWS, len(rows))
        if "nonzero" in out:
            out["nonzero"][start:stop] = np.count_nonzero(rows[start:stop], axis=1) / width
        if "mean" not in out and "std" not in out:
            continue
        if exact:
            chunk: Any = rows[start:stop].astype(square_type)  # Any: numpy's einsum stubs take no int64 dtype
            mean = chunk.sum(axis=1, dtype=np.int64) / width
            if "std" in out:
                squares = np.einsum("ij,ij->i", chunk, chunk, dtype=np.int64) / width
                out["std"][start:stop] = np.sqrt(np.maximum(squares - mean**2, 0.0))
        else:
            chunk = rows[start:stop].astype(np.float64)
            mean = chunk.mean(axis=1)
            if "std" in out:
                out["std"][start:stop] = chunk.std(axis=1)
        if "mean" in out:
            out["mean"][start:stop] = mean
    return out


def tabular_columns(features: np.ndarray, names: Sequence[str]) -> dict[str, np.ndarray]:
    """A tabular layout's rows ``[n, k]`` as one array per named column (views, no copy)."""
    features = np.asarray(features)
    if features.ndim != 2 or features.shape[1] != len(names):
        raise ValueError(f"expected rows of {len(names)} columns {list(names)}, got shape {features.shape}")
    if len(set(names)) != len(names):
        raise ValueError(f"column names repeat: {list(names)}")
    return {name: features[:, i] for i, name in enumerate(names)}


# --- the reference profile ----------------------------------------------------------------
@dataclass(frozen=True)
class StatisticProfile:
    """One statistic of the reference: ``count`` values, kept as sorted float32 ``quantiles``
    (continuous; the order statistics of ranks :func:`quantile_ranks`) or class ``counts``
    (categorical)."""

    name: str
    kind: Kind
    count: int
    quantiles: list[float] | None = None
    counts: list[int] | None = None

    def __post_init__(self) -> None:
        where = f"reference statistic {self.name!r}"
        if self.kind not in (CONTINUOUS, CATEGORICAL):
            raise ValueError(f"{where}: kind {self.kind!r} is neither {CONTINUOUS!r} nor {CATEGORICAL!r}")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"{where}: count {self.count!r} must be a positive integer")
        if self.kind == CONTINUOUS:
            if self.quantiles is None or self.counts is not None:
                raise ValueError(f"{where}: a continuous statistic has quantiles and no counts")
            stored = np.asarray(self.quantiles, dtype=np.float64)
            if not 1 <= len(stored) <= self.count:
                raise ValueError(f"{where}: {len(stored)} quantiles for {self.count} values")
            if np.isnan(stored).any() or np.any(stored[1:] < stored[:-1]):
                raise ValueError(f"{where}: quantiles must be sorted numbers (no NaN)")
            if len(stored) < min(self.count, 2):
                raise ValueError(f"{where}: at least 2 quantiles are kept of {self.count} values")
        else:
            if self.counts is None or self.quantiles is not None:
                raise ValueError(f"{where}: a categorical statistic has counts and no quantiles")
            if len(self.counts) < 1 or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in self.counts):
                raise ValueError(f"{where}: counts must be non-negative integers, one per class")
            if sum(self.counts) != self.count:
                raise ValueError(f"{where}: class counts add up to {sum(self.counts)}, not {self.count}")

    @property
    def exact(self) -> bool:
        """Whether every reference value is kept (then the test is the exact two-sample one)."""
        return self.kind == CONTINUOUS and len(self.quantiles or ()) == self.count

    def to_json(self) -> dict[str, Any]:
        """Quantiles as base64 of little-endian float32: 1024 of them take 5.5 KB, where
        decimal float32 text takes 11 KB (the 100 KB budget of a 10-statistic profile)."""
        out: dict[str, Any] = {"kind": self.kind, "count": self.count}
        if self.quantiles is not None:
            raw = np.asarray(self.quantiles, dtype=STORED_DTYPE).tobytes()
            out["quantiles"] = {"dtype": "float32", "base64": base64.b64encode(raw).decode("ascii")}
        if self.counts is not None:
            out["counts"] = list(self.counts)
        return out

    @classmethod
    def from_json(cls, name: str, data: Mapping[str, Any]) -> StatisticProfile:
        quantiles = None
        if data.get("quantiles") is not None:
            stored = data["quantiles"]
            if not isinstance(stored, Mapping) or stored.get("dtype") != "float32":
                raise ValueError(
                    f"reference statistic {name!r}: quantiles must be {{'dtype': 'float32', 'base64': ...}}"
                )
            try:
                raw = base64.b64decode(stored["base64"], validate=True)
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(f"reference statistic {name!r}: quantiles are not base64: {err}") from err
            if len(raw) % STORED_DTYPE.itemsize:
                raise ValueError(f"reference statistic {name!r}: {len(raw)} bytes is not a whole number of float32")
            quantiles = np.frombuffer(raw, dtype=STORED_DTYPE).astype(np.float64).tolist()
        counts = data.get("counts")
        return cls(
            name=name,
            kind=data.get("kind"),  # type: ignore[arg-type]  # checked in __post_init__
            count=data.get("count"),  # type: ignore[arg-type]
            quantiles=quantiles,
            counts=list(counts) if isinstance(counts, list) else counts,
        )


@dataclass(frozen=True)
class ReferenceProfile:
    """The reference of a model version: one :class:`StatisticProfile` per statistic name."""

    statistics: dict[str, StatisticProfile]

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT_VERSION, "statistics": {n: s.to_json() for n, s in self.statistics.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReferenceProfile:
        """The profile :meth:`to_json` wrote; ``ValueError`` for another format version or a
        malformed statistic (the file is read back from storage: never trusted blindly)."""
        if not isinstance(data, Mapping) or data.get("format") != FORMAT_VERSION:
            version = data.get("format") if isinstance(data, Mapping) else None
            raise ValueError(f"reference profile format version {version!r}, this code reads {FORMAT_VERSION}")
        statistics = data.get("statistics")
        if not isinstance(statistics, Mapping) or not statistics:
            raise ValueError("reference profile without statistics")
        return cls({str(name): StatisticProfile.from_json(str(name), s) for name, s in statistics.items()})


def quantile_ranks(count: int, stored: int) -> np.ndarray:
    """The 1-based ranks of the ``stored`` order statistics kept of ``count`` values: evenly
    spaced from the minimum to the maximum, every rank when ``stored == count``."""
    return np.rint(np.linspace(1, count, stored)).astype(np.int64)


def _stored_float(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to the stored float32 (beyond its range to +-inf). Rounding is
    monotone, so the sorted rounded values are the rounded order statistics: the
    reference's and the day's values are compared in the same precision."""
    with np.errstate(over="ignore"):
        return np.asarray(values, dtype=np.float64).astype(STORED_DTYPE)


def build_reference(
    values: Mapping[str, np.ndarray],
    *,
    categorical: Mapping[str, int] | None = None,
    quantiles: int = DEFAULT_QUANTILES,
) -> ReferenceProfile:
    """The reference profile of ``values`` (statistic name -> its values over the reference
    rows; statistics may have different row counts, e.g. features over the training window
    and predictions over the held-out rows). ``categorical`` names the class statistics with
    their number of classes; the others are continuous, kept as ``quantiles`` order statistics.

    Raises ``ValueError`` for an empty or non-finite statistic, or classes outside 0..k-1:
    a reference is built from curated training data, where either is a bug to fix first.
    """
    categorical = dict(categorical or {})
    if quantiles < 2:
        raise ValueError(f"quantiles={quantiles}: keep at least 2 order statistics (the minimum and maximum)")
    if not values:
        raise ValueError("a reference needs at least one statistic")
    extra = sorted(set(categorical) - set(values))
    if extra:
        raise ValueError(f"categorical statistics {extra} have no values")
    statistics: dict[str, StatisticProfile] = {}
    for name, raw in values.items():
        column = np.asarray(raw)
        if column.ndim != 1 or len(column) == 0:
            raise ValueError(f"reference statistic {name!r}: expected a non-empty 1-D array, got shape {column.shape}")
        if not np.isfinite(column.astype(np.float64)).all():
            raise ValueError(
                f"reference statistic {name!r}: {np.count_nonzero(~np.isfinite(column))} non-finite values"
            )
        if name in categorical:
            classes = categorical[name]
            labels = _class_indices(column, classes)
            if labels is None:
                raise ValueError(f"reference statistic {name!r}: values outside the classes 0..{classes - 1}")
            counts = np.bincount(labels, minlength=classes)
            statistics[name] = StatisticProfile(name, CATEGORICAL, len(column), counts=counts.tolist())
        else:
            ordered = np.sort(_stored_float(column))
            kept = ordered[quantile_ranks(len(ordered), min(len(ordered), quantiles)) - 1]
            statistics[name] = StatisticProfile(
                name, CONTINUOUS, len(column), quantiles=kept.astype(np.float64).tolist()
            )
    return ReferenceProfile(statistics)


def _class_indices(values: np.ndarray, classes: int) -> np.ndarray | None:
    """``values`` as int64 class indices, or None when one is not an integer in 0..classes-1."""
    as_float = values.astype(np.float64)
    if not np.all((as_float == np.floor(as_float)) & (as_float >= 0) & (as_float < classes)):
        return None
    return as_float.astype(np.int64)


# --- the tests ----------------------------------------------------------------------------
def _stats():
    """``scipy.stats``, imported only for the exact two-sample test of a reference that kept
    every value (1.1-1.4 s of CPU here: a check against a reference of quantiles never
    imports it)."""
    from scipy import stats

    return stats


def _special():
    """``scipy.special``, whose distribution functions the tests' p-values come from."""
    from scipy import special

    return special


def load_libraries() -> None:
    """Import what a check and its plot use (scipy's distribution functions, matplotlib's Agg
    canvas and its font list): about 1 s of CPU that the score job spends while its
    executors score (:func:`spark_jobs.monitoring.prepare_check`), not after."""
    _special()
    from matplotlib import font_manager
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    from matplotlib.figure import Figure  # noqa: F401

    font_manager.findfont(font_manager.FontProperties())


def ks_distance(first: np.ndarray, second: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest distance between the two
    samples' ECDFs (both non-empty)."""
    first, second = np.sort(first), np.sort(second)
    points = np.concatenate([first, second])
    ecdfs = [np.searchsorted(values, points, side="right") / len(values) for values in (first, second)]
    return float(np.max(np.abs(ecdfs[0] - ecdfs[1])))


def ks_sf(distance: float, n: int) -> float:
    """P(D_n >= ``distance``) of the two-sided one-sample Kolmogorov-Smirnov statistic, bounded
    by the one-sided ones: P(D_n >= d) <= P(D_n+ >= d) + P(D_n- >= d) = 2 smirnov(n, d)
    (exact, scipy.special). The bound only errs high (a test that alarms no more often than
    declared), by P(D_n+ >= d and D_n- >= d): against scipy.stats.kstwo.sf it agrees to 1e-6 at
    p <= 0.05 and to 0.1 % at p = 0.2, for n from 50 to 18,000
    (``tests/unit/test_drift.py``)."""
    return float(min(1.0, 2.0 * _special().smirnov(n, distance)))


def ks_test(profile: StatisticProfile, day: np.ndarray) -> tuple[float, float]:
    """(D, p-value) of the two-sample Kolmogorov-Smirnov test of finite ``day`` values
    against the reference ``profile``, both in the stored float32 precision.

    ECDF(v) is the share of values <= v, so ties (a 0/1 column, a share of non-zero pixels)
    count on both sides alike.

    - Every reference value kept (m <= quantiles): :func:`scipy.stats.ks_2samp` on both
      samples, with scipy's own choice of the exact distribution (both sizes <= 10,000) or
      the asymptotic one. With ties the test is conservative: its p-values are those of
      continuous data, which are never smaller than those of discrete data (Noether 1963);
      a 0/1 column alarms on well under 1 % of same-distribution days at a declared 5 %,
      and only larger moves of its share are found.
    - Quantiles kept (m > quantiles): the reference ECDF is known at every point v only
      between bounds: with j kept order statistics <= v, of ranks k_1 < ... < k_q, at least
      k_j and fewer than k_(j+1) values are <= v. D is the largest distance between the
      day's ECDF and that interval over all distinct points of both (a lower bound of the
      full-sample D, off by at most about 1/quantiles), and its p-value
      ``kstwo.sf(D, round(m n / (m + n)))``, the one scipy's ``ks_2samp`` uses for large
      samples (``method='asymp'``), here through its bound :func:`ks_sf`. D can only be
      underestimated, which only raises the
      p-value; with m > 1024 that distribution matches the exact two-sample one to about
      1 % either way (it is liberal by up to 15 % for small equal sizes, m = n = 100, which
      take the exact branch).
    """
    reference = np.asarray(profile.quantiles, dtype=STORED_DTYPE)
    day = np.sort(_stored_float(day))
    m, n = profile.count, len(day)
    if profile.exact:
        with warnings.catch_warnings():
            # Where its exact p-value rounds outside [0, 1] (D near 0), scipy documents the
            # switch to the asymptotic one: nothing for a driver log to warn about.
            warnings.filterwarnings("ignore", "ks_2samp: Exact calculation unsuccessful", RuntimeWarning)
            result = _stats().ks_2samp(reference, day)
        return float(result.statistic), float(np.clip(result.pvalue, 0.0, 1.0))
    ranks = quantile_ranks(m, len(reference))
    points = np.union1d(reference, day)
    kept_below = np.searchsorted(reference, points, side="right")
    at_least = np.where(kept_below > 0, ranks[np.maximum(kept_below - 1, 0)], 0) / m
    fewer_than = np.where(kept_below < len(ranks), ranks[np.minimum(kept_below, len(ranks) - 1)] - 1, m) / m
    day_ecdf = np.searchsorted(day, points, side="right") / n
    distance = max(0.0, float(np.max(at_least - day_ecdf)), float(np.max(day_ecdf - fewer_than)))
    effective = max(1, round(m * n / (m + n)))
    return distance, ks_sf(distance, effective)


def chi_square_test(reference_counts: Sequence[int], day_counts: Sequence[int]) -> tuple[float, float]:
    """(chi-square, p-value) of the test of homogeneity of two class-count vectors.

    Classes absent from both are dropped. Rare classes are pooled, rarest first, until
    every expected count is at least 5 (Cochran's rule): the chi-square distribution is
    otherwise a poor approximation, and a single prediction of a class with 0.1 % of the
    reference's rows could alarm a day of 100 rows. Pooling looks only at the column
    totals; given those, the table's distribution under homogeneity does not depend on
    which columns are pooled, so the test stays valid. With fewer than two columns left
    there is nothing to test: p = 1. Yates' continuity correction applies to a 2x2 table,
    as scipy's ``chi2_contingency`` applies it.
    """
    table = np.array([reference_counts, day_counts], dtype=np.float64)
    if table.sum(axis=1).min() == 0:
        return 0.0, 1.0
    table = table[:, table.sum(axis=0) > 0]
    totals = table.sum(axis=0)
    # Expected count of the smaller row in a column = smaller row total * column total / N.
    needed = MIN_EXPECTED * table.sum() / table.sum(axis=1).min()
    kept, pooled = [], np.zeros(2)
    for column in np.argsort(totals, kind="stable"):
        if totals[column] >= needed:
            kept.append(table[:, column])
        else:
            pooled += table[:, column]
    if pooled.sum() > 0:
        if pooled.sum() >= needed or not kept:
            kept.append(pooled)
        else:  # still too rare on its own: into the smallest column that was large enough
            kept[0] = kept[0] + pooled
    if len(kept) < 2:
        return 0.0, 1.0
    return _chi2_contingency(np.stack(kept, axis=1))


def _chi2_contingency(observed: np.ndarray) -> tuple[float, float]:
    """(chi-square, p-value) of Pearson's test of independence of a 2 x k table of positive
    margins, as ``scipy.stats.chi2_contingency`` computes it (with Yates' correction for one
    degree of freedom): the statistic in numpy, the p-value from ``scipy.special.chdtrc``."""
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0)) / observed.sum()
    dof = observed.shape[1] - 1
    if dof == 0:
        return 0.0, 1.0
    if dof == 1:
        difference = expected - observed
        observed = observed + np.sign(difference) * np.minimum(0.5, np.abs(difference))
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return statistic, float(np.clip(_special().chdtrc(dof, statistic), 0.0, 1.0))


@dataclass(frozen=True)
class StatisticTest:
    """One statistic's test: its value (KS D or chi-square), p-value, the threshold Holm's
    procedure gave it, the effect size (KS D; for classes the total variation distance
    between the class shares, in [0, 1]), and whether it counts as moved (``rejected``).
    ``test`` is ``ks``, ``chi2`` or ``invalid`` (the day's values could not be tested; the
    ``reason`` says why)."""

    name: str
    kind: str
    test: str
    statistic: float
    p_value: float
    threshold: float
    effect: float
    rejected: bool
    reference_count: int
    day_count: int
    reason: str = ""


@dataclass(frozen=True)
class DriftReport:
    """The outcome of a day (``no_drift``, ``drift`` or ``no_data``) at the declared
    ``false_alarm_rate``, its ``rows``, every statistic's test, moved ones first then by
    effect size, and the ``moved`` statistics' names in that order."""

    outcome: str
    false_alarm_rate: float
    rows: int
    tests: list[StatisticTest]
    moved: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "outcome": self.outcome,
            "false_alarm_rate": self.false_alarm_rate,
            "rows": self.rows,
            "moved": list(self.moved),
            "tests": [asdict(test) for test in self.tests],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DriftReport:
        if data.get("format") != FORMAT_VERSION:
            raise ValueError(f"drift report format version {data.get('version')!r}, this code reads {FORMAT_VERSION}")
        return cls(
            outcome=data["outcome"],
            false_alarm_rate=float(data["false_alarm_rate"]),
            rows=int(data["rows"]),
            tests=[StatisticTest(**test) for test in data["tests"]],
            moved=list(data["moved"]),
        )


def _day_columns(reference: ReferenceProfile, day: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
    """The day's statistics as 1-D arrays of one length, checked against the reference."""
    missing = sorted(set(reference.statistics) - set(day))
    extra = sorted(set(day) - set(reference.statistics))
    if missing or extra:
        raise ValueError(
            f"the day and the reference name different statistics: the day lacks {missing}, "
            f"and has {extra} the reference does not"
        )
    columns = {name: np.asarray(day[name]) for name in reference.statistics}
    shapes = {name: column.shape for name, column in columns.items()}
    if any(len(shape) != 1 for shape in shapes.values()) or len(set(shapes.values())) != 1:
        raise ValueError(f"day statistics must be 1-D arrays of one value per row, got shapes {shapes}")
    return columns, len(next(iter(columns.values())))


def _test_statistic(profile: StatisticProfile, values: np.ndarray) -> dict[str, Any]:
    """The fields of one :class:`StatisticTest` but the threshold and the decision."""
    base = {"name": profile.name, "kind": profile.kind, "reference_count": profile.count, "day_count": len(values)}
    as_float = values.astype(np.float64)
    broken = np.count_nonzero(~np.isfinite(as_float))
    if broken:
        share = float(broken / len(values))
        reason = f"{broken} of {len(values)} day values are NaN or infinite"
        return {**base, "test": "invalid", "statistic": share, "p_value": 0.0, "effect": share, "reason": reason}
    if profile.kind == CONTINUOUS:
        distance, p_value = ks_test(profile, as_float)
        return {**base, "test": "ks", "statistic": distance, "p_value": p_value, "effect": distance}
    reference_counts = np.asarray(profile.counts)
    classes = len(reference_counts)
    labels = _class_indices(as_float, classes)
    if labels is None:
        outside = np.count_nonzero((as_float != np.floor(as_float)) | (as_float < 0) | (as_float >= classes))
        share = float(outside / len(values))
        reason = f"{outside} of {len(values)} day values are not classes 0..{classes - 1}"
        return {**base, "test": "invalid", "statistic": share, "p_value": 0.0, "effect": share, "reason": reason}
    day_counts = np.bincount(labels, minlength=classes)
    statistic, p_value = chi_square_test(reference_counts.tolist(), day_counts.tolist())
    shift = 0.5 * float(np.abs(reference_counts / profile.count - day_counts / len(values)).sum())
    return {**base, "test": "chi2", "statistic": statistic, "p_value": p_value, "effect": shift}


def compare(reference: ReferenceProfile, day: Mapping[str, np.ndarray], *, false_alarm_rate: float) -> DriftReport:
    """Test each of the day's statistics (name -> one value per day row) against the
    reference, holding the family-wise false-alarm rate at ``false_alarm_rate`` with Holm's
    step-down procedure: the i-th smallest of K p-values is compared with rate / (K - i + 1)
    until one is not below its threshold; those before it moved.

    Raises ``ValueError`` when the rate is not in (0, 1), or the day names other
    statistics than the reference, or its arrays are not one value per row of one length.
    """
    if not 0.0 < false_alarm_rate < 1.0:
        raise ValueError(f"false_alarm_rate={false_alarm_rate}: must be between 0 and 1 (e.g. 0.01 or 0.05)")
    columns, rows = _day_columns(reference, day)
    if rows == 0:
        return DriftReport(NO_DATA, false_alarm_rate, 0, [], [])
    results = [_test_statistic(reference.statistics[name], columns[name]) for name in columns]
    k = len(results)
    order = sorted(range(k), key=lambda i: (results[i]["p_value"], results[i]["name"]))
    still_rejecting = True
    tests = []
    for rank, i in enumerate(order):
        threshold = false_alarm_rate / (k - rank)
        still_rejecting = still_rejecting and results[i]["p_value"] <= threshold
        tests.append(StatisticTest(threshold=threshold, rejected=still_rejecting, **results[i]))
    tests.sort(key=lambda t: (not t.rejected, -t.effect, t.p_value, t.name))
    moved = [t.name for t in tests if t.rejected]
    return DriftReport(DRIFT if moved else NO_DRIFT, false_alarm_rate, rows, tests, moved)


# --- the picture --------------------------------------------------------------------------
def plot_report(
    report: DriftReport,
    reference: ReferenceProfile,
    day: Mapping[str, np.ndarray],
    path: str | Path,
    *,
    most: int = 4,
    title: str = "",
) -> None:
    """A PNG of the ``most`` most-shifted statistics of ``report``: for a continuous one the
    day's ECDF against the reference's (drawn from its quantiles), for a class statistic the
    class shares side by side; each titled with its effect, p-value and threshold, the figure
    with ``title`` (the day and the model, say) and the outcome."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    shown = report.tests[: max(most, 1)]
    figure = Figure(figsize=(4.2 * max(len(shown), 1), 3.4))
    # Fixed margins, not a layout engine: it would draw the figure twice (half the time).
    figure.subplots_adjust(left=0.06, right=0.99, bottom=0.15, top=0.78, wspace=0.28)
    FigureCanvasAgg(figure)
    if not shown:
        axes = figure.add_subplot()
        axes.axis("off")
        axes.text(0.5, 0.5, f"{report.outcome}: {report.rows} rows, nothing tested", ha="center", va="center")
    for index, test in enumerate(shown, start=1):
        axes = figure.add_subplot(1, len(shown), index)
        profile = reference.statistics[test.name]
        values = np.asarray(day[test.name], dtype=np.float64)
        values = values[np.isfinite(values)]
        if profile.kind == CONTINUOUS:
            kept = np.asarray(profile.quantiles, dtype=np.float64)
            heights = quantile_ranks(profile.count, len(kept)) / profile.count
            axes.step(kept, heights, where="post", label=f"reference (m={profile.count:,})")
            ordered = np.sort(values)
            # At most PLOT_POINTS steps a line: a picture of 100,000 steps costs seconds, not pixels.
            shown_at = np.unique(np.linspace(0, len(ordered) - 1, min(len(ordered), PLOT_POINTS)).astype(np.int64))
            axes.step(ordered[shown_at], (shown_at + 1) / max(len(ordered), 1), where="post", label="day")
            axes.set_ylabel("ECDF")
            effect = f"D={test.effect:.3f}"
        else:
            classes = np.arange(len(profile.counts or ()))
            shares = np.asarray(profile.counts, dtype=np.float64) / profile.count
            labels = values[(values == np.floor(values)) & (values >= 0) & (values < len(classes))].astype(np.int64)
            day_shares = np.bincount(labels, minlength=len(classes)) / max(len(values), 1)
            axes.bar(classes - 0.2, shares, width=0.4, label=f"reference (m={profile.count:,})")
            axes.bar(classes + 0.2, day_shares, width=0.4, label="day")
            axes.set_ylabel("share of rows")
            effect = f"TV={test.effect:.3f}"
        verdict = "moved" if test.rejected else "held"
        axes.set_title(
            f"{test.name}: {verdict}\n{effect}, p={test.p_value:.2g} (threshold {test.threshold:.2g})", fontsize=9
        )
        axes.set_xlabel(f"{test.name} (day n={test.day_count:,})")
        axes.legend(fontsize=7)
    heading = f"{report.outcome} at false-alarm rate {report.false_alarm_rate:g}"
    figure.suptitle(f"{title}: {heading}" if title else heading, fontsize=10)
    figure.savefig(Path(path), format="png", dpi=100)
