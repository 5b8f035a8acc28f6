"""What the SWE grader's forgery probe costs: an unresolved grade (an honest wrong fix: a harmless function appended
to the file the bug is in) of generated tasks, graded with and without the probe, alternating. The tasks are the first
of the store's newest generated set (what the last `make train` generated or reused; older rows of
`instances.jsonl` may come from an earlier generator, whose test lists were computed without the boundary).

    python -m benchmarks.forgery_probe_cost [--tasks N] [--repeats K] [--store DIR]

Prints, per arm, the median wall time of `grade_patch` (the sandboxed test runs are not this process's waited-for
children, so their CPU is not in its rusage: run it on a quiet machine) and the load average before and after. A
resolved grade starts no probe, so its cost is unchanged and not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from recipes.swe.datasets import default_store
from recipes.swe.diffs import split_patch, tree_diff
from recipes.swe.generator import GENERATED_DIR, load_instances
from recipes.swe.grader import checkout, grade_patch

WRONG_FIX = "\n\ndef _unrelated_helper(value):\n    return [value, value]\n"


def wrong_fix(store: Path, instance: dict, scratch: Path) -> str:
    """The diff of a harmless function appended to the file the bug is in (the bug left in place)."""
    base, repo = checkout(store, instance, scratch / "base"), checkout(store, instance, scratch / "repo")
    changed = next(iter(split_patch(instance["patch"])))
    with (repo / changed).open("a") as handle:
        handle.write(WRONG_FIX)
    return tree_diff(base, repo)


def timed_grade(store: Path, instance: dict, patch: str, probe: bool) -> float:
    """Wall seconds of one grade; checks it is the unresolved grade the benchmark means."""
    wall = time.perf_counter()
    grade = grade_patch(store, instance, patch, timeout_s=300, forgery_probe=probe)
    wall = time.perf_counter() - wall
    assert grade.reward == 0.0 and not grade.details["tamper"], grade.details
    assert ("forgery_probe" in grade.details) == probe, grade.details
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--store", type=Path, default=None)
    args = parser.parse_args()
    store = args.store or default_store()
    newest = max((store / GENERATED_DIR).glob("*.json"), key=lambda path: path.stat().st_mtime)
    stored = {instance["instance_id"]: instance for instance in load_instances(store)}
    instances = [stored[iid] for iid in json.loads(newest.read_text(encoding="utf-8"))[:args.tasks]]
    seen: dict[bool, list[float]] = {False: [], True: []}
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="harnessrl-probe-cost-") as scratch:
        for index, instance in enumerate(instances):
            patch = wrong_fix(store, instance, Path(scratch) / str(index))
            for repeat in range(args.repeats):
                for probe in (repeat % 2 == 0, repeat % 2 == 1):
                    seen[probe].append(timed_grade(store, instance, patch, probe))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    for probe, runs in seen.items():
        print(f"probe {'on ' if probe else 'off'}: {len(runs)} grades, wall median {statistics.median(runs):.2f} s "
              f"[{min(runs):.2f}-{max(runs):.2f}]")


if __name__ == "__main__":
    main()
