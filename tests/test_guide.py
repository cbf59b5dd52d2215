"""Every ```python snippet of docs/guide.md runs: in order, in one fresh process (later snippets use names
earlier ones defined), in a scratch directory. A snippet whose first line is ``# guide: not run`` (one that
needs several processes) is left out; the pdb snippet gets ``c`` (continue) on its standard input."""
import pathlib
import re
import subprocess
import sys

GUIDE = pathlib.Path(__file__).parent.parent / "docs" / "guide.md"
SKIP = "# guide: not run"


def snippets(text):
    """The ```python blocks of a Markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def test_the_guide_has_runnable_snippets():
    blocks = snippets(GUIDE.read_text())
    assert len(blocks) >= 10
    skipped = [b for b in blocks if b.startswith(SKIP)]
    assert len(skipped) == 1 and "torchrun" in skipped[0]  # only the multi-process one


def test_every_snippet_of_the_guide_runs(tmp_path):
    program = "\n\n".join(f"# ---- snippet {i} ----\n{block}" for i, block in enumerate(snippets(GUIDE.read_text()))
                          if not block.startswith(SKIP))
    script = tmp_path / "guide.py"
    script.write_text(program)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, input="c\n" * 50, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    assert (tmp_path / "report.html").exists()
    assert "thunder.examine(scaled_erfcx)" in done.stdout and "(Pdb)" in done.stdout
