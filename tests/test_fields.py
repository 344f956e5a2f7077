"""One owner of a term-based Λ's passage text: the teacher's ``label.fields``, recorded in the Λ's statistics when
they are fitted, and read from there by static training, encoding and target statistics (never from a hard-coded
``("title", "text")`` or ``data.title_field``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spar.core import schemas
from spar.core.config import load_config
from spar.lexical import build_lambda, load_lambda

TITLES = ["Zebra", "Quokka", "Xylophone", "Walrus"]
TEXTS = ["a lack of vitamin C causes scurvy", "the moon orbits the earth", "sparse retrieval with BM25 weights",
         "vitamin D comes from the sun"]


@pytest.fixture()
def passages(tmp_path: Path) -> Path:
    path = tmp_path / "passages.arrow"
    schemas.write_table(path, pa.table({"row": pa.array(range(4), pa.int64()), "id": list("abcd"), "title": TITLES,
                                        "text": TEXTS}, schema=schemas.PASSAGES))
    return path


@pytest.mark.parametrize("kind", ["projection", "static"])
def test_label_fields_alone_make_the_term_lambda_text(passages, tmp_path, kind):
    """``label.fields=[text]`` (titles present): fitting, encoding, saving, static training inputs and target
    statistics all read the text alone."""
    cfg = load_config(None, [f"train.kind={kind}", "train.lexical.dim=32", "label.fields=[text]"])
    lam = build_lambda(cfg.train, passages, fields=cfg.label.fields, seed=0)
    assert "zebra" not in lam.weights.vocab  # the titles' own terms were not counted
    pairs = list(zip(TITLES, TEXTS))
    np.testing.assert_array_equal(lam.encode_passage(pairs), lam.encode_passage(TEXTS))

    lam.save(tmp_path / "lam")
    again = load_lambda(tmp_path / "lam")
    assert again.weights.fields == ("text",)
    np.testing.assert_array_equal(again.encode_passage(pairs), lam.encode_passage(TEXTS))
    assert again.with_statistics(pairs).weights.num_docs == 4
    assert "zebra" not in again.with_statistics(pairs).weights.vocab

    if kind == "static":
        preparer = lam.batch_preparer(passages_path=passages)
        expected = lam.weights.passage_matrix(TEXTS)
        assert (preparer.corpus != expected).nnz == 0


def test_default_fields_leave_the_files_as_they_were(passages, tmp_path):
    cfg = load_config(None, ["train.kind=projection", "train.lexical.dim=8"])
    lam = build_lambda(cfg.train, passages, seed=0)
    assert "fields" not in lam.describe()["teacher"]
    np.testing.assert_array_equal(lam.encode_passage(zip(TITLES, TEXTS)),
                                  lam.encode_passage([f"{t} {x}" for t, x in zip(TITLES, TEXTS)]))


def test_encode_hands_a_term_lambda_whole_passages(tmp_path):
    """``data.title_field=false`` drops titles for the transformers, not for a term-based Λ (its fields decide)."""
    from pipelines.encode import passage_titles

    cfg = load_config(None, ["data.title_field=false", "train.kind=projection"])
    lam = build_lambda(cfg.train, _write(tmp_path), seed=0)
    assert passage_titles(cfg, lam) is True
    assert passage_titles(cfg, object()) is False


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "p.arrow"
    schemas.write_table(path, pa.table({"row": pa.array(range(4), pa.int64()), "id": list("abcd"), "title": TITLES,
                                        "text": TEXTS}, schema=schemas.PASSAGES))
    return path
