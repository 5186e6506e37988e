r"""One small plotting style for every figure in the book.

Call :func:`use` once at the top of a chapter. It sets Matplotlib defaults
(readable font sizes, light grids, a colour-blind-safe cycle, constrained layout)
and leaves the backend alone, so figures still render inline. Under IPython (a
notebook, or the book's build) inline figures are PNG at twice their pixel size
("retina"), stored with their display width, so they stay sharp on a high-density
screen at the size the page gives them. Figures are sized for the book's text
column: at most about 7 in wide, which is about 700 px at 100 dpi. Matplotlib is
imported lazily: the package itself does not depend on it.
"""

from __future__ import annotations

__all__ = ["STYLE", "COLORS", "MAX_WIDTH", "use", "label"]

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


#: The widest figure, in inches, that fits the book's text column (about 700 px at 100 dpi).
MAX_WIDTH = 7.0


def use() -> None:
    """Apply :data:`STYLE` and the :data:`COLORS` cycle to Matplotlib's rcParams.

    Under IPython, inline figures are also drawn at twice the resolution ("retina"
    PNG, with the display width stored beside it), so they are sharp at the size
    the page shows them. Outside IPython nothing else changes.
    """
    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams.update(STYLE)
    mpl.rcParams["axes.prop_cycle"] = cycler(color=COLORS)
    _retina_inline()


def _retina_inline() -> None:
    """Inline figures as retina PNG when running under IPython; otherwise do nothing."""
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return
    if get_ipython() is not None:
        set_matplotlib_formats("retina")


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
