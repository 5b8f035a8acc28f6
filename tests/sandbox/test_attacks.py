"""Every escape of issue 12 tried from inside the sandbox (real bubblewrap, a few 10-ms starts each): all must fail."""

from __future__ import annotations

import os
import socket
import sys
import time

import pytest

from sandbox import Limits, SandboxError, run_command, sandbox_problem, start
from sandbox.run import kill
from tests.sandbox.support import fresh_uid, python_spec, wait_no_processes, workdir

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="these tests start sandboxes as root (the local runner)")


def sh(spec, script: str, timeout_s: float = 20.0, **kwargs):
    return run_command(spec, ["/bin/sh", "-c", script], timeout_s, **kwargs)


def test_identity_unprivileged_no_caps_no_new_privs_own_namespaces(tmp_path):
    spec = python_spec(tmp_path)
    result = sh(spec, "id -u; id -g; id -G; grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs)' /proc/self/status;"
                      " hostname; ls /")
    lines = result.output.split()
    assert result.returncode == 0, result.output
    assert lines[:3] == [str(spec.uid), str(spec.gid), str(spec.gid)]
    assert result.output.count("0000000000000000") == 4 and "NoNewPrivs:\t1" in result.output
    assert "sandbox" in lines
    for name in ("/proc/self/ns/pid", "/proc/self/ns/net", "/proc/self/ns/mnt", "/proc/self/ns/ipc",
                 "/proc/self/ns/uts"):
        inside = sh(spec, f"readlink {name}").output.strip()
        assert inside and inside != os.readlink(name), name


def test_store_and_project_are_not_in_the_sandbox_and_mounts_cannot_be_undone(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "instances.jsonl").write_text('{"patch": "GOLD-PATCH-7f3a"}\n')
    spec = python_spec(tmp_path)
    result = sh(spec, f"cat {store}/instances.jsonl; ls {store}; ls /work/main/gateway; ls /root/.ssh;"
                      f" umount /usr; umount -l {spec.writable}; mount -t tmpfs x /tmp; echo rc=$?;"
                      f" touch /usr/x /etc/passwd /etc/ld.so.preload; ls /etc")
    assert "GOLD-PATCH-7f3a" not in result.output
    assert f"{store}': No such file or directory" in result.output  # not hidden: absent
    assert "rc=0" not in result.output  # no mount works
    assert not (tmp_path / "store" / "x").exists()
    assert "ld.so.preload" not in sh(spec, "ls /etc").output
    assert "shadow" not in sh(spec, "ls /etc").output


