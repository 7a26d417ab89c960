"""The platform's settings (``ml_platform.config.PlatformConfig``, pydantic-settings): each
read from its variable, an empty one unset, a bad one refused naming the variable and what
is allowed, and the fields that are not settings never taken from the environment."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ml_platform.config import PlatformConfig, load_config

SETTINGS = {
    "ML_STORAGE_ROOT": (
        "storage_root",
        "abfss://data@acct.dfs.core.windows.net/ml",
        "abfss://data@acct.dfs.core.windows.net/ml",
    ),
    "ML_MAX_BAD_RATIO": ("max_bad_ratio", "0.2", 0.2),
    "ML_PASS_MLFLOW_CREDENTIALS": ("pass_mlflow_credentials", "false", False),
    "ML_SYNAPSE_EXECUTORS": ("synapse_executors", "4", 4),
    "ML_SPARK_DRIVER_JAVA_OPTIONS": ("driver_java_options", "-Xmx2g", "-Xmx2g"),
    "ML_SPARK_CONN_ID": ("spark_conn_id", "spark_yarn", "spark_yarn"),
    "ML_RAW_DROP_DEADLINE_HOURS": ("raw_drop_deadline_hours", "6.5", 6.5),
    "ML_RAW_DROP_ALERT": ("raw_drop_alert", "alerts:page_on_call", "alerts:page_on_call"),
}


@pytest.fixture(autouse=True)
def _no_platform_variables(monkeypatch):
    import os

    for name in [n for n in os.environ if n.startswith("ML_")]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize("variable", sorted(SETTINGS))
def test_each_setting_is_read_from_its_variable_and_an_empty_one_keeps_the_default(monkeypatch, variable):
    field, text, value = SETTINGS[variable]
    default = getattr(load_config(), field)
    monkeypatch.setenv(variable, text)
    assert getattr(load_config(), field) == value
    monkeypatch.setenv(variable, "")
    assert getattr(load_config(), field) == ("" if variable == "ML_SPARK_DRIVER_JAVA_OPTIONS" else default)


@pytest.mark.parametrize(
    ("variable", "text", "allowed"),
    [
        ("ML_MAX_BAD_RATIO", "5", "less than or equal to 1"),
        ("ML_MAX_BAD_RATIO", "a tenth", "a valid number"),
        ("ML_SPARK_SUBMIT_TARGET", "emr", "'spark' or 'synapse'"),
        ("ML_SYNAPSE_EXECUTORS", "0", "greater than or equal to 1"),
        ("ML_PASS_MLFLOW_CREDENTIALS", "maybe", "a valid boolean"),
        ("ML_RAW_DROP_DEADLINE_HOURS", "0", "greater than 0"),
        ("ML_RAW_DROP_DEADLINE_HOURS", "1000", "less than or equal to 720"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable_what_is_allowed_and_the_value(monkeypatch, variable, text, allowed):
    monkeypatch.setenv(variable, text)
    with pytest.raises(ValueError, match=rf"^{variable}: .*{allowed}.*\(got '{text}'\)$"):
        load_config()


def test_the_workflow_and_what_derives_from_it_are_not_settings(monkeypatch):
    for name, value in {"ML_WORKFLOW": "diabetes", "ML_MODEL_NAME": "x", "ML_TRAINING": "{}"}.items():
        monkeypatch.setenv(name, value)
    cfg = load_config("mnist")
    assert (cfg.workflow, cfg.model_name, cfg.training.epochs) == ("mnist", "mnist_cnn", 10)
    monkeypatch.setenv("ML_MNIST_MODEL_NAME", "mnist_candidate")
    assert load_config("mnist").model_name == "mnist_candidate"
    assert load_config("diabetes").model_name == "diabetes_mlp"


def test_arguments_win_over_the_environment_and_unknown_ones_are_refused(monkeypatch):
    monkeypatch.setenv("ML_STORAGE_ROOT", "/from/env")
    assert PlatformConfig(storage_root="/given").storage_root == "/given"
    assert PlatformConfig(submit_target="spark").submit_target == "spark"
    with pytest.raises(ValueError, match="ML_STORAGE: Extra inputs are not permitted"):
        PlatformConfig(storage="/typo")


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_text_in_a_number_setting_is_a_value_in_range_or_a_one_line_error(text):
    """Fuzzed: whatever the variable holds, the configuration is valid or the error names it."""
    import os

    os.environ["ML_MAX_BAD_RATIO"] = text.replace("\x00", "")
    try:
        try:
            ratio = load_config().max_bad_ratio
        except ValueError as err:
            assert str(err).startswith("ML_MAX_BAD_RATIO: ") and "\n" not in str(err)
        else:
            assert 0 <= ratio <= 1
    finally:
        del os.environ["ML_MAX_BAD_RATIO"]
