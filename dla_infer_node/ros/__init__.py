"""The ROS 2 layer: the node and the parts it is composed of (parameters, QoS and topics, worker, message
conversion, diagnostics). The only room of the package that imports rclpy for the node; it builds on core,
backends and artifact, and nothing there imports back.
"""
