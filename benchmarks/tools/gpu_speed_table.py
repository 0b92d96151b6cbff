"""Print the GPU runtime tables (markdown) of docs/performance.md from the GPU scripts' result files.

    python -m benchmarks.tools.gpu_speed_table benchmarks/results/gpu_speed_h100*.json benchmarks/results/levers_*.json

Reads what ``benchmarks.gpu.speed`` and ``benchmarks.gpu.levers_and_evaluation`` write. The same tables as the
report's runtime section (``dgno.report.cost_section.speed_tables``), so the documentation and the report are
regenerated from one reader; cells are "measured" or "measured (paper)".
"""

from __future__ import annotations

import sys

from dgno.analysis.runtime import load_bench_results
from dgno.report.cost_section import findings_table, speed_tables
from dgno.report.reading import load_paper


def cell_text(cell) -> str:
    if cell.measured is None:
        return "–" if cell.paper is None else f"– ({cell.paper:.{cell.digits}f})"
    text = f"{cell.measured:.{cell.digits}f}"
    return text if cell.paper is None else f"{text} ({cell.paper:.{cell.digits}f})"


def main(paths: list[str]) -> None:
    frame = load_bench_results(paths)
    prows = load_paper("runtime_memory").get("rows", {})
    for file, sub in frame[frame["mode"].notna() & (frame["kind"] != "decision")].groupby("file", sort=False):
        forward, train, evaluate = (sub[sub["kind"] == kind] for kind in ("forward", "train", "evaluate"))
        for table in speed_tables(forward, train, prows, file, str(sub["device"].iloc[0]), evaluate=evaluate):
            print(f"\n{table.caption}\n")
            print("| | " + " | ".join(f"{group} {metric}" for group, metric in table.columns) + " |")
            print("|---" * (len(table.columns) + 1) + "|")
            for label, cells in table.rows:
                print(f"| {label} | " + " | ".join(cell_text(c) for c in cells) + " |")
    findings = findings_table(frame)
    if findings:
        print("\nFindings of the training-step levers benchmark:\n")
        for file, topic, text in findings[1]:
            print(f"- {topic} ({file}): {text}")


if __name__ == "__main__":
    main(sys.argv[1:])
