"""lse_energy.plotting's figure text check and explorables (issue 50, points 4 and explorables)."""

import base64
import json
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from lse_energy import plotting  # noqa: E402


def _clean():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1], label="a line")
    ax.set(title="A title", xlabel="x", ylabel="y")
    ax.legend(loc="lower right")
    return fig


def test_clean_figure_passes():
    fig = _clean()
    assert plotting.text_problems(fig) == []
    plt.close(fig)


def test_literal_backslash_n_fires():
    fig, ax = plt.subplots()
    ax.set_title("first line\\nsecond line")  # two characters, not a line break
    assert any("literal" in p for p in plotting.text_problems(fig))
    ax.set_title("first line\nsecond line")  # a real line break passes
    assert not any("literal" in p for p in plotting.text_problems(fig))
    plt.close(fig)


def test_overlapping_titles_fire():
    fig, axes = plt.subplots(1, 2, figsize=(3, 2), layout=None)
    for ax in axes:
        ax.set_title("a long panel title that runs into its neighbour")
    assert any("overlap" in p for p in plotting.text_problems(fig))
    plt.close(fig)


def test_legend_over_tick_labels_fires():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [0, 1], label="a line")
    ax.legend(loc="upper left", bbox_to_anchor=(-0.3, 0.2))
    assert any("legend" in p for p in plotting.text_problems(fig))
    plt.close(fig)


def test_check_open_figures_names_the_figure():
    plt.close("all")
    fig, ax = plt.subplots()
    ax.set_title("a\\nb")
    problems = plotting.check_open_figures()
    assert problems and problems[0].startswith(f"figure {fig.number}:")
    plt.close("all")


def _draw(beta):
    fig, ax = plt.subplots(figsize=(4, 2.5))
    x = np.linspace(-2, 2, 5)
    ax.bar(x, np.exp(beta * x) / np.exp(beta * x).sum())
    ax.set(title=f"β = {beta:g}", xlabel="x", ylabel="weight")
    return fig


VALUES = [0.0, 0.5, 1.0, 4.0]


def test_frames_one_per_value_and_value_text():
    frames = plotting.render_frames(_draw, VALUES, default=2, name="β")
    assert len(frames) == len(VALUES)
    assert frames.labels == ["β = 0", "β = 0.5", "β = 1", "β = 4"]
    assert all(p.startswith(b"\x89PNG") for p in frames.pngs)
    assert len(set(frames.pngs)) == len(VALUES)  # every frame differs
    html = plotting.stepper_html(frames, name="β")
    data = json.loads(re.search(r'lse-explorable-data">(.*?)</script>', html).group(1))
    assert data["labels"] == frames.labels and data["default"] == 2
    assert base64.b64decode(data["frames"][1].split(",", 1)[1]) == frames.pngs[1]
    assert 'type="range"' in html and 'max="3"' in html and 'value="2"' in html
    assert "<output" in html and "β = 1</output>" in html
    assert "http" not in html  # nothing loaded from outside


def test_size_budget_fires():
    frames = plotting.render_frames(_draw, VALUES)
    assert len(plotting.stepper_html(frames).encode()) < plotting.MAX_BYTES
    with pytest.raises(ValueError, match="budget"):
        plotting.stepper_html(frames, max_bytes=1000)


def test_default_index_checked():
    with pytest.raises(ValueError):
        plotting.render_frames(_draw, VALUES, default=4)


def test_static_outputs_default_frame_as_png_then_stepper(monkeypatch):
    """Outside a kernel: the default frame is an image/png output, the stepper a text/html one."""
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, **k: shown.append((obj, k)))
    monkeypatch.setenv("LSE_EXPLORABLE", "static")
    assert not plotting.live()
    frames = plotting.explorable(_draw, VALUES, default=1, name="β", alt="bars")
    assert len(shown) == 1
    ((bundle, kw),) = shown
    assert kw["raw"] and base64.b64decode(bundle["image/png"]) == frames.pngs[1]
    assert kw["metadata"]["image/png"] == {"width": 400, "height": 250}  # retina: 2x pixels
    assert "lse-explorable" in bundle["text/html"] and 'alt="bars"' in bundle["text/html"]
    assert len(frames) == 4


def test_keyboard_script_present():
    """The static stepper's script: a range input (arrow keys step it natively), the value
    stated in text, no network."""
    from pathlib import Path

    js = (Path(__file__).parents[2] / "_static" / "explorable.js").read_text()
    assert "lse-explorable" in js and '"input"' in js and "textContent" in js
    assert "aria-valuetext" in js
    assert not re.search(r"https?://|fetch\(|XMLHttpRequest|import\(", js)


# The recurring children/parents motif (issue 50, point 5).
_W = np.array([[0.7, 0.3, 0.0], [0.2, 0.2, 0.6]])


def test_lse_graph_draws_every_edge_and_the_focus_weights():
    fig = plotting.lse_graph(["a", "b"], ["p", "q", "r"], _W, focus=1)
    ax = fig.axes[0]
    assert len(ax.lines) == 6
    texts = [t.get_text() for t in ax.texts]
    assert ["0.20", "0.20", "0.60"] == [t for t in texts if t[:2] == "0."]
    assert plotting.text_problems(fig) == []
    plt.close(fig)


@pytest.mark.parametrize(
    "weights, focus, match",
    [
        (_W[:, :2], 0, "shape"),
        (_W * 2, 0, "sum to 1"),
        (-_W, 0, "nonnegative"),
        (_W, 2, "focus"),
        (_W, True, "focus"),
    ],
)
def test_lse_graph_refuses_bad_weights(weights, focus, match):
    with pytest.raises((ValueError, TypeError), match=match):
        plotting.lse_graph(["a", "b"], ["p", "q", "r"], weights, focus=focus)


def test_tick_labels_outside_the_view_are_not_checked():
    # Matplotlib keeps a label for a tick outside the view limits but does not draw it; two such
    # labels at one place are no overlap a reader sees. A drawn overlap still fires.
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [0, 1])
    ax.set_xticks([-10.0, -9.99, 0.0, 1.0])
    ax.set_xlim(0, 1)
    assert plotting.text_problems(fig) == []
    ax.set_xticks([0.0, 0.001, 1.0])
    assert any("overlap" in p for p in plotting.text_problems(fig))
    plt.close(fig)


def test_live_explorable_is_a_slider_that_redraws(monkeypatch):
    # In a live kernel (Jupyter, Binder) the same call gives an ipywidgets slider over the values;
    # moving it draws the frame for the new value (the static stepper is for the built page).
    pytest.importorskip("ipywidgets")
    import IPython.display

    monkeypatch.setattr(plotting, "live", lambda: True)
    shown = []

    class Handle:  # what display(..., display_id=True) returns in a kernel
        def update(self, obj):
            shown.append(("update", obj))

    def display(obj, display_id=False):
        shown.append(("display", obj))
        return Handle() if display_id else None

    monkeypatch.setattr(IPython.display, "display", display)
    drawn = []

    def draw(beta):
        drawn.append(beta)
        return _draw(beta)

    slider = plotting.explorable(draw, VALUES, default=1, name="β")
    assert [label for label, _ in slider.options] == ["0", "0.5", "1", "4"]
    assert slider.value == 1 and drawn == [0.5]
    assert [kind for kind, _ in shown] == ["display", "display"] and shown[1][1] is slider
    slider.value = 3
    assert drawn == [0.5, 4.0] and shown[-1][0] == "update"
    plt.close("all")
