"""The on-disk kernel cache: its safety rules (issue #10), crashes it must not cause, and what it must not leak.

Every test that compiles through thunder.jit runs in a subprocess with a cache directory of its own
($THUNDER_CACHE_DIR), so a crash is a failed test, not a dead test run, and no test sees another's entries.
"""
import ctypes
import hashlib
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
import torch

from thunder import _core

ENTRY = re.compile(r"^[0-9a-f]{32}\.so$")

# Compiles and runs a small function with the CPU executor; prints whether its module was a cache hit, the
# module's path and key, and the cache directory it used.
COMPILE = """
import torch, thunder
from thunder.executors import executor_sets
from thunder.jit import compiled_graphs
x = torch.arange(10.0)
jitted = thunder.jit(lambda x: x.cos() * 3, executors=executor_sets()["cpu"])
with torch.no_grad():
    assert torch.allclose(jitted(x), x.cos() * 3)
graph = compiled_graphs(jitted)[-1]
assert "cpu" in graph.kernels, "the graph fell back to torch"
module = graph.kernels["cpu"][0][0]
print(module.cache_hit, module.path, module.key, module.cache_dir)
"""

# A shared object whose constructor, run by dlopen, creates the file named by $THUNDER_PLANTED_MARKER.
PLANTED = r"""
#include <stdlib.h>
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
  const char* path = getenv("THUNDER_PLANTED_MARKER");
  if (path) { FILE* f = fopen(path, "w"); if (f) fclose(f); }
}
extern "C" const char* thunder_cache_key() { return "planted"; }
"""


def run(code, cache, timeout=120, check=True, **env):
    """Runs `code` in a new Python with THUNDER_CACHE_DIR=cache (and `env`); returns the CompletedProcess."""
    full_env = dict(os.environ, THUNDER_CACHE_DIR=str(cache), **{k: str(v) for k, v in env.items()})
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=timeout)
    if check:
        assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def compile_once(cache, **env):
    """(cache hit, entry path, key, cache dir used, stderr) of one COMPILE run."""
    p = run(COMPILE, cache, **env)
    hit, path, key, used = p.stdout.split()
    return hit == "True", path, key, used, p.stderr


def temporaries(directory):
    return sorted(n for n in os.listdir(directory) if not ENTRY.match(n))


def _tiny(n):
    return f'extern "C" int value() {{ return {n}; }}\n'


TINY_FLAGS = ["-O0", "-fPIC", "-shared"]


@pytest.fixture
def planted_so(tmp_path):
    src = tmp_path / "planted.cc"
    src.write_text(PLANTED)
    out = tmp_path / "planted.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out


# ---- 4: planted objects, unsafe directories, modes ----

def test_an_object_planted_in_a_world_writable_cache_directory_never_runs(tmp_path, planted_so):
    _, _, key, _, _ = compile_once(tmp_path / "private")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    shutil.copy(planted_so, shared / f"{key}.so")
    marker = tmp_path / "planted-ran"
    hit, path, _, used, err = compile_once(shared, THUNDER_PLANTED_MARKER=marker)
    assert not marker.exists()
    assert not hit and used != str(shared) and not path.startswith(str(shared))
    assert "writable by group or others" in err and str(shared) in err
    assert err.count("not using the kernel cache directory") == 1


def _can_switch_to(user):
    try:
        return os.geteuid() == 0 and pwd.getpwnam(user) is not None
    except KeyError:
        return False


