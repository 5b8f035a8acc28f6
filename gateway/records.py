"""Wire and storage records of the gateway: rollouts, calls, events, models, and the rollout state machine."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.upstream_url import check_base_url

MAX_ATTEMPT = 1_000_000  # the largest attempt number a request may name (the store's integers are 64-bit)
MAX_CURSOR = 2**63 - 1  # the largest `finished` cursor (SQLite's and PostgreSQL's BIGINT)
MAX_VERSION = 2**31 - 1  # the largest policy version (stored as a 32-bit INTEGER on PostgreSQL)
MAX_SAMPLING_SEED = 2**63 - 1  # the largest rollout sampling seed (a BIGINT)
NAME_PATTERN = r"^[^\x00-\x1f\x7f]+$"
"""Names a caller chooses that the store keeps as text (a group, a controller, a model): no control characters
(PostgreSQL's text holds no NUL: a 400 naming the field, not a failed insert)."""
MORE_CALLS_HEADER = "X-Harnessrl-More-Calls"
"""On a page of calls bounded by `max_bytes` and shorter than its `limit`: "true" when calls numbered after it
exist (`GET /v1/admin/rollouts/{id}/calls`)."""

class RolloutState(StrEnum):
    """Lifecycle of one rollout; the store enforces TRANSITIONS."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATES = frozenset({RolloutState.SUCCEEDED, RolloutState.FAILED, RolloutState.CANCELLED})

TRANSITIONS: dict[RolloutState, frozenset[RolloutState]] = {
    RolloutState.QUEUED: frozenset({RolloutState.RUNNING, RolloutState.CANCELLED}),
    # running -> queued is a requeue for another attempt (infra failure, lost lease).
    RolloutState.RUNNING: frozenset(
        {RolloutState.SUCCEEDED, RolloutState.FAILED, RolloutState.CANCELLED, RolloutState.QUEUED}
    ),
    RolloutState.SUCCEEDED: frozenset(),
    RolloutState.FAILED: frozenset(),
    RolloutState.CANCELLED: frozenset(),
}


def can_transition(current: RolloutState, target: RolloutState) -> bool:
    """True when the state machine allows `current -> target`."""
    return target in TRANSITIONS[current]


class FailureKind(StrEnum):
    """Who is to blame for a failed rollout: the agent (counts with its reward) or the infrastructure (retried)."""

    AGENT = "agent"
    INFRA = "infra"


class InfraReason(StrEnum):
    """Why an attempt ended as an infrastructure failure (carried with the state change: `RolloutPatch.reason`, the
    STATE event's `reason`), so the infra rate shows per cause. Only what the policy cannot cause is infra."""

    ENGINE_UNREACHABLE = "engine_unreachable"  # the harness gave up after the engine did not answer (connection)
    START_FAILED = "start_failed"  # the attempt could not be prepared or started (runner, sandbox, workdir)
    EVICTED = "evicted"  # the node evicted the attempt
    NODE_LOST = "node_lost"  # the node or the Job vanished under the attempt
    CANCELLED = "cancelled"  # the controller cancelled the attempt (shutdown)
    LEASE_EXPIRED = "lease_expired"  # the controller stopped renewing its lease (it died, or could not report)
    GRADER_CRASHED = "grader_crashed"  # the recipe's grader failed on its own infrastructure (GraderInfraError)
    RECIPE_UNAVAILABLE = "recipe_unavailable"  # the rollout names a recipe the controller cannot load


class CallErrorCode(StrEnum):
    """What went wrong with one recorded call (`CallRecord.error_code`), by who caused it. The engine's failures
    (`upstream_unavailable`, `upstream_protocol_error`, `stream_broken`) are the only ones the policy cannot cause;
    the controller counts a harness that gives up after one of them as an infra failure (controller/outcomes.py)."""

    UPSTREAM_UNAVAILABLE = "upstream_unavailable"  # the engine did not answer (connection refused or reset, 5xx
    # statuses retried until the budget ran out)
    UPSTREAM_PROTOCOL_ERROR = "upstream_protocol_error"  # the engine's answer broke the protocol, or was a 5xx
    STREAM_BROKEN = "stream_broken"  # the engine dropped a stream before its end
    UPSTREAM_TIMEOUT = "upstream_timeout"  # no complete answer within `upstream_timeout_s` (the answer's length is
    # the policy's: counted against the answer)
    UPSTREAM_ERROR = "upstream_error"  # the engine refused the request (4xx: the context is full, a bad field) or
    # answered an error of its own in a 200 body or chunk
    ANSWER_TOO_LARGE = "answer_too_large"  # the engine's answer would hold more of the gateway's memory than the
    # rollout's share (`n`, `max_tokens`, `top_logprobs` are the request's): read no further
    MODEL_TOOL_ARGUMENTS = "model_tool_arguments"  # an ok call: the model's tool call has arguments the harness
    # protocol cannot carry (not a JSON object, for Anthropic Messages); answered as text, `error` says which


class RolloutMode(StrEnum):
    """`train` rollouts feed the trainer; `val` rollouts are evaluation only."""

    TRAIN = "train"
    VAL = "val"


class CallStatus(StrEnum):
    """Outcome of one proxied call."""

    OK = "ok"
    ERROR = "error"


class EventKind(StrEnum):
    """What an event records."""

    AGENT_OUTPUT = "agent_output"
    LOG = "log"
    REWARD = "reward"
    STATE = "state"


class WireModel(BaseModel):
    """Base of every record that crosses a process boundary: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")


class RolloutSpec(WireModel):
    """One rollout to create."""

    id: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:-]+$",
                    description="Client-chosen id; idempotency key.")
    group_id: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN,
                          description="Rollouts of one task share a group id (GRPO/RLOO); no control characters.")
    input: dict[str, Any] = Field(default_factory=dict, description="The task input handed to the harness.")
    mode: RolloutMode = Field(default=RolloutMode.TRAIN, description="train or val.")
    max_attempts: int = Field(default=3, ge=1, le=100, description="Attempts allowed before an infra failure is final.")
    sampling_seed: int | None = Field(default=None, ge=0, le=MAX_SAMPLING_SEED,
                                      description="Seeds every call of the rollout: the gateway sets each call's "
                                      "`seed` to one derived from this and the call's number in its attempt "
                                      "(`gateway.sampling.call_seed`), whatever the harness sent, so the same "
                                      "weights give the same answers (seeded validation). None: the harness's own.")


class CreateRolloutsRequest(WireModel):
    """Batch creation of rollouts; all-or-nothing."""

    rollouts: list[RolloutSpec] = Field(min_length=1, max_length=10_000, description="Rollouts to create.")


class RolloutCreated(WireModel):
    """What a harness needs to run one rollout."""

    id: str = Field(description="Rollout id.")
    base_url: str = Field(description="OpenAI base URL for the harness: {gateway}/r/{id}/v1.")
    api_key: str = Field(description="The rollout's own key; valid only for this rollout.")
    created: bool = Field(description="False when the rollout already existed (idempotent retry).")


class Rollout(WireModel):
    """A rollout as stored."""

    id: str = Field(description="Rollout id.")
    group_id: str = Field(description="Group id.")
    input: dict[str, Any] = Field(description="Task input.")
    mode: RolloutMode = Field(description="train or val.")
    state: RolloutState = Field(description="Current state.")
    attempt: int = Field(description="Number of times the rollout was claimed (0 before the first claim).")
    max_attempts: int = Field(description="Attempts allowed.")
    sampling_seed: int | None = Field(default=None, description="The rollout's sampling seed (RolloutSpec).")
    failure_kind: FailureKind | None = Field(default=None, description="Set when state is failed.")
    error: str | None = Field(default=None, description="Human-readable failure reason.")
    reward: float | None = Field(default=None, description="Reward posted by the grader.")
    lease_owner: str | None = Field(default=None, description="Controller holding the lease while running.")
    lease_expires_at: float | None = Field(default=None, description="Lease deadline, unix seconds.")
    created_at: float = Field(description="Unix seconds.")
    started_at: float | None = Field(default=None, description="Last claim, unix seconds.")
    finished_at: float | None = Field(default=None, description="Reached a terminal state, unix seconds.")
    finished_seq: int | None = Field(default=None, description="Cursor position among finished rollouts.")
    calls_closed_at: float | None = Field(default=None, description="When the controller closed the current "
                                          "attempt's calls (its harness ended: `LeaseRenewal.close_calls`); None "
                                          "while the attempt may record calls.")


class ClaimedRollout(Rollout):
    """A rollout as a claim leases it: with the base URL and the key of the attempt just claimed, so the runner needs
    no second request for them (the key is a credential: left out of the record's repr)."""

    base_url: str = Field(description="OpenAI base URL for the harness: {gateway}/r/{id}/v1.")
    api_key: str = Field(repr=False, description="The key of this attempt of the rollout; valid only for it.")


class ClaimRequest(WireModel):
    """A controller asks for queued rollouts."""

    controller_id: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN,
                               description="Who claims; owns the lease (no control characters).")
    limit: int = Field(default=1, ge=1, le=1000, description="Most rollouts to claim.")
    lease_s: float = Field(default=60.0, gt=0, le=86_400, description="Lease length; renew before it expires.")


class LeaseRenewal(WireModel):
    """Renew a running rollout's lease."""

    controller_id: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN,
                               description="Must be the current lease owner.")
    lease_s: float = Field(default=60.0, gt=0, le=86_400, description="New lease length from now.")
    close_calls: bool = Field(default=False, description="The attempt's harness has ended: from now on no call of "
                              "this attempt is recorded (refused with 409), so the calls the controller reads next "
                              "are the ones it grades and the trainer trains. Kept until the next claim.")


class RolloutPatch(WireModel):
    """A state change."""

    state: RolloutState = Field(description="Target state; must be allowed by the state machine.")
    failure_kind: FailureKind | None = Field(default=None, description="Required when state is failed.")
    error: str | None = Field(default=None, max_length=20_000, description="Failure reason.")
    attempt: int | None = Field(default=None, ge=0, le=MAX_ATTEMPT,
                                description="The attempt this change is about; 409 when it is not the current one.")
    controller_id: str | None = Field(default=None, min_length=1, max_length=200, pattern=NAME_PATTERN,
                                      description="The lease holder making the change; 409 when it holds no lease.")
    reason: InfraReason | None = Field(default=None, description="Why the attempt ended as an infrastructure "
                                       "failure (with state queued, or failed with failure_kind infra); recorded in "
                                       "the STATE event's payload.")


class RewardIn(WireModel):
    """A grader's verdict."""

    reward: float = Field(allow_inf_nan=False, description="The scalar reward.")
    details: dict[str, Any] = Field(default_factory=dict, description="Free-form grading details.")
    attempt: int | None = Field(default=None, ge=0, le=MAX_ATTEMPT,
                                description="The attempt graded; 409 when it is not the current one.")
    controller_id: str | None = Field(default=None, min_length=1, max_length=200, pattern=NAME_PATTERN,
                                      description="The lease holder posting it; 409 when it holds no lease.")


class EventIn(WireModel):
    """An event posted by a harness (agent_output, log) or an admin."""

    kind: EventKind = Field(description="Event kind.")
    payload: dict[str, Any] = Field(default_factory=dict, description="Event body.")


class Event(WireModel):
    """An event as stored."""

    id: int = Field(description="Store id, increasing.")
    rollout_id: str = Field(description="Rollout id.")
    attempt: int = Field(description="Attempt during which it was posted.")
    kind: EventKind = Field(description="Event kind.")
    payload: dict[str, Any] = Field(description="Event body.")
    created_at: float = Field(description="Unix seconds.")


class ModelIn(WireModel):
    """Register one upstream endpoint serving a model."""

    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN,
                      description="Name harnesses ask for in `model` (no control characters; in a path, "
                      "percent-encoded: `Qwen/Qwen3-8B` is `Qwen%2FQwen3-8B`).")
    base_url: str = Field(max_length=500, json_schema_extra={"format": "uri", "pattern": "^https?://[^/?#@]+"},
                          description="Upstream OpenAI base URL, e.g. http://host:8000/v1: absolute http(s) with a "
                          "host, no query, fragment or credentials, not the gateway itself (422).")
    version: int = Field(default=0, ge=0, le=MAX_VERSION,
                         description="Policy version served (used when the upstream does not report it).")
    served_name: str | None = Field(default=None, min_length=1, max_length=200, pattern=NAME_PATTERN,
                                    description="The upstream's own model id, if different from name.")

    @field_validator("base_url")
    @classmethod
    def _reachable(cls, base_url: str) -> str:
        return check_base_url(base_url)


