"""Great-expectations suites over task rows, run in an ephemeral context (no files written): the common rules, and
a recipe's own through its `task_rules()` hook (the built-in recipes define theirs in their packages).

Each rule checks one column of a pandas DataFrame of the rows. Rules about a value's shape (non-empty text or list,
integer type, known instruction kinds) check a derived column (`<column>#<rule>`) computed here, so every rule is a
plain great-expectations expectation with per-row results. great_expectations is imported on the first validation
(about 3.5 s on 2 cores), not with this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

SHOWN_IDS = 10  # offending row ids kept per rule
ROW_REF = "#row"  # derived column naming each row: its id, or "row <index>" when the id is missing or blank


class ExpectationResult(BaseModel):
    """One rule's outcome."""

    name: str = Field(description="the rule's short name, e.g. 'prompt_non_empty'")
    column: str = Field(description="the task field it checks ('' for table rules)")
    rule: str = Field(description="the rule in words, e.g. 'prompt is a non-empty string'")
    success: bool = Field(description="whether every row follows it")
    unexpected_count: int = Field(description="rows breaking it")
    unexpected_ids: list[str] = Field(description=f"up to {SHOWN_IDS} ids of rows breaking it")
    message: str = Field(description="a human sentence naming the rule and the rows breaking it")
    blocking: bool = Field(default=True, description="False: a warning, reported but never failing the suite "
                                                     "(rows a cleaning step filters later)")


class ValidationReport(BaseModel):
    """The outcome of a recipe's suite on a set of task rows."""

    recipe: str = Field(description="the recipe (or dataset) whose suite ran")
    success: bool = Field(description="whether every blocking rule passed")
    n_rows: int = Field(description="rows validated")
    expectations: list[ExpectationResult] = Field(description="one entry per rule, in suite order")
    stats: dict[str, dict[str, float]] = Field(default_factory=dict,
                                               description="per measured quantity: its min, max, mean and rows")

    def failures(self) -> list[ExpectationResult]:
        """The blocking rules that failed."""
        return [result for result in self.expectations if not result.success and result.blocking]

    def warnings(self) -> list[ExpectationResult]:
        """The non-blocking rules that failed (reported only)."""
        return [result for result in self.expectations if not result.success and not result.blocking]

    def to_markdown(self) -> str:
        """A heading, a table of every rule, the stats, and one line per broken rule and per warning."""
        verdict = "passed" if self.success else f"FAILED ({len(self.failures())} of {len(self.expectations)} rules)"
        if self.warnings():
            verdict += f", {len(self.warnings())} warning(s)"
        lines = [f"## Task data validation: {self.recipe}: {verdict}", "", f"{self.n_rows} rows.", "",
                 "| rule | column | result | rows breaking it | e.g. |", "|---|---|---|---|---|"]
        for r in self.expectations:
            shown = ", ".join(f"`{i}`" for i in r.unexpected_ids)
            outcome = "ok" if r.success else "FAILED" if r.blocking else "warning"
            lines.append(f"| {r.rule} | {r.column} | {outcome} | {r.unexpected_count} | {shown} |")
        if self.stats:
            lines += ["", "| quantity | min | max | mean | rows |", "|---|---|---|---|---|"]
            lines += [f"| {name} | {s.get('min', math.nan):g} | {s.get('max', math.nan):g} | "
                      f"{s.get('mean', math.nan):.2f} | {s.get('rows', 0):g} |" for name, s in self.stats.items()]
        if not self.success:
            lines += ["", "Broken rules:", *(f"- {r.message}" for r in self.failures())]
        if self.warnings():
            lines += ["", "Warnings (reported, not blocking):", *(f"- {r.message}" for r in self.warnings())]
        return "\n".join(lines) + "\n"


class DataValidationError(ValueError):
    """Task rows that break their recipe's rules; the message is the readable report."""

    def __init__(self, report: ValidationReport) -> None:
        super().__init__(report.to_markdown())
        self.report = report

    def __reduce__(self) -> tuple[Any, ...]:
        return DataValidationError, (self.report,)


def require_valid(report: ValidationReport) -> ValidationReport:
    """The report when it passed; raises DataValidationError (its message the report) otherwise."""
    if not report.success:
        raise DataValidationError(report)
    return report


@dataclass(frozen=True)
class Rule:
    """One check of one column; a value rule is skipped when no row has the column and passes null values
    (`exists` and `not_null` rules make a column required)."""

    name: str  # short name, e.g. "prompt_non_empty"
    column: str  # the task field ('' for a table rule)
    kind: str  # rows | exists | not_null | unique | text | list | integer | between | in_set | custom | row
    rule: str  # the rule in words
    min_value: float | None = None  # "between": smallest allowed value
    max_value: float | None = None  # "between": largest allowed value
    allowed: tuple[Any, ...] = ()  # "in_set": allowed values
    derive: Callable[[Any], Any] | None = None  # "custom": value -> problems in it (0 = fine); "row": {input: value}
    inputs: tuple[str, ...] = ()  # "row": the columns `derive` reads (absent ones read as None)
    blocking: bool = True  # False: a warning that never fails the suite


