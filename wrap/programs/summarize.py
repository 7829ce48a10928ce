#!/usr/bin/env python3
"""The tables of a wrap/programs/run.sh output folder, as Markdown: medians of each timing,
plain against wrapped (without counters, the timing comparison; with counters, the report's
run) and --no-pool; and each program's report totals next to CUPTI's count with the
allocations left with the driver (--no-pool).

    python3 wrap/programs/summarize.py OUT_DIR
"""
import collections
import gzip
import json
import os
import statistics
import sys


def report(out, name):
    """A report, as run.sh leaves it or as committed (under reports/, large ones gzipped)."""
    for folder in (out, os.path.join(out, "reports")):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return json.load(open(path))
        if os.path.exists(path + ".gz"):
            return json.load(gzip.open(path + ".gz"))
    raise FileNotFoundError(name)


def main(out):
    rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(out, "summary.tsv"))][1:]
    times = collections.defaultdict(lambda: collections.defaultdict(list))
    same = collections.Counter()
    programs = []
    for program, mode, _run, ok, fields in rows:
        same[ok] += 1
        if program not in programs:
            programs.append(program)
        f = fields.split()
        for key, value in zip(f[::2], f[1::2]):
            times[(program, key)][mode].append(float(value))
    print(f"Runs whose result lines match the plain run's: {same['yes']} of {sum(same.values())}.\n")
    print("| program | figure (ms) | plain | wrapped, no counters | plain / wrapped | wrapped, counters | --no-pool, counters |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for (program, key), by_mode in times.items():
        m = {mode: statistics.median(v) for mode, v in by_mode.items()}
        print(f"| {program} | {key} | {m['plain']:.2f} | {m['wrapped-nc']:.2f} | "
              f"{m['plain'] / m['wrapped-nc']:.2f} | {m['wrapped']:.2f} | {m['no-pool']:.2f} |")
    print("\n| program | managed allocations | arena / past the cap | us per allocation in the "
          "allocator (no counters) | HtoD MiB (wrapped / --no-pool) | DtoH MiB | GPU fault groups "
          "| CPU faults | lookups wrapped | left unwrapped |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    mib = lambda b: b / 2**20
    for program in programs:
        load = lambda mode: report(out, f"{program}.{mode}.1.json")
        w, n, nc = load("wrapped"), load("no-pool"), load("wrapped-nc")
        tw, tn, p = w["total"], n["total"], w["pool"]["counters"]
        i = nc["interception"]
        per = i["alloc_ns"] / 1e3 / max(1, i["managed_allocations"])
        print(f"| {program} | {w['interception']['managed_allocations']} | "
              f"{p['arena_allocations']} / {p['past_cap_allocations']} | {per:.2f} | "
              f"{mib(tw['htod_bytes']):.1f} / {mib(tn['htod_bytes']):.1f} | "
              f"{mib(tw['dtoh_bytes']):.1f} / {mib(tn['dtoh_bytes']):.1f} | "
              f"{tw['gpu_fault_groups']} / {tn['gpu_fault_groups']} | "
              f"{tw['cpu_faults']} / {tn['cpu_faults']} | {w['interception']['wrapped_lookups']} | "
              f"{w['interception']['unidentified_lookups']} |")
    if any(r[1] == "held" for r in rows):
        h = report(out, "small_allocs.held.1.json")
        print(f"\nWith another tool holding CUPTI: the program ran (result lines match: "
              f"{[r for r in rows if r[1] == 'held'][0][3]}), {h['pool']['counters']['arena_allocations']} "
              f"allocations from the arena; the report says: \"{h['counters']}\".")


if __name__ == "__main__":
    main(sys.argv[1])
