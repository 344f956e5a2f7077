"""One owner per concept (README, Layout; issue #29): each concept below is handled in one place, checked through the
import graph (who imports the owner's names) or, for literal file names, by scanning the code; and the moved code
computes what the code before the move computed.

- hashing what identifies an output: ``spar/core/fingerprint.py``;
- artifact paths: ``spar/core/run_context.py`` (``RunContext``) over ``spar/core/artifacts.py``'s layout;
- the index's files (``index.faiss``, ``index.json``, ``ids.arrow``): ``spar/index/``;
- the Λ kinds and the storages: written once (the config's ``Literal`` s), the registries derived from or checked
  against them;
- which Λ an experiment uses: ``spar/experiment/lambda_source.py``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SPAR = ROOT / "spar"


def _code_files(*roots: str) -> list[Path]:
    return sorted(p for root in roots for p in (ROOT / root).rglob("*.py"))


def _without_docstrings(path: Path) -> str:
    """The module's source with its docstrings blanked (examples and prose may name anything)."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    lines = text.splitlines()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body and \
                isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) and \
                isinstance(node.body[0].value.value, str):
            doc = node.body[0]
            for i in range(doc.lineno - 1, doc.end_lineno):
                lines[i] = ""
    return "\n".join(line.split("  #")[0] if not line.lstrip().startswith("#") else "" for line in lines)


def _users(pattern: str, roots: tuple[str, ...] = ("spar", "pipelines")) -> set[str]:
    rx = re.compile(pattern)
    return {str(p.relative_to(ROOT)) for p in _code_files(*roots) if rx.search(_without_docstrings(p))}


