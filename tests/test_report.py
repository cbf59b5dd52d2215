"""thunder.report: the HTML trace explorer -- one self-contained file with every stage's trace next to the one
before it, fusions linked to their kernels, executors, opaque ops, graph breaks, branches, compile times -- and
the page checked in a real headless Chromium (no console error, search and collapse work, a screenshot)."""
import os
import re

import pytest
import torch
import torch.nn as nn

import thunder
from thunder.frontend import dynamo
from browser import Browser, find_chromium

ARTIFACTS = os.path.join(os.path.dirname(__file__), "..", "build", "test-artifacts")


def program(x, y):
    a = torch.softmax(x @ y, -1) * 2
    if a.sum() > 0:
        a = a + 1
    torch.nonzero(a)  # a graph break
    return a + torch.special.erfcx(x), torch.cumsum(x, 0)


@pytest.fixture
def report(tmp_path):
    jitted = thunder.jit(program)
    jitted(torch.randn(3, 3, requires_grad=True), torch.randn(3, 3))
    jitted(torch.randn(3, 3, requires_grad=True), torch.randn(3, 3))
    path = thunder.report(jitted, tmp_path / "sub" / "report.html")
    return jitted, path, path.read_text()


def test_report_holds_traces_fusions_kernels_and_what_happened(report):
    jitted, path, text = report
    assert path.name == "report.html" and text.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), "the page must not load anything"
    assert "thunder.jit(program): 2 calls, 2 graphs compiled, cache 1 hits / 1 misses" in text
    for g, _ in enumerate(thunder.compile_stats(jitted).graphs):
        for view in thunder.last_traces(jitted, g) + thunder.last_backward_traces(jitted, g):
            assert f">{view.name}" in text  # a tab per stage, forward and backward
        for kernel in thunder.last_kernels(jitted, g):
            name = re.search(r'extern "C" int (\w+)\(', kernel["source"]).group(1)
            assert f"id='g{g}-fwd-{name}'" in text or f"id='g{g}-bwd-{name}'" in text
            assert f"href='#g{g}-fwd-" in text  # the trace's fusion call links to its kernel
    assert 'extern &quot;C&quot; int cpu_fusion0(' in text  # the kernel's C++
    assert "compiler command:" in text
    assert "<span class='ex'>torch</span>" in text and "<span class='ex'>cpu</span>" in text  # executors
    assert "torch.special.erfcx" in text and "thunder has no native op for it" in text  # the opaque op, why
    assert "torch.nonzero(a)" in text and "Dynamic shape operator" in text  # the graph break, the user's line
    assert "if a.sum() &gt; 0:" in text and "converted to a select" in text
    assert "Compile time per stage" in text and "called 2 times" in text
    assert "class='ln add'" in text or "class='ln chg'" in text  # lines a pass changed


def test_report_accepts_every_kind_of_jitted_thing(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4), nn.GELU())
    x = torch.randn(2, 4)
    jitted = thunder.jit(model)
    jitted(x)
    assert "thunder.jit(Sequential)" in thunder.report(jitted, tmp_path / "m.html").read_text()
    compiled = torch.compile(model, backend="thunder")
    compiled(x)
    assert "torch.compile(Sequential)" in thunder.report(compiled, tmp_path / "c.html").read_text()
    assert "Graph 0" in thunder.report(dynamo.GLOBAL_STATE, tmp_path / "g.html").read_text()
    fresh = thunder.jit(model)
    assert "No graph was captured: call the jitted function first" in thunder.report(fresh, tmp_path / "f.html").read_text()
    with pytest.raises(TypeError, match="thunder.report"):
        thunder.report(model, tmp_path / "x.html")


def test_uncompiled_graph_is_shown_with_its_reason(tmp_path, monkeypatch):
    import thunder.frontend.dynamo as d

    def failing(*args, **kwargs):
        raise RuntimeError("no compiler today")

    monkeypatch.setattr(d, "compile_trace", failing)
    jitted = thunder.jit(lambda x: x.sin())
    jitted(torch.randn(3))
    text = thunder.report(jitted, tmp_path / "u.html").read_text()
    assert "UNCOMPILED" in text and "no compiler today" in text


@pytest.fixture(scope="module")
def chromium():
    path = find_chromium()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing on CI: `make test` installs it (build/.chromium)")
        pytest.skip("no Chromium on this machine (apt-get install chromium, or `make test`, which installs it)")
    return path


def test_report_in_a_headless_browser(report, chromium):
    _, path, _ = report
    with Browser(chromium) as browser:
        browser.load(path)
        assert browser.evaluate("document.querySelectorAll('.graph').length") == 2
        # search: every matching line is marked, the current one opened, shown and scrolled to
        browser.evaluate("{ const f = document.getElementById('find'); f.value = 'cpu_fusion0';"
                         "f.dispatchEvent(new Event('input')); }")
        browser.evaluate("new Promise(r => setTimeout(r, 400))")
        hits = browser.evaluate("document.querySelectorAll('.hit').length")
        assert hits > 0 and browser.evaluate("document.getElementById('count').textContent") == f"{hits} lines match"
        assert browser.evaluate("document.querySelector('.hit.cur').offsetParent !== null")
        # collapse and expand
        browser.evaluate("document.getElementById('collapse').click()")
        assert browser.evaluate("document.querySelectorAll('details[open]').length") == 0
        browser.evaluate("document.getElementById('expand').click()")
        assert browser.evaluate("document.querySelectorAll('details:not([open])').length") == 0
        # a stage tab shows its stage only
        shown = browser.evaluate("""(() => { const p = document.querySelector('.pipeline');
            p.querySelector('.tab[data-k="1"]').click();
            return Array.from(p.querySelectorAll('.stage')).filter(s => !s.hidden).map(s => s.dataset.k); })()""")
        assert shown == ["1"]
        # a fusion's link opens its kernel
        opened = browser.evaluate("""(() => { document.getElementById('collapse').click();
            const a = document.querySelector('td.fz a'); a.click();
            return document.getElementById(a.getAttribute('href').slice(1)).open; })()""")
        assert opened
        # "changed lines only" hides the unchanged ones
        browser.evaluate("{ document.getElementById('expand').click(); const c = document.getElementById('changes');"
                         "c.checked = true; c.dispatchEvent(new Event('change')); }")
        assert browser.evaluate("getComputedStyle(document.querySelector('tr.eq')).display") == "none"
        browser.load(path)  # as it opens
        browser.screenshot(os.path.join(ARTIFACTS, "report.png"))
        assert browser.errors == [], browser.errors
    assert os.path.getsize(os.path.join(ARTIFACTS, "report.png")) > 10_000


def test_browser_sees_console_errors(tmp_path, chromium):
    """The check itself: a page that throws is caught."""
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><html><body><script>console.error('boom'); undefinedName();</script></body></html>")
    with Browser(chromium) as browser:
        browser.load(page)
        assert any("boom" in e for e in browser.errors) and any("undefinedName" in e for e in browser.errors)
