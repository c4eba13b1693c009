"""The data people have, through the command line: image folders (classes.txt, training with
--augment crop,flip, a resume bit for bit equal to the uninterrupted run, on 1 and 2 stages),
--stream-data always and never giving the same trained bytes, a data set larger than a `ulimit -v`
that only streaming can train, a byte-level language model on a real text (Debian's bible-kjv)
whose loss falls, and bad data refused before anything but the log is written (exit 2, one line
naming the path). Run:
PIPETRAIN_BIN=build/tools/onnx-pipetrain /usr/bin/python3 -m unittest tests/cli/test_data.py"""
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli import BIN, mlp_model, read_bytes, run, write_data  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FASHION = "/usr/share/datasets/fashion-mnist/train"
# tools/sanitize.sh says which sanitizer the binary was built with (asan, tsan; empty without).
SANITIZER = os.environ.get("PIPETRAIN_SANITIZER", "")


def without_sanitizer_warning(stderr):
    """stderr less the sanitizer's own line about an allocation it refused (allocator_may_return_null)."""
    return re.sub(r"^==\d+==WARNING: \w+Sanitizer failed to allocate 0x[0-9a-f]+ bytes\n", "", stderr, flags=re.M)
LENET = os.path.join(ROOT, "models/fashion_lenet5_bn.onnx")


def make_image_folder(path, count=192):
    subprocess.run([sys.executable, os.path.join(ROOT, "tools/data/idx_to_folder.py"), FASHION, path, "--count",
                    str(count), "--format", "mixed"], check=True, capture_output=True)
    return path


class DataCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-data-")
        cls.dir = cls.tmp.name
        cls.have_fashion = os.path.exists(FASHION + "-images-idx3-ubyte.gz")
        if cls.have_fashion:
            cls.images = make_image_folder(os.path.join(cls.dir, "fashion"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def train(self, model, name, *args, expect=0):
        out = os.path.join(self.dir, name)
        rc, so, se = run(model, "--out", out, "--seed", 5, *map(str, args))
        self.assertEqual(rc, expect, f"{name}: exit {rc}\n{so}\n{se}")
        return out, so, se

    def test_image_folder_trains_and_resumes_bit_for_bit(self):
        if not self.have_fashion:
            self.skipTest("dataset-fashion-mnist is not installed (tools/setup.sh installs it)")
        common = ["--data", self.images, "--augment", "crop,flip", "--batch-size", 32, "--lr", 0.05, "--quiet",
                  "--checkpoint-every", 6]
        for gpus in (1, 2):
            full, _, _ = self.train(LENET, f"img{gpus}_full", "--gpus", gpus, "--steps", 18, *common)
            with open(os.path.join(full, "classes.txt")) as f:
                self.assertEqual(f.read().split(), sorted(os.listdir(self.images)))
            part, _, _ = self.train(LENET, f"img{gpus}_part", "--gpus", gpus, "--steps", 12, *common)
            self.train(LENET, f"img{gpus}_part", "--gpus", gpus, "--steps", 18, "--resume", *common)
            self.assertEqual(read_bytes(os.path.join(full, "fashion_lenet5_bn.trained.onnx")),
                             read_bytes(os.path.join(part, "fashion_lenet5_bn.trained.onnx")),
                             f"--gpus {gpus}: the resumed run's weights differ (crops or flips not reproduced)")
        # Augmentation changes what is trained: without it the weights differ.
        plain, _, _ = self.train(LENET, "img1_plain", "--steps", 18, *[a for a in common if a != "crop,flip" and a != "--augment"])
        self.assertNotEqual(read_bytes(os.path.join(plain, "fashion_lenet5_bn.trained.onnx")),
                            read_bytes(os.path.join(self.dir, "img1_full", "fashion_lenet5_bn.trained.onnx")))

    def test_streamed_npy_trains_the_same_bytes(self):
        model = mlp_model(os.path.join(self.dir, "mlp.onnx"))
        data = write_data(os.path.join(self.dir, "npy"), n=96)
        outs = []
        for mode in ("never", "always"):
            out, so, _ = self.train(model, f"stream_{mode}", "--data", data, "--stream-data", mode, "--val-split", 0.25,
                                    "--mean", 0.5, "--std", 2, "--steps", 20, "--batch-size", 8, "--gpus", 2)
            self.assertEqual("read from disk" in so, mode == "always", so)
            outs.append(read_bytes(os.path.join(out, "mlp.trained.onnx")))
        self.assertEqual(outs[0], outs[1], "streamed and in-memory .npy trained different weights")

    def test_larger_than_the_address_space_trains_by_streaming(self):
        # x.npy of 2 GB (a sparse file: zeros, no disk used) under a 1.5 GB address-space limit:
        # read whole it cannot be held (exit 2, naming the folder and --stream-data), streamed it trains.
        big = os.path.join(self.dir, "big")
        os.makedirs(big)
        n = 8_000_000
        hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 64), }" % n
        hdr += " " * ((64 - (10 + len(hdr) + 1) % 64) % 64) + "\n"
        with open(os.path.join(big, "x.npy"), "wb") as f:
            f.write(b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode())
            f.truncate(f.tell() + n * 64 * 4)
        np.save(os.path.join(big, "y.npy"), (np.arange(n) % 10).astype(np.uint8))
        model = os.path.join(ROOT, "models/digits_mlp.onnx")

        def limited():
            resource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, 1_500_000_000))

        modes, env, preexec = (("never", 2), ("auto", 0)), None, limited
        if SANITIZER:
            # ASan and TSan reserve terabytes of shadow memory at start, so they cannot start under an
            # address space limit: their allocator refuses any one allocation above the limit instead
            # (the set read whole is one), which reaches the same failure. auto's choice reads the
            # limit, which is then absent, so the streamed half says always (the build without a
            # sanitizer checks auto's choice).
            opts = f":allocator_may_return_null=1:max_allocation_size_mb={1_500_000_000 >> 20}"
            env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + opts,
                       TSAN_OPTIONS=os.environ.get("TSAN_OPTIONS", "") + opts)
            modes, preexec = (("never", 2), ("always", 0)), None
        for mode, expect in modes:
            out = os.path.join(self.dir, f"big_{mode}")
            p = subprocess.run([BIN, model, "--data", big, "--stream-data", mode, "--steps", "20", "--out", out,
                                "--quiet"], capture_output=True, text=True, preexec_fn=preexec, env=env, timeout=300)
            self.assertEqual(p.returncode, expect, f"--stream-data {mode}: {p.stdout}\n{p.stderr}")
            if expect == 2:
                se = without_sanitizer_warning(p.stderr)
                self.assertRegex(se, r"big: [0-9]+ MB of data does not fit in memory; --stream-data always")
                self.assertEqual(len(se.strip().splitlines()), 1, p.stderr)

    def test_byte_level_model_learns_a_real_text(self):
        if shutil.which("bible") is None:
            self.skipTest("bible-kjv is not installed (tools/setup.sh installs it)")
        text = os.path.join(self.dir, "kjv.txt")
        with open(text, "wb") as f:
            f.write(subprocess.run(["bible", "Gen1:1-Gen50:26"], capture_output=True, check=True).stdout)
        model = os.path.join(self.dir, "blm.onnx")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools/data/byte_lm.py"), model, "--seq", "32",
                        "--width", "32", "--layers", "1"], check=True, capture_output=True)
        out, so, _ = self.train(model, "blm", "--data", text, "--tokenizer", "bytes", "--steps", 120, "--batch-size", 16,
                                "--optimizer", "adamw", "--lr", 0.01, "--gpus", 2)
        import csv
        with open(os.path.join(out, "metrics.csv")) as f:
            losses = [float(r["loss"]) for r in csv.DictReader(f)]
        self.assertIn("bytes as tokens", so)
        # A uniform guess over 256 bytes is ln 256 = 5.55; English letters alone fall below 3.
        self.assertGreater(losses[0], 5.0)
        self.assertLess(np.mean(losses[-20:]), 3.0, losses[-20:])

    def test_bad_data_is_refused_and_writes_nothing(self):
        mlp = mlp_model(os.path.join(self.dir, "mlp_bad.onnx"))
        blm = os.path.join(self.dir, "blm_bad.onnx")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools/data/byte_lm.py"), blm, "--seq", "16", "--width", "16",
                        "--layers", "1", "--heads", "2"], check=True, capture_output=True)
        empty = os.path.join(self.dir, "empty.txt")
        open(empty, "w").close()
        loose = os.path.join(self.dir, "loose")
        os.makedirs(loose)
        with open(os.path.join(loose, "a.png"), "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n")
        cases = [
            (blm, ["--data", empty, "--tokenizer", "bytes"], "empty.txt: empty"),
            (mlp, ["--data", empty], "needs a tokenizer"),
            (LENET, ["--data", loose], "no class subfolders"),
            (mlp, ["--data", write_data(os.path.join(self.dir, "npy_aug"), n=16), "--augment", "flip"], "--augment"),
        ]
        if self.have_fashion:
            corrupt = os.path.join(self.dir, "corrupt")
            shutil.copytree(self.images, corrupt)
            first = sorted(os.listdir(corrupt))[0]
            bad = os.path.join(corrupt, first, "000000x.jpg")
            with open(bad, "wb") as f:
                f.write(b"not an image")
            cases += [(LENET, ["--data", corrupt], bad), (mlp, ["--data", self.images], "images feed a float input")]
            # --on-bad-sample skip counts, names and leaves the file out.
            out, so, _ = self.train(LENET, "skip_bad", "--data", corrupt, "--on-bad-sample", "skip", "--steps", 1)
            self.assertIn("skipped 1 unreadable file, first: " + bad, so)
            # An image whose header reads but whose data does not decode fails while training: under
            # skip the next image stands in, and the run says how often and names the file.
            trunc = os.path.join(self.dir, "truncated")
            shutil.copytree(self.images, trunc)
            folder = os.path.join(trunc, sorted(os.listdir(trunc))[0])
            png = os.path.join(folder, next(f for f in sorted(os.listdir(folder)) if f.endswith(".png")))
            with open(png, "rb") as f:
                head = f.read()[:60]  # the signature and IHDR: the header scan passes
            with open(png, "wb") as f:
                f.write(head)
            out, so, _ = self.train(LENET, "skip_trunc", "--data", trunc, "--on-bad-sample", "skip", "--steps", 12,
                                    "--batch-size", 32)
            self.assertIn("failed to decode while training; the next image of the set stood in for each "
                          "(--on-bad-sample skip); first: " + png, so)
            rc, _, se = run(LENET, "--out", os.path.join(self.dir, "fail_trunc"), "--data", trunc, "--steps", "12",
                            "--batch-size", "32")
            self.assertEqual(rc, 2, se)  # under fail (the default) the run stops naming it
            self.assertIn(png, se)
        # A graph input of 2^40 values a sample, synthesised: refused naming the input and the bytes.
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        huge = os.path.join(self.dir, "huge.onnx")
        w = numpy_helper.from_array(np.ones((1,), np.float32), "w")
        g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1 << 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1 << 40])], [w])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), huge)
        cases.append((huge, ["--data", "synthetic"], "input 'x' [1099511627776] float32 take 2251799.8 GB"))
        for k, (model, args, needle) in enumerate(cases):
            out = os.path.join(self.dir, f"bad{k}")
            rc, so, se = run(model, "--out", out, "--steps", 1, *map(str, args))
            self.assertEqual(rc, 2, f"{args}: exit {rc}\n{so}\n{se}")
            self.assertIn(needle, se)
            self.assertEqual(len(without_sanitizer_warning(se).strip().splitlines()), 1, se)
            self.assertFalse(os.path.exists(out), f"{args}: wrote {out}")

if __name__ == "__main__":
    unittest.main()
