# Developer entry points. Everything that needs the environment first runs the one setup step
# (scripts/setup_env.sh: idempotent, a few seconds when nothing changed).
SHELL := /bin/bash
.DEFAULT_GOAL := test

VENV ?= .venv
PY := $(VENV)/bin/python
# Per-test limit so a stuck DDS test fails instead of eating the CI budget.
PYTEST_ARGS ?= --timeout=600

# DDS discovery stays on loopback for every ROS process these targets start.
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
export ROS_LOCALHOST_ONLY := 1

# The CI matrix beside `make test` (Kilted wheels, .venv): each its own venv, built by the same setup step.
# Floors for the number of PASSED tests, so a run that skips or loses most of its tests fails (today:
# 993 core tests passed on Python 3.10, 265 node tests on Jazzy; raise the floors as tests are added).
MIN_CORE_PASSED ?= 950
MIN_NODE_PASSED ?= 250

.PHONY: venv test test-py310 test-jazzy demo bench bench-transport bench-quantized lint test-gpu test-gpu-node gpu-node-carry bench-gpu bench-gpu-node eval-dla-emulated clean

venv:
	@bash scripts/setup_env.sh

# $(call pytest,PYTHON,ARGS): pytest over test/; exit code 5 ("no tests collected") fails, never passes green.
pytest = rc=0; $(1) -m pytest test/ $(PYTEST_ARGS) $(2) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make $@: pytest collected no tests" >&2; exit 1; fi; exit $$rc

test: venv
	@$(call pytest,$(PY))

# The core tests (no ROS) on Python 3.10, the interpreter of Humble / JetPack 6: .venv-py310 without ROS.
test-py310:
	@py310="$$(bash scripts/find_python.sh 3.10)" && VENV=.venv-py310 DISTRO=none PYTHON="$$py310" bash scripts/setup_env.sh
	@$(call pytest,.venv-py310/bin/python,--suite core --min-passed $(MIN_CORE_PASSED))

# The node tests (rclpy, DDS) against the ROS 2 Jazzy wheels: .venv-jazzy, vision_msgs in install/interfaces-jazzy.
test-jazzy:
	@VENV=.venv-jazzy DISTRO=jazzy bash scripts/setup_env.sh
	@$(call pytest,.venv-jazzy/bin/python,--suite node --min-passed $(MIN_NODE_PASSED))

demo: venv
	$(PY) -m dla_infer_node.cli.demo

bench: venv
	@mkdir -p bench/results
	$(PY) -m dla_infer_node.bench.core
	$(PY) -m dla_infer_node.bench.encodings
	$(PY) -m dla_infer_node.bench.node
	$(PY) -m dla_infer_node.bench.node --camera
	@if $(PY) -c "from dla_infer_node.ros.node import has_events_executor as h; raise SystemExit(not h())"; then \
	  $(PY) -m dla_infer_node.bench.node --executor events --out bench/results/node_events.json; fi

# Raw frames between two processes over Fast DDS, with and without config/fastdds_large_images.xml (~8 min).
# The stock-configuration cells need root for `ip netns`; without it the result says so and omits them.
# int8 / fp16 accuracy of the dla_build calibrate / convert outputs (ONNX Runtime CPU, ~6 min on 2 cores)
bench-quantized: venv
	@mkdir -p bench/results
	$(PY) -m dla_infer_node.bench.quantized_accuracy --methods minmax,entropy,percentile

bench-transport: venv
	@mkdir -p bench/results
	$(PY) -m dla_infer_node.bench.transport --out bench/results/transport.json

lint: venv
	$(PY) -m ruff check dla_infer_node/ tools/ test/ test_gpu/ test_gpu_node/
	$(PY) -m mypy dla_infer_node/ tools/

# Runs on a GPU machine with its system Python (not .venv): scripts/test_gpu.sh sets itself up.
test-gpu:
	bash scripts/test_gpu.sh

# The node over DDS with backend cudla on the GPU machine (DLA EMULATOR): its Python has no ROS, so the
# ROS 2 wheels for CPython 3.12 and a vision_msgs build come from the CPU machine (`make gpu-node-carry`,
# then carry .devcarry/whl312 and install/interfaces-py312 with the device tool).
test-gpu-node:
	bash scripts/test_gpu_node.sh

gpu-node-carry: venv
	bash scripts/gpu_node_carry.sh

# The node's CPU per frame with backend cudla, and several cameras in one process against one per camera, on
# the GPU machine through the DLA EMULATOR (same carry as test-gpu-node; ~5 min). Writes bench/results/.
bench-gpu-node:
	bash scripts/bench_gpu_node.sh

# GPU benchmark (system Python, like test-gpu): kernel vs device copy (dla_infer_node.bench.gpu), and the backend's
# whole per-frame cost through the DLA EMULATOR (test infrastructure; emulator/bench_gpu.py, which runs both) with
# the GPU and the CPU input path. Writes bench/results/gpu.json.
GPU_BENCH_OUT ?= bench/results/gpu.json
bench-gpu:
	bash emulator/build.sh emulator/build >/dev/null
	DLA_EMULATOR_LIB=$(CURDIR)/emulator/build/libcudla.so.1 LD_LIBRARY_PATH=$(CURDIR)/emulator/build$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH} \
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $${PYTHON:-python3} -m emulator.bench_gpu --out $(GPU_BENCH_OUT)

# Accuracy through the emulated DLA (GPU machine, system Python): the shipped model "compiled" to fp16 and int8
# network loadables of the DLA EMULATOR (test infrastructure), every io format, real cuda.bindings.cudla path
# with the GPU input path, side by side with ONNX Runtime fp32. Prints the table, writes the JSON.
EVAL_DLA_SCENES ?= 100
EVAL_DLA_OUT ?= bench/results/dla_emulated_accuracy.json
EVAL_DLA_ARGS ?=
eval-dla-emulated:
	bash emulator/build.sh emulator/build >/dev/null
	DLA_EMULATOR_LIB=$(CURDIR)/emulator/build/libcudla.so.1 LD_LIBRARY_PATH=$(CURDIR)/emulator/build$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH} \
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $${PYTHON:-python3} -m emulator.eval_table \
	  --scenes $(EVAL_DLA_SCENES) --out $(EVAL_DLA_OUT) $(EVAL_DLA_ARGS)

clean:
	rm -rf $(VENV) .venv-py310 .venv-jazzy build/ install/ log/ .pytest_cache .mypy_cache .ruff_cache *.egg-info
