"""Tests of summarise.py on exports built here with the tables and columns it reads.

    python3 -m unittest discover -s bench/nsight
"""

import json
import os
import sqlite3
import subprocess
import tempfile
import unittest

import summarise


def export(path, gpu_faults=(), cpu_faults=(), copies=(), kernels=(), cause_enum=None, gpu_access=True):
    """An export at `path` holding the given rows; tables with no rows are left out, as nsys does."""
    db = sqlite3.connect(path)
    if gpu_faults:
        access = ", faultAccessType INT NOT NULL" if gpu_access else ""
        db.execute(
            "CREATE TABLE CUDA_UM_GPU_PAGE_FAULT_EVENTS (start INT NOT NULL, end INT NOT NULL, "
            f"address INT NOT NULL, numberOfPageFaults INT NOT NULL{access})"
        )
        for start, faults, kind in gpu_faults:
            values = (start, start + 10, 0x7F0000000000, faults) + ((kind,) if gpu_access else ())
            db.execute(f"INSERT INTO CUDA_UM_GPU_PAGE_FAULT_EVENTS VALUES ({', '.join('?' * len(values))})", values)
    if cpu_faults:
        db.execute("CREATE TABLE CUDA_UM_CPU_PAGE_FAULT_EVENTS (start INT NOT NULL, address INT NOT NULL)")
        db.executemany("INSERT INTO CUDA_UM_CPU_PAGE_FAULT_EVENTS VALUES (?, 0)", [(s,) for s in cpu_faults])
    if copies:
        db.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT NOT NULL, end INT NOT NULL, "
            "bytes INT NOT NULL, copyKind INT NOT NULL, migrationCause INT NOT NULL)"
        )
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, ?, ?, ?)", copies)
    if kernels:
        db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT NOT NULL, end INT NOT NULL, shortName INT NOT NULL)")
        for i, (name, start, end) in enumerate(kernels):
            db.execute("INSERT INTO StringIds VALUES (?, ?)", (i, name))
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?)", (start, end, i))
    if cause_enum:
        db.execute("CREATE TABLE ENUM_CUPTI_UM_MIGRATION_CAUSE (id INTEGER PRIMARY KEY, name TEXT, label TEXT)")
        db.executemany("INSERT INTO ENUM_CUPTI_UM_MIGRATION_CAUSE VALUES (?, '', ?)", cause_enum.items())
    db.commit()
    return db


MiB = 1 << 20
COPIES = [
    # start, end, bytes, copyKind, migrationCause
    (100, 200, 64 << 10, 11, 2),  # on demand
    (150, 450, 2 * MiB, 11, 3),  # driver prefetch
    (300, 400, 64 << 10, 11, 2),
    (500, 900, 4 * MiB, 11, 1),  # user prefetch
    (1200, 1300, 2 * MiB, 12, 4),  # eviction
    (1400, 1500, 4096, 12, 2),  # host read-back
    (1600, 1700, 8 * MiB, 1, 0),  # an explicit cudaMemcpy: not a migration
]


