"""Stage `index`: one FAISS index of SPAR passage vectors ([P, PΛ] or P + PΛ) -> ``index/``.

Reads ``embeddings/base/passages`` and ``embeddings/lambda/passages``; the default query-side μ comes from
``tune/tune.json`` (1.0 before tuning). μ and the search-time parameters (``hnsw_ef_search``, ``nprobe``) are not
part of the index's fingerprint: changing them updates ``index.json`` in place, never re-indexes.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from spar.artifacts import (ArtifactWriter, artifact_dir, is_complete, read_manifest, write_json_atomic)
from spar.embeddings import load_embeddings, split_dir
from spar.errors import ArtifactError
from spar.index import INDEX_FILE, INDEX_MANIFEST, IndexOptions, SparIndex

SECTIONS = ["experiment", "data", "index"]
SUMMARY = "build one FAISS index of [P(p), PΛ(p)] (flat, HNSW or IVF-PQ) -> index/"

#: Options read at search time; they live in index.json and are refreshed without rebuilding.
SEARCH_TIME = ("hnsw_ef_search", "nprobe")

log = logging.getLogger(__name__)


def tuned_mu(output_dir: Path) -> tuple[float, str]:
    """(μ, where it came from): ``tune/tune.json``'s "mu" when tuning has run, else 1.0."""
    path = artifact_dir(output_dir, "tune") / "tune.json"
    if not path.exists():
        return 1.0, "default (tune/tune.json not found)"
    try:
        mu = json.loads(path.read_text())["mu"]
    except (json.JSONDecodeError, KeyError) as exc:
        raise ArtifactError(f"{path}: no readable 'mu' ({exc})") from None
    return float(mu), str(path)


def run(cfg, force: bool = False) -> dict:
    out = cfg.output_dir
    section = cfg.index
    emb_root = artifact_dir(out, "embeddings")
    base_dir, lambda_dir = split_dir(emb_root, "base", "passages"), split_dir(emb_root, "lambda", "passages")
    for d in (base_dir, lambda_dir):
        if not is_complete(d):
            raise ArtifactError(f"{d}: passage embeddings are missing (run `spar encode`)")
    mu, mu_source = tuned_mu(out)
    build_config = {k: v for k, v in section.model_dump(mode="json").items() if k not in SEARCH_TIME}
    inputs = {"base": read_manifest(base_dir)["fingerprint"], "lambda": read_manifest(lambda_dir)["fingerprint"],
              "seed": str(cfg.experiment.seed)}
    target = artifact_dir(out, "index")
    writer = ArtifactWriter(target, kind="index", config=build_config, inputs=inputs)
    search_params = {k: getattr(section, k) for k in SEARCH_TIME}
    if not force and is_complete(target, writer.fingerprint) and (target / INDEX_FILE).exists():
        changed = refresh_query_side(target, mu, search_params)
        result = {"skipped": True, "mu": f"{mu:g} ({mu_source})"}
        if changed:
            result["updated"] = ", ".join(changed) + " (no re-indexing: query-side settings)"
        return result

    base, lam = load_embeddings(base_dir), load_embeddings(lambda_dir)
    options = IndexOptions.from_section(section)
    options.seed = cfg.experiment.seed
    with writer as w:
        index = SparIndex.build(base, lam, variant=section.variant, index_type=section.type, mu=mu, options=options)
        index.save(w.path)
        size = os.path.getsize(w.path / INDEX_FILE)
        w.schema = {"index.faiss": f"FAISS {section.type} (inner product)", "ids.arrow": "schemas.EMBEDDING_IDS",
                    INDEX_MANIFEST: "variant, type, encoder fingerprints and dims, count, default mu, options"}
        w.stats = {**index.info, "mu_source": mu_source, "bytes": size,
                   "bytes_per_passage": round(size / max(1, len(index)), 1)}
    return {"variant": section.variant, "type": section.type, "passages": f"{len(index):,}",
            "dim": f"{index.info['dim']} (base {index.info['base_dim']} + Λ {index.info['lambda_dim']})"
            if section.variant == "concat" else str(index.info["dim"]),
            "mu": f"{mu:g} ({mu_source})", "size": f"{size / 2**20:,.1f} MiB ({size / max(1, len(index)):,.0f} B/passage)"}


def refresh_query_side(index_dir: Path, mu: float, search_params: dict) -> list[str]:
    """Update the default μ and search-time parameters of a built index in place; returns what changed."""
    info_path = index_dir / INDEX_MANIFEST
    if not info_path.exists():
        raise ArtifactError(f"{index_dir}: missing file '{INDEX_MANIFEST}' (re-run `spar index --force`)")
    info = json.loads(info_path.read_text())
    changed = []
    if float(info.get("mu", 1.0)) != mu:
        changed.append(f"mu {info.get('mu')} -> {mu:g}")
        info["mu"] = mu
    opts = info.setdefault("options", {})
    for key, value in search_params.items():
        if opts.get(key) != value:
            changed.append(f"{key} {opts.get(key)} -> {value}")
            opts[key] = value
    if changed:
        write_json_atomic(info_path, info)
        manifest = read_manifest(index_dir)
        manifest["stats"].update({"mu": info["mu"], "options": opts})
        write_json_atomic(index_dir / "manifest.json", manifest)
    return changed
