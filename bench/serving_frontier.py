"""The serving frontier (issue #46 item 2): every SPAR serving configuration measured on **dev** questions, beside the
hybrid as deployed and the base in HNSW, in one table and one plot.

Reads one or more ``bench/odqa_index.py`` results (each a set of SPAR configurations searched on the same dev
questions of the same run, with the hybrid as deployed timed and judged in the same process: the base in an HNSW
graph whose efSearch is calibrated on dev, BM25 by Pyserini's Lucene searcher beside it on a second thread, fused at
the tuned α) and, optionally, a ``bench/query_latency.py`` result of the same run, whose query-encoding medians
(SPAR's base + Λ encoders; the hybrid's base encoder; same backend) turn each point's search time, taken with the
query vectors given, into a time from the question's text. Writes ``<stem>.json``, ``<stem>.md`` (per point: the
vector's dimension, bytes per passage in memory, Acc@20 per set and their mean, the change against the hybrid as
deployed, ms per question with the vectors given and from the text, × the hybrid) and ``<stem>.png`` (mean Acc@20
against ms from text, and against bytes per passage). Points on the (latency, mean Acc@20) Pareto front are marked.

Why its own code: the points come from several benchmark runs that must be checked to be comparable (same run, same
dev questions, same sets) before one table holds them; no plotting or reporting library knows these files.

    python -m bench.serving_frontier --odqa bench/results/odqa_index-663k-frontier.json \\
        --query-latency bench/results/query_latency-663k.json --out results/serving-frontier-663k
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench._common import command_line

#: What makes two odqa_index results comparable: the same run's passages, the same dev questions per set.
COMPARABLE = ("config", "passages", "questions_per_set", "split", "subset")


def read_json(path: str | Path) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"{path}: not a readable benchmark result ({error})") from None


def check_comparable(results: list[tuple[str, dict]]) -> list[str]:
    """The sets every result judged, in the first result's order; refuses results of other runs or questions."""
    first_path, first = results[0]
    if first.get("split") != "dev":
        raise SystemExit(f"{first_path}: measured on {first.get('split')!r} questions; the frontier is chosen on dev")
    for path, other in results[1:]:
        for key in COMPARABLE:
            if other.get(key) != first.get(key):
                raise SystemExit(f"{path}: {key} = {other.get(key)!r}, but {first_path} has {first.get(key)!r}: "
                                 "points of one frontier must search the same passages with the same dev questions")
        if list(other["exact"]) != list(first["exact"]):
            raise SystemExit(f"{path}: sets {list(other['exact'])}, but {first_path} has {list(first['exact'])}")
    return list(first["exact"])


def encoding_ms(latency: dict | None) -> dict[str, float] | None:
    """Median query-encoding ms of SPAR (base + Λ) and of the hybrid (base), on the backend SPAR was fastest on."""
    if latency is None:
        return None
    backend = latency["fastest_spar_backend"]
    return {"spar": latency["ms"][f"spar/{backend}"]["encode"]["median"],
            "hybrid": latency["ms"][f"hybrid-hnsw/{backend}"]["encode"]["median"], "backend": backend}


