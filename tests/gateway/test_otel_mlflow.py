"""MLflow's own OTLP endpoint as the gateway's collector: the gateway, configured only by the standard OTEL_*
settings (`/v1/traces` of a real `mlflow server`, `x-mlflow-experiment-id` as an exporter header), exports its call
spans and MLflow stores them as traces of that experiment with the rollout's attributes. Slow: starts MLflow."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from mlflow import MlflowClient

from gateway.client import GatewayClient
from tests.gateway.api_support import chat, create_rollouts
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway
from tests.services import MlflowServerProcess

pytestmark = pytest.mark.slow
CALLS = 3


@pytest.fixture
def mlflow_otlp(mlflow_server: MlflowServerProcess):
    """The session's MLflow server and a new experiment on it: (tracking URI, experiment id)."""
    experiment_id = MlflowClient(mlflow_server.url).create_experiment(f"gateway-otlp-{uuid.uuid4().hex[:8]}")
    return mlflow_server.url, experiment_id


def test_spans_arrive_in_mlflow_as_traces_of_the_rollout(tmp_path, mlflow_otlp, scripted):
    url, experiment_id = mlflow_otlp
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{url}/v1/traces")
        patch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"x-mlflow-experiment-id={experiment_id}")
        patch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        gateway = InProcessGateway(tmp_path / "store.db").start()
    try:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", scripted.base_url, version=3)
            (created,) = create_rollouts(admin)
            for _ in range(CALLS):
                answer = httpx.post(created.base_url + "/chat/completions", json=chat(), timeout=30,
                                    headers={"authorization": f"Bearer {created.api_key}"})
                assert answer.status_code == 200
            recorded = admin.calls(created.id)
    finally:
        gateway.stop()  # the context's close flushes the batch processor
    spans = _spans_in(MlflowClient(url), experiment_id, CALLS)
    by_seq = {span.attributes["harnessrl.call.seq"]: span for span in spans}
    assert sorted(by_seq) == [call.seq for call in recorded] == list(range(CALLS))
    for call in recorded:
        attributes = by_seq[call.seq].attributes
        assert by_seq[call.seq].name == "chat policy"
        assert attributes["harnessrl.rollout.id"] == created.id
        assert attributes["harnessrl.rollout.attempt"] == call.attempt
        assert attributes["gen_ai.request.model"] == call.model
        assert attributes["gen_ai.usage.input_tokens"] == len(call.prompt_token_ids)
        assert attributes["gen_ai.usage.output_tokens"] == len(call.response_token_ids)
        assert attributes["harnessrl.policy.version"] == call.policy_version


def _spans_in(client: MlflowClient, experiment_id: str, count: int, timeout_s: float = 30.0) -> list:
    """The spans of the experiment's traces once `count` have been stored (MLflow writes an export on arrival)."""
    deadline = time.monotonic() + timeout_s
    while True:
        traces = client.search_traces(locations=[experiment_id])
        spans = [span for trace in traces for span in trace.data.spans]
        if len(spans) >= count or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(spans) == count, f"expected {count} spans in experiment {experiment_id}, got {len(spans)}"
    return spans
