# Thin wrapper over CMake presets. The two set-up commands of the README:
#   make demo   install missing packages, build, run the demo on the simulated GPU
#   make test   install missing packages, build, run the whole test suite
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
WERROR := $(if $(CI),ON,OFF)

FUZZ_SECONDS ?= 60

.PHONY: demo test build deps asan tsan fuzz clean

deps:
	@bash tools/setup/install-deps.sh

build: deps
	cmake --preset default -DTVMM_WERROR=$(WERROR)
	cmake --build --preset default -j $(JOBS)

# The demo builds only what it needs (the library and the demo), not the tests.
demo: deps
	cmake --preset default -DTVMM_WERROR=$(WERROR)
	cmake --build --preset default -j $(JOBS) --target tvmm-demo
	./build/bin/tvmm-demo

test: build
	ctest --preset default -j $(JOBS)

asan: deps
	cmake --preset asan -DTVMM_WERROR=$(WERROR)
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan -j $(JOBS)

# ThreadSanitizer runs the tests labelled "concurrency" only, so it builds only their programs.
tsan: deps
	cmake --preset tsan -DTVMM_WERROR=$(WERROR)
	cmake --build --preset tsan -j $(JOBS) --target tvmm_concurrency_suite
	ctest --preset tsan -j $(JOBS)

# The config-loader fuzzer, built with clang (libFuzzer + ASan + UBSan), run for FUZZ_SECONDS.
fuzz:
	@bash tools/setup/install-deps.sh fuzz
	CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTVMM_BUILD_FUZZERS=ON \
	  -DTVMM_BUILD_TESTS=OFF -DTVMM_BUILD_BENCH=OFF -DTVMM_WERROR=$(WERROR)
	cmake --build build-fuzz -j $(JOBS) --target tvmm-config-fuzz
	bash tests/fuzz/run.sh build-fuzz/bin/tvmm-config-fuzz $(FUZZ_SECONDS)

clean:
	rm -rf build build-asan build-tsan build-fuzz