def _imported(path: Path) -> set[str]:
    """What a module imports, at module level or inside functions: ``module`` for ``import module`` and
    ``module:name`` for ``from module import name``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update(f"{node.module}:{alias.name}" for alias in node.names)
    return found


def _importers(*names: str, roots: tuple[str, ...] = ("spar", "pipelines")) -> set[str]:
    """The files of ``roots`` that import one of ``names`` (a module, or ``module:name``; ``*:name`` from any
    module)."""
    def imports(found: set[str], name: str) -> bool:
        if name.startswith("*:"):
            return any(item.endswith(name[1:]) for item in found)
        return name in found

    return {str(p.relative_to(ROOT)) for p in _code_files(*roots)
            if any(imports(_imported(p), name) for name in names)}


# ----------------------------------------------------------------------------------------------------------------
# Hashing
# ----------------------------------------------------------------------------------------------------------------

#: Modules that hash for something other than an identity: seeded draws, and the term hashing of the projection's
#: table (shipped in published models, so it imports nothing of spar).
SEEDED_DRAWS = {"spar/data/sampling.py", "spar/data/readers.py", "spar/data/question_sets.py",
                "spar/evaluate/evaluation.py", "spar/lexical/random_tables.py"}


def test_hashing_has_one_owner():
    assert _importers("hashlib") == {"spar/core/fingerprint.py", *SEEDED_DRAWS}


def test_the_fingerprints_are_those_computed_before_the_move(tmp_path):
    """Each fingerprint function against the formula the code had before the move (written out here with
    hashlib), so that runs made before it stay up to date."""
    from spar.core.fingerprint import (directory_fingerprint, file_fingerprint, file_sha256, fingerprint_dict,
                                       records_fingerprint)

    payload = {"b": [1, 2.5, None], "a": "Λ é", "c": Path("/x")}
    assert fingerprint_dict(payload) == hashlib.sha256(
        json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]
    pairs = [("q1", "ünïcode query"), ("q2", "plain")]
    assert fingerprint_dict(pairs, ascii_only=False) == hashlib.sha256(
        json.dumps(pairs, ensure_ascii=False).encode()).hexdigest()[:16]
    records = [["d1", "Tïtle", "text"], ["d2", "", "more"]]
    old = hashlib.sha256()
    for r in records:
        old.update(json.dumps(r, ensure_ascii=False).encode())
    assert records_fingerprint(records) == old.hexdigest()[:16]

    big = tmp_path / "big.bin"
    big.write_bytes(np.random.default_rng(0).bytes(3 * (1 << 20) + 17))
    old = hashlib.sha256(str(big.stat().st_size).encode())
    data = big.read_bytes()
    old.update(data[:1 << 20])
    old.update(data[len(data) - (1 << 20):])
    assert file_fingerprint(big) == old.hexdigest()[:16]
    assert file_sha256(big) == hashlib.sha256(data).hexdigest()

    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text('{"a": 1}')
    from safetensors.numpy import save_file

    save_file({"w": np.arange(50_000, dtype=np.float32)}, str(model / "model.safetensors"))
    (model / "vocab.txt").write_text("a\nb\n")
    (model / "sub" / "notes.txt").write_text("below the top")
    (model / "ignored.py").write_text("x = 1")

    def old_directory(d: Path, full: bool) -> str:  # embeddings.directory_fingerprint before the move
        h = hashlib.sha256()
        for f in sorted(d.rglob("*")):
            if f.is_file() and f.suffix in (".json", ".safetensors", ".bin", ".txt", ".model", ".npy"):
                h.update(str(f.relative_to(d)).encode())
                h.update(str(f.stat().st_size).encode())
                h.update(f.read_bytes() if full else f.read_bytes()[:1 << 16])
        return h.hexdigest()[:16]

    def old_model(d: Path) -> str:  # models.model_fingerprint's loop before the move
        h = hashlib.sha256()
        for f in sorted(d.rglob("*")):
            if f.is_file() and f.suffix in (".json", ".safetensors", ".bin", ".txt"):
                h.update(f.name.encode())
                h.update(str(f.stat().st_size).encode())
                h.update(f.read_bytes()[:1 << 16])
        return h.hexdigest()[:16]

    assert directory_fingerprint(model) == old_directory(model, True)
    assert directory_fingerprint(model, full=False) == old_directory(model, False)
    from spar.model.resolve import model_fingerprint

    assert model_fingerprint(str(model)) == old_model(model)


def test_parameters_fingerprint_is_the_one_before_the_move():
    import torch

    from spar.lexical.projection import ProjectionLambda
    from spar.model.embeddings import parameters_fingerprint

    module = torch.nn.Sequential(torch.nn.Linear(300, 7), torch.nn.Linear(7, 2))
    torch.manual_seed(0)
    old = hashlib.sha256()
    with torch.no_grad():
        for name, param in module.named_parameters():
            flat = param.detach().reshape(-1)
            old.update(name.encode())
            old.update(flat[::max(1, flat.numel() // 64)][:64].float().cpu().numpy().tobytes())
    assert parameters_fingerprint(module) == old.hexdigest()[:16]
    assert len(parameters_fingerprint(ProjectionLambda.fit(["a b", "b c"], dim=8))) == 16


# ----------------------------------------------------------------------------------------------------------------
# Run paths
# ----------------------------------------------------------------------------------------------------------------


def test_run_paths_have_one_owner():
    """Artifact paths come from RunContext (over core/artifacts.py's LAYOUT), not from paths joined by hand."""
    assert _importers("*:artifact_dir", roots=("spar", "pipelines", "bench")) == {"spar/core/run_context.py"}
    assert _users(r"[\"']passages\.arrow[\"']", ("spar", "pipelines")) == {"spar/core/artifacts.py"}
    # Folders named like artifacts that are not a run's: a model directory's own index/ (publish.copy_index), the
    # bundled models' package folders, a temporary BM25 index.
    assert _users(r"/ [\"'](?:queries|labels|lambda|tune|index|model|frontier|wandb|teacher_index)[\"']",
                  ("spar", "pipelines")) == {"spar/publish/model_dir.py", "spar/publish/search.py",
                                             "pipelines/summary.py", "spar/model/resolve.py",
                                             "spar/experiment/inputs.py"}


def test_the_run_context_names_every_artifact(tmp_path):
    from spar.core.artifacts import LAYOUT
    from spar.core.config import load_config
    from spar.core.run_context import RunContext, published_model_dir

    cfg = load_config(None, [f"experiment.output_dir={tmp_path}"])
    run = RunContext(cfg)
    assert {name: run.artifact(name) for name in LAYOUT} == {name: tmp_path / name for name in LAYOUT}
    assert run.passages == tmp_path / "queries" / "passages.arrow" and published_model_dir(cfg) == tmp_path / "model"
    cfg.publish.output = str(tmp_path / "elsewhere")
    assert published_model_dir(cfg) == tmp_path / "elsewhere"
    assert RunContext.at(tmp_path).artifact("lambda") == tmp_path / "lambda"


# ----------------------------------------------------------------------------------------------------------------
# The index's files
# ----------------------------------------------------------------------------------------------------------------


def test_the_index_files_are_named_by_the_index_package_only():
    """index.faiss / index.json are read through spar/index/ (SparIndex, spar.index.files); ids.arrow, the file of
    schemas.EMBEDDING_IDS rows (an index's and an embeddings split's), is named beside its schema."""
    assert _users(r"[\"']index\.(?:faiss|json)[\"']") == {"spar/index/files.py"}
    assert _users(r"[\"']ids\.arrow[\"']", ("spar", "pipelines", "bench")) == {"spar/core/schemas.py"}
    assert _importers("*:INDEX_FILE", "*:INDEX_MANIFEST") <= {"spar/index/spar_index.py", "spar/publish/search.py"}
    assert _importers("*:IDS_FILE") <= {"spar/index/files.py", "spar/index/spar_index.py", "spar/model/embeddings.py",
                                        "spar/model/stored_vectors.py"}


def test_the_model_and_tune_files_are_named_once():
    """spar_model.json is spar.publish.model_dir.MODEL_CONFIG and tune.json spar.evaluate.tuning.TUNE_FILE: no other
    code spells either."""
    roots = ("spar", "pipelines", "bench")
    assert _users(r"[\"']spar_model\.json[\"']", roots) == {"spar/publish/model_dir.py"}
    assert _users(r"[\"']tune\.json[\"']", roots) == {"spar/evaluate/tuning.py"}


def test_refreshing_search_options_keeps_the_index_up_to_date(tmp_path):
    from spar.core.artifacts import ArtifactWriter, changed_files, read_manifest
    from spar.index.files import index_info, refresh_search_params
    from spar.index.spar_index import SparIndex

    with ArtifactWriter(tmp_path / "index", kind="index", config={}, inputs={}) as w:
        SparIndex.build(np.eye(8, dtype="float32"), np.eye(8, dtype="float32"), index_type="hnsw").save(w.path)
        w.stats = {"options": {}}
    assert refresh_search_params(tmp_path / "index", {"hnsw_ef_search": 17}) == ["hnsw_ef_search 256 -> 17"]
    assert refresh_search_params(tmp_path / "index", {"hnsw_ef_search": 17}) == []
    assert index_info(tmp_path / "index")["options"]["hnsw_ef_search"] == 17
    assert read_manifest(tmp_path / "index")["stats"]["options"]["hnsw_ef_search"] == 17
    assert changed_files(tmp_path / "index", content=True) == []
    assert SparIndex.load(tmp_path / "index").index.hnsw.efSearch == 17


# ----------------------------------------------------------------------------------------------------------------
# Names written once: Λ kinds, storages, variants, index types, projections
# ----------------------------------------------------------------------------------------------------------------


def test_the_names_are_written_once_in_the_config():
    """The config's Literals are the lists; no other module spells one of them out as a Literal or a tuple."""
    listed = {"LambdaKind": ("transformer", "projection", "static"), "Variant": ("concat", "sum"),
              "Storage": ("float32", "float16", "sq8", "sq6", "sq4", "fs4", "fs2", "pq"),
              "INDEX_TYPES": ("flat", "hnsw", "ivf", "ivfpq"), "Projection": ("gaussian", "countsketch", "sparse")}
    found = {}
    for name, values in listed.items():
        spelled = r",\s*".join(f"[\"']{v}[\"']" for v in values)  # the whole list, in order
        users = _users(spelled) - {"spar/core/config_sections.py"}
        if name == "Variant":  # the module shipped in published models must load without spar (a mirror)
            users -= {"spar/lexical/st_modules.py"}
        if users:
            found[name] = sorted(users)
    assert not found, found


def test_the_lambda_registry_is_the_config_kinds():
    from typing import get_args

    from spar.core.config import LambdaKind, LambdaSourceSection, TrainSection
    from spar.lexical import lambda_class
    from spar.lexical.base import KINDS, REGISTRY

    assert KINDS == get_args(LambdaKind) and set(REGISTRY) == set(KINDS)
    for kind in KINDS:
        assert lambda_class(kind).kind == kind
    assert TrainSection.model_fields["kind"].annotation is LambdaKind
    assert get_args(LambdaSourceSection.model_fields["kind"].annotation)[0] is LambdaKind


def test_every_storage_of_the_config_has_its_codec():
    from typing import get_args

    from spar.core.config import IndexSection, Storage
    from spar.index.storage import BITS, FAST_SCAN, STORAGES, code_bytes, describe, factory_component

    assert STORAGES == get_args(Storage) and IndexSection.model_fields["storage"].annotation is Storage
    assert set(BITS) | set(FAST_SCAN) | {"pq"} == set(STORAGES) and not set(BITS) & set(FAST_SCAN)
    for storage in STORAGES:
        assert code_bytes(storage, 384) > 0 and factory_component(storage, dim=384) and describe(storage, 384)


# ----------------------------------------------------------------------------------------------------------------
# One variant setting
# ----------------------------------------------------------------------------------------------------------------


def test_one_variant_setting_and_the_old_key_read_with_a_warning():
    from spar.core.config import load_config
    from spar.core.errors import ConfigError

    assert "variant" not in load_config(None).tune.model_fields_set and not hasattr(load_config(None).tune, "variant")
    with pytest.warns(FutureWarning, match="config key tune.variant is deprecated .* it is index.variant now"):
        cfg = load_config(None, ["tune.variant=sum"])
    assert cfg.index.variant == "sum"
    with pytest.warns(FutureWarning):
        assert load_config(None, ["tune.variant=sum", "index.variant=sum"]).index.variant == "sum"
    with pytest.raises(ConfigError, match="tune.variant='sum' and index.variant='concat'"
                                                   ": tune.variant is deprecated and is index.variant now"):
        load_config(None, ["tune.variant=sum", "index.variant=concat"])


def test_the_tune_fingerprint_settings_are_those_recorded_before_the_move():
    """tune's (and the frontier's) fingerprint records the tune section with the variant in it, as a run of the
    embedded default made before the move recorded it (its tune/manifest.json: config.tune)."""
    from spar.core.config import load_config
    from spar.experiment.declarations import tune_section

    recorded_before = {"metric": "nDCG@10", "variant": "concat", "grid": None, "candidates": None,
                       "max_extensions": 4, "hybrid_alphas": None, "hybrid_normalize": False,
                       "tune_both_variants": True, "confirm": True}
    assert tune_section(load_config(None)) == recorded_before
    assert tune_section(load_config(None, ["index.variant=sum"]))["variant"] == "sum"


# ----------------------------------------------------------------------------------------------------------------
# Which Λ, and μ
# ----------------------------------------------------------------------------------------------------------------


def test_a_lambda_is_opened_by_the_one_resolver():
    """Outside the Λ package, only the resolver opens a Λ directory or reads its config: encode, evaluate's fresh
    queries, publish and the frontier (the run's own Λ) all go through spar/experiment/lambda_source.py; an
    experiment's Λ is resolved once, by spar/experiment/plan.py's Experiment, which encode, tune, evaluate (their
    inputs) and publish ask."""
    users = _importers("*:load_lambda", "*:read_lambda_config")
    assert {u for u in users if not u.startswith("spar/lexical/")} == {"spar/experiment/lambda_source.py"}
    resolvers = _importers("spar.experiment.lambda_source:run_lambda", "spar.experiment.lambda_source:resolve_lambda")
    assert "spar/experiment/plan.py" in resolvers
    # The frontier's run's own Λ is the Experiment's (Experiment.own_lambda), as every stage's Λ is.
    assert not {u for u in resolvers if u.startswith("spar/sweep/") or u == "pipelines/frontier.py"}
    assert _importers("spar.experiment.plan:Experiment") >= {
        "pipelines/encode.py", "pipelines/publish.py", "pipelines/tune.py", "spar/experiment/inputs.py",
        "pipelines/frontier.py"}


def test_mu_is_chosen_in_one_place():
    """μ is chosen by spar.evaluate.tuning.choose_mu (tune's settings): spar tune and every frontier point."""
    assert _importers("*:tune_mu") == set()  # defined and called in spar/evaluate/tuning.py only
    text = _without_docstrings(SPAR / "evaluate" / "tuning.py")
    callers = [node.name for node in ast.walk(ast.parse(text)) if isinstance(node, ast.FunctionDef)
               and any(isinstance(c, ast.Call) and getattr(c.func, "id", None) == "tune_mu" for c in ast.walk(node))]
    assert callers == ["choose_mu"]
    assert _importers("*:choose_mu") == {"spar/sweep/frontier.py"}
