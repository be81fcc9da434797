# The two set-up commands of the README:
#   make demo   install what is missing, build, run the main sample
#   make test   the same set-up, then the whole test suite through ctest
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
ifdef TX_HOST_JIT
CMAKE_FLAGS += -DTX_HOST_JIT=$(TX_HOST_JIT)
endif
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: demo test setup configure build clean

setup:
	@scripts/setup.sh

configure: setup
	@if [ ! -f $(BUILD)/CMakeCache.txt ]; then cmake -S . -B $(BUILD) $(GENERATOR) $(CMAKE_FLAGS); \
	else cmake $(BUILD) $(CMAKE_FLAGS) >/dev/null; fi

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	$(BUILD)/samples/warp_sqrt_reg

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
