"""prefect.yaml, checked offline: Prefect's own schema, the deployments, entrypoints that load to the flows, parameters
that the flows accept, job variables the pools' job templates know, and the pull steps' working directories."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from tests.deploy.dockerfile import parse
from tests.deploy.services_module import services

ROOT = Path(__file__).resolve().parents[2]
PREFECT_YAML = ROOT / "prefect.yaml"
EXPECTED = {  # (flow, deployment) -> (work pool, pool type, profile), in prefect.yaml's order
    ("train-swe", "default"): ("harnessrl-process", "process", "swe-local"),
    ("train-swe", "kubernetes"): ("harnessrl-kubernetes", "kubernetes", "swe-gpu"),
    ("train-if", "default"): ("harnessrl-process", "process", "if-local"),
    ("train-search", "default"): ("harnessrl-process", "process", "search-local"),
    ("train-calculator", "default"): ("harnessrl-process", "process", "calculator-local"),
    ("train", "default"): ("harnessrl-process", "process", None),
    ("evaluate-swe-verified", "nightly"): ("harnessrl-process", "process", "swe-eval-local"),
    ("evaluate-swe-verified", "manual"): ("harnessrl-process", "process", "swe-eval-local"),
    ("prepare-swe-data", "default"): ("harnessrl-process", "process", "swe-data-local"),
    ("ablation", "default"): ("harnessrl-process", "process", "ablation-local"),
}
RECIPES = {"train-swe": "swe", "train-if": "instruction_following", "train-search": "search",
           "train-calculator": "calculator", "evaluate-swe-verified": "swe", "prepare-swe-data": "swe",
           "ablation": "multistep"}


@pytest.fixture(scope="module")
def project() -> dict:
    return yaml.safe_load(PREFECT_YAML.read_text())


@pytest.fixture(scope="module")
def flows(project) -> dict:
    """flow name -> the Flow object each entrypoint loads (as the worker loads it)."""
    from prefect.flows import load_flow_from_entrypoint

    loaded = {}
    for deployment in project["deployments"]:
        flow = load_flow_from_entrypoint(str(ROOT / deployment["entrypoint"]))
        loaded[flow.name] = flow
    return loaded


def key(deployment: dict) -> tuple[str, str]:
    """(flow name, deployment name), as `make services` names what it deploys (`prefect deploy --name flow/name`):
    deploy/services.py's pool_deployments on this one deployment."""
    (name,) = services.pool_deployments({"deployments": [deployment]}, deployment["work_pool"]["name"])
    flow, _, deployment_name = name.partition("/")
    return flow, deployment_name


def pool_variables(pool_type: str) -> set[str]:
    """The variables of a work pool type's default base job template (Prefect's bundled worker metadata)."""
    import prefect

    path = Path(prefect.__file__).parent / "server/api/collections_data/views/aggregate-worker-metadata.json"
    workers = {name: worker for collection in json.loads(path.read_text()).values()
               for name, worker in collection.items()}
    return set(workers[pool_type]["default_base_job_configuration"]["variables"]["properties"])


def test_prefect_accepts_the_file_and_it_has_no_unknown_keys(project):
    from prefect.cli.deploy._models import DeploymentConfig, PrefectYamlModel

    model = PrefectYamlModel.model_validate(project)
    assert model.name == "harnessrl" and model.prefect_version == "3.9.1"
    assert set(project) <= {field.alias or name for name, field in PrefectYamlModel.model_fields.items()}
    for deployment in project["deployments"]:
        assert set(deployment) <= set(DeploymentConfig.model_fields), deployment["name"]


def test_deployments_are_exactly_the_expected_ones(project):
    keys = [key(d) for d in project["deployments"]]
    assert sorted(keys) == sorted(EXPECTED), "one deployment per (flow, name)"


def test_entrypoints_load_the_flows_their_names_promise(project, flows):
    for deployment in project["deployments"]:
        flow_name, _ = key(deployment)
        assert flow_name in flows, f"{deployment['entrypoint']} loads no flow named {flow_name!r}"
        assert load_entrypoint(deployment).name == flow_name


