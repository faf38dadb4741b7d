"""The family × difficulty heat map of sample pass rates (spec §10.2, issue item 7)."""

from __future__ import annotations

from pathlib import Path

from evalkit.benchmarks.sobhard.settings import DIFFICULTIES, FAMILIES

HEATMAP_FILE = "sobhard_family_difficulty.png"


def cell_grid(metrics: dict[str, float]) -> list[list[float | None]]:
    """11 × 3 rates from ``sample_pass_rate/cell/<family>/<difficulty>`` (``None`` = empty)."""
    return [[metrics.get(f"sample_pass_rate/cell/{f}/{d}") for d in DIFFICULTIES] for f in FAMILIES]


def write_heatmap(plot_dir: Path, metrics: dict[str, float], title: str = "SOBHard sample pass rate") -> Path:
    """Write the heat map PNG into ``plot_dir`` and return its path. Empty cells are grey
    and marked "–"."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import numpy as np

    grid = cell_grid(metrics)
    data = np.array([[np.nan if v is None else v for v in row] for row in grid], dtype=float)
    plot_dir = Path(plot_dir)
    plot_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5.2, 6.4))
    cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="#d9d9d9")
    im = ax.imshow(np.ma.masked_invalid(data), cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(DIFFICULTIES)), DIFFICULTIES)
    ax.set_yticks(range(len(FAMILIES)), FAMILIES)
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            ax.text(j, i, "–" if v is None else f"{v:.2f}", ha="center", va="center", fontsize=9)
    balance = metrics.get("balance_score")
    headline = metrics.get("sample_pass_rate")
    sub = []
    if headline is not None:
        sub.append(f"sample_pass_rate {headline:.3f}")
    if balance is not None:
        sub.append(f"balance {balance:.3f}")
    ax.set_title(title + ("\n" + ", ".join(sub) if sub else ""), fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.05)
    fig.tight_layout()
    path = plot_dir / HEATMAP_FILE
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
