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

import base64
import html
import io
import json
import os
from collections.abc import Callable, Sequence

__all__ = [
    "STYLE",
    "COLORS",
    "MAX_WIDTH",
    "use",
    "label",
    "text_problems",
    "check_open_figures",
    "MAX_BYTES",
    "Frames",
    "render_frames",
    "stepper_html",
    "explorable",
    "live",
    "lse_graph",
]

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
    _register_check()


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


def _texts(fig):
    """The visible text boxes a reader reads: (description, artist) pairs.

    A legend counts as one box; the texts inside it are not checked against each other.
    """
    from matplotlib.text import Text

    legends = [ax.get_legend() for ax in fig.axes] + list(fig.legends)
    legends = [leg for leg in legends if leg is not None and leg.get_visible()]
    inside = {id(t) for leg in legends for t in leg.findobj(Text)}
    # Matplotlib keeps labels for ticks outside the axis's view limits but never draws them.
    undrawn = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            pad = 1e-9 * max(1.0, abs(hi - lo))
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo - pad <= tick.get_loc() <= hi + pad:
                    undrawn |= {id(tick.label1), id(tick.label2)}
    out = [
        (repr(t.get_text())[:40], t)
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and id(t) not in inside | undrawn
    ]
    return out + [("legend", leg) for leg in legends]


def text_problems(fig, *, tolerance: float = 1.0) -> list[str]:
    r"""Problems a reader would see in ``fig``'s text: overlaps and literal ``\n``.

    The figure is drawn; every visible text (titles, tick labels, axis labels, colorbar
    labels, annotations) and every legend gets its window extent from the renderer, and
    any two boxes that overlap by more than ``tolerance`` pixels in both directions are
    reported, as is any text holding a backslash followed by ``n`` (a ``\n`` meant as a
    line break but written raw). An empty list means the figure passes.
    """
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems = []
    items = _texts(fig)
    for desc, a in items:
        if "\\n" in getattr(a, "get_text", lambda: "")():
            problems.append(f"literal \\n in text {desc}")
    boxes = []
    for desc, a in items:
        bb = a.get_window_extent(renderer)
        if bb.width > 0 and bb.height > 0:
            boxes.append((desc, bb))
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            (d1, b1), (d2, b2) = boxes[i], boxes[j]
            w = min(b1.x1, b2.x1) - max(b1.x0, b2.x0)
            h = min(b1.y1, b2.y1) - max(b1.y0, b2.y0)
            if w > tolerance and h > tolerance:
                problems.append(f"text boxes overlap: {d1} and {d2}")
    return problems


def check_open_figures() -> list[str]:
    """Run :func:`text_problems` on every open figure; return the problems, figure by figure."""
    import matplotlib.pyplot as plt

    out = []
    for num in plt.get_fignums():
        out += [f"figure {num}: {p}" for p in text_problems(plt.figure(num))]
    return out


def _post_execute_check() -> None:
    """IPython post-execute hook: fail the cell's output (stderr) on a figure text problem."""
    import sys

    problems = check_open_figures()
    if problems:
        print("FIGURE TEXT CHECK FAILED:\n" + "\n".join(problems), file=sys.stderr)


_registered = False


def _register_check() -> None:
    """When LSE_CHECK_FIGURES=1 and IPython runs, check every figure after each cell."""
    global _registered
    if _registered or os.environ.get("LSE_CHECK_FIGURES") != "1":
        return
    try:
        from IPython import get_ipython
    except ImportError:
        return
    ip = get_ipython()
    if ip is not None:
        ip.events.register("post_execute", _post_execute_check)
        # the inline backend closes figures in its own post_execute hook: run after ours
        try:
            from matplotlib_inline.backend_inline import flush_figures
        except ImportError:
            flush_figures = None
        if flush_figures in ip.events.callbacks["post_execute"]:
            ip.events.unregister("post_execute", flush_figures)
            ip.events.register("post_execute", flush_figures)
        _registered = True


# ---------------------------------------------------------------------------------------
# Explorables
# Explorables: a figure with the parameter a reader would turn under their hand.
#
# One mechanism for every chapter. :func:`explorable` takes a grid of parameter values
# and a function that draws one frame (a new Matplotlib figure for one value):
#
# - in a live kernel with ipywidgets (Jupyter, Binder) a slider redraws the figure;
# - everywhere else (the book's build, nbval, the PDF) every frame is rendered once,
#   during execution, into one output: ``image/png`` (the default frame: the PDF prints it)
#   and ``text/html`` (the page: the default frame with its alt text, the other frames as PNG
#   data URIs). MyST-NB's ``mystnb: figure:`` metadata numbers and captions it once.
#   ``_static/explorable.js`` shows a range input (arrow keys step it) that swaps the image
#   and states the current value in text. Nothing is loaded from outside the page; without
#   the script the default frame stays.
#
# Which of the two: the slider only when an IPython kernel is running, ipywidgets imports,
# and neither ``LSE_EXPLORABLE=static`` nor ``TQDM_DISABLE`` (set while the book is built and
# tested) is in the environment. Tag the cell ``nbval-ignore-output``.


