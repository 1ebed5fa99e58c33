# The two commands a new user needs: `make run` and `make test`. Each sets up what it uses.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: run run-cluster test lint bench clean-data faults test-cluster

$(STAMP): pyproject.toml setup.py scripts/setup.sh client-js/package-lock.json \
		streaming/pipeline/realtime/jvm/pom.xml streaming/log/kafka/jvm/pom.xml streaming/log/kafka/jvm/spark/pom.xml \
		tests/support/oidc/package-lock.json
	bash scripts/setup.sh
	touch $(STAMP)

run: $(STAMP)
	bash scripts/run.sh

# The demo on a Spark standalone cluster, a store cluster and two gateways behind nginx, on this machine.
run-cluster: $(STAMP)
	bash scripts/run-cluster.sh

test: $(STAMP)
	bash scripts/test.sh

bench: $(STAMP)
	bash bench/setup.sh
	$(VENV)/bin/python -m bench

# The fault suite at any size: make faults KILLS=50 [WRITE_SECONDS=600] [STALL=30] [SEED=7]
faults: $(STAMP)
	KILLS=$(KILLS) WRITE_SECONDS=$(WRITE_SECONDS) STALL=$(STALL) SEED=$(SEED) bash scripts/faults.sh

# The pipeline on a Spark standalone cluster, worker and driver killed KILLS times (default 1,
# the size `make test` runs): make test-cluster KILLS=5 [SEED=7]
test-cluster: $(STAMP)
	PYSPARK_PYTHON=$(CURDIR)/$(VENV)/bin/python LV_FAULT_KILLS=$(KILLS) LV_FAULT_SEED=$(SEED) \
		$(VENV)/bin/python -m pytest -s -q -p no:cacheprovider tests/cluster

lint: $(STAMP)
	$(VENV)/bin/ruff check server streaming demo deploy tests bench setup.py
	$(VENV)/bin/ruff format --check server streaming demo deploy tests bench setup.py
	bash scripts/typecheck.sh

clean-data:
	rm -rf data
