"""What a decode prints to stderr is sorted into codec output (libpng's and libjpeg's lines, OpenCV's own
log lines) and other threads' log lines; the node throttles the first and passes the second through
(``test/ros/test_input_subscription.py``)."""

from __future__ import annotations

from dla_infer_node.core.codec_stderr import codec_lines

OPENCV_LINE = "[ WARN:0@12.345] global grfmt_png.cpp:310 readDataFromBuf PNG input buffer is incomplete"
ROS_LINE = "[INFO] [1796670063.356370263] [other_node]: a log line of another thread"


def test_opencv_log_lines_are_codec_output() -> None:
    codec, other = codec_lines(f"{OPENCV_LINE}\nlibpng error: PNG input buffer is incomplete\n\n{ROS_LINE}\n"
                               "[ERROR:0@1.000] global loadsave.cpp:1 imdecode_ failed\n")
    assert codec == [OPENCV_LINE, "libpng error: PNG input buffer is incomplete",
                     "[ERROR:0@1.000] global loadsave.cpp:1 imdecode_ failed"]
    assert other == [ROS_LINE]
