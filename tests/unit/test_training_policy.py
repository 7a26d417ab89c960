"""The declared training (``[model.training]``) and the loop's decisions on numbers: every
key accepted in range and refused out of it naming the key and what is allowed, the
learning-rate schedule, the best epoch, early stopping and the divergence guard."""

from __future__ import annotations

import copy
import math
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs import workflows
from spark_jobs.training.policy import COMPLETED, DIVERGED, EARLY_STOPPED, EpochMonitor, rate_factor
from spark_jobs.workflows import WorkflowError, parse_training, parse_workflow

SRC = "workflow t.toml [model.training]"
BASE = {"epochs": 10, "learning_rate": 0.002, "batch_size": 32}


def declaration(name: str) -> dict:
    return tomllib.loads((workflows.WORKFLOWS_DIR / f"{name}.toml").read_text())


# -- the declaration ---------------------------------------------------------------------


def test_defaults_for_a_declaration_that_names_only_the_basics():
    training = parse_training(dict(BASE), SRC)
    assert (training.optimizer, training.momentum, training.schedule, training.warmup_epochs) == (
        "sgd",
        0.0,
        "constant",
        0.0,
    )
    assert (training.clip_grad_norm, training.early_stopping_patience) == (0.0, 0)
    assert (training.divergence_factor, training.divergence_patience) == (4.0, 2)


@pytest.mark.parametrize(
    "table, expected",
    [
        ({"optimizer": "sgd", "momentum": 0.9}, {"optimizer": "sgd", "momentum": 0.9}),
        ({"optimizer": "adam", "betas": [0.8, 0.99]}, {"optimizer": "adam", "betas": (0.8, 0.99)}),
        ({"optimizer": "adamw", "weight_decay": 0.01}, {"optimizer": "adamw", "weight_decay": 0.01}),
        ({"clip_grad_norm": 1}, {"clip_grad_norm": 1.0}),
        ({"schedule": {"warmup_epochs": 0.5, "kind": "cosine"}}, {"warmup_epochs": 0.5, "schedule": "cosine"}),
        (
            {"schedule": {"kind": "step", "step_epochs": 3, "gamma": 0.5}},
            {"schedule": "step", "step_epochs": 3, "gamma": 0.5},
        ),
        (
            {"early_stopping": {"patience": 3, "min_delta": 0.01}},
            {"early_stopping_patience": 3, "early_stopping_min_delta": 0.01},
        ),
        ({"divergence": {"factor": 10, "patience": 1}}, {"divergence_factor": 10.0, "divergence_patience": 1}),
    ],
)
def test_each_key_is_taken(table, expected):
    training = parse_training({**BASE, **table}, SRC)
    assert {key: getattr(training, key) for key in expected} == expected


