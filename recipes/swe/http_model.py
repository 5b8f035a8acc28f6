"""mini-swe-agent's text-based model over plain HTTP: the request litellm's `openai/<model>` sends, without litellm.

A drop-in for `minisweagent.models.litellm_textbased_model.LitellmTextbasedModel` pointed at an OpenAI-compatible
server (the gateway): the same constructor (`model_name="openai/<model>"`, `model_kwargs` with `api_base`, `api_key`
and the sampling fields), the same body on the wire (`model`, `messages` without `extra` and without null fields, the
sampling fields: tested against litellm itself), the same action parsing, observation messages and retries (mini-swe-
agent's own helpers). What it leaves out is litellm's import: 8-9 CPU-s of every harness start on a 2-core machine,
about as much CPU as the engine spends on a `make train` rollout. A harness configuration names it as
`model.model_class: http_textbased` (harness.py's `project_model_class`, which imports this module so that the
runner's sandbox binds it); the default stays litellm's.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from typing import Any, Literal

from minisweagent.exceptions import FormatError
from minisweagent.models import GLOBAL_MODEL_STATS
from minisweagent.models.utils.actions_text import format_observation_messages, parse_regex_actions
from minisweagent.models.utils.openai_multimodal import expand_multimodal_content
from minisweagent.models.utils.retry import retry
from pydantic import BaseModel, ConfigDict

logger = logging.getLogger("http_textbased_model")
PROVIDER_PREFIX = "openai/"  # litellm's provider prefix: the server is told the name after it
CLIENT_ONLY_KWARGS = ("api_base", "api_key", "drop_params", "timeout")  # litellm's own settings, never in the body
ABORT_STATUSES = frozenset({400, 401, 403, 404, 413, 422})  # litellm's abort classes: a retry cannot succeed
DEFAULT_TIMEOUT_S = 600.0  # the openai SDK's read timeout under litellm


class HttpTextbasedModelConfig(BaseModel):
    """LitellmTextbasedModelConfig's fields that shape a query; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")
    model_name: str
    """`openai/<model>` as litellm takes it (or the bare model name)."""
    model_kwargs: dict[str, Any] = {}
    """`api_base` (the server's /v1 URL), `api_key`, and the fields sent in the body (max_tokens, temperature, ...)."""
    cost_tracking: Literal["default", "ignore_errors"] = "ignore_errors"
    """Accepted for litellm's schema; every call costs 0 here."""
    set_cache_control: Literal["default_end"] | None = None
    """Accepted for litellm's schema; an OpenAI-compatible server has no cache markers, so it must stay unset."""
    action_regex: str = r"```mswea_bash_command\s*\n(.*?)\n```"
    """Regex to extract the action from the answer (litellm's default)."""
    format_error_template: str = (
        "Please always provide EXACTLY ONE action in triple backticks, found {{actions|length}} actions."
    )
    """The user turn sent back when an answer holds no action or several."""
    observation_template: str = (
        "{% if output.exception_info %}<exception>{{output.exception_info}}</exception>\n{% endif %}"
        "<returncode>{{output.returncode}}</returncode>\n<output>\n{{output.output}}</output>"
    )
    """The user turn that carries a command's output."""
    multimodal_regex: str = ""
    """Regex to extract multimodal content; empty disables it."""


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """Refuses every redirect: urllib would follow one to another host with the rollout's key in its Authorization
    header (httpx, under litellm, drops it there); the gateway never redirects, so one is an error, not retried."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise UpstreamRefused(f"HTTP {code} redirect from {req.full_url} to {newurl}: the model's server must answer "
                              f"at its own URL (api_base)")


class UpstreamRefused(Exception):
    """A status a retry cannot change (auth, a bad request, no such model): mini-swe-agent stops instead of retrying."""


class UpstreamUnavailable(Exception):
    """A transient failure (connection, 429, 5xx): retried as litellm's are."""


OPENER = urllib.request.build_opener(NoRedirects)


