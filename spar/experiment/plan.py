"""One experiment, resolved once: what each stage's plan declares its artifacts over.

:class:`Experiment` is built from the config once per stage run (:meth:`Experiment.of`; ``spar run`` runs each stage
in its own process) and
works out, at most once each, what the drivers and the layers below used to re-derive from the raw config:

- its **run** (:class:`~spar.core.run_context.RunContext`) and the **passages** it encodes;
- its **question splits** (:class:`QuestionSplit`: set, split, embeddings key, the files it reads, its questions),
  the **dev pool** μ is tuned on and the **test splits** evaluate reports;
- its **Λ** (:attr:`Experiment.lambda_source`: ``encode.lambda`` or the run's ``lambda/``, found and checked once)
  and each **encoder** (:class:`EncoderPlan`: a picklable factory, its weights fingerprint, what its manifests
  record and its sources);
- its **teacher** (:mod:`spar.teacher.registry`) and **index options**;
- its **sections** (``name``, ``sample``, ``label``, ``train``, ``encode``, ``tune``, ``index``, ``evaluate``,
  ``publish``: typed, as the library objects that own them take them) and its **model directory**: the stage
  drivers read no setting off the config (``tests/test_driver_reads.py``);
- how fingerprints spell the question sets' files and options (unchanged since before spar 0.2:
  :mod:`spar.core.legacy_spellings`).

Below ``spar/experiment/`` functions take these typed parts (a set's section, the seed, a Λ source), never the config;
the functions of this module that take it (``dev_pool(cfg)``, ``test_splits(cfg)``, ...) are the entry points of
the layers above.

Example::

    >>> from spar.core.config import load_config
    >>> experiment = Experiment(load_config(None))
    >>> [(s.set, s.split, s.key, sorted(s.files)) for s in experiment.question_splits]
    [('default', 'dev', 'dev', ['dev', 'qrels_dev']), ('default', 'test', 'test', ['qrels_test', 'test'])]
    >>> sorted(experiment.question_files("dev"))
    ['qrels_dev', 'queries']
    >>> experiment.name, str(experiment.model_dir), experiment.label.teacher
    ('scifact-sample', 'runs/scifact-sample/model', 'bm25')
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Sequence

from spar.core.config_search import EvaluateSection, IndexSection, PublishSection, TuneSection
from spar.core.config_sections import EncodeSection, LabelSection, SampleSection, TrainSection
from spar.core.run_context import RunContext
from spar.data.question_sets import (SplitQueries, configured_splits, default_holdout, embeddings_key,
                                     file_key, own_mu_names, pool, pooled_names, read_split,
                                     sampled, set_settings, split_files)


@dataclass
class QuestionSplit:
    """One split of one question set, as the stages read it."""

    set: str
    split: str
    #: the embeddings key (``dev``, ``test-nq``): vectors in ``embeddings/<encoder>/queries-<key>``
    key: str
    #: ``{option: path}`` of the files it reads (:func:`spar.data.question_sets.split_files`)
    files: dict[str, str]
    _read: Callable[[], SplitQueries] = field(repr=False)

    @cached_property
    def queries(self) -> SplitQueries:
        """Its questions, qrels and answers (read once)."""
        return self._read()

    def pairs(self) -> list[tuple[str, str]]:
        """``(id, text)`` in the order its vectors are stored: a judged split in qrels-file order (as stored before
        the split had one owner: vectors and fingerprints unchanged), an answers-only split in its sorted order."""
        queries = self.queries
        order = queries.qrels if queries.qrels else queries.texts
        return [(q, queries.texts[q]) for q in order]


@dataclass
class EncoderPlan:
    """What encoding with ``base`` or ``lambda`` needs: a picklable factory of the encoder (a Ray worker loads its
    own), the weights fingerprint, what its embeddings' manifests record and its lineage sources."""

    name: str
    make: Callable[[], Any]
    weights: str
    inputs: dict[str, Any]
    sources: list[dict[str, str]]
    #: Where its weights are (a model's path or hub id, a Λ's directory).
    location: Path


def _lambda_encoder(source) -> Any:
    """The encoder the encode engines drive for a Λ source (a transformer's bi-encoder: tokenised, multi-device)."""
    return source.load().batch_encoder()


