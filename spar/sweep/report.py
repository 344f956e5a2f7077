"""The frontier's report: its points, the default rule that picks one, its table and its plot.

A :class:`FrontierPoint` is one (Λ kind, dimension, passage storage, seed) scored by :mod:`spar.sweep.frontier`; a
:class:`FrontierReport` groups the points of one run by (kind, dim, storage) over seeds.

**The default rule** (:meth:`FrontierReport.choice`), which every shipped config, the embedded default and the code's
own defaults follow: take the best group by mean **dev** SPAR score (never test); every group whose mean dev score is
within one seed standard deviation of it (the best group's standard deviation over seeds: differences smaller than
that are noise) is as good; of those, pick the cheapest — fewest bytes per passage, then the lowest single-query
latency of the exhaustive (flat) index, then the better dev score. With one seed the noise is unknown and the rule
picks the best dev score (the choice line says so).

Example::

    >>> from spar.sweep.report import FrontierPoint, FrontierReport
    >>> def point(dim, storage, nbytes, dev, seed, ms):
    ...     return FrontierPoint(kind="projection", dim=dim, seed=seed, mu=1.0, dev_spar=dev, spar={"nDCG@10": dev},
    ...                          lambda_alone={}, rbo=0.0, bytes_per_passage=nbytes, train_seconds=0.0,
    ...                          storage=storage, latency={"flat": {"single_ms": ms}} if seed == 0 else {})
    >>> points = [point(3072, "sq4", 1728, dev, s, 3.0) for s, dev in enumerate((0.74, 0.73, 0.72))]  # sd 0.01
    >>> points += [point(1536, "fs4", 960, dev, s, 0.7) for s, dev in enumerate((0.72, 0.72, 0.72))]  # -0.01: noise
    >>> points += [point(768, "sq4", 576, dev, s, 0.5) for s, dev in enumerate((0.70, 0.71, 0.70))]   # below
    >>> choice = FrontierReport("toy", points, {}).choice()
    >>> choice.key, choice.bytes_per_passage
    (('projection', 1536, 'fs4'), 960)
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from spar.index.storage import STORAGES
from spar.index.types.registry import exhaustive_type, index_type_names, registered_type


@dataclass
class FrontierPoint:
    kind: str
    dim: int
    seed: int | None
    mu: float
    dev_spar: float
    spar: dict[str, float]
    lambda_alone: dict[str, float]
    rbo: float
    bytes_per_passage: int
    train_seconds: float
    steps: int = 0
    storage: str = "float32"
    #: {index type: {"single_ms", "p50_ms", "batched_ms", "vs_base": {...}, "vs_hybrid": {...}}} (timed seed)
    latency: dict[str, Any] = field(default_factory=dict)
    #: {approximate index type: {"nDCG@10", "R@100", "loss": exact flat nDCG@10 minus this, "overlap@10"}} (timed seed)
    approximate: dict[str, Any] = field(default_factory=dict)
    #: dev SPAR of μ's sweep over the decoded codes (``dev_spar`` is the flat index's, as served; None: made before
    #: the frontier scored through the index, when ``dev_spar`` was this figure)
    dev_decoded: float | None = None
    #: The point's storage run (:mod:`spar.sweep.points`: its config.yaml, tune/ and index/); None: scored in memory
    #: or made before points were runs
    run: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "FrontierPoint":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class Choice:
    """The point the default rule picks (see the module docstring)."""

    key: tuple[str, int, str]
    bytes_per_passage: int
    dev: float
    test: float
    seeds: int
    single_ms: float | None
    best: tuple[str, int, str]
    best_dev: float
    #: The best group's standard deviation of dev SPAR over seeds (None: one seed, noise unknown).
    tolerance: float | None

    @property
    def kind(self) -> str:
        return self.key[0]

    @property
    def dim(self) -> int:
        return self.key[1]

    @property
    def storage(self) -> str:
        return self.key[2]


def _mean(values) -> float:
    return statistics.mean(values)


def _sd(values: list[float]) -> float | None:
    return statistics.stdev(values) if len(values) > 1 else None


@dataclass
class FrontierReport:
    dataset: str
    points: list[FrontierPoint]
    references: dict[str, Any]
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "FrontierReport":
        details = {k: v for k, v in data.items() if k not in ("dataset", "references", "points")}
        return cls(data["dataset"], [FrontierPoint.from_json(p) for p in data["points"]], data["references"], details)

    def to_json(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "references": self.references, "points": [asdict(p) for p in self.points],
                **self.details}

    def groups(self) -> dict[tuple[str, int, str], list[FrontierPoint]]:
        out: dict[tuple[str, int, str], list[FrontierPoint]] = {}
        for p in self.points:
            out.setdefault((p.kind, p.dim, p.storage), []).append(p)
        order = {name: i for i, name in enumerate(STORAGES)}
        return dict(sorted(out.items(), key=lambda kv: (kv[0][0], kv[0][1], order.get(kv[0][2], 99))))

    @staticmethod
    def single_ms(pts: list[FrontierPoint], index_type: str | None = None) -> float | None:
        """The group's single-query latency with ``index_type`` (default the exhaustive type's, measured on its timed
        seed), if measured."""
        index_type = index_type or exhaustive_type().name
        return next((p.latency[index_type]["single_ms"] for p in pts if index_type in p.latency), None)

    def choice(self) -> Choice | None:
        """The default rule (module docstring): the cheapest group within one seed sd of the best on dev."""
        groups = self.groups()
        if not groups:
            return None
        dev = {key: _mean(p.dev_spar for p in pts) for key, pts in groups.items()}
        best = max(groups, key=lambda key: (dev[key], -groups[key][0].bytes_per_passage))
        tolerance = _sd([p.dev_spar for p in groups[best]])
        floor = dev[best] - (tolerance or 0.0) - 1e-12
        as_good = [key for key in groups if dev[key] >= floor]

        def cost(key):
            ms = self.single_ms(groups[key])
            return groups[key][0].bytes_per_passage, ms if ms is not None else float("inf"), -dev[key]

        key = min(as_good, key=cost)
        pts = groups[key]
        return Choice(key, pts[0].bytes_per_passage, dev[key], _mean(p.spar["nDCG@10"] for p in pts), len(pts),
                      self.single_ms(pts), best, dev[best], tolerance)

    def choice_line(self) -> str:
        """One line naming the point a config should use (:meth:`choice`) and why."""
        c = self.choice()
        if c is None:
            return ""
        kind, dim, storage = c.key
        noise = (f"within one seed sd ({c.tolerance:.4f}) of the best on dev ({c.best[0]} {c.best[1]} {c.best[2]}, "
                 f"{c.best_dev:.4f})" if c.tolerance is not None
                 else "the best on dev (one seed: the noise is unknown, run more seeds)")
        ms = f", {exhaustive_type().label} {c.single_ms:.2f} ms/query" if c.single_ms is not None else ""
        return (f"Default rule — the cheapest point (bytes, then single-query latency) {noise}: {kind} Λ, {dim} "
                f"dims, {storage} ({c.bytes_per_passage:,} B/passage{ms}): dev SPAR {c.dev:.4f}, test SPAR nDCG@10 "
                f"{c.test:.4f} over {c.seeds} seed(s).")

    def markdown(self, commands: list[str] | None = None) -> str:
        def cell(values: list[float], digits: int = 3) -> str:
            if len(values) == 1:
                return f"{values[0]:.{digits}f}"
            return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"

        def latency(pts: list[FrontierPoint], index_type: str) -> str:
            timed = next((p.latency[index_type] for p in pts if index_type in p.latency), None)
            if not timed:
                return "–"
            return (f"{timed['single_ms']:.2f} ({timed['vs_hybrid']['single_ms']:.2f}× hybrid, "
                    f"{timed['vs_base']['single_ms']:.2f}× base)")

        def approximate(pts: list[FrontierPoint], index_type: str) -> str:
            scored = next((p.approximate[index_type] for p in pts if index_type in p.approximate), None)
            if not scored:
                return latency(pts, index_type)
            return f"{scored['nDCG@10']:.3f} ({-scored['loss']:+.3f}); " + latency(pts, index_type)

        refs = self.references
        base_bytes = refs.get("base", {}).get("bytes_per_passage")
        types = [t for t in index_type_names() if any(t in p.latency or t in p.approximate for p in self.points)]
        scan = exhaustive_type()
        types = types or [scan.name]
        kinds = {t: registered_type(t) for t in types}
        header = {t: f"{kind.label} nDCG@10 (vs {scan.label}); 1-query ms" if kind.approximate
                  else f"{kind.label} 1-query ms" for t, kind in kinds.items()}
        lines = [f"**{self.dataset}** — quality per byte (test queries; μ tuned on dev against the stored vectors). "
                 f"Base nDCG@10 {refs['base']['nDCG@10']:.3f} / R@100 {refs['base']['R@100']:.3f}"
                 + (f" at {base_bytes:,} B/passage (float32)" if base_bytes else "") + "; BM25 hybrid "
                 f"{refs['hybrid']['nDCG@10']:.3f} / {refs['hybrid']['R@100']:.3f} (base scanned exactly)"
                 + (f", as served {refs['hybrid_served']['nDCG@10']:.3f} / {refs['hybrid_served']['R@100']:.3f} "
                    f"(base in HNSW, efSearch {refs['hybrid_served']['ef_search']} chosen on dev)"
                    if "hybrid_served" in refs else "") + "; BM25 "
                 f"{refs['bm25']['nDCG@10']:.3f} / {refs['bm25']['R@100']:.3f}. Latency: ms per query, one at a "
                 "time, k = 100, first seed; in brackets the ratio to the hybrid as served (the base in HNSW and "
                 "Pyserini BM25 at once on two threads, fused) and to the base-only index of the same type. "
                 "Approximate indexes: SPAR "
                 f"nDCG@10 through that index at the {scan.label} index's μ (first seed), in brackets the change "
                 f"against the exact {scan.label} scan of the same storage.", "",
                 "| Λ kind | dim | storage | bytes/passage | seeds | Λ nDCG@10 | RBO vs teacher | SPAR nDCG@10 | "
                 "SPAR R@100 | " + " | ".join(header[t] for t in types) + " | train s |",
                 "|---|---:|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(types) + "---:|"]
        for (kind, dim, storage), pts in self.groups().items():
            lines.append(
                f"| {kind} | {dim} | {storage} | {pts[0].bytes_per_passage:,} | {len(pts)} | "
                f"{cell([p.lambda_alone['nDCG@10'] for p in pts])} | {cell([p.rbo for p in pts])} | "
                f"{cell([p.spar['nDCG@10'] for p in pts])} | {cell([p.spar['R@100'] for p in pts])} | "
                + " | ".join(approximate(pts, t) if kinds[t].approximate else latency(pts, t) for t in types)
                + f" | {statistics.mean(p.train_seconds for p in pts):.0f} |")
        choice = self.choice_line()
        lines += ["", choice] if choice else []
        if commands:
            lines += ["", "Made by:", "", *[f"`{c}`  " for c in commands]]
        return "\n".join(lines) + "\n"

    def plot(self, path: str | Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker  # noqa: F401  (FuncFormatter below)

        fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
        lines = sorted({(p.kind, p.storage) for p in self.points},
                       key=lambda ks: (ks[0], STORAGES.index(ks[1]) if ks[1] in STORAGES else 99))
        for kind, storage in lines:
            groups = [(dim, pts) for (k, dim, st), pts in self.groups().items() if k == kind and st == storage]
            xs = [pts[0].bytes_per_passage for _, pts in groups]
            ys = [statistics.mean(p.spar["nDCG@10"] for p in pts) for _, pts in groups]
            err = [statistics.stdev(p.spar["nDCG@10"] for p in pts) if len(pts) > 1 else 0.0 for _, pts in groups]
            ax.errorbar(xs, ys, yerr=err, marker="o", markersize=4, capsize=3, label=f"SPAR, {kind} Λ, {storage}")
            for (dim, _), x, y in zip(groups, xs, ys):
                ax.annotate(str(dim), (x, y), textcoords="offset points", xytext=(3, -9), fontsize=6)
        refs = self.references
        for name, style in (("hybrid", "--"), ("hybrid_served", (0, (5, 1))), ("bm25", "-."), ("base", ":")):
            if name not in refs:
                continue
            ax.axhline(refs[name]["nDCG@10"], color="grey", linestyle=style, linewidth=1,
                       label=f"{name} ({refs[name]['nDCG@10']:.3f})")
        if refs["base"].get("bytes_per_passage"):
            ax.scatter([refs["base"]["bytes_per_passage"]], [refs["base"]["nDCG@10"]], marker="s", color="black",
                       zorder=3, label="base alone, float32")
        choice = self.choice()
        if choice is not None:
            ax.scatter([choice.bytes_per_passage], [choice.test], marker="*", s=160, facecolors="none",
                       edgecolors="red", zorder=4, label=f"default rule: {choice.dim} {choice.storage}")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:,.0f}"))
        ax.set_xlabel("bytes per passage of the SPAR index's codes (log scale)")
        ax.set_ylabel("SPAR nDCG@10 (test)")
        ax.set_title(f"{self.dataset}: quality per byte")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
