# Thin wrapper over CMake presets. The two set-up commands of the README:
#   make demo   install missing packages, build, run the demo on the simulated GPU
#   make test   install missing packages, build, run the whole test suite
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
WERROR := $(if $(CI),ON,OFF)

.PHONY: demo test build deps asan tsan clean

deps:
	@bash tools/setup/install-deps.sh

build: deps
	cmake --preset default -DTVMM_WERROR=$(WERROR)
	cmake --build --preset default -j $(JOBS)

demo: build
	./build/bin/tvmm-demo

test: build
	ctest --preset default -j $(JOBS)

asan: deps
	cmake --preset asan -DTVMM_WERROR=$(WERROR)
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan -j $(JOBS)

tsan: deps
	cmake --preset tsan -DTVMM_WERROR=$(WERROR)
	cmake --build --preset tsan -j $(JOBS)
	ctest --preset tsan -j $(JOBS)

clean:
	rm -rf build build-asan build-tsan
