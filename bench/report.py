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

Runs are comparable only on the same machine: each run records the CPU model
(/proc/cpuinfo), the cores, the Redis version and the load average, and
results.json keeps the latest KEEP_RUNS runs of each machine (keyed by CPU
model and cores). The page shows the latest run of every machine side by side.
"""

import datetime
import json
import os
import platform
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results.json")
PAGE = os.path.join(ROOT, "docs", "benchmarks.md")
BEGIN = "<!-- benchmark table: generated from bench/results.json by bench/report.py -->\n"
END = "<!-- end of benchmark table -->"
KEEP_RUNS = 3


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


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for text in f:
                if text.startswith("model name"):
                    return text.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def redis_version():
    try:
        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "not installed"
    found = re.search(r"v=(\S+)", out)
    return found.group(1) if found else out.strip()


def this_machine():
    """What makes two runs comparable, and what bounded this one."""
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "arch": platform.machine(),
        "os": platform.system(),
        "redis": redis_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def machine_key(machine):
    return f"{machine['cpu']}, {machine['cores']} cores"


def latest_runs(results):
    """The latest run of each machine, the newest first."""
    runs = [machine["runs"][-1] for machine in results["machines"].values()]
    return sorted(runs, key=lambda run: run["date"], reverse=True)


def describe(machine):
    text = f"{machine['cpu']}, {machine['cores']} cores, Redis {machine['redis']}"
    if "load_average" in machine:
        text += f", load average {' / '.join(map(str, machine['load_average']))} after the run"
    return text


def table(results):
    """One table per suite, a column for the latest run of each machine; what
    bounds a line (its CPU per decision of each process, the busy cores) goes
    in a numbered note under the table, not into the cell."""
    runs = latest_runs(results)
    names = [f"run {n}" for n in range(1, len(runs) + 1)]
    suites = {}
    for column, run in enumerate(runs):
        for line in run["lines"]:
            rows = suites.setdefault(line["suite"], {})
            rows.setdefault(line["what"], [None] * len(runs))[column] = line
    text = "Each column is the latest `make bench` of one machine; ratios compare contenders of the same run.\n\n"
    text += "".join(f"- **{name}**: {run['date']}, {describe(run['machine'])}.\n" for name, run in zip(names, runs))
    text += "\n"
    for suite, rows in suites.items():
        out, notes = [f"### {suite}", "", "| what | " + " | ".join(names) + " |", "|---" * (len(runs) + 1) + "|"], []
        for what, lines in rows.items():
            cells = []
            for name, line in zip(names, lines):
                if line is None:
                    cells.append("")
                    continue
                result, target = row(line)
                if target:
                    result += f"; target {target}"
                if "bound" in line:
                    notes.append(f"{name}: {line['bound']}")
                    result += f" [{len(notes)}]"
                cells.append(result)
            out.append(f"| {what} | " + " | ".join(cells) + " |")
        if notes:
            out.append("")
            out += [f"{n}. {note}" for n, note in enumerate(notes, 1)]
        text += "\n".join(out) + "\n\n"
    for name, run in zip(names, runs):
        peers = {}
        for line in run["lines"]:
            peers.update(line.get("peers", {}))
        if peers:
            text += f"Peers of {name}, newest releases at the run: " + ", ".join(f"{k} {v}" for k, v in sorted(peers.items())) + ".\n\n"
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


def record(results, lines):
    """Adds a run to its machine's runs, keeping the latest KEEP_RUNS."""
    machine = this_machine()
    run = {"date": datetime.date.today().isoformat(), "machine": machine, "lines": lines}
    entry = results["machines"].setdefault(machine_key(machine), {"runs": []})
    entry["runs"] = (entry["runs"] + [run])[-KEEP_RUNS:]


def main():
    with open(RESULTS, encoding="utf-8") as f:
        results = json.load(f)
    source = os.environ.get("POLYLIMIT_BENCH_OUT")
    if source:
        lines = load_lines(source)
        if not lines:
            sys.exit(f"{source}: no benchmark recorded a line")
        record(results, lines)
        unbound = [f"{line['suite']}: {line['what']}" for line in lines if "ratio" in line and "bound" not in line]
        if unbound:
            print(f"{len(unbound)} compared lines record no CPU per decision of their processes:", *unbound, sep="\n  ", file=sys.stderr)
        with open(RESULTS, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1, ensure_ascii=False)
            f.write("\n")
    render_page(results)
    print(table(results))


if __name__ == "__main__":
    main()
