"""verl's actor temperature comes from the samples' recorded sampling (skipped without verl; fails if
HARNESSRL_REQUIRE_VERL=1); mixed temperatures and filtering are refused naming the fix."""

from __future__ import annotations

import numpy as np
import pytest

from tests.trainer.verl_support import require_verl

require_verl("verl")
require_verl("tensordict")

from verl.utils import tensordict_utils as tu  # noqa: E402

from trainer.backends.verl import VerlBackendConfig, build_training_input  # noqa: E402
from trainer.backends.verl_batch import samples_from_rows, to_verl_rows  # noqa: E402
from trainer.samples import RecordedCall, build_samples  # noqa: E402
from trainer.sampling import SamplingParams  # noqa: E402
from trainer.scheduling import ScheduleConfig, schedule  # noqa: E402


def rows_sampled_with(*sampling: SamplingParams):
    calls = [RecordedCall(f"r{i}", "g", 0, (1, 2, 3), (4, 5), (-0.2, -0.3), 0, True, "stop", sampling=params)
             for i, params in enumerate(sampling)]
    samples = build_samples(calls).samples
    (update,) = schedule(samples, ScheduleConfig(num_workers=1)).updates
    return samples, to_verl_rows(samples, np.ones(len(samples)), update, dp_size=1, agg_mode="token-mean",
                                 pad_token_id=0)


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.3])
def test_the_meta_temperature_is_the_one_the_samples_were_sampled_at(temperature):
    samples, rows = rows_sampled_with(*[SamplingParams(temperature=temperature)] * 2)
    data = build_training_input(rows, calculate_entropy=False)
    assert tu.get(data, "temperature") == temperature
    assert [s.sampling for s in samples_from_rows(rows)] == [s.sampling for s in samples]


def test_samples_at_two_temperatures_or_filtered_are_refused_with_the_gateway_fix():
    with pytest.raises(ValueError, match=r"temperatures \[0.7, 1.0\].*sampling.train: enforce"):
        rows_sampled_with(SamplingParams(temperature=0.7), SamplingParams())
    with pytest.raises(ValueError, match="top_p=0.9.*sampling.train: enforce"):
        rows_sampled_with(SamplingParams(temperature=0.7, top_p=0.9))


def test_the_removed_config_temperature_is_refused_naming_the_fix():
    with pytest.raises(ValueError, match="backend.verl.temperature.*sampling.temperature"):
        VerlBackendConfig(model_path="m", temperature=0.7)
