"""docs/security.md names, in brackets, the tests that hold each claim: every file it names
exists and every test it names is defined there, so a renamed or deleted test cannot
leave a claim pointing at nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = (REPO / "docs" / "security.md",)
BRACKET = re.compile(r"\[(tests/[^\]]*)\]")
# One part of a bracket: a test file, then what it says of it (names in backticks).
PART = re.compile(r"(tests/[\w/]+\.py)([^;]*)")
TEST_NAME = re.compile(r"`(test_\w+)`")


def defined_tests(path: Path) -> set[str]:
    """Names of the test functions defined in ``path`` (module level or in classes)."""
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
    }


def claims(doc: Path) -> list[tuple[str, list[str]]]:
    """(test file, test names) for every part of every bracket in ``doc``."""
    found = []
    for bracket in BRACKET.findall(doc.read_text()):
        text = " ".join(bracket.split())
        found += [(path, TEST_NAME.findall(said)) for path, said in PART.findall(text)]
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_test_a_claim_names_exists(doc):
    found = claims(doc)
    assert len(found) >= 10, f"{doc.name}: brackets not recognised"
    missing = []
    for path, names in found:
        file = REPO / path
        if not file.is_file():
            missing.append(path)
            continue
        missing += [f"{path}::{name}" for name in sorted(set(names) - defined_tests(file))]
    assert missing == [], f"{doc.name} names tests that do not exist"


def test_a_renamed_test_is_caught(tmp_path):
    """The check itself: a bracket naming a test that is not in its file is reported."""
    doc = tmp_path / "claims.md"
    doc.write_text("A claim [tests/unit/test_doc_claims.py `test_a_renamed_test_is_caught`, `test_gone`].\n")
    ((path, names),) = claims(doc)
    assert path == "tests/unit/test_doc_claims.py" and names == ["test_a_renamed_test_is_caught", "test_gone"]
    assert set(names) - defined_tests(REPO / path) == {"test_gone"}
