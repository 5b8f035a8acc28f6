"""The Dockerfiles parse and keep the image rules; images named in the manifests are built from them."""

from __future__ import annotations

import tomllib

import pytest

from tests.deploy.dockerfile import arg_defaults, expand, parse, problems
from tests.deploy.support import DOCKER, REPO, pod_specs, render

IMAGES = ("gateway", "trainer", "agent", "mlflow")


def _dockerfile(image: str) -> str:
    return (DOCKER / f"{image}.Dockerfile").read_text()


@pytest.mark.parametrize("image", IMAGES)
def test_dockerfile_keeps_the_rules(image: str) -> None:
    assert problems(_dockerfile(image)) == []


# (Dockerfile text, expected problem fragment): the checker catches each broken rule.
BROKEN = [
    ("RUN echo hi\nUSER 1", "no FROM"),
    ("RUN echo\nFROM python:3.11-slim\nUSER 1", "only ARG may come before"),
    ("FROM python:latest\nUSER 1", "not pinned"),
    ("FROM python\nUSER 1", "not pinned"),
    ("ARG BASE=python:latest\nFROM ${BASE}\nUSER 1", "not pinned"),
    ("FROM python:3.11-slim\nRUN pip install torch\nUSER 1", "lacks -c"),
    ("FROM python:3.11-slim\nRUN true && \\\n    pip install -c other.txt torch\nUSER 1", "lacks -c"),
    ("FROM python:3.11-slim", "runs as root"),
    ("FROM python:3.11-slim\nUSER 10001\nUSER root", "runs as root"),
]


@pytest.mark.parametrize(("text", "fragment"), BROKEN)
def test_checker_catches(text: str, fragment: str) -> None:
    assert any(fragment in problem for problem in problems(text)), problems(text)


@pytest.mark.parametrize("image", IMAGES)
def test_copies_exist_and_constraints_are_the_repository_ones(image: str) -> None:
    instructions = parse(_dockerfile(image))
    copies = [i.value.split() for i in instructions if i.keyword == "COPY"]
    assert ["deploy/constraints.txt", "constraints.txt"] in copies
    for *sources, _ in copies:
        for source in sources:
            assert (REPO / source).exists(), f"{image}: COPY {source} is not in the repository"


@pytest.mark.parametrize("image", IMAGES)
def test_build_context_is_filtered(image: str) -> None:
    """Each image has its own .dockerignore; those that copy the whole repository leave out envs and history."""
    ignore = (DOCKER / f"{image}.Dockerfile.dockerignore").read_text().split()
    copies_all = any(i.keyword == "COPY" and i.value.split()[0] == "." for i in parse(_dockerfile(image)))
    assert ("*" in ignore) or ({".git", ".venv*", "tests"} <= set(ignore) and copies_all)


def test_python_matches_the_project() -> None:
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    for image in IMAGES:
        base = arg_defaults(parse(_dockerfile(image)))["PYTHON_IMAGE"]
        assert base.startswith("python:3.11."), (image, base, requires)


def test_trainer_builds_cpu_or_cuda_torch() -> None:
    instructions = parse(_dockerfile("trainer"))
    assert arg_defaults(instructions)["TORCH_VARIANT"] == "cpu"
    [torch_install] = [i.value for i in instructions if i.keyword == "RUN" and i.value.endswith(" torch")]
    assert expand(torch_install, {"TORCH_VARIANT": "cu128"}).count("https://download.pytorch.org/whl/cu128") == 1


def test_gateway_entrypoint_is_the_project_console_script() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    [entrypoint] = [i.value for i in parse(_dockerfile("gateway")) if i.keyword == "ENTRYPOINT"]
    assert entrypoint == '["harnessrl"]' and "harnessrl" in scripts


def test_manifest_images_match_their_dockerfiles() -> None:
    """harnessrl/<name>:<tag> in the base is deploy/docker/<name>.Dockerfile; the MLflow tag is its version."""
    images = {container["image"] for _, _, spec in pod_specs(render("base"))
              for container in spec.get("initContainers", []) + spec["containers"]}
    ours = {image for image in images if image.startswith("harnessrl/")}
    assert {image.split(":")[0].removeprefix("harnessrl/") for image in ours} == set(IMAGES)
    mlflow_version = arg_defaults(parse(_dockerfile("mlflow")))["MLFLOW_VERSION"]
    assert f"harnessrl/mlflow:{mlflow_version}" in ours
