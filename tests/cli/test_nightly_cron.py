"""tools/nightly-cron.sh, the scheduler of .ci/nightly: the crontab entry it installs (time, the
variables passed on, replaced rather than doubled, other users' lines kept), refusals, removal, and
`run` (the night's log and status line, the night's exit code, old logs pruned, a night still
running makes the next one skip). crontab itself is a fake that keeps the table in a file.

Run: /usr/bin/python3 -m unittest tests/cli/test_nightly_cron.py"""
import fcntl
import os
import re
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "tools", "nightly-cron.sh")
FAKE = """#!/bin/sh
case "$1" in
  -l) [ -f "$FAKE_CRONTAB_FILE" ] || { echo "no crontab for $(id -un)" >&2; exit 1; }; cat "$FAKE_CRONTAB_FILE" ;;
  -) cat > "$FAKE_CRONTAB_FILE" ;;
  *) echo "fake crontab: $*" >&2; exit 1 ;;
esac
"""
FOREIGN = "30 1 * * 0 /usr/local/bin/backup.sh # someone else's"


class NightlyCronTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="pipetrain-cron-")
        d = self.tmp.name
        self.table = os.path.join(d, "crontab.txt")
        fake = os.path.join(d, "crontab")
        with open(fake, "w") as f:
            f.write(FAKE)
        os.chmod(fake, 0o755)
        self.out = os.path.join(d, "nightly")
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("JOBS", "NIGHTLY_STEPS", "NIGHTLY_KEEP", "NIGHTLY_FUZZ_SECONDS", "NIGHTLY_OUT")}
        self.env.update(NIGHTLY_CRONTAB=fake, FAKE_CRONTAB_FILE=self.table, NIGHTLY_NO_SETUP="1")

    def tearDown(self):
        self.tmp.cleanup()

    def cron(self, *args, **env):
        p = subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=60, env=dict(self.env, **env))
        return p.returncode, p.stdout, p.stderr

    def lines(self):
        with open(self.table) as f:
            return f.read().splitlines()

    def test_install_replace_remove(self):
        with open(self.table, "w") as f:
            f.write(FOREIGN + "\n")
        rc, so, se = self.cron("install", "03:07")
        self.assertEqual(rc, 0, se)
        self.assertIn("runs daily at 03:07", so)
        lines = self.lines()
        self.assertEqual(lines[0], FOREIGN)
        self.assertEqual(len(lines), 2, lines)
        self.assertEqual(lines[1], f"7 3 * * * {SCRIPT} run # onnx-pipetrain nightly: {ROOT}")
        # Installed again: replaced, with the variables it was given.
        rc, so, se = self.cron("install", "23:59", JOBS="1", NIGHTLY_FUZZ_SECONDS="30")
        self.assertEqual(rc, 0, se)
        lines = self.lines()
        self.assertEqual(len(lines), 2, lines)
        self.assertEqual(lines[1], f"59 23 * * * JOBS=1 NIGHTLY_FUZZ_SECONDS=30 {SCRIPT} run # onnx-pipetrain nightly: {ROOT}")
        rc, so, se = self.cron("status")
        self.assertIn("scheduled: 59 23 * * *", so)
        self.assertIn("last night: none yet", so)
        rc, so, se = self.cron("remove")
        self.assertEqual(rc, 0, se)
        self.assertEqual(self.lines(), [FOREIGN])
        self.assertIn("scheduled: no", self.cron("status")[1])

    def test_bad_time_and_usage_are_refused(self):
        for bad in ("25:00", "7:5", "03:60", "noon"):
            rc, so, se = self.cron("install", bad)
            self.assertEqual(rc, 2, bad)
            self.assertEqual(se.strip(), f"nightly-cron: install {bad}: expected HH:MM (00:00 to 23:59)")
        self.assertFalse(os.path.exists(self.table), "a refused install wrote the crontab")
        rc, so, se = self.cron("sometimes")
        self.assertEqual(rc, 2)
        self.assertIn("usage: tools/nightly-cron.sh install [HH:MM] | remove | status | run", se)

    def test_run_logs_status_exit_code_and_prunes(self):
        os.makedirs(self.out)
        for day in ("2026-01-01", "2026-01-02", "2026-01-03"):
            open(os.path.join(self.out, f"{day}.log"), "w").close()
        rc, so, se = self.cron("run", NIGHTLY_OUT=self.out, NIGHTLY_KEEP="2",
                               NIGHTLY_COMMAND="echo sanitizers ran in $PWD; exit 3")
        self.assertEqual(rc, 3, se)
        logs = sorted(f for f in os.listdir(self.out) if f.endswith(".log"))
        self.assertEqual(len(logs), 2, logs)
        self.assertNotIn("2026-01-02.log", logs)
        with open(os.path.join(self.out, logs[-1])) as f:
            self.assertEqual(f.read(), f"sanitizers ran in {ROOT}\n")
        with open(os.path.join(self.out, "last")) as f:
            last = f.read().strip()
        self.assertRegex(last, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ exit 3 " + re.escape(self.out))
        self.assertIn("exit 3", self.cron("status", NIGHTLY_OUT=self.out)[1])

    def test_a_night_still_running_makes_the_next_skip(self):
        os.makedirs(self.out)
        with open(os.path.join(self.out, ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            rc, so, se = self.cron("run", NIGHTLY_OUT=self.out, NIGHTLY_COMMAND="echo ran; exit 1")
        self.assertEqual(rc, 0, se)
        with open(os.path.join(self.out, "skipped.log")) as f:
            self.assertIn("the previous night is still running; skipped", f.read())
        self.assertFalse(os.path.exists(os.path.join(self.out, "last")))


if __name__ == "__main__":
    unittest.main()
