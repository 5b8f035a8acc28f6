"""The kustomize base and overlays: schema-valid objects, namespaced least-privilege RBAC, the label contract, the
agent Job template, resolvable references and pinned images. Rendered offline; nothing is applied to a cluster."""

from __future__ import annotations

import re

import kubernetes_validate
import pytest

from tests.deploy.support import (
    DOCKER,
    EXTERNAL_SECRETS,
    K8S_VERSION,
    KUSTOMIZATIONS,
    agent_job,
    containers,
    named,
    of_kind,
    pod_specs,
    render,
)

PART_OF = ("app.kubernetes.io/part-of", "harnessrl")
COMPONENT = "harnessrl.io/component"
ROLLOUT_ID = "harnessrl.io/rollout-id"
# What the controller may do: (apiGroup, resource) -> verbs. Exactly these, nothing more.
CONTROLLER_PERMISSIONS = {
    ("batch", "jobs"): {"create", "get", "list", "watch", "delete"},
    ("", "pods"): {"get", "list", "watch"},
    ("", "pods/log"): {"get"},
    ("", "secrets"): {"create", "get", "delete"},
}
REQUIRED_OBJECTS = [
    ("Deployment", "harnessrl-gateway"), ("Service", "harnessrl-gateway"),
    ("PersistentVolumeClaim", "harnessrl-gateway-data"),
    ("Deployment", "harnessrl-controller"), ("ServiceAccount", "harnessrl-controller"),
    ("Role", "harnessrl-controller"), ("RoleBinding", "harnessrl-controller"),
    ("ConfigMap", "harnessrl-controller-config"), ("ServiceAccount", "harnessrl-agent"),
    ("NetworkPolicy", "harnessrl-agent-egress"),
    ("Deployment", "harnessrl-mlflow"), ("Service", "harnessrl-mlflow"),
    ("PersistentVolumeClaim", "harnessrl-mlflow-data"),
    ("Deployment", "harnessrl-minio"), ("Service", "harnessrl-minio"),
    ("PersistentVolumeClaim", "harnessrl-minio-data"),
    ("Deployment", "harnessrl-prefect-worker"),
]


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_object_is_valid_against_the_official_schemas(kustomization: str) -> None:
    objects = render(kustomization)
    for obj in (*objects, agent_job()):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_strict_validation_catches_an_unknown_field() -> None:
    """Guards the check above: a misspelt field must fail."""
    job = agent_job()
    job["spec"]["backofLimit"] = 0
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S_VERSION, strict=True)


