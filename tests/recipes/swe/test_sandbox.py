"""Each safeguard of the agent's command sandbox, proven by an agent-style command that tries to get around it.
(The sandbox itself is attacked in tests/sandbox/; these are the SWE harness's uses of it.)"""

from __future__ import annotations

import shlex
import sys

import httpx
import pytest

from gateway.client import GatewayClient
from gateway.records import RolloutSpec
from recipes.swe.recipe import SweRecipe, rollout_input
from recipes.swe.sandbox import GIT_DISABLED_MESSAGE, Sandbox, SandboxError, isolation_problem
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

pytestmark = pytest.mark.skipif(isolation_problem() is not None, reason=f"no namespaces here: {isolation_problem()}")


@pytest.fixture
def agent(tiny_store, tmp_path) -> Sandbox:
    """The sandbox the harness builds, on a prepared working directory."""
    store, instances = tiny_store
    task = rollout_input(instances[0], store)
    SweRecipe(store=store, source="unused").prepare_workdir(task, tmp_path / "work")
    return Sandbox(cwd=tmp_path / "work" / "repo", shim_dir=tmp_path / "scratch" / "shim", hidden=(store,))


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    gw = InProcessGateway(tmp_path_factory.mktemp("gw") / "store.db").start()
    yield gw
    gw.stop()


def test_git_is_disabled_with_a_clear_message_and_the_real_git_finds_nothing(agent, tiny_store):
    for command in ["git log", "git status", "$(command -v git) log"]:
        result = agent.run(command, timeout_s=30)
        assert result.returncode != 0, command
        assert GIT_DISABLED_MESSAGE in result.output, (command, result.output)
    store, instances = tiny_store
    for command in ["/usr/bin/git log --all", f"/usr/bin/git -C {shlex.quote(str(store))} log -p --all",
                    f"GIT_DIR={shlex.quote(str(store))} /usr/bin/git log -p --all"]:
        result = agent.run(command, timeout_s=30)
        assert result.returncode != 0 and instances[0]["patch"] not in result.output, (command, result.output)


def test_the_repository_has_no_git_directory_and_the_store_is_hidden(agent, tiny_store):
    store, instances = tiny_store
    assert agent.run("ls tinymath.py", timeout_s=30).returncode == 0
    result = agent.run("cat .git/HEAD || ls .git", timeout_s=30)
    assert result.returncode != 0 and "No such file" in result.output
    assert store.joinpath("instances.jsonl").exists()
    result = agent.run(f"cat {shlex.quote(str(store / 'instances.jsonl'))}", timeout_s=30)
    assert result.returncode != 0 and instances[0]["patch"] not in result.output


def test_sockets_cannot_connect(agent, gateway):
    probe = f"import socket; socket.create_connection(('127.0.0.1', {gateway.port}), timeout=5); print('connected')"
    result = agent.run(f"{shlex.quote(sys.executable)} -c {shlex.quote(probe)}", timeout_s=30)
    assert result.returncode != 0 and "connected" not in result.output
    assert "Connection refused" in result.output or "Network is unreachable" in result.output
    assert httpx.get(gateway.url + "/health").status_code == 200  # the harness itself keeps the network


def test_the_rollout_key_is_not_in_the_environment(agent, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "rollout-secret")
    result = agent.run("env", timeout_s=30)
    assert "rollout-secret" not in result.output and "OPENAI_API_KEY" not in result.output


def test_writing_the_reward_is_refused(agent, gateway):
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        created = admin.create_rollouts([RolloutSpec(id="swe-reward-hack", group_id="g")])[0]
        url = f"{gateway.url}/v1/admin/rollouts/{created.id}/reward"
        post = (f"import httpx; r = httpx.post({url!r}, json={{'reward': 1.0}}, "
                f"headers={{'authorization': 'Bearer {created.api_key}'}}); print(r.status_code)")
        from_agent = agent.run(f"{shlex.quote(sys.executable)} -c {shlex.quote(post)}", timeout_s=30)
        assert from_agent.returncode != 0 and "ConnectError" in from_agent.output
        # Even with network, the rollout's own key cannot post a reward.
        direct = httpx.post(url, json={"reward": 1.0}, headers={"authorization": f"Bearer {created.api_key}"})
        assert direct.status_code in (401, 403), direct.text
        assert admin.get_rollout(created.id).reward is None


def test_missing_isolation_is_a_clear_error_and_nothing_runs(monkeypatch, tmp_path):
    import sandbox.probe as probe

    monkeypatch.setattr(probe, "tool", lambda name: f"/nonexistent/{name}")
    probe.sandbox_problem.cache_clear()
    try:
        with pytest.raises(SandboxError, match="cannot be sandboxed.*install bubblewrap.*Nothing is run unsandboxed"):
            Sandbox(cwd=tmp_path, shim_dir=tmp_path / "shim")
    finally:
        probe.sandbox_problem.cache_clear()


def test_network_allowed_weakens_the_network_only(tiny_store, tmp_path, gateway, caplog):
    store, instances = tiny_store
    (tmp_path / "repo").mkdir()
    agent = Sandbox(cwd=tmp_path / "repo", shim_dir=tmp_path / "scratch" / "shim", hidden=(store,),
                    allow_network=True)
    assert "HARNESSRL_SWE_ALLOW_NETWORK=1" in caplog.text and "everything else holds" in caplog.text
    probe = f"import urllib.request; print(urllib.request.urlopen({gateway.url + '/health'!r}).status)"
    result = agent.run(f"{shlex.quote(sys.executable)} -c {shlex.quote(probe)}; id -u; "
                       f"cat {shlex.quote(str(store / 'instances.jsonl'))}", timeout_s=30)
    assert result.output.split()[:2] == ["200", str(agent.spec().uid)] and agent.spec().uid != 0
    assert instances[0]["patch"] not in result.output


def test_a_store_inside_a_bound_path_is_refused(tmp_path):
    (tmp_path / "repo" / "store").mkdir(parents=True)
    with pytest.raises(SandboxError, match="must stay out of the agent's sandbox"):
        Sandbox(cwd=tmp_path / "repo", shim_dir=tmp_path / "scratch" / "shim", hidden=(tmp_path / "repo" / "store",))
