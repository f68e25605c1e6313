"""Inference backends, one module each, behind one small protocol (:mod:`dla_infer_node.core.backend`).

Backend modules import their accelerator libraries lazily, inside functions, so that importing
this package never needs onnxruntime or CUDA.
"""
