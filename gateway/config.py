"""The gateway's typed configuration: from YAML and/or keyword overrides; unknown keys are errors."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.sampling import SamplingPolicy


class GatewayConfig(BaseModel):
    """Settings of one gateway process."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    db_url: str = Field(default="sqlite:///harnessrl-gateway.db", description="SQLAlchemy URL of the store.")
    host: str = Field(default="127.0.0.1", description="Listen address.")
    port: int = Field(default=8100, ge=0, le=65535, description="Listen port.")
    public_url: str | None = Field(default=None, description="Base URL harnesses reach; default http://host:port.")
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0,
                                description="Largest request body accepted (413 above).")
    max_connections_per_client: int = Field(default=256, ge=0, description="Most connections one client address "
                                            "may hold at once (429 too_many_connections past it; 0: no limit); "
                                            "gateway/connection_limits.py.")
    max_connections: int | None = Field(default=None, gt=0, description="Most connections the process holds at "
                                        "once (503 past it); default: half the descriptors left after a "
                                        "reserve, at most 16,384.")
    connection_limit_exempt: list[str] = Field(default_factory=lambda: ["127.0.0.0/8", "::1/128"],
                                               description="Client networks with no per-client connection limit "
                                               "(loopback: the local sandboxes' forwarders, each bounded, and the "
                                               "control plane; add a proxy's or sidecar's network here).")
    upstream_timeout_s: float = Field(default=900.0, gt=0, description="Longest wait for one upstream answer.")
    retry_attempts: int = Field(default=5, ge=1, description="Upstream tries per call on transient failures.")
    retry_backoff_s: float = Field(default=0.2, ge=0, description="First backoff; doubles each retry.")
    retry_budget_s: float = Field(default=60.0, gt=0, description="Total time allowed for retries of one call.")
    pause_hold_timeout_s: float = Field(default=1800.0, gt=0, description="Longest a call is held by a pause.")
    pause_drain_timeout_s: float = Field(default=900.0, gt=0, description="Longest `pause` waits for in-flight calls.")
    sqlite_synchronous: str = Field(default="NORMAL", description="SQLite synchronous level: NORMAL survives a killed "
                                    "process, FULL a power cut too at one fsync per commit (README: Durability).")
    max_calls_per_attempt: int = Field(default=10_000, gt=0,
                                       description="Most calls one rollout attempt may make (429 after).")
    max_artifact_bytes_per_attempt: int = Field(default=256 * 1024 * 1024, gt=0,
                                                description="Most artifact bytes a harness stores per attempt (413).")
    max_call_bytes_per_attempt: int = Field(default=256 * 1024 * 1024, gt=0,
                                            description="Most bytes of recorded calls (request, answer and "
                                            "continuation bodies as stored) one attempt may hold: a request past it "
                                            "is refused on arrival, an answer at its recording (413 "
                                            "call_bytes_quota_exceeded, the call not recorded).")
    max_request_bytes_in_flight_per_rollout: int = Field(default=64 * 1024 * 1024, gt=0,
                                                         description="Most request body bytes one rollout's "
                                                         "requests in flight hold at once (429 "
                                                         "request_bytes_in_flight); gateway/request_bytes.py.")
    max_request_bytes_in_flight: int = Field(default=2 * 1024 * 1024 * 1024, gt=0,
                                             description="Most request body bytes all harness requests in flight "
                                             "hold at once (503 gateway_request_bytes_full).")
    artifact_read_bytes_in_flight: int = Field(default=256 * 1024 * 1024, gt=0,
                                               description="Most bytes of artifacts being sent to harnesses at once "
                                               "(one read a rollout; a read holds max_body_bytes until its artifact "
                                               "is loaded): a read past it waits up to 60 s, then 503 "
                                               "artifact_reads_busy; gateway/artifact_reads.py.")
    max_event_bytes_per_attempt: int = Field(default=16 * 1024 * 1024, gt=0,
                                             description="Most event payload bytes a harness posts per attempt (413).")
    store_lock_wait_s: float = Field(default=0.75, gt=0, le=30,
                                     description="Longest a write waits for a locked or busy database (503 after).")
    cache_rollouts: bool = Field(default=True, description="Cache rollout state in memory (with several gateways on "
                                 "one store each call's number is taken in the store, which refuses a call of an "
                                 "attempt that ended on another gateway: the cache stays safe).")
    fleet_poll_s: float = Field(default=1.0, gt=0, le=10, description="PostgreSQL store: how often each gateway "
                                "heartbeats (its calls in flight) and reads the store's pause and models; a pause "
                                "or a model change made on another gateway reaches this one at once (NOTIFY), "
                                "within this at the latest.")
    fleet_stale_s: float = Field(default=5.0, gt=0, le=600, description="PostgreSQL store: a gateway whose heartbeat "
                                 "is older is counted gone (killed): a pause does not wait for its drain.")
    model_aliases: dict[str, str] = Field(default_factory=dict, description="Harness model names -> registered "
                                          "model: glob pattern (case-insensitive) -> model name, first match wins, "
                                          "e.g. {'claude-*': policy, 'gpt-*': policy}; an exact registered name wins "
                                          "over any pattern.")
    default_model: str | None = Field(default=None, description="Registered model for a name that is neither "
                                      "registered nor aliased; none: such a name is 404 model_not_found (unless "
                                      "exactly one model is registered, which then serves every name).")
    side_models: list[str] = Field(default_factory=list, description="Glob patterns (case-insensitive) of model "
                                   "names whose calls are side calls, recorded with side=true (e.g. 'claude-*haiku*': "
                                   "Claude Code's small-model calls for titles); count_tokens calls always are.")
    sampling: SamplingPolicy = Field(default_factory=SamplingPolicy, description="How train rollouts' calls sample: "
                                     "`train: enforce` (default; the policy's `temperature`, top_p 1, top_k and "
                                     "min_p off) or `train: record` (the harness's values); val rollouts always "
                                     "sample as the harness asks. Every call records its sampling.")
    recorded_turns: bool = Field(default=False, description="Give the engine the recorded tokens of an assistant "
                                 "turn a harness sends back re-serialised (gateway/recorded_turns.py): a translated "
                                 "call whose history continues an earlier call of its attempt is prompted with that "
                                 "call's prompt and answer tokens, so its rollout stays one sample (on for the "
                                 "claude-code and codex recipes' runs; the engine must take vLLM's "
                                 "kv_transfer_params.prompt_token_ids).")
    admin_token: str | None = Field(default=None, description="Admin token; default $HARNESSRL_ADMIN_TOKEN.")
    grader_token: str | None = Field(default=None, description="Grader token; default $HARNESSRL_GRADER_TOKEN.")

    @field_validator("connection_limit_exempt")
    @classmethod
    def _networks(cls, networks: list[str]) -> list[str]:
        for network in networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError as exc:
                raise ValueError(f"{network!r} is not an IP network (write e.g. 10.0.0.0/8 or fd00::/8)") from exc
        return networks

    def base_url(self) -> str:
        """Where harnesses reach this gateway."""
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")


