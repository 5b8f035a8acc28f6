"""The store's and the client's role protocols: small, implemented by the one concrete class, and each caller calls
only its own role's methods (read from the source, so a call of another role's method fails here)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from gateway import client_roles, store_roles
from gateway.client import GatewayClient
from gateway.store import SqlStore

ROOT = Path(__file__).resolve().parents[3]
MAX_METHODS = 8


def members(protocol: type) -> set[str]:
    """The names a protocol declares, its bases' included."""
    return {name for cls in protocol.__mro__ if cls.__module__ == protocol.__module__
            for name in vars(cls) if not name.startswith("_")}


def parameters(fn) -> list[tuple[str, object]]:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


def check_implements(concrete: type, protocol: type) -> list[str]:
    """What `concrete` lacks of `protocol`, or declares differently (parameter names and kinds)."""
    problems = []
    for name in sorted(members(protocol)):
        declared, actual = inspect.getattr_static(protocol, name), inspect.getattr_static(concrete, name, None)
        if actual is None:
            problems.append(f"{concrete.__name__} has no {name}")
        elif isinstance(declared, property) != isinstance(actual, property):
            problems.append(f"{concrete.__name__}.{name}: property in one, not the other")
        elif not isinstance(declared, property) and parameters(declared) != parameters(actual):
            problems.append(f"{concrete.__name__}.{name} takes {[n for n, _ in parameters(actual)]}, the role "
                            f"declares {[n for n, _ in parameters(declared)]}")
    return problems


@pytest.mark.parametrize("protocol", [*store_roles.ROLES.values(), store_roles.Store], ids=lambda p: p.__name__)
def test_the_sql_store_implements_every_store_role(protocol) -> None:
    assert check_implements(SqlStore, protocol) == []


@pytest.mark.parametrize("protocol", client_roles.ROLES.values(), ids=lambda p: p.__name__)
def test_the_http_client_implements_every_client_role(protocol) -> None:
    assert check_implements(GatewayClient, protocol) == []


def test_the_structural_check_sees_a_missing_method_and_a_changed_signature() -> None:
    class Partial:
        def calls(self, rollout_id: str) -> list: ...

    assert check_implements(Partial, client_roles.RecordsClient) == [
        "Partial.calls takes ['self', 'rollout_id'], the role declares ['self', 'rollout_id', 'attempt']",
        "Partial has no list_events"]


@pytest.mark.parametrize("protocol", [*store_roles.ROLES.values(), *client_roles.ROLES.values()],
                         ids=lambda p: p.__name__)
def test_each_role_is_small(protocol) -> None:
    assert len(members(protocol)) <= MAX_METHODS, sorted(members(protocol))


def test_the_store_is_every_role_and_closing() -> None:
    every = set().union(*(members(p) for p in store_roles.ROLES.values()))
    assert members(store_roles.Store) == every | {"close"}


# -- who calls what ---------------------------------------------------------------------------------------------


def store_uses(path: Path) -> list[tuple[str, str, int]]:
    """(view, method, line) of every `<x>.<view>.<method>` where view is `store` or a role's `<role>_store`."""
    uses = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            view = node.value.attr
            if view == "store" or view.endswith("_store"):
                uses.append((view, node.attr, node.lineno))
    return uses


def misplaced_store_uses(path: Path) -> list[str]:
    problems = []
    for view, method, line in store_uses(path):
        role = store_roles.ROLES.get(view.removesuffix("_store"))
        if view == "store":
            problems.append(f"{path.name}:{line}: .store.{method} (use the context's view of the role)")
        elif role is None or method not in members(role):
            problems.append(f"{path.name}:{line}: {view}.{method} is not a method of that role")
    return problems


GATEWAY_MODULES = sorted(p for p in [*(ROOT / "gateway").glob("*.py"), *(ROOT / "gateway" / "routes").glob("*.py")]
                         if p.name not in ("context.py", "fleet.py", "store.py", "store_roles.py"))


@pytest.mark.parametrize("path", GATEWAY_MODULES, ids=lambda p: p.name)
def test_gateway_modules_reach_the_store_through_their_role(path: Path) -> None:
    assert misplaced_store_uses(path) == []


def test_the_store_rule_sees_another_roles_method(tmp_path: Path) -> None:
    module = tmp_path / "route.py"
    module.write_text("async def f(svc):\n    await svc.recorder_store.claim('c', 1, 1)\n"
                      "    await svc.store.brief('r')\n")
    assert misplaced_store_uses(module) == ["route.py:2: recorder_store.claim is not a method of that role",
                                            "route.py:3: .store.brief (use the context's view of the role)"]


def role_calls(path: Path) -> list[str]:
    """Calls of a method outside the role a parameter (within its function) or the self attribute it is kept in
    (within the module) is declared as."""
    tree = ast.parse(path.read_text())
    roles = {name: proto for name, proto in vars(client_roles).items() if proto in client_roles.ROLES.values()}
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    params = {fn: {a.arg: ast.unparse(a.annotation) for a in [*fn.args.args, *fn.args.kwonlyargs]
                   if a.annotation is not None and ast.unparse(a.annotation) in roles} for fn in functions}
    kept: dict[str, str] = {}  # self.<attr> = <a declared parameter>: the attribute's role
    for fn in functions:
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name | ast.Tuple):
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                targets = node.targets[0].elts if isinstance(node.targets[0], ast.Tuple) else node.targets
                for target, value in zip(targets, values, strict=False):
                    if isinstance(target, ast.Attribute) and isinstance(value, ast.Name) and value.id in params[fn]:
                        kept[target.attr] = params[fn][value.id]
    problems = set()
    for fn in functions:
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver = node.func.value
            if isinstance(receiver, ast.Name):
                name, role = receiver.id, params[fn].get(receiver.id)
            else:
                name = getattr(receiver, "attr", None)
                role = kept.get(name) if isinstance(receiver, ast.Attribute) else None
            if role is not None and node.func.attr not in members(roles[role]):
                problems.add(f"{path.name}:{node.lineno}: {name}.{node.func.attr} is not a {role} method")
    return sorted(problems)


CLIENT_CALLERS = ["controller/reconcile.py", "controller/report.py", "controller/runners/kubernetes.py",
                  "rollouts/feed.py", "trainer/collocation.py", "tracking/rollout_traces.py",
                  "flows/prefect_tasks/evaluation.py", "flows/prefect_tasks/rollouts.py",
                  "flows/prefect_tasks/swe_data.py", "flows/prefect_tasks/training.py"]


@pytest.mark.parametrize("module", CLIENT_CALLERS)
def test_client_callers_declare_a_role_and_call_only_its_methods(module: str) -> None:
    path = ROOT / module
    assert "GatewayClient" not in path.read_text(), f"{module}: declare a role protocol of gateway.client_roles"
    assert any(name in path.read_text() for name in vars(client_roles) if name.endswith("Client")), module
    assert role_calls(path) == []


def test_the_client_rule_sees_another_roles_method(tmp_path: Path) -> None:
    module = tmp_path / "caller.py"
    module.write_text("class C:\n    def __init__(self, admin: LeaseClient) -> None:\n        self.admin = admin\n"
                      "    def go(self):\n        self.admin.claim('c')\n        self.admin.create_rollouts([])\n"
                      "def f(feed: FeedClient, other):\n    feed.claim('c')\n    other.claim('c')\n")
    assert role_calls(module) == ["caller.py:6: admin.create_rollouts is not a LeaseClient method",
                                  "caller.py:8: feed.claim is not a FeedClient method"]
