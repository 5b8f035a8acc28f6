"""Routes that manage the weights for collocated training: health, sleep, wake-up and update_weights."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from engines.serving.model_holder import WeightsError
from engines.serving.openai_api import json_response
from engines.serving.prefix_cache import PrefixCache
from engines.serving.protocol import RequestError, UpdateWeightsRequest
from engines.serving.state import EngineState, engine_state

router = APIRouter()


def health_body(state: EngineState) -> dict[str, object]:
    """{status, policy_version, asleep, model, dtype, running_rows, tool_call_parse_failures, logprobs_mode,
    prefix_cache} as /health reports it (`dtype`: the served weights'; `logprobs_mode`: processed or raw, which
    distribution the reported logprobs are of;
    `prefix_cache`: its budget, holdings and counters, engines.serving.prefix_cache)."""
    holder = state.holder
    return {"status": "asleep" if holder.asleep else "ok", "policy_version": holder.policy_version,
            "asleep": holder.asleep, "model": state.served_model_name,
            "dtype": str(holder.dtype).removeprefix("torch."), "running_rows": state.scheduler.running_rows,
            "tool_call_parse_failures": state.tool_call_parse_failures,
            "logprobs_mode": state.scheduler.logprobs_mode,
            "prefix_cache": prefix_cache_body(state.scheduler.prefix_cache)}


def prefix_cache_body(cache: PrefixCache) -> dict[str, int]:
    """The prefix cache's budget, holdings and counters."""
    return {"max_tokens": cache.max_tokens, "entries": len(cache), "cached_tokens": cache.cached_tokens,
            **dataclasses.asdict(cache.stats)}


@router.get("/health")
async def health(state: EngineState = Depends(engine_state)) -> Response:
    """Liveness and weight state."""
    return json_response(health_body(state), state.holder.policy_version)


@router.get("/is_sleeping")
async def is_sleeping(state: EngineState = Depends(engine_state)) -> Response:
    """vLLM's sleep probe."""
    return json_response({"is_sleeping": state.holder.asleep}, state.holder.policy_version)


@router.post("/sleep")
async def sleep(state: EngineState = Depends(engine_state)) -> Response:
    """Waits for in-flight generation, then releases the weights; new requests queue until /wake_up."""
    holder = state.holder
    await asyncio.wrap_future(state.scheduler.control(lambda: None if holder.asleep else holder.release()))
    return json_response(health_body(state), holder.policy_version)


@router.post("/wake_up")
async def wake_up(state: EngineState = Depends(engine_state)) -> Response:
    """Reloads the weights (the latest update's, if one arrived while asleep) and resumes serving."""
    holder = state.holder
    await asyncio.wrap_future(state.scheduler.control(lambda: holder.load() if holder.asleep else None))
    return json_response(health_body(state), holder.policy_version)


@router.post("/update_weights")
async def update_weights(body: UpdateWeightsRequest, state: EngineState = Depends(engine_state)) -> Response:
    """Loads a checkpoint between batches and sets the policy version (applied at wake-up while asleep)."""
    path = Path(body.path).expanduser()
    if not path.is_dir():
        raise RequestError(f"update_weights path {body.path!r} is not a directory on the engine's machine",
                           param="path")
    holder = state.holder
    try:
        applied = state.scheduler.control(lambda: holder.update(path.resolve(), body.version))
        await asyncio.wrap_future(applied)
    except (WeightsError, OSError, ValueError) as exc:
        raise RequestError(f"cannot load weights from {body.path!r}: {exc}", param="path") from exc
    return json_response(health_body(state), holder.policy_version)
