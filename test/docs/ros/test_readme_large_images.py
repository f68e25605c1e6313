"""Every command of README.md's "Large images over DDS" section, run and checked against what the text says.

``ros2 run dla_infer_node dla_infer_node`` is the console script ``dla_infer_node.ros.node:main`` (setup.py);
there is no ``ros2`` CLI in the project's venv, so the test runs that module with the same arguments.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _node_helpers import REPO, as_sourced_ros

from dla_infer_node.ros import launch_args

README = (REPO / "README.md").read_text(encoding="utf-8")
NODE_CMD = "ros2 run dla_infer_node dla_infer_node"
SEGMENT_BYTES = 67108864  # the profile's SHM segment_size


def _section() -> str:
    start = README.index("## Large images over DDS")
    end = README.find("\n## ", start + 3)
    return README[start:end if end > 0 else None]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", _section(), re.S)


def _bash_lines() -> list[str]:
    return [line.strip() for block in _blocks("bash") for line in block.splitlines() if line.strip()]


def test_the_section_has_only_commands_this_module_runs() -> None:
    # a command added to the section without a test here fails this test
    for line in _bash_lines():
        assert line.startswith(("case ", "export ", NODE_CMD, "sudo sysctl -w ")), line
    assert len(_blocks("python")) == 1


def _profile_vars(env: dict[str, str]) -> dict[str, str]:
    """The profile variables the section's shell lines (before the node's) export, run by bash as written."""
    lines = _bash_lines()
    before = lines[:lines.index(next(ln for ln in lines if ln.startswith(NODE_CMD)))]
    script = "\n".join([*before, "env -0"])
    out = subprocess.run(["bash", "-c", script], env=env, cwd=REPO, capture_output=True, check=True).stdout
    return {k: v for k, _, v in (item.decode().partition("=") for item in out.split(b"\0") if item)
            if k.endswith("_DEFAULT_PROFILES_FILE")}


def test_the_export_sets_only_the_name_the_distro_reads() -> None:
    path = str(REPO / "config" / "fastdds_large_images.xml")
    base = {k: v for k, v in os.environ.items() if not k.endswith("_DEFAULT_PROFILES_FILE")}
    for distro, name in [("humble", "FASTRTPS"), ("jazzy", "FASTRTPS"), ("kilted", "FASTDDS"),
                         ("rolling", "FASTDDS"), ("", "FASTDDS")]:
        expected = {f"{name}_DEFAULT_PROFILES_FILE": path}
        assert _profile_vars({**base, "ROS_DISTRO": distro}) == expected, distro
        if distro:
            assert launch_args.profile_env(path, {"ROS_DISTRO": distro}) == expected, distro


def test_the_warning_quoted_is_the_one_fast_dds_3_logs_for_the_old_name(ros_env: dict[str, str]) -> None:
    pytest.importorskip("rclpy", reason="rclpy not importable: run in the project .venv")
    if launch_args.profile_env_names() != (launch_args.DDS_PROFILE_ENV,):
        pytest.skip("this ROS 2 has Fast DDS 2, which reads only the old name and does not warn")
    quoted = " ".join(_section().split("every process logs\n`", 1)[1].split("`", 1)[0].split())
    profile = str(REPO / "config" / "fastdds_large_images.xml")
    code = "import rclpy; rclpy.init(); rclpy.create_node('old_name_probe').destroy_node(); rclpy.shutdown()"
    old, new = launch_args.DDS_PROFILE_ENV_FASTDDS2, launch_args.DDS_PROFILE_ENV
    for names, warned in [((old,), True), ((new, old), True), ((new,), False)]:
        env = {**ros_env, **dict.fromkeys(names, profile)}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert (quoted in " ".join(out.stderr.split())) == warned, (names, out.stderr)


def _node_argv(line: str) -> list[str]:
    assert line.startswith(NODE_CMD), line
    return [sys.executable, "-m", "dla_infer_node.ros.node", *shlex.split(line[len(NODE_CMD):])]


def _shm_segments(pid: int) -> dict[str, int]:
    """Fast DDS shared-memory files the process maps, with their sizes."""
    from dla_infer_node.bench.transport_roles import mapped_shm

    return {path: os.stat(path).st_size for path in mapped_shm(pid) if os.path.exists(path)}


def _run_node(line: str, env: dict[str, str], tmp_path: Path, until: Any) -> tuple[Any, dict[str, int]]:
    """Start the node as the README line says; wait until ``until(probe)``; SIGINT; (until's value, SHM)."""
    from _node_helpers import RosProbe

    probe = RosProbe("readme_probe")
    log = tmp_path / "node.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(_node_argv(line), env=env, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT)
    try:
        seen = probe.spin_until(lambda: until(probe) or proc.poll() is not None, 60)
        assert proc.poll() is None, log.read_text(errors="replace")
        segments = _shm_segments(proc.pid)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, log.read_text(errors="replace")
        return seen, segments
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        probe.close()


def test_profile_export_and_run_start_the_node_with_the_large_segment(tmp_path: Path,
                                                                      ros_env: dict[str, str]) -> None:
    pytest.importorskip("rclpy", reason="rclpy not importable: run in the project .venv")
    lines = _bash_lines()
    run = next(ln for ln in lines if ln.startswith(NODE_CMD))
    env = as_sourced_ros({k: v for k, v in ros_env.items() if not k.endswith("_DEFAULT_PROFILES_FILE")})
    profile_vars = _profile_vars(env)
    assert list(profile_vars) == list(launch_args.profile_env_names(env)), profile_vars  # only that name
    assert Path(next(iter(profile_vars.values()))).is_file(), profile_vars
    env.update(profile_vars)
    seen, segments = _run_node(run, env, tmp_path,
                               lambda probe: probe.node.count_subscribers("/camera/image_raw") > 0)
    assert seen, "the node did not subscribe the remapped topic /camera/image_raw"
    # the profile is in effect: the process maps a shared-memory segment of the profile's size (the file
    # is a little larger: Fast DDS adds its bookkeeping to segment_size)
    assert any(size >= SEGMENT_BYTES for size in segments.values()), segments
    assert "deprecated" not in (tmp_path / "node.log").read_text(), "the profile variable warned"
    # and without the variable it does not (the check above can fail)
    _, plain = _run_node(run, ros_env, tmp_path,
                         lambda probe: probe.node.count_subscribers("/camera/image_raw") > 0)
    assert plain and all(size < SEGMENT_BYTES for size in plain.values()), plain


def test_compressed_alternative_subscribes_the_compressed_topic(tmp_path: Path,
                                                                 ros_env: dict[str, str]) -> None:
    pytest.importorskip("rclpy", reason="rclpy not importable: run in the project .venv")
    line = next(x for x in _bash_lines() if "input_transport:=compressed" in x)
    topic = "/camera/image_raw/compressed"

    def types(probe: Any) -> list[str]:
        return [t for info in probe.node.get_subscriptions_info_by_topic(topic) for t in [info.topic_type]]

    seen, _ = _run_node(line, ros_env, tmp_path, types)
    assert seen == ["sensor_msgs/msg/CompressedImage"], seen


def test_sysctl_command_names_the_udp_buffer_limits() -> None:
    line = next(x for x in _bash_lines() if "sysctl" in x)
    argv = shlex.split(line)
    settings = dict(arg.split("=", 1) for arg in argv if "=" in arg)
    assert set(settings) == {"net.core.rmem_max", "net.core.wmem_max"}
    # the profile asks for exactly this much; the limits must allow it
    profile = (REPO / "config" / "fastdds_large_images.xml").read_text()
    for tag in ("sendBufferSize", "receiveBufferSize"):
        assert f"<{tag}>{settings['net.core.rmem_max']}</{tag}>" in profile
    current = {key: subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, check=True)
               .stdout.strip() for key in settings}
    if current != settings or os.geteuid() != 0:
        pytest.skip(f"running it would change this shared machine's settings (now {current})")
    # the machine already has these values: running the command is a no-op that proves it works as written
    done = subprocess.run(argv[1:] if argv[0] == "sudo" else argv, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert all(f"{k} = {v}" in done.stdout for k, v in settings.items()), done.stdout


def test_launch_snippet_gives_later_processes_the_profile(tmp_path: Path, ros_env: dict[str, str]) -> None:
    pytest.importorskip("launch.actions", reason="the ROS 2 launch package is not installed (not on PyPI)")
    from launch.actions import ExecuteProcess
    from launch.launch_service import LaunchService

    code = _blocks("python")[0]
    profile = str(REPO / "config" / "fastdds_large_images.xml")
    code = re.sub(r'^PROFILE = "[^"]*"', f"PROFILE = {profile!r}", code, flags=re.M)
    scope: dict[str, Any] = {}
    exec(compile(code, "README.md (launch snippet)", "exec"), scope)  # the README's own code
    description = scope["generate_launch_description"]()
    seen = tmp_path / "env.txt"
    # a process started after the snippet's actions, as the camera driver would be
    description.add_action(ExecuteProcess(cmd=[sys.executable, "-c",
                                               "import os, sys; open(sys.argv[1], 'w').write("
                                               "os.environ.get('FASTDDS_DEFAULT_PROFILES_FILE', '') + '|' + "
                                               "os.environ.get('FASTRTPS_DEFAULT_PROFILES_FILE', ''))",
                                               str(seen)]))
    service = LaunchService(argv=[])
    service.include_launch_description(description)
    assert service.run() == 0
    names = launch_args.profile_env_names()
    assert seen.read_text() == "|".join(profile if name in names else ""
                                        for name in launch_args.DDS_PROFILE_ENVS)


def test_launch_file_takes_dds_profile(tmp_path: Path) -> None:
    # the launch file declares the argument and hands it to launch_args.dds_profile, which resolves it to
    # the file whose path goes into the node's FASTDDS_DEFAULT_PROFILES_FILE
    text = (REPO / "launch" / "dla_infer.launch.py").read_text()
    assert 'DeclareLaunchArgument("dds_profile"' in text and "launch_args.dds_profile(" in text
    assert launch_args.profile_env("p") == dict.fromkeys(launch_args.profile_env_names(), "p")
    assert "launch_args.profile_env(profile)" in text
    shipped = launch_args.dds_profile("large_images", str(REPO / "config"))
    assert shipped == str((REPO / "config" / "fastdds_large_images.xml").resolve())
    own = tmp_path / "mine.xml"
    own.write_text("<dds/>")
    assert launch_args.dds_profile(str(own), str(REPO / "config")) == str(own.resolve())
    assert launch_args.dds_profile("", str(REPO / "config")) == ""
    with pytest.raises(launch_args.LaunchArgumentError, match=r"dds_profile:='nope\.xml'"):
        launch_args.dds_profile("nope.xml", str(REPO / "config"))
