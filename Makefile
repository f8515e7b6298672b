# Every target bootstraps .venv itself and is a no-op when it is current.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
KERNEL_SOURCES := $(wildcard lib/_kernels/*.pyx lib/_kernels/*.pxd lib/_kernels/*.pxi)
KERNELS_BUILT := lib/_kernels/.built
FASHION := /usr/share/datasets/fashion-mnist

# The XLA backend's test environment: torch_xla 2.9.0 pins torch 2.9.0, while the main
# environment's test oracle is a newer torch, so it lives in a venv of its own. tapeflow is
# not installed there: a .pth file puts lib/ (with the kernels built above) on its path.
# PyPI's torch for x86_64 pulls several GB of CUDA wheels; where download.pytorch.org is
# reachable, XLA_TORCH_INDEX=https://download.pytorch.org/whl/cpu fetches a CPU-only build.
VENV_XLA := .venv-xla
XLA_BIN := $(VENV_XLA)/bin
XLA_INSTALLED := $(VENV_XLA)/.installed
XLA_TORCH_INDEX ?=
XLA_TESTS := tests/backends/test_xla_backend.py tests/ops/test_ops_on_devices.py tests/test_devices.py \
	tests/graph/test_node_devices.py tests/backends/test_tutorial_on_devices.py tests/word2vec/test_batched.py \
	tests/layers/test_layers_on_devices.py tests/losses/test_losses_on_devices.py tests/ops/test_xla_lowerings.py

.PHONY: all build test test-xla xla-env bench-env tutorial bench bench-xla lint data graphviz clean

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

# numpy is pinned to the main environment's, which the kernels were compiled against.
$(XLA_INSTALLED): $(INSTALLED) Makefile
	test -x $(XLA_BIN)/python || $(PYTHON) -m venv $(VENV_XLA)
	$(XLA_BIN)/python -m pip install --upgrade pip
	$(XLA_BIN)/python -m pip install $(if $(XLA_TORCH_INDEX),--index-url $(XLA_TORCH_INDEX)) "torch==2.9.0"
	$(XLA_BIN)/python -m pip install "torch-xla==2.9.0" "numpy==$$($(BIN)/python -c 'import numpy; print(numpy.__version__)')" \
		scipy h5py ml_dtypes pytest pytest-timeout
	mkdir -p $(VENV_XLA)/src && ln -sfn $(CURDIR)/lib $(VENV_XLA)/src/tapeflow
	$(XLA_BIN)/python -c "import site, sys; open(site.getsitepackages()[0] + '/tapeflow.pth', 'w').write(sys.argv[1] + chr(10))" \
		$(CURDIR)/$(VENV_XLA)/src
	PJRT_DEVICE=CPU $(XLA_BIN)/python -c "import torch_xla, tapeflow; print('xla env:', tapeflow.list_devices())"
	touch $@

xla-env: $(XLA_INSTALLED)

# The benchmarks' reference systems (TensorFlow with Keras 3, JAX, PyTorch, ONNX Runtime) in a
# venv of their own that only `make bench` builds and no test uses. torch and numpy are pinned
# to the main environment's; tapeflow comes from lib/ through a .pth file, as in .venv-xla.
VENV_BENCH := .venv-bench
BENCH_BIN := $(VENV_BENCH)/bin
BENCH_INSTALLED := $(VENV_BENCH)/.installed

$(BENCH_INSTALLED): $(INSTALLED) Makefile
	test -x $(BENCH_BIN)/python || $(PYTHON) -m venv $(VENV_BENCH)
	$(BENCH_BIN)/python -m pip install --upgrade pip
	$(BENCH_BIN)/python -m pip install tensorflow-cpu "jax[cpu]" "keras==3.15.1" onnxruntime scipy h5py ml_dtypes \
		"torch==$$($(BIN)/python -c 'import torch; print(torch.__version__.split("+")[0])')" \
		"numpy==$$($(BIN)/python -c 'import numpy; print(numpy.__version__)')"
	mkdir -p $(VENV_BENCH)/src && ln -sfn $(CURDIR)/lib $(VENV_BENCH)/src/tapeflow
	$(BENCH_BIN)/python -c "import site, sys; open(site.getsitepackages()[0] + '/tapeflow.pth', 'w').write(sys.argv[1] + chr(10))" \
		$(CURDIR)/$(VENV_BENCH)/src
	$(BENCH_BIN)/python -c "import tensorflow, jax, keras, torch, onnxruntime, tapeflow; print('bench env: tf', tensorflow.__version__, 'jax', jax.__version__, 'keras', keras.__version__, 'torch', torch.__version__)"
	touch $@

bench-env: $(BENCH_INSTALLED)

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

# Graphviz's `dot`, which tp.utils.plot_model draws with (through pydot), from Debian's package.
graphviz:
	@if ! command -v dot >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			(apt-get update -qq && apt-get install -y -qq graphviz) || \
			echo "could not install graphviz; the plot_model test will be skipped"; \
		else \
			echo "Graphviz is missing: run 'sudo apt-get install graphviz'"; \
		fi; \
	fi

test: build data graphviz test-xla
	$(BIN)/python -m pytest

# The XLA backend on the CPU (PJRT_DEVICE=CPU): the op suite, training and compile counts.
test-xla: build $(XLA_INSTALLED)
	PJRT_DEVICE=CPU CPU_NUM_DEVICES=2 $(XLA_BIN)/python -m pytest -p no:cacheprovider $(XLA_TESTS)

tutorial: build data
	$(BIN)/python tutorials/mnist/train.py

bench: build bench-env
	$(BIN)/python bench/core.py
	$(BIN)/python bench/train.py
	$(BIN)/python bench/convnets.py
	$(BIN)/python bench/graph.py
	$(BIN)/python bench/serving.py
	$(BIN)/python bench/threads.py
	$(BIN)/python bench/distributed.py
	$(BIN)/python bench/word2vec.py
	$(BIN)/python bench/files.py
	$(BIN)/python bench/profiler.py
	$(BIN)/python bench/placement.py
	$(BIN)/python bench/gpu.py

bench-xla: build $(XLA_INSTALLED)
	PJRT_DEVICE=CPU $(XLA_BIN)/python bench/xla.py

lint: $(INSTALLED)
	$(BIN)/ruff check lib tests bench tutorials setup.py

clean:
	rm -rf build $(KERNELS_BUILT) lib/_kernels/*.so lib/_kernels/*.c
