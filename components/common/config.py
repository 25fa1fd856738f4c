"""Base for the one config model each stage has, and YAML loading whose errors name the
file, line and field (`cfg.yaml:7: pii.policy: Input should be ...`)."""

from __future__ import annotations

import os
import sys
from typing import Any, ClassVar, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from .errors import InputError

C = TypeVar("C", bound="StageConfig")


class StageConfig(BaseModel):
    """Unknown keys are errors: a typo in a threshold must not silently keep the default."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # Keys that moved (old dotted path: new one). The old key is still read, with a note;
    # both at once is an error.
    MOVED: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        if not cls.MOVED or not isinstance(data, dict):
            return data
        data = _copy_dicts(data)
        for old, new in cls.MOVED.items():
            old_path, new_path = old.split("."), new.split(".")
            holder = _parent(data, old_path)
            if holder is None or old_path[-1] not in holder:
                continue
            target = _parent(data, new_path)
            if target is not None and new_path[-1] in target:
                raise ValueError(f"{old} and {new} are both set: {old} is the old name of {new}; keep {new}")
            value = holder.pop(old_path[-1])
            section = old_path[:-1]
            while section and _parent(data, section)[section[-1]] == {}:  # a section the move left empty goes
                del _parent(data, section)[section[-1]]
                section = section[:-1]
            _set_path(data, new_path, value)
            if (old, new) not in _NOTED:
                _NOTED.add((old, new))
                print(f"config: {old} is now {new} (the old key is still read)", file=sys.stderr)
        return data

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


_NOTED: set[tuple[str, str]] = set()


def _copy_dicts(data: Any) -> Any:
    """The nested dicts copied (the caller's stay as they were), everything else shared."""
    return {k: _copy_dicts(v) for k, v in data.items()} if isinstance(data, dict) else data


def _parent(data: Any, path: list[str]) -> dict | None:
    """The mapping holding `path`'s last key, when every section on the way is one."""
    for key in path[:-1]:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else None


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
