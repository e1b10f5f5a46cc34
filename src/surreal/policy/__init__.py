"""Trained policies: the artifact a run writes (artifact.py), `load_policy` (load.py), export to ONNX and
TorchScript (export.py). `surreal.load_policy` is the way in; this package's modules import torch only where a
policy is built."""
