"""Camera frames of a recorded image topic, without ROS: what calibration and evaluation read from a bag.

Each message is read in place (``core.image_io.frame_from_cdr``), the way the node reads a received frame,
so a recording is seen exactly as the node would have seen it live.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from dla_infer_node.bags.bag_io import BagReader, TopicInfo
from dla_infer_node.core.cdr_image import StampedHeader
from dla_infer_node.core.errors import ParameterError
from dla_infer_node.core.image_io import frame_from_cdr

IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")


def image_topic(reader: BagReader, topic: str) -> TopicInfo:
    """The topic's record; a ParameterError naming the bag's image topics when it is not one of them."""
    info = reader.topics.get(topic)
    if info is None or info.type not in IMAGE_TYPES:
        images = sorted(t for t, i in reader.topics.items() if i.type in IMAGE_TYPES)
        raise ParameterError("--topic", topic,
                             f"an image topic of {reader.path}: {', '.join(images) or 'it has none'}")
    return info


def image_frames(bag: Path, topic: str, stage: str, keep: Callable[[int], bool] | None = None
                 ) -> Iterator[tuple[np.ndarray, str, StampedHeader]]:
    """(frame, encoding, header) of each message of ``topic`` in log-time order; ``keep(i)`` False skips
    message i before it is decoded. A raw frame is a view into the message: copy it to keep it."""
    reader = BagReader(bag)
    image_topic(reader, topic)
    for i, msg in enumerate(reader.messages([topic])):
        if keep is None or keep(i):
            yield frame_from_cdr(msg.data, msg.type.endswith("CompressedImage"), stage=stage)
