"""The tracking Prefect task: trajectories logged as artifacts (trackers are not serialisable: no cache, no result)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from tracking import trajectories

log_trajectories = task(cache_policy=NO_CACHE, persist_result=False)(
    trajectories.log_trajectories)
