"""Credentials: rollout key minting and forgery, bearer parsing, and who may do what."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.auth import Authenticator, Role, bearer, check_key_attempt, mint_rollout_key, rollout_of_key
from gateway.errors import Conflict, Forbidden, Unauthorized
from gateway.records import RolloutState

SECRET = b"s" * 32
OTHER_SECRET = b"o" * 32
IDS = st.from_regex(r"[A-Za-z0-9._:-]{1,60}", fullmatch=True)


ATTEMPTS = st.integers(min_value=0, max_value=10_000)


@given(rollout_id=IDS, attempt=ATTEMPTS)
def test_a_minted_key_names_its_rollout_and_attempt(rollout_id: str, attempt: int) -> None:
    assert rollout_of_key(SECRET, mint_rollout_key(SECRET, rollout_id, attempt)) == (rollout_id, attempt)


@given(rollout_id=IDS, attempt=ATTEMPTS)
def test_minting_is_deterministic_and_secret_and_attempt_bound(rollout_id: str, attempt: int) -> None:
    key = mint_rollout_key(SECRET, rollout_id, attempt)
    assert mint_rollout_key(SECRET, rollout_id, attempt) == key
    assert mint_rollout_key(SECRET, rollout_id, attempt + 1) != key
    assert mint_rollout_key(OTHER_SECRET, rollout_id, attempt) != key
    assert rollout_of_key(OTHER_SECRET, key) is None


def test_a_mac_moved_to_another_rollout_id_is_rejected() -> None:
    prefix, _, attempt, mac = mint_rollout_key(SECRET, "r1", 1).split(".")
    other_id_part = mint_rollout_key(SECRET, "r2", 1).split(".")[1]
    assert rollout_of_key(SECRET, f"{prefix}.{other_id_part}.{attempt}.{mac}") is None


def test_a_key_moved_to_another_attempt_is_rejected() -> None:
    """An orphaned harness of attempt 1 cannot relabel its key for attempt 2 (the MAC covers the attempt)."""
    prefix, id_part, _, mac = mint_rollout_key(SECRET, "r1", 1).split(".")
    for attempt in ("2", "01", "0", "+1", "１"):
        assert rollout_of_key(SECRET, f"{prefix}.{id_part}.{attempt}.{mac}") is None


@pytest.mark.parametrize("key", [
    "", "hrl", "hrl..", "hrl.cjE", "xyz.cjE.1.abc", "hrl.cjE.abc.def", "hrl.!!!.1.abc", "hrl.__8.1.abc",
    "hrl.cjE.1.abc.def", "hrl.cjE.-1.abc", "sk-proj-0123456789",
])
def test_malformed_keys_name_no_rollout(key: str) -> None:
    assert rollout_of_key(SECRET, key) is None


def test_a_tampered_mac_is_rejected() -> None:
    key = mint_rollout_key(SECRET, "r1", 1)
    tampered = key[:-1] + ("A" if key[-1] != "A" else "B")
    assert rollout_of_key(SECRET, tampered) is None


@pytest.mark.parametrize(("header", "token"), [
    (None, None), ("", None), ("Bearer abc", "abc"), ("bearer abc", "abc"), ("BEARER  abc ", "abc"),
    ("Bearer ", None), ("Basic abc", None), ("abc", None),
])
def test_bearer_parsing(header: str | None, token: str | None) -> None:
    assert bearer(header) == token


AUTH = Authenticator("admin-t", "grader-t", SECRET)
KEY_R1 = "Bearer " + mint_rollout_key(SECRET, "r1", 1)


@pytest.mark.parametrize(("header", "role", "rollout_id"), [
    ("Bearer admin-t", Role.ADMIN, None), ("Bearer grader-t", Role.GRADER, None), (KEY_R1, Role.ROLLOUT, "r1"),
])
def test_identify(header: str, role: Role, rollout_id: str | None) -> None:
    principal = AUTH.identify(header)
    assert (principal.role, principal.rollout_id) == (role, rollout_id)
    assert principal.attempt == (1 if role == Role.ROLLOUT else None)


@pytest.mark.parametrize(("state", "current", "code"), [
    (RolloutState.RUNNING, 1, None), (RolloutState.RUNNING, 2, "stale_attempt"),
    (RolloutState.QUEUED, 1, "stale_attempt"), (RolloutState.SUCCEEDED, 1, "stale_attempt"),
    (RolloutState.QUEUED, 0, "stale_attempt"),
])
def test_a_rollout_key_writes_only_while_its_attempt_is_the_live_one(state, current: int, code) -> None:
    principal = AUTH.identify(KEY_R1)
    if code is None:
        check_key_attempt(principal, "r1", state, current)
        return
    with pytest.raises(Conflict) as raised:
        check_key_attempt(principal, "r1", state, current)
    assert raised.value.code == code and f"attempt {principal.attempt}" in raised.value.message


def test_a_key_of_attempt_zero_works_before_any_claim_and_reads_need_only_the_same_attempt() -> None:
    zero = AUTH.identify("Bearer " + mint_rollout_key(SECRET, "r1", 0))
    check_key_attempt(zero, "r1", RolloutState.QUEUED, 0)
    check_key_attempt(AUTH.identify(KEY_R1), "r1", RolloutState.SUCCEEDED, 1, live=False)
    check_key_attempt(AUTH.identify("Bearer admin-t"), "r1", RolloutState.QUEUED, 7)


@pytest.mark.parametrize("header", [None, "Bearer nope", "Bearer " + mint_rollout_key(OTHER_SECRET, "r1", 1),
                                    "Basic admin-t"])
def test_unknown_credentials_are_unauthorized(header: str | None) -> None:
    with pytest.raises(Unauthorized):
        AUTH.identify(header)


def test_a_rollout_key_may_call_only_its_own_proxy() -> None:
    assert AUTH.require_rollout(KEY_R1, "r1").rollout_id == "r1"
    with pytest.raises(Forbidden, match="another rollout"):
        AUTH.require_rollout(KEY_R1, "r2")


def test_the_grader_may_not_call_a_proxy_but_the_admin_may() -> None:
    with pytest.raises(Forbidden, match="grader"):
        AUTH.require_rollout("Bearer grader-t", "r1")
    assert AUTH.require_rollout("Bearer admin-t", "r1").role == Role.ADMIN


@pytest.mark.parametrize(("header", "roles", "allowed"), [
    ("Bearer admin-t", (), True), ("Bearer admin-t", (Role.GRADER,), True),
    ("Bearer grader-t", (), False), ("Bearer grader-t", (Role.GRADER,), True),
    (KEY_R1, (), False), (KEY_R1, (Role.GRADER,), False),
])
def test_require_roles(header: str, roles: tuple[Role, ...], allowed: bool) -> None:
    if allowed:
        assert AUTH.require(header, *roles)
    else:
        with pytest.raises(Forbidden):
            AUTH.require(header, *roles)


def test_without_a_grader_token_the_grader_role_does_not_exist() -> None:
    with pytest.raises(Unauthorized):
        Authenticator("admin-t", None, SECRET).identify("Bearer grader-t")


def test_an_empty_admin_token_is_refused() -> None:
    with pytest.raises(ValueError, match="HARNESSRL_ADMIN_TOKEN"):
        Authenticator("", None, SECRET)


def test_a_valid_key_is_verified_once_and_a_forged_one_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.auth as auth

    checked: list[str] = []

    def counting(secret: bytes, key: str) -> tuple[str, int] | None:
        checked.append(key)
        return rollout_of_key(secret, key)

    monkeypatch.setattr(auth, "rollout_of_key", counting)
    monkeypatch.setattr(auth, "VERIFIED_KEYS_KEPT", 3)
    authenticator = Authenticator("admin-t", None, SECRET)
    key = mint_rollout_key(SECRET, "r1", 1)
    forged = key[:-1] + ("A" if key[-1] != "A" else "B")
    for _ in range(3):
        assert authenticator.identify(f"Bearer {key}") == auth.Principal(Role.ROLLOUT, "r1", 1)
        with pytest.raises(Unauthorized):
            authenticator.identify(f"Bearer {forged}")
    assert checked == [key, forged, forged, forged]
    others = [mint_rollout_key(SECRET, f"r{i}", 0) for i in range(2, 6)]  # past the bound: forgotten, checked again
    assert [authenticator.identify(f"Bearer {other}").rollout_id for other in others] == ["r2", "r3", "r4", "r5"]
    assert authenticator.identify(f"Bearer {key}").rollout_id == "r1" and checked.count(key) == 2
