"""The agent-cli image (deploy/docker/agent-cli.Dockerfile): the image rules of every Dockerfile here, Node 20, the
CLIs installed by the project's own installer at the pinned versions, and HARNESSRL_CLI_DIR where they are."""

from __future__ import annotations

from recipes.cli_harness.binaries import CLI_DIR_ENV
from tests.deploy.dockerfile import arg_defaults, parse, problems
from tests.deploy.support import DOCKER, REPO

DOCKERFILE = DOCKER / "agent-cli.Dockerfile"


def test_agent_cli_dockerfile_keeps_the_image_rules():
    assert problems(DOCKERFILE.read_text()) == []


def test_node_20_python_3_11_and_the_pinned_installer():
    instructions = parse(DOCKERFILE.read_text())
    defaults = arg_defaults(instructions)
    assert defaults["NODE_IMAGE"].startswith("node:20.") and defaults["PYTHON_IMAGE"].startswith("python:3.11.")
    runs = [i.value for i in instructions if i.keyword == "RUN"]
    assert any("python -m recipes.cli_harness.install /opt/harnesses" in run for run in runs)
    envs = " ".join(i.value for i in instructions if i.keyword == "ENV")
    assert f"{CLI_DIR_ENV}=/opt/harnesses" in envs


def test_copies_exist_and_the_context_is_filtered():
    instructions = parse(DOCKERFILE.read_text())
    for *sources, _ in (i.value.split() for i in instructions if i.keyword == "COPY" and "--from" not in i.value):
        for source in sources:
            assert (REPO / source).exists(), source
    ignore = (DOCKER / "agent-cli.Dockerfile.dockerignore").read_text().split()
    assert {".git", ".venv*", "tests", ".harnesses"} <= set(ignore)
