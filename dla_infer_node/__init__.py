"""dla_infer_node: DLA (cuDLA hybrid mode) and ONNX Runtime object detection for ROS 2.

Everything in this package except :mod:`dla_infer_node.ros.node` is ROS-free, and nothing imports an
accelerator library at import time, so the package imports on any machine.
"""

__version__ = "0.1.0"
