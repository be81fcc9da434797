# The two set-up commands of the README:
#   make demo   install what is missing, build, run the main sample
#   make test   the same set-up, then the whole test suite through ctest
# and what CI adds (.ci/run):
#   make sanitize   the CPU suite built and run with ASan + UBSan (preset asan-ubsan)
#   make fuzz       the three fuzzers (clang + libFuzzer): tile programs for FUZZ_SECONDS,
#                   invalid programs and builder call sequences for 60 s each
# Switches: TX_HOST_JIT=OFF (no LLVM), TX_NOTEBOOKS=0 (no clang-repl / Jupyter),
# TX_TORCH=1 (install PyTorch and build the tx_torch extension; 0: never),
# TX_XEUS=1 (tx-kernel, the xeus Jupyter kernel, must build; 0: never).
BUILD ?= build
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 240
CMAKE_FLAGS ?=
ifdef TX_HOST_JIT
CMAKE_FLAGS += -DTX_HOST_JIT=$(TX_HOST_JIT)
endif
# TX_TORCH=1: set-up installs PyTorch (a virtual environment) and tx_torch
# must build; TX_TORCH=0: no extension; unset: built where torch is found.
# TX_XEUS=1: tx-kernel (the xeus Jupyter kernel) must build; 0: not built.
ifeq ($(TX_XEUS),1)
CMAKE_FLAGS += -DTX_XEUS=ON
else ifeq ($(TX_XEUS),0)
CMAKE_FLAGS += -DTX_XEUS=OFF
endif
ifeq ($(TX_TORCH),1)
CMAKE_FLAGS += -DTX_TORCH=ON
else ifeq ($(TX_TORCH),0)
CMAKE_FLAGS += -DTX_TORCH=OFF
endif
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: demo test setup configure build notebook-kernel sanitize fuzz clean

setup:
	@scripts/setup.sh

configure: setup
	@if [ ! -f $(BUILD)/CMakeCache.txt ]; then cmake -S . -B $(BUILD) $(GENERATOR) $(CMAKE_FLAGS); \
	else cmake $(BUILD) $(CMAKE_FLAGS) >/dev/null; fi

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Jupyter's Python packages for the notebook tests (which run the kernel of
# this build through a kernelspec of their own: the user's kernelspecs are
# left as they are; `notebooks/install_kernel.sh` or `cmake --install`
# installs one). Without network (or with TX_NOTEBOOKS=0) they are left out,
# and ctest shows the notebook test as skipped.
# Where clang-repl-19 is missing (setup could not install it: no network, as
# on the GPU machines) there is nothing for the kernel to run, so the Python
# packages are not fetched either.
notebook-kernel: build
	@if [ "$${TX_NOTEBOOKS:-1}" = 0 ]; then :; \
	elif [ ! -x $(BUILD)/tx-kernel ] && ! why=$$($(BUILD)/tx-repl --check 2>&1); then \
	  echo "make: no Jupyter kernel: $$why; the notebook test will say skipped"; \
	else notebooks/install_kernel.sh --minimal --packages-only --build $(BUILD) || \
	  echo "make: Jupyter's packages are missing (see above); the notebook test will say skipped"; fi

# The demo needs the library and one sample, not the ~45 test suites: a first
# kernel in minutes on a 2-core machine; `make test` builds the rest.
demo: configure
	cmake --build $(BUILD) -j $(JOBS) --target warp_sqrt_reg
	$(BUILD)/samples/warp_sqrt_reg

test: notebook-kernel
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

sanitize: setup
	cmake --preset asan-ubsan
	cmake --build --preset asan-ubsan -j $(JOBS)
	ctest --preset asan-ubsan -j $(JOBS)

fuzz:
	@TX_FUZZ=1 scripts/setup.sh
	fuzz/run.sh $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD)
