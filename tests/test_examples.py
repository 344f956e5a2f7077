"""The example configs for running on your own data (configs/examples/, docs/user-guide.md) load, and read their
data: the BEIR one on SciFact as it is written; the DPR/MS MARCO TSV one on the embedded sample converted to TSV
files (its placeholder paths overridden, as a user edits them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

#: The experiment's one question set (data.queries & co. before spar 0.2).
QS = "data.question_sets.default"

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "configs" / "examples"


def test_every_example_config_loads_and_writes_under_runs():
    from spar.core.config import load_config

    names = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
    assert names == ["beir.yaml", "dpr-tsv.yaml"]
    for name in names:
        cfg = load_config(EXAMPLES / name)
        # runs/<name> where spar runs, as the embedded default: a copy beside the user's data wrote two levels
        # above it (#47)
        assert cfg.output_dir == Path("runs") / cfg.experiment.name


def test_the_beir_example_reads_a_beir_directory(datasets_dir):
    from spar.core.config import load_config
    from spar.experiment.preflight import check_inputs

    cfg = load_config(EXAMPLES / "beir.yaml")
    default = cfg.data.question_sets["default"]
    assert Path(cfg.data.corpus).parent.name == "scifact" and default.qrels_dev != default.qrels_test
    scifact = datasets_dir / "scifact"
    cfg = load_config(EXAMPLES / "beir.yaml", [f"data.corpus={scifact / 'corpus.jsonl'}",
                                               f"{QS}.dev={scifact / 'queries.jsonl'}",
                                               f"{QS}.test={scifact / 'queries.jsonl'}",
                                               f"{QS}.qrels_dev={scifact / 'qrels' / 'train.tsv'}",
                                               f"{QS}.qrels_test={scifact / 'qrels' / 'test.tsv'}"])
    report = check_inputs(cfg)
    assert report["corpus"]["passages"] == 5183  # datasets/README.md: SciFact's 5,183 abstracts


def _tsv_copy(sample_dir: Path, out: Path, dpr: bool) -> dict[str, Path]:
    """The embedded sample as TSV files: DPR passages (with header) or an MS MARCO collection (no header), queries
    as id<TAB>text, test qrels in TREC format."""
    out.mkdir()
    rows = [json.loads(line) for line in (sample_dir / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    clean = lambda text: " ".join(text.split())  # noqa: E731  (TSV cells hold no tabs or newlines)
    with (out / "passages.tsv").open("w", encoding="utf-8") as fh:
        if dpr:
            fh.write("id\ttext\ttitle\n")
        for r in rows:
            fh.write(f"{r['_id']}\t{clean(r['text'])}\t{clean(r['title'])}\n" if dpr else
                     f"{r['_id']}\t{clean(r['title'] + '. ' + r['text'])}\n")
    with (out / "queries.tsv").open("w", encoding="utf-8") as fh:
        for line in (sample_dir / "queries.jsonl").read_text(encoding="utf-8").splitlines():
            q = json.loads(line)
            fh.write(f"{q['_id']}\t{clean(q['text'])}\n")
    with (out / "qrels.txt").open("w", encoding="utf-8") as fh:
        for line in (sample_dir / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
            qid, pid, rel = line.split("\t")
            fh.write(f"{qid} 0 {pid} {rel}\n")
    return {"data.corpus": out / "passages.tsv", f"{QS}.dev": out / "queries.tsv", f"{QS}.test": out / "queries.tsv",
            f"{QS}.qrels_test": out / "qrels.txt"}


@pytest.mark.parametrize("fmt", ["dpr", "msmarco"])
def test_the_tsv_example_reads_dpr_and_msmarco_files(sample_dir, tmp_path, fmt):
    import pipelines.sample
    from spar.core.config import load_config
    from spar.experiment.preflight import check_inputs

    files = _tsv_copy(sample_dir, tmp_path / "my-data", dpr=fmt == "dpr")
    cfg = load_config(EXAMPLES / "dpr-tsv.yaml", [f"{key}={path}" for key, path in files.items()]
                      + [f"data.corpus_format={fmt}", f"experiment.output_dir={tmp_path / 'run'}"])
    report = check_inputs(cfg)
    assert report["corpus"]["passages"] == 600 and not report["corpus"]["skipped"]
    stats = pipelines.sample.run(cfg)  # the pipeline's first stage reads the TSV corpus
    assert stats["passages"] == 600