class ModelVersionPatch(WireModel):
    """Set the policy version of every endpoint of a model."""

    version: int = Field(ge=0, le=MAX_VERSION, description="New policy version.")


class ModelRecord(WireModel):
    """A registered upstream endpoint."""

    name: str = Field(description="Model name.")
    base_url: str = Field(description="Upstream base URL.")
    version: int = Field(description="Policy version.")
    served_name: str = Field(description="Upstream model id.")


class ChoiceRecord(WireModel):
    """One choice of a call with index >= 1 (a request with `n` > 1); the first choice is the call's own fields."""

    index: int = Field(ge=1, description="The choice's index in the answer.")
    prompt_token_ids: list[int] = Field(default_factory=list,
                                        description="The choice's own prompt IDs when they differ from the call's "
                                        "(a completions request with several prompts); empty: the call's prompt.")
    response_token_ids: list[int] = Field(description="Token IDs the engine sampled for this choice.")
    response_logprobs: list[float] = Field(description="Logprob of each sampled token (empty when not requested).")
    response_text: str | None = Field(default=None, description="The choice's text.")
    finish_reason: str | None = Field(default=None, description="The choice's finish reason.")


class SamplingRecord(WireModel):
    """The sampling of one call: the parameters the engine applied (for every choice), and what the harness asked."""

    temperature: float = Field(default=1.0, description="Temperature the engine sampled at; 0 is greedy "
                               "(the argmax, with top_p 1, top_k 0 and min_p 0).")
    top_p: float = Field(default=1.0, description="Nucleus mass kept; 1 is off.")
    top_k: int = Field(default=0, description="Most likely tokens kept; 0 is off (a harness's -1 is recorded as 0).")
    min_p: float = Field(default=0.0, description="Least probability kept, relative to the most likely token's; 0 is "
                         "off.")
    requested: dict[str, Any] = Field(default_factory=dict, description="The harness's own sampling fields as it "
                                      "sent them, in its protocol (temperature, top_p, top_k, min_p, penalties, "
                                      "logit_bias); the decoding constraints the engine got (response_format unless "
                                      "plain text, a tool_choice forcing a call); `dropped`: the names of the fields "
                                      "the gateway did not forward (gateway/request_fields.py); empty when none.")
    enforced: bool = Field(default=False, description="True when the gateway applied the policy's sampling in place "
                           "of the harness's (gateway config `sampling.train: enforce`, train rollouts).")
    seed: int | None = Field(default=None, description="The seed the engine sampled with: the gateway's for a "
                             "rollout with a sampling seed, else the harness's own; None: unseeded.")
    forced_prompt_tokens: int | None = Field(default=None, description="When `requested` holds a forcing "
                                             "tool_choice: the tokens of the call's opening the engine forced at the "
                                             "end of the prompt (the embedded engine's `tool_choice_forced_tokens`: "
                                             "the response holds only sampled tokens). None: the engine said nothing "
                                             "(vLLM's grammar constrained the response's own tokens; the trainer "
                                             "masks them).")


