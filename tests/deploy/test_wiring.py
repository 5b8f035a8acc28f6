"""The manifests agree with the code they run: the controller's settings load into ControllerConfig, container
arguments parse with the real `harnessrl` CLI, and the agent Job the controller builds matches the documented one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.deploy.support import KUSTOMIZATIONS, agent_job, named, of_kind, render

VARIABLE = re.compile(r"\$\(([A-Z0-9_]+)\)")


def _container(kustomization: str, deployment: str) -> dict:
    [container] = named(render(kustomization), "Deployment", deployment)["spec"]["template"]["spec"]["containers"]
    return container


def _controller_config(kustomization: str, tmp_path: Path):
    from controller.config import load_controller_config

    data = named(render(kustomization), "ConfigMap", "harnessrl-controller-config")["data"]["controller.yaml"]
    path = tmp_path / "controller.yaml"
    path.write_text(data)
    return load_controller_config(path)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_controller_settings_load_and_match_the_deployment(kustomization: str, tmp_path: Path) -> None:
    objects = render(kustomization)
    config = _controller_config(kustomization, tmp_path)
    namespace = of_kind(objects, "Namespace")[0]["metadata"]["name"]
    assert config.runner == "kubernetes"
    assert config.kubernetes.namespace == namespace, "the Role covers only the install namespace"
    assert config.gateway_url == named(objects, "ConfigMap", "harnessrl-config")["data"]["gateway-url"]
    named(objects, "ServiceAccount", config.kubernetes.service_account)
    template = agent_job()
    assert config.kubernetes.image == template["spec"]["template"]["spec"]["containers"][0]["image"]
    assert config.kubernetes.service_account == template["spec"]["template"]["spec"]["serviceAccountName"]
    mounts = [m["mountPath"] for m in _container(kustomization, "harnessrl-controller")["volumeMounts"]]
    for directory in (config.work_dir, config.logs_dir):
        assert any(Path(directory).is_relative_to(mount) for mount in mounts), f"{directory} is on no volume"


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_gateway_settings_load_send_harness_model_names_to_the_policy_and_are_mounted(kustomization: str,
                                                                                   tmp_path: Path) -> None:
    from flows.config import GatewaySection
    from gateway.config import load_gateway_config, policy_routing

    config_map = named(render(kustomization), "ConfigMap", "harnessrl-gateway-config")
    data = config_map["data"]["gateway.yaml"]
    (tmp_path / "gateway.yaml").write_text(data)
    config = load_gateway_config(tmp_path / "gateway.yaml")
    policy = GatewaySection().model_name  # the name train-swe registers the policy under
    routing = policy_routing(policy)
    assert dict(config.model_aliases) == routing["model_aliases"]
    assert list(config.side_models) == routing["side_models"]
    container = _container(kustomization, "harnessrl-gateway")
    path = Path(container["args"][container["args"].index("--config") + 1])
    mount = next(m for m in container["volumeMounts"] if path.is_relative_to(m["mountPath"]))
    [volume] = [v for v in named(render(kustomization), "Deployment", "harnessrl-gateway")["spec"]["template"]["spec"]
                ["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"] and path.name == "gateway.yaml"


def _cli_args(container: dict) -> list[str]:
    """The container's argv after `harnessrl`, with $(VAR) replaced by a plausible value of that variable."""
    assert container["command"] == ["harnessrl"]
    values = {"HARNESSRL_DB_URL": "sqlite:////tmp/gateway.db", "HARNESSRL_GATEWAY_URL": "http://harnessrl-gateway:8100"}
    declared = {env["name"] for env in container.get("env", [])}
    args = []
    for arg in container["args"]:
        for name in VARIABLE.findall(arg):
            assert name in declared, f"{arg} refers to {name}, which the container does not define"
        args.append(VARIABLE.sub(lambda match: values[match.group(1)], arg))
    return args


def _parses(args: list[str]) -> None:
    """Parse `args` with the real CLI (`--help` stops it before running anything); fails on unknown options."""
    from harnessrl.cli import app

    result = CliRunner().invoke(app, [*args, "--help"])
    assert result.exit_code == 0, f"`harnessrl {' '.join(args)}` does not parse: {result.output}"


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_gateway_arguments_parse_with_the_real_cli(kustomization: str) -> None:
    _parses(_cli_args(_container(kustomization, "harnessrl-gateway")))


def test_an_unknown_option_does_not_parse() -> None:
    """Guards the check above."""
    with pytest.raises(AssertionError, match="does not parse"):
        _parses(["gateway", "serve", "--no-such-option", "1"])


def test_controller_arguments_parse_with_the_real_cli() -> None:
    from harnessrl.cli import app

    if "controller" not in {group.name for group in app.registered_groups}:
        pytest.skip("`harnessrl controller` is not mounted in harnessrl/cli.py yet")
    _parses(_cli_args(_container("base", "harnessrl-controller")))


def test_agent_job_template_is_documented_yaml() -> None:
    text = (Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "agent-job.yaml").read_text()
    assert text.startswith("#") and yaml.safe_load(text)["kind"] == "Job"
