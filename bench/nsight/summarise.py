#!/usr/bin/env python3
"""Summarise unified-memory faults and migrations, by cause, from an Nsight Systems SQLite export.

    python3 bench/nsight/summarise.py REPORT.sqlite [--kernel NAME] [--json OUT.json]

Reads the tables `nsys export --type sqlite` writes when a run was profiled with
`--cuda-um-gpu-page-faults=true --cuda-um-cpu-page-faults=true` (bench/nsight/profile.sh does
both):

- CUDA_UM_GPU_PAGE_FAULT_EVENTS: one row per GPU fault group (`numberOfPageFaults` faults in it),
- CUDA_UM_CPU_PAGE_FAULT_EVENTS: one row per CPU fault,
- CUPTI_ACTIVITY_KIND_MEMCPY: copies; `copyKind` 11 and 12 are unified-memory migrations host to
  device and device to host, with their `migrationCause`,
- CUPTI_ACTIVITY_KIND_KERNEL and StringIds, only for `--kernel`.

Nsight creates tables lazily: a table that is absent means no such event, and counts as zero. A
table that is present without a column this script needs is an error naming the column, since the
export format then differs from the one this script was written for.

`--kernel NAME` keeps only events that start inside the run of some kernel whose name contains
NAME (for example `walk`), so host-side phases such as a read-back do not count.
"""

import argparse
import json
import sqlite3
import sys

UNIFIED_HTOD = 11
UNIFIED_DTOH = 12

# CUPTI's CUpti_ActivityUnifiedMemoryMigrationCause, used when the export has no enum table.
MIGRATION_CAUSES = {
    0: "unknown",
    1: "user prefetch",
    2: "coherence (on demand)",
    3: "driver prefetch",
    4: "eviction",
    5: "access counters",
}

# CUPTI's CUpti_ActivityUnifiedMemoryAccessType.
ACCESS_TYPES = {0: "unknown", 1: "read", 2: "write", 3: "atomic", 4: "prefetch"}


class ExportError(Exception):
    """The export lacks something this script needs."""


def tables(db):
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def columns(db, table):
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def require(db, table, needed):
    missing = sorted(set(needed) - columns(db, table))
    if missing:
        raise ExportError(
            f"table {table} has no column {', '.join(missing)}: this export's format differs "
            "from the one bench/nsight/summarise.py reads (see its docstring)"
        )


def cause_labels(db, present):
    """Migration-cause labels: the export's own enum table if it has one, else CUPTI's."""
    for table in sorted(present):
        if table.startswith("ENUM_") and "MIGRATION" in table:
            if {"id", "label"} <= columns(db, table):
                labels = dict(db.execute(f"SELECT id, label FROM {table}"))
                return {**MIGRATION_CAUSES, **labels}
    return MIGRATION_CAUSES


def kernel_windows(db, present, name):
    """(start, end) of every kernel whose name contains `name`."""
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in present or "StringIds" not in present:
        raise ExportError("--kernel needs the CUPTI_ACTIVITY_KIND_KERNEL and StringIds tables")
    require(db, "CUPTI_ACTIVITY_KIND_KERNEL", ["start", "end"])
    name_columns = [c for c in ("shortName", "demangledName") if c in columns(db, "CUPTI_ACTIVITY_KIND_KERNEL")]
    if not name_columns:
        raise ExportError("table CUPTI_ACTIVITY_KIND_KERNEL has neither shortName nor demangledName")
    matches = " OR ".join(f"k.{c} IN (SELECT id FROM StringIds WHERE value LIKE ?)" for c in name_columns)
    pattern = f"%{name}%"
    rows = db.execute(
        f"SELECT k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL AS k WHERE {matches} ORDER BY k.start",
        [pattern] * len(name_columns),
    ).fetchall()
    if not rows:
        raise ExportError(f"no kernel's name contains {name!r}")
    return rows


def inside(windows):
    """A predicate on a start time: inside one of `windows` (all times when None)."""
    if windows is None:
        return lambda start: True
    return lambda start: any(lo <= start <= hi for lo, hi in windows)