def required_field(column: str, shape: str) -> list[Rule]:
    """A column every row has, non-null, and a non-empty string ("text") or list ("list")."""
    noun = "a non-empty string" if shape == "text" else "a non-empty list"
    return [Rule(f"{column}_exists", column, "exists", f"column {column} is present"),
            Rule(f"{column}_not_null", column, "not_null", f"{column} is set in every row"),
            Rule(f"{column}_non_empty", column, shape, f"{column} is {noun}")]


def integer_field(column: str, min_value: float | None = None, max_value: float | None = None,
                  required: bool = False) -> list[Rule]:
    """An integer column within [min_value, max_value]; optional ones are checked only in rows that set them."""
    bounds = " and ".join(part for part in (f">= {min_value:g}" if min_value is not None else "",
                                           f"<= {max_value:g}" if max_value is not None else "") if part)
    rules = []
    if required:
        rules.append(Rule(f"{column}_exists", column, "exists", f"column {column} is present"))
        rules.append(Rule(f"{column}_not_null", column, "not_null", f"{column} is set in every row"))
    rules.append(Rule(f"{column}_integer", column, "integer", f"{column} is an integer"))
    if bounds:
        rules.append(Rule(f"{column}_range", column, "between", f"{column} is {bounds}",
                          min_value=min_value, max_value=max_value))
    return rules


def common_rules(recipe: str) -> list[Rule]:
    """Rules for every recipe: at least one row, a unique non-empty id, the recipe name, sane limits."""
    return [Rule("has_rows", "", "rows", "there is at least one row"),
            *required_field("id", "text"),
            Rule("id_unique", "id", "unique", "id is unique"),
            Rule("recipe_matches", "recipe", "in_set", f"recipe is {recipe!r}", allowed=(recipe,)),
            *integer_field("max_tokens", min_value=1),
            *integer_field("step_limit", min_value=1)]


def recipe_rules(recipe: str) -> list[Rule]:
    """The recipe's suite: the common rules and the fields its harness and grader read: the recipe's own
    `task_rules()` hook (reached through the registry: this module names no recipe), or none beyond the common
    rules when it defines none."""
    from rollouts.registry import get_recipe

    hook = getattr(get_recipe(recipe), "task_rules", None)
    return common_rules(recipe) + (list(hook()) if hook is not None else [])


