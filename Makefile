# The two commands of the README. Everything else lives in meson.build and scripts/.
BUILD ?= build

.PHONY: all run check deps build clean

all: build

deps:
	@scripts/install-deps

$(BUILD)/build.ninja:
	meson setup $(BUILD)

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)

# The main job (the README's first command).
run:
	@scripts/main-job

# Every test: build (-Werror), tests, ASan+UBSan, valgrind, formatting, banned functions.
check:
	@scripts/check

clean:
	rm -rf build build-asan
