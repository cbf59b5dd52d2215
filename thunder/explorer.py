"""The HTML trace explorer: ``thunder.report(jitted, "report.html")`` writes one self-contained page.

Per captured graph: each stage of the pipeline (the import, then one trace per pass; the backward's too) side
by side with the stage before it, the lines a pass changed highlighted; each fusion region colored and linked
to its generated kernel and the compiler command; the executor of every symbol; the ops run as opaque torch
calls and why; compile time per stage and call counts. Above the graphs: the graph breaks and the
data-dependent branches with the user's source lines. Everything is inline (CSS, JS, text): no network.

Everything shown comes from the JitState the inspection functions read (``thunder.last_traces``,
``last_backward_traces``, ``last_kernels``, ``compile_stats``, ``summary``).
"""
import difflib
import html
import linecache
import pathlib
import re

from thunder.frontend import branches
from thunder.frontend.dynamo import EagerGraph
from thunder.plan import graph_plan, proxies

#: Graphs past this many start collapsed (a large model's page stays quick to open).
OPEN_GRAPHS = 4

_ASSIGNED = re.compile(r"^\s*\(?([A-Za-z_]\w*)\b.*? = ")
_INNER_COMMENT = re.compile(r"^\s+# \(?[A-Za-z_]\w*\b.*? = (prims|ltorch|torch)\.")


def render(state):
    """The page for a :class:`thunder.frontend.dynamo.JitState`, as a string of HTML."""
    from thunder.jit import _break_counts, _headline, _no_graph_reason

    open_graphs = len(state.graphs) <= OPEN_GRAPHS
    body = [f"<h1>{_e(_headline(state))}</h1>",
            f"<p class=sub>executors: {_e(', '.join(e.name for e in state.executors))}"
            f"{_e(_break_counts(state))}</p>"]
    if state.dynamo_stopped:
        body.append(f"<p class=warn>Dynamo stopped compiling: {_e(state.dynamo_stopped)}</p>")
    body.append(_graph_breaks(state.graph_breaks))
    body.append(_branches(branches.site_statuses(state.branches.values(), state.graph_breaks)))
    if not state.graphs:
        reason = _no_graph_reason(state) if state.calls else "call the jitted function first"
        body.append(f"<p class=warn>No graph was captured: {_e(reason)}.</p>")
    for g in state.graphs:
        body.append(_graph(g, open_graphs))
    return _PAGE.format(title=_e(state.name), css=_CSS, js=_JS, body="\n".join(body))