HARNESS_MODEL_PATTERNS = ("claude-*", "gpt-*", "o[0-9]*", "codex-*")
"""Model names the harnesses send on their own (Claude Code: `claude-opus-5-5`, its small model `claude-*haiku*`;
Codex and the Agents SDK: `gpt-5-codex`, `o3`, ...)."""
HARNESS_SIDE_MODELS = ("claude-*haiku*",)
"""Claude Code's small-model calls (a title, a topic) are side calls."""


def policy_routing(model_name: str) -> dict[str, Any]:
    """Gateway settings that send every harness model name of `HARNESS_MODEL_PATTERNS` to `model_name` and mark
    `HARNESS_SIDE_MODELS` as side calls (what a training run's own gateway is started with)."""
    return {"model_aliases": dict.fromkeys(HARNESS_MODEL_PATTERNS, model_name),
            "side_models": list(HARNESS_SIDE_MODELS)}


def load_gateway_config(path: str | Path | None = None, **overrides: Any) -> GatewayConfig:
    """Read a YAML file (optional), apply non-None overrides, validate."""
    loaded = yaml.safe_load(Path(path).read_text()) if path is not None else None
    if not isinstance(loaded or {}, dict):
        raise ValueError(f"{path}: expected a mapping of gateway settings, got {type(loaded).__name__}")
    given = {key: value for key, value in overrides.items() if value is not None}
    return GatewayConfig(**{**(loaded or {}), **given})