class Experiment:
    """One experiment's resolved parts (see the module docstring); every part is computed on first use, once."""

    def __init__(self, cfg: Any):
        self.cfg = cfg
        self.run = RunContext(cfg)
        self.output_dir = cfg.output_dir
        self.seed = cfg.experiment.seed
        self.on_bad_record = cfg.experiment.on_bad_record
        self.data = cfg.data
        self.sets = cfg.data.question_sets
        self._encoders: dict[str, EncoderPlan] = {}

    @classmethod
    def of(cls, cfg: Any) -> "Experiment":
        """The experiment of ``cfg``, built once per stage run (:mod:`spar.core.stage_scope`): the stage's plan,
        work and report, and the layers they call, share its resolved parts (Λ found, weights hashed, questions read
        once); outside a stage run, a new one."""
        from spar.core.stage_scope import once_per_stage_run

        return once_per_stage_run("experiment", cfg, lambda: cls(cfg))

    # -- its sections ------------------------------------------------------------------------------------------
    # The typed sections the library objects that own them take whole (the sampler ``sample``, the teacher and the
    # labeller ``label``, Λ's builder and trainer ``train``, ...): a stage driver hands them on from here and reads
    # no setting of the raw config itself (tests/test_driver_reads.py).
    @property
    def name(self) -> str:
        """``experiment.name``: what its results, W&B runs and cards are called."""
        return self.cfg.experiment.name

    @property
    def sample(self) -> SampleSection:
        return self.cfg.sample

    @property
    def label(self) -> LabelSection:
        return self.cfg.label

    @property
    def train(self) -> TrainSection:
        return self.cfg.train

    @property
    def encode(self) -> EncodeSection:
        return self.cfg.encode

    @property
    def tune(self) -> TuneSection:
        return self.cfg.tune

    @property
    def index(self) -> IndexSection:
        """The ``index`` section as configured (:attr:`index_options` adds the seed: what builds an index)."""
        return self.cfg.index

    @property
    def evaluate(self) -> EvaluateSection:
        return self.cfg.evaluate

    @property
    def publish(self) -> PublishSection:
        return self.cfg.publish

    @property
    def model_dir(self) -> Path:
        """Where its model is published: ``publish.output``, else ``<output_dir>/model``
        (:func:`spar.core.run_context.published_model_dir`)."""
        from spar.core.run_context import published_model_dir

        return published_model_dir(self.cfg)

    # -- its artifacts -------------------------------------------------------------------------------------------
    def artifact(self, name: str, **values: Any):
        """The artifact ``name`` as this experiment declares it (:class:`spar.core.stage.Declared`: output, kind,
        settings, what it is made from; :mod:`spar.experiment.declarations`)."""
        from spar.experiment.declarations import declared

        return declared(self, name, **values)

    # -- passages --------------------------------------------------------------------------------------------------
    @cached_property
    def passages(self) -> Path | list[Path]:
        """What it encodes and indexes: ``queries/passages.arrow`` when sampled, else the corpus file(s)."""
        from spar.data.passages import encoded_passages

        return encoded_passages(self.run.passages, self.data.corpus)

    @cached_property
    def known_passages(self) -> set[str] | None:
        """The passage ids of ``queries/passages.arrow`` (judgments naming others are bad records), None before the
        sample stage."""
        from spar.core.schemas import read_table

        arrow = self.run.passages
        return set(read_table(arrow).column("id").to_pylist()) if arrow.exists() else None

    # -- question sets -------------------------------------------------------------------------------------------
    @cached_property
    def question_splits(self) -> list[QuestionSplit]:
        """Every split of every question set, in config order."""
        return [QuestionSplit(name, split, embeddings_key(name, split), split_files(self.sets[name], split),
                              functools.partial(self.read, name, split))
                for name, split in configured_splits(self.sets)]

    def question_split(self, key: str) -> QuestionSplit:
        """The split whose vectors are ``embeddings/<encoder>/queries-<key>``."""
        from spar.core.errors import ConfigError

        for split in self.question_splits:
            if split.key == key:
                return split
        raise ConfigError(f"no question split queries-{key}: the splits are "
                          f"{[f'queries-{s.key}' for s in self.question_splits]}")

    def read(self, name: str, split: str) -> SplitQueries:
        """Set ``name``'s ``split`` ("dev" or "test"), read now."""
        from spar.core.errors import ConfigError

        if name not in self.sets:
            raise ConfigError(f"no question set {name!r} in data.question_sets (sets: {sorted(self.sets)})")
        return read_split(name, self.sets[name], split, seed=self.seed, on_bad_record=self.on_bad_record,
                          known_passages=self.known_passages)

    def pooled(self) -> list[str]:
        """The sets whose dev splits make the experiment's μ (``tune.sets``, else every set's but own-μ ones)."""
        return pooled_names(self.sets, self.cfg.tune.sets)

    def own_mu(self) -> list[str]:
        return own_mu_names(self.sets)

    def dev_split(self, name: str) -> SplitQueries:
        """Set ``name``'s dev split as tuning reads it (capped by its ``dev_sample``)."""
        return sampled(self.read(name, "dev"), self.sets[name].dev_sample, self.seed)

    def dev_pool(self, names: Sequence[str] | None = None) -> SplitQueries:
        """The dev questions μ is tuned on: the dev splits of ``names`` (default :meth:`pooled`) as one split."""
        names = list(names) if names is not None else self.pooled()
        return pool([self.dev_split(name) for name in names], names, self.sets)

    def test_splits(self) -> list[SplitQueries]:
        """Every test split, in config order."""
        return [split.queries for split in self.question_splits if split.split == "test"]

    # -- the question sets' splits and files, as fingerprints spell them ----------------------------------------
    def dev_pool_sets(self) -> list[str]:
        """The sets whose dev splits μ is tuned on: the pooled ones, then those with their own μ."""
        return list(dict.fromkeys([*self.pooled(), *self.own_mu()]))

    def dev_pool_keys(self) -> list[str]:
        """The embeddings keys of the dev splits of :meth:`dev_pool_sets`."""
        return [embeddings_key(name, "dev") for name in self.dev_pool_sets()]

    def test_split_keys(self) -> list[str]:
        """The embeddings keys of every test split."""
        return [split.key for split in self.question_splits if split.split == "test"]

    def question_files(self, split: str) -> dict[str, str]:
        """The question files of the ``split`` ("dev": of :meth:`dev_pool_sets`, a dev hold-out's test qrels
        among them; "test": of every set, answers included), by fingerprint key
        (:func:`spar.data.question_sets.file_key`)."""
        names = self.dev_pool_sets() if split == "dev" else list(self.sets)
        return {file_key(name, option): path for name in names
                for option, path in split_files(self.sets[name], split).items()}

    def holdout_setting(self) -> dict[str, Any]:
        """The default set's ``dev_holdout_fraction`` as tune's and evaluate's fingerprints record it: under its key
        before spar 0.2 (:data:`spar.core.legacy_spellings.PRE_0_2`)."""
        from spar.core.legacy_spellings import DEFAULT_SET_PREFIX, old_key

        return {old_key(f"{DEFAULT_SET_PREFIX}dev_holdout_fraction"): default_holdout(self.sets)}

    def set_settings(self, options: Sequence[str]) -> dict[str, Any]:
        """The sets' ``options`` that change an artifact (:func:`spar.data.question_sets.set_settings`)."""
        return set_settings(self.sets, options)

    # -- Λ and the encoders ---------------------------------------------------------------------------------------
    @cached_property
    def lambda_source(self):
        """The experiment's Λ (:class:`~spar.experiment.lambda_source.LambdaSource`): ``encode.lambda`` when set,
        else its own ``lambda/``; found and checked once; a ``statistics: target`` Λ refits on :attr:`passages`."""
        from spar.experiment.lambda_source import resolve_lambda, with_target

        return with_target(resolve_lambda(self.cfg.encode.lambda_, self.output_dir), self.passages,
                           self.data.corpus_format, self.on_bad_record)

    @cached_property
    def own_lambda(self):
        """The Λ this run trained (its complete ``lambda/``), whatever ``encode.lambda`` names; None when it has none
        (:func:`spar.experiment.lambda_source.run_lambda`): the frontier scores it as one more point."""
        from spar.experiment.lambda_source import run_lambda

        return run_lambda(self.cfg)

    def encoder(self, name: str) -> EncoderPlan:
        """The encoder ``base`` (``encode.base``) or ``lambda`` (:attr:`lambda_source`), resolved once (its weights
        are hashed)."""
        if name not in self._encoders:
            self._encoders[name] = self._encoder(name)
        return self._encoders[name]

    def _encoder(self, name: str) -> EncoderPlan:
        from spar.core.fingerprint import fingerprint_dict
        from spar.model.encoders import BiEncoder
        from spar.model.resolve import model_fingerprint, model_sources

        if name == "base":
            base = self.cfg.encode.base
            weights = fingerprint_dict({"model": model_fingerprint(base.model), "passage_model":
                                        model_fingerprint(base.passage_model) if base.passage_model else None})
            return EncoderPlan(name, functools.partial(BiEncoder.from_section, base), weights, {},
                               model_sources(base.model, base.passage_model), Path(base.model))
        if name != "lambda":
            raise KeyError(name)
        source = self.lambda_source
        # Its origin is recorded without machine-specific paths (the target corpus's content is in the fingerprint).
        described = {k: v for k, v in source.describe().items() if k not in ("path", "statistics_from")}
        return EncoderPlan(name, functools.partial(_lambda_encoder, source), source.fingerprint(),
                           {"lambda_source": described}, source.sources(), Path(source.location))

    # -- teacher and index -----------------------------------------------------------------------------------------
    @cached_property
    def teacher(self):
        """The registered teacher ``label`` configures (:func:`spar.teacher.registry.teacher_for`)."""
        from spar.teacher.registry import teacher_for

        return teacher_for(self.cfg.label)

    def run_facts(self):
        """What the cards of its Λ and of its published model say about it
        (:class:`spar.lexical.card.RunFacts`)."""
        return run_facts(self.cfg)

    def dev_pool_description(self) -> str | None:
        """What μ was tuned on, as the published card says it (:func:`spar.publish.card.tune_split`)."""
        from spar.publish.card import tune_split

        return tune_split([self.sets[name] for name in self.pooled() if name in self.sets])

    @cached_property
    def index_options(self):
        """The index's options (:class:`~spar.index.spar_index.IndexOptions`), seeded by the experiment."""
        from spar.index.spar_index import IndexOptions

        return IndexOptions.from_section(self.cfg.index, seed=self.seed)


