"""The rendered book, checked as a reader sees it, in headless Chromium.

The book is built from the stored notebook outputs (execution off: strict nbval
checks separately that those outputs are what the code produces), then every
page in the table of contents is loaded in Chromium. For each page we assert
that the math is typeset (no TeX left as text), every image loads, no cell shows
a traceback, the page logs no JavaScript error, no proposition is cited as
"Proposition Proposition", nothing is loaded from a CDN and every internal link
resolves; a full-page screenshot goes to ``_build/screenshots/``. At 390 px the
menu button opens the navigation, and a page shows one search field. Every check
has a control case: a page made to fail it, on which it fires.

Chromium comes from Debian's ``chromium`` package (``.ci/run`` installs it).
Without it the test skips, unless ``LSE_REQUIRE_BROWSER=1`` (set by CI), when
it fails.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import urllib.parse

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Link targets known to be placeholders, not a published copy of the book.
PLACEHOLDER_LINKS = ("github.com/lse-energy/", "example.com", "example.org", "/user/repo")
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _chromium():
    path = os.environ.get("LSE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        path = None
    if path is None:
        reason = "headless Chromium (Debian package `chromium`) and playwright are needed"
        if os.environ.get("LSE_REQUIRE_BROWSER") == "1":
            pytest.fail(reason + " (LSE_REQUIRE_BROWSER=1)")
        pytest.skip(reason)
    return path


def _toc_pages():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries):
        for entry in entries:
            if "file" in entry:
                pages.append(entry["file"])
            walk(entry.get("sections", []))

    walk(toc.get("chapters", []))
    for part in toc.get("parts", []):
        walk(part.get("chapters", []))
    return pages


@pytest.fixture(scope="module")
def html(tmp_path_factory):
    _chromium()
    out = tmp_path_factory.mktemp("book")
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["execute"]["execute_notebooks"] = "off"
    (out / "_config.yml").write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [
            str(pathlib.Path(sys.executable).parent / "jupyter-book"), "build", "--all", str(ROOT),
            "--config", str(out / "_config.yml"), "--path-output", str(out),
            "-W", "-n", "--keep-going",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    return out / "_build" / "html"


@pytest.fixture(scope="module")
def browser(html):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=_chromium(), args=CHROMIUM_FLAGS)
        yield b
        b.close()


# JavaScript run in each page; returns what the assertions need.
PAGE_REPORT = r"""
() => {
  const body = document.body.cloneNode(true);
  body.querySelectorAll('pre, code, script, style, mjx-container, .highlight, textarea')
      .forEach(e => e.remove());
  const text = body.textContent;
  const outputs = Array.from(document.querySelectorAll('.cell_output'));
  return {
    math: document.querySelectorAll('mjx-container').length,
    // math the page's source holds (Sphinx marks it .math); the API index loads MathJax only
    // because the pages under it have math
    mathMarkup: document.querySelectorAll('.math').length,
    mathErrors: Array.from(document.querySelectorAll('mjx-merror'))
        .map(e => e.getAttribute('data-mjx-error') || e.textContent),
    rawMath: (text.match(/\$\$|\\\[|\\\(/g) || []).length,
    // TeX that MathJax did not typeset: a \command, or an inline $...$ pair (an equation
    // broken by Markdown, e.g. a wrapped line starting with '- ' read as a list item)
    rawTex: (text.match(/\\[A-Za-z]+|\$[^$\s][^$]*\$/g) || []).slice(0, 5),
    // a {prf:ref} already says "Proposition": "Proposition {prf:ref}`x`" doubles the word
    doubled: (text.replace(/\s+/g, ' ').match(/\b(Proposition|Lemma|Theorem|Definition)s? \1\b.{0,20}/gi)
        || []).slice(0, 5),
    // scripts from outside the book (a CDN): the book must work offline
    external: Array.from(document.scripts).map(s => s.getAttribute('src') || '')
        .filter(src => /^(https?:)?\/\//.test(src)),
    images: Array.from(document.images).map(i => ({src: i.src, ok: i.complete && i.naturalWidth > 0})),
    tracebacks: outputs.filter(o => o.querySelector('.traceback, .output.error') ||
        /Traceback \(most recent call last\)/.test(o.textContent)).length,
    links: Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href')),
    // display equations wider than the box they sit in (the text column): [excess px, TeX]
    display: document.querySelectorAll('mjx-container[display="true"]').length,
    wideMath: Array.from(document.querySelectorAll('mjx-container[display="true"]')).map(c => {
        const m = c.querySelector('mjx-math') || c;
        const item = (window.MathJax && MathJax.startup && MathJax.startup.document ?
            Array.from(MathJax.startup.document.math).find(i => i.typesetRoot === c) : null);
        return [m.getBoundingClientRect().width - c.getBoundingClientRect().width,
                item ? item.math.trim().slice(0, 80) : ''];
    }).filter(x => x[0] > 0.5),
    pageWidth: document.documentElement.scrollWidth,
    windowWidth: window.innerWidth,
    ids: Array.from(document.querySelectorAll('[id]')).map(e => e.id),
  };
}
"""


def _open(browser, path, width):
    """The page at ``width`` px, after MathJax has typeset every equation, scrolled to its end;
    returns the tab, whether the page loads MathJax, and :data:`PAGE_REPORT`."""
    tab = browser.new_page(viewport={"width": width, "height": 900})
    # The API page typesets about 110 display equations: allow for a loaded machine.
    tab.set_default_timeout(180_000)
    # JavaScript errors: uncaught exceptions (a script declared twice) and console errors
    errors = []
    tab.on("pageerror", lambda e: errors.append(str(e)[:200]))
    tab.on("console", lambda m: errors.append(m.text[:200]) if m.type == "error" else None)
    tab.goto(path.as_uri())
    # Sphinx loads MathJax only on pages that contain math.
    has_mathjax = tab.evaluate("!!document.querySelector('script[src*=\"mathjax\"]')")
    if has_mathjax:
        tab.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=60000)
        tab.evaluate("MathJax.startup.promise")
    tab.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    return tab, has_mathjax, {**tab.evaluate(PAGE_REPORT), "jsErrors": errors}


@pytest.mark.parametrize("page", _toc_pages())
def test_page_renders(page, html, browser):
    path = html / f"{page}.html"
    assert path.exists(), f"{page} was not rendered"
    tab, has_mathjax, report = _open(browser, path, 1280)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(SCREENSHOTS / f"{pathlib.Path(page).name}.png"), full_page=True)
    tab.close()
    # Every display equation fits the text column at 1280 px (break long ones with aligned).
    assert not report["wideMath"], f"{len(report['wideMath'])} of {report['display']} display equations " \
        f"are wider than the column: {report['wideMath']}"

    chapter = pathlib.Path(page).name[:2].isdigit()
    if chapter or report["mathMarkup"]:
        assert has_mathjax and report["math"] > 0, "no typeset math on the page"
    assert not report["mathErrors"], f"MathJax errors: {report['mathErrors']}"
    assert report["rawMath"] == 0, "untypeset $$, \\[ or \\( left in the text"
    assert not report["rawTex"], f"TeX left as text: {report['rawTex']}"
    assert not report["doubled"], f"a doubled name: {report['doubled']}"
    assert not report["external"], f"scripts loaded from outside the book: {report['external']}"
    assert not report["jsErrors"], f"JavaScript errors: {report['jsErrors']}"
    broken = [i["src"] for i in report["images"] if not i["ok"]]
    assert not broken, f"images that did not load: {broken}"
    assert report["tracebacks"] == 0, "a cell output shows a traceback"

    placeholders = [h for h in report["links"] if any(p in h for p in PLACEHOLDER_LINKS)]
    assert not placeholders, f"links to a placeholder: {placeholders}"
    for href in report["links"]:
        parsed = urllib.parse.urlparse(href)
        if parsed.scheme or href.startswith("mailto:"):
            continue  # external; the build machine has no network
        if not parsed.path:
            if parsed.fragment:
                assert parsed.fragment in report["ids"], f"anchor #{parsed.fragment} missing"
            continue
        target = (path.parent / urllib.parse.unquote(parsed.path)).resolve()
        assert target.exists(), f"link {href} does not resolve"


@pytest.mark.parametrize("page", _toc_pages())
def test_page_never_scrolls_sideways_on_a_phone(page, html, browser):
    """At 400 px the page is no wider than the window: a long equation, table or code line
    scrolls inside its own box (``_static/custom.css``)."""
    tab, _, report = _open(browser, html / f"{page}.html", 400)
    tab.close()
    assert report["pageWidth"] <= report["windowWidth"], (
        f"the page is {report['pageWidth']} px wide in a {report['windowWidth']} px window")


def test_width_checks_catch_a_wide_equation_and_a_wide_page(html, browser):
    page = html / "_width_check.html"
    tex = " + ".join(f"x_{{{i}}}" for i in range(200))
    mathjax = html / "_static" / "mathjax" / "tex-chtml.js"
    page.write_text(f"<html><body><div style='width:300px'>\\[{tex}\\]</div>"
                    f"<pre style='white-space:pre'>{'y' * 400}</pre>"
                    f"<script src='{mathjax.as_uri()}'></script></body></html>")  # the book's own MathJax
    tab, _, report = _open(browser, page, 400)
    tab.close()
    assert report["display"] == 1 and len(report["wideMath"]) == 1
    assert report["pageWidth"] > report["windowWidth"]


# --- navigation: the menu on a phone, one search field -----------------------------------------

NAV_REPORT = r"""
() => {
  const shown = e => e.offsetParent !== null && e.getBoundingClientRect().width > 0;
  const dialog = document.getElementById('pst-primary-sidebar-modal');
  return {
    toggles: Array.from(document.querySelectorAll('.primary-toggle')).filter(shown).length,
    drawerOpen: !!(dialog && dialog.open && dialog.getBoundingClientRect().width > 200 &&
        Array.from(dialog.querySelectorAll('a')).some(shown)),
    searchFields: Array.from(document.querySelectorAll(
        '.search-button-field, .search-button, .bd-search')).filter(e => shown(e) &&
        !e.closest('#pst-search-dialog')).length,
  };
}
"""


def _menu_opens(browser, path):
    """At 390 px, click the visible menu button (☰); returns the page's NAV_REPORT after it."""
    tab = browser.new_page(viewport={"width": 390, "height": 844})
    tab.set_default_timeout(30_000)
    tab.goto(path.as_uri())
    tab.wait_for_load_state("load")
    before = tab.evaluate(NAV_REPORT)
    assert before["toggles"] == 1 and not before["drawerOpen"], before
    tab.locator(".primary-toggle").filter(visible=True).first.click()
    tab.wait_for_timeout(500)
    after = tab.evaluate(NAV_REPORT)
    return tab, after


def _search_fields(browser, path, width):
    tab = browser.new_page(viewport={"width": width, "height": 900})
    tab.goto(path.as_uri())
    tab.wait_for_load_state("load")
    fields = tab.evaluate(NAV_REPORT)["searchFields"]
    tab.close()
    return fields


def test_menu_opens_the_navigation_on_a_phone(html, browser):
    """At 390 px the ☰ button opens the navigation drawer (pydata-sphinx-theme 0.17's
    persistent header used to hold a hidden ☰ that took the click: navbar_persistent: [])."""
    tab, after = _menu_opens(browser, html / "book" / "02_gmm.html")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(SCREENSHOTS / "navigation_390px.png"))
    tab.close()
    assert after["drawerOpen"], "the navigation drawer did not open"


def test_menu_check_fires_when_a_hidden_button_comes_first(html, browser):
    """Control: the bug itself. The theme binds the first ``.primary-toggle`` in the page; with
    a hidden one ahead of the visible ☰ (as the persistent header put it) the drawer stays shut."""
    page = html / "book" / "_menu_check.html"
    page.write_text(_at_body_start(html / "book" / "02_gmm.html",
                                   "<button class='primary-toggle' style='display:none'></button>"))
    tab, after = _menu_opens(browser, page)
    tab.close()
    assert not after["drawerOpen"]


def _at_body_start(path, markup):
    """The HTML of ``path`` with ``markup`` inserted first in its body."""
    text = path.read_text()
    start = text.index(">", text.index("<body")) + 1
    return text[:start] + markup + text[start:]


@pytest.mark.parametrize("width", [992, 1280])
def test_one_search_field(html, browser, width):
    """One search field on a chapter at >= 992 px (not a second one in a persistent header)
    and on the search page (whose own form replaces the sidebar's button)."""
    assert _search_fields(browser, html / "book" / "02_gmm.html", width) == 1
    assert _search_fields(browser, html / "search.html", width) == 1


def test_search_field_check_fires_on_a_second_field(html, browser):
    """Control: a page with a second, visible search field counts two."""
    page = html / "book" / "_search_check.html"
    page.write_text(_at_body_start(html / "book" / "02_gmm.html",
                                   "<button class='search-button-field'>Search</button>"))
    assert _search_fields(browser, page, 1280) == 2


# --- the page report's checks fire on a page made to fail them ---------------------------------


def test_tex_and_doubled_name_checks_fire(html, browser):
    """Control for the per-page checks: an equation Markdown broke into a list item, a stray
    \\command, a doubled "Proposition", a CDN script and a script declared twice are each
    caught; typeset math is not."""
    page = html / "_tex_check.html"
    mathjax = html / "_static" / "mathjax" / "tex-chtml.js"
    page.write_text(
        "<html><body>"
        "<p>Typeset: <span class='math'>\\(\\beta x\\)</span>.</p>"
        "<p>Expanding the square, $\\mathrm{sim}_t(x, x_i) = \\beta x^\\top x_i</p>"
        "<ul><li>\\|x\\|^2/2$ with</li></ul>"
        "<p>By Proposition <a href='#p'>Proposition 15.4</a>, the gradient is a softmax.</p>"
        "<script src='https://cdn.example.invalid/require.min.js'></script>"
        "<script>const THEBE_JS_URL = 1;</script><script>const THEBE_JS_URL = 1;</script>"
        f"<script src='{mathjax.as_uri()}'></script></body></html>")
    tab, has_mathjax, report = _open(browser, page, 1280)
    tab.close()
    assert any("THEBE_JS_URL" in e for e in report["jsErrors"])
    assert has_mathjax and report["math"] == 1  # the typeset one
    assert report["rawTex"] and any("mathrm" in t for t in report["rawTex"])
    assert report["doubled"] and report["doubled"][0].startswith("Proposition Proposition 15.4")
    assert report["external"] == ["https://cdn.example.invalid/require.min.js"]
    # and the same checks pass on the fixed text
    page.write_text(
        "<html><body><p>Typeset: <span class='math'>\\(\\beta x\\)</span>.</p>"
        "<p>By <a href='#p'>Proposition 15.4</a>, the gradient is a softmax.</p>"
        f"<script src='{mathjax.as_uri()}'></script></body></html>")
    tab, _, report = _open(browser, page, 1280)
    tab.close()
    assert not report["rawTex"] and not report["doubled"] and not report["external"]
    assert not report["jsErrors"]


def test_every_page_screenshotted(html, browser):
    # Runs after the parametrised tests in this file (pytest keeps file order).
    names = {pathlib.Path(p).name for p in _toc_pages()}
    missing = [n for n in names if not (SCREENSHOTS / f"{n}.png").exists()]
    assert not missing, f"no screenshot for {missing}"