def write(state, path):
    """Writes :func:`render`'s page to ``path`` (parent directories made); returns the path as a Path."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(state), encoding="utf-8")
    return path


def _e(text):
    return html.escape(str(text), quote=True)


def _section(title, inner, open_=True, cls=""):
    return f"<details class='sec {cls}'{' open' if open_ else ''}><summary>{title}</summary>{inner}</details>"


def _table(head, rows, cls=""):
    head_html = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr class=ln>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table class='grid {cls}'><tr>{head_html}</tr>{body}</table>"


def _user_line(location):
    path, _, line = location.rpartition(":")
    return linecache.getline(path, int(line)).strip() if line.isdigit() else ""


def _graph_breaks(breaks):
    if not breaks:
        return _section("Graph breaks: none", "<p>Dynamo captured the program without splitting it.</p>", False)
    unique = list({str(b): b for b in breaks}.values())
    rows = [[_e(b.location), f"<code>{_e(_user_line(b.location))}</code>",
             _e(b.reason) + (" <b>(the whole frame runs eagerly)</b>" if b.skipped_frame else ""), _e(b.hint)]
            for b in unique]
    return _section(f"Graph breaks ({len(unique)})", _table(["where", "your code", "reason", "hint"], rows))


def _branches(statuses):
    if not statuses:
        return ""
    converted = sum(status == "converted" for _, status in statuses)
    rows = [[_e(site.location), f"<code>{_e(site.code)}</code>",
             f"<span class='{status}'>{'converted to a select' if status == 'converted' else 'left as a graph break'}"
             f"</span>", _e(site.reason or site.broke_in_condition)] for site, status in statuses]
    return _section(f"Data-dependent branches: {converted} of {len(statuses)} converted to selects",
                    _table(["where", "your code", "what became of it", "why not converted"], rows))


# ---- one graph ----

def _specializes(g):
    from thunder.jit import _specializes as text

    return text(g)


def _graph(g, open_):
    if isinstance(g, EagerGraph):
        inner = f"<p class=warn>{_e(g.reason)}</p><pre>{_e(g.detail)}</pre>"
        return _section(f"Graph {g.index}: UNCOMPILED, runs with torch as captured; called {g.calls} times"
                        f"{_specializes(g)}", inner, open_, "graph")
    if g.released:
        return _section(_e(f"Graph {g.index}: compiled in {g.compile_seconds * 1e3:.1f} ms, called {g.calls} times, "
                           f"released{_specializes(g)}"), f"<p>{_e(g.released)}</p>", open_, "graph")
    plan = graph_plan(g)
    kernels = _kernels(g)
    title = (f"Graph {g.index}: compiled in {g.compile_seconds * 1e3:.1f} ms, called {g.calls} times, executors "
             f"{', '.join(g.executors()) or 'none'}, {len(plan.fusions)} fusions, {len(plan.opaque)} opaque ops"
             + (f"; backward: {g.autodiff}" if g.autodiff else "") + _specializes(g))
    parts = [_stage_times(g), _ops(g.index, plan),
             _pipeline(g.index, "fwd", "Forward" if g.backward_traces else "Traces", g.traces, kernels)]
    if g.backward_traces:
        parts.append(_pipeline(g.index, "bwd", "Backward (thunder's autodiff)", g.backward_traces, kernels))
    parts.append(_kernel_section(g.index, kernels))
    return _section(_e(title), "".join(parts), open_, "graph")


def _stage_times(g):
    stages = getattr(g, "stage_seconds", g.pass_seconds)
    rows, longest = [], max(list(stages.values()) + [1e-9])
    for name, seconds in stages.items():
        bar = f"<span class=bar style='width:{max(1, round(120 * seconds / longest))}px'></span>"
        rows.append([_e(name), f"{seconds * 1e3:.3f} ms", bar])
    rows.append(["total (import, passes, kernels)", f"{g.compile_seconds * 1e3:.1f} ms", ""])
    calls = f"<p>called {g.calls} times" + (f", {g.aliased_calls} of them run as captured (an input aliased one the "
                                           "graph writes)" if g.aliased_calls else "") + "</p>"
    return _section("Compile time per stage", calls + _table(["stage", "time", ""], rows), False)


def _ops(index, plan):
    rows = []
    for op in plan.ops:
        kind = "native" if op.native else "<span class=opq>opaque</span>"
        fusion = f"<a href='#g{index}-fwd-{op.fusion}'>{_e(op.fusion)}</a>" if op.fusion else ""
        rows.append([f"<code>{_e(op.op)}</code>", kind, _e(op.executor or "-"), fusion, _e(op.reason),
                     _e(op.source)])
    opaque = plan.opaque
    summary = f"Ops ({len(plan.ops)} imported, {len(opaque)} opaque" + \
        (": " + ", ".join(sorted({op.op for op in opaque})) if opaque else "") + ")"
    return _section(_e(summary), _table(["op", "kind", "executor", "fusion", "note", "your code"], rows, "ops"),
                    bool(opaque))


# ---- traces, stage by stage ----

def _line_info(view, lines):
    """Per line of a trace's printed ``lines``: (fusion name or "", executor or "", opaque) of the symbol the
    line belongs to; a fusion's commented inner ops belong to it."""
    trace = view.trace
    by_output = {}
    for b in trace.symbols:
        for p in proxies(b.output)[:1]:
            by_output[trace.name_of(p)] = b
    info, fusion = [], ""
    for line in lines:
        match = None if line.lstrip().startswith("#") else _ASSIGNED.match(line)
        b = by_output.get(match.group(1)) if match else None
        if b is not None:
            fusion = b.callee if b.name == "fusion" else ""
            info.append((fusion, b.executor, b.is_opaque))
        elif fusion and _INNER_COMMENT.match(line):
            info.append((fusion, "", False))
        else:
            fusion = ""
            info.append(("", "", False))
    return info