def collect_points(results: list[tuple[str, dict]], sets: list[str]) -> list[dict[str, Any]]:
    """Every SPAR configuration of every result, and the references of the first result with a timed peer."""
    points: list[dict[str, Any]] = []
    first_lambda = results[0][1].get("lambda")
    for index, (path, result) in enumerate(results):
        # A result of another Λ than the first's names its points by it and brings its own exact scan.
        other = result.get("lambda") != first_lambda
        label = f"[{lambda_label(result['lambda'])}] " if other else ""
        for row in result["spar"]:
            points.append({"name": f"SPAR {label}{row['config']}", "kind": "spar", "other_lambda": other,
                           "dim": row.get("graph_dim", result["dim"]), "scored_dim": result["dim"],
                           "bytes_per_passage": row["bytes_per_passage"], "ms_vectors": row.get("ms_1_thread"),
                           # its own process's hybrid: a ratio is taken against the peer timed beside it
                           "peer_ms_vectors": result.get("peer", {}).get("ms_1_thread"),
                           "acc20": {s: row["sets"][s]["Acc@20"] for s in sets}, "source": str(path)})
        if other:
            points.append({"name": f"SPAR {label}exact scan of float32 vectors", "kind": "spar-exact",
                           "other_lambda": True, "dim": result["dim"], "bytes_per_passage": 4 * result["dim"],
                           "ms_vectors": None,
                           "acc20": {s: result["exact"][s]["spar"]["Acc@20"] for s in sets}, "source": str(path)})
    path, timed = next(((p, r) for p, r in results if r.get("peer", {}).get("sets")), (None, None))
    if timed is None:
        raise SystemExit("no result holds the hybrid as deployed judged on its dev questions (bench/odqa_index.py "
                         "without --no-hybrid): the frontier's reference is missing")
    peer, flat, exact = timed["peer"], timed["flat_peer"], timed["exact"]
    base_dim = int(flat["bytes_per_passage_base"]) // 4  # float32 vectors, scanned flat
    bm25 = peer.get("bytes_per_passage_bm25", 0.0)
    points += [
        {"name": "hybrid as deployed (base HNSW ‖ BM25)", "kind": "hybrid", "dim": base_dim,
         "bytes_per_passage": peer.get("bytes_per_passage"), "ms_vectors": peer["ms_1_thread"],
         "acc20": {s: peer["sets"][s]["Acc@20"] for s in sets}, "source": str(path)},
        {"name": "hybrid, exact base (flat scan, then BM25)", "kind": "hybrid", "dim": base_dim,
         "bytes_per_passage": round(flat["bytes_per_passage_base"] + bm25, 1), "ms_vectors": flat["ms_1_thread"],
         "acc20": {s: exact[s]["hybrid"]["Acc@20"] for s in sets}, "source": str(path)},
        {"name": "base in HNSW", "kind": "base", "dim": base_dim, "bytes_per_passage": peer["bytes_per_passage_base"],
         "ms_vectors": peer["base_hnsw_ms_1_thread"], "acc20": {s: peer["base_hnsw_sets"][s]["Acc@20"] for s in sets},
         "source": str(path)},
        {"name": "SPAR, exact scan of float32 vectors", "kind": "spar-exact", "dim": timed["dim"],
         "bytes_per_passage": 4 * timed["dim"], "ms_vectors": None,
         "acc20": {s: exact[s]["spar"]["Acc@20"] for s in sets}, "source": str(path)},
    ]
    return points


def lambda_label(lam: dict | None) -> str:
    """``{"kind": "transformer", "dim": 384}`` -> ``transformer Λ 384``."""
    if not lam:
        return "another Λ"
    return f"{lam.get('kind', '?')} Λ {lam.get('dim', '?')}"


def pareto(points: list[dict[str, Any]], time_key: str) -> None:
    """Mark each SPAR point no other SPAR point beats on both time and mean Acc@20 (``point["pareto"]``)."""
    timed = [p for p in points if p["kind"] == "spar" and p.get(time_key) is not None]
    for p in timed:
        p["pareto"] = not any(o is not p and o[time_key] <= p[time_key] and o["acc20_mean"] >= p["acc20_mean"]
                              and (o[time_key] < p[time_key] or o["acc20_mean"] > p["acc20_mean"]) for o in timed)


