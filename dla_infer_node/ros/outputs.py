"""What the node publishes about each frame: detections, the latched label map, the debug overlay."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
from rclpy.node import Node
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from vision_msgs.msg import Detection2DArray, LabelInfo

from dla_infer_node.core.cdr_detections import DetectionArrayWriter
from dla_infer_node.core.detections import Detections
from dla_infer_node.core.image_io import draw_detections
from dla_infer_node.ros import ros_convert
from dla_infer_node.ros.qos import image_qos, latched_qos

LOG = logging.getLogger("dla_infer_node.outputs")


def checked_writer(classes: Sequence[str], class_id_mode: str) -> DetectionArrayWriter | None:
    """The CDR writer of the detection arrays, if its bytes read back (with rclpy's deserializer) as
    exactly the message :func:`ros_convert.detection_array` builds and are as long as rclpy's own
    serialization of it (pad bytes are not compared: rclpy leaves them unset); else None, and the
    node builds the messages (another vision_msgs definition, or an rmw that serializes differently)."""
    writer = DetectionArrayWriter(ros_convert.class_id_text(classes, class_id_mode))
    sample = Detections(np.array([[1.5, 2.25, 640.0, 480.5], [-3.0, 7.0, 9.5, 1079.0]], np.float32),
                        np.array([0.875, 0.3], np.float32), np.array([0, len(classes) + 1]))
    header = Header()
    header.stamp.sec, header.stamp.nanosec, header.frame_id = 1700000000, 123456789, "camera_check"
    msg = ros_convert.detection_array(sample, header, classes, class_id_mode)
    try:
        raw = writer.serialize(sample, 1700000000, 123456789, "camera_check")
        same = len(raw) == len(serialize_message(msg)) and deserialize_message(raw, Detection2DArray) == msg
    except Exception as exc:  # any failure means: build the messages
        LOG.info("detection arrays built as messages: the CDR writer's check failed (%s)", exc)
        return None
    if not same:
        LOG.info("detection arrays built as messages: this rmw's Detection2DArray bytes differ from the "
                 "CDR writer's")
        return None
    return writer


class DetectionOutputs:
    """The output topics of one camera (relative names, so the node's namespace moves them all; a camera of
    a multi-camera node has its own, ``<namespace>/detections`` ...)."""

    def __init__(self, node: Node, classes: Sequence[str], class_id_mode: str, threshold: float,
                 debug_enabled: bool, namespace: str = "") -> None:
        self.classes = tuple(classes)
        self.debug_enabled = debug_enabled
        self.debug_images = 0
        self._class_id_mode = class_id_mode
        # serialized here and published as bytes (rclpy's per-box message objects cost ~6x the CPU)
        self._writer = checked_writer(self.classes, class_id_mode)
        self._node = node
        prefix = f"{namespace}/" if namespace else ""
        self._det_pub = node.create_publisher(Detection2DArray, prefix + "detections", 10)
        self._label_pub = node.create_publisher(LabelInfo, prefix + "label_info", latched_qos())
        # an overlay is a sensor-style stream: best effort, never holding the worker back
        self._debug_pub = node.create_publisher(Image, prefix + "debug_image", image_qos("best_effort", 1))
        self.publish_label_info(threshold)

    def publish_label_info(self, threshold: float) -> None:
        """(Re)publish the latched label map; it carries the confidence threshold, so a live change of
        the threshold publishes it again (a late subscriber then gets the current value)."""
        header = Header()
        header.stamp = self._node.get_clock().now().to_msg()
        self._label_pub.publish(ros_convert.label_info(self.classes, threshold, header))

    def publish(self, dets: Detections, header: Header, frame: np.ndarray, encoding: str) -> None:
        """Detections always; the overlay only while enabled and somebody listens (it costs a draw)."""
        if self._writer is not None:
            stamp = header.stamp
            self._det_pub.publish(self._writer.serialize(dets, stamp.sec, stamp.nanosec, header.frame_id))
        else:
            self._det_pub.publish(ros_convert.detection_array(dets, header, self.classes,
                                                              self._class_id_mode))
        if self.debug_enabled and self._debug_pub.get_subscription_count() > 0:
            canvas = draw_detections(frame, encoding, dets, self.classes)
            self._debug_pub.publish(ros_convert.bgr8_image(canvas, header))
            self.debug_images += 1  # only the worker thread writes it

    def detection_subscribers(self) -> int:
        """Subscriptions matched to ``detections`` as this node's writer sees them: a recorder is sure to
        get every array only from when this counts it (its own view of the match can come earlier)."""
        try:
            return int(self._det_pub.get_subscription_count())
        except RuntimeError:  # rclpy's InvalidHandle: the node is gone (counters are read after a stop too)
            return 0

    def close(self) -> None:
        """Withdraw the output topics (the lifecycle node's deactivate): nothing is published after it."""
        for pub in (self._det_pub, self._label_pub, self._debug_pub):
            self._node.destroy_publisher(pub)
