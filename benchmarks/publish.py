"""The measured figures of the README and docs/performance.md, written from a benchmark report.

``python -m benchmarks.publish`` (``make bench`` runs it after the benchmarks) replaces the
part of each document between :data:`BEGIN` and :data:`END` with what
``benchmarks/results/results.json`` holds: in the README the run and the targets table (each
target, its measured figure, met or not); in ``docs/performance.md`` also, for each
benchmark, its measurements, ratios, notes and extra tables (the robustness runs, the
scaling table, the nightly's tasks). The figures are then those of one run, never copied by
hand; the analysis around them is prose that cites them.

Only a complete default-size run is published: a ``--size tiny`` report (the test's) or one
without every benchmark is refused in one line, and nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.report import benchmark_tables, run_lines, targets_table

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "results.json"
# Each document with the figures it gets: the targets alone, or every benchmark's tables too.
DOCUMENTS = {REPO / "README.md": False, REPO / "docs" / "performance.md": True}
BEGIN = "<!-- BEGIN measured figures: written by python -m benchmarks.publish, not by hand -->"
END = "<!-- END measured figures -->"


class PublishError(ValueError):
    """The report cannot be published, or the document has no place for it."""


def figures(document: dict[str, Any], tables: bool) -> str:
    """The generated block's text (between the markers, without them): the run and its
    targets, and with ``tables`` each benchmark's tables."""
    meta, results = document["meta"], document["benchmarks"]
    lines = ["", *run_lines(meta), *targets_table(results), ""]
    if tables:
        for result in results.values():
            lines += [f"### {result['title']}", "", *benchmark_tables(result), ""]
    return "\n".join(lines)


def check_complete(document: dict[str, Any], expected: list[str]) -> None:
    meta = document["meta"]
    if meta["size"] != "default":
        raise PublishError(f"a --size {meta['size']} report is not published (its figures are not measurements)")
    if document["errors"]:
        raise PublishError(f"benchmarks failed in this report: {', '.join(sorted(document['errors']))}")
    missing = [name for name in expected if name not in document["benchmarks"]]
    if missing:
        raise PublishError(f"the report lacks {', '.join(missing)}: run make bench (or --merge them in) first")


def publish(report: dict[str, Any], text: str, tables: bool = True) -> str:
    """``text`` with its block between the markers replaced by ``report``'s figures."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise PublishError(f"the document needs one {BEGIN!r} line and, after it, one {END!r} line")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{figures(report, tables)}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    from benchmarks.__main__ import BENCHMARKS

    parser = argparse.ArgumentParser(prog="python -m benchmarks.publish", description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--doc", type=Path, help="one document, with every table (default: the README and docs)")
    args = parser.parse_args(argv)
    documents = {args.doc: True} if args.doc else DOCUMENTS
    try:
        report = json.loads(args.results.read_text())
        check_complete(report, list(BENCHMARKS))
        written = {doc: publish(report, doc.read_text(), tables) for doc, tables in documents.items()}
    except (OSError, PublishError) as err:
        print(f"[publish] not published: {err}", file=sys.stderr)
        return 1
    for doc, text in written.items():  # all or none: every document was checked first
        doc.write_text(text)
        print(f"[publish] {doc}: the figures of {report['meta']['command']} ({report['meta']['date']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