@pytest.mark.skipif(not _can_switch_to("nobody"), reason="needs root and a user nobody to play the other user")
def test_another_users_cache_directory_and_planted_object_are_refused(planted_so):
    # The attack across users: another user makes the cache directory (world-writable, as /tmp is) and plants
    # the victim's entry in it; the victim's process must neither load the object nor use the directory.
    base = tempfile.mkdtemp(prefix="thunder-xuser-")
    try:
        os.chmod(base, 0o755)
        private = os.path.join(base, "private")
        _, _, key, _, _ = compile_once(private)
        shutil.copy(planted_so, os.path.join(base, "planted.so"))
        os.chmod(os.path.join(base, "planted.so"), 0o755)
        os.chmod(base, 0o777)
        shared = os.path.join(base, "shared")
        subprocess.run(["sh", "-c", f"mkdir -m 0777 {shared} && cp {base}/planted.so {shared}/{key}.so && "
                                    f"chmod 0777 {shared}/{key}.so"], user="nobody", check=True)
        assert os.stat(shared).st_uid == pwd.getpwnam("nobody").pw_uid
        marker = os.path.join(base, "planted-ran")
        hit, path, _, used, err = compile_once(shared, THUNDER_PLANTED_MARKER=marker)
        assert not os.path.exists(marker)
        assert not hit and used != shared
        assert "owned by uid" in err
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_directory_owned_by_another_user_is_refused_even_if_private(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory away")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    _, _, _, used, err = compile_once(theirs)
    assert used != str(theirs) and "owned by uid 65534" in err


@pytest.mark.parametrize("tamper", ["mode 0777", "mode 0720", "foreign owner", "symlink", "planted"])
def test_an_entry_that_is_not_a_private_regular_file_or_fails_its_hash_is_rebuilt(tmp_path, planted_so, tamper,
                                                                                   monkeypatch):
    # In this process: the checks run before dlopen, so a planted constructor could only create its marker.
    cache = str(tmp_path / "k")
    path = _core.load_module(_tiny(1), cache, TINY_FLAGS).path
    marker = tmp_path / "planted-ran"
    monkeypatch.setenv("THUNDER_PLANTED_MARKER", str(marker))
    if tamper.startswith("mode"):
        os.chmod(path, int(tamper.split()[1], 8))
    elif tamper == "foreign owner":
        if os.geteuid() != 0:
            pytest.skip("needs root to give a file away")
        os.chown(path, 65534, 65534)
    elif tamper == "symlink":
        os.rename(path, tmp_path / "elsewhere.so")
        os.symlink(tmp_path / "elsewhere.so", path)
    else:  # our own file, with the right mode, but not what we sealed
        shutil.copy(planted_so, path)
        os.chmod(path, 0o700)
    module = _core.load_module(_tiny(1), cache, TINY_FLAGS)
    assert not module.cache_hit and module.path == path and module.cache_dir == cache
    assert not marker.exists()
    assert ctypes.CFUNCTYPE(ctypes.c_int)(module.symbol("value"))() == 1
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700
    assert _core.load_module(_tiny(1), cache, TINY_FLAGS).cache_hit


def _sealed(payload, key):
    """An entry's bytes as the cache writes them (kernel_cache.cc, entry_trailer): the payload, then magic, the key's
    first 16 characters, the payload's length and the SHA-256 of payload and key."""
    trailer = b"THKENTR1" + key.encode()[:16].ljust(16, b"\0") + len(payload).to_bytes(8, "little")
    return payload + trailer + hashlib.sha256(payload + key.encode()).digest()


def test_an_entry_exporting_its_key_as_a_variable_is_rebuilt_not_called(tmp_path):
    """A file in our own cache, with the right mode and a valid trailer (written by this user, not by thunder),
    whose `thunder_cache_key` is a variable: the loader called it as a function (a jump into data: SIGSEGV). A
    symbol that is not a function is no key: the entry is rebuilt."""
    cache = str(tmp_path / "k")
    path = _core.load_module(_tiny(1), cache, TINY_FLAGS).path
    key = os.path.basename(path)[:-len(".so")]
    src = tmp_path / "variable.cc"
    src.write_text(f'extern "C" const char thunder_cache_key[] = "{key}";\n' + _tiny(2))
    out = tmp_path / "variable.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    with open(path, "wb") as f:
        f.write(_sealed(out.read_bytes(), key))
    os.chmod(path, 0o700)
    code = ("from thunder import _core\nimport ctypes\n"
            f"m = _core.load_module({_tiny(1)!r}, {cache!r}, {TINY_FLAGS!r})\n"
            "print(m.cache_hit, ctypes.CFUNCTYPE(ctypes.c_int)(m.symbol('value'))())\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "1"]


def test_cache_files_are_private_whatever_the_umask(tmp_path):
    cache = tmp_path / "a" / "kernels"
    code = "import os\nos.umask(0)\n" + COMPILE
    p = run(code, cache)
    path = p.stdout.split()[1]
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    # A source kept after a failed compile is 0600.
    failing = "import os\nos.umask(0)\nfrom thunder import _core\n" \
              f"try:\n    _core.load_module('this is not C++', {str(cache)!r})\nexcept RuntimeError as e:\n    print(e)\n"
    out = run(failing, cache).stdout
    kept = re.search(r"kept as (\S+\.cc)", out).group(1)
    assert os.path.exists(kept) is False or stat.S_IMODE(os.stat(kept).st_mode) == 0o600


# ---- 5 and 6: truncated entries, FIFOs, a hanging compiler ----

@pytest.mark.parametrize("fraction", [0.05, 0.4, 0.75])
def test_a_truncated_entry_is_rebuilt_not_a_crash(tmp_path, fraction):
    cache = tmp_path / "k"
    _, path, _, _, _ = compile_once(cache)
    size = os.path.getsize(path)
    os.truncate(path, int(size * fraction))
    hit, _, _, _, _ = compile_once(cache)  # was SIGBUS in every later process
    assert not hit
    assert os.path.getsize(path) == size or compile_once(cache)[0]


def test_a_fifo_at_an_entry_path_does_not_block(tmp_path):
    cache = tmp_path / "k"
    _, path, _, _, _ = compile_once(cache)
    os.unlink(path)
    os.mkfifo(path, 0o600)
    start = time.monotonic()
    hit, _, _, _, _ = compile_once(cache)
    assert not hit and time.monotonic() - start < 60
    assert stat.S_ISREG(os.lstat(path).st_mode)


def test_a_compiler_that_hangs_is_killed_after_the_timeout(tmp_path):
    compiler = tmp_path / "hanging-g++"
    compiler.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo hang 1; exit 0; }\nsleep 60 & sleep 60\n")
    compiler.chmod(0o700)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="timed out"):
        _core.load_module("int f() { return 1; }", str(tmp_path / "k"), compiler=str(compiler), timeout=0.5)
    assert time.monotonic() - start < 10
    assert temporaries(tmp_path / "k") == []