def _is_null(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _size(value: Any, shape: type) -> int | None:
    """Length of a string (stripped) or list; 0 for a value of another type; None for a null."""
    if _is_null(value):
        return None
    if not isinstance(value, shape):
        return 0
    return len(value.strip()) if isinstance(value, str) else len(value)


def _integer_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _type_name(value: Any) -> str | None:
    if _is_null(value):
        return None
    return "int" if _integer_or_none(value) is not None else type(value).__name__


def _row_ref(index: int, row: dict[str, Any], id_column: str = "id") -> str:
    value = row.get(id_column)
    return str(value) if isinstance(value, str | int) and str(value).strip() else f"row {index}"


def validate_rows(rows: list[dict[str, Any]], recipe: str) -> ValidationReport:
    """Run `recipe`'s suite on `rows` (nothing raised on failure: see `require_valid`)."""
    return validate_rules(rows, recipe_rules(recipe), suite=recipe)


def validate_rules(rows: list[dict[str, Any]], rules: list[Rule], *, suite: str, id_column: str = "id",
                   stats: dict[str, dict[str, float]] | None = None) -> ValidationReport:
    """Run `rules` on `rows`, naming rows by `id_column`; the report is called `suite` and carries `stats`."""
    refs = [_row_ref(index, row, id_column) for index, row in enumerate(rows)]
    present = {key for row in rows for key in row}
    checked = [r for r in rules if r.kind in ("rows", "exists", "row") or r.column in present]
    columns: dict[str, list[Any]] = {ROW_REF: refs}
    columns.update({column: [row.get(column) for row in rows] for column in sorted(present)})
    for rule in (r for r in checked if r.kind == "row" and r.derive is not None):
        columns[f"{rule.column}#{rule.name}"] = [rule.derive({c: row.get(c) for c in rule.inputs}) for row in rows]
    targets = [_target(rule, columns) for rule in checked]
    outcomes = _run_suite(columns, list(zip(checked, targets, strict=True)))
    results = [_result(rule, outcome, len(rows), refs) for rule, outcome in zip(checked, outcomes, strict=True)]
    return ValidationReport(recipe=suite, success=all(r.success for r in results if r.blocking), n_rows=len(rows),
                            expectations=results, stats=stats or {})


def _target(rule: Rule, columns: dict[str, list[Any]]) -> str:
    """The frame column the rule's expectation checks, derived (and added to `columns`) when needed."""
    derivers: dict[str, Callable[[Any], Any]] = {
        "text": lambda v: _size(v, str), "list": lambda v: _size(v, list), "integer": _type_name,
        "between": _integer_or_none,
        "custom": lambda v: None if _is_null(v) else rule.derive(v),  # type: ignore[misc]
    }
    if rule.kind == "row":
        return f"{rule.column}#{rule.name}"  # derived in validate_rules
    if rule.kind not in derivers or rule.column not in columns:
        return rule.column
    target = f"{rule.column}#{rule.name}"
    columns[target] = [derivers[rule.kind](value) for value in columns[rule.column]]
    return target


@dataclass(frozen=True)
class Outcome:
    """What great-expectations said about one expectation."""

    success: bool  # whether it passed
    unexpected_count: int  # rows breaking it (0 for table and column-presence expectations)
    unexpected_refs: list[str]  # ROW_REF of each row breaking it
    error: str | None  # the exception great-expectations caught while checking, if any


def _run_suite(columns: dict[str, list[Any]], checks: list[tuple[Rule, str]]) -> list[Outcome]:
    """Validate the frame of `columns` against one expectation per (rule, frame column), in an ephemeral context."""
    import great_expectations as gx
    import pandas as pd
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    asset = context.data_sources.add_pandas("task_rows").add_dataframe_asset("rows")
    batch = asset.add_batch_definition_whole_dataframe("all").get_batch(
        batch_parameters={"dataframe": pd.DataFrame(columns)})
    suite = gx.ExpectationSuite(name="task_rows")
    for index, (rule, target) in enumerate(checks):
        expectation = _expectation(gx, rule, target)
        expectation.meta = {"check": index}  # results are matched back to checks by this
        suite.add_expectation(expectation)
    result = batch.validate(suite, result_format={"result_format": "COMPLETE",
                                                  "unexpected_index_column_names": [ROW_REF]})
    by_check = {r.expectation_config.meta["check"]: r for r in result.results}
    return [_outcome(by_check[index]) for index in range(len(checks))]


def _expectation(gx: Any, rule: Rule, target: str) -> Any:
    """The great-expectations expectation checking `rule` on frame column `target`."""
    e = gx.expectations
    if rule.kind == "rows":
        return e.ExpectTableRowCountToBeBetween(min_value=1)
    if rule.kind == "exists":
        return e.ExpectColumnToExist(column=target)
    if rule.kind == "not_null":
        return e.ExpectColumnValuesToNotBeNull(column=target)
    if rule.kind == "unique":
        return e.ExpectColumnValuesToBeUnique(column=target)
    if rule.kind == "in_set":
        return e.ExpectColumnValuesToBeInSet(column=target, value_set=list(rule.allowed))
    if rule.kind == "integer":
        return e.ExpectColumnValuesToBeInSet(column=target, value_set=["int"])
    if rule.kind in ("text", "list"):
        return e.ExpectColumnValuesToBeBetween(column=target, min_value=1)
    if rule.kind in ("custom", "row"):
        return e.ExpectColumnValuesToBeBetween(column=target, max_value=0)
    if rule.kind == "between":
        return e.ExpectColumnValuesToBeBetween(column=target, min_value=rule.min_value, max_value=rule.max_value)
    raise ValueError(f"rule {rule.name!r} has unknown kind {rule.kind!r}")


def _outcome(result: Any) -> Outcome:
    details = result.result or {}
    refs = [str(item.get(ROW_REF)) for item in details.get("unexpected_index_list") or [] if isinstance(item, dict)]
    info = result.exception_info or {}
    error = info.get("exception_message") if info.get("raised_exception") else None
    return Outcome(success=bool(result.success), unexpected_count=int(details.get("unexpected_count") or 0),
                   unexpected_refs=refs, error=error)


def _result(rule: Rule, outcome: Outcome, n_rows: int, refs: list[str]) -> ExpectationResult:
    count, ids = outcome.unexpected_count, outcome.unexpected_refs
    if rule.kind == "exists" and not outcome.success:
        count, ids = n_rows, refs  # every row lacks the column
    shown = list(dict.fromkeys(ids))[:SHOWN_IDS]
    severity = "" if rule.blocking else " (warning)"
    if outcome.success:
        message = f"{rule.name}: {rule.rule}: passed"
    elif outcome.error is not None:
        message = f"{rule.name}: {rule.rule}: could not be checked: {outcome.error}"
    elif count == 0:
        message = f"{rule.name}: {rule.rule}: failed ({n_rows} rows)"
    else:
        more = " ..." if len(dict.fromkeys(ids)) > len(shown) else ""
        message = f"{rule.name}: {rule.rule}: broken by {count} of {n_rows} rows: {', '.join(shown)}{more}"
    return ExpectationResult(name=rule.name, column=rule.column, rule=rule.rule, success=outcome.success,
                             unexpected_count=count, unexpected_ids=shown, message=message + severity,
                             blocking=rule.blocking)
