"""Instruction-following tasks (deterministic, varied, compatible) and the grader (rewards in [0, 1], details)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.recipe import GradeInput
from controller.recipes import get_recipe
from recipes.instruction_following.grader import grade, score_text
from recipes.instruction_following.instructions import CONFLICTS, KINDS, kind_of
from recipes.instruction_following.tasks import MAX_INSTRUCTIONS, TOPICS, generate
from tests.recipes.support import call_record

TASKS = generate(400, seed=0)


def test_same_seed_same_tasks_other_seed_other_tasks():
    assert generate(50, seed=3) == generate(50, seed=3)
    assert generate(50, seed=3) != generate(50, seed=4)
    assert generate(10, seed=3) == generate(50, seed=3)[:10]


def test_ids_are_unique_and_instruction_counts_vary():
    assert len({task["id"] for task in TASKS}) == len(TASKS)
    counts = Counter(len(task["instructions"]) for task in TASKS)
    assert set(counts) == set(range(1, MAX_INSTRUCTIONS + 1))


def test_every_kind_and_topic_appears():
    kinds = {item["kind"] for task in TASKS for item in task["instructions"]}
    assert kinds == {kind.name for kind in KINDS}
    assert {task["topic"] for task in TASKS} == {topic for topic, _ in TOPICS}


def test_instructions_of_a_task_are_compatible():
    for task in TASKS:
        names = [item["kind"] for item in task["instructions"]]
        families = [kind_of(name).family for name in names]
        assert len(set(families)) == len(families), task
        assert not any(frozenset((a, b)) in CONFLICTS for a in names for b in names if a != b), task


def test_prompt_holds_the_request_and_each_description():
    for task in TASKS[:50]:
        assert task["prompt"].startswith(task["request"])
        for item in task["instructions"]:
            assert kind_of(item["kind"]).describe(item["params"]) in task["prompt"]


def test_keyword_instructions_use_the_topics_keywords():
    keywords = dict(TOPICS)
    for task in TASKS:
        for item in task["instructions"]:
            if item["kind"] == "keywords:existence":
                assert set(item["params"]["keywords"]) <= set(keywords[task["topic"]])


@pytest.mark.parametrize(("text", "reward"), [
    ("<<tea>>\nall lowercase, with commas.", 2 / 3),
    ("<<tea>>\nall lowercase without commas.", 1.0),
    ("NOTHING FOLLOWED, AT ALL.", 0.0),
    ("   ", 0.0),
])
def test_reward_is_the_fraction_followed(text, reward):
    instructions = [{"kind": "detectable_format:title", "params": {}},
                    {"kind": "change_case:english_lowercase", "params": {}},
                    {"kind": "punctuation:no_comma", "params": {}}]
    graded = score_text(text, instructions)
    assert graded.reward == pytest.approx(reward)
    assert [verdict["kind"] for verdict in graded.details["instructions"]] == [i["kind"] for i in instructions]


def test_empty_response_scores_zero_even_where_checks_pass():
    graded = score_text("", [{"kind": "punctuation:no_comma", "params": {}}])
    assert graded.reward == 0.0 and graded.details["reason"] == "empty response"


@settings(max_examples=200, deadline=None)
@given(task_index=st.integers(0, len(TASKS) - 1), text=st.text(max_size=400))
def test_reward_is_in_unit_interval(task_index, text):
    graded = score_text(text, TASKS[task_index]["instructions"])
    assert 0.0 <= graded.reward <= 1.0
    assert len(graded.details["instructions"]) == len(TASKS[task_index]["instructions"])


def test_grade_scores_the_last_successful_call(tmp_path: Path):
    task = {"instructions": [{"kind": "change_case:english_lowercase", "params": {}}]}
    calls = [call_record(0, "lowercase"), call_record(1, None, status="error")]
    assert grade(GradeInput(task=task, workdir=tmp_path, calls=calls, exit_code=0)).reward == 1.0
    assert grade(GradeInput(task=task, workdir=tmp_path, calls=[], exit_code=1)).reward == 0.0


def test_recipe_is_registered_and_generates_through_the_seam():
    recipe = get_recipe("instruction_following")
    assert recipe.name == "instruction_following"
    assert recipe.generate(5, 1) == generate(5, 1)
    assert recipe.harness_command()[-2:] == ["-m", "recipes.instruction_following.harness"]


@pytest.mark.parametrize(("instructions", "text"), [
    ([("change_case:english_capital", {}), ("startend:start_phrase", {"phrase": "In short"}),
      ("detectable_format:multiple_sections", {"section_splitter": "Section", "num_sections": 2})],
     "IN SHORT: YES.\nSECTION 1\nTEA.\nSECTION 2\nMORE TEA."),
    ([("detectable_format:json_format", {}), ("change_case:english_lowercase", {}),
      ("detectable_content:number_placeholders", {"num_placeholders": 1})],
     '```json\n{"letter": "dear [name] the tea is ready"}\n```'),
    ([("startend:quotation", {}), ("detectable_format:title", {}),
      ("detectable_format:number_bullet_lists", {"num_bullets": 2})],
     '"<<tea>>\n* leaves\n* water"'),
    ([("detectable_content:postscript", {"postscript_marker": "P.S."}), ("punctuation:no_comma", {}),
      ("length_constraints:number_paragraphs", {"num_paragraphs": 2})],
     "first part\n***\nsecond part\np.s. bye"),
])
def test_compatible_instructions_can_all_be_followed(instructions, text):
    names = [name for name, _ in instructions]
    assert not any(frozenset((a, b)) in CONFLICTS for a in names for b in names if a != b)
    graded = score_text(text, [{"kind": name, "params": params} for name, params in instructions])
    assert graded.reward == 1.0, graded.details
