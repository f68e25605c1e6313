"""Inference backends behind one small protocol (see :mod:`dla_infer_node.backends.base`).

Backend modules import their accelerator libraries lazily, inside functions, so that importing
this package never needs onnxruntime or CUDA.
"""
