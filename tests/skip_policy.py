"""A skipped test fails the run, unless it skipped for a reason on the allow-list.

A skip is easy to miss in a green run: a test that skips because something it needs is
missing (a server, Azurite, a browser) proves nothing, and ``make test`` must say so by
failing, naming each such test and its reason. What ``make test`` needs it sets up itself
(``scripts/setup_env.sh --dev``) or the tests start (the embedded PostgreSQL, the Redis
broker), so the only reason left to skip is hardware a machine cannot be given: a GPU.

Registered by ``tests/conftest.py`` in the process that prints the summary (the pytest-xdist
controller, or the only process): skip reports reach it from the workers through
``pytest_runtest_logreport`` (and ``pytest_collectreport`` for a module that skips at import).
Imported by name (``tests/`` is on ``sys.path`` through its conftest).
"""

from __future__ import annotations

import pytest

# Reasons a test may skip for, as the start of its skip reason: ``pytest.skip("no GPU: ...")``.
ALLOWED_SKIP_REASONS = ("no GPU",)


def skip_allowed(reason: str) -> bool:
    """Whether a skip with this reason (pytest's ``Skipped: `` prefix or not) leaves the run green."""
    reason = reason.strip().removeprefix("Skipped:").strip()
    return reason.startswith(ALLOWED_SKIP_REASONS)


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The reason of a skip report: its ``longrepr`` is ``(path, line, "Skipped: <reason>")``."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple | list) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped:").strip()
    return str(longrepr)


class SkipPolicy:
    """Collects the skips that are not allowed and fails the session if there are any."""

    def __init__(self) -> None:
        self.forbidden: list[tuple[str, str]] = []

    def _record(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):  # an xfail is reported as skipped too
            reason = skip_reason(report)
            if not skip_allowed(reason):
                self.forbidden.append((report.nodeid or str(report.fspath), reason))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._record(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._record(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.forbidden and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.forbidden:
            return
        terminalreporter.section("skipped tests fail the run", red=True)
        allowed = ", ".join(repr(r) for r in ALLOWED_SKIP_REASONS)
        terminalreporter.write_line(
            f"{len(self.forbidden)} test(s) skipped for a reason not on the allow-list "
            f"(tests/skip_policy.py: {allowed}); set up what they need (scripts/setup_env.sh --dev):"
        )
        for nodeid, reason in self.forbidden:
            terminalreporter.write_line(f"SKIPPED {nodeid}: {reason}", red=True)


def register(config: pytest.Config) -> None:
    """Install the policy in this process unless it is a pytest-xdist worker (the controller
    sees every worker's reports and sets the exit status)."""
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(SkipPolicy(), "skip_policy")
