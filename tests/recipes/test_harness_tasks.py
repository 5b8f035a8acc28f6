"""A built-in recipe's task file holds no grader-only field (the policy reads every file of its sandbox): the
calculator's answer and search's gold answers and evidence stay in the rollout's input, for the grader only."""

from __future__ import annotations

import pytest

from controller.attempt import harness_task
from controller.recipe import GradeInput
from recipes.calculator.recipe import RECIPE as CALCULATOR
from recipes.search.recipe import RECIPE as SEARCH
from tests.trainer.loop_support import call


@pytest.mark.parametrize(("recipe", "hidden", "kept", "reply"), [
    (CALCULATOR, {"answer"}, {"id", "question", "max_turns"}, "The answer is {}."),
    (SEARCH, {"answers", "evidence"}, {"id", "question", "corpus_seed", "max_turns", "top_k"}, "<answer>{}</answer>"),
])
def test_the_harness_task_leaves_out_the_answer_and_the_grader_still_has_it(recipe, hidden, kept, reply, tmp_path):
    for task in recipe.generate(4, seed=3):
        visible = harness_task(recipe, task)
        assert hidden <= set(task) and not hidden & set(visible) and kept <= set(visible)
        assert visible == {key: value for key, value in task.items() if key not in hidden}
    task = recipe.generate(1, seed=3)[0]
    gold = str(task.get("answer", (task.get("answers") or [""])[0]))
    graded = GradeInput(task=task, workdir=tmp_path, calls=[call("r", 0, response_text=reply.format(gold))],
                        exit_code=0)
    assert recipe.grade(graded).reward == 1.0  # graded from the whole task


def test_a_recipe_without_the_hook_gives_the_harness_the_whole_task():
    class Plain:
        name = "plain"

    assert harness_task(Plain(), {"id": "t", "prompt": "p"}) == {"id": "t", "prompt": "p"}

    class Broken:
        name = "broken"

        def harness_task(self, task):
            return ["not", "a", "dict"]

    with pytest.raises(TypeError, match="harness_task\\(\\) must return a dict"):
        harness_task(Broken(), {"id": "t"})
