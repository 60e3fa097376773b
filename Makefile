# teachflow: two commands do all their own set-up.
#   make lab    creates .venv, installs teachflow with JupyterLab, hands out the exercises
#               (exercises/release/), opens the lessons
#   make test   creates .venv, installs teachflow with its test extras and (where it can)
#               Debian's Chromium for the browser tests, bubblewrap for the grading
#               sandbox and a C compiler for the CPU kernels, runs the whole suite: the same
#               verdict on every run (its property tests draw the same examples each time)
#   make explore  the property tests alone, with new random examples, ten times as many
# Both install a C compiler (Debian's gcc) where they can: fused kernels then run as
# generated C on the CPU; without one they run as NumPy, and the tests of the C skip.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
UV     := $(VENV)/bin/uv
# Run apt-get through sudo only when we are not root already.
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SUDO_N := $(shell [ "$$(id -u)" = 0 ] || echo sudo -n)
# Jupyter refuses to run as root unless told; containers and CI machines often are root.
LAB_FLAGS := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)
# JupyterLab serves the whole repository (the lessons ask you to read teachflow/passes/*.py)
# and opens on the lessons' folder. Its terminals find the venv's commands (teachflow check).
# Its settings' defaults come from lab-settings/overrides.json (no pop-up asking about Jupyter
# news or updates); it logs only warnings, so the address it prints stands out.
LAB_ARGS := --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/lessons \
            --LabApp.app_settings_dir="$(CURDIR)/lab-settings" --log-level=WARN
# More options for JupyterLab: make lab LAB_OPTIONS="--port=8890" (README.md, "The lab").
LAB_OPTIONS ?=

.PHONY: lab exercises test explore chromium bubblewrap cc lint bench clean

$(PY):
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	  echo "python3 -m venv needs Debian's python3-venv; installing it"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq python3-venv && \
	  rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }

# uv installs into the venv what pip would, from the same places, in seconds rather than a
# minute: tools/uv_flags.py hands it pip's configuration (this machine's indexes, folders of
# wheels, constraints). Should uv fail, pip installs instead. The venv keeps pip, for the
# README's `.venv/bin/pip install -e ".[gpu]"`.
$(UV): | $(PY)
	$(PY) -m pip install -q "uv>=0.13,<0.14"

# A stamp per extra, so a second `make test` starts at once; pyproject.toml changes reinstall.
$(VENV)/.installed-%: pyproject.toml | $(UV)
	$(UV) pip install -q --python $(PY) $$($(PY) tools/uv_flags.py) -e ".[$*]" || \
	  { echo "uv could not install it: pip installs instead"; $(PY) -m pip install -q -e ".[$*]"; }
	@touch $@

lab: $(VENV)/.installed-lab exercises cc
	@echo; echo "JupyterLab starts, for this machine only (it listens on localhost). Open the"; \
	  echo "address it prints below, http://localhost:PORT/lab/tree/lessons?token=..., in a"; \
	  echo "browser here, or from another machine through an SSH tunnel (README.md, \"The lab\")."; \
	  echo "Ctrl-C stops it."; echo
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/jupyter lab $(LAB_FLAGS) $(LAB_ARGS) $(LAB_OPTIONS)

# The exercises as learners get them (answers stubbed, hidden tests left out) in
# exercises/release/, git-ignored. Each is handed out once: a second `make lab` keeps your work.
exercises: $(VENV)/.installed-lab
	@$(PY) tools/hand_out.py

