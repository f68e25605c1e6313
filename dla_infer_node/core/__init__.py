"""The detection core: image views, preprocess, DLA tensor layouts, decoders, model metadata, detections.

ROS-free and CUDA-free by rule (checked by test/package/test_layering.py): everything here runs on any
machine with numpy and OpenCV, and every other room of the package builds on it.
"""
