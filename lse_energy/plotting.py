r"""One small plotting style for every figure in the book.

Call :func:`use` once at the top of a chapter. It sets Matplotlib defaults
(readable font sizes, light grids, a colour-blind-safe cycle, constrained layout)
and leaves the backend alone, so figures still render inline. Matplotlib is
imported lazily: the package itself does not depend on it.
"""

from __future__ import annotations

__all__ = ["STYLE", "COLORS", "use", "label"]

# Okabe-Ito colour-blind-safe palette (Okabe and Ito, 2008).
#: The Okabe-Ito colour-blind-safe palette, in the order figures use it.
COLORS = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]

#: The matplotlib rcParams every figure of the book uses (set by :func:`use`).
STYLE = {
    "figure.figsize": (6.4, 4.0),
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "figure.constrained_layout.use": True,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "legend.frameon": False,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "image.cmap": "viridis",
    "lines.linewidth": 1.6,
}


def use() -> None:
    """Apply :data:`STYLE` and the :data:`COLORS` cycle to Matplotlib's rcParams."""
    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams.update(STYLE)
    mpl.rcParams["axes.prop_cycle"] = cycler(color=COLORS)


def label(ax, *, title: str, xlabel: str, ylabel: str, legend: bool = False):
    """Set a title and both axis labels (with units) in one call; all are required."""
    if not (title and xlabel and ylabel):
        raise ValueError("title, xlabel and ylabel must all be non-empty")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if legend:
        ax.legend()
    return ax