def test_a_compiler_whose_version_cannot_be_read_is_an_error_not_a_key_without_it(tmp_path):
    """`--version` timing out was remembered as an empty version: every later key in the process left the compiler
    out."""
    compiler = tmp_path / "slow-version-g++"
    compiler.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { sleep 60; exit 0; }\nexec g++ \"$@\"\n")
    compiler.chmod(0o700)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="version"):
            _core.load_module(_tiny(1), str(tmp_path / "k"), compiler=str(compiler), timeout=0.5)


def test_a_cache_directory_from_the_environment_has_its_tilde_expanded(monkeypatch, tmp_path):
    from thunder.executors import cpuex
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("THUNDER_CACHE_DIR", "~/kernels")
    assert cpuex.cache_dir() == str(tmp_path / "kernels")


def test_the_compile_timeout_comes_from_the_environment(tmp_path, monkeypatch):
    from thunder.executors import cpuex
    monkeypatch.setenv("THUNDER_COMPILE_TIMEOUT", "12.5")
    assert cpuex.compile_timeout() == 12.5
    monkeypatch.setenv("THUNDER_COMPILE_TIMEOUT", "inf")
    assert cpuex.compile_timeout() == float("inf")
    for bad in ("soon", "-5", "nan", "-inf"):  # a negative one or NaN read as no limit at all
        monkeypatch.setenv("THUNDER_COMPILE_TIMEOUT", bad)
        with pytest.raises(ValueError, match=f"THUNDER_COMPILE_TIMEOUT must be a number of seconds >= 0 .* got '{bad}'"):
            cpuex.compile_timeout()


