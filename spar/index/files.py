"""The files of an index directory (``index.faiss``, ``ids.arrow``, ``index.json``): the one place that names them.

:class:`spar.index.spar_index.SparIndex` writes and loads them whole; what the stages, publishing, search and
``spar index --model`` ask of an index directory without loading the FAISS index is here: whether one is there,
its description (``index.json``: variant, type, storage, encoder fingerprints, options), its passage ids, its
fingerprint as an input of later stages, the manifest schema that describes it, and the search-time options
refreshed in place.

Example::

    >>> import tempfile, numpy as np
    >>> from spar.index.spar_index import SparIndex
    >>> from spar.index.files import index_ids, index_info, is_index_dir, refresh_search_params
    >>> d = tempfile.mkdtemp()
    >>> SparIndex.build(np.eye(4, dtype="float32"), np.eye(4, dtype="float32"), ids=list("abcd")).save(d)
    >>> is_index_dir(d), index_info(d)["variant"], index_ids(d)
    (True, 'concat', ['a', 'b', 'c', 'd'])
    >>> refresh_search_params(d, {"nprobe": 8}, manifest=False)
    ['nprobe 32 -> 8']
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from spar.core.errors import ArtifactError
from spar.core.legacy_spellings import SEARCH_TIME_BEFORE
from spar.core.schemas import IDS_FILE

INDEX_FILE = "index.faiss"
INDEX_MANIFEST = "index.json"
#: Options read at search time (marked runtime-only on IndexSection): they live in index.json and are refreshed
#: there when changed, without re-indexing.
SEARCH_TIME = ("hnsw_ef_search", "nprobe", "refine")


def search_settings(section: Any) -> dict[str, Any]:
    """The search-time settings of an ``index`` config section, as results and fingerprints record them: an option
    at the value indexes had before it existed is left out (:data:`spar.core.legacy_spellings.SEARCH_TIME_BEFORE`)."""

    values = {key: getattr(section, key) for key in SEARCH_TIME}
    return {k: v for k, v in values.items() if k not in SEARCH_TIME_BEFORE or v != SEARCH_TIME_BEFORE[k]}


def is_index_dir(directory: str | Path) -> bool:
    """Whether ``directory`` holds a FAISS index file."""
    return (Path(directory) / INDEX_FILE).exists()


def require_index(directory: str | Path) -> Path:
    """``directory`` when it holds an index, else a one-line error naming the stage to run."""
    d = Path(directory)
    if not is_index_dir(d):
        raise ArtifactError(f"{d}: missing file '{INDEX_FILE}' (run `spar index` first)")
    return d


def index_info(directory: str | Path, required: bool = True) -> dict[str, Any]:
    """The index's description (``index.json``); ``{}`` when it has none and ``required`` is False, or when it is
    unreadable and not required."""
    path = Path(directory) / INDEX_MANIFEST
    if not path.exists():
        if required:
            raise ArtifactError(f"{directory}: missing file '{INDEX_MANIFEST}' (re-run `spar index --force`)")
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        if required:
            raise ArtifactError(f"{path}: unreadable ({exc})") from None
        return {}


def index_ids(directory: str | Path) -> list[str]:
    """The passage id of each row of the index (``ids.arrow``)."""
    from spar.core.schemas import read_table

    return read_table(Path(directory) / IDS_FILE).column("id").to_pylist()


def index_fingerprint(directory: str | Path) -> str:
    """What identifies a built index as an input of a later stage (publish): its ``index.json`` (which records
    the encoders, storage and options), or the index file of one written before ``index.json`` existed."""
    from spar.core.fingerprint import file_fingerprint

    d = Path(directory)
    return file_fingerprint(d / INDEX_MANIFEST) if (d / INDEX_MANIFEST).exists() else file_fingerprint(d / INDEX_FILE)


def index_file_bytes(directory: str | Path) -> int:
    """The size of the index file on disk."""
    return os.path.getsize(Path(directory) / INDEX_FILE)


def index_schema(index_type: str, storage: str, extra_files: dict[str, Any] | None = None,
                 info_extra: str = "") -> dict[str, Any]:
    """The ``schema`` a manifest records for an index directory (``extra_files``: files beside the index;
    ``info_extra``: what else its ``index.json`` records)."""
    return {INDEX_FILE: f"FAISS {index_type} (inner product), passages stored as {storage}",
            IDS_FILE: "schemas.EMBEDDING_IDS", **(extra_files or {}),
            INDEX_MANIFEST: "variant, type, storage, codec, code bytes, encoder fingerprints and dims, count, "
                            "options" + (f", {info_extra}" if info_extra else "")}


def refresh_search_params(directory: str | Path, search_params: dict[str, Any], manifest: bool = True) -> list[str]:
    """Update the search-time options of a built index in place (``index.json``, and with ``manifest`` its
    artifact manifest's stats and checksum); returns what changed."""
    from spar.core.artifacts import MANIFEST, read_manifest, refresh_checksums, write_json_atomic

    d = Path(directory)
    info = index_info(d)
    changed = []
    opts = info.setdefault("options", {})
    for key, value in search_params.items():
        if opts.get(key, SEARCH_TIME_BEFORE.get(key)) != value:
            changed.append(f"{key} {opts.get(key)} -> {value}")
            opts[key] = value
    if changed:
        write_json_atomic(d / INDEX_MANIFEST, info)
        if manifest:
            stage_manifest = read_manifest(d)
            stage_manifest["stats"]["options"] = opts
            write_json_atomic(d / MANIFEST, stage_manifest)
            refresh_checksums(d, [INDEX_MANIFEST])
    return changed


def record_embeddings(directory: str | Path, embeddings: dict[str, str]) -> None:
    """Point an index that re-ranks exactly at other float32 passage embeddings (``index.json``'s ``embeddings``:
    name -> path relative to the index), in its manifest's stats and checksum too: a copied index that took its
    vectors along (``publish.copy_index``)."""
    from spar.core.artifacts import MANIFEST, read_manifest, refresh_checksums, write_json_atomic

    d = Path(directory)
    info = index_info(d)
    info["embeddings"] = dict(embeddings)
    write_json_atomic(d / INDEX_MANIFEST, info)
    if (d / MANIFEST).is_file():
        manifest = read_manifest(d)
        if isinstance(manifest.get("stats"), dict) and "embeddings" in manifest["stats"]:
            manifest["stats"]["embeddings"] = dict(embeddings)
            write_json_atomic(d / MANIFEST, manifest)
        refresh_checksums(d, [INDEX_MANIFEST])
