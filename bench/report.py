#!/usr/bin/env python3
"""Collects the lines every benchmark of `make bench` recorded into
bench/results.json and regenerates the benchmark table of docs/benchmarks.md from it.

Each benchmark appends JSON lines to $POLYLIMIT_BENCH_OUT (one object per
printed line): {"suite", "what", "value", "unit", and optionally "baseline"
(what the ratio is against), "baseline_value", "ratio", "target" (a minimum
ratio), "peers" (name -> version), "detail" (the table's text for lines that
carry several numbers, e.g. latency percentiles), "bound" (a measurement of what bounds
the line on the machine, e.g. CPU per decision of each process, shown under the result)}.
A line with a target says whether it is
met. Run by `make bench` after the benchmarks; `python3 bench/report.py`
alone re-renders the table from bench/results.json.
"""

import datetime
import json
import os
import platform
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results.json")
PAGE = os.path.join(ROOT, "docs", "benchmarks.md")
BEGIN = "<!-- benchmark table: generated from bench/results.json by bench/report.py -->\n"
END = "<!-- end of benchmark table -->"


def load_lines(path):
    lines = []
    with open(path, encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            if text.strip():
                try:
                    lines.append(json.loads(text))
                except json.JSONDecodeError as e:
                    sys.exit(f"{path}:{n}: not JSON: {e}")
    return lines


def fmt(value, unit):
    if unit == "decisions/s" or unit == "req/s":
        if value >= 1e6:
            return f"{value / 1e6:.2f} M {unit}"
        return f"{value / 1e3:.1f} k {unit}"
    if unit == "ms" or unit == "µs":
        return f"{value:.2f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{value:g} {unit}"


def row(line):
    """A line's result and target cells."""
    result = fmt(line["value"], line["unit"])
    if "detail" in line:
        result = line["detail"]
    elif "ratio" in line:
        base = line.get("baseline", "")
        if "baseline_value" in line:
            base += f" ({fmt(line['baseline_value'], line['unit'])})"
        result += f" = {line['ratio']:.2f} × {base}"
    target = ""
    if "target" in line:
        met = line["ratio"] >= line["target"]
        target = f"≥ {line['target']:g} {'✓' if met else '✗ (see below)'}"
    return result, target


def table(results):
    """One short table per suite; what bounds a line (its CPU per decision, the
    busy cores) goes in a numbered note under the table, not into the cell."""
    suites = {}
    for line in results["lines"]:
        suites.setdefault(line["suite"], []).append(line)
    text = ""
    for suite, lines in suites.items():
        out, notes = [f"### {suite}", "", "| what | result | target |", "|---|---|---|"], []
        for line in lines:
            result, target = row(line)
            if "bound" in line:
                notes.append(line["bound"])
                result += f" [{len(notes)}]"
            out.append(f"| {line['what']} | {result} | {target} |")
        if notes:
            out.append("")
            out += [f"{n}. {note}" for n, note in enumerate(notes, 1)]
        text += "\n".join(out) + "\n\n"
    peers = {}
    for line in results["lines"]:
        peers.update(line.get("peers", {}))
    if peers:
        text += "Peers, newest releases at the run: " + ", ".join(f"{k} {v}" for k, v in sorted(peers.items())) + ".\n\n"
    text += f"Run of {results['date']} on {results['machine']}.\n"
    return text


def render_page(results):
    with open(PAGE, encoding="utf-8") as f:
        text = f.read()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        sys.exit(f"docs/benchmarks.md has no benchmark table markers ({BEGIN.strip()} … {END})")
    text = text[: start + len(BEGIN)] + table(results) + text[end:]
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    source = os.environ.get("POLYLIMIT_BENCH_OUT")
    if source:
        lines = load_lines(source)
        if not lines:
            sys.exit(f"{source}: no benchmark recorded a line")
        results = {
            "date": datetime.date.today().isoformat(),
            "machine": f"{os.cpu_count()} cores, {platform.machine()}, {platform.system()}",
            "lines": lines,
        }
        with open(RESULTS, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1, ensure_ascii=False)
            f.write("\n")
    else:
        with open(RESULTS, encoding="utf-8") as f:
            results = json.load(f)
    render_page(results)
    print(table(results))


if __name__ == "__main__":
    main()