def _hue(name):
    digits = re.findall(r"\d+", name)
    return (int(digits[-1]) * 67 + 200) % 360 if digits else 0


def _code_cell(line, info, graph, part, kernels):
    fusion, executor, opaque = info
    text = _e(line)
    if fusion and f"{fusion}(" in line and (part, fusion) in kernels:
        text = text.replace(f"{fusion}(", f"<a href='#g{graph}-{part}-{fusion}'>{fusion}</a>(", 1)
    badge = f"<span class='ex'>{_e(executor)}{' opaque' if opaque else ''}</span>" if executor else ""
    style = f" style='--h:{_hue(fusion)}'" if fusion else ""
    return f"<td class='c{' fz' if fusion else ''}{' opq' if opaque else ''}'{style}>{badge}{text}</td>"


def _diff_rows(before, after, info_before, info_after, graph, part, kernels):
    """Table rows of ``after`` (this stage) next to ``before`` (the stage before), aligned by a line diff. The
    first lines (each trace's provenance comment) always differ and are paired as they are."""
    def row(cls, i, j):
        left = _code_cell(before[i], info_before[i], graph, part, kernels) if i is not None else "<td class=c></td>"
        right = _code_cell(after[j], info_after[j], graph, part, kernels) if j is not None else "<td class=c></td>"
        return (f"<tr class='ln {cls}'><td class=n>{'' if i is None else i + 1}</td>{left}"
                f"<td class=n>{'' if j is None else j + 1}</td>{right}</tr>")

    rows = [row("eq", 0, 0)] if before and after else []
    matcher = difflib.SequenceMatcher(None, before[1:], after[1:], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        cls = {"equal": "eq", "replace": "chg", "insert": "add", "delete": "del"}[tag]
        for k in range(max(i2 - i1, j2 - j1)):
            i, j = i1 + k, j1 + k
            rows.append(row(cls, i + 1 if i < i2 else None, j + 1 if j < j2 else None))
    return rows


def _pipeline(graph, part, title, views, kernels):
    texts = [str(v).splitlines() for v in views]
    infos = [_line_info(v, text) for v, text in zip(views, texts)]
    buttons, panels = [], []
    last = len(views) - 1
    for k, view in enumerate(views):
        changed = 0
        if k == 0:
            rows = [f"<tr class='ln eq'><td class=n>{n + 1}</td>"
                    f"{_code_cell(line, infos[0][n], graph, part, kernels)}</tr>" for n, line in enumerate(texts[0])]
            head = "<colgroup><col class=n><col></colgroup><tr><th></th><th>" + _e(view.name) + "</th></tr>"
        else:
            rows = _diff_rows(texts[k - 1], texts[k], infos[k - 1], infos[k], graph, part, kernels)
            changed = sum("'ln eq'" not in r for r in rows)
            head = (f"<colgroup><col class=n><col><col class=n><col></colgroup><tr><th></th><th>before: "
                    f"{_e(views[k - 1].name)}</th><th></th><th>after: {_e(view.name)}</th></tr>")
        label = f"{view.name}" + (f" ({changed} changed)" if k else "")
        buttons.append(f"<button class='tab{' on' if k == last else ''}' data-k={k}>{_e(label)}</button>")
        provenance = f"<p class=prov>{_e(view.provenance or view.name)}</p>"
        panels.append(f"<div class=stage data-k={k}{'' if k == last else ' hidden'}>{provenance}"
                      f"<table class=trace>{head}{''.join(rows)}</table></div>")
    inner = f"<div class=tabs>{''.join(buttons)}</div>{''.join(panels)}"
    return _section(f"{_e(title)}: {len(views)} stages (each next to the one before it; changed lines highlighted)",
                    f"<div class=pipeline>{inner}</div>")


# ---- kernels ----

def _unique_units(g):
    """One dict per translation unit (as thunder.last_kernels gives them), each once."""
    units, seen = [], set()
    for executor, pairs in g.kernels.items():
        for module, source in pairs:
            if module.path in seen:
                continue
            seen.add(module.path)
            units.append({"executor": executor, "source": source, "command": module.command, "path": module.path,
                          "cache_hit": module.cache_hit, "compile_seconds": module.compile_seconds})
    return units


def _kernel_function(source, name):
    """The C++ of kernel ``name`` in a translation unit: from its ``extern "C"`` definition to the next one."""
    start = source.find(f'extern "C" int {name}(')
    if start < 0:
        return ""
    end = source.find('\nextern "C"', start + 1)
    return source[start:end if end > 0 else len(source)].rstrip()


def _kernels(g):
    """{(part, fusion name): (unit dict, its index, the kernel's C++)} for every fusion of the graph's execution
    traces (part "fwd" or "bwd"), found through each launcher's kernel module."""
    units = _unique_units(g)
    by_path = {u["path"]: i for i, u in enumerate(units)}
    found = {}
    for part, views in (("fwd", g.traces), ("bwd", g.backward_traces)):
        if not views:
            continue
        namespace = views[-1].namespace
        for b in views[-1].symbols:
            if b.name != "fusion":
                continue
            launcher = namespace.get(b.callee)
            module = getattr(launcher, "module", None)  # the kernel module the launcher keeps loaded
            index = by_path.get(getattr(module, "path", None))
            if index is not None:
                found[(part, b.callee)] = (units[index], index, _kernel_function(units[index]["source"], b.callee))
    return found


def _kernel_section(graph, kernels):
    if not kernels:
        return _section("Kernels: none (no fusion)", "", False)
    items, units = [], {}
    for (part, name), (unit, index, function) in sorted(kernels.items()):
        units[index] = unit
        how = "from the kernel cache" if unit["cache_hit"] else f"compiled in {unit['compile_seconds'] * 1e3:.0f} ms"
        body = (f"<p>{_e(unit['executor'])} executor; translation unit <a href='#g{graph}-unit{index}'>{index}</a>, "
                f"{how}; <code>{_e(unit['path'])}</code></p>"
                f"<p>compiler command: <code class=cmd>{_e(unit['command'] or '(loaded from the cache: none run)')}"
                f"</code></p><pre class=cpp>{_e(function)}</pre>")
        label = f"{'backward ' if part == 'bwd' else ''}{name}"
        items.append(f"<details class=kernel id='g{graph}-{part}-{name}' style='--h:{_hue(name)}'>"
                     f"<summary>{_e(label)}</summary>{body}</details>")
    for index, unit in sorted(units.items()):
        source = unit["source"]
        items.append(f"<details class=kernel id='g{graph}-unit{index}'><summary>translation unit {index} (whole, "
                     f"{source.count(chr(10)) + 1} lines)</summary><p>compiler command: <code class=cmd>"
                     f"{_e(unit['command'] or '(loaded from the cache: none run)')}</code></p>"
                     f"<pre class=cpp>{_e(source)}</pre></details>")
    return _section(f"Kernels ({len(kernels)} fusions, {len(units)} translation units)", "".join(items), False)


# ---- the page ----

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 1.5em 3em;color:#222}
header{position:sticky;top:0;background:#fff;padding:.5em 0;border-bottom:1px solid #ccc;z-index:2}
h1{font-size:1.2em;margin:.6em 0 .2em}.sub{margin:0 0 .6em;color:#555}
.warn{color:#a40}.sec{margin:.4em 0}.sec>summary{cursor:pointer;font-weight:600;padding:.2em 0}
.graph{border:1px solid #ccc;border-radius:6px;padding:.3em .8em;margin:.8em 0}
.graph>summary{font-size:1.05em}
table.grid{border-collapse:collapse;margin:.3em 0}table.grid td,table.grid th{border:1px solid #ddd;
padding:2px 6px;text-align:left;vertical-align:top}
table.trace{border-collapse:collapse;font:12px/1.35 ui-monospace,monospace;width:100%;table-layout:fixed}
table.trace col.n{width:3.5em}table.trace td.n{color:#999;text-align:right;padding-right:6px;user-select:none}
table.trace td{vertical-align:top}table.trace td.c{white-space:pre-wrap;overflow-wrap:anywhere}
tr.add td.c:last-child{background:#dfd}tr.del td.c:nth-child(2){background:#fdd}
tr.chg td.c:nth-child(2){background:#fee}tr.chg td.c:last-child{background:#efe}
td.fz{box-shadow:inset 4px 0 hsl(var(--h) 70% 50%);background-color:hsl(var(--h) 80% 95%)}
.ex{float:right;font-size:11px;color:#555;background:#eee;border-radius:3px;padding:0 4px;margin-left:4px}
.opq,.opq .ex{color:#a40}.converted{color:#070}.left{color:#a40}
.tabs{display:flex;flex-wrap:wrap;gap:4px;margin:.3em 0}
.tab{font:12px system-ui;border:1px solid #bbb;background:#f6f6f6;border-radius:4px;padding:2px 8px;cursor:pointer}
.tab.on{background:#246;color:#fff}.prov{color:#555;margin:.2em 0;font-style:italic}
.only-changes tr.eq{display:none}.bar{display:inline-block;height:8px;background:#48a}
details.kernel{margin:.3em 0 .3em 1em;border-left:4px solid hsl(var(--h,0) 70% 50%);padding-left:.5em}
pre.cpp{background:#f8f8f8;padding:.5em;overflow:auto;max-height:40em;font-size:12px}code.cmd{word-break:break-all}
.hit{outline:2px solid #e90}.hit.cur{background:#fe8}
#find{width:22em;padding:3px}#count{color:#555;margin:0 .5em}
"""

_JS = """
const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));
function openUp(el) { for (let d = el.closest('details'); d; d = d.parentElement.closest('details')) d.open = true; }
function showStage(pipe, k) {
  $$('.tab', pipe).forEach(b => b.classList.toggle('on', b.dataset.k === k));
  $$('.stage', pipe).forEach(s => { s.hidden = s.dataset.k !== k; });
}
document.addEventListener('click', e => {
  const tab = e.target.closest('.tab');
  if (tab) showStage(tab.closest('.pipeline'), tab.dataset.k);
  const link = e.target.closest('a[href^="#"]');
  if (link) { const t = document.getElementById(link.getAttribute('href').slice(1)); if (t) openUp(t), t.open = true; }
});
let hits = [], cur = -1, timer = null;
function search(q) {
  $$('.hit').forEach(el => el.classList.remove('hit', 'cur'));
  hits = []; cur = -1;
  q = q.trim().toLowerCase();
  if (q) for (const el of $$('.ln'))
    if (el.textContent.toLowerCase().includes(q)) { el.classList.add('hit'); hits.push(el); }
  document.getElementById('count').textContent = q ? hits.length + ' lines match' : '';
  if (hits.length) next();
}
function next() {
  if (!hits.length) return;
  if (cur >= 0) hits[cur].classList.remove('cur');
  cur = (cur + 1) % hits.length;
  const el = hits[cur], stage = el.closest('.stage');
  if (stage && stage.hidden) showStage(stage.closest('.pipeline'), stage.dataset.k);
  openUp(el); el.classList.add('cur'); el.scrollIntoView({block: 'center'});
}
const find = document.getElementById('find');
find.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(() => search(find.value), 150); });
find.addEventListener('keydown', e => { if (e.key === 'Enter') next(); });
document.getElementById('expand').onclick = () => $$('details').forEach(d => { d.open = true; });
document.getElementById('collapse').onclick = () => $$('details').forEach(d => { d.open = false; });
document.getElementById('changes').onchange = e => document.body.classList.toggle('only-changes', e.target.checked);
if (location.hash) { const t = document.getElementById(location.hash.slice(1)); if (t) openUp(t), t.open = true; }
"""

_PAGE = """<!DOCTYPE html>
<html lang=en><head><meta charset=utf-8><title>thunder report: {title}</title>
<style>{css}</style></head>
<body><header><input id=find type=search placeholder="search traces, ops, kernels (Enter: next)">
<span id=count></span><button id=expand>expand all</button> <button id=collapse>collapse all</button>
<label><input id=changes type=checkbox> changed lines only</label></header>
{body}
<script>{js}</script></body></html>
"""
