"""The runtime artifact format: a DLA loadable and its sidecar of build facts, as the node reads them.

``sidecar`` parses and validates ``X.loadable.yaml``; ``loadable_file`` checks and reads the loadable;
``trt_support`` says which TensorRT builds a DLA loadable (the doctor checks a robot against it). The
tools that make an artifact live in :mod:`dla_infer_node.dla_build`. Imports core only; never rclpy.
"""
