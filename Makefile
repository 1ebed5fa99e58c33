# The two commands a new user needs: `make run` and `make test`. Each sets up what it uses.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean-data

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $(STAMP)

run: $(STAMP)
	bash scripts/run.sh

test: $(STAMP)
	bash scripts/test.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check server streaming demo tests
	$(VENV)/bin/mypy server streaming demo

clean-data:
	rm -rf data
