"""The multistep recipe: tasks, the conversation with compaction, samples per rollout varying, the grader."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from controller.recipe import GradeInput
from controller.recipes import get_recipe
from recipes.multistep.conversation import compacts_after, contexts, next_messages, summary
from recipes.multistep.grader import grade, score_replies
from recipes.multistep.harness import run_episode
from recipes.multistep.tasks import MAX_PARTS, MIN_PARTS, STEP_KINDS, generate
from tests.recipes.support import call_record
from trainer.samples import RecordedCall, build_samples


class ToyChat:
    """An OpenAI-shaped client that renders each call's messages into word-level token IDs, ChatML-like (every
    message as [start, role, words..., end], then [start, assistant]), and answers from a list of replies: so a
    call that extends the previous context has the previous prompt + response as a token prefix."""

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.vocab, self.recorded = list(replies), {}, []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def ids(self, words: list[str]) -> tuple[int, ...]:
        return tuple(self.vocab.setdefault(word, len(self.vocab)) for word in words)

    def create(self, *, model, messages, max_tokens, temperature):
        prompt = []
        for message in messages:
            prompt += ["<s>", message["role"], *message["content"].split(), "</s>"]
        reply = self.replies.pop(0)
        prompt_ids, reply_ids = self.ids([*prompt, "<s>", "assistant"]), self.ids([*reply.split(), "</s>"])
        self.recorded.append((prompt_ids, reply_ids))
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=reply))],
                               usage=SimpleNamespace(completion_tokens=len(reply_ids)))


def recorded_calls(rollout_id: str, chat: ToyChat) -> list[RecordedCall]:
    return [RecordedCall(rollout_id=rollout_id, group_id="g", seq=seq, prompt_token_ids=prompt,
                         response_token_ids=response, response_logprobs=tuple(-0.5 for _ in response),
                         policy_version=0, ok=True, finish_reason="stop")
            for seq, (prompt, response) in enumerate(chat.recorded)]


def test_generate_is_seeded_with_varying_part_counts_and_known_kinds():
    tasks = generate(40, seed=3)
    assert tasks == generate(40, seed=3) and tasks != generate(40, seed=4)
    assert len({t["id"] for t in tasks}) == 40
    counts = {len(t["steps"]) for t in tasks}
    assert min(counts) == MIN_PARTS and max(counts) == MAX_PARTS
    assert all(step["instruction"]["kind"] in STEP_KINDS for t in tasks for step in t["steps"])


def test_generate_refuses_bad_arguments():
    with pytest.raises(ValueError, match="count"):
        generate(-1, 0)
    with pytest.raises(ValueError, match="compact_above_tokens"):
        generate(1, 0, compact_above_tokens=0)


@pytest.mark.parametrize(("budget", "reply_tokens", "compacts"), [
    (40, 0, False), (40, 39, False), (40, 40, False), (40, 41, True), (5, 6, True)])
def test_compaction_happens_once_the_replies_since_the_last_one_passed_the_budget(budget, reply_tokens, compacts):
    assert compacts_after({"compact_above_tokens": budget}, reply_tokens) is compacts


@pytest.mark.parametrize(("completion_tokens", "expected"), [
    ([], 1), ([50], 1),  # the last reply compacts nothing
    ([20, 20, 20], 1), ([20, 21, 20], 2), ([41, 1, 41, 1], 3), ([41, 41, 41], 3), ([10] * 5, 1), ([10] * 6, 2)])
def test_contexts_count_the_compactions_the_reply_lengths_cause(completion_tokens, expected):
    assert contexts(completion_tokens, {"compact_above_tokens": 40}) == expected


def test_compaction_replaces_the_history_with_notes():
    task = {**generate(1, 0)[0], "compact_above_tokens": 40}
    task["steps"] = task["steps"][:1] * 5
    first = next_messages(task, [], [])
    second = next_messages(task, first, ["one two"], reply_tokens=40)
    assert second[: len(first)] == first and second[-2] == {"role": "assistant", "content": "one two"}
    third = next_messages(task, second, ["one two", "a b c d e f g h i j"], reply_tokens=41)
    assert len(third) == 1 and "part 1: one two; part 2: a b c d e f g h ..." in third[0]["content"]
    assert summary(["", "x"]) == "part 1: (empty); part 2: x"


def test_samples_per_rollout_follow_the_policys_reply_lengths_within_a_group():
    """Rollouts of ONE task split differently when the policy's replies differ in length: short replies keep the
    context under the budget (one sample), long ones pass it (a sample per compaction)."""
    task = {**generate(1, seed=5)[0], "compact_above_tokens": 10}
    task["steps"] = task["steps"][:1] * 4
    per_rollout = []
    for words in (1, 5, 30):
        chat = ToyChat([" ".join(["word"] * words)] * 4)
        assert len(run_episode(chat, task)) == 4
        built = build_samples(recorded_calls(f"r{words}", chat))
        assert len(built.samples) == contexts([len(reply) for _, reply in chat.recorded], task)
        per_rollout.append(len(built.samples))
    assert per_rollout[0] < per_rollout[-1] and len(set(per_rollout)) >= 2


@pytest.mark.parametrize(("replies", "reward", "followed"), [
    (["all lowercase here", "NO COMMAS, OOPS"], 0.5, [True, False]),
    (["all lowercase here", "NO COMMAS OK"], 1.0, [True, True]),
    (["Capital Start", "NO COMMAS OK"], 0.5, [False, True]),
    (["all lowercase here"], 0.5, [True, False]),  # the harness stopped: the missing part scores 0
    (["   ", "fine"], 0.5, [False, True]),  # an empty reply scores 0 (it trivially has no commas)
    ([], 0.0, [False, False]),
])
def test_score_replies_table(replies, reward, followed):
    steps = [{"request": "r", "instruction": {"kind": "change_case:english_lowercase", "params": {}}},
             {"request": "r", "instruction": {"kind": "punctuation:no_comma", "params": {}}}]
    verdict = score_replies(replies, steps)
    assert verdict.reward == reward
    assert [part["followed"] for part in verdict.details["parts"]] == followed


def test_grade_reads_the_recorded_calls_in_order_and_skips_failed_ones(tmp_path):
    task = {"id": "t", "steps": [
        {"request": "r", "instruction": {"kind": "startend:quotation", "params": {}}},
        {"request": "r", "instruction": {"kind": "length_constraints:number_words",
                                         "params": {"relation": "less than", "num_words": 3}}}]}
    calls = [call_record(0, '"quoted"'), call_record(1, None, status="error"), call_record(2, "two words")]
    verdict = grade(GradeInput(task=task, workdir=tmp_path, calls=calls, exit_code=0))
    assert verdict.reward == 1.0 and verdict.details["replies"] == 2
    assert get_recipe("multistep").grade(GradeInput(task=task, workdir=tmp_path, calls=calls[:1],
                                                    exit_code=0)).reward == 0.5
    side = call_record(1, "two words").model_copy(update={"side": True})  # a side call cannot fill in a part
    assert grade(GradeInput(task=task, workdir=tmp_path, calls=[calls[0], side], exit_code=0)).reward == 0.5


def test_score_replies_refuses_a_task_without_parts():
    with pytest.raises(ValueError, match="at least one part"):
        score_replies(["x"], [])
