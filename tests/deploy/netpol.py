"""A small NetworkPolicy evaluator: is a connection from one pod to a destination allowed by the policies?

It follows the Kubernetes semantics the deploy tests rely on: a pod is isolated for egress when some policy in its
namespace selects it with "Egress" in policyTypes; then a connection is allowed iff one egress rule of one selecting
policy matches both the destination (a `to` peer) and the port. Empty `to` means every destination, empty `ports`
every port. Named ports and endPort ranges are refused (the shipped policies do not use them).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Endpoint:
    """One side of a connection."""

    namespace: str  # the pod's namespace ("" for an address outside the cluster)
    pod_labels: dict[str, str] = field(default_factory=dict)  # the pod's labels (empty outside the cluster)
    namespace_labels: dict[str, str] = field(default_factory=dict)  # its namespace's labels
    ip: str = "10.0.0.1"  # the address (used by ipBlock peers)
    in_cluster: bool = True  # False for an address outside the cluster (matches ipBlock peers only)


def selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels + matchExpressions) selects `labels`; {} selects everything."""
    if any(labels.get(key) != value for key, value in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        present = key in labels
        matched = {"In": present and labels.get(key) in values, "NotIn": not present or labels[key] not in values,
                   "Exists": present, "DoesNotExist": not present}
        if operator not in matched:
            raise ValueError(f"unknown selector operator {operator!r}; use In, NotIn, Exists or DoesNotExist")
        if not matched[operator]:
            return False
    return True


def peer_matches(peer: dict[str, Any], policy_namespace: str, destination: Endpoint) -> bool:
    """Whether one `to` peer of a rule in `policy_namespace` covers `destination`."""
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        address = ipaddress.ip_address(destination.ip)
        excluded = any(address in ipaddress.ip_network(cidr) for cidr in block.get("except", []))
        return address in ipaddress.ip_network(block["cidr"]) and not excluded
    if not destination.in_cluster:
        return False
    if "namespaceSelector" in peer:
        namespace_ok = selector_matches(peer["namespaceSelector"], destination.namespace_labels)
    else:
        namespace_ok = destination.namespace == policy_namespace
    return namespace_ok and selector_matches(peer.get("podSelector", {}), destination.pod_labels)


def port_matches(ports: list[dict[str, Any]], port: int, protocol: str) -> bool:
    """Whether a rule's `ports` list covers `port`/`protocol` (an empty list covers all)."""
    if not ports:
        return True
    for entry in ports:
        if not isinstance(entry.get("port", 0), int) or "endPort" in entry:
            raise ValueError(f"unsupported port entry {entry}: use a numeric port without endPort")
        if entry.get("protocol", "TCP") == protocol and entry.get("port", port) == port:
            return True
    return False


def policy_types(policy: dict[str, Any]) -> list[str]:
    """The policy's types; when absent, Ingress plus Egress if it has egress rules (the API's default)."""
    spec = policy["spec"]
    return spec.get("policyTypes") or (["Ingress", "Egress"] if spec.get("egress") else ["Ingress"])


def egress_allowed(policies: list[dict[str, Any]], source: Endpoint, destination: Endpoint, port: int,
                   protocol: str = "TCP") -> bool:
    """Whether `policies` let `source` open `port`/`protocol` to `destination`."""
    selecting = [policy for policy in policies
                 if policy["metadata"]["namespace"] == source.namespace
                 and "Egress" in policy_types(policy)
                 and selector_matches(policy["spec"]["podSelector"], source.pod_labels)]
    if not selecting:
        return True
    return any(
        (not rule.get("to") or any(peer_matches(peer, policy["metadata"]["namespace"], destination)
                                   for peer in rule["to"]))
        and port_matches(rule.get("ports", []), port, protocol)
        for policy in selecting for rule in policy["spec"].get("egress", []))


def ingress_isolated(policies: list[dict[str, Any]], target: Endpoint) -> bool:
    """Whether every ingress to `target` is denied (selected for Ingress, no ingress rule anywhere)."""
    selecting = [policy for policy in policies
                 if policy["metadata"]["namespace"] == target.namespace
                 and "Ingress" in policy_types(policy)
                 and selector_matches(policy["spec"]["podSelector"], target.pod_labels)]
    return bool(selecting) and not any(policy["spec"].get("ingress") for policy in selecting)