#: The largest stepper (all frames, base64) one explorable may embed, 1.5 MB.
MAX_BYTES = 1_500_000


class Frames:
    """Rendered frames: ``values``, their text ``labels``, PNG bytes and the default index."""

    def __init__(self, values, labels, pngs, default, size=None):
        self.values, self.labels, self.pngs, self.default = list(values), list(labels), pngs, default
        #: display width and height in px of the default frame (its PNG is ``scale`` times that)
        self.size = size

    def __len__(self) -> int:
        return len(self.pngs)


def _png(fig, dpi: float) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def render_frames(
    draw: Callable,
    values: Sequence,
    *,
    default: int = 0,
    fmt: str = "{:g}",
    name: str = "",
    scale: float = 2.0,
) -> Frames:
    """Call ``draw(v)`` (which returns a new figure) for every value and keep its PNG.

    Frames are rendered at ``scale`` times the figure's dpi (2: as sharp as the book's
    retina figures); each figure is closed after it is rendered.
    """
    import matplotlib.pyplot as plt

    if not 0 <= default < len(values):
        raise ValueError(f"default index {default} outside the {len(values)} values")
    pngs, size = [], None
    for i, v in enumerate(values):
        fig = draw(v)
        pngs.append(_png(fig, fig.dpi * scale))
        if i == default:
            w, h = fig.get_size_inches() * fig.dpi
            size = (round(w), round(h))
        plt.close(fig)
    labels = [f"{name} = {fmt.format(v)}" if name else fmt.format(v) for v in values]
    return Frames(values, labels, pngs, default, size)


def stepper_html(frames: Frames, *, name: str = "value", alt: str = "", max_bytes: int = MAX_BYTES) -> str:
    """The ``text/html`` stepper for ``frames``; raises if it is over ``max_bytes``."""
    uris = ["data:image/png;base64," + base64.b64encode(p).decode("ascii") for p in frames.pngs]
    data = json.dumps({"labels": frames.labels, "frames": uris, "default": frames.default})
    data = data.replace("</", "<\\/")
    n = len(frames)
    label = html.escape(frames.labels[frames.default])
    size = f' width="{frames.size[0]}"' if frames.size else ""
    out = (
        f'<div class="lse-explorable" data-name="{html.escape(name)}">'
        f'<img src="{uris[frames.default]}" alt="{html.escape(alt)}"{size}>'
        f'<div class="lse-explorable-controls" hidden>'
        f'<label>{html.escape(name)} <input type="range" min="0" max="{n - 1}" step="1" '
        f'value="{frames.default}" aria-valuetext="{label}"></label>'
        f'<output aria-live="polite">{label}</output></div>'
        f'<script type="application/json" class="lse-explorable-data">{data}</script></div>'
    )
    if len(out.encode()) > max_bytes:
        raise ValueError(f"explorable is {len(out.encode())} bytes, over its {max_bytes} budget")
    return out


def live() -> bool:
    """True when a slider can redraw the figure: a kernel, ipywidgets, not a build or test."""
    if os.environ.get("LSE_EXPLORABLE") == "static" or os.environ.get("TQDM_DISABLE"):
        return False
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def explorable(
    draw: Callable,
    values: Sequence,
    *,
    default: int = 0,
    name: str = "value",
    fmt: str = "{:g}",
    alt: str = "",
    max_bytes: int = MAX_BYTES,
):
    """Show a figure whose parameter the reader can turn.

    ``draw(v)`` returns a new Matplotlib figure for the value ``v``; ``values`` is the grid
    and ``values[default]`` the frame the page and the PDF show first. ``name`` and ``fmt``
    write the value as text (``"β = 4"``); ``alt`` is the figure's alt text on the page
    (MyST-NB's ``image: alt`` metadata applies to the PDF's image only). Returns the :class:`Frames` (static) or the
    slider widget (live).
    """
    import matplotlib.pyplot as plt
    from IPython.display import display

    if live():
        import ipywidgets as w

        opts = [(f"{fmt.format(v)}", i) for i, v in enumerate(values)]
        slider = w.SelectionSlider(options=opts, value=default, description=name)
        # The frame is a display that the slider updates in place (a display id), not an
        # ipywidgets Output: entering an Output's capture hung kernels run by nbclient with
        # no frontend attached (chapter timings at default flags).
        fig = draw(values[default])
        handle = display(fig, display_id=True)
        plt.close(fig)

        def show(change):
            new = draw(values[change["new"]])
            handle.update(new)
            plt.close(new)

        slider.observe(show, names="value")
        display(slider)
        return slider
    frames = render_frames(draw, values, default=default, fmt=fmt, name=name)
    png = base64.b64encode(frames.pngs[default]).decode("ascii")
    w, h = frames.size
    page = stepper_html(frames, name=name, alt=alt, max_bytes=max_bytes)
    # one output: the page shows the stepper (text/html), the PDF the default frame (image/png);
    # the cell's mystnb figure metadata numbers and captions it once
    display(
        {"text/html": page, "image/png": png, "text/plain": f"<Figure: {frames.labels[default]}>"},
        raw=True,
        metadata={"image/png": {"width": w, "height": h}},
    )
    return frames


