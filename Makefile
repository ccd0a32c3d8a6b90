# gradsleuth: every target does its own set-up on a fresh machine (.venv, pinned deps, build).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP_DEPS := $(VENV)/.deps-stamp
STAMP_BUILD := $(VENV)/.build-stamp
# Real code nobody here wrote, for lint's accuracy test: torchvision's sources (not installed).
TORCHVISION := torchvision==0.29.2
STAMP_TV := .cache/wheels/.torchvision-stamp
# Browser tests of the HTML report: Debian's Chromium (apt, as root or through sudo).
STAMP_CHROMIUM := .cache/.chromium-stamp
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
RUST_SRC := $(shell find crates -name '*.rs' -o -name '*.toml' -o -name '*.py' 2>/dev/null) Cargo.toml Cargo.lock pyproject.toml

.PHONY: demo test build bench lint fmt clean eval wheel compat compat-ci

$(VPY):
	$(PY) -m venv $(VENV)

$(STAMP_DEPS): requirements-dev.txt | $(VPY)
	$(VPY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	DS_BUILD_OPS=0 $(VPY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
		$$(sed -n 's/^# no-build-isolation: //p' requirements-dev.txt)
	touch $@

# Release build of the extension, installed into .venv (editable: python/ is used in place).
$(STAMP_BUILD): $(STAMP_DEPS) $(RUST_SRC)
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin develop --release -q
	touch $@

build: $(STAMP_BUILD)

$(STAMP_CHROMIUM):
	@mkdir -p .cache
	command -v chromium >/dev/null || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium)
	touch $@

$(STAMP_TV): | $(VPY)
	$(VPY) -m pip download -q --disable-pip-version-check --no-deps -d .cache/wheels $(TORCHVISION)
	touch $@

demo: build
	$(VENV)/bin/gradsleuth demo

test: build $(STAMP_TV) $(STAMP_CHROMIUM)
	cargo test --workspace -q
	$(VPY) -m pytest -q tests

STAMP_DOT := .cache/.graphviz-stamp
$(STAMP_DOT):
	@mkdir -p .cache
	command -v dot >/dev/null || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q graphviz)
	touch $@

bench: build $(STAMP_DOT) $(STAMP_CHROMIUM)
	$(VPY) bench/run.py

# The mutation corpus over third-party models (eval/mutate): the full table, per operator.
eval: build
	$(VPY) -m eval.mutate

# The wheel users install: abi3 (Python >= 3.10), manylinux2014 (glibc 2.17, linked by zig), and
# the sdist, into dist/.
wheel: $(STAMP_DEPS)
	rm -rf dist
	PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin build --release --zig --compatibility manylinux2014 -o dist -q
	PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin sdist -o dist
	@ls dist

# The version matrix (eval/compat.py): that wheel on torch 2.1-2.15 and Python 3.10-3.13, one
# environment per cell kept in ~/.cache/gradsleuth-compat. CI runs two cells (compat-ci).
compat: build
	$(VPY) -m eval.compat

compat-ci: build
	$(VPY) -m eval.compat --cells ci

lint: build
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -q -- -D warnings
	$(VENV)/bin/ruff check python tests bench eval
	$(VENV)/bin/mypy python/gradsleuth

fmt:
	cargo fmt --all
	$(VENV)/bin/ruff check --fix python tests bench eval || true

clean:
	rm -rf target $(VENV) .cache