@pytest.mark.parametrize(("kind", "name"), REQUIRED_OBJECTS)
def test_base_ships(kind: str, name: str) -> None:
    named(render("base"), kind, name)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_object_is_part_of_harnessrl_and_namespaced_alike(kustomization: str) -> None:
    objects = render(kustomization)
    namespace = of_kind(objects, "Namespace")[0]["metadata"]["name"]
    for obj in objects:
        assert obj["metadata"]["labels"].get(PART_OF[0]) == PART_OF[1], obj["metadata"]["name"]
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == namespace, obj["metadata"]["name"]
    for owner, metadata, _ in pod_specs(objects):
        assert metadata["labels"].get(PART_OF[0]) == PART_OF[1], owner
        assert COMPONENT in metadata["labels"], owner


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_deployments_select_their_own_pods_and_services_select_one_deployment(kustomization: str) -> None:
    objects = render(kustomization)
    deployments = of_kind(objects, "Deployment")
    for deployment in deployments:
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for service in of_kind(objects, "Service"):
        selected = [d for d in deployments
                    if service["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert len(selected) == 1, (service["metadata"]["name"], [d["metadata"]["name"] for d in selected])
        ports = {p["name"]: p["containerPort"] for c in selected[0]["spec"]["template"]["spec"]["containers"]
                 for p in c.get("ports", [])}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, (service["metadata"]["name"], port)


def test_gateway_service_contract() -> None:
    objects = render("base")
    service = named(objects, "Service", "harnessrl-gateway")
    assert [(p["port"], p["protocol"]) for p in service["spec"]["ports"]] == [(8100, "TCP")]
    pod = named(objects, "Deployment", "harnessrl-gateway")["spec"]["template"]
    assert pod["metadata"]["labels"][COMPONENT] == "gateway"
    [gateway] = pod["spec"]["containers"]
    assert gateway["args"][gateway["args"].index("--port") + 1] == "8100"
    assert named(objects, "ConfigMap", "harnessrl-config")["data"]["gateway-url"] == "http://harnessrl-gateway:8100"


def test_sqlite_gateway_is_a_single_recreated_replica_on_its_volume() -> None:
    """SQLite has one writer (a second gateway on its file stops at start): never two gateway pods on one store."""
    deployment = named(render("base"), "Deployment", "harnessrl-gateway")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    db_url = named(render("base"), "ConfigMap", "harnessrl-config")["data"]["gateway-db-url"]
    mounts = [m["mountPath"] for m in deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]]
    db_path = db_url.removeprefix("sqlite:///")
    assert db_url.startswith("sqlite:////") and any(db_path.startswith(mount + "/") for mount in mounts)


def test_postgres_overlay_takes_the_store_url_from_a_secret_and_drops_the_volume() -> None:
    objects = render("overlays/postgres")
    env = {e["name"]: e for e in named(objects, "Deployment", "harnessrl-gateway")
           ["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HARNESSRL_DB_URL"]["valueFrom"] == {"secretKeyRef": {"name": "harnessrl-gateway-db", "key": "url"}}
    assert not of_kind(objects, "PersistentVolumeClaim") or all(
        pvc["metadata"]["name"] != "harnessrl-gateway-data" for pvc in of_kind(objects, "PersistentVolumeClaim"))


def test_postgres_gateway_runs_replicas_rolled_one_at_a_time_with_one_kept_through_disruptions() -> None:
    """Several gateways share a PostgreSQL store (gateway/README.md, "Several gateways on one store")."""
    objects = render("overlays/postgres")
    deployment = named(objects, "Deployment", "harnessrl-gateway")
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    budget = named(objects, "PodDisruptionBudget", "harnessrl-gateway")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_rbac_is_namespaced_and_limited_to_what_the_controller_needs(kustomization: str) -> None:
    objects = render(kustomization)
    assert not of_kind(objects, "ClusterRole") and not of_kind(objects, "ClusterRoleBinding")
    [role] = of_kind(objects, "Role")
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "resourceNames" not in rule or rule["resourceNames"], rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    assert granted == CONTROLLER_PERMISSIONS
    [binding] = of_kind(objects, "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "harnessrl-controller",
                                    "namespace": role["metadata"]["namespace"]}]


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_only_the_controller_gets_an_api_token(kustomization: str) -> None:
    objects = render(kustomization)
    accounts = {sa["metadata"]["name"]: sa for sa in of_kind(objects, "ServiceAccount")}
    for owner, _, spec in pod_specs(objects):
        account = spec.get("serviceAccountName", "default")
        if owner == "harnessrl-controller":
            assert account == "harnessrl-controller"
            continue
        assert account != "harnessrl-controller", owner
        mounted = spec.get("automountServiceAccountToken",
                           accounts.get(account, {}).get("automountServiceAccountToken", True))
        assert mounted is False, f"{owner} mounts an API token"


def test_agent_job_template_carries_the_contract() -> None:
    objects = render("base")
    job = agent_job()
    spec, pod = job["spec"], job["spec"]["template"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] > 0 and spec["ttlSecondsAfterFinished"] > 0
    assert pod["spec"]["restartPolicy"] == "Never"
    for labels in (job["metadata"]["labels"], pod["metadata"]["labels"]):
        assert labels[COMPONENT] == "agent" and ROLLOUT_ID in labels and labels[PART_OF[0]] == PART_OF[1]
    policy = named(objects, "NetworkPolicy", "harnessrl-agent-egress")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    named(objects, "ServiceAccount", pod["spec"]["serviceAccountName"])
    [harness] = pod["spec"]["containers"]
    env = {e["name"]: e for e in harness["env"]}
    assert set(env) == {"OPENAI_BASE_URL", "OPENAI_API_KEY", "HARNESSRL_TASK"}
    assert re.fullmatch(r"http://harnessrl-gateway:8100/r/[^/]+/v1", env["OPENAI_BASE_URL"]["value"])
    key_ref = env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"]
    assert key_ref["key"] == "api-key" and key_ref["name"].startswith("harnessrl-rollout-")
    assert env["HARNESSRL_TASK"]["value"] == f"{harness['workingDir']}/task.json"
    [task_volume] = [v for v in pod["spec"]["volumes"] if "secret" in v]
    assert task_volume["secret"]["secretName"] == key_ref["name"]


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_reference_resolves(kustomization: str) -> None:
    """ConfigMap keys, Secrets, volumes and accounts exist in the render, or are the documented external Secrets."""
    objects = render(kustomization)
    config_maps = {cm["metadata"]["name"]: cm.get("data", {}) for cm in of_kind(objects, "ConfigMap")}
    secrets = {s["metadata"]["name"]: s.get("data", {}) for s in of_kind(objects, "Secret")}
    claims = {pvc["metadata"]["name"] for pvc in of_kind(objects, "PersistentVolumeClaim")}
    external = EXTERNAL_SECRETS[kustomization]
    for owner, _, spec in pod_specs(objects):
        if owner == agent_job()["metadata"]["name"]:
            continue  # the per-rollout Secret is created by the controller
        for container in containers(spec):
            for ref in (e.get("valueFrom", {}) for e in container.get("env", [])):
                if "configMapKeyRef" in ref:
                    assert ref["configMapKeyRef"]["key"] in config_maps[ref["configMapKeyRef"]["name"]], (owner, ref)
                if "secretKeyRef" in ref:
                    name, key = ref["secretKeyRef"]["name"], ref["secretKeyRef"]["key"]
                    assert name in external or key in secrets[name], (owner, ref)
        for volume in spec.get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims, (owner, volume)
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps, (owner, volume)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_images_are_pinned_and_ours_have_a_dockerfile(kustomization: str) -> None:
    for owner, _, spec in pod_specs(render(kustomization)):
        for container in containers(spec):
            image = container["image"]
            repository, _, tag = image.rpartition(":")
            assert repository and "/" not in tag and tag not in ("", "latest"), f"{owner}: unpinned image {image}"
            if repository.startswith("harnessrl/"):
                dockerfile = DOCKER / f"{repository.removeprefix('harnessrl/')}.Dockerfile"
                assert dockerfile.is_file(), f"{owner}: {image} has no {dockerfile}"


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_containers_drop_privileges(kustomization: str) -> None:
    for owner, _, spec in pod_specs(render(kustomization)):
        assert spec["securityContext"]["runAsNonRoot"] is True, owner
        for container in containers(spec):
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False, (owner, container["name"])
            assert security["capabilities"]["drop"] == ["ALL"], (owner, container["name"])
            assert "limits" in container["resources"] and "memory" in container["resources"]["limits"], owner


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_the_mlflow_server_runs_as_the_local_services_run_it(kustomization: str) -> None:
    """The MLflow pod's server without MLflow's job runner (eight more processes, 0.7 GiB more, under a 2 GiB limit),
    telemetry or a fetch of litellm's price table: the settings `deploy/services.py` starts its server with."""
    from tests.deploy.services_module import services

    wanted = {k: v for k, v in services.QUIET_ENV.items() if k.startswith(("MLFLOW_", "LITELLM_"))}
    assert "MLFLOW_SERVER_ENABLE_JOB_EXECUTION" in wanted
    deployment = named(render(kustomization), "Deployment", "harnessrl-mlflow")
    server = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "mlflow")
    env = {e["name"]: e.get("value") for e in server.get("env", [])}
    assert {k: env.get(k) for k in wanted} == wanted
