"""The build tool ``dla_build``: a developer's workstation steps from an ONNX detector to a DLA artifact.

lint, trim, calibrate, convert, compile and sidecar; one module per step plus what they share. It writes
the format :mod:`dla_infer_node.artifact` reads. Imports core, artifact and bags (calibration frames from
a recording); never rclpy or CUDA.
"""
