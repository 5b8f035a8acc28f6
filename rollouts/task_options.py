"""The typed options a run gives a recipe: `data.generator` (keyword options of its `generate`) and
`rollout.task_overrides` (task fields its harness reads, merged into every task input).

A recipe names its own models through two optional hooks (`rollouts.recipe.RecipeHooks`): `generator_options`
(default `NoGeneratorOptions`: `generate(count, seed)` takes nothing more) and `task_fields` (default
`TaskOverrides`: the fields the built-in harnesses read alike, typed, and any other field a harness of your own reads).
A built-in recipe's models list exactly what its harness reads (`extra="forbid"`), so a misspelt key is an error
naming it, the keys the recipe takes, and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class NoGeneratorOptions(BaseModel):
    """A recipe whose `generate(count, seed)` takes no options."""

    model_config = ConfigDict(extra="forbid")


class LevelsOption(BaseModel):
    """The coding recipes' generator option: the difficulty ladder's mix."""

    model_config = ConfigDict(extra="forbid")

    levels: dict[int, float] | None = Field(default=None, description="Ladder level -> weight of the generated tasks "
                                            "(recipes/swe/ladder.py); none: every task at the original level.")


class HarnessFields(BaseModel):
    """Task fields every harness is given the same way: the base of a recipe's closed `task_fields` model."""

    model_config = ConfigDict(extra="forbid")

    harness_timeout_s: float | None = Field(default=None, gt=0, description="This task's wall-clock limit of one "
                                            "attempt (the controller's harness_timeout_s otherwise).")


class SamplingFields(HarnessFields):
    """A harness that asks the policy with its own sampling settings."""

    model: str | None = Field(default=None, description="The model name the harness asks for (the run registers "
                              "'policy').")
    max_tokens: int | None = Field(default=None, ge=1, description="Tokens per answer the harness asks for.")
    temperature: float | None = Field(default=None, ge=0, description="Sampling temperature the harness asks for.")


class TaskOverrides(SamplingFields):
    """The default `task_fields`: the common fields typed, any other field passed on as given (a harness of your own
    reads what it reads)."""

    model_config = ConfigDict(extra="allow")


def validated_options(model: type[BaseModel], values: Mapping[str, Any], key: str, recipe: str) -> dict[str, Any]:
    """`values` checked against `model` (the keys given only; a value is kept as given unless coercion changed it, so
    20 stays 20 where the model says float); ValueError naming each bad key and the fix."""
    try:
        checked = model.model_validate(dict(values)).model_dump(exclude_unset=True)
        return {key: values[key] if key in values and values[key] == value else value for key, value in checked.items()}
    except ValidationError as error:
        known = sorted(model.model_fields)
        lines = []
        for problem in error.errors():
            field = ".".join(str(part) for part in problem["loc"])
            if problem["type"] == "extra_forbidden":
                fix = (f"recipe {recipe!r} takes {', '.join(known)}" if known else f"recipe {recipe!r} takes none")
                lines.append(f"{key}.{field}: not an option of this recipe ({fix}); remove it")
            else:
                lines.append(f"{key}.{field}: {problem['msg']} (got {problem.get('input')!r})")
        raise ValueError("; ".join(lines)) from None
