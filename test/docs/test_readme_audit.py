"""Every command block of README.md and models/README.md is accounted for: a test that runs its commands as
written, or a stated reason it cannot run here (a Jetson, a GPU, an hour of training). A new block in a
section nobody covers fails this test, so a README promise cannot appear without a test behind it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# (README, section heading) -> the tests that run its commands (paths under test/), each naming what it reads
RUN_BY = {
    # make demo's cli.demo; make test is CI
    ("README.md", "# dla_infer_node"): ["cli/ros/test_demo.py", ".ci/run"],
    ("README.md", "## Running the node"): ["docs/ros/test_readme_run_node.py"],
    ("README.md", "## Large images over DDS"): ["docs/ros/test_readme_large_images.py"],
    ("README.md", "## Replaying bags"): ["docs/ros/test_readme_replay.py"],
    ("README.md", "## Several cameras"): ["docs/ros/test_readme_cameras.py"],
    ("models/README.md", "## Bring your own model (graph side)"): ["docs/ros/test_byom_guide.py"],
    ("models/README.md", "### 1. Calibrate (int8) and convert (fp16)"): ["docs/test_models_guide.py"],
    ("models/README.md", "### 2. Compile"): ["docs/test_models_guide.py"],
    ("models/README.md", "### 3. Doctor, on the robot"): ["docs/test_models_guide.py"],
    ("models/README.md", "### 4. Launch"): ["docs/ros/test_models_guide_launch.py"],
    ("README.md", "### The node on a GPU machine"): ["tools/test_gpu_node_carry.py"],
}
NOT_RUN_HERE = {
    ("README.md", "## On a robot"):
        "apt-installed ROS 2, rosdep and a Jetson; the package's pieces are tested (test_package_deps, "
        "test_launch_*), the robot's install is not",
    ("README.md", "## GPU tests"): "needs an NVIDIA GPU: run on the GPU machine (results in the README)",
    ("README.md", "## Benchmarks"): "timing, not pass/fail: test_bench_* run the same modules, short",
    ("models/README.md", "## Retrain"): "CPU training with torch, ~1 h a stage (not a suite dependency)",
}


def command_blocks(readme: str) -> list[tuple[str, list[str]]]:
    """(section heading, command lines) of each bash block, in order."""
    heading, out, block = "", [], None
    for line in (REPO / readme).read_text(encoding="utf-8").splitlines():
        if block is not None:
            if line.startswith("```"):
                out.append((heading, block))
                block = None
            elif line.strip() and not line.lstrip().startswith("#"):
                block.append(line.strip())
        elif line.startswith("```bash"):
            block = []
        elif re.match(r"#{1,3} ", line):
            heading = line.strip()
    return out


@pytest.mark.parametrize("readme", ["README.md", "models/README.md"])
def test_every_command_block_is_run_by_a_test_or_says_why_not(readme: str) -> None:
    blocks = command_blocks(readme)
    assert blocks
    for heading, lines in blocks:
        key = (readme, heading)
        assert key in RUN_BY or key in NOT_RUN_HERE, f"{readme} '{heading}': {lines} has no test"


def test_the_named_tests_exist_and_read_their_readme() -> None:
    for (_, heading), files in RUN_BY.items():
        for name in files:
            path = REPO / name if name.startswith(".ci") else REPO / "test" / name
            text = path.read_text(encoding="utf-8")
            if heading == "# dla_infer_node":  # `make demo` runs cli.demo (test_demo); CI runs `make test`
                assert "dla_infer_node.cli.demo" in (REPO / "Makefile").read_text()
                demo = name == "cli/ros/test_demo.py"
                assert ("cli.demo" in text) if demo else ("for target in test " in text)
            else:  # the command lines are read from the README itself, so text and test cannot drift
                assert "README" in text or "_models_guide" in text, name


def test_retrain_commands_name_only_options_the_tools_define() -> None:
    """The Retrain block is not run here (an hour a stage), but each of its options must exist: a renamed or
    dropped option would otherwise surface only on a user's machine, an hour into the first stage."""
    lines = [line for heading, block in command_blocks("models/README.md") if heading == "## Retrain"
             for line in block]  # every block of the section, not only the last (a dict would keep one)
    assert any("tools/train_detector.py" in line for line in lines)
    for line in lines:
        script = re.search(r"tools/(\w+\.py)", line)
        if script is None:  # venv creation and pip install
            continue
        # options are string literals of the script (argparse's add_argument, or a plain argv check)
        defined = set(re.findall(r'"(--[\w-]+)"', (REPO / "tools" / script[1]).read_text()))
        defined |= {"--no-" + opt[2:] for opt in defined}  # BooleanOptionalAction's negative forms
        used = set(re.findall(r"(?<!\S)(--[\w-]+)", line))
        assert used <= defined, f"models/README.md '## Retrain': {line} uses {sorted(used - defined)}"
