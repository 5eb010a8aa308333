# The README's two commands: `make demo` (set up + run the main job) and `make test`.
# Each creates the virtual environment .venv on first use (Python >= 3.11 required).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
DATA ?= data
MARKET := $(DATA)/marketplace
DB ?= sqlite:///$(DATA)/adseg.db
# := not ?=: an ADSEG_DATABASE_URL exported for production must not receive the demo's sample
# data (`make demo DB=...` chooses another database on purpose)
export ADSEG_DATABASE_URL := $(DB)

.PHONY: demo test lint format bench-ingest clean

$(BIN)/adseg: pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit("adseg needs Python >= 3.11, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

demo: $(BIN)/adseg
	mkdir -p $(DATA)
	$(BIN)/adseg db upgrade
	@for f in advertisers.csv.gz auctions.csv.gz delivery.csv.gz truth.csv config.json; do \
		[ -f $(MARKET)/$$f ] || { $(BIN)/adseg sample generate --force --out $(MARKET) || exit 1; break; }; \
	done
	$(BIN)/adseg ingest $(MARKET)
	$(BIN)/adseg nightly --truth $(MARKET)/truth.csv --report-html $(DATA)/report.html

# one BLAS thread per process: CI and developer machines are small and shared, and threaded BLAS
# spin-waits badly under load (20x slower dense eigensolvers measured)
test: $(BIN)/adseg
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n auto --maxprocesses=4

lint: $(BIN)/adseg
	$(BIN)/ruff check adseg adseg_research tests benchmarks
	$(BIN)/ruff format --check adseg adseg_research tests benchmarks
	$(BIN)/lint-imports

format: $(BIN)/adseg
	$(BIN)/ruff format adseg adseg_research tests benchmarks

bench-ingest: $(BIN)/adseg
	$(BIN)/python benchmarks/ingest_throughput.py

clean:
	rm -rf $(VENV) $(DATA)
