"""The tracking Prefect tasks: trajectories logged as artifacts, rollouts logged as MLflow traces (trackers are not
serialisable: no cache, no result)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from tracking import rollout_traces, trajectories

log_trajectories = task(cache_policy=NO_CACHE, persist_result=False)(
    trajectories.log_trajectories)
log_rollout_traces = task(name="log-rollout-traces", cache_policy=NO_CACHE, persist_result=False)(
    rollout_traces.log_rollout_traces)
