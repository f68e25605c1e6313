"""The compile-time side: a DLA loadable and its sidecar of build facts, and the tools that make them.

Imports core (and backends only lazily, where a tool runs a model); never rclpy.
"""