class CallRecord(WireModel):
    """One proxied call, immutable once written."""

    id: int = Field(description="Store id, increasing.")
    rollout_id: str = Field(description="Rollout id.")
    attempt: int = Field(description="Rollout attempt the call belongs to.")
    seq: int = Field(description="Arrival order within the rollout attempt, from 0.")
    kind: str = Field(description="chat, completion, or a translated protocol's kind (e.g. count_tokens).")
    stream: bool = Field(description="Whether the harness streamed the answer.")
    model: str = Field(description="Model name asked for.")
    upstream: str | None = Field(description="Upstream base URL that answered.")
    status: CallStatus = Field(description="ok or error.")
    http_status: int = Field(description="HTTP status returned to the harness.")
    error: str | None = Field(description="Error message when status is error; on an ok call with `error_code` "
                              "model_*, how the model's answer was delivered otherwise (e.g. as text).")
    error_code: CallErrorCode | None = Field(default=None, description="What went wrong, by who caused it "
                                             "(`CallErrorCode`); None for a clean answer and for calls recorded by "
                                             "a gateway older than this field.")
    request: dict[str, Any] = Field(description="The request body as the harness sent it.")
    response_raw: str | None = Field(description="The response body exactly as returned (JSON or the SSE stream).")
    response_id: str | None = Field(description="The upstream's response id.")
    prompt_token_ids: list[int] = Field(description="Token IDs the engine consumed.")
    response_token_ids: list[int] = Field(description="Token IDs the engine sampled (first choice).")
    response_logprobs: list[float] = Field(description="Logprob of each sampled token (empty when not requested).")
    response_text: str | None = Field(description="The first choice's text.")
    finish_reason: str | None = Field(description="The first choice's finish reason.")
    n_choices: int = Field(description="Number of choices returned.")
    extra_choices: list[ChoiceRecord] = Field(default_factory=list,
                                              description="Every choice after the first (index >= 1), by index; "
                                              "empty for n = 1.")
    side: bool = Field(default=False, description="A harness's side call (a token count, a small-model call for a "
                       "title; gateway config `side_models`); the trainer skips or includes them by configuration.")
    sampling: SamplingRecord | None = Field(default=None, description="The call's sampling parameters; None for a "
                                            "call that samples nothing (count_tokens) and for calls recorded by a "
                                            "gateway older than this field.")
    policy_version: int | None = Field(description="Engine policy version that produced the response.")
    recorded_prefix: int | None = Field(default=None, description="How many of the prompt's tokens are an earlier "
                                        "call's of this attempt, its prompt and answer, given to the engine in place "
                                        "of the history the harness re-sent (gateway config `recorded_turns`); 0 "
                                        "when they were sent and the engine rendered the messages instead; None "
                                        "when nothing was substituted.")
    latency_ms: float = Field(description="Time from arrival to the response being complete.")
    created_at: float = Field(description="Arrival, unix seconds.")