@pytest.mark.parametrize(
    "table, message",
    [
        ({"optimizer": "rmsprop"}, r"'optimizer' is 'rmsprop', allowed: sgd, adam, adamw"),
        ({"optimiser": "adam"}, r"unknown key 'optimiser', allowed: epochs, learning_rate"),
        ({"learning_rate": 0}, r"'learning_rate' is 0, allowed: > 0 and <= 10"),
        ({"learning_rate": math.nan}, r"'learning_rate' is nan"),
        ({"epochs": 0}, r"'epochs' is 0, allowed: >= 1 and <= 1000"),
        ({"batch_size": 2.5}, r"'batch_size' must be"),
        ({"momentum": 1.0}, r"'momentum' is 1.0, allowed: >= 0 and < 1"),
        ({"optimizer": "adam", "momentum": 0.9}, r"'momentum' applies to optimizer 'sgd' only, not 'adam'"),
        ({"betas": [0.9, 0.999]}, r"'betas' applies to optimizers 'adam' and 'adamw' only"),
        ({"optimizer": "adam", "betas": [0.9]}, r"'betas' is \[0.9\], allowed: two numbers >= 0 and < 1"),
        ({"weight_decay": -0.1}, r"'weight_decay' is -0.1, allowed: >= 0"),
        ({"clip_grad_norm": True}, r"'clip_grad_norm' must be"),
        ({"schedule": {"kind": "linear"}}, r"\[model.training.schedule\]: 'kind' is 'linear', allowed: constant"),
        ({"schedule": {"warmup_epochs": 10}}, r"'warmup_epochs' is 10, allowed: >= 0 and < 10"),
        ({"schedule": {"kind": "cosine", "gamma": 0.5}}, r"'step_epochs' and 'gamma' apply to kind 'step' only"),
        ({"schedule": {"kind": "step", "gamma": 0.5}}, r"missing key 'step_epochs'"),
        ({"schedule": {"kind": "step", "step_epochs": 2, "gamma": 0}}, r"'gamma' is 0, allowed: > 0 and <= 1"),
        ({"schedule": {"warmup": 1}}, r"\[model.training.schedule\]: unknown key 'warmup', allowed: kind"),
        ({"early_stopping": {"min_delta": 0.1}}, r"\[model.training.early_stopping\]: missing key 'patience'"),
        ({"early_stopping": {"patience": 0}}, r"'patience' is 0, allowed: >= 1"),
        ({"divergence": {"factor": 1}}, r"\[model.training.divergence\]: 'factor' is 1, allowed: > 1"),
        ({"divergence": "off"}, r"'divergence' must be"),
    ],
)
def test_a_bad_value_is_refused_naming_the_key_and_what_is_allowed(table, message):
    with pytest.raises(WorkflowError, match=message):
        parse_training({**BASE, **table}, SRC)


def test_a_bad_training_key_fails_the_whole_declaration():
    data = copy.deepcopy(declaration("mnist"))
    data["model"]["training"]["optimizer"] = "lbfgs"
    with pytest.raises(WorkflowError, match=r"workflow mnist.toml \[model.training\]: 'optimizer' is 'lbfgs'"):
        parse_workflow(data, "workflow mnist.toml")


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 2000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.floats(-1, 2), max_size=3),
    st.dictionaries(st.sampled_from(["kind", "patience", "factor", "gamma", "x"]), st.integers(-1, 5), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from([*workflows.TRAINING_KEYS, "unknown"]), value=VALUES)
def test_any_value_of_any_key_is_taken_or_refused_naming_a_key(key, value):
    """Fuzzed: whatever a declaration holds, loading gives a Training or one WorkflowError
    that names a key, never another exception."""
    table = {**BASE, "optimizer": "adam"} if key == "betas" else dict(BASE)
    if value is not None:
        table[key] = value
    try:
        training = parse_training(table, SRC)
    except WorkflowError as err:
        assert "'" in str(err) and SRC.removesuffix("]") in str(err)
    else:
        assert 1 <= training.epochs <= 1000 and 1 <= training.batch_size
        assert 0 < training.learning_rate <= 10 and math.isfinite(training.learning_rate)
        assert training.optimizer in workflows.OPTIMIZERS and training.schedule in workflows.SCHEDULES
        assert 0 <= training.warmup_epochs < training.epochs


# -- the schedule ------------------------------------------------------------------------


def test_warm_up_rises_linearly_to_the_full_rate_then_cosine_falls_to_zero():
    steps, epochs = 10, 5
    factors = [rate_factor(s, steps, epochs, warmup_epochs=1, schedule="cosine") for s in range(steps * epochs)]
    assert factors[:10] == pytest.approx([(s + 1) / 11 for s in range(10)])
    assert factors[10] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(factors[10:], factors[11:], strict=False))
    assert factors[-1] == pytest.approx(0.5 * (1 + math.cos(math.pi * 39 / 40)))


def test_constant_and_step_schedules():
    assert {rate_factor(s, 4, 3) for s in range(12)} == {1.0}
    step = [rate_factor(s, 4, 6, schedule="step", step_epochs=2, gamma=0.5) for s in range(24)]
    assert step == [1.0] * 8 + [0.5] * 8 + [0.25] * 8


