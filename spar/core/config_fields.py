"""What a config field is, besides its type: a path (resolved against the YAML it is written in) or a runtime-only
option (left out of every fingerprint). Markers go on the pydantic field: ``Field(..., json_schema_extra=PATH)``.

Example::

    >>> from pathlib import Path
    >>> from spar.core.config import SparConfig
    >>> tree = {"data": {"corpus": "../data/corpus.jsonl"}, "encode": {"base": {"model": "all-MiniLM-L6-v2"}}}
    >>> resolve_paths(tree, SparConfig, Path("/project/configs"))
    >>> tree["data"]["corpus"], tree["encode"]["base"]["model"]
    ('/project/data/corpus.jsonl', 'all-MiniLM-L6-v2')
    >>> relative_paths(tree, SparConfig, Path("/project/runs/demo/model"))
    >>> tree["data"]["corpus"]
    '../../../data/corpus.jsonl'
"""

from __future__ import annotations

import os
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator
from pydantic.config import JsonDict

#: ``json_schema_extra`` of a config option that names a file or directory: relative values written in a YAML
#: resolve against the YAML's directory (see :func:`load_config`).
PATH: JsonDict = {"config_path": "path"}
#: Idem for an option that also takes a model name or hub id: a relative value is a path when it starts with ``.``
#: or ``~`` or exists beside the YAML, else a name.
PATH_OR_ID: JsonDict = {"config_path": "path-or-id"}
#: ``json_schema_extra`` of an option that changes how a stage runs or logs, never what it writes (threads,
#: devices, W&B mode, upload target): left out of fingerprints (:func:`spar.core.stage.settings`), so changing it
#: neither re-runs a stage nor discards resumable work.
RUNTIME: JsonDict = {"runtime_only": True}
#: ``json_schema_extra`` of an option added after runs were made: while it has its default it is left out of
#: fingerprints, so runs made before it existed stay up to date (:func:`spar.core.stage.settings`).
ADDED_LATER: JsonDict = {"omit_at_default": True}


def is_omitted_at_default(field: Any) -> bool:
    """Whether a section's field is marked :data:`ADDED_LATER`."""
    extra = field.json_schema_extra
    return isinstance(extra, dict) and bool(extra.get("omit_at_default"))


def is_runtime_only(field: Any) -> bool:
    """Whether a section's field (a pydantic ``FieldInfo``) is marked :data:`RUNTIME`."""
    extra = field.json_schema_extra
    return isinstance(extra, dict) and bool(extra.get("runtime_only"))


def section_type(annotation: Any) -> type[BaseModel] | None:
    """The section class of a field (``Section`` or ``Section | None``), else None (a map of sections is not one)."""
    if typing.get_origin(annotation) is dict:
        return None
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def section_map_type(annotation: Any) -> type[BaseModel] | None:
    """The section class of a field that maps names to sections (``dict[str, Section]``), else None."""
    if typing.get_origin(annotation) is not dict:
        return None
    value = typing.get_args(annotation)[-1]
    return value if isinstance(value, type) and issubclass(value, BaseModel) else None


def resolve_paths(tree: Any, model: type[BaseModel], base: Path) -> None:
    """Make the relative path options of a YAML ``tree`` (a section of ``model``) relative to ``base``."""
    if not isinstance(tree, dict):
        return
    for name, field in model.model_fields.items():
        key = field.alias or name
        value = tree.get(key)
        mapped = section_map_type(field.annotation)
        if mapped is not None:
            for item in (value or {}).values() if isinstance(value, dict) else ():
                resolve_paths(item, mapped, base)
            continue
        section = section_type(field.annotation)
        if section is not None:
            if isinstance(value, str) and "path" in section.model_fields:  # `encode.lambda: <path>` shorthand
                value = tree[key] = {"path": value}
            resolve_paths(value, section, base)
            continue
        rule = (field.json_schema_extra or {}).get("config_path") if isinstance(field.json_schema_extra, dict) \
            else None
        if rule is None or key not in tree:
            continue
        if isinstance(value, list):  # a list of paths (data.corpus: several files)
            tree[key] = [_resolved(item, str(rule), base) for item in value]
        else:
            tree[key] = _resolved(value, str(rule), base)


def _resolved(value: Any, rule: str, base: Path) -> Any:
    """``value`` resolved against ``base`` when it is a relative path (a name or hub id is left as it is)."""
    if not isinstance(value, str) or not value or Path(value).is_absolute():
        return value
    if value.startswith("~"):
        return str(Path(value).expanduser())
    if rule == "path" or value.startswith(".") or (base / value).exists():
        return os.path.normpath(base.resolve() / value)
    return value


