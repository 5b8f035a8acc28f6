"""Sticky rendezvous routing: stable per rollout, spread over endpoints, minimal movement on removal."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import NotFound
from gateway.records import ModelRecord
from gateway.routing import Router, is_side_call

ROLLOUT_IDS = [f"rollout-{i}" for i in range(600)]


def endpoints(name: str, count: int, version: int = 0) -> list[ModelRecord]:
    return [ModelRecord(name=name, base_url=f"http://engine-{i}:8000/v1", version=version, served_name=name)
            for i in range(count)]


def assignment(router: Router, model: str) -> dict[str, str]:
    return {rid: router.pick(model, rid).base_url for rid in ROLLOUT_IDS}


@given(rollout_id=st.text(min_size=1, max_size=40))
def test_a_rollout_always_gets_the_same_endpoint_whatever_the_registration_order(rollout_id: str) -> None:
    records = endpoints("policy", 4)
    first = Router(records).pick("policy", rollout_id)
    assert Router(list(reversed(records))).pick("policy", rollout_id) == first
    assert Router(records).pick("policy", rollout_id) == first


def test_rollouts_spread_over_all_endpoints() -> None:
    counts: dict[str, int] = {}
    for base_url in assignment(Router(endpoints("policy", 3)), "policy").values():
        counts[base_url] = counts.get(base_url, 0) + 1
    assert len(counts) == 3
    assert min(counts.values()) > len(ROLLOUT_IDS) / 3 * 0.7, counts


def test_removing_an_endpoint_moves_only_its_rollouts() -> None:
    records = endpoints("policy", 4)
    before = assignment(Router(records), "policy")
    removed = records[1].base_url
    after = assignment(Router([r for r in records if r.base_url != removed]), "policy")
    moved = {rid for rid in ROLLOUT_IDS if before[rid] != after[rid]}
    assert moved == {rid for rid in ROLLOUT_IDS if before[rid] == removed}
    assert all(after[rid] != removed for rid in ROLLOUT_IDS)


def test_adding_an_endpoint_moves_rollouts_only_onto_it() -> None:
    records = endpoints("policy", 4)
    before = assignment(Router(records[:3]), "policy")
    after = assignment(Router(records), "policy")
    assert {after[rid] for rid in ROLLOUT_IDS if before[rid] != after[rid]} == {records[3].base_url}


def test_unknown_model_among_several_is_model_not_found() -> None:
    router = Router(endpoints("a", 1) + endpoints("b", 1))
    with pytest.raises(NotFound) as info:
        router.pick("c", "r1")
    assert info.value.code == "model_not_found"
    assert info.value.param == "model"
    assert "a, b" in info.value.message


@pytest.mark.parametrize("asked", [None, "", "whatever-the-harness-says"])
def test_with_one_model_any_name_goes_to_it(asked: str | None) -> None:
    router = Router(endpoints("only", 2))
    assert router.pick(asked, "r1").name == "only"


def test_no_model_registered_is_not_found() -> None:
    with pytest.raises(NotFound, match="none registered"):
        Router().pick("policy", "r1")


def test_version_is_the_highest_endpoint_version_and_none_when_unknown() -> None:
    records = endpoints("policy", 1, version=2) + [
        ModelRecord(name="policy", base_url="http://late:1/v1", version=5, served_name="policy")]
    router = Router(records)
    assert router.version("policy") == 5
    assert router.version("other") is None


ALIASES = {"claude-*haiku*": "small", "claude-*": "policy", "GPT-*": "policy", "o[0-9]*": "policy"}
REGISTERED = endpoints("policy", 2) + endpoints("small", 1) + endpoints("claude-opus-5-5", 1)


@pytest.mark.parametrize(("asked", "default", "expected"), [
    ("claude-opus-5-5", None, "claude-opus-5-5"),  # an exact registered name wins over every pattern
    ("claude-3-5-haiku-20241022", None, "small"),  # the first matching pattern, in the order given
    ("claude-sonnet-4-5", None, "policy"),
    ("gpt-5-codex", None, "policy"),  # patterns ignore case
    ("o3", None, "policy"),
    ("policy", "small", "policy"),
    ("mistral-large", "small", "small"),  # no pattern: the default
    ("", "small", "small"),
    (None, "policy", "policy"),
])
def test_a_name_resolves_exact_then_alias_then_default(asked, default, expected) -> None:
    router = Router(REGISTERED, aliases=ALIASES, default_model=default)
    assert router.resolve(asked) == expected
    assert router.pick(asked, "r1").name == expected


def test_an_unknown_name_without_a_default_is_404_naming_the_models_and_the_config_keys() -> None:
    with pytest.raises(NotFound) as info:
        Router(REGISTERED, aliases=ALIASES).pick("mistral-large", "r1")
    assert (info.value.status, info.value.code, info.value.param) == (404, "model_not_found", "model")
    for part in ("'mistral-large'", "claude-opus-5-5, policy, small", "model_aliases", "default_model"):
        assert part in info.value.message


@pytest.mark.parametrize(("aliases", "default", "asked", "names"), [
    ({"claude-*": "gone"}, None, "claude-x", ("'claude-*'", "'gone' is not registered")),
    ({}, "gone", "anything", ("default_model is 'gone'", "'gone' is not registered")),
])
def test_an_alias_or_default_to_an_unregistered_model_is_404_naming_it(aliases, default, asked, names) -> None:
    with pytest.raises(NotFound) as info:
        Router(endpoints("policy", 1), aliases=aliases, default_model=default).pick(asked, "r1")
    assert info.value.code == "model_not_found"
    assert all(name in info.value.message for name in names), info.value.message


def test_an_alias_keeps_the_rollouts_sticky_endpoint() -> None:
    router = Router(endpoints("policy", 4), aliases={"claude-*": "policy"})
    assert all(router.pick("claude-opus-5-5", rid) == router.pick("policy", rid) for rid in ROLLOUT_IDS[:50])


SIDE_MODELS = ("claude-*haiku*", "*-mini")


@pytest.mark.parametrize(("kind", "model", "side"), [
    ("chat", "claude-3-5-haiku-20241022", True),
    ("messages", "Claude-Haiku-4-5", True),  # case-insensitive
    ("chat", "gpt-5-mini", True),
    ("count_tokens", "claude-opus-5-5", True),  # a token count is always a side call
    ("count_tokens", "", True),
    ("messages", "claude-opus-5-5", False),
    ("responses", "gpt-5-codex", False),
    ("chat", "policy", False),
    ("chat", "gpt-5-mini-preview", False),  # a glob matches the whole name
])
def test_side_calls_are_token_counts_and_side_model_names(kind: str, model: str, side: bool) -> None:
    assert is_side_call(kind, model, SIDE_MODELS) is side


def test_without_side_models_only_token_counts_are_side_calls() -> None:
    assert not is_side_call("chat", "claude-3-5-haiku", ())
    assert is_side_call("count_tokens", "claude-3-5-haiku", ())
