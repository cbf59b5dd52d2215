# Two commands do all the set-up on a fresh machine:
#   make run    -- installs, then compiles the seed examples and real models and checks them against eager
#   make test   -- installs, then runs every test (C++ with ctest, Python with pytest)
PYTHON ?= python3
PIP := $(PYTHON) -m pip
CORE_SOURCES := $(shell find csrc -name '*.cc' -o -name '*.h') CMakeLists.txt pyproject.toml

.PHONY: install run test test-cpp test-py clean

install: build/.installed

# torch is pinned: any looser requirement downloads a multi-GB CUDA build on a CPU machine.
build/.installed: $(CORE_SOURCES) requirements-dev.txt
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -r requirements-dev.txt
	$(PIP) install -q --no-build-isolation -e .
	@mkdir -p build && touch $@

run: install
	$(PYTHON) examples/main.py

# GoogleTest comes from Debian's libgtest-dev.
build/.gtest:
	@test -f /usr/include/gtest/gtest.h || (apt-get update -qq && apt-get install -y -qq libgtest-dev)
	@mkdir -p build && touch $@

# The C++ tests run twice: plain, and built with AddressSanitizer and UndefinedBehaviorSanitizer (build/cpp-asan).
test-cpp: build/.gtest
	cmake -S . -B build/cpp -G Ninja -DTHUNDER_BUILD_TESTS=ON -DTHUNDER_WERROR=ON -DCMAKE_BUILD_TYPE=Debug
	cmake --build build/cpp
	ctest --test-dir build/cpp --output-on-failure
	cmake -S . -B build/cpp-asan -G Ninja -DTHUNDER_BUILD_TESTS=ON -DTHUNDER_WERROR=ON -DTHUNDER_SANITIZE=ON \
	  -DCMAKE_BUILD_TYPE=Debug
	cmake --build build/cpp-asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir build/cpp-asan --output-on-failure

# Chromium, Debian's, for the headless-browser test of the HTML report (tests/test_report.py).
build/.chromium:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	@mkdir -p build && touch $@

# pytest runs in PYTEST_WORKERS processes (pytest-xdist; 0: in this process), and lists the slowest tests.
PYTEST_WORKERS ?= 2
test-py: install build/.chromium
	$(PYTHON) -m pytest -n $(PYTEST_WORKERS) --durations=20 tests

test: test-cpp test-py

clean:
	rm -rf build thunder/*.so
