"""build_argv (pure): the launch chain, the namespaces, the new root's binds, the environment, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import GatewayRoute, Limits, Network, SandboxError, SandboxSpec, build_argv
from sandbox.spec import LOOPBACK_INSIDE, SOCKET_INSIDE


def pairs(argv: list[str], flag: str) -> list[str]:
    """The values following each occurrence of `flag`."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


def test_root_chain_is_prlimit_bwrap_setpriv_command():
    spec = SandboxSpec(writable=Path("/w"), readonly=(Path("/venv"),), uid=1234, gid=4321,
                       limits=Limits(processes=7, file_bytes=99), env={"A": "1"})
    argv = build_argv(spec, ["echo", "hi"])
    names = [Path(arg).name for arg in argv]
    assert names.index("prlimit") < names.index("bwrap") < names.index("setpriv") < argv.index("echo")
    assert "--nproc=7" in argv and "--fsize=99" in argv and "--core=0" in argv
    setpriv = argv[names.index("setpriv"):]
    assert setpriv[1:9] == ["--reuid", "1234", "--regid", "4321", "--clear-groups", "--no-new-privs",
                            "--inh-caps=-all", "--bounding-set=-all"]
    assert argv[-2:] == ["echo", "hi"]
    for flag in ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--die-with-parent",
                 "--new-session", "--clearenv"):
        assert flag in argv
    assert "--unshare-user" not in argv  # root drops to the uid with setpriv instead


def test_unprivileged_caller_uses_its_own_user_namespace_and_only_its_own_uid():
    spec = SandboxSpec(writable=Path("/w"), uid=1000, gid=1000)
    argv = build_argv(spec, ["true"], caller_uid=1000)
    assert {"--unshare-user", "--disable-userns"} <= set(argv)
    assert not any(Path(arg).name == "setpriv" for arg in argv)
    with pytest.raises(SandboxError, match="only sandbox commands as itself"):
        build_argv(spec, ["true"], caller_uid=1001)


def test_new_root_binds_only_what_the_spec_names():
    spec = SandboxSpec(writable=Path("/work/r1"), readonly=(Path("/opt/py"), Path("/opt/py")),
                       scratch=(Path("/out"),))
    argv = build_argv(spec, ["true"])
    assert pairs(argv, "--bind") == ["/work/r1", "/out"]
    ro = pairs(argv, "--ro-bind")
    assert ro.count("/opt/py") == 1 and "/usr" in ro
    assert not {"/", "/root", "/home", "/work", "/var", "/etc"} & set(ro)
    assert pairs(argv, "--chdir") == ["/work/r1"]
    assert argv.index("--tmpfs") < argv.index("/opt/py") < argv.index("/work/r1")  # /tmp cannot hide a bind


def test_environment_is_exactly_the_specs():
    argv = build_argv(SandboxSpec(writable=Path("/w"), env={"HOME": "/w", "PATH": "/x"}), ["true"])
    assert sorted(pairs(argv, "--setenv")) == ["HOME", "LOGNAME", "PATH", "USER"]
    assert argv[argv.index("PATH", argv.index("--clearenv")) + 1] == "/x"


def test_network_modes():
    host = build_argv(SandboxSpec(writable=Path("/w"), network=Network.HOST), ["true"])
    assert "--unshare-net" not in host and "--unshare-pid" in host
    route = GatewayRoute(socket=Path("/run/fw/r1.sock"), port=18080, python=Path("/usr/bin/python3"))
    gateway = build_argv(SandboxSpec(writable=Path("/w"), network=Network.GATEWAY, gateway=route), ["harness"])
    assert "--unshare-net" in gateway
    assert argv_after(gateway, "/run/fw/r1.sock") == str(SOCKET_INSIDE)
    tail = gateway[len(gateway) - 1 - gateway[::-1].index(str(LOOPBACK_INSIDE)):]  # its last occurrence
    assert tail[:4] == [str(LOOPBACK_INSIDE), "18080", str(SOCKET_INSIDE), "--"] and tail[-1] == "harness"


def argv_after(argv: list[str], value: str) -> str:
    return argv[argv.index(value) + 1]


@pytest.mark.parametrize("kwargs", [{"uid": 0}, {"gid": 0}, {"network": Network.GATEWAY},
                                    {"gateway": GatewayRoute(socket=Path("/s"))}, {"readonly": (Path("rel"),)}])
def test_refused_specs(kwargs):
    with pytest.raises(ValueError):
        SandboxSpec(writable=Path("/w"), **kwargs)


def test_empty_argv_is_refused():
    with pytest.raises(ValueError, match="argv is empty"):
        build_argv(SandboxSpec(writable=Path("/w")), [])
