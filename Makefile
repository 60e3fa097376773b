# teachflow: two commands do all their own set-up.
#   make lab    creates .venv, installs teachflow with JupyterLab, opens the lessons
#   make test   creates .venv, installs teachflow with its test extras, runs the whole suite

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Run apt-get through sudo only when we are not root already.
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Jupyter refuses to run as root unless told; containers and CI machines often are root.
LAB_FLAGS := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

.PHONY: lab test lint bench clean

$(PY):
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	  echo "python3 -m venv needs Debian's python3-venv; installing it"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq python3-venv && \
	  rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install -q --upgrade pip

# A stamp per extra, so a second `make test` starts at once; pyproject.toml changes reinstall.
$(VENV)/.installed-%: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e ".[$*]"
	@touch $@

lab: $(VENV)/.installed-lab
	$(VENV)/bin/jupyter lab $(LAB_FLAGS) lessons/

test: $(VENV)/.installed-test
	$(PY) -m ruff check teachflow tests bench
	$(PY) -m pytest

bench: $(VENV)/.installed-test
	$(PY) bench/eager_overhead.py
	$(PY) bench/staged_vs_eager.py
	$(PY) bench/fusion.py
	$(PY) bench/compile_time.py
	$(PY) bench/layout.py
	$(PY) bench/stepper.py
	$(PY) bench/stepper_browser.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
