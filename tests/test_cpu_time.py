"""The suite's CPU report (tests/cpu_time.py): the pure parts table-driven, and one inner pytest run whose test burns
a known amount of CPU in a child process it waits for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cpu_time import CpuTimeReport, MachineTimes, busy_share, by_file, summary_lines

pytest_plugins = ("pytester",)


@pytest.mark.parametrize(("start", "end", "expected"), [
    (MachineTimes(total=1000, idle=500), MachineTimes(total=2000, idle=1000), 0.5),
    (MachineTimes(total=1000, idle=500), MachineTimes(total=2000, idle=500), 1.0),
    (MachineTimes(total=1000, idle=500), MachineTimes(total=2000, idle=1500), 0.0),
    (MachineTimes(total=1000, idle=500), MachineTimes(total=1000, idle=500), None),  # no time passed
    (None, MachineTimes(total=2000, idle=1000), None),
    (MachineTimes(total=1000, idle=500), None, None),
])
def test_busy_share(start, end, expected):
    assert busy_share(start, end) == expected


def test_machine_times_read_proc_stat_first_line(tmp_path: Path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 50 800 20 1 2 3 0 0\ncpu0 50 2 25 400 10 0 1 1 0 0\n")
    assert MachineTimes.read(stat) == MachineTimes(total=981, idle=820)  # steal counted, guest (in user) not
    assert MachineTimes.read(tmp_path / "missing") is None
    stat.write_text("")
    assert MachineTimes.read(stat) is None


def test_by_file_sums_a_files_tests_costliest_first():
    cpu_s = {"tests/a.py::t1": 1.0, "tests/b.py::t1": 2.5, "tests/a.py::t2[x]": 2.0, "tests/c.py::C::t": 0.5}
    assert by_file(cpu_s) == [("tests/a.py", 3.0, 2), ("tests/b.py", 2.5, 1), ("tests/c.py", 0.5, 1)]
    assert by_file({}) == []


def test_summary_lists_the_costliest_files_then_the_total_and_the_machines_share():
    lines = summary_lines({"tests/a.py::t": 3.0, "tests/b.py::t": 1.0}, busy=0.87, shown=1)
    assert len(lines) == 3 and lines[0].endswith("tests/a.py") and " 75.0%" in lines[0]
    assert lines[1] == "      4.0 s of CPU in 2 tests of 2 files"
    assert lines[2] == "the machine was 87% busy while the suite ran (every process counted)"
    assert summary_lines({}, busy=None) == ["      0.0 s of CPU in 0 tests of 0 files"]
    assert summary_lines({}, busy=None, session_s=12.5)[1] == \
        "     12.5 s of CPU in the session fixtures' servers, counted when they stopped"


def test_a_tests_child_processes_cpu_is_counted_to_its_file_and_the_sessions_stop_apart(pytester: pytest.Pytester):
    """The inner test waits for a child that spends 0.6 s of CPU (process time, not wall: a busy machine only makes
    it take longer); the other file's test spends next to none, and its session fixture's stop 0.4 s, counted apart
    (the inner run's files run in name order: test_idle's is the last teardown)."""
    pytester.makepyfile(
        test_burn="""
            import subprocess, sys
            BURN = "import time\\nwhile time.process_time() < 0.6: pass"
            def test_burn():
                subprocess.run([sys.executable, "-c", BURN], check=True)
        """,
        test_idle="""
            import subprocess, sys
            import pytest
            BURN = "import time\\nwhile time.process_time() < 0.4: pass"
            @pytest.fixture(scope="session")
            def server():
                yield
                subprocess.run([sys.executable, "-c", BURN], check=True)  # a session server's CPU, at its stop
            def test_idle(server): pass
        """,
    )
    saved = pytester.path / "cpu.json"
    result = pytester.runpytest("-p", "no:cacheprovider", plugins=[CpuTimeReport(saved)])
    result.assert_outcomes(passed=2)
    lines = result.stdout.lines[result.stdout.lines.index(next(
        line for line in result.stdout.lines if "CPU seconds by test file" in line)) + 1:]
    burn_s = float(lines[0].split()[0])
    assert lines[0].endswith("test_burn.py") and burn_s >= 0.6, lines
    assert lines[1].endswith("test_idle.py") and float(lines[1].split()[0]) < 0.4, lines  # not the session's stop
    assert "of CPU in 2 tests of 2 files" in lines[2]
    assert lines[3].endswith("the session fixtures' servers, counted when they stopped"), lines
    assert float(lines[3].split()[0]) >= 0.4, lines
    written = json.loads(saved.read_text())
    assert written["cpu_s_by_test"]["test_burn.py::test_burn"] >= 0.6, written
    assert written["session_cpu_s"] >= 0.4 and set(written["cpu_s_by_test"]) == {
        "test_burn.py::test_burn", "test_idle.py::test_idle"}, written
