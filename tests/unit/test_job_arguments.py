"""The train job's command line, built once (``ml_platform.job_arguments``), is the one its
own parser (``spark_jobs/train.py``) reads: every field is an option it knows, by value."""

from __future__ import annotations

from pathlib import Path

from ml_platform.job_arguments import TrainArguments
from spark_jobs.train import parse_args


def test_every_field_reaches_the_job_with_its_value():
    arguments = TrainArguments(
        workflow="diabetes",
        curated_root=Path("/data/curated/diabetes"),
        start_ds="2026-11-01",
        end_ds="2026-11-03",
        work_dir=Path("/runs/x/train"),
        output_manifest="/runs/x/train.json",
        experiment_name="diabetes_mlp",
        epochs=4,
        learning_rate=0.001,
        batch_size=64,
        num_ranks=2,
        backend="torch_distributor",
        holdout_pct=25,
        split_seed=3,
        checkpoint_dir="/ckpt/x",
        tags=("airflow_dag_id=d", "airflow_run_id=r"),
    )
    parsed = parse_args(arguments.argv())
    assert parsed.workflow.name == "diabetes"
    assert (parsed.curated_root, parsed.work_dir) == ("/data/curated/diabetes", "/runs/x/train")
    assert (parsed.start_ds, parsed.end_ds) == ("2026-11-01", "2026-11-03")
    assert (parsed.epochs, parsed.learning_rate, parsed.batch_size, parsed.num_ranks) == (4, 0.001, 64, 2)
    assert (parsed.backend, parsed.holdout_pct, parsed.split_seed) == ("torch_distributor", 25, 3)
    assert (parsed.output_manifest, parsed.experiment_name, parsed.checkpoint_dir) == (
        "/runs/x/train.json",
        "diabetes_mlp",
        "/ckpt/x",
    )
    assert parsed.tag == [("airflow_dag_id", "d"), ("airflow_run_id", "r")]


def test_unset_options_are_left_to_the_job():
    argv = TrainArguments("mnist", "/c", "2026-11-01", "2026-11-01", "/w", "/m.json", "e").argv()
    assert "--epochs" not in argv and "--tag" not in argv and "--checkpoint-dir" not in argv
    parsed = parse_args(argv)
    assert parsed.epochs is None and parsed.num_ranks == 0 and parsed.backend == "horovod"


def test_templates_and_upstream_outputs_are_passed_as_they_are():
    upstream = object()  # an XComArg, say: rendered by Airflow, not here
    argv = TrainArguments("mnist", "/c", "{{ ds }}", upstream, "/w", "/m.json", "e").argv()
    assert argv[argv.index("--start-ds") + 1] == "{{ ds }}"
    assert argv[argv.index("--end-ds") + 1] is upstream