class FinishedPage(WireModel):
    """A page of finished rollouts after a cursor."""

    rollouts: list[Rollout] = Field(description="Finished rollouts, in finishing order.")
    cursor: int = Field(description="Pass as `after` to get the next page.")


class PauseResult(WireModel):
    """Outcome of a pause or resume."""

    paused: bool = Field(description="Whether dispatch is paused now.")
    in_flight: int = Field(description="Calls still in flight upstream.")
    held: int = Field(description="Calls waiting for resume.")
    drained: bool = Field(description="True when no call is in flight on any live gateway of the store.")
    waited_ms: float = Field(description="Time spent draining.")
    gateways: int = Field(default=1, description="Live gateways on the store counted (this one included): on "
                          "PostgreSQL every gateway honours a pause, and `drained` waits for each of them.")


class GatewayPeer(WireModel):
    """One gateway process on the store, as its last heartbeat reported it."""

    id: str = Field(description="host-pid-random of the process.")
    address: str = Field(description="Where it listens (its public URL).")
    age_s: float = Field(description="Seconds since its last heartbeat (the database's clock).")
    live: bool = Field(description="Its heartbeat is fresher than `fleet_stale_s`: counted by pause and drain.")
    shared: bool = Field(description="It numbers calls in the store (several gateways), not in memory (alone).")
    paused: bool = Field(description="It holds new calls.")
    in_flight: int = Field(description="Its calls in flight upstream.")
    held: int = Field(description="Its calls held by the pause.")


class GatewayState(WireModel):
    """Control-plane view of the gateway."""

    paused: bool = Field(description="Whether dispatch is paused (on every gateway of the store).")
    in_flight: int = Field(description="Calls in flight upstream, on every live gateway of the store.")
    held: int = Field(description="Calls held by a pause, on every live gateway of the store.")
    models: list[ModelRecord] = Field(description="Registered endpoints.")
    paused_s: float = Field(default=0.0, description="Seconds the store's gateways have spent paused (the current "
                            "pause included; kept in the store, the same on every gateway): controllers extend their "
                            "harnesses' time limits by its growth.")
    gateways: list[GatewayPeer] = Field(default_factory=list, description="Every gateway on the store (PostgreSQL; "
                                        "this one alone on SQLite), live or not yet forgotten.")
