"""The calibrated cost model through the command line: the first plan calibrates and caches, later
ones read the cache; a corrupt or foreign cache is ignored with one notice and rebuilt; --calibrate
measures again, --no-calibrate plans with the plain roofline; the refusals (--calibrate with
--device-spec, --calibrate --device cuda without a GPU); stages that outnumber the cores are priced
as sharing them. Run:
PIPETRAIN_BIN=build/tools/onnx-pipetrain /usr/bin/python3 -m unittest tests/cli/test_cost_model.py"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli import BIN, mlp_model  # noqa: E402


class CostModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-cost-")
        cls.dir = cls.tmp.name
        cls.model = mlp_model(os.path.join(cls.dir, "mlp.onnx"))
        cls.cache = os.path.join(cls.dir, "cache")  # XDG_CACHE_HOME: this test's own calibrations

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def plan(self, name, *args, model=None):
        out = os.path.join(self.dir, name)
        env = dict(os.environ, XDG_CACHE_HOME=self.cache)
        p = subprocess.run([BIN, model or self.model, "--plan-only", "--out", out, "--overwrite", *map(str, args)],
                           capture_output=True, text=True, env=env, timeout=300)
        return p, out

    def calibration_file(self):
        folder = os.path.join(self.cache, "onnx-pipetrain")
        files = [f for f in os.listdir(folder) if f.startswith("calibration_") and "_cpu_" in f]
        self.assertEqual(len(files), 1, files)
        return os.path.join(folder, files[0])

    def test_calibrates_once_then_reads_the_cache(self):
        p, out = self.plan("first")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"calibration: cpu at \d+ threads?, \d+ nodes measured in [0-9.]+ s")
        with open(os.path.join(out, "partition.json")) as f:
            self.assertEqual(json.load(f)["cost_model"], "calibrated")
        path = self.calibration_file()
        with open(path) as f:
            cal = json.load(f)
        for cls in ("gemm", "conv", "depthwise", "norm", "softmax", "pool", "movement", "elementwise"):
            for phase in ("forward", "backward"):
                c = cal["classes"][cls][phase]
                self.assertGreaterEqual(c["floor_s"], 0)
                self.assertGreaterEqual(c["scale"], 0)
                self.assertGreaterEqual(c["byte_scale"], 0)
                self.assertGreater(c["floor_s"] + c["scale"] + c["byte_scale"], 0, f"{cls} {phase}: predicts nothing")
        self.assertGreater(cal["classes"]["conv"]["forward"]["points"], 2)
        # The second plan reads it: no measuring, the same plan.
        p2, out2 = self.plan("second")
        self.assertEqual(p2.returncode, 0, p2.stderr)
        self.assertNotIn("calibration:", p2.stdout)
        with open(os.path.join(out, "partition.json")) as a, open(os.path.join(out2, "partition.json")) as b:
            self.assertEqual(json.load(a)["stages"][0]["fwd_ms"], json.load(b)["stages"][0]["fwd_ms"])
        # --calibrate measures again.
        p3, _ = self.plan("again", "--calibrate")
        self.assertIn("calibration:", p3.stdout)

    def test_corrupt_or_foreign_cache_is_rebuilt(self):
        self.plan("warm")
        path = self.calibration_file()
        for bad in ("{not json", json.dumps({"key": {"version": 2, "device": "cpu", "model": "another"}, "classes": {}})):
            with open(path, "w") as f:
                f.write(bad)
            p, _ = self.plan("rebuilt")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(len([ln for ln in p.stderr.splitlines() if ln.startswith("notice:")]), 1, p.stderr)
            self.assertIn(path, p.stderr)
            self.assertIn("calibration:", p.stdout)
            with open(path) as f:
                self.assertIn("gemm", json.load(f)["classes"])  # rewritten whole

    def test_no_calibrate_is_the_roofline(self):
        p, out = self.plan("roofline", "--no-calibrate")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("calibration:", p.stdout)
        with open(os.path.join(out, "partition.json")) as f:
            self.assertEqual(json.load(f)["cost_model"], "roofline")

    def test_refusals(self):
        cases = [(["--calibrate", "--device-spec", "H100"], "--calibrate: the devices are described by --device-spec")]
        if subprocess.run(["sh", "-c", "nvidia-smi"], capture_output=True).returncode != 0:  # no GPU here
            cases.append((["--calibrate", "--device", "cuda"], "--calibrate --device cuda: no GPU to measure"))
        for args, needle in cases:
            p, out = self.plan("refused", *args)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertIn(needle, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def lenet_on_shared_cores(self):
        # LeNet-5 has 14 nodes to cut; twice as many stages as cores share them two to one.
        lenet = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                             "models/fashion_lenet5_bn.onnx")
        stages = 2 * (os.cpu_count() or 1)
        if stages > 8:
            self.skipTest(f"{os.cpu_count()} cores: LeNet-5 cannot be cut into {stages} stages")
        return lenet, stages

    def test_stages_sharing_the_cores_are_priced_so(self):
        lenet, stages = self.lenet_on_shared_cores()
        p, out = self.plan("shared", "--gpus", stages, model=lenet)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(out, "partition.json")) as f:
            self.assertGreater(json.load(f)["device_share"], 1.0)
        with open(os.path.join(out, "partition.txt")) as f:
            self.assertIn("shared cores:", f.read())
        p, out = self.plan("alone", "--gpus", 1, model=lenet)
        with open(os.path.join(out, "partition.json")) as f:
            self.assertEqual(json.load(f)["device_share"], 1.0)

    def test_stages_sharing_the_cores_are_measured_by_their_cpu_time(self):
        # Trained on shared cores, each stage's wall time depends on what ran beside it: the report
        # compares the plan with its thread's CPU time x the share, and what is lost is the cores'
        # idle time (1 - CPU time / (cores x time)), which the dry run with those times predicts.
        lenet, stages = self.lenet_on_shared_cores()
        out = os.path.join(self.dir, "shared_run")
        p = subprocess.run([BIN, lenet, "--gpus", str(stages), "--steps", "12", "--batch-size", "16", "--out", out,
                            "--overwrite"], capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"with the measured pass times \(their CPU time, the cores shared\) and hand-offs: cores idle [0-9.]+%, [0-9]+ samples/s "
                                   r"predicted; measured: cores idle -?[0-9.]+% in the steady state")
        self.assertIn("pipeline efficiency: the shared cores computed the stages' passes", p.stdout)
        self.assertEqual(len(re.findall(r"^stage \d+: busy .*; CPU time [0-9.]+ \+ [0-9.]+ ms$", p.stdout, re.M)), stages)
        with open(os.path.join(out, "partition.json")) as f:
            j = json.load(f)
        share = j["device_share"]
        self.assertGreater(share, 1.0)
        for st in j["stages"]:
            m = st["measured"]
            wall = m["fwd_ms"] + m["bwd_ms"] + m["update_ms"]
            self.assertGreater(m["cpu_ms"], 0)
            self.assertLessEqual(m["cpu_ms"], 1.01 * wall + 1e-3)  # one thread's CPU time within its wall time
            pred = st["fwd_ms"] + st["bwd_ms"] + st["update_ms"]
            self.assertAlmostEqual(m["error"], (pred - m["cpu_ms"] * share) / (m["cpu_ms"] * share), places=9)
        with open(os.path.join(out, "partition.txt")) as f:
            self.assertIn("the error compares them with each stage's CPU time x", f.read())
    def test_the_runtimes_time_between_passes_is_in_the_measured_prediction(self):
        # 2 stages with a core each: the re-simulation puts each device's measured time between passes
        # after its actions (StagePlan::pass_gap_ms) and says how much it was and the bubble without it.
        if (os.cpu_count() or 1) < 2:
            self.skipTest("one core: the two stages share it")
        lenet = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                             "models/fashion_lenet5_bn.onnx")
        out = os.path.join(self.dir, "gaps_run")
        p = subprocess.run([BIN, lenet, "--gpus", "2", "--steps", "30", "--batch-size", "16", "--balance", "5,6",
                            "--no-calibrate", "--out", out, "--overwrite"], capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        if "cores idle" in p.stdout:
            self.skipTest("the stages shared the cores (a busy machine)")
        m = re.search(r"^the runtime between passes: ([0-9.]+)% of each device's time, in the prediction above; "
                      r"without it the program's bubble is ([0-9.]+)%$", p.stdout, re.M)
        self.assertIsNotNone(m, p.stdout)
        between = [1 - (int(b) + int(w)) / 100 for b, w in
                   re.findall(r"^stage \d+: busy (\d+)%.*waiting for inputs (\d+)%", p.stdout, re.M)]
        self.assertEqual(len(between), 2, p.stdout)
        # The stage lines round each figure to a point: their mean within 1.5 points of the line's.
        self.assertAlmostEqual(float(m.group(1)) / 100, max(0.0, sum(between) / 2), delta=0.015)

    def test_network_link_prices_the_cut_between_nodes(self):
        # Two stages on two nodes (--ranks-per-node 1): the cut crosses machines and costs what
        # --network-link says: bytes / bandwidth + transfers x latency, so a 10x slower link with
        # 50 us instead of 20 us charges more, and the plan names it.
        lenet = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                             "models/fashion_lenet5_bn.onnx")
        comm = {}
        for link in ("12.5,20", "1.25,50"):
            p, out = self.plan(f"net{link}", "--gpus", 2, "--ranks-per-node", 1, "--balance", "5,6",
                               "--network-link", link, "--no-calibrate", model=lenet)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(os.path.join(out, "partition.json")) as f:
                st = json.load(f)["stages"][1]
            self.assertTrue(st["cut_crosses_nodes"])
            self.assertEqual(st["link_in"], link)
            comm[link] = st["comm_ms"]
        self.assertGreater(comm["1.25,50"], 5 * comm["12.5,20"])
        p, _ = self.plan("badlink", "--gpus", 2, "--ranks-per-node", 1, "--network-link", "fast", model=lenet)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--network-link: link 'fast': expected a built-in link", p.stderr)


if __name__ == "__main__":
    unittest.main()
