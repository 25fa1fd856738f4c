"""The config and gate reference (docs/reference.md), generated from the stages' config
models so that it cannot drift from them: `llmops compile` writes it in a source
checkout and `llmops compile --check` fails when a default, bound or description changed
without it."""

from __future__ import annotations

import json
import os
import types
import typing
from enum import Enum

import annotated_types
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

DOCS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
REFERENCE = "reference.md"
_BOUNDS = ((annotated_types.Ge, "≥"), (annotated_types.Gt, ">"), (annotated_types.Le, "≤"), (annotated_types.Lt, "<"))
_PASSES = {"<=": "≤", ">=": "≥", "<": "<"}


def stage_configs() -> list[tuple[str, type[BaseModel]]]:
    """Each stage that reads a config, with its model (the stage's one home for its keys)."""
    from .stages import ALL, config_model

    return [(s.name, config_model(s)) for s in ALL if s.config]


def _type(annotation) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a.value if isinstance(a, Enum) else a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type(a) for a in typing.get_args(annotation))
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type(a) for a in typing.get_args(annotation))}]"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " \\| ".join(json.dumps(m.value) for m in annotation)
    return getattr(annotation, "__name__", str(annotation))


def _default_json(info: FieldInfo):
    """The field's default as its JSON values; PydanticUndefined when it has none."""
    if info.default_factory is None and info.default is PydanticUndefined:
        return PydanticUndefined
    value = info.default_factory() if info.default_factory is not None else info.default
    return TypeAdapter(info.annotation).dump_python(value, mode="json", by_alias=True)


def _default(info: FieldInfo) -> str:
    value = _default_json(info)
    return "(required)" if value is PydanticUndefined else f"`{json.dumps(value, ensure_ascii=False)}`"


def _bounds(info: FieldInfo) -> str:
    return ", ".join(
        f"{sign} {getattr(meta, kind.__name__.lower()):g}"
        for meta in info.metadata
        for kind, sign in _BOUNDS
        if isinstance(meta, kind)
    )


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def _section(annotation) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, FieldInfo]]:
    """Every key of `model` as a dotted path (sections walked into), in declaration order."""
    out = []
    for name, info in model.model_fields.items():
        key = prefix + (info.alias or name)
        if (section := _section(info.annotation)) is not None:
            out += fields(section, key + ".")
        else:
            out.append((key, info))
    return out


def gates(model: type[BaseModel]) -> list[tuple[str, str, str, str]]:
    """Every bound a stage's gate compares with: (key, passes when, default, description). Scalar bounds
    say so in their field (json_schema_extra gate); the evaluation's per-metric maps list
    their default entries."""
    out = []
    for key, info in fields(model):
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if "gate" in extra:
            out.append((key, f"measured {_PASSES[extra['gate']]} bound", _default(info), _cell(info.description)))
        elif key in ("gate.value", "gate.change"):
            for metric, bound in _default_json(info).items():
                for side, value in bound.items():
                    if value is None or side == "direction":
                        continue
                    if key == "gate.value":
                        passes = f"{metric} {'≥' if side == 'lower' else '≤'} bound"
                    else:
                        worse = "candidate - baseline" if side == "absolute" else "(candidate - baseline) / baseline"
                        passes = f"{worse} {'≥' if bound['direction'] == 'higher_is_better' else '≤'} bound"
                    out.append((f"{key}.{metric}.{side}", passes, f"`{value}`", ""))
    return out


def render() -> str:
    stages = stage_configs()
    lines = [
        "# Config and gate reference",
        "",
        "Generated from the stages' config models by `llmops compile`; `llmops compile --check`",
        "(in `make test`) fails when this file and the models differ. Every key is set in the",
        "stage's YAML config (`--config` on the CLI, the `*_config` pipeline parameters); an",
        "unknown key is an error naming its file, line and field.",
        "",
        "## Every gate",
        "",
        "The bounds that pass or refuse a dataset, model or rollout. An unset (`null`) bound is",
        "reported only.",
        "",
        "| stage | key | passes when | default | description |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {stage} | `{key}` | {passes} | {default} | {about} |"
        for stage, model in stages
        for key, passes, default, about in gates(model)
    ]
    for stage, model in stages:
        lines += [
            "",
            f"## {stage} (`{model.__name__}`)",
            "",
            "| key | type | default | bounds | description |",
            "| --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| `{key}` | {_type(info.annotation)} | {_default(info)} | {_bounds(info)} | {_cell(info.description)} |"
            for key, info in fields(model)
        ]
    return "\n".join(lines) + "\n"


def write(root: str = DOCS_DIR, check: bool = False) -> list[str]:
    """Write (or, with check, compare) docs/reference.md; the stale names."""
    path = os.path.join(root, REFERENCE)
    text = render()
    current = open(path, encoding="utf-8").read() if os.path.exists(path) else None
    if current == text:
        return []
    if not check:
        os.makedirs(root, exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    return [f"docs/{REFERENCE}"]