def lse_graph(
    children: Sequence[str],
    parents: Sequence[str],
    weights,
    *,
    focus: int = 0,
    sim: str | None = None,
    grad: str | None = None,
    title: str = "",
    ax=None,
):
    r"""Draw a model as the book's graph: children below, parents above, softmax weights on the edges.

    Every chapter draws its model with this one function, so the motif reads the same
    everywhere: the energy is :math:`E = -\sum_c \ln \sum_p \exp \mathrm{sim}(v_c, v_p)`,
    each child spreads one unit of weight over its parents, and its gradient is the
    weighted sum of the similarity's gradients.

    Args:
      children: labels of the child nodes (Matplotlib TeX allowed), drawn in the bottom row.
      parents: labels of the parent nodes, drawn in the top row.
      weights: ``(len(children), len(parents))`` softmax weights :math:`w_{cp}`, each row on
        the simplex. An edge's width and opacity follow its weight; the edges of child
        ``focus`` are drawn in colour and labelled with their weight.
      focus: the child whose weights are labelled.
      sim: TeX (no dollars) of the model's similarity, written under the graph; None: the
        general :math:`\mathrm{sim}(v_c, v_p)`.
      grad: TeX (no dollars) of the gradient it gives, written under ``sim``; None: chapter
        1's :math:`\partial E / \partial v_c = -\sum_p w_{cp}\, \partial \mathrm{sim} / \partial v_c`.
      title: the axes title.
      ax: axes to draw on; a new figure (6.4 x 3 in) if None.

    Returns:
      The figure.

    Examples:
      >>> import numpy as np
      >>> from lse_energy import plotting
      >>> w = np.array([[0.7, 0.3], [0.5, 0.5], [0.1, 0.9]])
      >>> fig = plotting.lse_graph(
      ...     ["$x_1$", "$x_2$", "$x_3$"], [r"$\mu_1$", r"$\mu_2$"], w
      ... )
      >>> plotting.text_problems(fig)
      []
    """
    import matplotlib.pyplot as plt
    import numpy as np

    from lse_energy import _validate

    n_c, n_p = len(children), len(parents)
    _validate.count("len(children)", n_c)
    _validate.count("len(parents)", n_p)
    if np.shape(weights) != (n_c, n_p):
        raise ValueError(
            f"weights must have shape (len(children), len(parents)) = {(n_c, n_p)}, got {np.shape(weights)}"
        )
    w = _validate.weight_rows("weights", weights)
    if sim is None:
        sim = r"\mathrm{sim}(v_c, v_p)"
    if grad is None:
        grad = r"\frac{\partial E}{\partial v_c} = -\sum_p w_{cp}\,\frac{\partial\,\mathrm{sim}}{\partial v_c}"
    focus = _validate.count("focus", focus, low=0)
    if focus >= n_c:
        raise ValueError(f"focus must index a child (0 to {n_c - 1}), got {focus}")
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 2.8))
    else:
        fig = ax.figure
    width = max(n_c, n_p)
    xc = np.linspace(0, width - 1, n_c) if n_c > 1 else np.array([(width - 1) / 2])
    xp = np.linspace(0, width - 1, n_p) if n_p > 1 else np.array([(width - 1) / 2])
    yc, yp = 0.0, 1.0
    for c in range(n_c):
        for p in range(n_p):
            mine = c == focus
            ax.plot(
                [xc[c], xp[p]],
                [yc, yp],
                color=COLORS[0] if mine else "0.6",
                lw=0.5 + 4.0 * w[c, p] if mine else 0.4 + 1.5 * w[c, p],
                alpha=0.25 + 0.75 * w[c, p] if mine else 0.15 + 0.35 * w[c, p],
                zorder=2 if mine else 1,
                solid_capstyle="round",
            )
    for x, y, labels, colour in ((xc, yc, children, COLORS[2]), (xp, yp, parents, COLORS[1])):
        ax.scatter(x, np.full(len(x), y), s=520, color=colour, zorder=3, edgecolor="white", lw=1.5)
        for xi, text in zip(x, labels):
            ax.text(xi, y, text, ha="center", va="center", fontsize=10, zorder=4)
    # the focus child's weights, each at the parent end of its edge
    for p in range(n_p):
        t = 0.72
        ax.text(
            xc[focus] + t * (xp[p] - xc[focus]),
            yc + t * (yp - yc),
            f"{w[focus, p]:.2f}",
            fontsize=8,
            color=COLORS[0],
            ha="center",
            va="center",
            bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.9),
            zorder=5,
        )
    ax.text(-0.45, yp, "parents", ha="right", va="center", fontsize=9, color="0.3")
    ax.text(-0.45, yc, "children", ha="right", va="center", fontsize=9, color="0.3")
    ax.text(
        (width - 1) / 2,
        -0.42,
        rf"$\mathrm{{sim}} = {sim}$" + "\n" + rf"${grad}$",
        ha="center",
        va="top",
        fontsize=9,
    )
    ax.set_xlim(-1.35, width - 1 + 0.4)
    ax.set_ylim(-1.0, 1.25)
    ax.axis("off")
    if title:
        ax.set_title(title)
    return fig
