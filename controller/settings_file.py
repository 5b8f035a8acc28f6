"""A component's settings from an optional YAML file plus keyword overrides (None means "not given")."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml


def read_settings(path: str | Path | None, overrides: Mapping[str, Any], what: str) -> dict[str, Any]:
    """The YAML mapping at `path` (none: empty) updated with the overrides that are not None; `what` names the
    settings in the error when the file holds something other than a mapping."""
    data: dict[str, Any] = {}
    if path is not None:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: expected a mapping of {what}, got {type(loaded).__name__}")
        data.update(loaded)
    data.update({key: value for key, value in overrides.items() if value is not None})
    return data