class Summarise(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "report.sqlite")

    def tearDown(self):
        self.dir.cleanup()

    def test_counts_faults_and_groups_migrations_by_direction_and_cause(self):
        db = export(self.path, gpu_faults=[(100, 3, 1), (300, 2, 2), (1100, 5, 1)], cpu_faults=[1400, 1450], copies=COPIES)
        s = summarise.summarise(db)
        self.assertEqual((s["gpu_fault_groups"], s["gpu_faults"]), (3, 10))
        self.assertEqual(s["gpu_faults_by_access"], {"read": 8, "write": 2})
        self.assertEqual(s["cpu_faults"], 2)
        got = {(m["direction"], m["cause"]): (m["events"], m["bytes"], m["ns"]) for m in s["migrations"]}
        self.assertEqual(
            got,
            {
                ("host to device", "coherence (on demand)"): (2, 128 << 10, 200),
                ("host to device", "driver prefetch"): (1, 2 * MiB, 300),
                ("host to device", "user prefetch"): (1, 4 * MiB, 400),
                ("device to host", "eviction"): (1, 2 * MiB, 100),
                ("device to host", "coherence (on demand)"): (1, 4096, 100),
            },
        )

    def test_kernel_filter_keeps_events_inside_matching_kernels(self):
        db = export(
            self.path,
            gpu_faults=[(100, 3, 1), (1100, 5, 1)],
            cpu_faults=[1400],
            copies=COPIES,
            kernels=[("walk_kernel", 90, 460), ("build_lists", 1000, 1150)],
        )
        s = summarise.summarise(db, kernel="walk")
        self.assertEqual((s["kernels_matched"], s["gpu_faults"], s["cpu_faults"]), (1, 3, 0))
        self.assertEqual(sum(m["bytes"] for m in s["migrations"]), (128 << 10) + 2 * MiB)
        with self.assertRaisesRegex(summarise.ExportError, "no kernel"):
            summarise.summarise(db, kernel="sort")

    def test_absent_tables_count_as_no_events(self):
        db = export(self.path)
        s = summarise.summarise(db)
        self.assertEqual((s["gpu_faults"], s["cpu_faults"], s["migrations"]), (0, 0, []))
        self.assertIn("no unified-memory migrations", summarise.table_text(s))
        with self.assertRaisesRegex(summarise.ExportError, "CUPTI_ACTIVITY_KIND_KERNEL"):
            summarise.summarise(db, kernel="walk")

    def test_a_missing_column_is_named(self):
        db = sqlite3.connect(self.path)
        db.execute("CREATE TABLE CUDA_UM_GPU_PAGE_FAULT_EVENTS (start INT, address INT)")
        with self.assertRaisesRegex(summarise.ExportError, "numberOfPageFaults"):
            summarise.summarise(db)

    def test_without_access_type_faults_are_unrecorded(self):
        db = export(self.path, gpu_faults=[(100, 4, None)], gpu_access=False)
        self.assertEqual(summarise.summarise(db)["gpu_faults_by_access"], {"unrecorded": 4})

    def test_the_exports_own_cause_labels_win(self):
        db = export(self.path, copies=COPIES[:1], cause_enum={2: "CUPTI_UM_MIGRATION_CAUSE_COHERENCE"})
        self.assertEqual(summarise.summarise(db)["migrations"][0]["cause"], "CUPTI_UM_MIGRATION_CAUSE_COHERENCE")

    def test_main_prints_writes_json_and_reports_errors(self):
        export(self.path, gpu_faults=[(100, 3, 1)], copies=COPIES).close()
        out = os.path.join(self.dir.name, "s.json")
        self.assertEqual(summarise.main([self.path, "--json", out]), 0)
        with open(out) as f:
            self.assertEqual(json.load(f)["gpu_faults"], 3)
        self.assertEqual(summarise.main([os.path.join(self.dir.name, "absent.sqlite")]), 1)
        self.assertEqual(summarise.main([self.path, "--kernel", "walk"]), 1)


PROFILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profile.sh")

# Stands in for nsys: logs its arguments, makes the files `profile` and `export` would make (the
# export is a copy of $FIXTURE), and runs the profiled command.
FAKE_NSYS = """#!/usr/bin/env bash
echo "$*" >> "$NSYS_LOG"
verb=$1; shift
out=
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in --output|--type) [[ $1 == --output ]] && out=$2; shift ;; esac
  shift
done
case $verb in
  profile) touch "$out.nsys-rep"; "$@" ;;
  export) cp "$FIXTURE" "$out" ;;
esac
"""


class ProfileScript(unittest.TestCase):
    def test_runs_profile_export_and_summary_in_order(self):
        with tempfile.TemporaryDirectory() as d:
            fixture = os.path.join(d, "fixture.sqlite")
            export(fixture, gpu_faults=[(100, 7, 1)], copies=COPIES).close()
            nsys = os.path.join(d, "nsys")
            with open(nsys, "w") as f:
                f.write(FAKE_NSYS)
            os.chmod(nsys, 0o755)
            log = os.path.join(d, "log")
            env = {**os.environ, "NSYS": nsys, "NSYS_LOG": log, "FIXTURE": fixture}
            prefix = os.path.join(d, "run")
            done = subprocess.run(
                ["bash", PROFILE, prefix, "touch", os.path.join(d, "ran")],
                env=env, capture_output=True, text=True,
            )
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("GPU faults: 7 in 1 groups", done.stdout)
            self.assertTrue(os.path.exists(os.path.join(d, "ran")), "the profiled command ran")
            with open(log) as f:
                calls = f.read().splitlines()
            self.assertEqual([c.split()[0] for c in calls], ["profile", "export"])
            for option in ("--cuda-um-gpu-page-faults=true", "--cuda-um-cpu-page-faults=true", "--trace=cuda"):
                self.assertIn(option, calls[0])
            self.assertIn(f"{prefix}.nsys-rep", calls[1])
            with open(f"{prefix}-summary.json") as f:
                self.assertEqual(json.load(f)["gpu_faults"], 7)

    def test_without_nsys_it_says_what_to_install(self):
        env = {**os.environ, "NSYS": "/nonexistent/nsys"}
        done = subprocess.run(["bash", PROFILE, "/tmp/x", "true"], env=env, capture_output=True, text=True)
        self.assertEqual(done.returncode, 2)
        self.assertIn("Install Nsight Systems", done.stderr)


if __name__ == "__main__":
    unittest.main()
