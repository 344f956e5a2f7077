"""Each artifact of an experiment, declared once: where it goes, the settings its fingerprint hashes and what it is
made from (:mod:`spar.core.dependency`), as :meth:`spar.experiment.plan.Experiment.artifact` hands it out.

A stage's plan turns the declaration into the runner's unit (:meth:`spar.core.stage.Declared.unit`); the runner
derives the checks, the input fingerprints and the lineage from the dependencies. Settings and input keys are those
the drivers wrote by hand before (the embedded default's fingerprints are pinned by ``tests/test_declarations.py``
from a run of that code), so runs made before stay up to date.

Example::

    >>> from spar.core.config import load_config
    >>> from spar.experiment.plan import Experiment
    >>> declared = Experiment(load_config(None)).artifact("queries")
    >>> declared.kind, declared.output.name, [need.key for need in declared.needs]
    ('queries', 'queries', ['corpus'])
    >>> split = Experiment(load_config(None)).artifact("embeddings/base/queries-test")
    >>> split.output.parts[-3:], split.settings["side"], [need.key for need in split.needs]
    (('embeddings', 'base', 'queries-test'), 'query', ['queries', 'queries_file', None, None])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from spar.core.dependency import Dependency, artifact, computed, file, file_set
from spar.core.run_context import ENCODERS
from spar.core.stage import Declared, settings

#: :class:`spar.experiment.plan.Experiment`, which imports this module (the declarations take it, never import it).
Experiment = Any

#: The question-set options that change what tune computes, and what evaluate reports.
TUNE_SET_OPTIONS = ("answer_match", "dev_sample", "own_mu")
EVALUATE_SET_OPTIONS = ("answer_match", "own_mu")


def queries(experiment: Experiment) -> Declared:
    """``queries/`` (sample): the corpus's sentences and its passages table. ``experiment.on_bad_record`` is not a
    setting: for one corpus a successful run writes the same output either way (a record ``skip`` drops is one
    ``fail`` stops on); the records skipped are counted in its manifest. Its content is verified: an edited passages
    table is not up to date (#48)."""
    from spar.data.readers import corpus_files, corpus_fingerprint

    cfg, corpus = experiment.cfg, experiment.data.corpus
    files = corpus_files(corpus)
    fingerprint = corpus_fingerprint(corpus)
    config = {"sample": settings(cfg.sample), "seed": experiment.seed, "corpus": fingerprint,
              "format": experiment.data.corpus_format}
    where = files[0] if len(files) == 1 else files[0].parent
    return Declared(experiment.run.artifact("queries"), "queries", config,
                    [file_set("corpus", where, fingerprint, files)], verify_content=True)


def _sampled(experiment: Experiment) -> Dependency:
    """``queries/`` as the stages after sample read it: by rows (labels and Λ point at rows of its passages table),
    so its content must be the one sample wrote, not only its size."""
    return artifact("queries", experiment.run.artifact("queries"), "queries", unchanged=True)


def teacher_index(experiment: Experiment) -> Declared:
    """``teacher_index/`` (label): the teacher's index of the passages table, identified by the passages'
    fingerprint sample recorded (the table's own for a run made before it did)."""
    from spar.core.artifacts import read_manifest
    from spar.core.fingerprint import file_fingerprint

    passages = experiment.run.passages
    qdir = experiment.run.artifact("queries")

    def recorded() -> str:
        return read_manifest(qdir).get("stats", {}).get("passages_fingerprint") or file_fingerprint(passages)

    table = Dependency("passages", passages, "file", value=recorded)
    return Declared(experiment.run.artifact("teacher_index"), "teacher_index", experiment.teacher.index_settings(),
                    [_checked_only(_sampled(experiment)), table])


def _checked_only(need: Dependency) -> Dependency:
    """``need`` checked before use but neither fingerprinted nor recorded (what its artifact reads of it is)."""
    return Dependency(None, need.path, need.of, need.kind, need.unchanged, need.optional, need.missing,
                      records=lambda: [])


def labels(experiment: Experiment) -> Declared:
    """``labels/`` (label): the teacher's positives and negatives of every sampled query; resumable by shard on one
    machine (``label.num_shards`` parts are the label stage's)."""
    section = experiment.cfg.label
    return Declared(experiment.run.artifact("labels"), "labels", experiment.teacher.label_settings(),
                    [_sampled(experiment),
                     artifact("teacher_index", experiment.run.artifact("teacher_index"), "teacher_index")],
                    resumable=section.num_shards == 1)


def lambda_(experiment: Experiment) -> Declared:
    """``lambda/`` (train): every train option but the runtime-only ones, the seed and the fields; a term-based kind
    carries the teacher's statistics. A fitted kind needs the passages only, a trainable one the labels too. Its
    content is verified (an edited ``vocab.txt`` is not up to date); resumable from its last checkpoint."""
    from spar.lexical import lambda_class

    cfg = experiment.cfg
    kind = lambda_class(cfg.train.kind)
    config = {"train": kind.fingerprint_settings(settings(cfg.train)), "seed": experiment.seed,
              "title_field": experiment.data.title_field}
    if kind.term_based:
        config["teacher"] = {"k1": cfg.label.k1, "b": cfg.label.b, "fields": list(cfg.label.fields)}
    needs = [_sampled(experiment)]
    if kind.trainable:
        needs.append(artifact("labels", experiment.run.artifact("labels"), "labels", unchanged=True))
    return Declared(experiment.run.artifact("lambda"), "lambda", config, needs, resumable=True, verify_content=True)


def embeddings(experiment: Experiment, encoder: str, split: str) -> Declared:
    """``embeddings/<encoder>/<split>/`` (encode): one split's vectors, ``passages`` or a question split's
    ``queries-<key>``. Made from what is encoded (the passages' file(s); a question split's questions, by content,
    and its questions file) and the encoder (its origin recorded; a Λ's description as an input value). Its settings
    here are the encoder's name, the side, the shard size and the dtype;
    :func:`spar.model.embeddings.declared_unit` adds what the loaded encoder decides (its vectors' fingerprint,
    their precision, dropped titles). Resumable by shard."""
    from spar.core.fingerprint import fingerprint_dict
    from spar.data.readers import corpus_files, corpus_fingerprint

    run, section = experiment.run, experiment.cfg.encode
    spec = experiment.encoder(encoder)
    origin = computed(None, spec.location, spec.weights, lambda: spec.sources)  # in the vectors' fingerprint
    if split == "passages":
        passages = experiment.passages
        if isinstance(passages, Path) and passages.suffix == ".arrow":
            read = [file("passages", passages)]
        else:  # no sample stage: the corpus file(s)
            read = [file_set("passages", passages if isinstance(passages, Path) else passages[0].parent,
                             lambda: corpus_fingerprint(passages), corpus_files(passages))]
        side = "passage"
    else:
        question = experiment.question_split(split.removeprefix("queries-"))
        content = Dependency("queries", Path(question.files[question.split]), "files",
                             value=lambda: fingerprint_dict(question.pairs(), ascii_only=False), records=lambda: [])
        read = [content, *(file("queries_file" if option == question.split else None, path)
                           for option, path in question.files.items())]
        side = "query"
    config = {"encoder": encoder, "side": side, "shard_size": section.shard_size, "dtype": section.dtype}
    return Declared(run.embeddings(encoder, split), "embeddings", config, [*read, origin], dict(spec.inputs),
                    resumable=True)


def index(experiment: Experiment, fold: float = 1.0) -> Declared:
    """``index/`` (index): the passage vectors of both encoders and the seed; an index with Λ's half folded by μ₀
    (``fold``, the tuned μ: :mod:`spar.index.approximate`) also μ₀, and is made from ``tune/`` (a flat index, and one
    made before folding, keep their fingerprints)."""
    run = experiment.run
    needs = [artifact(key, run.embeddings(key), "embeddings",
                      missing=f"{run.embeddings(key)}: passage embeddings are missing (run `spar encode`)")
             for key in ("base", "lambda")]
    values = {"seed": str(experiment.seed)}
    if fold != 1.0:
        values["fold"] = repr(fold)
        needs.append(artifact(None, run.artifact("tune"), "tune"))
    return Declared(run.artifact("index"), "index", settings(experiment.cfg.index), needs, values)


def tune_section(cfg: Any) -> dict[str, Any]:
    """The ``tune`` section as fingerprints record it: its options, and the variant μ is tuned for (``index.variant``)
    under the key ``variant``, where ``tune.variant`` kept it before spar 0.2
    (:data:`spar.core.legacy_spellings.PRE_0_2`)."""
    from spar.core.legacy_spellings import old_section_settings

    return {**settings(cfg.tune), **old_section_settings("tune", lambda key: _dotted(cfg, key))}


def _dotted(cfg: Any, key: str) -> Any:
    """The config's value of a dotted key (``index.variant``)."""
    value = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


def _vectors(experiment: Experiment, keys: list[str]) -> list[Dependency]:
    """What scoring questions of the splits ``keys`` reads: both encoders' passage vectors (required), their stored
    vectors of those splits (when encoded), and Λ itself (its content fingerprint and origin)."""
    run, needs = experiment.run, []
    for name in ENCODERS:
        passages = run.embeddings(name)
        needs.append(artifact(f"{name}/passages", passages, "embeddings",
                              missing=f"{passages}: passage embeddings of '{name}' are missing (run `spar encode`)"))
        needs += [artifact(f"{name}/queries-{key}", run.embeddings(name, f"queries-{key}"), "embeddings", optional=True)
                  for key in keys]
    source = experiment.lambda_source
    return [*needs, computed("lambda", source.location, source.fingerprint, source.sources)]


def tune(experiment: Experiment) -> Declared:
    """``tune/`` (tune): μ and α on the dev questions, from the dev splits' vectors, their question files (keys as
    before spar 0.2: :meth:`spar.experiment.plan.Experiment.question_files`) and, when labelled, the teacher's index
    (BM25 for α); its settings say which passages' codes μ is tuned on (``served_passages``)."""
    cfg = experiment.cfg
    needs = [*_vectors(experiment, experiment.dev_pool_keys()),
             *(file(key, path) for key, path in experiment.question_files("dev").items()),
             artifact("teacher_index", experiment.run.artifact("teacher_index"), "teacher_index", optional=True)]
    config = {"tune": tune_section(cfg), "bm25": {"k1": cfg.label.k1, "b": cfg.label.b}, "seed": experiment.seed,
              "served_passages": experiment.index_options.scored_codec(cfg.index.type), **experiment.holdout_setting(),
              **experiment.set_settings(TUNE_SET_OPTIONS)}
    return Declared(experiment.run.artifact("tune"), "tune", config, needs)


def evaluation(experiment: Experiment) -> Declared:
    """``evaluation/`` (evaluate): the test splits' vectors, μ and the index when there (and the teacher's index for
    BM25), every set's test files and answers, the published figures it prints; its settings name the results files
    (``results``) and, for an approximate index, the search-time settings it is served with. Resumable: each set's
    progress is saved chunk by chunk (hours at 663k)."""
    from spar.core.config_sections import EXHAUSTIVE_INDEX_TYPES
    from spar.index.files import search_settings

    cfg, run = experiment.cfg, experiment.run
    needs = [*_vectors(experiment, experiment.test_split_keys()),
             *(artifact(name, run.artifact(name), name, optional=True) for name in ("tune", "index", "teacher_index")),
             *(file(key, path) for key, path in experiment.question_files("test").items())]
    if cfg.evaluate.published:  # the results print it: another file, other results
        needs.append(file("published", cfg.evaluate.published))
    from spar.data.question_sets import evaluate_settings

    paths = run.results_paths()
    config = {"evaluate": evaluate_settings(cfg.evaluate, experiment.sets),
              "candidates": cfg.tune.candidates, "hybrid_normalize": cfg.tune.hybrid_normalize,
              "bm25": {"k1": cfg.label.k1, "b": cfg.label.b}, **experiment.holdout_setting(),
              "seed": experiment.seed, "results": str(paths[0])}
    sets = experiment.set_settings(EVALUATE_SET_OPTIONS)
    if sets:
        config.update(results=[str(p) for p in paths], **sets)
    if cfg.index.type not in EXHAUSTIVE_INDEX_TYPES:
        config["search"] = search_settings(cfg.index)
    return Declared(run.artifact("evaluation"), "evaluation", config, needs, resumable=True)


def model(experiment: Experiment, tuned: Path | None = None) -> Declared:
    """``model/`` (publish; ``publish.output`` when set): Λ, μ (``tuned``: ``tune/``'s weights file, read above the
    experiment), the index (its ``index.json``), the base model, and the results its card quotes when they are
    there. Upload settings and where it is written are not settings (the directory's contents do not change with
    them). Its content is verified: a weight file damaged in place is not up to date (#48)."""
    from spar.core.fingerprint import file_fingerprint
    from spar.core.lineage import source
    from spar.index.files import index_fingerprint
    from spar.model.resolve import model_fingerprint, model_sources

    cfg, run = experiment.cfg, experiment.run
    if tuned is None:
        raise ValueError("the model's declaration takes tune/'s weights file (tuned=...)")
    base, index_dir, results_md = cfg.encode.base, run.artifact("index"), run.results[1]
    lam = experiment.lambda_source
    needs = [computed("lambda", lam.location, lam.fingerprint, lam.sources),
             # μ's file and the index's index.json, each recorded as what its directory is (an index saved by
             # SparIndex.save, without a manifest, is read as its files); publish checks both itself first.
             computed("tune", tuned.parent, lambda: file_fingerprint(tuned), lambda: [source(tuned.parent)]),
             computed("index", index_dir, lambda: index_fingerprint(index_dir), lambda: [source(index_dir)]),
             computed("base_model", base.model, lambda: model_fingerprint(base.model),
                      lambda: model_sources(base.model, base.passage_model)),
             Dependency("results", results_md, "file", optional=True, records=lambda: []),
             artifact(None, run.artifact("evaluation"), "evaluation", optional=True)]  # the card quotes its results
    publish = {k: v for k, v in settings(cfg.publish).items() if k != "output"}
    config = {"publish": publish, "base": settings(base)}
    return Declared(experiment.model_dir, "model", config, needs, verify_content=True)


#: Every declared artifact, by the name :meth:`spar.experiment.plan.Experiment.artifact` takes.
DECLARATIONS: dict[str, Callable[..., Declared]] = {
    "queries": queries, "teacher_index": teacher_index, "labels": labels, "lambda": lambda_, "tune": tune,
    "index": index, "evaluation": evaluation, "model": model,
}


def declared(experiment: Experiment, name: str, **values: Any) -> Declared:
    """The artifact ``name`` of ``experiment`` (``embeddings/<encoder>/<split>`` for a split's vectors);
    ``values``: what the declaration takes from a layer above the experiment (the index's μ₀, read from ``tune/``)."""
    parts = name.split("/")
    if len(parts) == 3 and parts[0] == "embeddings" and parts[1] in ENCODERS:
        return embeddings(experiment, parts[1], parts[2], **values)
    if name not in DECLARATIONS:
        raise KeyError(f"no declared artifact {name!r}; declared: {sorted(DECLARATIONS)} and "
                       "embeddings/<encoder>/<split>")
    return DECLARATIONS[name](experiment, **values)

