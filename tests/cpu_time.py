"""Where the suite's CPU goes: the CPU seconds of each test file, and how busy the machine was while the suite ran.

`make test` is CPU-bound on 2 cores, so its wall time follows the CPU its tests spend, not their wall times (two
heavy files side by side each take twice as long). Each test's CPU is the test process's own (user + system) plus
that of the processes it started and waited for (`RUSAGE_CHILDREN`), from its set-up to its teardown; a session
fixture's server is counted when it stops, at its worker's last teardown, on a line of its own (not its last test's
file), and a process nobody waits for is not counted.
The workers send it with their teardown reports (`user_properties`), so the summary covers both xdist workers.

`--cpu-json FILE` also writes every test's CPU seconds (and the session fixtures' stop) to FILE, for a look past
the summary's top files.

At the end of a run the terminal summary prints the costliest files by CPU seconds, the total, and the machine's busy
share over the suite (from /proc/stat, every process of the machine counted: a share well under 100% with two
workers says more workers would help; at 100% only less work does).
"""

from __future__ import annotations

import json
import resource
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

CPU_PROPERTY = "cpu_s"
"""The `user_properties` key of a teardown report's CPU seconds."""
SESSION_PROPERTY = "session_teardown_cpu_s"
"""The `user_properties` key of the CPU seconds of a worker's last teardown, where its session fixtures stop."""
START = pytest.StashKey[float]()
SESSION_TEARDOWN = pytest.StashKey[float]()
SHOWN_FILES = 15
"""Files listed in the summary, costliest first."""


def cpu_now_s() -> float:
    """This process's CPU seconds and those of its waited-for children, user and system."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass(frozen=True)
class MachineTimes:
    """The machine's jiffies from /proc/stat's first line: all of them and the idle ones (idle + iowait)."""

    total: int
    """Every jiffy of every CPU."""
    idle: int
    """Jiffies spent idle or waiting for I/O."""

    @classmethod
    def read(cls, stat: Path = Path("/proc/stat")) -> MachineTimes | None:
        """Now's times, or None where /proc/stat is not there (not Linux)."""
        try:
            fields = [int(value) for value in stat.read_text().splitlines()[0].split()[1:]]
        except (OSError, ValueError, IndexError):
            return None
        return cls(total=sum(fields[:8]), idle=fields[3] + fields[4])


def busy_share(start: MachineTimes | None, end: MachineTimes | None) -> float | None:
    """The share of the machine's CPU time between two readings that was not idle; None without both."""
    if start is None or end is None or end.total <= start.total:
        return None
    return 1.0 - (end.idle - start.idle) / (end.total - start.total)


def by_file(cpu_s_by_test: dict[str, float]) -> list[tuple[str, float, int]]:
    """(file, CPU seconds, tests) for each file of `cpu_s_by_test` (keyed by node id), costliest first."""
    seconds, counts = defaultdict(float), defaultdict(int)
    for nodeid, cpu_s in cpu_s_by_test.items():
        path = nodeid.split("::", 1)[0]
        seconds[path] += cpu_s
        counts[path] += 1
    return sorted(((path, seconds[path], counts[path]) for path in seconds), key=lambda row: (-row[1], row[0]))


def summary_lines(cpu_s_by_test: dict[str, float], busy: float | None, shown: int = SHOWN_FILES,
                  session_s: float = 0.0) -> list[str]:
    """The terminal summary: the costliest `shown` files, the total, the session fixtures' stop (`session_s`: the
    workers' last teardowns, where their servers' CPU is counted), the machine's busy share."""
    rows = by_file(cpu_s_by_test)
    total_s = sum(cpu_s for _, cpu_s, _ in rows)
    lines = [f"{cpu_s:9.1f} s {100 * cpu_s / total_s if total_s else 0:5.1f}%  {tests:5d} tests  {path}"
             for path, cpu_s, tests in rows[:shown]]
    lines.append(f"{total_s:9.1f} s of CPU in {len(cpu_s_by_test)} tests of {len(rows)} files")
    if session_s:
        lines.append(f"{session_s:9.1f} s of CPU in the session fixtures' servers, counted when they stopped")
    if busy is not None:
        lines.append(f"the machine was {100 * busy:.0f}% busy while the suite ran (every process counted)")
    return lines


class CpuTimeReport:
    """The plugin: measures on the workers (or the single process), sums and prints on the controller."""

    def __init__(self, json_path: Path | None = None) -> None:
        self.json_path = json_path
        self.cpu_s_by_test: dict[str, float] = {}
        self.session_cpu_s = 0.0
        self.machine_start = MachineTimes.read()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        item.stash[START] = cpu_now_s()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None):
        """The last test's teardown also stops the session's fixtures (their servers' CPU arrives with them): kept
        apart, not charged to that test's file."""
        before = cpu_now_s()
        try:
            return (yield)
        finally:
            if nextitem is None:
                item.stash[SESSION_TEARDOWN] = cpu_now_s() - before

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if call.when == "teardown" and START in item.stash:
            session_s = item.stash.get(SESSION_TEARDOWN, 0.0)
            report.user_properties.append((CPU_PROPERTY, cpu_now_s() - item.stash[START] - session_s))
            report.user_properties.append((SESSION_PROPERTY, session_s))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        for key, value in report.user_properties:
            if key == CPU_PROPERTY:
                self.cpu_s_by_test[report.nodeid] = float(value)
            elif key == SESSION_PROPERTY:
                self.session_cpu_s += float(value)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.cpu_s_by_test:
            return
        terminalreporter.write_sep("=", "CPU seconds by test file (tests/cpu_time.py)")
        busy = busy_share(self.machine_start, MachineTimes.read())
        for line in summary_lines(self.cpu_s_by_test, busy, session_s=self.session_cpu_s):
            terminalreporter.write_line(line)
        if self.json_path is not None:
            self.json_path.write_text(json.dumps({"cpu_s_by_test": self.cpu_s_by_test,
                                                  "session_cpu_s": self.session_cpu_s, "busy_share": busy}, indent=1))
            terminalreporter.write_line(f"every test's CPU seconds: {self.json_path}")
