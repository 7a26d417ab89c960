"""Registration under faults: the register job (real spark-submit, real MLflow server).

One registered model (fresh name) and five training runs with a model each: A trained
briefly in this process (a champion really better than the others on the held-out rows),
B to E untrained (distinct runs; the point is the bookkeeping, and the refusals against A).

1. The MLflow server is stopped, register(A) starts, the server comes back while the
   job's client is retrying with backoff: the job succeeds, A has one complete version
   and is champion.
2. The test takes the model's promotion lock, as another job holding it would, and starts
   register(A) again (a retried task), register(C), and two candidates the rule refuses:
   D, worse than champion A on the same held-out rows, and E, below the accuracy floor.
   Meanwhile register(B) is SIGKILLed, its whole process tree, once its version exists
   and before the version is tagged (the job is then evaluating champion A on the
   held-out rows), and its retry starts.
3. D and E end refused while the lock is still held, so nothing can have moved
   ``champion`` meanwhile. A, B and C wait for the lock (their logs say so, naming the
   test as holder): the registrations provably overlap. The MLflow server is stopped and
   started again while they wait (down in the middle of the jobs, after their first
   requests). Then the lock is released: B and C are promoted, one history entry each and
   none lost; A's retry reuses its version and records no second promotion; B's retry
   completes the version the killed try created.
4. The same contention on an MLflow server whose store is PostgreSQL. Its jobs run while
   step 1 waits for the server (the machine is mostly idle then).

After every job, no process carrying its marker is left. Thresholds are opened
(``--floor 0 --tolerance 1``) except for D and E.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from dataclasses import dataclass, field

import pytest

from faults_support import (
    BASE_DS,
    Job,
    JobRunner,
    log_briefly_trained_model,
    log_untrained_model,
    sigkill_tree,
    wait_for_no_orphans,
)
from local_stack import LocalStack, free_port, fresh_database
from ml_platform.job_arguments import RegisterArguments
from spark_jobs.promotion import PROMOTION_LOCK_SUFFIX, read_history

# MLflow's client retries refused connections with exponential backoff (default: 7 retries,
# factor 2). Factor 1 (sleeps of 2, 4, 8, 16, 32, 64, 120, 120 s) keeps the wait after the
# server is back short; 9 retries leave a loaded machine minutes to restart the server.
RETRY_ENV = {"MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "9"}
RETRY_LINE = "Retrying (Retry("  # urllib3's warning for each retried request
# The test holds the promotion lock for minutes while five jobs share two cores: the
# waiters must not take it for a dead holder's (LOCK_STALE_AFTER_S is 5 minutes).
PATIENT_WAITER = ("--lock-stale-after", "1200", "--lock-timeout", "1500")
OPEN = {"floor": 0.0, "tolerance": 1.0}
WORSE_THAN_CHAMPION = {"floor": 0.0, "tolerance": 0.01}
BELOW_FLOOR = {"floor": 0.5, "tolerance": 1.0}
FIRST_NIGHT, SECOND_NIGHT = "2026-10-02T02:00:00+00:00", "2026-10-03T02:00:00+00:00"
CANDIDATES = ("A", "B", "C", "D", "E")


def log_runs(tracking_uri: str, model: str, root, names, trained: tuple[str, ...] = ()) -> dict:
    """One training run with a model per name, and its ``train.json`` as the train task writes it."""
    runs = {}
    for seed, name in enumerate(names):
        tags = {"candidate": name}
        if name in trained:
            run_id, model_uri = log_briefly_trained_model(tracking_uri, tags)
        else:
            run_id, model_uri = log_untrained_model(tracking_uri, tags, seed=seed)
        run_dir = root / "_runs" / "faults" / f"{model}-{name}"
        run_dir.mkdir(parents=True)
        (run_dir / "train.json").write_text(json.dumps({"run_id": run_id, "model_uri": model_uri}))
        runs[name] = {"run_id": run_id, "dir": run_dir}
    return runs


@pytest.fixture(scope="module")
def registry(faults_stack, base_partition, mlflow_client):
    model = f"faults_reg_{uuid.uuid4().hex[:8]}"
    runs = log_runs(faults_stack.stack.tracking_uri, model, faults_stack.root, CANDIDATES, trained=("A",))
    return {"model": model, "runs": runs, "curated_root": str(faults_stack.dataset("curated"))}


def register_args(
    registry, name: str, logical_time: str, *, floor: float, tolerance: float, extra: tuple[str, ...] = ()
) -> list[str]:
    run_dir = registry["runs"][name]["dir"]
    arguments = RegisterArguments(
        workflow="mnist",
        train_manifest=run_dir / "train.json",
        output_manifest=run_dir / "register.json",
        curated_root=registry["curated_root"],
        start_ds=BASE_DS,
        end_ds=BASE_DS,
        model_name=registry["model"],
        floor=floor,
        tolerance=tolerance,
        git_revision="faults",
        airflow_run_id=f"faults__{name}",
        logical_time=logical_time,
    )
    return [*arguments.argv(), *extra]


def versions_of(client, model: str, run_id: str | None = None) -> list:
    query = f"name = '{model}'" + (f" and run_id = '{run_id}'" if run_id else "")
    return client.search_model_versions(query)


def manifest_of(registry, name: str) -> dict | None:
    path = registry["runs"][name]["dir"] / "register.json"
    return json.loads(path.read_text()) if path.exists() else None


@dataclass
class LockedWave:
    """Register jobs started while the test holds the model's promotion lock: the registered
    model ``<model>.promotion-lock`` with a ``holder`` tag, created here directly as another
    job holding the lock would have created it (not through ``promotion_lock``, which is
    what the jobs are checked for)."""

    runner: JobRunner
    env: dict[str, str]
    client: object
    model: str
    holder: str = field(default_factory=lambda: f"faults-test:{uuid.uuid4().hex[:8]}")
    held: bool = False
    kept: bool | None = None  # whether the lock was still the test's when it let go
    jobs: dict[str, Job] = field(default_factory=dict)
    waited: dict[str, bool] = field(default_factory=dict)

    @classmethod
    def start(cls, runner: JobRunner, client, model: str, args: dict[str, list[str]], env: dict[str, str]):
        wave = cls(runner, env, client, model)
        client.create_registered_model(wave.lock_name, tags={"holder": wave.holder})
        wave.held = True
        try:
            for name, job_args in args.items():
                wave.start_job(name, job_args)
        except BaseException:
            wave.abort()
            raise
        return wave

    @property
    def lock_name(self) -> str:
        return f"{self.model}{PROMOTION_LOCK_SUFFIX}"

    @property
    def waiting_line(self) -> str:
        """What a job logs while it waits for the lock the test holds."""
        return f"waiting for the promotion lock of {self.model} (held by {self.holder})"

    def start_job(self, name: str, args: list[str]) -> Job:
        self.jobs[name] = self.runner.start("register", args, env=self.env)
        return self.jobs[name]

    def wait_until_waiting(self, names: tuple[str, ...], timeout: float = 600) -> None:
        """Until each named job's log says it waits for the lock the test holds."""
        deadline = time.monotonic() + timeout
        for name in names:
            job = self.jobs[name]
            while self.waiting_line not in job.output:
                if job.returncode is not None:
                    raise AssertionError(f"register({name}) ended before waiting for the lock:\n{job.output[-5000:]}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"register({name}) never waited for the lock:\n{job.output[-5000:]}")
                time.sleep(0.5)
            self.waited[name] = True

    def wait_until_ended_or_waiting(self, names: tuple[str, ...], timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        for name in names:
            job = self.jobs[name]
            while job.returncode is None and self.waiting_line not in job.output:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"register({name}) neither ended nor waited:\n{job.output[-5000:]}")
                time.sleep(0.5)

    def release(self) -> None:
        """Delete the lock if it is still the test's (no job took it for a dead holder's)."""
        from mlflow.exceptions import MlflowException

        if not self.held:
            return
        self.held = False
        try:
            self.kept = self.client.get_registered_model(self.lock_name).tags.get("holder") == self.holder
        except MlflowException:
            self.kept = False
        if self.kept:
            self.client.delete_registered_model(self.lock_name)

    def finish(self) -> dict:
        """Wait for every job; their exit codes, logs, and the processes each left behind."""
        for job in self.jobs.values():
            job.wait()
        return {
            "rcs": {name: job.returncode for name, job in self.jobs.items()},
            "outputs": {name: job.output for name, job in self.jobs.items()},
            "orphans": {name: wait_for_no_orphans(job.marker) for name, job in self.jobs.items()},
        }

    def abort(self) -> None:
        """After a failure: no job left running, the lock released."""
        for job in self.jobs.values():
            if job.returncode is None:
                sigkill_tree(job.marker)
                job.wait()
        self.release()


@pytest.fixture(scope="module")
def postgres_wave(faults_stack, base_partition, tmp_path_factory, postgres_server):
    """register(P) and register(Q) on the PostgreSQL-backed registry (a database of its own on
    the session's embedded PostgreSQL), started while the test holds that model's promotion lock."""
    from mlflow import MlflowClient

    with contextlib.ExitStack() as cleanup:
        server = LocalStack(
            state_dir=tmp_path_factory.mktemp("registry-postgresql"),
            mlflow_port=free_port(),
            mlflow_store_uri=cleanup.enter_context(fresh_database(postgres_server.uri, "faults")),
        )
        server.start_mlflow()
        cleanup.callback(server.stop_mlflow)
        model = f"faults_pg_{uuid.uuid4().hex[:8]}"
        registry = {
            "model": model,
            "runs": log_runs(server.tracking_uri, model, faults_stack.root, ("P", "Q")),
            "curated_root": str(faults_stack.dataset("curated")),
        }
        client = MlflowClient(tracking_uri=server.tracking_uri, registry_uri=server.tracking_uri)
        args = {name: register_args(registry, name, SECOND_NIGHT, **OPEN, extra=PATIENT_WAITER) for name in ("P", "Q")}
        wave = LockedWave.start(
            faults_stack.jobs, client, model, args, env={"MLFLOW_TRACKING_URI": server.tracking_uri}
        )
        cleanup.callback(wave.abort)
        yield {"wave": wave, "registry": registry, "client": client}


@pytest.fixture(scope="module")
def outage(faults_stack, registry, mlflow_client, postgres_wave):
    """register(A) started while the server is down; the server restarted mid-job. (The
    PostgreSQL wave starts first: its jobs use the machine while this one waits.)"""
    stack, jobs = faults_stack.stack, faults_stack.jobs
    stack.stop_mlflow()
    try:
        job = jobs.start("register", register_args(registry, "A", FIRST_NIGHT, **OPEN), env=RETRY_ENV)
        deadline = time.monotonic() + 300
        while RETRY_LINE not in job.output and job.returncode is None and time.monotonic() < deadline:
            time.sleep(0.5)
        saw_retry_while_down = RETRY_LINE in job.output
    finally:
        stack.start_mlflow()
    job.wait()
    run_id = registry["runs"]["A"]["run_id"]
    return {
        "saw_retry_while_down": saw_retry_while_down,
        "rc": job.returncode,
        "output": job.output,
        "orphans": wait_for_no_orphans(job.marker),
        "versions": versions_of(mlflow_client, registry["model"], run_id),
    }


def test_register_started_while_mlflow_is_down_retries_then_succeeds(outage, registry, mlflow_client):
    assert outage["saw_retry_while_down"], outage["output"][-3000:]
    assert outage["rc"] == 0, outage["output"][-5000:]
    assert outage["orphans"] == []
    (version,) = outage["versions"]
    assert version.status == "READY"
    # Complete: every tag the gate reads, and the aliases.
    assert version.tags["validation_status"] == "passed"
    assert float(version.tags["holdout_accuracy"]) >= 0
    assert version.tags["airflow_run_id"] == "faults__A"
    model = mlflow_client.get_registered_model(registry["model"])
    assert model.aliases["challenger"] == version.version
    assert model.aliases["champion"] == version.version
    assert [e.version for e in read_history(model.tags)] == [version.version]
    manifest = manifest_of(registry, "A")
    assert manifest["version"] == version.version and manifest["promoted"]


@pytest.fixture(scope="module")
def postgres_contention(postgres_wave):
    wave, registry, client = postgres_wave["wave"], postgres_wave["registry"], postgres_wave["client"]
    wave.wait_until_waiting(("P", "Q"))
    wave.release()
    seen = wave.finish()
    seen["waited"], seen["lock_kept"] = dict(wave.waited), wave.kept
    final = client.get_registered_model(registry["model"])
    seen["aliases"], seen["history"] = final.aliases, read_history(final.tags)
    seen["versions"] = {
        name: versions_of(client, registry["model"], run["run_id"]) for name, run in registry["runs"].items()
    }
    return seen


def test_contending_registrations_on_a_postgresql_registry(postgres_contention):
    seen = postgres_contention
    assert seen["rcs"] == {"P": 0, "Q": 0}, "\n\n".join(o[-3000:] for o in seen["outputs"].values())
    assert seen["waited"] == {"P": True, "Q": True}
    assert seen["lock_kept"], "a job took the lock the test held"
    assert seen["orphans"] == {"P": [], "Q": []}
    versions = {name: [v.version for v in found] for name, found in seen["versions"].items()}
    assert all(len(found) == 1 for found in versions.values()), versions
    history = seen["history"]
    assert sorted(e.version for e in history) == sorted(found[0] for found in versions.values())
    assert seen["aliases"]["champion"] == history[-1].version
    assert all(e.state == "done" for e in history)
    assert [e.moved_at for e in history] == sorted(e.moved_at for e in history)
    assert [e.effective for e in history] == sorted(e.effective for e in history)


def kill_once_version_exists(wave: LockedWave, client, run_id: str, name: str, args: list[str]) -> dict:
    """Start ``name`` and SIGKILL all its processes as soon as its version exists: it is then
    evaluating the champion on the held-out rows, seconds before it tags the version."""
    job = wave.start_job(name, args)
    deadline = time.monotonic() + 600
    while not versions_of(client, wave.model, run_id):
        if job.returncode is not None:
            raise AssertionError(f"register({name}) ended before it registered a version:\n{job.output[-5000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"register({name}) registered no version:\n{job.output[-5000:]}")
        time.sleep(0.25)
    killed = sigkill_tree(job.marker)
    job.wait()
    return {
        "killed": killed,
        "rc": job.returncode,
        "output": job.output,
        "orphans": wait_for_no_orphans(job.marker),
        "versions": versions_of(client, wave.model, run_id),
        "aliases": client.get_registered_model(wave.model).aliases,
    }


@pytest.fixture(scope="module")
def contention(faults_stack, registry, outage, mlflow_client):
    """Steps 2 and 3 of the module docstring, in one wave of jobs (the machine stays busy):
    register(B) killed mid-job and retried while A, C, D and E run; D and E refused; A, B
    and C waiting for the lock the test holds while MLflow goes down and comes back."""
    stack, model = faults_stack.stack, registry["model"]
    thresholds = {"A": OPEN, "B": OPEN, "C": OPEN, "D": WORSE_THAN_CHAMPION, "E": BELOW_FLOOR}
    args = {
        name: register_args(registry, name, SECOND_NIGHT, **thresholds[name], extra=PATIENT_WAITER)
        for name in CANDIDATES
    }
    seen: dict = {}
    wave = LockedWave.start(
        faults_stack.jobs, mlflow_client, model, {name: args[name] for name in "ACDE"}, env=RETRY_ENV
    )
    try:
        seen["crash"] = kill_once_version_exists(wave, mlflow_client, registry["runs"]["B"]["run_id"], "B1", args["B"])
        wave.start_job("B", args["B"])  # the killed task's retry: the same arguments
        # D and E, refused, never take the lock: they end while the test still holds it (one
        # that tries to promote waits instead, and the refusal checks fail).
        wave.wait_until_ended_or_waiting(("D", "E"))
        held = mlflow_client.get_registered_model(model)
        seen["while_held"] = {
            "champion": held.aliases.get("champion"),
            "history": read_history(held.tags),
            "refused": {
                name: {
                    "rc": wave.jobs[name].returncode,
                    "output": wave.jobs[name].output,
                    "manifest": manifest_of(registry, name),
                    "versions": versions_of(mlflow_client, model, registry["runs"][name]["run_id"]),
                }
                for name in ("D", "E")
            },
        }
        contenders = {name: wave.jobs[name] for name in ("A", "B", "C")}
        wave.wait_until_waiting(tuple(contenders))
        retries_before = {name: job.output.count(RETRY_LINE) for name, job in contenders.items()}
        stack.stop_mlflow()
        try:
            deadline = time.monotonic() + 120
            while any(job.output.count(RETRY_LINE) == retries_before[n] for n, job in contenders.items()):
                if time.monotonic() > deadline or any(job.returncode is not None for job in contenders.values()):
                    break
                time.sleep(0.2)
            seen["retried_while_down"] = {
                name: job.output.count(RETRY_LINE) > retries_before[name] for name, job in contenders.items()
            }
        finally:
            stack.start_mlflow()
        wave.release()
        seen.update(wave.finish())
    finally:
        wave.abort()
    seen["waited"], seen["lock_kept"] = dict(wave.waited), wave.kept
    final = mlflow_client.get_registered_model(model)
    seen["aliases"], seen["history"] = final.aliases, read_history(final.tags)
    seen["versions"] = {
        name: versions_of(mlflow_client, model, registry["runs"][name]["run_id"]) for name in CANDIDATES
    }
    seen["manifests"] = {name: manifest_of(registry, name) for name in CANDIDATES}
    return seen


def test_registration_killed_between_creating_and_tagging_its_version(contention, outage):
    crash = contention["crash"]
    assert crash["rc"] == -9, crash["output"][-3000:]
    assert any("register.py" in line for line in crash["killed"]), crash["killed"]
    assert crash["orphans"] == []
    (version,) = crash["versions"]
    # Killed in between: the version exists, without the tags the gate reads, and no alias
    # points to it.
    assert "validation_status" not in version.tags and "holdout_accuracy" not in version.tags, version.tags
    assert version.version not in crash["aliases"].values()
    assert crash["aliases"]["champion"] == outage["versions"][0].version


def test_contending_registrations_overlap_and_all_succeed(contention):
    outs = contention["outputs"]
    rcs = {name: contention["rcs"][name] for name in CANDIDATES}
    assert rcs == dict.fromkeys(CANDIDATES, 0), "\n\n".join(o[-3000:] for o in outs.values())
    # Each contender reached the lock while the test held it: all three were mid-job at once.
    assert contention["waited"] == {"A": True, "B": True, "C": True}
    assert contention["lock_kept"], "a job took the lock the test held"
    assert contention["orphans"] == dict.fromkeys([*CANDIDATES, "B1"], [])


def test_mlflow_down_while_registrations_wait_is_survived(contention):
    # Stopped after the contenders' first requests (they had registered, tagged and reached
    # the lock): each retried with backoff and succeeded once the server was back.
    assert contention["retried_while_down"] == {"A": True, "B": True, "C": True}
    assert all(contention["rcs"][name] == 0 for name in ("A", "B", "C"))


def test_one_history_entry_per_promotion_and_none_lost(contention, outage):
    history, aliases = contention["history"], contention["aliases"]
    version = {name: str(v[0].version) for name, v in contention["versions"].items() if v}
    assert [e.version for e in history[:1]] == [version["A"]]
    assert sorted(e.version for e in history[1:]) == sorted([version["B"], version["C"]])
    assert aliases["champion"] == history[-1].version
    assert all(e.state == "done" for e in history)
    assert [e.moved_at for e in history] == sorted(e.moved_at for e in history)
    assert [e.effective for e in history] == sorted(e.effective for e in history)
    assert contention["manifests"]["B"]["promoted"] and contention["manifests"]["C"]["promoted"]


def test_every_run_has_exactly_one_version(contention):
    assert {name: len(v) for name, v in contention["versions"].items()} == dict.fromkeys(CANDIDATES, 1)
    assert len({v[0].version for v in contention["versions"].values()}) == len(CANDIDATES)


def test_retried_registration_reuses_its_version_and_is_not_promoted_twice(contention, outage):
    (version,) = contention["versions"]["A"]
    assert version.version == outage["versions"][0].version
    assert "reusing version" in contention["outputs"]["A"]
    assert [e.version for e in contention["history"]].count(version.version) == 1


def test_killed_registration_is_completed_by_its_retry(contention):
    (version,) = contention["versions"]["B"]
    assert version.version == contention["crash"]["versions"][0].version
    assert f"reusing version {version.version}" in contention["outputs"]["B"]
    assert version.status == "READY"
    assert version.tags["validation_status"] == "passed"
    assert float(version.tags["holdout_accuracy"]) >= 0
    assert version.tags["airflow_run_id"] == "faults__B"
    manifest = contention["manifests"]["B"]
    assert manifest["version"] == version.version and manifest["promoted"]
    assert version.version in [e.version for e in contention["history"]]


def test_candidate_worse_than_the_champion_is_refused(contention, outage):
    champion = outage["versions"][0].version
    refused = contention["while_held"]["refused"]["D"]
    assert refused["rc"] == 0, refused["output"][-3000:]  # ended, refused, without waiting for the lock
    manifest = refused["manifest"]
    assert manifest["promoted"] is False and manifest["passed"] is False
    assert "worse than champion's" in manifest["reason"], manifest["reason"]
    # Compared with the champion on the same held-out rows, and really worse there.
    assert manifest["metric"] == "accuracy"
    assert manifest["champion_value"] > manifest["holdout_value"] + WORSE_THAN_CHAMPION["tolerance"]
    assert_refusal_left_champion_alone(contention, "D", champion)


def test_candidate_below_the_floor_is_refused(contention, outage):
    champion = outage["versions"][0].version
    refused = contention["while_held"]["refused"]["E"]
    assert refused["rc"] == 0, refused["output"][-3000:]  # ended, refused, without waiting for the lock
    manifest = refused["manifest"]
    assert manifest["promoted"] is False and manifest["passed"] is False
    assert "below the floor" in manifest["reason"], manifest["reason"]
    assert manifest["holdout_value"] < BELOW_FLOOR["floor"]
    assert_refusal_left_champion_alone(contention, "E", champion)


def assert_refusal_left_champion_alone(contention, name: str, champion: str) -> None:
    refused = contention["while_held"]["refused"][name]
    (version,) = refused["versions"]
    assert version.tags["validation_status"] == "failed"
    assert version.tags["validation_reason"] == refused["manifest"]["reason"]
    # While the test held the lock nothing else could move the alias: it is still A's, and
    # the history is still A's single entry.
    assert contention["while_held"]["champion"] == champion
    assert [e.version for e in contention["while_held"]["history"]] == [champion]
    assert version.version not in [e.version for e in contention["history"]]
