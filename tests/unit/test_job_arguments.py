"""Each job's typed command-line builder (``ml_platform.job_arguments``) against the job's
own parser: every option of the parser is a field of the builder and every field an option,
and a command line built from values parses back to those values. A job option added
without its field (or the reverse) fails here, not in a 02:00 task."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from ml_platform.job_arguments import IngestArguments, RegisterArguments, ScoreArguments, TrainArguments

EXAMPLES = {
    "ingest": IngestArguments(
        workflow="mnist",
        ds="2026-11-28",
        raw_path="/raw/ds=2026-11-28",
        curated_root="/curated",
        quarantine_root="/quarantine",
        max_bad_ratio=0.25,
        manifest_path="/m/ingest.json",
    ),
    "train": TrainArguments(
        workflow="diabetes",
        curated_root="/curated",
        start_ds="2026-11-01",
        end_ds="2026-11-28",
        work_dir="/work",
        output_manifest="/run/train.json",
        experiment_name="exp",
        epochs=3,
        learning_rate=0.01,
        batch_size=16,
        momentum=0.5,
        num_ranks=2,
        backend="torch_distributor",
        holdout_pct=25,
        split_seed=11,
        seed=5,
        checkpoint_dir="/ckpt",
        bind_cores="off",
        tags=("airflow_dag_id=d", "airflow_run_id=r"),
    ),
    "register": RegisterArguments(
        workflow="mnist",
        train_manifest="/run/train.json",
        output_manifest="/run/register.json",
        curated_root="/curated",
        start_ds="2026-11-01",
        end_ds="2026-11-28",
        model_name="mnist_cnn",
        logical_time="2026-11-29T02:00:00+00:00",
        holdout_pct=25,
        split_seed=11,
        floor=0.9,
        tolerance=0.02,
        git_revision="abc123",
        airflow_run_id="scheduled__2026-11-29",
        lock_timeout=600.0,
        lock_stale_after=30.0,
        promote=False,
        tags=("retraining_evidence_ds=2026-11-28", "retraining_reason=drift"),
    ),
    "score": ScoreArguments(
        workflow="mnist",
        model="models:/mnist_cnn/3",
        input_data="/curated",
        scored_data="/predictions",
        monitoring_data="/monitoring",
        start_ds="2026-11-01",
        end_ds="2026-11-03",
    ),
}


def parsed(job: str, argv: list) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    """The job's namespace for ``argv`` and the parser that made it."""
    import importlib

    module = importlib.import_module(f"spark_jobs.{job}")
    seen: list[argparse.ArgumentParser] = []
    original = argparse.ArgumentParser.parse_args

    def capture(self, *args, **kwargs):
        seen.append(self)
        return original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", capture)
        namespace = module.parse_args([str(a) for a in argv])
    return namespace, seen[-1]


def plain(value):
    """A parsed value as the builder was given it (a workflow by its name, tags as text)."""
    if hasattr(value, "name") and hasattr(value, "model"):
        return value.name
    if isinstance(value, list) and value and isinstance(value[0], tuple):
        return tuple(f"{k}={v}" for k, v in value)
    return value.isoformat() if hasattr(value, "isoformat") else value


@pytest.mark.parametrize("job", sorted(EXAMPLES))
def test_every_option_of_the_job_is_a_field_and_every_field_an_option(job):
    arguments = EXAMPLES[job]
    _, parser = parsed(job, arguments.argv())
    options = {action.dest for action in parser._actions if action.dest != "help"}
    names = {f.name for f in fields(arguments)}
    assert options == (names - {"tags"}) | ({"tag"} if "tags" in names else set()), options ^ names


@pytest.mark.parametrize("job", sorted(EXAMPLES))
def test_a_built_command_line_parses_back_to_its_values(job):
    arguments = EXAMPLES[job]
    namespace, _ = parsed(job, arguments.argv())
    for f in fields(arguments):
        given = getattr(arguments, f.name)
        got = plain(getattr(namespace, "tag" if f.name == "tags" else f.name))
        if isinstance(given, float):
            assert got == pytest.approx(given), f.name
        else:
            assert got == given, f.name


def test_a_flag_is_on_off_or_a_template_and_none_is_left_out():
    base = {k: getattr(EXAMPLES["register"], k) for k in ("workflow", "train_manifest", "output_manifest")}
    rest = dict(curated_root="/c", start_ds="2026-11-01", end_ds="2026-11-01", model_name="m", logical_time="t")
    assert RegisterArguments(**base, **rest, promote=True).argv()[-1] == "--promote"
    assert RegisterArguments(**base, **rest, promote=False).argv()[-1] == "--no-promote"
    template = "{{ '--promote' if params.promote else '--no-promote' }}"
    assert RegisterArguments(**base, **rest, promote=template).argv()[-1] == template
    assert not {"--promote", "--no-promote", "--floor"} & set(RegisterArguments(**base, **rest).argv())


def test_score_takes_one_day_or_a_range_never_both():
    paths = dict(model="models:/m/1", input_data="/c", scored_data="/p")
    assert ScoreArguments(**paths, ds="2026-11-01").argv()[-2:] == ["--ds", "2026-11-01"]
    both = {"ds": "2026-11-01", "start_ds": "2026-11-01", "end_ds": "2026-11-02"}
    for days in ({}, both, {"start_ds": "2026-11-01"}):
        with pytest.raises(ValueError, match="give ds, or start_ds and end_ds"):
            ScoreArguments(**paths, **days)
