"""Peak RSS of every stage against the corpus size, as one curve (issue #35 item 3): a table and a PNG.

Two kinds of points, kept apart in the table and the plot:

- **synthetic** — ``bench/memory.py`` JSONs: synthetic vectors written through ``spar encode`` and indexed by
  ``spar index`` (``index.type=auto``: what spar serves at that size), then searched by a fresh process that opens
  the index as ``spar search`` does (exact re-ranking reads rows from disk). The index's own bytes (codes and graph
  links, which must be in memory for HNSW) are drawn beside them: what grows with N that no streaming can remove.
- **real** — measurements of whole stages on the Wikipedia experiment (``bench/stage_memory.py`` JSONs, or the
  ``costs`` of a results JSON, read from the artifacts' manifests), each given with its corpus size, because
  neither file records it. A point is only as current as the code it ran on: the table says when each was made.

    python -m bench.memory_curve --synthetic bench/results/memory-auto-curve.json \\
        --stage tune:667980:bench/results/memory-tune-663k-pread.json \\
        --stage index:667980:bench/results/memory-index-663k.json \\
        --stage evaluate:667980:bench/results/memory-evaluate-663k.json \\
        --costs 200000:results/odqa.json --out bench/results/memory-curve.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from bench._common import REPO, command_line, write_result

LIMIT_GB = 8.0


def synthetic_points(path: Path) -> list[dict]:
    """The write, index and search peaks of each corpus size of one ``bench/memory.py`` JSON."""
    result = json.loads(path.read_text())
    points = []
    for row in result["index"]["rows"]:
        served = row.get("index_manifest", {})
        kind = f"{served.get('type', row['index_type'])} {served.get('storage', '')}".strip()
        for stage in ("write", "index", "search"):
            if stage in row:
                points.append({"kind": "synthetic", "stage": stage, "passages": row["passages"],
                               "peak_rss_gb": row[stage]["peak_rss_gb"],
                               "anon_gb": row[stage].get("peak_anon_gb_sampled"),
                               "file_gb": row[stage].get("peak_file_backed_gb_sampled"),
                               "index_own_gb": round(row["index_faiss_bytes"] / 1e9, 3), "index": kind,
                               "dim": row["dim"], "source": _shown(path)})
    return points


def _shown(path: Path) -> str:
    """``path`` relative to the repository where it lies inside it."""
    resolved = path.resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(path)


def _made(path: Path) -> str:
    """The day the measurement was committed (a checkout resets files' mtimes), else the file's own mtime."""
    out = subprocess.run(["git", "log", "-1", "--format=%cs", "--", str(path.resolve())], cwd=REPO,
                         capture_output=True, text=True)
    if out.returncode == 0 and out.stdout.strip():
        return out.stdout.strip()
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).strftime("%Y-%m-%d") + " (uncommitted)"


def stage_point(spec: str) -> dict:
    """``STAGE:PASSAGES:FILE``: a ``bench/stage_memory.py`` JSON of one whole stage."""
    stage, passages, file = spec.split(":", 2)
    path = Path(file)
    result = json.loads(path.read_text())
    return {"kind": "real", "stage": stage, "passages": int(passages), "peak_rss_gb": result["peak_rss_gb"],
            "anon_gb": result.get("peak_anon_gb"), "file_gb": result.get("peak_file_gb"),
            "source": file, "measured": _made(path), "how": "bench/stage_memory.py (VmHWM)"}


def cost_points(spec: str) -> list[dict]:
    """``PASSAGES:FILE``: the ``costs`` of a results JSON (each artifact's manifest: its stage's peak RSS)."""
    passages, file = spec.split(":", 1)
    path = Path(file)
    points = []
    for cost in json.loads(path.read_text()).get("costs", []):
        if cost.get("peak_rss_gb") is None:
            continue
        points.append({"kind": "real", "stage": f"{cost['stage']} ({cost['artifact']})", "passages": int(passages),
                       "peak_rss_gb": cost["peak_rss_gb"], "anon_gb": None, "file_gb": None, "source": file,
                       "measured": _made(path), "how": "the artifact's manifest (peak RSS of its stage process)"})
    return points


def given_point(spec: str) -> dict:
    """``STAGE:PASSAGES:GB:SOURCE``: a figure measured outside a JSON (e.g. ``/usr/bin/time -v`` in the docs)."""
    stage, passages, gb, source = spec.split(":", 3)
    return {"kind": "real", "stage": stage, "passages": int(passages), "peak_rss_gb": float(gb), "anon_gb": None,
            "file_gb": None, "source": source, "measured": "see source", "how": "given"}


def _gb(value) -> str:
    return "" if value is None else f"{value:.2f}"


def write_markdown(result: dict, path: Path) -> None:
    lines = ["# Peak RSS against the corpus size", "",
             f"Target: ≤ {LIMIT_GB:g} GB for every stage at 663k; flat to 5M passages for index and search.", "",
             "## Synthetic vectors (`bench/memory.py`: the real stages over stub-encoder vectors)", "",
             "| passages | stage | index served | peak RSS GB | anonymous | file-backed | index's own bytes GB |",
             "|---:|---|---|---:|---:|---:|---:|"]
    for p in sorted((p for p in result["points"] if p["kind"] == "synthetic"),
                    key=lambda p: (p["passages"], p["stage"])):
        lines.append(f"| {p['passages']:,} | {p['stage']} | {p['index']} ({p['dim']}-d) | {_gb(p['peak_rss_gb'])} | "
                     f"{_gb(p['anon_gb'])} | {_gb(p['file_gb'])} | {_gb(p['index_own_gb'])} |")
    if result["synthetic_slopes"]:
        lines += ["", "Growth per million passages beyond the index's own bytes (least squares over the sizes): "
                  + "; ".join(f"{stage} {slope:+.3f} GB" for stage, slope in result["synthetic_slopes"].items())]
    lines += ["", "## Whole stages on the Wikipedia experiment", "",
              "| passages | stage | peak RSS GB | anonymous | file-backed | measured | source |",
              "|---:|---|---:|---:|---:|---|---|"]
    for p in sorted((p for p in result["points"] if p["kind"] == "real"), key=lambda p: (p["passages"], p["stage"])):
        flag = " **over**" if p["peak_rss_gb"] > LIMIT_GB else ""
        lines.append(f"| {p['passages']:,} | {p['stage']} | {_gb(p['peak_rss_gb'])}{flag} | {_gb(p['anon_gb'])} | "
                     f"{_gb(p['file_gb'])} | {p['measured']} | `{p['source']}` |")
    lines += ["", f"`{result['command']}`", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    synthetic = [p for p in result["points"] if p["kind"] == "synthetic"]
    colours = {"write": "tab:blue", "index": "tab:orange", "search": "tab:green"}
    for number, kind in enumerate(sorted({p["index"] for p in synthetic})):
        style = ("-", "--", "-.")[number % 3]
        for stage in ("write", "index", "search"):
            pts = sorted((p for p in synthetic if p["stage"] == stage and p["index"] == kind),
                         key=lambda p: p["passages"])
            if pts:
                ax.plot([p["passages"] for p in pts], [p["peak_rss_gb"] for p in pts], marker="o", linestyle=style,
                        color=colours[stage], label=f"{stage}, {kind} (synthetic)")
        own = sorted({(p["passages"], p["index_own_gb"]) for p in synthetic if p["index"] == kind})
        ax.plot(*zip(*own), linestyle=":", color="grey", marker="x" if number else None,
                label=f"own bytes of {kind}")
    for p in (p for p in result["points"] if p["kind"] == "real"):
        ax.scatter([p["passages"]], [p["peak_rss_gb"]], marker="s", zorder=3)
        ax.annotate(p["stage"].split(" (")[0], (p["passages"], p["peak_rss_gb"]), fontsize=7,
                    textcoords="offset points", xytext=(4, 2))
    ax.axhline(LIMIT_GB, color="red", linewidth=0.8, label=f"{LIMIT_GB:g} GB target")
    ax.set_xscale("log")
    ax.set_xlabel("passages")
    ax.set_ylabel("peak RSS (GB)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title("spar: peak RSS per stage against the corpus size")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def slope_beyond_own(points: list[dict], stage: str, index: str) -> float | None:
    """GB per million passages that a stage's peak grows by beyond the index's own bytes, for one served index kind
    (None below 2 sizes)."""
    pts = [(p["passages"] / 1e6, p["peak_rss_gb"] - p["index_own_gb"]) for p in points
           if p["kind"] == "synthetic" and p["stage"] == stage and p["index"] == index]
    if len({x for x, _ in pts}) < 2:
        return None
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--synthetic", type=Path, nargs="*", default=[], help="bench/memory.py result JSONs")
    ap.add_argument("--stage", action="append", default=[], metavar="STAGE:PASSAGES:FILE",
                    help="a bench/stage_memory.py JSON of a whole stage at a corpus size")
    ap.add_argument("--costs", action="append", default=[], metavar="PASSAGES:FILE",
                    help="a results JSON whose costs (from the artifacts' manifests) were made at a corpus size")
    ap.add_argument("--point", action="append", default=[], metavar="STAGE:PASSAGES:GB:SOURCE",
                    help="a peak measured outside a JSON, with where it is written down")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "memory-curve.json")
    args = ap.parse_args(argv)

    points = [p for path in args.synthetic for p in synthetic_points(path)]
    points += [stage_point(spec) for spec in args.stage]
    points += [p for spec in args.costs for p in cost_points(spec)]
    points += [given_point(spec) for spec in args.point]
    if not points:
        ap.error("nothing to draw: give --synthetic, --stage or --costs")
    kinds = sorted({p["index"] for p in points if p["kind"] == "synthetic"})
    slopes = {f"{stage} ({kind})": round(s, 3) for kind in kinds for stage in ("index", "search")
              if (s := slope_beyond_own(points, stage, kind)) is not None}
    largest_real = max((p for p in points if p["kind"] == "real"), key=lambda p: (p["passages"], p["peak_rss_gb"]),
                       default=None)
    worst = max(points, key=lambda p: p["peak_rss_gb"])
    result = {
        "spar": worst["peak_rss_gb"], "peer": LIMIT_GB, "ratio": round(worst["peak_rss_gb"] / LIMIT_GB, 3),
        "unit": "GB peak RSS, the largest point (GB = 1e9 bytes) against the 8 GB target",
        "peer_name": "the target's 8 GB limit (no peer system)",
        "worst": {k: worst[k] for k in ("kind", "stage", "passages", "peak_rss_gb")},
        "largest_real_point": largest_real and {k: largest_real[k] for k in ("stage", "passages", "peak_rss_gb")},
        "synthetic_slopes": slopes, "points": points, "command": command_line(__file__, argv),
    }
    out = write_result(result, args.out)
    write_markdown(out, args.out.with_suffix(".md"))
    plot(out, args.out.with_suffix(".png"))
    return out


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