def load_entrypoint(deployment: dict):
    from prefect.flows import load_flow_from_entrypoint

    return load_flow_from_entrypoint(str(ROOT / deployment["entrypoint"]))


def test_the_training_deployments_are_the_one_train_flow_under_their_names(project):
    """train-swe/default & co. still run by name, each the one `train` flow with its recipe as a parameter."""
    from flows.train import train_flow

    for deployment in project["deployments"]:
        flow = load_entrypoint(deployment)
        if flow.name.startswith("train"):
            assert flow.fn is train_flow.fn, f"{deployment['entrypoint']} is not the train flow"
            assert deployment["parameters"]["recipe"] == RECIPES.get(flow.name), deployment["name"]


def test_parameters_fit_the_flow_signatures_and_name_profiles_of_the_recipe(project, flows):
    from flows.config import load_run_config

    for deployment in project["deployments"]:
        flow_name, name = key(deployment)
        _, _, profile = EXPECTED[(flow_name, name)]
        parameters = deployment["parameters"]
        assert parameters["profile"] == profile
        flows[flow_name].validate_parameters(parameters)  # raises on unknown or mistyped parameters
        if flow_name == "train":
            continue  # any recipe: the run names it
        config = load_run_config(parameters["profile"], parameters["overrides"], recipe=RECIPES[flow_name])
        assert config.recipe == RECIPES[flow_name]


def test_work_pools_and_job_variables_match_the_pool_types(project):
    for deployment in project["deployments"]:
        pool, pool_type, _ = EXPECTED[key(deployment)]
        assert deployment["work_pool"]["name"] == pool
        unknown = set(deployment["work_pool"]["job_variables"]) - pool_variables(pool_type)
        assert not unknown, f"{key(deployment)}: job variables {unknown} are not in the {pool_type} job template"


def test_kubernetes_deployment_runs_the_cuda_trainer_image_from_its_source_directory(project):
    (deployment,) = [d for d in project["deployments"] if key(d) == ("train-swe", "kubernetes")]
    variables = deployment["work_pool"]["job_variables"]
    assert variables["image"].startswith("harnessrl/trainer:") and "cu" in variables["image"].rsplit(":", 1)[-1]
    workdir, source_dir = "/", None
    for instruction in parse((ROOT / "deploy/docker/trainer.Dockerfile").read_text()):
        if instruction.keyword == "WORKDIR":
            workdir = str(Path(workdir) / instruction.value)
        elif instruction.keyword == "COPY" and instruction.value.split()[0] == ".":
            source_dir = str(Path(workdir) / instruction.value.split()[-1])
    (step,) = deployment["pull"]
    assert step == {"prefect.deployments.steps.set_working_directory": {"directory": source_dir}}
    assert deployment["build"] == [], "the project-directory build step is for local deployments"


def test_local_pull_step_changes_into_the_directory_prefect_deploy_runs_in(project, monkeypatch):
    """The build step's output (run here as `prefect deploy` runs it) fills the pull step's directory."""
    from prefect.utilities.importtools import import_object
    from prefect.utilities.templating import apply_values

    monkeypatch.chdir(ROOT)
    outputs = {}
    for step in project["build"]:
        ((fqn, inputs),) = step.items()
        inputs = dict(inputs)
        step_id = inputs.pop("id")
        outputs[step_id] = asyncio.run(import_object(fqn)(**inputs))
    (pull,) = apply_values(project["pull"], outputs)
    ((fqn, inputs),) = pull.items()
    assert fqn == "prefect.deployments.steps.set_working_directory"
    assert inputs == {"directory": str(ROOT)}
    assert callable(import_object(fqn))
    local = [d for d in project["deployments"] if d["work_pool"]["name"] == "harnessrl-process"]
    assert local and all("pull" not in d and "build" not in d for d in local), "local deployments use the top level"
