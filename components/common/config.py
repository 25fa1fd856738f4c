"""Base for the one config model each stage has, and YAML loading whose errors name the
file, line and field (`cfg.yaml:7: pii.policy: Input should be ...`)."""

from __future__ import annotations

import os
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import InputError

C = TypeVar("C", bound="StageConfig")


class StageConfig(BaseModel):
    """Unknown keys are errors: a typo in a threshold must not silently keep the default."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @classmethod
    def load(cls: type[C], source: str | os.PathLike | None = None, overrides: dict[str, Any] | None = None) -> C:
        """Build from a YAML file path, inline YAML text, or nothing (defaults)."""
        text, origin = "", "<defaults>"
        if source is not None and str(source).strip():
            source_str = str(source)
            if "\n" not in source_str and os.path.exists(source_str):
                origin = source_str
                try:
                    with open(source_str, encoding="utf-8") as handle:
                        text = handle.read()
                except (OSError, UnicodeDecodeError) as exc:
                    raise InputError(f"{origin}: cannot read config: {exc}") from None
            elif "\n" not in source_str and source_str.endswith((".yaml", ".yml", ".json")):
                raise InputError(f"{source_str}: config file not found")
            else:
                text, origin = source_str, "<inline config>"
        return cls.from_yaml(text, origin, overrides)

    @classmethod
    def from_yaml(
        cls: type[C], text: str, origin: str = "<inline config>", overrides: dict[str, Any] | None = None
    ) -> C:
        try:
            node = yaml.compose(text) if text.strip() else None
            data = yaml.safe_load(text) if text.strip() else {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{origin}:{mark.line + 1}" if mark else origin
            raise InputError(f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise InputError(f"{origin}:1: config must be a mapping, got {type(data).__name__}")
        for key, value in (overrides or {}).items():
            if value is not None:
                _set_path(data, key.split("."), value)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = [str(p) for p in err["loc"]]
            line = _line_of(node, loc)
            where = f"{origin}:{line}" if line else origin
            more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
            # A check across fields (a model validator) names its fields in its own message.
            what = f"{'.'.join(loc)}: {err['msg']}" if loc else err["msg"].removeprefix("Value error, ")
            raise InputError(f"{where}: {what}{more}") from None


def _set_path(data: dict, path: list[str], value: Any) -> None:
    for key in path[:-1]:
        data = data.setdefault(key, {})
    data[path[-1]] = value


def _line_of(node: Any, loc: list[str]) -> int | None:
    """1-based line of the deepest YAML node along `loc` that exists."""
    line = None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == key), None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and key.isdigit() and int(key) < len(node.value):
            node = node.value[int(key)]
            line = node.start_mark.line + 1
        else:
            break
    return line
