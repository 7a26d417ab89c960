"""The report: results.json (everything), results.md (tables), one PNG per curve."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = (
    "apache-airflow",
    "apache-airflow-providers-apache-spark",
    "pyspark",
    "mlflow",
    "torch",
    "horovod",
    "pyarrow",
    "pandas",
    "numpy",
)


def machine_info() -> dict[str, Any]:
    """Cores, memory, CPU, Python, Java and the versions that shape the numbers."""
    meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
    mem_kib = next((int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemTotal:")), 0)
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), "")
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    except (OSError, IndexError):
        java = "unknown"
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 2**20, 1),
        "cpu": cpu or platform.processor(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "java": java,
        "versions": versions,
    }


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:.3f} s" if value < 1 else f"{value:.1f} s"
    if unit in ("accuracy", "rmse"):  # a model's metric, not a count
        return f"{value:.4f}"
    if unit == "share of days":  # a rate: 0.045, not "0"
        return f"{value:.3f} {unit}"
    return f"{value:,.0f} {unit}"


def write_report(out: Path, meta: dict[str, Any], results: dict[str, dict], errors: dict[str, str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(out, results)
    document = {"meta": meta, "benchmarks": results, "errors": errors, "plots": plots}
    (out / "results.json").write_text(json.dumps(document, indent=2, default=str) + "\n")
    (out / "results.md").write_text(markdown(document))


def ratio_text(value: float) -> str:
    """A ratio with two decimals, or three significant digits below 0.01 (never "0.00x")."""
    return f"{value:.2f}x" if value >= 0.01 else f"{value:.3g}x"


def targets_table(results: dict[str, dict]) -> list[str]:
    lines = ["| benchmark | target | measured | met |", "|---|---|---|---|"]
    for name, result in results.items():
        for t in result["targets"]:
            measured = ratio_text(t["measured"]) if t["unit"] == "x" else fmt(t["measured"], t["unit"])
            lines.append(f"| {name} | {t['label']} | {measured} | {'yes' if t['met'] else '**no**'} |")
    return lines


def run_lines(meta: dict[str, Any]) -> list[str]:
    """The run: its command, date and length, and the machine it ran on."""
    m = meta["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    return [
        f"`{meta['command']}` (size `{meta['size']}`), {meta['date']}, {meta['wall_seconds'] / 60:.1f} min.",
        "",
        f"Machine: {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, {m['os']}; Python {m['python']}, "
        f"{m['java']}; {versions}. Load average (1 min) at start {meta['load_start']:.1f}, "
        f"at end {meta['load_end']:.1f}.",
        "",
        *[
            f"Merged from: `{run['command']}` ({run['date']}, load {run['load_start']:.1f} -> {run['load_end']:.1f}).  "
            for run in meta.get("runs", [])
        ],
    ]


def benchmark_tables(result: dict[str, Any]) -> list[str]:
    """One benchmark's measurements, ratios, notes and extra tables."""
    lines = ["| measurement | median | spread (min-max) | n | note |", "|---|---|---|---|---|"]
    for meas in result["measurements"].values():
        unit = meas["unit"]
        lines.append(
            f"| {meas['label']} | {fmt(meas['median'], unit)} | {fmt(meas['min'], unit)} - "
            f"{fmt(meas['max'], unit)} | {meas['n']} | {meas['note']} |"
        )
    lines += ["", "| ratio | value | range |", "|---|---|---|"]
    lines += [
        f"| {q['label']} | {ratio_text(q['value'])} | {ratio_text(q['low'])} - {ratio_text(q['high'])} |"
        for q in result["ratios"]
    ]
    if result["notes"]:
        lines += ["", *[f"- {note}" for note in result["notes"]]]
    for title, rows in result["tables"].items():
        if rows:
            lines += ["", f"**{title}**", "", "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
            lines += ["| " + " | ".join("-" if v is None else str(v) for v in row.values()) + " |" for row in rows]
    return lines


def markdown(document: dict[str, Any]) -> str:
    meta, results = document["meta"], document["benchmarks"]
    lines = [
        "# Benchmark results",
        "",
        *run_lines(meta),
        "",
        "Medians of repetitions; spread is min-max over the repetitions (n). A ratio is the ratio of "
        "medians; its range combines both sides' min-max.",
        "",
        "## Targets",
        "",
        *targets_table(results),
        "",
    ]
    for name, error in document["errors"].items():
        lines += [f"**{name} failed**: `{error.strip().splitlines()[-1]}`", ""]
    for name, r in results.items():
        lines += [f"## {r['title']}", "", r["method"], "", *benchmark_tables(r), ""]
        lines += [f"Settings: `{json.dumps(r['settings'], default=str)}`. Took {r['wall_seconds']:.0f} s.", ""]
        for plot in document["plots"].get(name, []):
            lines += [f"![{plot}]({plot})", ""]
    return "\n".join(lines)


def write_plots(out: Path, results: dict[str, dict]) -> dict[str, list[str]]:
    """One PNG per series; returns the file names by benchmark."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: dict[str, list[str]] = {}
    for name, result in results.items():
        for key, series in result["series"].items():
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for label, line in series["lines"].items():
                ax.plot(line["x"], line["y"], marker="o", label=label)
            ax.set(title=series["title"], xlabel=series["xlabel"], ylabel=series["ylabel"])
            if key == "throughput_vs_rows":
                ax.set_xscale("log")
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
            fig.tight_layout()
            fig.savefig(out / f"{key}.png", dpi=100)
            plt.close(fig)
            written.setdefault(name, []).append(f"{key}.png")
    return written
