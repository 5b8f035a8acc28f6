"""The shipped NetworkPolicy: agent pods reach the gateway (TCP 8100) and cluster DNS (53), nothing else."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.deploy.netpol import Endpoint, egress_allowed, ingress_isolated, selector_matches
from tests.deploy.support import KUSTOMIZATIONS, agent_job, named, of_kind, render

KUBE_SYSTEM = {"kubernetes.io/metadata.name": "kube-system"}
DNS_LABELS = {"k8s-app": "kube-dns"}


def _world(kustomization: str) -> tuple[list[dict], Endpoint, dict[str, Endpoint]]:
    """The rendered policies, the agent pod and the destinations it might try, labelled as rendered."""
    objects = render(kustomization)
    namespace = of_kind(objects, "Namespace")[0]["metadata"]["name"]
    ns_labels = {"kubernetes.io/metadata.name": namespace}

    def pod_of(deployment: str) -> Endpoint:
        labels = named(objects, "Deployment", deployment)["spec"]["template"]["metadata"]["labels"]
        return Endpoint(namespace, labels, ns_labels)

    agent = Endpoint(namespace, agent_job()["spec"]["template"]["metadata"]["labels"], ns_labels)
    destinations = {
        "gateway": pod_of("harnessrl-gateway"),
        "controller": pod_of("harnessrl-controller"),
        "minio": pod_of("harnessrl-minio"),
        "mlflow": pod_of("harnessrl-mlflow"),
        "prefect-worker": pod_of("harnessrl-prefect-worker"),
        "other-agent": agent,
        "kube-dns": Endpoint("kube-system", DNS_LABELS, KUBE_SYSTEM, ip="10.96.0.10"),
        "fake-dns-elsewhere": Endpoint("evil", DNS_LABELS, {"kubernetes.io/metadata.name": "evil"}),
        "gateway-lookalike-elsewhere": Endpoint("evil", pod_of("harnessrl-gateway").pod_labels,
                                                {"kubernetes.io/metadata.name": "evil"}),
        "kube-apiserver": Endpoint("default", {"component": "apiserver"}, {"kubernetes.io/metadata.name": "default"},
                                   ip="10.96.0.1"),
        "internet": Endpoint("", ip="93.184.216.34", in_cluster=False),
        "cloud-metadata": Endpoint("", ip="169.254.169.254", in_cluster=False),
    }
    return of_kind(objects, "NetworkPolicy"), agent, destinations


# (destination, port, protocol, allowed)
EGRESS_TABLE = [
    ("gateway", 8100, "TCP", True),
    ("gateway", 8100, "UDP", False),
    ("gateway", 8001, "TCP", False),
    ("gateway", 22, "TCP", False),
    ("kube-dns", 53, "UDP", True),
    ("kube-dns", 53, "TCP", True),
    ("kube-dns", 5353, "UDP", False),
    ("kube-dns", 8080, "TCP", False),
    ("fake-dns-elsewhere", 53, "UDP", False),
    ("gateway-lookalike-elsewhere", 8100, "TCP", False),
    ("controller", 8100, "TCP", False),
    ("minio", 9000, "TCP", False),
    ("mlflow", 5000, "TCP", False),
    ("prefect-worker", 8001, "TCP", False),
    ("other-agent", 8100, "TCP", False),
    ("kube-apiserver", 443, "TCP", False),
    ("internet", 443, "TCP", False),
    ("internet", 53, "UDP", False),
    ("cloud-metadata", 80, "TCP", False),
]


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
@pytest.mark.parametrize(("destination", "port", "protocol", "allowed"), EGRESS_TABLE)
def test_agent_egress(kustomization: str, destination: str, port: int, protocol: str, allowed: bool) -> None:
    policies, agent, destinations = _world(kustomization)
    assert egress_allowed(policies, agent, destinations[destination], port, protocol) is allowed


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_nothing_reaches_agent_pods(kustomization: str) -> None:
    policies, agent, _ = _world(kustomization)
    assert ingress_isolated(policies, agent)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_only_agent_pods_are_restricted(kustomization: str) -> None:
    """The gateway, controller and services keep their network (the gateway must reach the engine)."""
    policies, _, destinations = _world(kustomization)
    for name in ("gateway", "controller", "mlflow", "prefect-worker"):
        source = destinations[name]
        assert egress_allowed(policies, source, destinations["internet"], 443), name


@settings(max_examples=200, deadline=None)
@example(pod_labels={"app.kubernetes.io/name": "harnessrl-gateway", "harnessrl.io/component": "gateway"},
         namespace="harnessrl", port=8100, protocol="TCP")  # the gateway's selector without its other labels
@given(pod_labels=st.dictionaries(st.sampled_from(["app.kubernetes.io/name", "harnessrl.io/component", "k8s-app"]),
                                  st.sampled_from(["harnessrl-gateway", "gateway", "kube-dns", "agent", "x"]),
                                  max_size=3),
       namespace=st.sampled_from(["harnessrl", "kube-system", "default"]),
       port=st.sampled_from([22, 53, 80, 443, 5000, 8001, 8100, 9000]),
       protocol=st.sampled_from(["TCP", "UDP"]))
def test_any_allowed_connection_is_gateway_or_dns(pod_labels: dict[str, str], namespace: str, port: int,
                                                   protocol: str) -> None:
    policies, agent, destinations = _world("base")
    destination = Endpoint(namespace, pod_labels, {"kubernetes.io/metadata.name": namespace})
    if not egress_allowed(policies, agent, destination, port, protocol):
        return
    # The gateway's identity: the labels the policy selects on (a subset of what its Deployment sets; only that
    # Deployment sets them in this namespace, and agents cannot create pods).
    identity = {"matchLabels": {"app.kubernetes.io/name": "harnessrl-gateway", "harnessrl.io/component": "gateway"}}
    assert selector_matches(identity, destinations["gateway"].pod_labels)
    to_gateway = (namespace == agent.namespace and port == 8100 and protocol == "TCP"
                  and selector_matches(identity, pod_labels))
    to_dns = namespace == "kube-system" and port == 53 and pod_labels.get("k8s-app") == "kube-dns"
    assert to_gateway or to_dns, (pod_labels, namespace, port, protocol)


# (selector, labels, matches): the evaluator's own semantics, checked against the Kubernetes rules.
SELECTOR_TABLE = [
    ({}, {}, True),
    ({}, {"a": "1"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"b": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"b": "1"}, True),
]


@pytest.mark.parametrize(("selector", "labels", "matches"), SELECTOR_TABLE)
def test_selector_semantics(selector: dict, labels: dict, matches: bool) -> None:
    assert selector_matches(selector, labels) is matches


def test_a_policy_with_an_open_rule_lets_everything_out() -> None:
    """Guards the evaluator: an empty `to` and no `ports` mean everywhere, so the table above can fail."""
    policy = {"metadata": {"namespace": "n"}, "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}}
    source = Endpoint("n", {"harnessrl.io/component": "agent"})
    assert egress_allowed([policy], source, Endpoint("", ip="1.1.1.1", in_cluster=False), 443)
    closed = {"metadata": {"namespace": "n"}, "spec": {"podSelector": {}, "policyTypes": ["Egress"]}}
    assert not egress_allowed([closed], source, Endpoint("n", {"x": "y"}), 443)
