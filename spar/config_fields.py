"""What a config field is, besides its type: a path (resolved against the YAML it is written in) or a runtime-only
option (left out of every fingerprint). Markers go on the pydantic field: ``Field(..., json_schema_extra=PATH)``.

Example::

    >>> from pathlib import Path
    >>> from spar.config import SparConfig
    >>> tree = {"data": {"corpus": "../data/corpus.jsonl"}, "encode": {"base": {"model": "all-MiniLM-L6-v2"}}}
    >>> resolve_paths(tree, SparConfig, Path("/project/configs"))
    >>> tree["data"]["corpus"], tree["encode"]["base"]["model"]
    ('/project/data/corpus.jsonl', 'all-MiniLM-L6-v2')
"""

from __future__ import annotations

import os
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.config import JsonDict

#: ``json_schema_extra`` of a config option that names a file or directory: relative values written in a YAML
#: resolve against the YAML's directory (see :func:`load_config`).
PATH: JsonDict = {"config_path": "path"}
#: Idem for an option that also takes a model name or hub id: a relative value is a path when it starts with ``.``
#: or ``~`` or exists beside the YAML, else a name.
PATH_OR_ID: JsonDict = {"config_path": "path-or-id"}
#: ``json_schema_extra`` of an option that changes how a stage runs or logs, never what it writes (threads,
#: devices, W&B mode, upload target): left out of fingerprints (:func:`spar.stage.settings`), so changing it
#: neither re-runs a stage nor discards resumable work.
RUNTIME: JsonDict = {"runtime_only": True}
#: ``json_schema_extra`` of an option added after artifacts were made without it, whose default reproduces what they
#: hold: left out of fingerprints while it holds its default, so adding it keeps existing runs up to date.
ADDED_LATER: JsonDict = {"fingerprint_omits_default": True}


def is_runtime_only(field: Any) -> bool:
    """Whether a section's field (a pydantic ``FieldInfo``) is marked :data:`RUNTIME`."""
    extra = field.json_schema_extra
    return isinstance(extra, dict) and bool(extra.get("runtime_only"))


def omitted_at_default(field: Any) -> bool:
    """Whether a section's field is marked :data:`ADDED_LATER`."""
    extra = field.json_schema_extra
    return isinstance(extra, dict) and bool(extra.get("fingerprint_omits_default"))


def section_type(annotation: Any) -> type[BaseModel] | None:
    """The section class of a field (``Section`` or ``Section | None``), else None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def resolve_paths(tree: Any, model: type[BaseModel], base: Path) -> None:
    """Make the relative path options of a YAML ``tree`` (a section of ``model``) relative to ``base``."""
    if not isinstance(tree, dict):
        return
    for name, field in model.model_fields.items():
        key = field.alias or name
        value = tree.get(key)
        section = section_type(field.annotation)
        if section is not None:
            if isinstance(value, str) and "path" in section.model_fields:  # `encode.lambda: <path>` shorthand
                value = tree[key] = {"path": value}
            resolve_paths(value, section, base)
            continue
        rule = (field.json_schema_extra or {}).get("config_path") if isinstance(field.json_schema_extra, dict) \
            else None
        if rule is None or not isinstance(value, str) or not value or Path(value).is_absolute():
            continue
        if value.startswith("~"):
            tree[key] = str(Path(value).expanduser())
        elif rule == "path" or value.startswith(".") or (base / value).exists():
            tree[key] = os.path.normpath(base.resolve() / value)