# ---- 7: leaks ----

def test_temporaries_of_dead_processes_are_removed(tmp_path):
    cache = tmp_path / "k"
    cache.mkdir(mode=0o700)
    child = subprocess.Popen(["true"])
    child.wait()
    dead = f"{'ab' * 16}.{child.pid}.12345.cc"
    live = f"{'ab' * 16}.{os.getpid()}.12345.so"
    old = f"{'cd' * 16}.{os.getpid()}.999.so"
    for name in (dead, live, old):
        (cache / name).write_text("x")
    two_days_ago = time.time() - 2 * 86400
    os.utime(cache / old, (two_days_ago, two_days_ago))
    compile_once(cache)
    assert temporaries(cache) == [live]


def test_the_cache_is_capped_least_recently_used_first(tmp_path):
    cache = str(tmp_path / "k")
    first = _core.load_module(_tiny(0), cache, TINY_FLAGS)
    size = os.path.getsize(first.path)
    cap = int(size * 2.5)
    keys = [_core.load_module(_tiny(n), cache, TINY_FLAGS, max_cache_bytes=cap).key for n in range(1, 4)]
    assert _core.kernel_cache_bytes(cache) <= cap
    assert sorted(os.listdir(cache)) == sorted(f"{k}.so" for k in keys[-2:])
    # Using an entry makes it the most recent: the next eviction takes the other one.
    time.sleep(0.01)
    assert _core.load_module(_tiny(2), cache, TINY_FLAGS, max_cache_bytes=cap).cache_hit
    time.sleep(0.01)
    _core.load_module(_tiny(4), cache, TINY_FLAGS, max_cache_bytes=cap)
    assert f"{keys[1]}.so" in os.listdir(cache) and f"{keys[2]}.so" not in os.listdir(cache)


def test_the_cap_comes_from_the_environment(tmp_path):
    cache = tmp_path / "k"
    code = COMPILE + "\njitted2 = thunder.jit(lambda x: x.sin() * 5, executors=executor_sets()['cpu'])\n" \
                     "with torch.no_grad():\n    jitted2(x)\n"
    run(code, cache, THUNDER_CACHE_MAX_BYTES=1)
    assert len([n for n in os.listdir(cache) if ENTRY.match(n)]) == 1  # the newest only


def test_clear_kernel_cache_removes_entries_and_leaves_loaded_kernels_working(tmp_path):
    cache = tmp_path / "k"
    code = COMPILE + textwrap.dedent(f"""
        import os
        before = os.listdir({str(cache)!r})
        files, nbytes = thunder.clear_kernel_cache()
        assert files == len(before) == 1 and nbytes > 0, (files, before)
        assert os.listdir({str(cache)!r}) == []
        with torch.no_grad():
            assert torch.allclose(jitted(x), x.cos() * 3)  # still loaded
        print("cleared")
    """)
    assert "cleared" in run(code, cache).stdout
    assert not compile_once(cache)[0]
    assert thunder_clear_doc().startswith("Empties the on-disk kernel cache")


def thunder_clear_doc():
    import thunder
    return thunder.clear_kernel_cache.__doc__