def summarise(db, kernel=None):
    present = tables(db)
    windows = kernel_windows(db, present, kernel) if kernel else None
    keep = inside(windows)
    summary = {
        "kernel_filter": kernel,
        "kernels_matched": len(windows) if windows else None,
        "gpu_fault_groups": 0,
        "gpu_faults": 0,
        "gpu_faults_by_access": {},
        "cpu_faults": 0,
        "migrations": [],
    }

    table = "CUDA_UM_GPU_PAGE_FAULT_EVENTS"
    if table in present:
        require(db, table, ["start", "numberOfPageFaults"])
        access = "faultAccessType" in columns(db, table)
        select = "start, numberOfPageFaults" + (", faultAccessType" if access else ", NULL")
        for start, faults, kind in db.execute(f"SELECT {select} FROM {table}"):
            if not keep(start):
                continue
            summary["gpu_fault_groups"] += 1
            summary["gpu_faults"] += faults
            label = ACCESS_TYPES.get(kind, f"type {kind}") if access else "unrecorded"
            by_access = summary["gpu_faults_by_access"]
            by_access[label] = by_access.get(label, 0) + faults

    table = "CUDA_UM_CPU_PAGE_FAULT_EVENTS"
    if table in present:
        require(db, table, ["start"])
        summary["cpu_faults"] = sum(1 for (start,) in db.execute(f"SELECT start FROM {table}") if keep(start))

    table = "CUPTI_ACTIVITY_KIND_MEMCPY"
    if table in present:
        require(db, table, ["start", "end", "bytes", "copyKind"])
        has_cause = "migrationCause" in columns(db, table)
        labels = cause_labels(db, present)
        select = "start, end, bytes, copyKind" + (", migrationCause" if has_cause else ", NULL")
        groups = {}
        for start, end, size, kind, cause in db.execute(
            f"SELECT {select} FROM {table} WHERE copyKind IN (?, ?)", (UNIFIED_HTOD, UNIFIED_DTOH)
        ):
            if not keep(start):
                continue
            direction = "host to device" if kind == UNIFIED_HTOD else "device to host"
            label = labels.get(cause, f"cause {cause}") if has_cause else "unrecorded"
            group = groups.setdefault((direction, label), {"events": 0, "bytes": 0, "ns": 0})
            group["events"] += 1
            group["bytes"] += size
            group["ns"] += end - start
        summary["migrations"] = [
            {"direction": d, "cause": c, **g} for (d, c), g in sorted(groups.items())
        ]
    return summary


def table_text(summary):
    lines = []
    if summary["kernel_filter"]:
        lines.append(
            f"events inside {summary['kernels_matched']} kernel run(s) matching "
            f"{summary['kernel_filter']!r}"
        )
    lines.append(
        f"GPU faults: {summary['gpu_faults']} in {summary['gpu_fault_groups']} groups"
        + "".join(f"; {k} {v}" for k, v in sorted(summary["gpu_faults_by_access"].items()))
    )
    lines.append(f"CPU faults: {summary['cpu_faults']}")
    lines.append(f"{'direction':<16} {'cause':<24} {'events':>9} {'MiB':>12} {'copy ms':>10}")
    for m in summary["migrations"]:
        lines.append(
            f"{m['direction']:<16} {m['cause']:<24} {m['events']:>9} "
            f"{m['bytes'] / 2**20:>12.2f} {m['ns'] / 1e6:>10.3f}"
        )
    if not summary["migrations"]:
        lines.append("(no unified-memory migrations recorded)")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", help="SQLite export of an Nsight Systems report")
    parser.add_argument("--kernel", help="count only events inside kernels whose name contains this")
    parser.add_argument("--json", help="also write the summary to this JSON file")
    args = parser.parse_args(argv)
    try:
        db = sqlite3.connect(f"file:{args.report}?mode=ro", uri=True)
        summary = summarise(db, args.kernel)
    except (ExportError, sqlite3.Error) as e:
        print(f"error: {args.report}: {e}", file=sys.stderr)
        return 1
    print(table_text(summary))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(summary, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
