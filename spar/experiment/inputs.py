"""An experiment's inputs for tuning and evaluation: its passage and query vectors, its Λ and base encoders, BM25.

The one owner of

- the question splits' vectors (:meth:`ExperimentInputs.query_vectors`; the splits themselves are
  :mod:`spar.data.question_sets`'): ``encode`` stores the query vectors of exactly these queries, ``tune`` reads
  the dev split, ``evaluate`` the test split;
- lazy access to the artifacts tuning and evaluation read (:class:`ExperimentInputs`).

:mod:`spar.evaluate.tuning` and :mod:`spar.evaluate.evaluation` both build on this module (and rank with
:mod:`spar.evaluate.exact`); it imports neither.

Example::

    >>> from spar.core.config import load_config
    >>> inputs = ExperimentInputs(load_config(None))
    >>> inputs.passage_dir("lambda").parts[-3:]
    ('embeddings', 'lambda', 'passages')
"""

from __future__ import annotations

import logging
import tempfile
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from spar.core.artifacts import PASSAGES_FILE, is_complete, read_manifest
from spar.core.errors import ArtifactError, ConfigError
from spar.core.run_context import ENCODERS
from spar.data.question_sets import SplitQueries

log = logging.getLogger(__name__)



# ----------------------------------------------------------------------------------------------------------------
# Dense inputs: passage embeddings, query vectors, encoders
# ----------------------------------------------------------------------------------------------------------------


#: Passage embeddings larger than this are streamed from their shards instead of copied into memory
#: (:meth:`ExperimentInputs.passage_vectors`): a 663k-passage corpus with a 3072-d Λ is 8 GB of float32, its
#: 384-d base 1 GB. Memory then stays flat in the corpus size (a SciFact-size run still holds its vectors).
STREAM_BYTES = 256 << 20


def resolved_index(cfg):
    """``cfg`` with ``index.type: auto`` made concrete for the run's corpus (its base passage embeddings' count):
    the stages that build, tune for or serve the index prepare their config with this
    (:attr:`spar.core.stage.Stage.prepare`). Unchanged before the passages are encoded, or for a concrete type."""
    from spar.experiment.plan import Experiment
    from spar.index.approximate import resolve_index_section

    if cfg.index.type != "auto":
        return cfg
    d = Experiment.of(cfg).run.embeddings("base")
    if not is_complete(d):
        return cfg
    count = int(read_manifest(d)["stats"]["count"])
    return cfg.model_copy(update={"index": resolve_index_section(cfg.index, count)})


