"""The spellings fingerprints keep from before spar 0.2 are one table (:mod:`spar.core.legacy_spellings`), applied where
fingerprints are computed; the embedded default's fingerprints themselves are pinned by ``tests/test_declarations.py``.
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

from spar.core.config import load_config

ROOT = Path(__file__).resolve().parent.parent
#: The old dotted keys (spar 0.1's config), as a run made before spar 0.2 was configured.
OLD_KEYS = {"data.queries", "data.qrels_dev", "data.qrels_test", "data.dev_holdout_fraction", "evaluate.answers",
            "evaluate.answer_match", "tune.variant"}


def _code_strings(path: Path) -> set[str]:
    """The string literals of a module's code: docstrings (a string as a statement) and comments left out."""
    found, previous = set(), tokenize.NEWLINE
    for token in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        if token.type == tokenize.STRING and previous not in (tokenize.INDENT, tokenize.NEWLINE, tokenize.DEDENT,
                                                              tokenize.NL):
            found.add(token.string.strip("\"'"))
        if token.type != tokenize.COMMENT:
            previous = token.type
    return found


def test_only_the_table_spells_the_old_keys():
    """Every old dotted key is in the table, and no other module of spar/ or pipelines/ spells one in its code (the
    config's deprecation path and the fingerprints read them from the table)."""
    from spar.core.legacy_spellings import PRE_0_2

    assert set(PRE_0_2.values()) == OLD_KEYS
    spelling = sorted(str(path.relative_to(ROOT)) for folder in ("spar", "pipelines")
                      for path in (ROOT / folder).rglob("*.py") if _code_strings(path) & OLD_KEYS)
    assert spelling == ["spar/core/legacy_spellings.py"]


def test_the_default_set_is_fingerprinted_under_its_old_keys(tmp_path: Path):
    """The default set's files are ``inputs`` keys as in spar 0.1 (``queries``, ``qrels_dev``, ...), its answers and
    hold-out settings of the evaluate section and of tune's fingerprint as they were there; a named set's are its
    own (``<set>.<option>``)."""
    from spar.data.question_sets import data_settings, evaluate_settings, file_key
    from spar.experiment.declarations import tune_section
    from spar.experiment.plan import Experiment

    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"_id": "1", "answers": ["x"]}\n')
    cfg = load_config(None, [f"data.question_sets.default.answers={answers}",
                             "data.question_sets.default.answer_match=regex", "index.variant=sum"])
    default = cfg.data.question_sets["default"]
    assert [file_key("default", option) for option in ("dev", "test", "qrels_dev", "qrels_test", "answers")] == \
        ["queries", "queries", "qrels_dev", "qrels_test", "answers"]
    assert file_key("nq", "dev") == "nq.dev"
    assert {k: data_settings(cfg.data)[k] for k in ("queries", "qrels_dev", "qrels_test", "dev_holdout_fraction")} \
        == {"queries": default.test, "qrels_dev": default.qrels_dev, "qrels_test": default.qrels_test,
            "dev_holdout_fraction": None}
    evaluate = evaluate_settings(cfg.evaluate, cfg.data.question_sets)
    assert (evaluate["answers"], evaluate["answer_match"]) == (str(answers), "regex")
    assert tune_section(cfg)["variant"] == "sum"
    assert Experiment(cfg).holdout_setting() == {"dev_holdout_fraction": None}


def test_a_config_in_the_old_keys_reads_as_the_default_set(tmp_path: Path):
    """spar 0.1's keys still load (with a warning) into ``data.question_sets.default``: ``data.queries`` is both
    splits' questions, the hold-out and the answers options keep their values."""
    import warnings

    queries = ROOT / "data" / "scifact-sample" / "queries.jsonl"
    qrels = ROOT / "data" / "scifact-sample" / "qrels" / "test.tsv"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = load_config(None, ["data.question_sets={}", f"data.queries={queries}", f"data.qrels_test={qrels}",
                                 "data.dev_holdout_fraction=0.5", "evaluate.answer_match=regex"])
    default = cfg.data.question_sets["default"]
    assert (default.dev, default.test, default.qrels_test) == (str(queries), str(queries), str(qrels))
    assert (default.dev_holdout_fraction, default.answer_match) == (0.5, "regex")
    assert any("data.queries -> default.dev, test" in str(w.message) for w in caught)