def build_frontier(results: list[tuple[str, dict]], latency: dict | None = None) -> dict[str, Any]:
    """The frontier's JSON: points with mean Acc@20, their change against the hybrid as deployed, ms from text.

    >>> row = {"config": "hnsw:sq4:ef=64", "bytes_per_passage": 900.0, "ms_1_thread": 4.0,
    ...        "sets": {"nq": {"Acc@20": 0.40}}}
    >>> peer = {"sets": {"nq": {"Acc@20": 0.42}}, "ms_1_thread": 5.0, "bytes_per_passage_base": 1800.0,
    ...         "bytes_per_passage_bm25": 700.0, "bytes_per_passage": 2500.0, "base_hnsw_ms_1_thread": 1.0,
    ...         "base_hnsw_sets": {"nq": {"Acc@20": 0.38}}}
    >>> result = {"config": "c.yaml", "passages": 10, "questions_per_set": 5, "split": "dev", "subset": None,
    ...           "dim": 448, "spar": [row], "peer": peer, "exact": {"nq": {"spar": {"Acc@20": 0.41},
    ...           "base": {"Acc@20": 0.39}, "hybrid": {"Acc@20": 0.43}}},
    ...           "flat_peer": {"ms_1_thread": 20.0, "bytes_per_passage_base": 1536}}
    >>> frontier = build_frontier([("r.json", result)])
    >>> spar = frontier["points"][0]
    >>> spar["acc20_mean"], spar["vs_hybrid_points"], spar["x_hybrid_ms"], spar["pareto"]
    (0.4, -2.0, 0.8, True)
    """
    sets = check_comparable(results)
    points = collect_points(results, sets)
    encode = encoding_ms(latency)
    hybrid = points[[p["name"] for p in points].index("hybrid as deployed (base HNSW ‖ BM25)")]
    for p in points:
        p["acc20_mean"] = round(sum(p["acc20"].values()) / len(sets), 4)
        # The query-latency run encoded the first result's Λ: another Λ's encoder (a second transformer, say)
        # costs what it costs, not that; its points keep the vectors-given time only.
        if encode is not None and p["ms_vectors"] is not None and not p.get("other_lambda"):
            p["ms_text"] = round(p["ms_vectors"] + encode["spar" if p["kind"].startswith("spar") else "hybrid"], 2)
    hybrid_mean = sum(hybrid["acc20"].values()) / len(sets)
    time_key = "ms_text" if encode is not None else "ms_vectors"
    for p in points:
        p["vs_hybrid_points"] = round(100 * (p["acc20_mean"] - hybrid_mean), 2)
        p["vs_hybrid_points_by_set"] = {s: round(100 * (p["acc20"][s] - hybrid["acc20"][s]), 2) for s in sets}
        if p.get(time_key) is not None:
            peer_ms = hybrid[time_key]
            if p.get("peer_ms_vectors") and hybrid.get("ms_vectors"):  # the hybrid timed in the point's process
                peer_ms += p["peer_ms_vectors"] - hybrid["ms_vectors"]
            p["x_hybrid_ms"] = round(p[time_key] / peer_ms, 3)
        elif p.get("other_lambda") and p["ms_vectors"] is not None and p.get("peer_ms_vectors"):
            p["x_hybrid_ms"] = round(p["ms_vectors"] / p["peer_ms_vectors"], 3)  # both with the vectors given
            p["x_hybrid_ms_of"] = "ms_vectors"
        if p.get("bytes_per_passage") and hybrid.get("bytes_per_passage"):
            p["x_hybrid_bytes"] = round(p["bytes_per_passage"] / hybrid["bytes_per_passage"], 3)
    pareto(points, time_key)
    first = results[0][1]
    return {"benchmark": "the serving frontier on dev questions (issue #46 item 2)", "config": first["config"],
            "passages": first["passages"], "questions_per_set": first["questions_per_set"], "sets": sets,
            "time": time_key, "query_encoding_ms": encode, "points": points,
            "sources": [str(path) for path, _ in results],
            "machines": sorted({r.get("machine", "") for _, r in results}),
            "unit": "Acc@20 on dev questions; ms per question, one at a time, 1 thread per half (ms_text adds the "
                    "median query encoding measured by bench/query_latency.py on the same run); bytes per passage "
                    "held in memory (the hybrid: its HNSW index plus Lucene's directory)"}


