"""mini-swe-agent's text-based model over plain HTTP (recipes/swe/http_model.py): the body litellm's `openai/<model>`
sends, the same parsing and errors, no API key in templates or the trajectory; the slow test holds it against litellm
itself on one conversation."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from minisweagent.exceptions import FormatError

from recipes.swe.harness import build_model
from recipes.swe.harness_configs import load_harness_config
from recipes.swe.http_model import HttpTextbasedModel, UpstreamRefused, UpstreamUnavailable
from tests.recipes.swe.completion_server import CompletionServer

ANSWER = "Fix:\n```bash\nsed -i '3s|a|b|' m.py\n```"


class Upstream(CompletionServer):
    """The server answering every call with `.text` (ANSWER unless a test changes it), at /v1."""

    def __init__(self) -> None:
        self.text = ANSWER
        super().__init__(lambda _n: self.text)
        self.url += "/v1"


@pytest.fixture
def upstream():
    server = Upstream()
    yield server
    server.close()


def harness_model(url: str, harness_config: str = "one_command", model_class: str | None = None):
    """The model the SWE harness builds for `harness_config` against `url` (its model class overridable)."""
    config = load_harness_config(harness_config)
    if model_class is not None:
        config["model"]["model_class"] = model_class
    task = {"model": "policy", "max_tokens": 64, "temperature": 0.35}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OPENAI_BASE_URL", url)
        env.setenv("OPENAI_API_KEY", "rk-secret")
        return build_model(task, config)


def conversation(model) -> list[dict]:
    """Two calls: a system and user turn, then the answer and an observation."""
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u", "extra": {"note": 1}}]
    answer = model.query(messages)
    output = {"output": "ok", "returncode": 0, "exception_info": ""}
    return [*messages, answer, *model.format_observation_messages(answer, [output])]


def test_the_one_command_config_names_it_and_the_default_does_not():
    assert isinstance(harness_model("http://127.0.0.1:9/v1"), HttpTextbasedModel)
    assert "model_class" not in load_harness_config("mini_textbased").get("model", {})


def test_the_body_is_the_model_the_messages_without_extra_or_nulls_and_the_sampling_fields(upstream):
    model = harness_model(upstream.url)
    messages = conversation(model)
    model.query(messages)
    first, second = (request["body"] for request in upstream.seen)
    assert first == {"model": "policy", "max_tokens": 64, "temperature": 0.35,
                     "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}
    assert second["messages"][2] == {"role": "assistant", "content": ANSWER}  # `tool_calls: null` and `extra` dropped
    assert all(r["path"] == "/v1/chat/completions" and r["authorization"] == "Bearer rk-secret"
               for r in upstream.seen)


def test_an_answer_parses_into_its_action_and_keeps_the_response(upstream):
    answer = harness_model(upstream.url).query([{"role": "user", "content": "u"}])
    assert answer["extra"]["actions"] == [{"command": "sed -i '3s|a|b|' m.py"}]
    assert answer["extra"]["response"]["choices"][0]["message"]["content"] == ANSWER and answer["extra"]["cost"] == 0


def test_an_answer_without_an_action_is_mini_swe_agents_format_error_with_the_response(upstream):
    upstream.text = "I would edit the file."
    with pytest.raises(FormatError) as error:
        harness_model(upstream.url).query([{"role": "user", "content": "u"}])
    message = error.value.messages[0]
    assert message["content"].startswith("Reply with exactly one shell command") and message["extra"]["response"]


@pytest.mark.parametrize(("status", "error"), [(401, UpstreamRefused), (400, UpstreamRefused),
                                               (404, UpstreamRefused), (429, UpstreamUnavailable),
                                               (502, UpstreamUnavailable), (503, UpstreamUnavailable)])
def test_statuses_a_retry_cannot_change_abort_and_the_rest_are_retried(upstream, status, error):
    upstream.status = status
    model = harness_model(upstream.url)
    with pytest.raises(error, match=f"HTTP {status}"):
        model._query([{"role": "user", "content": "u"}])
    assert (error in model.abort_exceptions) == (error is UpstreamRefused)


def test_an_aborting_status_is_not_retried(upstream):
    upstream.status = 401
    with pytest.raises(UpstreamRefused):
        harness_model(upstream.url).query([{"role": "user", "content": "u"}])
    assert len(upstream.seen) == 1


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_refused_and_the_key_goes_nowhere_else(upstream, status):
    """urllib would follow a redirect to another host with the Authorization header; the gateway never redirects."""
    elsewhere = CompletionServer(lambda _n: ANSWER)
    upstream.status, upstream.location = status, f"{elsewhere.url}/steal"
    try:
        with pytest.raises(UpstreamRefused, match=f"HTTP {status} redirect"):
            harness_model(upstream.url).query([{"role": "user", "content": "u"}])
    finally:
        elsewhere.close()
    assert len(upstream.seen) == 1 and elsewhere.seen == []


def test_a_model_class_outside_the_allow_list_is_refused():
    from recipes.swe.harness import project_model_class

    for name in ("os.getcwd", "repo.evil.Model", "litellm", "deterministic"):
        with pytest.raises(ValueError, match="not a model class of the SWE harness"):
            project_model_class(name)


def test_no_server_is_a_transient_error():
    with pytest.raises(UpstreamUnavailable, match="failed"):
        harness_model("http://127.0.0.1:9/v1")._query([{"role": "user", "content": "u"}])


def test_the_api_key_is_in_neither_the_templates_nor_the_trajectory():
    model = harness_model("http://127.0.0.1:9/v1")
    for exposed in (model.get_template_vars(), model.serialize()):
        assert "rk-secret" not in json.dumps(exposed)
    assert model.get_template_vars()["model_kwargs"]["api_base"] == "http://127.0.0.1:9/v1"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"model_name": "openai/p", "model_kwargs": {}}, "api_base is required"),
    ({"model_name": "openai/p", "model_kwargs": {"api_base": "u"}, "set_cache_control": "default_end"},
     "leave it unset"),
    ({"model_name": "openai/p", "model_kwargs": {"api_base": "u"}, "litellm_model_registry": "x"}, "Extra inputs")])
def test_a_configuration_it_cannot_honour_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HttpTextbasedModel(**kwargs)


@pytest.mark.slow  # imports litellm: 8-9 CPU-s
def test_it_sends_what_litellm_sends_and_parses_what_litellm_parses(upstream, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # as the harness runs it: no fetch of litellm's prices
    ours = conversation(harness_model(upstream.url))
    litellm = conversation(harness_model(upstream.url, model_class="litellm_textbased"))
    assert upstream.seen[0] == upstream.seen[1]  # path, key and body of the first call
    for answer, reference in zip(ours, litellm, strict=True):
        assert {k: v for k, v in answer.items() if k != "extra" and v is not None} == \
            {k: v for k, v in reference.items() if k != "extra" and v is not None}
    assert ours[2]["extra"]["actions"] == litellm[2]["extra"]["actions"]
    harness_model(upstream.url).query(ours)
    reference = harness_model(upstream.url, model_class="litellm_textbased")
    reference.query(litellm)
    assert upstream.seen[2] == upstream.seen[3]  # the second call: the answer and observation re-sent
    assert type(reference).__module__ == "minisweagent.models.litellm_textbased_model"
    for exposed in (reference.get_template_vars(), reference.serialize()):  # litellm's own holds the key in both
        assert "rk-secret" not in json.dumps(exposed, default=str)


def test_every_model_class_a_configuration_names_resolves_inside_the_runners_sandbox():
    """The runner's sandbox binds the harness's static imports only (sandbox/paths.py): a model class named in a
    configuration must resolve from the project's modules bound there, not by an import path the sandbox lacks."""
    from recipes.swe.harness import project_model_class
    from recipes.swe.harness_configs import config_names
    from sandbox.paths import module_closure

    bound = {str(path) for path in module_closure("recipes.swe.harness")}
    for name in config_names():
        model_class = load_harness_config(name).get("model", {}).get("model_class")
        if model_class is None:
            continue
        resolved = project_model_class(model_class)
        source = sys.modules[resolved.__module__].__file__
        assert resolved.__module__.startswith("minisweagent.") or str(Path(source).resolve()) in bound, \
            f"{name}: {model_class} lives in {source}, which the runner's sandbox does not bind"