class ExperimentInputs:
    """Lazy access to an experiment's artifacts for tuning and evaluation (each loaded at most once)."""

    def __init__(self, cfg, experiment=None):
        from spar.experiment.plan import Experiment

        self.cfg = cfg
        #: The experiment's resolved parts (:class:`spar.experiment.plan.Experiment`): its Λ is resolved once.
        self.experiment = experiment if experiment is not None else Experiment.of(cfg)
        self.out = cfg.output_dir
        self.run = self.experiment.run
        self._encoders: dict[str, Any] = {}

    # -- passages ----------------------------------------------------------------------------------------------
    def passage_dir(self, encoder: str) -> Path:
        return self.run.embeddings(encoder, "passages")

    def query_dir(self, encoder: str, split: str) -> Path:
        return self.run.embeddings(encoder, f"queries-{split}")

    @cached_property
    def passages(self) -> dict[str, Any]:
        """``{"base": Embeddings, "lambda": Embeddings}`` of the corpus; both must list the same ids in order."""
        from spar.model.stored_vectors import load_embeddings

        out = {}
        for name in ENCODERS:
            d = self.passage_dir(name)
            if not is_complete(d):
                raise ArtifactError(f"{d}: passage embeddings of '{name}' are missing (run `spar encode`)")
            out[name] = load_embeddings(d)
        if out["base"].ids != out["lambda"].ids:
            raise ArtifactError(f"{self.passage_dir('base')} and {self.passage_dir('lambda')} list different passages "
                                "(re-run `spar encode`)")
        return out

    @property
    def doc_ids(self) -> list[str]:
        return self.passages["base"].ids

    def passage_vectors(self, encoder: str) -> Any:
        """The encoder's passage vectors: in memory, or streamed from their shards (a
        :class:`spar.model.stored_vectors.ShardedVectors`) when they exceed :data:`STREAM_BYTES`."""
        embeddings = self.passages[encoder]
        if len(embeddings) * embeddings.dim * 4 > STREAM_BYTES:
            return embeddings.sharded
        return embeddings.vectors

    # -- encoders ----------------------------------------------------------------------------------------------
    def encoder(self, name: str):
        """The base retriever (``encode.base``) or Λ (``lambda/`` or ``encode.lambda``), loaded once."""
        if name not in self._encoders:
            from spar.model.encoders import BiEncoder

            if name == "base":
                self._encoders[name] = BiEncoder.from_section(self.cfg.encode.base)
            elif name == "lambda":
                self._encoders[name] = self.lambda_source.load()
            else:
                raise KeyError(name)
        return self._encoders[name]

    def query_vectors(self, encoder: str, queries: SplitQueries, batch_size: int = 64) -> np.ndarray:
        """Query vectors in ``queries.ids`` order: stored ``queries-<split>`` embeddings when they hold every query
        and come from the same encoder as the passages, else encoded now."""
        from spar.model.stored_vectors import load_embeddings

        found: dict[str, np.ndarray] = {}
        for key in queries.stored:
            d = self.query_dir(encoder, key)
            if not is_complete(d):
                continue
            stored = load_embeddings(d)
            if stored.model_fingerprint != self.passages[encoder].model_fingerprint:
                log.warning("%s: query vectors come from another encoder than the passages; encoding anew", d)
                continue
            wanted = [(i, q) for i, q in enumerate(stored.ids) if q in queries.texts and q not in found]
            if wanted:
                vectors = np.asarray(stored.vectors[[i for i, _ in wanted]], dtype=np.float32)
                found.update((q, v) for (_, q), v in zip(wanted, vectors))
        if all(q in found for q in queries.ids):
            return np.stack([found[q] for q in queries.ids]) if queries.ids else np.zeros((0, 0), np.float32)
        if found:
            log.warning("the stored %s vectors lack some %s queries; encoding them anew", encoder, queries.split)
        log.info("encoding %d %s queries with %s", len(queries.ids), queries.split, encoder)
        return self.encoder(encoder).encode_query(list(queries.texts.values()), batch_size=batch_size)

    def check_embeddings(self, splits: Sequence[str] = ()) -> None:
        """Refuse passage (and ``splits``' query) vectors that ``spar encode`` would not make now: Λ's made with
        another Λ, or any encoder's made at another precision than ``encode.precision`` resolves to. Tune, index,
        evaluate and publish call this before anything of their own, so that the refusal names `spar encode`, the
        stage that must re-run, rather than a stage made from those vectors (#48)."""
        manifests = {d: read_manifest(d) for name in ENCODERS
                     for d in [self.passage_dir(name), *(self.query_dir(name, split) for split in splits)]
                     if is_complete(d)}  # each read once for both checks
        self.check_lambda_embeddings(splits, manifests)
        self.check_precision(splits, manifests)

    def check_precision(self, splits: Sequence[str] = (), manifests: Mapping[Path, dict] | None = None) -> None:
        """Refuse vectors a transformer encoded on torch at another precision than ``encode.precision`` means now
        (``auto``: bf16 on a CPU with native bf16, fp32 on one without): after ``spar encode encode.precision=32`` and
        a return to ``auto`` on such a CPU, the stored fp32 vectors are not those the config asks for. ``manifests``:
        the complete embedding directories' manifests, when read already."""
        from spar.core.run_context import PRECISION_NAMES
        from spar.model.engines import resolve_devices, resolve_precision

        enc = self.cfg.encode
        try:
            device = str(resolve_devices(enc.accelerator, enc.devices)[0])
        except ArtifactError:  # encode.accelerator=gpu on a machine without one: the vectors were made elsewhere
            return
        if enc.backend not in ("torch", "auto") or (enc.backend == "auto" and device == "cpu"):
            return  # ONNX Runtime (auto's choice on the CPU) encodes in fp32: its fingerprint changes instead
        wanted: str | None = None
        for name in ENCODERS:
            for d in [self.passage_dir(name), *(self.query_dir(name, split) for split in splits)]:
                manifest = _complete_manifest(d, manifests)
                if manifest is None:
                    continue
                stats = manifest.get("stats", {})
                if stats.get("backend") != "torch":
                    continue  # a term-based Λ or ONNX Runtime encoded in fp32 whatever the precision said
                if str(stats.get("device", "cpu")).split(":")[0] != device.split(":")[0]:
                    continue  # encoded on a GPU and carried here: what `auto` means on this machine says nothing
                wanted = wanted or resolve_precision(device, enc.precision)
                made = str(stats.get("precision", "32"))
                if made != wanted:
                    raise ArtifactError(
                        f"{d}: encoded in {PRECISION_NAMES.get(made, made)}, but encode.precision={enc.precision} "
                        f"means {PRECISION_NAMES.get(wanted, wanted)} on this {device.upper()}: re-run `spar encode`")

    def check_lambda_embeddings(self, splits: Sequence[str] = (),
                                manifests: Mapping[Path, dict] | None = None) -> None:
        """Refuse Λ embeddings made with another Λ than the current one (retrained, or ``encode.lambda`` moved),
        by the Λ fingerprint each embedding directory records: its vectors would be scored as the new Λ's."""
        current = None
        dirs = [self.passage_dir("lambda"), *(self.query_dir("lambda", split) for split in splits)]
        for d in dirs:
            manifest = _complete_manifest(d, manifests)
            if manifest is None:
                continue
            if "lambda_source" not in manifest.get("inputs", {}):
                continue  # not written by `spar encode` from a Λ source (e.g. vectors encoded by hand)
            made_with = manifest.get("stats", {}).get("weights_fingerprint")
            current = current or self.lambda_source.fingerprint()
            if made_with is not None and made_with != current:
                raise ArtifactError(f"{d}: made with Λ {made_with}, but the current Λ is {current} (retrained or "
                                    "replaced): re-run `spar encode`")

    def check_index(self, index_dir: Path, info: dict | None = None, ids: Sequence[str] | None = None) -> None:
        """Refuse an index built from other passage embeddings than the current ones (e.g. Λ retrained and the
        corpus re-encoded, but not re-indexed): the SPAR row would silently come from the old Λ. ``info``/``ids``:
        the index's, when it is loaded already (else read from ``index_dir``)."""
        from spar.index.files import index_ids, index_info

        info = index_info(index_dir) if info is None else info
        for name, key in (("base", "base_fingerprint"), ("lambda", "lambda_fingerprint")):
            recorded, current = info.get(key), self.passages[name].model_fingerprint
            if recorded is None:
                raise ArtifactError(f"{index_dir}: the index records no {name} encoder fingerprint, so it cannot be "
                                    f"checked against {self.passage_dir(name)}: re-run `spar index`")
            if recorded != current:
                raise ArtifactError(f"{index_dir}: built from {name} encoder {recorded}, but {self.passage_dir(name)} "
                                    f"comes from {current}: the index is stale, re-run `spar index`")
        if list(index_ids(index_dir) if ids is None else ids) != list(self.doc_ids):
            raise ArtifactError(f"{index_dir}: indexes other passages than {self.passage_dir('base')}: the index is "
                                "stale, re-run `spar index`")

    @property
    def lambda_source(self):
        """Where this experiment's Λ comes from (:attr:`spar.experiment.plan.Experiment.lambda_source`)."""
        return self.experiment.lambda_source

    # -- passage texts and answers -----------------------------------------------------------------------------
    @cached_property
    def passages_arrow(self) -> Path:
        """``queries/passages.arrow``, or (no sample stage: Λ from elsewhere) ``data.corpus`` written to a temporary
        one as read for encode."""
        passages = self.run.passages
        if passages.exists():
            return passages
        from spar.data.readers import ReadStats, read_corpus
        from spar.data.sampling import write_passages

        data, on_bad = self.cfg.data, self.cfg.experiment.on_bad_record
        self._passages_tmp = tempfile.TemporaryDirectory(prefix="spar-passages-")
        passages = Path(self._passages_tmp.name) / PASSAGES_FILE
        write_passages(read_corpus(data.corpus, data.corpus_format, on_bad), passages, None, on_bad, ReadStats())
        return passages

    @cached_property
    def row_of(self) -> dict[str, int]:
        """``{passage id: row}`` of the embedded passages (rows of :attr:`doc_ids`)."""
        return {doc: row for row, doc in enumerate(self.doc_ids)}

    def answer_judge(self, queries: SplitQueries, metric: str):
        """An :class:`spar.data.question_sets.AnswerJudge` of ``queries`` when ``metric`` is judged by answers (Acc@k),
        else None (qrels judge it); fails in one line when the questions lack what the metric needs."""
        from spar.data.passages import PassagesTable
        from spar.data.question_sets import AnswerJudge, answer_judge

        by_answers = metric.startswith("Acc@")
        if not by_answers:
            if not queries.qrels:
                raise ConfigError(f"the {queries.split} questions are judged by answers only: {metric} needs qrels "
                                  "(use tune.metric: Acc@k)")
            return None
        if queries.answers is None:
            raise ConfigError(f"{metric} needs answers, but the {queries.split} questions have none (set the question "
                              "set's answers, data.question_sets.<set>.answers)")
        table = PassagesTable.open(self.passages_arrow)
        judge = answer_judge(queries, table)
        if table.ids != self.doc_ids:  # embeddings in another order than the table: judge by id
            table_rows = table.row_of(self.doc_ids)
            doc_ids = self.doc_ids
            return AnswerJudge(judge.answers, lambda rows: judge.texts([int(table_rows[r]) for r in rows]),
                               judge.match, lambda rows: [doc_ids[r] for r in rows])
        return judge

    def judged(self, queries: SplitQueries, judge, *runs) -> dict[str, dict[str, int]]:
        """``queries``' qrels, or with a ``judge`` answer qrels over every passage the ``runs`` rank."""
        from spar.data.question_sets import judged_qrels

        return judged_qrels(queries, judge, self.row_of, *runs)

    # -- BM25 --------------------------------------------------------------------------------------------------
    @cached_property
    def bm25(self):
        """A BM25 searcher (k1/b from ``label``): the teacher index when the teacher is BM25, else one built now."""
        from spar.teacher.teachers import BM25Searcher, build_bm25_index

        teacher = self.run.artifact("teacher_index")
        label = self.cfg.label
        if is_complete(teacher) and _is_bm25_index(teacher):
            index_dir = teacher
        else:
            passages = self.passages_arrow
            self._bm25_tmp = tempfile.TemporaryDirectory(prefix="spar-bm25-")
            log.info("no BM25 teacher index in this run; building a BM25 index of %s", passages)
            index_dir = build_bm25_index(passages, Path(self._bm25_tmp.name) / "index", label.threads,
                                         heap=label.search_heap)
        # The JVM starts once per process: in tune's and evaluate's, here, at the search heap (label.search_heap).
        return BM25Searcher(index_dir, k1=label.k1, b=label.b, threads=label.threads, heap=label.search_heap)

    def bm25_fingerprint(self) -> str | None:
        teacher = self.run.artifact("teacher_index")
        return read_manifest(teacher)["fingerprint"] if is_complete(teacher) else None

    def bm25_search(self, queries: SplitQueries, k: int) -> dict[str, list[tuple[str, float]]]:
        hits = self.bm25.search(queries.pairs(), k)
        return {q: list(hits.get(q, [])) for q in queries.ids}


def _complete_manifest(directory: Path, read: Mapping[Path, dict] | None) -> dict | None:
    """``directory``'s manifest if it is a complete artifact (from ``read`` when given), else None."""
    if read is not None:
        return read.get(directory)
    return read_manifest(directory) if is_complete(directory) else None


def _is_bm25_index(directory: Path) -> bool:
    """Whether the teacher index is a Lucene BM25 index (its registered teacher's ``bm25_index``; an index that
    records no teacher predates the impact teacher)."""
    from spar.core.config_sections import TEACHERS
    from spar.teacher.registry import teacher_class

    manifest = read_manifest(directory)
    teacher = manifest.get("stats", {}).get("teacher") or manifest.get("config", {}).get("teacher")
    return teacher is None or (teacher in TEACHERS and teacher_class(teacher).bm25_index)