class HttpTextbasedModel:
    abort_exceptions: list[type[Exception]] = [UpstreamRefused, KeyboardInterrupt]

    def __init__(self, **kwargs):
        self.config = HttpTextbasedModelConfig(**kwargs)
        if self.config.set_cache_control is not None:
            raise ValueError("set_cache_control is an Anthropic cache marker; the HTTP model talks to an OpenAI-"
                             "compatible server: leave it unset")
        kwargs = dict(self.config.model_kwargs)
        if "api_base" not in kwargs:
            raise ValueError("model_kwargs.api_base is required: the server's /v1 URL (the harness's OPENAI_BASE_URL)")
        self._url = str(kwargs["api_base"]).rstrip("/") + "/chat/completions"
        self._api_key = str(kwargs.get("api_key") or "")
        self._timeout_s = float(kwargs.get("timeout") or DEFAULT_TIMEOUT_S)
        self._body_fields = {k: v for k, v in kwargs.items() if k not in CLIENT_ONLY_KWARGS}

    def request_body(self, messages: list[dict], **kwargs) -> dict[str, Any]:
        """What goes on the wire: litellm drops `extra` and every null field of a message."""
        prepared = [{k: v for k, v in message.items() if k != "extra" and v is not None} for message in messages]
        return {"model": self.config.model_name.removeprefix(PROVIDER_PREFIX), "messages": prepared,
                **(self._body_fields | kwargs)}

    def _query(self, messages: list[dict], **kwargs) -> dict[str, Any]:
        data = json.dumps(self.request_body(messages, **kwargs)).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self._url, data=data, headers=headers, method="POST")
        try:
            with OPENER.open(request, timeout=self._timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            detail = f"HTTP {e.code} from {self._url}: {e.read()[:500].decode(errors='replace')}"
            raise (UpstreamRefused if e.code in ABORT_STATUSES else UpstreamUnavailable)(detail) from e
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise UpstreamUnavailable(f"request to {self._url} failed: {e}") from e

    def query(self, messages: list[dict], **kwargs) -> dict:
        for attempt in retry(logger=logger, abort_exceptions=self.abort_exceptions):
            with attempt:
                response = self._query(messages, **kwargs)
        GLOBAL_MODEL_STATS.add(0.0)
        choice = response["choices"][0]
        try:
            actions = parse_regex_actions(choice["message"].get("content") or "",
                                          action_regex=self.config.action_regex,
                                          format_error_template=self.config.format_error_template,
                                          template_kwargs={"finish_reason": choice.get("finish_reason")})
        except FormatError as e:  # its message keeps the response, as litellm's does
            e.messages[0]["extra"].update({"cost": 0.0, "response": response})
            raise
        message = dict(choice["message"])
        message["extra"] = {"actions": actions, "response": response, "cost": 0.0, "timestamp": time.time()}
        return message

    def format_message(self, **kwargs) -> dict:
        return expand_multimodal_content(kwargs, pattern=self.config.multimodal_regex)

    def format_observation_messages(self, message: dict, outputs: list[dict],
                                    template_vars: dict | None = None) -> list[dict]:
        return format_observation_messages(outputs, observation_template=self.config.observation_template,
                                           template_vars=template_vars, multimodal_regex=self.config.multimodal_regex)

    def get_template_vars(self, **kwargs) -> dict[str, Any]:
        return self._keyless_config()

    def serialize(self) -> dict:
        return {"info": {"config": {"model": self._keyless_config(),
                                    "model_type": f"{self.__class__.__module__}.{self.__class__.__name__}"}}}

    def _keyless_config(self) -> dict[str, Any]:
        """The configuration without the API key: templates and the trajectory file never hold the rollout's key."""
        return without_api_keys(self.config.model_dump(mode="json"))


def without_api_keys(value: Any) -> Any:
    """`value` with every `api_key` entry of every nested mapping dropped (the harness's litellm model uses it too)."""
    if isinstance(value, dict):
        return {k: without_api_keys(v) for k, v in value.items() if k != "api_key"}
    if isinstance(value, list):
        return [without_api_keys(v) for v in value]
    return value
