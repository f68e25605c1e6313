"""The node with an injected backend that fails on request: ``python -m _fault_node --ros-args ...``.

A frame whose first pixel is 255 raises a DLA *execution* fault (fatal: the node must exit 1 so a
launch file's respawn restarts it); 254 raises a non-fatal backend error (counted, node keeps serving);
anything else returns the oracle model's constant head.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from _node_helpers import ORACLE_NET, write_oracle_model

from dla_infer_node.backends.cudla_errors import ExecutionError
from dla_infer_node.core.backend import RawOutputs
from dla_infer_node.core.errors import BackendError
from dla_infer_node.core.model_meta import ModelMetadata, load_metadata
from dla_infer_node.core.preprocess import Letterbox


class FaultyBackend:
    name = "faulty"

    def __init__(self, metadata: ModelMetadata, head: np.ndarray) -> None:
        self.metadata, self.head, self.closed = metadata, head, False

    def infer(self, image: np.ndarray, encoding: str) -> RawOutputs:
        first = int(image.reshape(-1)[0])
        if first == 255:
            raise ExecutionError("DLA fault injected by the test", call="cudaStreamSynchronize",
                                 params={"stream": "test"})
        if first == 254:
            raise BackendError("recoverable failure injected by the test", call="infer", stage="submit")
        h, w = image.shape[:2]
        return RawOutputs([self.head.copy()], Letterbox.fit(w, h, ORACLE_NET, ORACLE_NET))

    def close(self) -> None:
        self.closed = True


def main() -> int:
    import onnxruntime as ort

    from dla_infer_node.ros.node import main as node_main

    folder = Path(sys.argv[1]) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else Path(".")
    model, meta_path = write_oracle_model(folder)
    meta = load_metadata(meta_path)
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    head = sess.run(None, {"images": np.zeros((1, 3, ORACLE_NET, ORACLE_NET), np.float32)})[0]
    return node_main(sys.argv, injected=(FaultyBackend(meta, head), meta))


if __name__ == "__main__":
    sys.exit(main())
