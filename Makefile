# Every target bootstraps .venv itself and is a no-op when it is current.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
KERNEL_SOURCES := $(wildcard lib/_kernels/*.pyx lib/_kernels/*.pxd lib/_kernels/*.pxi)
KERNELS_BUILT := lib/_kernels/.built
FASHION := /usr/share/datasets/fashion-mnist

.PHONY: all build test tutorial bench lint data clean

all: build

$(INSTALLED): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip "setuptools>=69" wheel
	$(BIN)/python -m pip install "cython>=3" "numpy>=2" scipy
	$(BIN)/python -m pip install --no-build-isolation -e '.[test]'
	touch $@

# Rebuild when the import check finds a kernel missing or built from older sources, or
# when setup.py (compiler flags) changed since the last build.
$(KERNELS_BUILT): $(INSTALLED) $(KERNEL_SOURCES) setup.py
	@if { [ -f $@ ] && [ setup.py -nt $@ ]; } || ! $(BIN)/python -c "import tapeflow._kernels" 2>/dev/null; then \
		echo "building the kernels"; \
		$(BIN)/python setup.py -q build_ext --inplace --force --parallel 2; \
	fi
	touch $@

build: $(KERNELS_BUILT)

# Fashion-MNIST, the embedded default data set, from Debian's package.
data:
	@if [ ! -d $(FASHION) ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			(apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist) || \
			echo "could not install dataset-fashion-mnist; the data tests will be skipped"; \
		else \
			echo "Fashion-MNIST is missing: run 'sudo apt-get install dataset-fashion-mnist'"; \
		fi; \
	fi

test: build data
	$(BIN)/python -m pytest

tutorial: build data
	$(BIN)/python tutorials/mnist/train.py

bench: build
	$(BIN)/python bench/core.py
	$(BIN)/python bench/train.py
	$(BIN)/python bench/graph.py
	$(BIN)/python bench/threads.py
	$(BIN)/python bench/distributed.py
	$(BIN)/python bench/word2vec.py

lint: $(INSTALLED)
	$(BIN)/ruff check lib tests bench tutorials setup.py

clean:
	rm -rf build $(KERNELS_BUILT) lib/_kernels/*.so lib/_kernels/*.c
