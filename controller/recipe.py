"""The recipe seam, as the controller and the recipes import it: `rollouts.recipe` holds it (below both the trainer
and the controller); the names are re-exported here for the recipes that import them from the controller."""

from __future__ import annotations

from rollouts.recipe import TASK_FILE, Grade, GradeInput, GraderInfraError, Recipe, final_text

__all__ = ["TASK_FILE", "Grade", "GradeInput", "GraderInfraError", "Recipe", "final_text"]
