"""Runs pytest against the ASan/UBSan build of thunder._core (see docs/cpu_executor.md, "Sanitizers").

    LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so)" \\
        ASAN_OPTIONS=detect_leaks=0 python tests/run_sanitized.py build/py-asan tests/test_cpu_executor.py

The editable install's import hook would load the installed extension, so it is removed and a copy of the
package holding the sanitized extension (built into the given directory) goes first on the path.
"""
import glob
import os
import shutil
import sys


def main():
    build, args = sys.argv[1], sys.argv[2:]
    if "libasan" not in os.environ.get("LD_PRELOAD", ""):
        sys.exit("run_sanitized.py: preload libasan (LD_PRELOAD=$(g++ -print-file-name=libasan.so))")
    (extension,) = glob.glob(os.path.join(build, "_core*.so"))
    package = os.path.join(build, "pkg", "thunder")
    shutil.rmtree(package, ignore_errors=True)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shutil.copytree(os.path.join(here, "thunder"), package, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copy(extension, package)
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ScikitBuildRedirectingFinder"]
    sys.path.insert(0, os.path.dirname(package))
    import pytest
    import thunder._core
    assert thunder._core.__file__.startswith(os.path.abspath(os.path.dirname(package))), thunder._core.__file__
    sys.exit(pytest.main(["-p", "no:cacheprovider", *args]))


if __name__ == "__main__":
    main()
