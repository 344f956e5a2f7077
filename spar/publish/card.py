"""The model card of a published SPAR model (``README.md``): its facts, gathered from a run, and their rendering.

:func:`gather_card_facts` collects what a run knows (config, tuning record, input manifests, the published Λ's
kind and origin) into :class:`ModelCardFacts`; :func:`render_model_card` writes the Hugging Face card (YAML front
matter, how to load and search, what Λ is and how it was trained, how μ was chosen, the evaluation table).

Example::

    >>> from spar.publish.card import ModelCardFacts, render_model_card
    >>> card = render_model_card(ModelCardFacts(name="demo", base_model="all-MiniLM-L6-v2", base_pooling="mean",
    ...     base_normalize=True, lambda_init="projection Λ", lambda_pooling="term bag", lambda_normalize=False,
    ...     variant="concat", mu=0.5, dim=768, lambda_from_model=False))
    >>> card.startswith("---") and "base_model: sentence-transformers/all-MiniLM-L6-v2" in card
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from spar.core.config_search import PublishSection
from spar.core.config_sections import EncoderSection, QuestionSetSection
from spar.lexical.card import RunFacts

KNOWN_LICENSES = {"all-minilm-l6-v2": "apache-2.0", "sentence-transformers/all-minilm-l6-v2": "apache-2.0"}
KNOWN_HUB_IDS = {"all-minilm-l6-v2": "sentence-transformers/all-MiniLM-L6-v2"}


@dataclass
class ModelCardFacts:
    """What the model card says; :func:`render_model_card` turns it into ``README.md``."""

    name: str
    base_model: str
    base_pooling: str
    base_normalize: bool
    lambda_init: str
    lambda_pooling: str
    lambda_normalize: bool
    variant: str
    mu: float
    dim: int
    license: str = "apache-2.0"
    #: Whether ``lambda_init`` names a model Λ was initialised from (a hub id: the card's ``base_model``).
    lambda_from_model: bool = True
    base_license: str | None = None
    data_license: str | None = None
    dataset: str | None = None
    teacher: str = "bm25"
    teacher_details: str = ""
    training_queries: int | None = None
    dev_queries: int | None = None
    sampling: str = ""
    k: int | None = None
    n_positives: int | None = None
    n_negatives: int | None = None
    train_details: dict[str, Any] = field(default_factory=dict)
    #: Set when Λ was trained elsewhere (``encode.lambda``):
    # :meth:`spar.experiment.lambda_source.LambdaSource.describe`.
    lambda_source: dict[str, Any] | None = None
    tune_metric: str | None = None
    tune_grid: list[float] | None = None
    tune_scores: dict[str, float] | None = None
    tune_split: str | None = None
    tune_confirmed: float | None = None
    evaluation_markdown: str | None = None
    command: str | None = None
    config_yaml: str | None = None
    repo_id: str | None = None
    language: list[str] = field(default_factory=lambda: ["en"])
    #: How the run's passage vectors were made (:meth:`spar.core.run_context.RunContext.encoding`).
    encoding: dict[str, dict[str, str]] = field(default_factory=dict)
    #: ``results/<name>.json`` of the run (the card's ``model-index``).
    results: dict[str, Any] | None = None


def _hub_id(model: str) -> str:
    return KNOWN_HUB_IDS.get(model.strip().lower(), model)


def _yaml_front_matter(f: ModelCardFacts) -> str:
    import yaml

    meta: dict[str, Any] = {
        "library_name": "sentence-transformers",
        "pipeline_tag": "sentence-similarity",
        "license": f.license,
        "tags": ["sentence-transformers", "sentence-similarity", "feature-extraction", "dense-retrieval", "spar",
                 "lexical-matching", f"teacher-{f.teacher}"],
    }
    base_ids = list(dict.fromkeys([_hub_id(f.base_model)] + ([_hub_id(f.lambda_init)]
                                                             if f.lambda_from_model else [])))
    if all(not Path(b).exists() for b in base_ids):  # local paths are not hub ids: leave them out of metadata
        meta["base_model"] = base_ids[0] if len(base_ids) == 1 else base_ids
    if f.dataset:
        meta["datasets"] = [f.dataset]
    if f.language:
        meta["language"] = list(f.language)
    model_index = _model_index(f)
    if model_index:
        meta["model-index"] = model_index
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n"


def _metric_type(measure: str) -> str:
    """``nDCG@10`` -> ``ndcg_at_10``, ``Acc@20`` -> ``acc_at_20`` (the hub's metric type spelling)."""
    return measure.lower().replace("@", "_at_").replace(" ", "_")


def _model_index(f: ModelCardFacts) -> list[dict[str, Any]]:
    """The hub's ``model-index``: SPAR's test figures per evaluated set, from the run's results file."""
    if not f.results:
        return []
    sets = f.results.get("sets") or {"": f.results}
    entries = []
    for name, report in sets.items():
        values = (report.get("systems") or {}).get("spar") or {}
        if not values:
            continue
        dataset = f.dataset or str(report.get("dataset", f.name)).split(":")[0]
        entries.append({
            "task": {"type": "text-retrieval", "name": "Retrieval"},
            "dataset": {"name": f"{dataset} ({name})" if name else dataset, "type": dataset, "split": "test"},
            "metrics": [{"type": _metric_type(m), "value": round(float(v), 4), "name": m} for m, v in values.items()
                        if isinstance(v, (int, float))]})
    return [{"name": f.name, "results": entries}] if entries else []


def _precision_paragraph(f: ModelCardFacts) -> list[str]:
    """What the card says of the precision the index was encoded in, and what it means for scores."""
    if not f.encoding:
        return []
    from spar.core.run_context import describe_encoding

    mixed = any(v.get("precision") != "32" for v in f.encoding.values())
    text = (f"The evaluation's index was encoded with {describe_encoding(f.encoding)}. This model encodes in fp32 "
            "unless asked otherwise. ")
    text += ("Passages encoded in bf16 (`encode.precision: auto` on a CPU with AMX or AVX-512 BF16, or a GPU) score "
             "within about 1e-2 of their fp32 vectors, which moves rankings and results in the third decimal: "
             "encode with `encode.precision=32` (`spar index --model ... encode.precision=32`) to reproduce fp32 "
             "figures exactly." if mixed else
             "Vectors encoded in bf16 elsewhere (`encode.precision: auto` on a CPU with AMX or AVX-512 BF16, or a "
             "GPU) score within about 1e-2 of these, which can move results in the third decimal.")
    return ["", "## Precision", "", text]


def _demote_headings(markdown: str, levels: int = 2) -> str:
    """Push markdown headings down so an embedded report nests under the card's own sections."""
    return "\n".join("#" * levels + line if line.startswith("#") else line for line in markdown.splitlines())


def render_model_card(f: ModelCardFacts) -> str:
    """A Hugging Face model card (YAML metadata + markdown) stating how the model was built and how to use it."""
    repo = f.repo_id or "path/to/model"
    lines = [_yaml_front_matter(f), f"# SPAR: {f.name}", ""]
    lines += [
        "A **SPAR** retriever (Chen et al., *Salient Phrase Aware Dense Retrieval: Can a Dense Retriever Imitate a "
        "Sparse One?*, Findings of EMNLP 2022): a base dense retriever combined with a dense *lexical model* Λ "
        f"trained to imitate the sparse teacher ({f.teacher}). "
        + ("Queries are encoded as `[Q(q), μ·QΛ(q)]` and passages as `[P(p), PΛ(p)]`, so one inner-product search "
           "scores exactly `sim(q, p) + μ·simΛ(q, p)`." if f.variant == "concat" else
           "Queries are encoded as `Q(q) + μ·QΛ(q)` and passages as `P(p) + PΛ(p)` (the 'sum' variant: half the "
           "index size; its inner product approximates `sim + μ·simΛ` up to cross terms).")
        + f" μ = **{f.mu:g}**, dimension {f.dim}.",
        "",
        "## Usage",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        f'model = SentenceTransformer("{repo}", trust_remote_code=True)  # spar_modules.py: the combination module',
        'q = model.encode_query(["what causes scurvy"])',
        '# (title, text) pairs are encoded "title [SEP] text", as in training; plain strings work too',
        'p = model.encode_document([("Scurvy", "Scurvy is caused by a lack of vitamin C.")])',
        "scores = model.similarity(q, p)  # dot product = sim + mu * sim_lambda",
        "```",
        "",
        "`trust_remote_code=True` runs `spar_modules.py` from this directory: the module that combines the two "
        "encoders (and, for a term-based Λ, its analyzer: `spar_analysis.py`, `spar_random_tables.py`). Read it "
        "before you trust it. With spar installed, `spar.lexical.st_modules.load_sentence_transformer(path)` builds "
        "the same `SentenceTransformer` from spar's installed code instead, without `trust_remote_code`.",
        "",
        "Queries and passages are encoded by different sides: `model.encode(text)` without `task=` is refused "
        "(sentence-transformers' own error); use `encode_query` and `encode_document`.",
        "",
        "With spar installed (no `trust_remote_code`; passages as `(title, text)` pairs are encoded "
        "`title [SEP] text`, exactly as in training):",
        "",
        "```python",
        "from spar.publish.model_dir import SparEncoder",
        "",
        f'enc = SparEncoder.from_pretrained("{repo}")          # or mu=... to override the tuned mu',
        'q = enc.encode_queries(["what causes scurvy"])',
        'p = enc.encode_passages([("Scurvy", "Scurvy is caused by a lack of vitamin C.")])',
        "```",
        "",
        "Each transformer encoder is also a plain Hugging Face model: `AutoModel.from_pretrained(path, "
        "subfolder=\"base\")` (an encoder whose query and document sides share weights is stored once, in `base/` "
        "or `lambda/`; otherwise in `query/<name>` and `document/<name>`: each route's `spar_combination.json` says "
        "where).",
        "",
        "## Components",
        "",
        "| part | model | pooling | normalised | licence |",
        "|---|---|---|---|---|",
        f"| base retriever | {_hub_id(f.base_model)} | {f.base_pooling} | {f.base_normalize} | "
        f"{f.base_license or 'see its model card'} |",
        f"| lexical model Λ (initialised from) | {_hub_id(f.lambda_init)} | {f.lambda_pooling} | "
        f"{f.lambda_normalize} | "
        f"{KNOWN_LICENSES.get(f.lambda_init.strip().lower(), 'see its model card')} |",
        f"| training data | {f.dataset or 'see the config below'} | | | "
        f"{f.data_license or 'not stated (set publish.data_license)'} |",
        "",
        f"This model is released under `{f.license}`; the training data's licence above also applies to "
        "what was learnt from it.",
        "",
        "## Training Λ",
        "",
    ]
    if f.lambda_source and f.lambda_source.get("origin") != "run":
        src = f.lambda_source
        statistics = ("its training corpus's BM25 statistics (carried)" if src.get("statistics") == "carried" else
                      f"BM25 statistics refitted on `{src.get('statistics_from')}` (target)")
        lines.append(f"- Λ was trained in another experiment and reused here unchanged (SPAR: one Λ, any corpus and "
                     f"base): `{src.get('spec')}` ({src.get('origin')}, {src.get('kind')}, dim {src.get('dim')}, "
                     f"fingerprint `{src.get('fingerprint')}`), with {statistics}. The README.md in that directory "
                     "describes its teacher and training data.")
        f = replace(f, training_queries=None, k=None, train_details={})
    else:
        lines.append(f"- Teacher: {f.teacher}{(' — ' + f.teacher_details) if f.teacher_details else ''}.")
    if f.training_queries is not None:
        dev = f" (+ {f.dev_queries:,} dev queries for validation)" if f.dev_queries else ""
        lines.append(f"- Training queries: {f.training_queries:,} sentences sampled from the corpus{dev}"
                     + (f"; sampling: {f.sampling}." if f.sampling else "."))
    if f.k is not None:
        lines.append(f"- Labels: the teacher's top K={f.k} hits per query; the top n_p={f.n_positives} are positives, "
                     f"n_n={f.n_negatives} hard negatives from the bottom of the window.")
    if f.train_details:
        lines.append("- Training: " + ", ".join(f"{k}={v}" for k, v in f.train_details.items()) + ".")
    lines += ["", "## Choosing μ", ""]
    if f.tune_metric:
        lines.append(f"μ = {f.mu:g} maximises {f.tune_metric} on the {f.tune_split or 'dev'} split over the grid "
                     f"{f.tune_grid}" + (f" (confirmed by a real search of the combined index: "
                                          f"{f.tune_confirmed:.4f})." if f.tune_confirmed is not None else "."))
        if f.tune_scores:
            lines += ["", "| μ | " + f.tune_metric + " |", "|---|---|"]
            lines += [f"| **{mu}** | **{score:.4f}** |" if float(mu) == f.mu else f"| {mu} | {score:.4f} |"
                      for mu, score in f.tune_scores.items()]
    else:
        lines.append(f"μ = {f.mu:g} (no tuning record found).")
    lines += ["", "## Evaluation", ""]
    lines.append(_demote_headings(f.evaluation_markdown.strip()) if f.evaluation_markdown else
                 "No evaluation results were found when this model was published (run `spar evaluate`).")
    lines += _precision_paragraph(f)
    if f.command or f.config_yaml:
        lines += ["", "## Reproduce", ""]
        if f.command:
            lines += ["This model was made by:", "", "```bash", f.command, "```", ""]
        if f.config_yaml:
            lines += ["The resolved configuration ships with the model; `spar run spar_config.yaml` re-runs every "
                      "stage with exactly these settings (data paths may need adjusting):", ""]
            lines += ["<details><summary>Resolved configuration (spar_config.yaml)</summary>", "", "```yaml",
                      f.config_yaml.rstrip(), "```", "", "</details>"]
    lines += ["", "## Citation", "", "```bibtex",
              "@inproceedings{chen-etal-2022-salient,",
              "  title = {Salient Phrase Aware Dense Retrieval: Can a Dense Retriever Imitate a Sparse One?},",
              "  author = {Chen, Xilun and Lakhotia, Kushal and O{\\u{g}}uz, Barlas and Gupta, Anchit and Lewis, "
              "Patrick and Peshterliev, Stan and Mehdad, Yashar and Gupta, Sonal and Yih, Wen-tau},",
              "  booktitle = {Findings of the Association for Computational Linguistics: EMNLP 2022},",
              "  year = {2022}", "}", "```", ""]
    return "\n".join(lines)



# ---------------------------------------------------------------------------------------------------------------
# The facts of a pipeline run
# ---------------------------------------------------------------------------------------------------------------




def _count(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value)
    return None


def gather_card_facts(run: RunFacts, base: EncoderSection, publish: PublishSection, tune_split: str | None,
                      encoder, tune: dict[str, Any], manifests: dict[str, dict[str, Any]], results_md: str | None,
                      command: str | None, config_yaml: str,
                      lambda_source: dict[str, Any] | None = None, encoding: dict[str, dict[str, str]] | None = None,
                      results: dict[str, Any] | None = None) -> ModelCardFacts:
    """Collect the model card's facts from what the run says of itself (``run``, the base encoder's and the publish
    sections, what μ was tuned on: :func:`tune_split`), the tuning record and the input manifests."""
    kind = encoder.lambda_.kind  # the published Λ's, not the config's
    lambda_facts = encoder.lambda_.card_facts(run.train)
    queries_stats = manifests.get("queries", {}).get("stats", {})
    train_stats = manifests.get("lambda", {}).get("stats", {})
    label, sample = run.label, run.sample
    sampling = sample.strategy + (f" (base {sample.exponential_base})" if sample.strategy == "wiki" else "")
    train_details = lambda_facts["train_details"]
    for key, label_ in (("steps", "steps"), ("best_valid_mrr", "best validation MRR")):
        value = train_stats.get(key)
        if value is not None and label_ not in train_details:
            train_details[label_] = round(value, 4) if isinstance(value, float) else value
    scores = tune.get("scores")
    return ModelCardFacts(
        name=run.experiment,
        base_model=base.model, base_pooling=base.pooling, base_normalize=base.normalize,
        lambda_init=f"{kind} Λ of {lambda_source.get('spec')}" if lambda_source and lambda_source.get("origin") != "run"
        else lambda_facts["lambda_init"],
        lambda_pooling=lambda_facts["lambda_pooling"], lambda_normalize=lambda_facts["lambda_normalize"],
        lambda_from_model=not encoder.lambda_.term_based,
        variant=encoder.variant, mu=encoder.mu, dim=encoder.dim,
        license=publish.license,
        base_license=publish.base_license or KNOWN_LICENSES.get(base.model.strip().lower()),
        data_license=publish.data_license, dataset=publish.dataset,
        teacher=label.teacher, teacher_details=run.teacher,
        training_queries=_count(queries_stats.get("queries_train")),
        dev_queries=_count(queries_stats.get("queries_dev")),
        sampling=sampling, k=label.k, n_positives=label.n_positives, n_negatives=label.n_negatives,
        train_details=train_details, lambda_source=lambda_source,
        tune_metric=tune.get("metric"), tune_grid=tune.get("grid"),
        tune_scores={str(k): float(v) for k, v in scores.items()} if isinstance(scores, dict) else None,
        tune_split=tune_split, tune_confirmed=tune.get("confirmed"),
        evaluation_markdown=results_md, command=command, config_yaml=config_yaml,
        repo_id=publish.push_to_hub, language=list(publish.language), encoding=dict(encoding or {}),
        results=results,
    )


def tune_split(pooled: Sequence[QuestionSetSection]) -> str | None:
    """What μ was tuned on, for the card, from the question sets it was tuned on (``pooled``): one set's dev qrels or
    its dev hold-out (None: several sets, or answers)."""
    qs = pooled[0] if len(pooled) == 1 else None
    if qs is not None and qs.qrels_dev:
        return f"dev qrels `{Path(qs.qrels_dev).name}`"
    if qs is not None and qs.dev_holdout_fraction:
        return f"a seeded {qs.dev_holdout_fraction:.0%} hold-out of the test queries (removed from reporting)"
    return None


def model_provenance(run: RunFacts, base_model: str, source, tune: dict[str, Any],
                     index_info: dict[str, Any]) -> dict[str, Any]:
    """What a published model records about how it was made (``spar_model.json``'s ``provenance``): the experiment,
    the base model, where Λ came from (``source``: :class:`~spar.experiment.lambda_source.LambdaSource`), the
    teacher, μ's tuning and the index's encoder fingerprints."""
    return {
        "experiment": run.experiment,
        "base_model": base_model,
        "lambda_init": run.train.encoder.model if source.origin == "run" else None,
        "lambda_source": source.describe(),
        "teacher": run.label.teacher,
        "tuning": {k: tune.get(k) for k in ("metric", "mu", "grid", "scores", "confirmed", "variant", "storage")},
        "index_fingerprints": {k: index_info.get(k) for k in ("base_fingerprint", "lambda_fingerprint")},
    }