# -- the best epoch and when to stop -----------------------------------------------------


def epoch(train_loss: float, val_loss: float, accuracy: float) -> dict[str, float]:
    return {"train_loss": train_loss, "val_loss": val_loss, "val_accuracy": accuracy}


def monitor(**kwargs) -> EpochMonitor:
    return EpochMonitor(metric="val_accuracy", higher_is_better=True, **kwargs)


def test_the_best_epoch_is_the_best_metric_not_the_last_and_the_earliest_on_a_tie():
    m = monitor()
    curve = [(1.0, 0.9, 0.6), (0.5, 0.5, 0.94), (0.4, 0.6, 0.94), (0.3, 1.5, 0.8)]
    best = [m.observe(e, epoch(*values)) for e, values in enumerate(curve, start=1)]
    assert best == [True, True, False, False]
    assert (m.best_epoch, m.best_value, m.stop_reason) == (2, 0.94, None)


def test_lower_is_better_for_rmse():
    m = EpochMonitor(metric="val_rmse", higher_is_better=False)
    for e, rmse in enumerate([60.0, 40.0, 45.0], start=1):
        m.observe(e, {"train_loss": rmse**2, "val_loss": rmse**2, "val_rmse": rmse})
    assert m.best_epoch == 2


def test_a_non_finite_loss_stops_at_once_and_is_never_the_best():
    m = monitor()
    assert m.observe(1, epoch(2.0, 1.0, 0.5))
    assert not m.observe(2, epoch(math.nan, math.nan, 0.1))
    assert (m.stop_reason, m.best_epoch) == (DIVERGED, 1)
    assert "non-finite loss" in m.notes[0]


def test_no_usable_epoch_leaves_no_best():
    m = monitor()
    m.observe(1, epoch(math.inf, math.nan, 0.098))
    assert (m.best_epoch, m.stop_reason) == (0, DIVERGED)


def test_a_validation_loss_far_above_the_lowest_for_several_epochs_stops():
    m = monitor(divergence_factor=4.0, divergence_patience=2)
    m.observe(1, epoch(0.5, 0.2, 0.94))
    m.observe(2, epoch(3.0, 20.4, 0.087))  # the 2026-12-03 nightly's epoch 7
    assert m.stop_reason is None, "one bad epoch may recover"
    m.observe(3, epoch(1.0, 0.5, 0.9))  # back under 4 x 0.2: the count starts again
    m.observe(4, epoch(2.0, 0.9, 0.5))
    assert m.stop_reason is None
    m.observe(5, epoch(2.0, 0.95, 0.4))
    assert (m.stop_reason, m.best_epoch) == (DIVERGED, 1)


def test_early_stopping_after_patience_epochs_without_an_improvement_above_min_delta():
    m = monitor(patience=2, min_delta=0.01)
    for e, accuracy in enumerate([0.90, 0.95, 0.955, 0.958], start=1):
        m.observe(e, epoch(0.3, 0.3, accuracy))
    # 0.955 and 0.958 are better than 0.95, but not by more than 0.01: two epochs without.
    assert (m.stop_reason, m.best_epoch) == (EARLY_STOPPED, 4)


def test_no_early_stopping_without_patience():
    m = monitor()
    for e in range(1, 20):
        m.observe(e, epoch(0.3, 0.3, 0.9))
    assert m.stop_reason is None and m.best_epoch == 1


def test_the_state_survives_a_checkpoint_round_trip():
    m = monitor(patience=3)
    m.observe(1, epoch(0.5, 0.4, 0.9))
    m.observe(2, epoch(0.5, 0.5, 0.8))
    again = EpochMonitor.from_state(m.state())
    assert again == m
    assert again.observe(3, epoch(0.4, 0.3, 0.95)) and again.best_epoch == 3
    assert COMPLETED == "completed"