def test_no_way_back_into_the_host_network_namespace(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    spec = python_spec(tmp_path)
    script = ("import socket, sys\n"
              f"for target in [('127.0.0.1', {port}), ('1.1.1.1', 53)]:\n"
              "    try: socket.create_connection(target, timeout=1); print('REACHED', target)\n"
              "    except OSError as e: print('blocked', e)\n"
              "try: socket.getaddrinfo('example.com', 80); print('REACHED dns')\n"
              "except OSError as e: print('blocked dns', e)\n")
    result = run_command(spec, [sys.executable, "-c", script], 20)
    listener.close()
    assert "REACHED" not in result.output and result.output.count("blocked") == 3, result.output
    result = sh(spec, "for p in /proc/[0-9]*; do nsenter --net=$p/ns/net true && echo ENTERED $p; done; "
                      "unshare --net true && echo UNSHARED")
    assert "ENTERED" not in result.output, result.output


def test_parents_environment_and_secrets_are_not_readable(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_ADMIN_TOKEN", "admin-secret-123")
    spec = python_spec(tmp_path)
    result = sh(spec, "cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n'; env")
    assert "admin-secret-123" not in result.output
    assert "HARNESSRL_ADMIN_TOKEN" not in result.output
    own = python_spec(tmp_path, name="own", env={"ROLLOUT_KEY": "rk-in-the-env-only"})
    pid1 = sh(own, "tr '\\0' ' ' < /proc/1/cmdline")
    assert "bwrap --args" in pid1.output and "rk-in-the-env-only" not in pid1.output  # values are not on argv


def test_git_gives_nothing_back(tmp_path):
    (tmp_path / "store" / "repo.git").mkdir(parents=True)
    spec = python_spec(tmp_path)
    result = sh(spec, f"git -C {spec.writable} log; ls {tmp_path}/store; find / -xdev -name '*.git' -maxdepth 4")
    assert "repo.git" not in result.output


@pytest.mark.parametrize("daemon", ["setsid sleep 300 &", "nohup sleep 300 >/dev/null 2>&1 &",
                                    "(sh -c 'sleep 300 &' &)", "setsid sh -c 'trap \"\" TERM HUP; sleep 300' &"])
def test_no_process_outlives_its_command(tmp_path, daemon):
    spec = python_spec(tmp_path)
    result = sh(spec, f"{daemon}\nsleep 0.2; echo started")
    assert "started" in result.output
    assert wait_no_processes(spec.uid) == []


def test_time_limit_kills_everything_inside(tmp_path):
    spec = python_spec(tmp_path)
    began = time.monotonic()
    result = sh(spec, "setsid sleep 300 & sleep 300", timeout_s=0.5)
    assert result.timed_out and result.returncode == -9
    assert time.monotonic() - began < 5
    assert wait_no_processes(spec.uid) == []


def test_killing_the_starter_kills_the_sandbox(tmp_path):
    """--die-with-parent: the harness's controller dying takes every sandboxed process with it."""
    spec = python_spec(tmp_path)
    process = start(spec, ["/bin/sh", "-c", "setsid sleep 300 & sleep 300"])
    time.sleep(0.3)
    kill(process)
    process.wait()
    assert wait_no_processes(spec.uid) == []


def test_kill_minus_one_cannot_reach_other_sandboxes(tmp_path):
    uid = fresh_uid()
    victim_spec = python_spec(tmp_path, uid=uid, name="victim")
    victim = start(victim_spec, ["/bin/sh", "-c", "sleep 300"])
    time.sleep(0.2)
    attacker = python_spec(tmp_path, uid=uid, name="attacker")  # same uid: only the PID namespace protects
    sh(attacker, "kill -9 -1; pkill -9 sleep; echo done")
    try:
        assert victim.poll() is None, "the other sandbox was killed"
    finally:
        kill(victim)
        victim.wait()


def test_other_rollouts_working_directories_are_not_writable(tmp_path):
    uid = fresh_uid()
    other = workdir(tmp_path, "other", uid)
    spec = python_spec(tmp_path, uid=uid, name="mine")
    result = sh(spec, f"echo pwned > {other}/x; ls {other}; echo pwned > ../x; echo pwned > {tmp_path}/x; "
                      "touch /x; touch /tmp/ok && echo tmp-ok")
    assert not (other / "x").exists() and not (tmp_path / "x").exists()
    assert "tmp-ok" in result.output


def test_fork_bomb_is_bounded(tmp_path):
    spec = python_spec(tmp_path, limits=Limits(processes=32))
    began = time.monotonic()
    result = sh(spec, "bomb() { bomb | bomb & }; bomb; sleep 1; echo survived", timeout_s=3)
    assert time.monotonic() - began < 10
    assert result.returncode != 0 or "survived" in result.output
    assert wait_no_processes(spec.uid) == []


def test_ten_gigabyte_file_is_refused(tmp_path):
    spec = python_spec(tmp_path, limits=Limits(file_bytes=1 << 20, tmp_bytes=1 << 20))
    result = sh(spec, "head -c 10G /dev/zero > big; echo rc=$?; head -c 10G /dev/zero > /tmp/big; echo rc=$?")
    assert result.output.count("rc=0") == 0, result.output
    assert (spec.writable / "big").stat().st_size <= 1 << 20


def test_a_gigabyte_of_output_is_not_buffered(tmp_path):
    spec = python_spec(tmp_path)
    result = sh(spec, "head -c 1G /dev/zero; echo; echo end", max_output_bytes=4096)
    assert result.returncode == 0 and result.output.rstrip().endswith("end")
    assert len(result.output) < 4096 + 100 and result.dropped_bytes > 1_000_000_000 - 8192


def test_ld_preload_and_setuid_give_no_privilege(tmp_path):
    spec = python_spec(tmp_path, env={"LD_PRELOAD": "/nonexistent.so"})
    result = sh(spec, "echo /tmp/evil.so > /etc/ld.so.preload; echo rc=$?; "
                      "for b in /usr/bin/su /usr/bin/mount /usr/bin/passwd; do [ -u $b ] && $b --help >/dev/null 2>&1;"
                      " done; LD_PRELOAD= id -u")
    assert "rc=0" not in result.output
    assert result.output.strip().endswith(str(spec.uid))


def test_fails_closed_without_bwrap(tmp_path, monkeypatch):
    import sandbox.probe as probe

    spec = python_spec(tmp_path)
    monkeypatch.setattr(probe, "tool", lambda name: f"/nonexistent/{name}")
    probe.sandbox_problem.cache_clear()
    try:
        assert "install bubblewrap" in (sandbox_problem() or "")
        with pytest.raises(SandboxError, match="bwrap.*install bubblewrap.*Nothing is run unsandboxed"):
            run_command(spec, ["true"], 5)
    finally:
        probe.sandbox_problem.cache_clear()


def test_start_up_cost_is_small(tmp_path):
    spec = python_spec(tmp_path)
    run_command(spec, ["true"], 10)
    began = time.monotonic()
    for _ in range(5):
        assert run_command(spec, ["true"], 10).returncode == 0
    assert (time.monotonic() - began) / 5 < 0.5


def test_output_is_read_while_the_command_runs(tmp_path):
    """A command that writes more than a pipe holds and then waits is not blocked by its own output."""
    spec = python_spec(tmp_path)
    result = sh(spec, "head -c 1M /dev/zero | tr '\\0' y; sleep 0.1; echo ok")
    assert result.output.endswith("ok\n") and result.dropped_bytes > 0


