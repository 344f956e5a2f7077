"""Published figures beside the results (``evaluate.published``): the shipped SPAR-paper file, rendering, bad files."""

from __future__ import annotations

import re

import pytest

from conftest import DATASETS, REPO
from spar.core.errors import ConfigError
from spar.evaluate.published import Published

PAPER_FIGURES = REPO / "data" / "published" / "chen2022-spar-odqa.json"
PAPER_TEXT = DATASETS.parent / "papers" / "spar-chen-et-al.txt"


def test_the_shipped_figures_are_the_papers_tables():
    """Every figure of data/published/chen2022-spar-odqa.json is read off the paper's own text (Tables 2 and 5)."""
    if not PAPER_TEXT.is_file():
        pytest.fail(f"the SPAR paper is missing: {PAPER_TEXT}", pytrace=False)
    text = PAPER_TEXT.read_text(encoding="utf-8")
    published = Published.read(PAPER_FIGURES)

    def row(prefix: str) -> list[float]:
        line = next(line for line in text.splitlines() if line.startswith(prefix))
        return [float(x) for x in re.findall(r"\d+\.\d", line)]

    # Table 2's columns: NQ, SQuAD, TriviaQA, WebQ, TREC, each @20 then @100 (first model of a merged row)
    # rows holding two models per cell (Wiki Λ / PAQ Λ, SPAR-Wiki / SPAR-PAQ): ours is the first of each pair
    table2 = {"bm25": row("(s) BM25"), "lambda": row("(d) Wiki Λ")[0::2], "hybrid": row("(h) DPR + BM25"),
              "spar": row("(d) SPAR-Wiki")[0::2]}
    merged = row("(d) DPR-multi")  # four models per row, some cells blank: DPR-multi's figures by position
    table2["base"] = [merged[i] for i in (0, 4, 8, 10, 12, 15, 18, 20, 22, 24)]
    columns = ["nq", "squad", "trivia", "wq", "curated"]
    for system, values in table2.items():
        for i, name in enumerate(columns):
            assert published.values["Acc@20"][system][name] == values[2 * i], (system, name)
            assert published.values["Acc@100"][system][name] == values[2 * i + 1], (system, name)
    table5 = {"base": row("(d) DPR\t"), "lambda": row("(d) Wiki Λ\t"), "spar": row("(d) SPAR (d) SPAR-PAQ")[0::2]}
    bm25_hybrid = row("(s) BM25 (h) DPR + BM25")
    table5.update(bm25=bm25_hybrid[0::2], hybrid=bm25_hybrid[1::2])
    for system, (at20, at100) in table5.items():
        assert published.values["Acc@20"][system]["entityq"] == at20, system
        assert published.values["Acc@100"][system]["entityq"] == at100, system


def test_published_figures_are_shown_beside_ours_never_mixed():
    from spar.evaluate.results import EvaluationReport, results_markdown, results_payload

    def report(name: str, value: float) -> EvaluationReport:
        return EvaluationReport(f"wiki: {name}", ["Acc@20"], {"bm25": {"Acc@20": value}, "spar": {"Acc@20": 0.5}},
                                0.1, None, {}, {}, {})

    reports = {"nq": report("nq", 0.25), "squad": report("squad", 0.75)}
    published = Published.read(PAPER_FIGURES)
    table = results_markdown(reports, published)
    ours, theirs = table.index("**Acc@20** by question set"), table.index("**Acc@20** published (percent")
    assert ours < theirs
    assert "| bm25 | 0.2500 | 0.7500 | 0.5000 |" in table  # ours, with the mean over both sets
    assert "| spar (SPAR-Wiki) | 83.0 | 73.0 |" in table  # the paper's, for the same sets, no mean
    assert "Acc@100" not in table  # a measure we did not report is not shown
    payload = results_payload(reports, published)
    assert payload["summary"]["Acc@20"]["bm25"] == {"nq": 0.25, "squad": 0.75}
    assert payload["published"]["values"]["Acc@20"]["hybrid"]["squad"] == 75.1


@pytest.mark.parametrize("content, message", [
    ('{"label": "x", "values": {"Acc@20": {"spar": {"nq": "83"}}}}', r"values.Acc@20.spar: not a number for nq"),
    ('{"values": {}}', "expected a JSON object with a 'label'"),
    ('{"label": "x",\n "values": }', r":2: evaluate.published: not valid JSON"),
    ('{"label": "x", "unit": "points", "values": {"Acc@20": {}}}', "unit must be 'fraction' or 'percent'"),
])
def test_a_bad_published_file_fails_in_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "paper.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message) as info:
        Published.read(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