def relative_paths(tree: Any, model: type[BaseModel], base: Path) -> None:
    """The inverse of :func:`resolve_paths`: make the absolute path options of a config ``tree`` relative to
    ``base``, so a config written into ``base`` (a published model's ``spar_config.yaml``) names no directory of the
    machine that wrote it and still resolves to the same files there."""
    if not isinstance(tree, dict):
        return
    for name, field in model.model_fields.items():
        key = field.alias or name
        value = tree.get(key)
        mapped = section_map_type(field.annotation)
        if mapped is not None:
            for item in (value or {}).values() if isinstance(value, dict) else ():
                relative_paths(item, mapped, base)
            continue
        section = section_type(field.annotation)
        if section is not None:
            relative_paths(value, section, base)
            continue
        rule = (field.json_schema_extra or {}).get("config_path") if isinstance(field.json_schema_extra, dict) \
            else None
        if rule is None or key not in tree:
            continue
        tree[key] = [_relative(item, base) for item in value] if isinstance(value, list) else _relative(value, base)


def _relative(value: Any, base: Path) -> Any:
    return os.path.relpath(value, base) if isinstance(value, str) and value and Path(value).is_absolute() else value


#: The spellings of a precision that ``train.precision`` and ``encode.precision`` accept, and what each means.
#: YAML and ``key=value`` overrides read ``32`` and ``16`` as numbers: they are accepted as such.
PRECISION_SPELLINGS = {
    "auto": "auto",
    "32": "32", "32-true": "32", "fp32": "32", "float32": "32",
    "bf16-mixed": "bf16-mixed", "bf16": "bf16-mixed",
    "16-mixed": "16-mixed", "16": "16-mixed", "fp16": "16-mixed",
}


def canonical_precision(value: Any) -> Any:
    """``encode.precision`` / ``train.precision`` as one canonical value (``auto``, ``32``, ``bf16-mixed``,
    ``16-mixed``), from any spelling of :data:`PRECISION_SPELLINGS` or the numbers 32 and 16; anything else is left
    for the field's type to refuse.

        >>> [canonical_precision(v) for v in (32, "32", "fp32", "bf16", 16, "auto")]
        ['32', '32', '32', 'bf16-mixed', '16-mixed', 'auto']
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and float(value).is_integer():
        value = str(int(value))
    if isinstance(value, str):
        return PRECISION_SPELLINGS.get(value.strip().lower(), value)
    return value


_HEAP_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def java_heap(value: Any) -> Any:
    """A JVM heap size as ``-Xmx`` takes it (``512m``, ``4g``, bytes as a number), checked before any JVM starts: the
    JVM's own refusal of ``abc`` or ``100t`` is a traceback from inside its start-up, or an exit from inside the
    process that leaves temporaries behind. At least 16m, at most 16384g; units k, m, g (a JVM's ``t`` is refused).

        >>> java_heap("4g"), java_heap("512M")
        ('4g', '512M')
        >>> java_heap("abc")
        Traceback (most recent call last):
        ...
        ValueError: 'abc' is not a JVM heap size: a number with an optional unit k, m or g (e.g. 1g, 512m)
    """
    import re

    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return value
    text = str(value).strip()
    match = re.fullmatch(r"(\d+)([kKmMgG]?)", text)
    if not match:
        raise ValueError(f"{text!r} is not a JVM heap size: a number with an optional unit k, m or g (e.g. 1g, 512m)")
    size = int(match.group(1)) * _HEAP_UNITS[match.group(2).lower()]
    if size < 16 << 20:
        raise ValueError(f"{text!r} is below the 16m a JVM needs to start")
    if size > 16 << 40:  # not this machine's memory: a config (and a published model's) travels between machines
        raise ValueError(f"{text!r} is more than a JVM heap can be (16384g at most)")
    return text


#: ``train.precision`` / ``encode.precision``: ``32`` (also ``fp32``, the number 32), ``bf16-mixed`` (``bf16``),
#: ``16-mixed`` (``fp16``) or ``auto`` (:func:`canonical_precision`).
Precision = Annotated[Literal["auto", "32", "bf16-mixed", "16-mixed"], BeforeValidator(canonical_precision)]
#: A JVM ``-Xmx`` (``label.java_heap``, ``label.search_heap``), checked at load (:func:`java_heap`).
JavaHeap = Annotated[str, BeforeValidator(java_heap)]
#: The largest seed spar takes: numpy's generators and Lightning's ``seed_everything`` take 0 ... 2**32 - 1.
MAX_SEED = 2**32 - 1
