#!/usr/bin/env bash
# `make gpu-node-carry` (on the CPU machine): what `make test-gpu-node` needs on a GPU machine that has
# Python 3.12 but no ROS: the ROS 2 Kilted runtime wheels for CPython 3.12 (+ mcap, PyYAML) in
# .devcarry/whl312 (~45 MB; no zstandard: the device tool carries 64 MiB together with the tracked tree, so
# the GPU test writes its bag uncompressed), and vision_msgs built for Python 3.12 in install/interfaces-py312 (through
# scripts/setup_env.sh with a 3.12 venv, .venv-py312). Both paths are git-ignored; hand them to the device
# tool as `carry`. Idempotent: an existing wheel or build is kept.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py312="$(bash scripts/find_python.sh 3.12)"
VENV=.venv-py312 DISTRO=kilted IFACE_NAME=interfaces-py312 PYTHON="$py312" bash scripts/setup_env.sh
mkdir -p .devcarry/whl312
# the runtime subset of requirements/ros.txt: every ROS wheel but the build-time ones (ament_cmake, the
# rosidl generators and parsers), which only the vision_msgs build above needs
runtime="$(grep -E '^ros-' requirements/ros.txt | grep -vE '^ros-(ament-cmake|ament-package|rosidl-(adapter|cli|cmake|generator-(c|cpp|type-description)|pycommon|core-generators|default-generators)|rmw-implementation-cmake)')"
.venv/bin/pip download -q --only-binary=:all: --no-deps --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .devcarry/whl312 $runtime \
    "$(grep -E '^PyYAML==' requirements/runtime.txt)" "$(grep -E '^mcap==' requirements/runtime.txt)" \
    "$(grep -E '^typing_extensions==' requirements/ros.txt)"
echo "gpu-node-carry: $(ls .devcarry/whl312 | wc -l) wheels, $(du -sh .devcarry/whl312 | cut -f1); vision_msgs for" \
     "Python 3.12 in install/interfaces-py312 ($(du -sh install/interfaces-py312 | cut -f1))"