# The suite runs on every core (pytest-xdist, -n auto), each test file in one worker: a file's
# shared fixtures (an exercise graded once for all its tests) are made once. TEST_JOBS=1 runs
# it in one process; TEST_ARGS adds pytest's options (TEST_ARGS="tests/test_passes.py -x").
TEST_JOBS ?= auto
TEST_ARGS ?=
test: $(VENV)/.installed-test chromium bubblewrap cc
	$(PY) -m ruff check teachflow tests bench tools
	$(PY) -m pytest -rfEXs $(if $(filter 1,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile) $(TEST_ARGS)

# The property tests (hypothesis's, marked `hypothesis`) with new random examples on every
# run, ten times as many as `make test` draws (tests/conftest.py); what fails is kept in
# .hypothesis/ and tried first next time. EXPLORE=50 for more.
EXPLORE ?= 10
explore: $(VENV)/.installed-test cc
	TEACHFLOW_EXPLORE=$(EXPLORE) $(PY) -m pytest -m hypothesis -rfEXs

# The browser tests drive Debian's Chromium (Playwright's own browser download is not used).
# Installed where we can: as root, or through sudo that asks for no password. Otherwise one
# line says why not, and the browser tests skip, saying the same.
chromium:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
	  echo "Chromium is missing and this is not Debian (no apt-get): the browser tests will be skipped"; \
	elif [ "$$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then \
	  echo "Chromium is missing and installing it needs root (sudo asks for a password): the browser tests will be skipped; run 'sudo apt-get install chromium' to have them"; \
	else \
	  echo "Installing Debian's chromium for the browser tests (apt-get install chromium)"; \
	  { $(SUDO_N) apt-get update -qq && \
	    $(SUDO_N) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	    echo "Installing chromium failed: the browser tests will be skipped"; \
	fi

# teachflow grade runs learners' code in bubblewrap (Debian's bubblewrap). Installed where we
# can, as Chromium is; without it, grading falls back to a user id of its own (as root) and
# the tests that need a sandbox skip, saying why.
bubblewrap:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
	  echo "bubblewrap is missing and this is not Debian (no apt-get): grading tests that need a sandbox will be skipped"; \
	elif [ "$$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then \
	  echo "bubblewrap is missing and installing it needs root: grading tests that need a sandbox will be skipped; run 'sudo apt-get install bubblewrap' to have them"; \
	else \
	  echo "Installing Debian's bubblewrap for the grading sandbox (apt-get install bubblewrap)"; \
	  { $(SUDO_N) apt-get update -qq && \
	    $(SUDO_N) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; } || \
	    echo "Installing bubblewrap failed: grading tests that need a sandbox will be skipped"; \
	fi

# Fused kernels run on the CPU as generated C, compiled by the system's C compiler (cc) with
# OpenMP, and with glibc's vector maths (libmvec, in libc6-dev); g++ is the host compiler that
# nvcc needs to check the generated CUDA. Installed where we can, as Chromium is; without it
# the NumPy kernels run and the tests of the C kernels (and of nvcc) skip.
cc:
	@if command -v cc >/dev/null 2>&1 && command -v c++ >/dev/null 2>&1 && [ -e /usr/include/math.h ]; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
	  echo "No C compiler and this is not Debian (no apt-get): fused kernels run as NumPy; the C kernel tests will be skipped"; \
	elif [ "$$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then \
	  echo "No C compiler, and installing one needs root: fused kernels run as NumPy and the C kernel tests will be skipped; run 'sudo apt-get install gcc g++ libc6-dev' to have them"; \
	else \
	  echo "Installing Debian's gcc and g++ for the generated C kernels (apt-get install gcc g++ libc6-dev)"; \
	  { $(SUDO_N) apt-get update -qq && \
	    $(SUDO_N) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc g++ libc6-dev >/dev/null; } || \
	    echo "Installing gcc failed: fused kernels run as NumPy; the C kernel tests will be skipped"; \
	fi

bench: $(VENV)/.installed-test
	$(PY) bench/eager_overhead.py
	$(PY) bench/staged_vs_eager.py
	$(PY) bench/fusion.py
	$(PY) bench/compile_time.py
	$(PY) bench/layout.py
	$(PY) bench/devices.py
	$(PY) bench/memory_plan.py
	$(PY) bench/memory_order.py
	$(PY) bench/checkpoint.py
	$(PY) bench/per_example_grads.py
	$(PY) bench/transforms_peer.py
	$(PY) bench/ddp.py
	$(PY) bench/cnn_digits.py
	$(PY) bench/stepper.py
	$(PY) bench/stepper_browser.py
	$(PY) bench/check.py
	$(PY) bench/grade_scale.py
	$(PY) bench/similarity.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
