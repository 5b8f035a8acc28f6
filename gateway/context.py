"""The objects one gateway process shares between its routes, built at start-up inside the event loop."""

from __future__ import annotations

import os
from dataclasses import dataclass

from gateway.artifact_reads import ArtifactReads
from gateway.auth import Authenticator
from gateway.config import GatewayConfig
from gateway.fleet import Fleet
from gateway.pause import PauseGate
from gateway.request_bytes import RequestBytes
from gateway.routing import Router
from gateway.store import SqlStore
from gateway.store_roles import (
    AdminStore,
    ArtifactStore,
    FeedStore,
    HistoryStore,
    LeaseStore,
    RecorderStore,
    Store,
)
from gateway.telemetry import CallTelemetry, from_environment
from gateway.upstream import RetryPolicy, Upstream


@dataclass
class GatewayContext:
    """Store, credentials, routing, pause gate, upstream client, artifact reads, (optional) call telemetry and place
    among the store's gateways of one gateway."""

    config: GatewayConfig
    store: Store
    auth: Authenticator
    router: Router
    gate: PauseGate
    upstream: Upstream
    artifact_reads: ArtifactReads  # the harnesses' artifact reads in flight: one a rollout, bounded bytes in all
    request_bytes: RequestBytes  # the harnesses' request bodies in flight: bounded per rollout and in all
    telemetry: CallTelemetry | None = None  # OpenTelemetry span export, when the OTEL_* settings ask for it
    fleet: Fleet | None = None  # this gateway among the store's gateways: the shared pause, heartbeats

    # The store as each role's module sees it (`gateway.store_roles`): a module calls only its role's methods.
    @property
    def recorder_store(self) -> RecorderStore:
        """The harness-facing routes' store."""
        return self.store

    @property
    def history_store(self) -> HistoryStore:
        """The store of an attempt's earlier calls, as a continued call reads it."""
        return self.store

    @property
    def admin_store(self) -> AdminStore:
        """The store of endpoints and the key secret."""
        return self.store

    @property
    def lease_store(self) -> LeaseStore:
        """The store as a controller's requests reach it."""
        return self.store

    @property
    def artifact_store(self) -> ArtifactStore:
        """The store of artifacts, as the harness's and the controller's artifact routes reach it."""
        return self.store

    @property
    def feed_store(self) -> FeedStore:
        """The store as the trainer's feed's requests reach it."""
        return self.store

    async def reload_models(self) -> None:
        """Refresh the router from the store after a model change (and wake the store's other gateways to do so)."""
        self.router.load(await self.admin_store.list_models())
        if self.fleet is not None:
            await self.fleet.notify()

    async def close(self) -> None:
        """Leave the store's gateways, release the upstream pool and flush the store."""
        if self.fleet is not None:
            await self.fleet.stop()
        await self.upstream.close()
        self.store.close()
        if self.telemetry is not None:
            self.telemetry.close()


async def open_context(config: GatewayConfig) -> GatewayContext:
    """Open the store and build everything else (call inside the server's event loop)."""
    admin_token = config.admin_token or os.environ.get("HARNESSRL_ADMIN_TOKEN", "")
    if not admin_token:
        raise SystemExit("no admin token: set HARNESSRL_ADMIN_TOKEN (or admin_token in the gateway config)")
    store = SqlStore(config.db_url, sqlite_synchronous=config.sqlite_synchronous,
                     cache_rollouts=config.cache_rollouts, lock_wait_s=config.store_lock_wait_s)
    grader_token = config.grader_token or os.environ.get("HARNESSRL_GRADER_TOKEN") or None
    auth = Authenticator(admin_token, grader_token, await store.secret())
    retry = RetryPolicy(config.retry_attempts, config.retry_backoff_s, config.retry_budget_s)
    context = GatewayContext(config=config, store=store, auth=auth, router=Router(
        aliases=config.model_aliases, default_model=config.default_model), gate=PauseGate(
        config.pause_hold_timeout_s), upstream=Upstream(config.upstream_timeout_s, retry),
        artifact_reads=ArtifactReads(config.artifact_read_bytes_in_flight, config.max_body_bytes),
        request_bytes=RequestBytes(config.max_request_bytes_in_flight_per_rollout, config.max_request_bytes_in_flight),
        telemetry=from_environment())
    await context.reload_models()
    try:
        context.fleet = Fleet(config, store, context.gate, context.router)
        await context.fleet.start()
    except BaseException:
        await context.close()
        raise
    return context
