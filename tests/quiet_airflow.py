"""What the Airflow services the tests start (the embedded stacks, the platform of ``make
up``) do differently from a deployment: nothing, but re-parse the DAG files less often.

No DAG file changes while a test runs (a changed declaration comes with a restart, whose
DAG processor parses every file first), so each file is re-parsed every ``REPARSE_S``
instead of Airflow's 30 s; new files are still found every 10 s
(``AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL``, scripts/local_stack.py). Idle, a DAG
processor at Airflow's default spent 11.3 CPU seconds in 2 minutes on 2026-12-06 (the
project's 7 DAG files), 9 % of a core, beside every test for as long as its services ran.
"""

from __future__ import annotations

REPARSE_VAR, REPARSE_S = "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL", 600
QUIET_AIRFLOW_ENV = {REPARSE_VAR: str(REPARSE_S)}
