"""collocated_update: the order of pause, sleep, train, save, refit, wake, version, resume; recovery on failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.records import PauseResult
from trainer.collocation import collocated_update, publish_weights


class Recorder:
    def __init__(self) -> None:
        self.log: list[str] = []


class FakeGateway:
    def __init__(self, rec: Recorder) -> None:
        self.rec = rec

    def pause(self, timeout_s=None):
        self.rec.log.append(f"pause({timeout_s})")
        return PauseResult(paused=True, in_flight=0, held=0, drained=True, waited_ms=0.0)

    def resume(self):
        self.rec.log.append("resume")
        return PauseResult(paused=False, in_flight=0, held=3, drained=True, waited_ms=0.0)

    def set_model_version(self, name, version):
        self.rec.log.append(f"version({name},{version})")
        return []


class FakeEngine:
    def __init__(self, rec: Recorder, loads_asleep: bool, fail_on: str | None = None) -> None:
        self.rec, self.loads_weights_asleep, self.fail_on = rec, loads_asleep, fail_on

    def _do(self, what: str) -> None:
        self.rec.log.append(what)
        if what.split("(")[0] == self.fail_on:
            raise RuntimeError(f"{what} failed")

    def sleep(self):
        self._do("sleep")

    def wake_up(self):
        self._do("wake_up")

    def update_weights(self, path, version):
        self._do(f"update_weights({Path(path).name},{version})")


class FakeBackend:
    def __init__(self, rec: Recorder, fail: bool = False) -> None:
        self.rec, self.fail, self.policy_version = rec, fail, 4

    def train_step(self, batch):
        self.rec.log.append("train")
        if self.fail:
            raise FloatingPointError("nan")
        self.policy_version += 1
        return {"loss/total": 0.5}

    def save_checkpoint(self, directory):
        self.rec.log.append("save")
        return Path(directory) / "step-000005", self.policy_version


def run(rec, engine, backend, tmp_path):
    return collocated_update(FakeGateway(rec), engine, backend, object(), tmp_path, "policy", drain_timeout_s=7.0)


def test_embedded_order_loads_weights_while_asleep_then_wakes(tmp_path):
    rec = Recorder()
    result = run(rec, FakeEngine(rec, loads_asleep=True), FakeBackend(rec), tmp_path)
    assert rec.log == ["pause(7.0)", "sleep", "train", "save", "update_weights(step-000005,5)", "wake_up",
                       "version(policy,5)", "resume"]
    assert result.policy_version == 5 and result.metrics == {"loss/total": 0.5} and result.held_calls == 3
    timings = result.timing_metrics()
    assert set(timings) == {"time/drain_s", "time/update_s", "time/checkpoint_s", "time/weight_sync_s",
                            "gateway/held_calls_at_resume"} and all(v >= 0 for v in timings.values())


def test_vllm_order_wakes_before_reloading(tmp_path):
    rec = Recorder()
    run(rec, FakeEngine(rec, loads_asleep=False), FakeBackend(rec), tmp_path)
    assert rec.log[4:6] == ["wake_up", "update_weights(step-000005,5)"]


def test_a_failed_train_step_wakes_the_engine_and_resumes_the_gateway(tmp_path):
    rec = Recorder()
    with pytest.raises(FloatingPointError):
        run(rec, FakeEngine(rec, loads_asleep=True), FakeBackend(rec, fail=True), tmp_path)
    assert rec.log == ["pause(7.0)", "sleep", "train", "wake_up", "resume"]


def test_a_failed_refit_still_resumes_and_reports_the_refit_error(tmp_path):
    rec = Recorder()
    with pytest.raises(RuntimeError, match="update_weights"):
        run(rec, FakeEngine(rec, loads_asleep=False, fail_on="update_weights"), FakeBackend(rec), tmp_path)
    assert rec.log[-1] == "resume" and "version(policy,5)" not in rec.log


def test_publish_weights_without_the_capability_attribute_wakes_first():
    rec = Recorder()
    engine = FakeEngine(rec, loads_asleep=False)
    del engine.loads_weights_asleep
    publish_weights(engine, Path("/x/step-1"), 1)
    assert rec.log == ["wake_up", "update_weights(step-1,1)"]
