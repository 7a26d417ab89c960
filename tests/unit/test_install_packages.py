"""scripts/install_packages.py: uv installs with pip's configuration (which uv does not read),
and pip installs where uv fails. Real installs into fresh virtual environments, of a wheel
that only pip's configured find-links folder holds."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from install_packages import UV_VERSION, pip_settings, pip_to_uv, uv_arguments

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "install_packages.py"
UV = Path(sys.executable).with_name("uv")  # what scripts/setup_env.sh put in .venv

LISTING = """\
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
user.index-url='https://mirror.example/simple'
:env:.default-timeout='180'
:env:.find-links=''
"""


def test_pip_variables_override_its_files_and_each_setting_reaches_uv():
    settings = pip_settings(LISTING)
    assert settings["find-links"] == ""  # PIP_FIND_LINKS="" empties the file's value, as in pip
    args, env = uv_arguments(settings)
    assert args == [
        "--index-strategy",
        "unsafe-best-match",
        "--index-url",
        "https://mirror.example/simple",
        "--extra-index-url",
        "file:///opt/pypi/simple",
        "--extra-index-url",
        "file:///opt/pypi-more/simple",
        "--constraint",
        "/etc/xdg/pip/constraints.txt",
    ]
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "UV_HTTP_TIMEOUT": "180"}
    assert pip_to_uv(["--no-deps", "--force-reinstall", "pyspark==4.3.0"]) == [
        "--no-deps",
        "--reinstall",
        "pyspark==4.3.0",
    ]


def test_the_uv_put_in_place_is_the_one_requirements_txt_pins():
    assert f"uv=={UV_VERSION}" in (REPO / "requirements.txt").read_text().splitlines()
    assert f"uv=={UV_VERSION}" in (REPO / "constraints.txt").read_text().splitlines()


@given(st.text())
def test_any_listing_is_read_without_an_error(listing):
    settings = pip_settings(listing)
    args, _ = uv_arguments(settings)
    assert args[:2] == ["--index-strategy", "unsafe-best-match"]


def tiny_wheel(folder: Path, name: str = "onlyhere", version: str = "1.0") -> Path:
    """A pure-Python wheel of one module ``name`` (``VALUE = version``), written by hand."""
    files = {
        f"{name}.py": f"VALUE = {version!r}\n",
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{name}-{version}.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = f"{name}-{version}.dist-info/RECORD"
    lines = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        lines.append(f"{path},sha256={digest},{len(text.encode())}")
    files[record] = "\n".join([*lines, f"{record},,"]) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


@pytest.fixture
def fresh_venv(tmp_path):
    """A new virtual environment with its own pip (ensurepip's) and nothing installed."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    return venv


def install(venv: Path, tmp_path: Path, uv: Path) -> subprocess.CompletedProcess:
    """The script run by ``venv``'s interpreter with ``uv`` beside it, pip told by its
    variables to use a folder holding :func:`tiny_wheel` alone."""
    (tmp_path / "wheels").mkdir()
    tiny_wheel(tmp_path / "wheels")
    (venv / "bin" / "uv").symlink_to(uv)
    # PYTHONDONTWRITEBYTECODE (set in many containers): no import ever writes bytecode, so
    # the installer must have.
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "wheels")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run(
        [str(venv / "bin" / "python"), str(SCRIPT), "onlyhere==1.0"], env=env, capture_output=True, text=True
    )


def test_uv_installs_from_where_pips_configuration_points(fresh_venv, tmp_path):
    assert UV.exists(), f"{UV}: scripts/setup_env.sh installs uv"
    done = install(fresh_venv, tmp_path, UV)
    assert done.returncode == 0, done.stderr
    assert "pip installs it instead" not in done.stderr
    shown = subprocess.run(
        [str(fresh_venv / "bin" / "python"), "-c", "import onlyhere; print(onlyhere.VALUE)"],
        capture_output=True,
        text=True,
    )
    assert shown.stdout.strip() == "1.0", shown.stderr
    # uv wrote the installer record (pip writes "pip")
    (installer,) = (fresh_venv / "lib").glob("python*/site-packages/onlyhere-1.0.dist-info/INSTALLER")
    assert installer.read_text().strip() == "uv"
    assert compiled(fresh_venv), "uv left the module without bytecode"


def test_pip_installs_where_uv_fails(fresh_venv, tmp_path):
    broken = tmp_path / "broken-uv"
    broken.write_text("#!/bin/sh\necho 'uv: broken' >&2\nexit 2\n")
    broken.chmod(0o755)
    done = install(fresh_venv, tmp_path, broken)
    assert done.returncode == 0, done.stderr
    assert "uv: broken" in done.stderr and "pip installs it instead" in done.stderr
    (installer,) = (fresh_venv / "lib").glob("python*/site-packages/onlyhere-1.0.dist-info/INSTALLER")
    assert installer.read_text().strip() == "pip"
    assert compiled(fresh_venv), "pip left the module without bytecode"


def compiled(venv: Path) -> list[Path]:
    """The bytecode files of the installed module ``onlyhere``."""
    return list((venv / "lib").glob("python*/site-packages/__pycache__/onlyhere.*.pyc"))
