# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# Both create .venv, install the pinned dependencies, build kiln into it
# (meson-python, editable: the C core rebuilds when its sources change), then
# run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEPS := $(VENV)/.deps-installed
BUILD := build
KILN_BUILT := $(BUILD)/.kiln-installed

.PHONY: all build demo test test-c test-python test-sanitize test-valgrind bench bench-kernels coverage clean fuzz \
  test-arm64 bench-llamacpp

all: build

$(DEPS): requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

$(KILN_BUILT): $(DEPS) pyproject.toml
	$(PY) -m pip install --quiet --no-build-isolation -Cbuild-dir=$(BUILD) -e .
	touch $@

# Rebuilds the C core (the editable install also does this on import).
build: $(KILN_BUILT)
	$(VENV)/bin/ninja -C $(BUILD)

test-c: build
	$(BUILD)/tests/c/kiln_ctest

# Two workers (pytest-xdist): requirements-dev.txt says why.
test-python: build
	$(PY) -m pytest tests/python -q -n 2 --durations=15

test: test-c test-python

# The C tests under ASan + UBSan (any report fails the run), and under
# valgrind's memcheck on the optimised build. Not part of `make test`
# (minutes each); run them before landing C changes.
SAN_BUILD := build-sanitize
test-sanitize: $(DEPS)
	test -d $(SAN_BUILD) || $(VENV)/bin/meson setup $(SAN_BUILD) -Dbuildtype=debugoptimized \
	  -Db_sanitize=address,undefined -Db_lundef=false
	$(VENV)/bin/ninja -C $(SAN_BUILD) tests/c/kiln_ctest
	# allocator_may_return_null: the tests ask for impossible sizes to check
	# that kiln reports out-of-memory; ASan would abort on them by default.
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  $(SAN_BUILD)/tests/c/kiln_ctest

test-valgrind: build
	valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite -q \
	  $(BUILD)/tests/c/kiln_ctest

# aarch64 (issue 21): cross-compiles the C core and C tests (cross/aarch64-linux-gnu.ini)
# into build-arm64/ and runs them under qemu-aarch64 at each emulated CPU and
# ISA level (cross/test-arm64.sh; installs gcc-aarch64-linux-gnu and
# qemu-user with apt-get when missing). QUICK=1: the `-cpu max` run only.
test-arm64: $(DEPS)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" sh cross/test-arm64.sh $(if $(QUICK),quick,full) meson

demo: build
	$(PY) examples/demo.py

clean:
	rm -rf $(BUILD) $(VENV) build-arm64

# The model benchmark (issue 5): kiln against eager, Inductor and ONNX Runtime.
BENCH_DEPS := $(VENV)/.bench-deps-installed
$(BENCH_DEPS): bench/requirements.txt $(DEPS)
	$(PY) -m pip install --quiet -r bench/requirements.txt torch==2.13.0
	touch $@

bench: build $(BENCH_DEPS)
	$(PY) bench/run.py $(if $(QUICK),--quick)

# Kernel benchmark (issue 3): machine peaks, then kiln's kernels beside torch
# and OpenBLAS with 1 and 2 threads; bench/kernels/results.json and the table
# in docs/performance.md. OpenBLAS (Debian's libopenblas0-pthread) is only
# the comparison, loaded with dlopen: installed here when missing, and when
# that fails its column stays empty.
bench-kernels: build
	@/sbin/ldconfig -p | grep -q 'libopenblas\.so\.0' || apt-get install -y libopenblas0-pthread \
	  || echo "bench-kernels: OpenBLAS could not be installed; its column will be empty"
	$(PY) bench/kernels/run.py $(if $(QUICK),--quick)

# llama.cpp as an optional generation peer (issue 18; not part of bench or
# test: its build takes minutes). bench/llamacpp.py builds llama-bench and
# llama-quantize once from the llama-cpp-python sdist into ~/.cache/kiln/peers,
# converts the bench's gen_llama to GGUF f32 / q8_0 / q4_0 and times them in
# interleaved rounds with kiln's decode of the same model;
# bench/llamacpp_results.json and a Markdown table. ROUNDS=N, THREADS=2,1.
LLAMACPP_DEPS := $(VENV)/.llamacpp-deps-installed
$(LLAMACPP_DEPS): bench/requirements-llamacpp.txt $(DEPS)
	$(PY) -m pip install --quiet -r bench/requirements-llamacpp.txt
	touch $@

bench-llamacpp: build $(LLAMACPP_DEPS)
	$(PY) bench/llamacpp.py $(if $(ROUNDS),--rounds $(ROUNDS)) $(if $(THREADS),--threads $(THREADS))

# OpInfo coverage (issue 7): every op_db sample through kiln.trace, per-op
# pass / fail / unsupported, totals and the Core ATen figure; coverage.json.
# coverage, bench and fuzz draw a progress bar on a terminal (kiln/progress.py;
# none when stderr is not one; KILN_PROGRESS=0/1 forces it off/on).
coverage: build
	$(PY) tests/coverage/opinfo_coverage.py $(if $(QUICK),--quick) $(if $(RESUME),--resume) --out coverage.json

# The random-graph differential fuzzer (tests/fuzz, issue 16): N random graphs
# of seed SEED through kiln against eager PyTorch (float32 and float64), each
# failure shrunk to a script under build/fuzz/. A progress bar on a
# terminal, none otherwise; the last line is "P passed, F failed (...)".
# JOBS worker processes (default 1: the machine is shared); TIME=SEC stops
# starting graphs after SEC seconds; REF=K runs one graph in K on kiln's
# reference target too (the scalar reference kernels, src/hal/reference);
# BF16=K runs one graph in K in bf16 (1: every graph; tests/fuzz/kilnfuzz/bf16.py);
# QUANT=K one in K through kiln.trace with quantized weights (tests/fuzz/kilnfuzz/quant.py).
N ?= 100000
SEED ?= 0
JOBS ?= 1
fuzz: build
	$(PY) tests/fuzz/kiln_fuzz.py --seed $(SEED) --n $(N) --jobs $(JOBS) $(if $(TIME),--time-budget $(TIME)) \
	  $(if $(REF),--reference-every $(REF)) $(if $(BF16),--bf16-every $(BF16)) $(if $(QUANT),--quant-every $(QUANT))
