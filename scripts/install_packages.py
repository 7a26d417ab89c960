"""Install packages into this interpreter's environment with uv where it can, else with pip.

    .venv/bin/python scripts/install_packages.py -r requirements-dev.txt -c constraints.txt
    .venv/bin/python scripts/install_packages.py --no-deps --force-reinstall pyspark==4.3.0

Takes ``pip install``'s arguments. uv (:data:`UV_VERSION`, put into the environment by pip)
installs the locked requirements of ``scripts/setup_env.sh --dev`` in about 64 s, 40 of them
its bytecode, where pip takes about 140 (2 cores, a fresh .venv, 2026-12-07): it resolves,
unpacks and compiles in parallel. Like pip, it compiles the bytecode at install
(``--compile-bytecode``): uv's default leaves it to the first import, which never writes it
where ``PYTHONDONTWRITEBYTECODE`` is set, as in many containers, and every process then
compiles what it imports (``import mlflow`` 5.6 CPU s instead of 1.6, a DAG file's parse 0.6
instead of 0.2; 2026-12-07). uv reads no pip configuration, so pip's own (``pip config
list``: its files and ``PIP_*`` variables) is handed to it: index, extra indexes,
find-links, constraints, trusted hosts, certificate bundle and timeout, and it looks for
each package in every index as pip does. Where uv cannot be installed or fails, pip
installs instead, as it always did.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

UV_VERSION = "0.9.30"
NOISE = "WARNING: Location"  # pip's note on each configured local index folder that is absent


def pip_settings(listing: str) -> dict[str, str]:
    """pip's effective settings from ``pip config list`` output (``scope.key='value'`` lines):
    a ``PIP_*`` variable (scope ``:env:``) overrides the files; of the files, the last wins."""
    files: dict[str, str] = {}
    env: dict[str, str] = {}
    for line in listing.splitlines():
        name, sep, quoted = line.partition("=")
        if not sep or "." not in name:
            continue
        scope, key = name.rsplit(".", 1)
        try:
            (value,) = shlex.split(quoted) or [""]
        except ValueError:
            continue
        (env if scope == ":env:" else files)[key] = value
    return {**files, **env}


def uv_arguments(settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's flags and environment for pip's ``settings``."""
    args = ["--index-strategy", "unsafe-best-match"]  # pip's way: every index, the best match
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        args.append("--no-index")
    if settings.get("index-url"):
        args += ["--index-url", settings["index-url"]]
    for key, flag in (
        ("extra-index-url", "--extra-index-url"),
        ("find-links", "--find-links"),
        ("constraint", "--constraint"),
        ("trusted-host", "--allow-insecure-host"),
    ):
        for value in settings.get(key, "").split():
            args += [flag, value]
    env = {}
    if settings.get("cert"):
        env["SSL_CERT_FILE"] = settings["cert"]
    if settings.get("timeout") or settings.get("default-timeout"):
        env["UV_HTTP_TIMEOUT"] = settings.get("timeout") or settings["default-timeout"]
    return args, env


def pip_to_uv(pip_args: list[str]) -> list[str]:
    """``pip install`` arguments as ``uv pip install`` takes them."""
    return ["--reinstall" if arg == "--force-reinstall" else arg for arg in pip_args]


def run_quietly(command: list[str], env: dict[str, str] | None = None) -> int:
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    shown = [line for line in (done.stdout + done.stderr).splitlines() if not line.startswith(NOISE)]
    if done.returncode != 0 and shown:
        print("\n".join(shown[-40:]), file=sys.stderr)
    return done.returncode


def main(pip_args: list[str]) -> int:
    pip = [sys.executable, "-m", "pip"]
    uv = Path(sys.executable).with_name("uv")
    if not uv.exists():
        run_quietly([*pip, "install", "--quiet", f"uv=={UV_VERSION}"])
    if uv.exists():
        listing = subprocess.run([*pip, "config", "list"], capture_output=True, text=True).stdout
        args, env = uv_arguments(pip_settings(listing))
        command = [str(uv), "pip", "install", "--quiet", "--compile-bytecode", "--python", sys.executable, *args]
        command += pip_to_uv(pip_args)
        if run_quietly(command, {**os.environ, **env}) == 0:
            return 0
        print("[setup] uv could not install that (above); pip installs it instead", file=sys.stderr)
    return run_quietly([*pip, "install", "--quiet", *pip_args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
