"""Controller config (YAML + overrides, unknown keys are errors) and the `harnessrl controller run` command."""

from __future__ import annotations

import pydantic
import pytest
from typer.testing import CliRunner

from controller.config import load_controller_config
from harnessrl.cli import app
from tests.gateway.support import ADMIN_TOKEN, GRADER_TOKEN


def test_yaml_then_overrides(tmp_path):
    path = tmp_path / "controller.yaml"
    path.write_text("concurrency: 3\nrunner: kubernetes\nkubernetes:\n  namespace: agents\n  cpu: '2'\n")
    cfg = load_controller_config(path, concurrency=5, recipe=None)
    assert (cfg.concurrency, cfg.runner, cfg.kubernetes.namespace, cfg.kubernetes.cpu) == (5, "kubernetes", "agents",
                                                                                           "2")
    assert cfg.recipe is None


@pytest.mark.parametrize("text", ["concurency: 3\n", "kubernetes:\n  namespaces: x\n", "runner: docker\n",
                                  "concurrency: 0\n", "harness_network: none\n"])
def test_bad_settings_are_errors(tmp_path, text):
    path = tmp_path / "controller.yaml"
    path.write_text(text)
    with pytest.raises(pydantic.ValidationError):
        load_controller_config(path)


@pytest.mark.parametrize(("text", "allowed"), [("", False), ("harness_network: gateway\n", False),
                                               ("harness_network: host\n", True)])
def test_the_harness_network_switch_reaches_the_local_runners_sandbox(tmp_path, text, allowed):
    from controller.cli import harness_sandbox

    path = tmp_path / "controller.yaml"
    path.write_text(text)
    sandbox = harness_sandbox(load_controller_config(path))
    assert sandbox.allow_network is allowed
    assert sandbox.limits == type(sandbox)().limits  # the switch weakens the network and nothing else


def test_renewal_must_come_before_the_lease_expires():
    with pytest.raises(ValueError, match="renew_every_s=60.0 must be below lease_s=30.0"):
        load_controller_config(lease_s=30.0, renew_every_s=60.0)


def test_cli_needs_the_tokens(monkeypatch):
    monkeypatch.delenv("HARNESSRL_ADMIN_TOKEN", raising=False)
    result = CliRunner().invoke(app, ["controller", "run", "--gateway", "http://127.0.0.1:9", "--until-idle"])
    assert result.exit_code != 0 and "HARNESSRL_ADMIN_TOKEN" in result.output


def test_cli_runs_until_idle_against_a_gateway(gateway, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESSRL_ADMIN_TOKEN", ADMIN_TOKEN)
    monkeypatch.setenv("HARNESSRL_GRADER_TOKEN", GRADER_TOKEN)
    result = CliRunner().invoke(app, ["controller", "run", "--gateway", gateway.url, "--runner", "local",
                                      "--concurrency", "2", "--work-dir", str(tmp_path / "w"),
                                      "--logs-dir", str(tmp_path / "l"), "--until-idle"])
    assert result.exit_code == 0, result.output
    assert "claimed 0, started 0" in result.output
