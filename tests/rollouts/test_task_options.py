"""data.generator and rollout.task_overrides are checked against the recipe's own models (`rollouts.task_options`)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict

from flows.config import load_run_config
from rollouts.recipe import recipe_hooks
from rollouts.registry import get_recipe
from rollouts.task_options import NoGeneratorOptions, TaskOverrides, validated_options

BUILT_IN = ["calculator", "instruction_following", "multistep", "search", "swe", "swe_bench", "claude-code", "codex"]


@pytest.mark.parametrize("name", BUILT_IN)
def test_a_built_in_recipe_lists_the_task_fields_its_harness_reads_and_no_others(name: str) -> None:
    hooks = recipe_hooks(get_recipe(name))
    assert hooks.task_fields.model_config.get("extra") == "forbid"
    assert {"harness_timeout_s", "max_tokens"} <= set(hooks.task_fields.model_fields)
    with pytest.raises(ValueError, match=rf"rollout.task_overrides.max_tokns: not an option of this recipe \(recipe "
                                         rf"'{name}' takes .*max_tokens.*\); remove it"):
        validated_options(hooks.task_fields, {"max_tokns": 8}, "rollout.task_overrides", name)


def test_a_recipe_without_the_hooks_takes_no_generator_options_and_any_task_field() -> None:
    class Plain:
        name = "plain"

    hooks = recipe_hooks(Plain())
    assert (hooks.generator_options, hooks.task_fields) == (NoGeneratorOptions, TaskOverrides)
    assert validated_options(TaskOverrides, {"max_tokens": 8, "my_field": [1]}, "k", "plain") == {
        "max_tokens": 8, "my_field": [1]}
    with pytest.raises(ValueError, match=r"k.max_tokens: Input should be greater than or equal to 1 \(got 0\)"):
        validated_options(TaskOverrides, {"max_tokens": 0}, "k", "plain")
    with pytest.raises(ValueError, match=r"data.generator.levels: not an option of this recipe \(recipe 'plain' takes "
                                         r"none\); remove it"):
        validated_options(NoGeneratorOptions, {"levels": {0: 1.0}}, "data.generator", "plain")


def test_a_recipe_brings_its_own_generator_options() -> None:
    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid")
        difficulty: int = 1

    class Own:
        generator_options = Options

    assert validated_options(recipe_hooks(Own()).generator_options, {"difficulty": 3}, "g", "own") == {"difficulty": 3}


def test_values_are_kept_as_given_unless_coerced() -> None:
    """An int where the model says float stays an int (a data manifest hashes it); a string key becomes the int."""
    swe = recipe_hooks(get_recipe("swe"))
    assert validated_options(swe.task_fields, {"command_timeout_s": 20}, "k", "swe") == {"command_timeout_s": 20}
    assert validated_options(swe.generator_options, {"levels": {"0": 1}}, "g", "swe") == {"levels": {0: 1.0}}


def test_the_run_config_names_every_bad_key_and_value() -> None:
    with pytest.raises(ValueError) as refused:
        load_run_config("swe-local", {"rollout.task_overrides.harness_config": "nope", "data.generator": {"level": 1}})
    message = str(refused.value)
    assert "data.generator.level: not an option of this recipe (recipe 'swe' takes levels); remove it" in message
    assert ("rollout.task_overrides.harness_config: Value error, 'nope' is not a SWE harness configuration; use one "
            "of [") in message


def test_the_profiles_task_overrides_pass_their_recipes_checks() -> None:
    config = load_run_config("swe-local")
    assert config.rollout.task_overrides == {"harness_config": "one_command", "step_limit": 1, "max_tokens": 64,
                                             "temperature": 0.35, "command_timeout_s": 20}
    assert config.data.generator == {"levels": {0: 0.75, 3: 0.25}}
