"""Counts from building samples: calls skipped (failed, empty, side calls), truncated, merged, split by sampling
parameters, extra choices, merge failures by class, tokens masked, tokens."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.merge_failures import MERGE_FAILURE_KINDS


@dataclass(frozen=True)
class SampleStats:
    """Counts from one `build_samples` run."""

    rollouts: int
    """Rollouts with at least one recorded call."""
    samples: int
    """Samples built."""
    samples_per_rollout_max: int
    """Most samples any rollout produced."""
    single_sample_rollouts: int
    """Rollouts that stayed exactly one sample."""
    rollouts_with_samples: int
    """Rollouts that produced at least one sample."""
    calls: int
    """Calls seen."""
    calls_merged: int
    """Calls that extended an open sample."""
    calls_recorded_tokens: int
    """Calls the gateway prompted with an earlier call's recorded prompt and answer tokens in place of the history
    the harness re-sent (gateway config `recorded_turns`; `CallRecord.recorded_prefix` > 0)."""
    calls_failed: int
    """Calls skipped because they failed (ok=False)."""
    calls_empty: int
    """Calls skipped because their response was empty."""
    calls_side_skipped: int
    """Side calls skipped (SampleLimits.side_calls = skip)."""
    extra_choices_included: int
    """Choices after the first of `n` > 1 answers made samples of their own."""
    extra_choices_skipped: int
    """Choices after the first left out (SampleLimits.extra_choices = skip, or an empty response)."""
    prompts_truncated: int
    """Prompts cut to their last max_prompt_tokens (such a call starts a new sample)."""
    prompts_dropped: int
    """Calls skipped for a too-long prompt."""
    responses_truncated: int
    """Responses cut to their first max_response_tokens."""
    responses_dropped: int
    """Calls skipped for a too-long response."""
    logprobs_missing: int
    """Trainable tokens masked because the engine recorded no (finite) logprob for them."""
    calls_length_masked: int
    """Responses that finished for length, masked (SampleLimits.length_calls = mask)."""
    greedy_tokens_masked: int
    """Trainable tokens masked because their call decoded greedily (temperature 0: no distribution to train)."""
    penalized_tokens_masked: int
    """Trainable tokens masked because the harness's penalties or logit bias shaped their distribution."""
    calls_sampling_split: int
    """Calls that opened a new sample because the branch their prompt extends was sampled with other parameters."""
    merge_failures_retokenization: int
    """New samples opened because the IDs differ although the text is a prefix."""
    merge_failures_template: int
    """New samples opened because the conversation was rendered differently."""
    merge_failures_other: int
    """New samples opened for any other reason (or without a decoder). With a decoder: a prompt that does not even
    start with the text of an open sample's first prompt, a new context, which is also what a harness's intended
    splits are (a compaction that rewrote the history, a subagent): the multistep recipe's compactions all count
    here."""
    tokens: int
    """Tokens in all samples."""
    trainable_tokens: int
    """Tokens with loss mask 1 in all samples."""

    @property
    def merge_failures(self) -> int:
        """New samples opened after a rollout's first, all classes together: intended splits such as compactions
        included (class other), so not an error count; the merges that failed although the conversation went on
        are the retokenization and template classes."""
        return self.merge_failures_retokenization + self.merge_failures_template + self.merge_failures_other

    def as_metrics(self) -> dict[str, float]:
        """Flat metrics, including samples per rollout (mean: samples over the rollouts passed in that have at least
        one sample; in a training step every rollout of the batch's groups, zero advantage included) and the
        one-sample share."""
        with_samples = max(self.rollouts_with_samples, 1)
        metrics = {f"samples/{name}": float(value) for name, value in vars(self).items()}
        metrics["samples/merge_failures"] = float(self.merge_failures)
        metrics["samples/samples_per_rollout_mean"] = self.samples / with_samples
        metrics["samples/single_sample_rollout_share"] = self.single_sample_rollouts / with_samples
        metrics["samples/recorded_tokens_call_share"] = self.calls_recorded_tokens / max(self.calls, 1)
        return metrics


@dataclass
class SampleCounters:
    """Mutable counts while building samples; `freeze` turns them into SampleStats."""

    calls: int = 0
    """Calls seen."""
    calls_merged: int = 0
    """Calls that extended an open sample."""
    calls_recorded_tokens: int = 0
    """Calls prompted with an earlier call's recorded tokens."""
    calls_failed: int = 0
    """Calls skipped as failed."""
    calls_empty: int = 0
    """Calls skipped for an empty response."""
    calls_side_skipped: int = 0
    """Side calls skipped."""
    extra_choices_included: int = 0
    """Choices after the first made samples."""
    extra_choices_skipped: int = 0
    """Choices after the first left out."""
    prompts_truncated: int = 0
    """Prompts cut from the left."""
    prompts_dropped: int = 0
    """Calls skipped for a too-long prompt."""
    responses_truncated: int = 0
    """Responses cut from the right."""
    responses_dropped: int = 0
    """Calls skipped for a too-long response."""
    logprobs_missing: int = 0
    """Trainable tokens masked for a missing logprob."""
    calls_length_masked: int = 0
    """Responses masked for finishing at their length limit."""
    greedy_tokens_masked: int = 0
    """Trainable tokens masked for greedy decoding."""
    penalized_tokens_masked: int = 0
    """Trainable tokens masked for penalties the trainer does not recompute."""
    calls_sampling_split: int = 0
    """Calls that opened a new sample for other sampling parameters."""
    merge_failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MERGE_FAILURE_KINDS, 0))
    """New samples opened after a rollout's first, by class."""

    def freeze(self, per_rollout: list[int], tokens: int, trainable_tokens: int) -> SampleStats:
        """The final counts, given each rollout's number of samples and the samples' token totals."""
        failures = self.merge_failures
        return SampleStats(
            rollouts=len(per_rollout),
            samples=sum(per_rollout),
            samples_per_rollout_max=max(per_rollout, default=0),
            single_sample_rollouts=sum(1 for n in per_rollout if n == 1),
            rollouts_with_samples=sum(1 for n in per_rollout if n > 0),
            calls=self.calls,
            calls_merged=self.calls_merged,
            calls_recorded_tokens=self.calls_recorded_tokens,
            calls_failed=self.calls_failed,
            calls_empty=self.calls_empty,
            calls_side_skipped=self.calls_side_skipped,
            extra_choices_included=self.extra_choices_included,
            extra_choices_skipped=self.extra_choices_skipped,
            prompts_truncated=self.prompts_truncated,
            prompts_dropped=self.prompts_dropped,
            responses_truncated=self.responses_truncated,
            responses_dropped=self.responses_dropped,
            logprobs_missing=self.logprobs_missing,
            calls_length_masked=self.calls_length_masked,
            greedy_tokens_masked=self.greedy_tokens_masked,
            penalized_tokens_masked=self.penalized_tokens_masked,
            calls_sampling_split=self.calls_sampling_split,
            merge_failures_retokenization=failures["retokenization"],
            merge_failures_template=failures["template"],
            merge_failures_other=failures["other"],
            tokens=tokens,
            trainable_tokens=trainable_tokens,
        )