# --------------------------------------------------------------------------------------------------------------
# The entry points of the layers above (tuning, evaluation, the frontier, the tests): an experiment's splits
# --------------------------------------------------------------------------------------------------------------


def run_facts(cfg):
    """What the cards of an experiment's Λ and of its published model say about it
    (:class:`spar.lexical.card.RunFacts`): the train stage's own sections only (experiment, data, sample, label,
    train), so the train stage writes its Λ's card without resolving the rest of the experiment."""
    from spar.lexical.card import RunFacts
    from spar.teacher.registry import teacher_for

    return RunFacts(cfg.experiment.name, cfg.data.corpus, cfg.sample, cfg.label, cfg.train,
                    teacher_for(cfg.label).describe())


def set_split(cfg, name: str, split: str) -> SplitQueries:
    """Set ``name``'s ``split`` ("dev" or "test") of the experiment ``cfg``."""
    return Experiment.of(cfg).read(name, split)


def split_queries(cfg, split: str) -> SplitQueries:
    """The default question set's ``split`` ("dev" or "test")."""
    from spar.core.config_sections import DEFAULT_SET

    return set_split(cfg, DEFAULT_SET, split)


def dev_split(cfg, name: str) -> SplitQueries:
    return Experiment.of(cfg).dev_split(name)


def dev_pool(cfg, names: Sequence[str] | None = None) -> SplitQueries:
    return Experiment.of(cfg).dev_pool(names)


def own_mu_sets(cfg) -> list[str]:
    return Experiment.of(cfg).own_mu()


def pooled_sets(cfg) -> list[str]:
    return Experiment.of(cfg).pooled()


def test_splits(cfg) -> list[SplitQueries]:
    return Experiment.of(cfg).test_splits()
