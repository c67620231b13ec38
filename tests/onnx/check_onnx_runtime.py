#!/usr/bin/env python3
"""Runs the ONNX models test_onnx_export wrote in ONNX Runtime and compares them with libbptrain's outputs.

Usage: check_onnx_runtime.py DIRECTORY [NAME...] (by default the models test_onnx_export writes). Each model comes
as NAME.onnx with NAME.input (raw f32 pixels in [0, 1], or raw int32 token ids for an int32 input, the batch of the
input's shape) and NAME.output (libbptrain's evaluation-mode outputs). Each must pass the ONNX checker (when the
onnx package is installed; it reads external data beside the model too) and match within 1e-4 relative (norm of the
difference over the norm of the reference). Exits 77 (skip) without onnxruntime.
"""
import os
import sys

try:
    import numpy as np
    import onnxruntime
except ImportError as error:
    print(f"skipped: {error.name} is not installed for {sys.executable} "
          "(bash scripts/onnx_env.sh creates a virtual environment with it; point BPT_ONNX_PYTHON at its python)")
    sys.exit(77)
try:
    import onnx
except ImportError:
    onnx = None

MODELS = ["mlp", "lenet", "resnet8", "resnet8_folded", "zoo_opset17", "zoo_opset20", "sequence", "transformer_opset13",
          "transformer_opset17", "attention", "collisions", "embedding", "sequence_softmax", "gpt_block"]
TOLERANCE = 1e-4


def check(directory, name):
    path = os.path.join(directory, name + ".onnx")
    if onnx is not None:
        onnx.checker.check_model(onnx.load(path), full_check=True)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    (model_input,) = session.get_inputs()
    sample = [int(d) for d in model_input.shape[1:]]
    dtype = np.int32 if model_input.type == "tensor(int32)" else np.float32  # token ids, or pixels
    pixels = np.fromfile(os.path.join(directory, name + ".input"), dtype=dtype).reshape([-1] + sample)
    expected = np.fromfile(os.path.join(directory, name + ".output"), dtype=np.float32)
    (actual,) = session.run(None, {model_input.name: pixels})
    actual = actual.reshape(-1)
    if actual.shape != expected.shape:
        return f"{name}: ONNX Runtime gave {actual.size} values, libbptrain {expected.size}"
    error = float(np.linalg.norm(actual.astype(np.float64) - expected) / max(np.linalg.norm(expected), 1e-30))
    worst = float(np.max(np.abs(actual - expected)))
    print(f"{name}: input {model_input.name} {model_input.shape}, {len(session.get_outputs())} output, "
          f"relative error {error:.2e}, largest difference {worst:.2e}")
    return None if error <= TOLERANCE else f"{name}: relative error {error:.2e} exceeds {TOLERANCE:g}"


def main():
    directory = sys.argv[1]
    print(f"onnxruntime {onnxruntime.__version__}, onnx checker: "
          f"{onnx.__version__ if onnx is not None else 'not installed (skipped)'}")
    names = sys.argv[2:] or MODELS
    failures = [f for f in (check(directory, name) for name in names) if f]
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
