"""The replay check: what the compiler generates for a fixed set of programs equals the recording in
tests/replay/ (see tests/replay_programs.py, which also records it again after an intended change)."""
import difflib
import os

import pytest

import replay_programs

PROGRAMS = replay_programs.programs()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_generated_code_unchanged(name):
    fn, args = PROGRAMS[name]
    path = replay_programs.path_of(name)
    assert os.path.exists(path), f"no recording for {name}: run python tests/replay_programs.py {name}"
    with open(path) as f:
        expected = f.read()
    actual = replay_programs.record(name, fn, args)
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                            "recorded", "generated now", n=2))
        pytest.fail(f"{name}: the generated code changed (if intended, run python tests/replay_programs.py "
                    f"{name} and commit tests/replay/):\n{diff[:6000]}")