def write_markdown(frontier: dict[str, Any], path: Path, command: str) -> None:
    sets, time_key = frontier["sets"], frontier["time"]
    lines = [f"# The serving frontier: {frontier['config']}, {frontier['passages']:,} passages, "
             f"{frontier['questions_per_set']} dev questions per set", "", "```bash", command, "```", "",
             f"| point | dim in the index | B/passage in memory | {' | '.join(sets)} | mean | "
             "Δ mean vs hybrid (points) | ms, vectors given | "
             f"ms{' from text' if time_key == 'ms_text' else ''} | × hybrid ms | × hybrid bytes |",
             "|---|---:|---:|" + "---:|" * len(sets) + "---:|---:|---:|---:|---:|---:|"]
    for p in frontier["points"]:
        mark = " ★" if p.get("pareto") else ""
        cells = [f"{p['name']}{mark}", str(p["dim"]), f"{p['bytes_per_passage']:,.0f}" if p["bytes_per_passage"]
                 else "", *(f"{p['acc20'][s]:.4f}" for s in sets), f"{p['acc20_mean']:.4f}",
                 f"{p['vs_hybrid_points']:+.2f}", "" if p["ms_vectors"] is None else f"{p['ms_vectors']:.1f}",
                 "" if p.get(time_key) is None else f"{p[time_key]:.1f}",
                 "" if "x_hybrid_ms" not in p else f"{p['x_hybrid_ms']:.2f}×",
                 "" if "x_hybrid_bytes" not in p else f"{p['x_hybrid_bytes']:.2f}×"]
        lines.append("| " + " | ".join(cells) + " |")
    encode = frontier["query_encoding_ms"]
    lines += ["", "★: on the SPAR points' Pareto front (no other SPAR point both faster and more accurate). A SPAR "
              "point with refine re-ranks its candidates by the full float32 [P, μ·PΛ] "
              f"({frontier['points'][0].get('scored_dim', '')} dims) read from disk, not held in memory."]
    if encode:
        lines.append(f"Query encoding added for 'from text' ({encode['backend']} backend, medians): SPAR "
                     f"{encode['spar']} ms, the hybrid's base {encode['hybrid']} ms.")
    if any(p.get("x_hybrid_ms_of") == "ms_vectors" for p in frontier["points"]):
        lines.append("[Another Λ]: its query encoder was not timed from text (the query-latency run encoded the first "
                     "Λ); its × hybrid ms compares the vectors-given times with the hybrid timed in its own process.")
    lines += [f"{frontier['unit']}.", "", "Machines: " + "; ".join(frontier["machines"]) + ".", ""]
    path.write_text("\n".join(lines))


def plot(frontier: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    time_key = frontier["time"]
    fig, (by_time, by_bytes) = plt.subplots(1, 2, figsize=(11, 4.5))
    styles = {"spar": ("o", "tab:blue"), "spar-exact": ("D", "tab:cyan"), "hybrid": ("s", "tab:red"),
              "base": ("^", "tab:gray")}
    for p in frontier["points"]:
        marker, colour = styles[p["kind"]]
        for ax, x in ((by_time, p.get(time_key)), (by_bytes, p["bytes_per_passage"])):
            if x is None:
                continue
            ax.scatter([x], [p["acc20_mean"]], marker=marker, color=colour, s=40 if p.get("pareto", True) else 18)
            ax.annotate(p["name"].replace("SPAR ", ""), (x, p["acc20_mean"]), fontsize=6,
                        xytext=(3, 3), textcoords="offset points")
    by_time.set_xlabel("ms per question" + (" from text" if time_key == "ms_text" else " (vectors given)"))
    by_bytes.set_xlabel("bytes per passage in memory")
    for ax in (by_time, by_bytes):
        ax.set_ylabel(f"mean Acc@20, dev ({', '.join(frontier['sets'])})")
        ax.grid(alpha=0.3)
    fig.suptitle(f"Serving frontier, {frontier['passages']:,} passages (blue: SPAR; red: hybrid; grey: base)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--odqa", nargs="+", required=True, help="bench/odqa_index.py results (dev questions)")
    ap.add_argument("--query-latency", default=None, help="bench/query_latency.py result of the same run")
    ap.add_argument("--out", required=True, help="stem: writes STEM.json, STEM.md, STEM.png")
    args = ap.parse_args(argv)
    stem = Path(args.out)
    if not stem.parent.is_dir():
        ap.error(f"--out {args.out}: its directory {stem.parent} does not exist")
    latency = read_json(args.query_latency) if args.query_latency else None
    frontier = build_frontier([(path, read_json(path)) for path in args.odqa], latency)
    if latency is not None and latency.get("config") != frontier["config"]:
        raise SystemExit(f"{args.query_latency}: measured on {latency.get('config')}, the points on "
                         f"{frontier['config']}")
    command = command_line(__file__, argv)
    frontier["command"] = command
    stem.with_suffix(".json").write_text(json.dumps(frontier, indent=2) + "\n")
    write_markdown(frontier, stem.with_suffix(".md"), command)
    plot(frontier, stem.with_suffix(".png"))
    return frontier


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
