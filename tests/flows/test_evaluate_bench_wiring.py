"""evaluate-swe-verified lets each task name its recipe: `--recipe` is dropped from the controller options."""

from __future__ import annotations

from flows.evaluate import without_recipe


def test_the_controller_options_lose_only_the_recipe():
    args = ("--runner", "kubernetes", "--recipe", "swe", "--concurrency", "8")
    assert without_recipe(args) == ("--runner", "kubernetes", "--concurrency", "8")
    assert without_recipe(("--runner", "local")) == ("--runner", "local")