def test_clear_kernel_cache_refuses_a_directory_that_is_not_ours(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    (shared / f"{'ab' * 16}.so").write_text("someone's")
    with pytest.raises(RuntimeError, match="not clearing"):
        _core.clear_kernel_cache(str(shared))
    assert os.listdir(shared) == [f"{'ab' * 16}.so"]


UNLOAD = """
import gc, os, sys
from thunder import _core
cache = sys.argv[1]
flags = ["-O0", "-fPIC", "-shared"]
def maps():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)
def load_and_drop(first):
    for n in range(first, first + 40):
        m = _core.load_module(f'extern "C" int value() {{ return {n}; }}', cache, flags)
        assert m.symbol("value")
        del m
    gc.collect()
load_and_drop(0)
before = maps()
load_and_drop(1000)
after = maps()
kept = [_core.load_module(f'extern "C" int value() {{ return {n}; }}', cache, flags) for n in range(2000, 2040)]
held = maps()
print(before, after, held)
"""


def test_modules_nothing_uses_are_unloaded(tmp_path):
    p = subprocess.run([sys.executable, "-c", UNLOAD, str(tmp_path / "k")], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    before, after, held = map(int, p.stdout.split())
    assert after - before < 20, (before, after)  # 40 modules loaded and dropped: nothing left mapped
    assert held - after >= 40 * 3                 # held ones stay mapped (several mappings each)


LAUNCHERS_KEEP_MODULES = """
import gc, torch, thunder
from thunder.executors import executor_sets, cpuex
from thunder.jit import compiled_graphs
x = torch.randn(10)
jitted = thunder.jit(lambda x: x.exp() + 1, executors=executor_sets()["cpu"])
with torch.no_grad():
    jitted(x)
trace = compiled_graphs(jitted)[-1].execution_trace.trace
launchers, modules = cpuex.lower(trace)
(launcher,) = launchers.values()
assert launcher.module is modules[0][0]
del modules
gc.collect()
torch.testing.assert_close(launcher(x), x.exp() + 1)
print("ok")
"""


def test_launchers_keep_their_module_loaded(tmp_path):
    # A launcher holds its kernel's module (so the module is unloaded only when no launcher uses it).
    assert "ok" in run(LAUNCHERS_KEEP_MODULES, tmp_path / "k").stdout


# ---- 8: pooled_capsule's arithmetic and its deleter ----

@pytest.mark.parametrize("shape, bits, match", [
    ((2**61, 8), 32, "overflows"),
    ((2**40, 2**40), 8, "overflows"),
    ((4, -1), 32, r"shape\[1\] is negative"),
    ((4,), 12, "bits must be"),
    ((4,), 0, "bits must be"),
])
def test_pooled_capsule_rejects_bad_sizes(shape, bits, match):
    with pytest.raises(ValueError, match=match):
        _core.pooled_capsule(shape, 2, bits)


POOLED_DELETER = """
import ctypes, gc, torch
from thunder import _core
get = ctypes.pythonapi.PyCapsule_GetPointer
get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
# A consumer that calls the deleter and then fails, leaving the capsule named "dltensor".
for _ in range(100):
    capsule = _core.pooled_capsule((1 << 16,), 2, 32)
    managed = get(capsule, b"dltensor")
    deleter = ctypes.cast(managed + 56, ctypes.POINTER(ctypes.c_void_p))[0]
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(deleter)(managed)
    del capsule
gc.collect()
# Consumers that reject the capsule, and capsules nobody consumes.
for code, bits in [(2, 8), (3, 32), (1, 128)]:
    capsule = _core.pooled_capsule((1 << 16,), code, bits)
    try:
        torch.utils.dlpack.from_dlpack(capsule)
    except Exception:
        pass
    del capsule
unused = [_core.pooled_capsule((1 << 16,), 2, 32) for _ in range(10)]
del unused
t = torch.utils.dlpack.from_dlpack(_core.pooled_capsule((1 << 16,), 2, 32))
t.fill_(2.0)
assert float(t.sum()) == 2.0 * (1 << 16)
del t
cached, live, peak = _core.buffer_pool_stats()
assert live == 0, live
print("ok")
"""


def test_pooled_capsule_survives_consumers_that_fail():
    p = subprocess.run([sys.executable, "-c", POOLED_DELETER], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "ok" in p.stdout, (p.returncode, p.stderr[-2000:])


# ---- fault injection: kill -9 at random points of compiling a multi-kernel model ----

FAULTS = """
import os, random, re, signal, sys, time
import torch, thunder
from thunder.executors import executor_sets
from thunder.jit import compiled_graphs
cache, rounds, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)

def make(c):  # nine CPU kernels between matmuls: two translation units, compiled in parallel
    def f(x, w):
        for _ in range(8):
            x = torch.tanh(x * c + 1.0) @ w
        return x * c
    return f

x, w = torch.randn(8, 16), torch.randn(16, 16) * 0.1
variants = [1.25, 1.5, 1.75, 2.0]

def run_variant(c):
    jitted = thunder.jit(make(c), executors=executor_sets()["cpu"])
    with torch.no_grad():
        out = jitted(x, w)
    graph = compiled_graphs(jitted)[-1]
    assert len(graph.kernels["cpu"]) == 2, "expected two translation units"
    return out, graph

for r in range(rounds):
    pid = os.fork()
    if pid == 0:
        try:
            run_variant(variants[r % len(variants)])
        finally:
            os._exit(0)
    time.sleep(rng.uniform(0.0, 0.6))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
time.sleep(0.3)  # the compilers of the last killed process die with it (their supervisor's parent-death signal)
for c in variants:
    out, graph = run_variant(c)
    torch.testing.assert_close(out, make(c)(x, w))
left = sorted(n for n in os.listdir(cache) if not re.match(r"^[0-9a-f]{32}[.]so$", n))
assert left == [], left
print("ok", len(os.listdir(cache)))
"""


def test_killing_compiles_at_random_points_leaves_a_working_cache_and_no_temporaries(tmp_path):
    cache = tmp_path / "k"
    env = dict(os.environ, THUNDER_CACHE_DIR=str(cache))
    p = subprocess.run([sys.executable, "-c", FAULTS, str(cache), "20", "1234"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr[-3000:]


# ---- found by a second round of attacks ----

def _fake_compiler(tmp_path, body):
    """An executable shell script that runs `body` and then the real g++ with the same arguments."""
    script = tmp_path / "fake-g++"
    script.write_text(f"#!/bin/sh\n{body}\nexec g++ \"$@\"\n")
    script.chmod(0o755)
    return str(script)


def test_a_directory_swapped_in_during_the_compile_receives_nothing(tmp_path):
    # Whoever can rename the cache directory (its parent is theirs) swaps in a directory of their own while the
    # compiler runs: the compiler works in the checked directory by descriptor, with relative names.
    cache, swapped = tmp_path / "k", tmp_path / "real"
    compiler = _fake_compiler(tmp_path, f"mv {cache} {swapped} && mkdir {cache}")
    module = _core.load_module(_tiny(7), str(cache), TINY_FLAGS, compiler)
    assert module.command.startswith(f"cd {cache} && ") and " -o ./" in module.command
    assert os.listdir(cache) == []  # the attacker's directory got no source and no object
    assert [n for n in os.listdir(swapped) if ENTRY.match(n)] == [f"{module.key}.so"]
    assert ctypes.CFUNCTYPE(ctypes.c_int)(module.symbol("value"))() == 7


def test_a_full_disk_falls_back_to_a_private_directory(tmp_path):
    cache = tmp_path / "k"
    compiler = _fake_compiler(tmp_path, f'if [ "$(pwd -P)" = "{cache}" ]; then echo "ld: final link failed: '
                                        'No space left on device" >&2; exit 1; fi')
    module = _core.load_module(_tiny(8), str(cache), TINY_FLAGS, compiler)
    assert module.cache_dir != str(cache) and "ran out of space" in module.warning, module.warning
    assert temporaries(cache) == []  # the source is not left on the full disk


def test_a_forked_child_that_exits_leaves_the_parents_private_directory(tmp_path):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)  # refused: this process compiles into a private directory instead
    code = textwrap.dedent(f"""
        import os, sys
        from thunder import _core
        first = _core.load_module('extern "C" int a() {{ return 1; }}', {str(cache)!r}, {TINY_FLAGS!r})
        assert first.warning, "expected the private directory"
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # runs the C++ static destructors
        os.waitpid(pid, 0)
        second = _core.load_module('extern "C" int b() {{ return 2; }}', {str(cache)!r}, {TINY_FLAGS!r})
        assert second.cache_dir == first.cache_dir and os.path.isdir(second.cache_dir)
        print("ok")
    """)
    assert run(code, cache).stdout.strip() == "ok"


def test_an_empty_directory_at_an_entry_path_is_replaced(tmp_path):
    cache = tmp_path / "k"
    key = _core.load_module(_tiny(9), str(cache), TINY_FLAGS).key
    _core.clear_kernel_cache(str(cache))
    (cache / f"{key}.so").mkdir()
    assert not _core.load_module(_tiny(9), str(cache), TINY_FLAGS).cache_hit
    assert os.path.isfile(cache / f"{key}.so")
    # A directory that cannot be removed: the kernel still compiles and loads, uncached.
    _core.clear_kernel_cache(str(cache))
    (cache / f"{key}.so").mkdir()
    (cache / f"{key}.so" / "x").write_text("x")
    module = _core.load_module(_tiny(9), str(cache), TINY_FLAGS)
    assert not module.cache_hit and os.path.isdir(cache / f"{key}.so")


def test_an_infinite_compile_timeout_is_no_limit(tmp_path):
    hit, _, _, _, _ = compile_once(tmp_path / "k", THUNDER_COMPILE_TIMEOUT="inf")
    assert not hit


@pytest.mark.parametrize("value", ["abc", "-1", "1e3", "1K"])
def test_a_malformed_cache_size_cap_is_an_error_naming_the_variable(tmp_path, value, monkeypatch):
    monkeypatch.setenv("THUNDER_CACHE_MAX_BYTES", value)
    with pytest.raises(ValueError, match="THUNDER_CACHE_MAX_BYTES must be a whole number of bytes"):
        _core.load_module(_tiny(10), str(tmp_path / "k"), TINY_FLAGS)


def test_a_private_directory_left_by_an_ended_process_is_removed_by_the_next(tmp_path):
    """The private directory a process compiles into when the cache directory is refused is removed at exit -- but
    not by a process killed by a signal or ended by os._exit, and no later process removed it (found by a break-it
    pass). It is named with its process's pid; the next process that makes one removes those of ended processes,
    and leaves a running process's."""
    cache, tmp = tmp_path / "shared", tmp_path / "tmp"
    cache.mkdir()
    cache.chmod(0o777)  # refused: each process compiles into a private directory under TMPDIR
    tmp.mkdir()
    code = textwrap.dedent(f"""
        import os, sys
        from thunder import _core
        module = _core.load_module('extern "C" int a() {{ return 1; }}', {str(cache)!r}, {TINY_FLAGS!r})
        print(module.cache_dir, flush=True)
        if sys.argv[-1] == "exit":
            os._exit(0)
    """)

    def private_run(how):
        p = subprocess.run([sys.executable, "-c", code, how], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, THUNDER_CACHE_DIR=str(cache), TMPDIR=str(tmp)))
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    left = private_run("exit")
    assert os.path.isdir(left)
    parts = os.path.basename(left).split("-")
    if len(parts) != 5:
        pytest.skip("no boot id or pid namespace here: private directories are not named by their process")
    _, _, pid, origin, _ = parts
    assert int(pid) > 0 and len(origin) == 16
    live = tmp / f"thunder-kernels-{os.getpid()}-{origin}-xyz"  # a running process's (this one's)
    live.mkdir()
    assert not os.path.exists(private_run("normal")) and not os.path.exists(left)
    assert live.is_dir()
