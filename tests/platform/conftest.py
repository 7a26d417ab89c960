"""One platform for the tests of this folder (one process runs them all, see
``tests/conftest.py``): ``scripts/platform_stack.py up`` on a state folder and free ports
of its own, with a job archive of the code under test and one curated MNIST partition to
train on. The browser tests use it first, the last of them with the on-demand flow of
``promoted_run`` (which test_platform_flows.py checks); the up/down tests, which end by
stopping it, come last (collection order)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from platform_support import (
    CHROMIUM,
    CONF,
    CURATED_DS,
    CURATED_ROWS,
    DAYS,
    MODEL,
    ON_DEMAND,
    ON_NEW_CHAMPION,
    ROWS_PER_DAY,
    SCREENSHOTS,
    PlatformCli,
    finished,
    new_page,
    task_states,
)

import package_jobs
from local_stack import wait_until, write_curated_partition


@pytest.fixture(scope="session")
def shared_platform(tmp_path_factory):
    """``(cli, the output of its first up)``; down at the end of the session."""
    cli = PlatformCli(tmp_path_factory.mktemp("platform"))
    cli.env["ML_JOBS_ARCHIVE"] = str(package_jobs.package_jobs(cli.state / "spark_jobs.zip"))
    write_curated_partition(cli.state / "data" / "curated" / "mnist", CURATED_DS, CURATED_ROWS)
    first = cli("up")
    try:
        yield cli, first
    finally:
        cli("down")


@pytest.fixture(scope="session")
def promoted_run(shared_platform):
    """The REST-triggered on-demand run and what followed it: ``(cli, run, MLflow client,
    the training run, the champion after it, the Asset-triggered scoring run)``. The
    champion alias is removed first, so the accuracy floor alone decides the promotion."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    cli, _ = shared_platform
    for ds in DAYS:
        write_curated_partition(cli.state / "data" / "curated" / "mnist", ds, ROWS_PER_DAY)
    client = MlflowClient(tracking_uri=cli.record["mlflow_url"])
    try:
        client.delete_registered_model_alias(MODEL, "champion")
    except MlflowException:
        pass  # none yet
    for dag_id in (ON_DEMAND, ON_NEW_CHAMPION):
        cli.api("PATCH", f"/dags/{dag_id}", {"is_paused": False})
    run = cli.api("POST", f"/dags/{ON_DEMAND}/dagRuns", {"logical_date": None, "conf": CONF})
    run = finished(cli, ON_DEMAND, run["dag_run_id"])
    assert run["state"] == "success", task_states(cli, ON_DEMAND, run["dag_run_id"])
    (trained,) = client.search_runs(
        [client.get_experiment_by_name(MODEL).experiment_id], f"tags.airflow_run_id = '{run['dag_run_id']}'"
    )
    champion = client.get_model_version_by_alias(MODEL, "champion")
    rescore = wait_until(
        lambda: cli.api("GET", f"/dags/{ON_NEW_CHAMPION}/dagRuns?run_type=asset_triggered")["dag_runs"],
        300,
        1,
        f"{ON_NEW_CHAMPION} started by the champion Asset",
    )[0]
    rescore = finished(cli, ON_NEW_CHAMPION, rescore["dag_run_id"])
    # Later promotions (the README's nightly) would re-score again, beside the tests that
    # follow, with nothing checking it.
    cli.api("PATCH", f"/dags/{ON_NEW_CHAMPION}", {"is_paused": True})
    return cli, run, client, trained, champion, rescore


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: scripts/setup_env.sh --dev installs Debian's chromium with apt-get "
            "(it could not here: no root, no apt-get or no package index; see /tmp/setup-chromium.log); "
            "install it (apt-get install chromium) and rerun"
        )
    from playwright import sync_api  # requirements-dev.txt

    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser, shared_platform):
    """A first visit, signed in to the platform's Airflow."""
    page = new_page(browser, signed_in=shared_platform[0])
    yield page
    page.context.close()


@pytest.fixture
def screenshot(request):
    """``screenshot(page, name)``: ``var/screenshots/<test>/<name>.png``, its path printed."""
    folder = SCREENSHOTS / request.node.name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)

    def take(page, name: str, **options) -> Path:
        path = folder / f"{name}.png"
        page.screenshot(path=str(path), **options)
        print(f"[screenshot] {path}")
        return path

    return take
