# PyTorch one-step oracles for a U-Net (GroupNorm, ConvTranspose, bilinear and nearest
# Resize, skip Concats) and a rotary-embedding attention block (Range, Sin, Cos, strided Slice), run
# through tools/bench/zoo.py's checks at opsets 17 and 21 in training mode: a 4-stage plan, one step
# on one stage, three 1F1B SpecTrain steps on 4 stages, the trained model in ONNX Runtime, and one
# SGD step against PyTorch autograd in float64 on both sides (every weight within 1e-5).
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
import zoo  # noqa: E402

BIN = os.environ.get("PIPETRAIN_BIN", os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))


class ZooOracleTest(unittest.TestCase):
    def check(self, name, opset):
        import torch
        torch.set_num_threads(2)
        with tempfile.TemporaryDirectory(prefix=f"pipetrain-zoo-{name}-") as work:
            row = zoo.evaluate(name, zoo.MODELS[name], opset, "train", BIN, work, print)
        for check in ("export", "plan4", "step1", "pipe4", "ort"):
            self.assertEqual(row.get(check), "ok", f"{name} opset {opset}: {check}: {row}")
        self.assertTrue(row["torch"].startswith("ok fp64"), f"{name} opset {opset}: {row['torch']}")

    def test_unet_opset17(self):
        self.check("unet", 17)

    def test_unet_opset21(self):
        self.check("unet", 21)

    def test_rotary_opset17(self):
        self.check("rotary", 17)

    def test_rotary_opset21(self):
        self.check("rotary", 21)


if __name__ == "__main__":
    unittest.main()
