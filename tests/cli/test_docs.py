"""The documentation against the tool: every long flag `onnx-pipetrain --help` prints has its row
in docs/cli.md, every flag docs/cli.md names is one --help prints, every flag sits in a named
group, README.md stays an entry point (at most 150 lines), and the links (with their #anchors) and the
repository paths in README.md, docs/ and tests/README.md name files and headings that exist. Run: PIPETRAIN_BIN=build/tools/onnx-pipetrain
/usr/bin/python3 -m unittest tests/cli/test_docs.py"""
import glob
import os
import re
import subprocess
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("PIPETRAIN_BIN", os.path.join(ROOT, "build", "tools", "onnx-pipetrain"))
CLI_MD = os.path.join(ROOT, "docs", "cli.md")
README_MAX_LINES = 150

FLAG = re.compile(r"--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
# A --help line that starts an option: "  --lr FLOAT=0.05  learning rate" or "  -h,--help ...".
HELP_OPTION = re.compile(r"^\s+(?:-\w,)?(--[a-z0-9-]+)")
# A docs/cli.md table row that documents a flag: "| `--lr RATE` | 0.05 | ... |".
DOC_ROW = re.compile(r"^\|\s*`(--[a-z0-9-]+)")


def help_groups():
    """{group title: [long flags]} as `onnx-pipetrain --help` prints them."""
    p = subprocess.run([BIN, "--help"], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise AssertionError(f"{BIN} --help exited {p.returncode}: {p.stderr}")
    groups, current = {}, None
    for line in p.stdout.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            current = line[:-1]
            groups[current] = []
        elif current is not None and (m := HELP_OPTION.match(line)):
            groups[current].append(m.group(1))
    return groups


def doc_rows():
    with open(CLI_MD, encoding="utf-8") as f:
        return [m.group(1) for line in f if (m := DOC_ROW.match(line))]


def doc_mentions():
    """Every --flag docs/cli.md names, but for those in a code span that runs another command
    (`tensorboard --logdir RUN`)."""
    with open(CLI_MD, encoding="utf-8") as f:
        text = f.read()
    other_command = re.compile(r"`(?!onnx-pipetrain\b)[a-z][\w.-]* [^`]*`")
    return set(FLAG.findall(other_command.sub("", text)))


class CliManualTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.groups = help_groups()
        cls.help_flags = {f for flags in cls.groups.values() for f in flags}
        # --help and --version are CLI11's own; the manual describes them in prose.
        cls.option_flags = cls.help_flags - {"--help", "--version"}

    def test_help_prints_flags(self):
        # Guards the parser below: an empty set would make the other checks pass vacuously.
        self.assertGreater(len(self.option_flags), 60, self.groups)
        self.assertIn("--gpus", self.option_flags)

    def test_every_help_flag_has_a_row(self):
        missing = sorted(self.option_flags - set(doc_rows()))
        self.assertEqual(missing, [], f"flags that --help prints and docs/cli.md has no table row for: {missing}")

    def test_every_documented_flag_exists(self):
        unknown = sorted(set(doc_rows()) - self.option_flags)
        self.assertEqual(unknown, [], f"docs/cli.md documents flags that --help does not print: {unknown}")
        stray = sorted(doc_mentions() - self.help_flags)
        self.assertEqual(stray, [], f"docs/cli.md mentions flags that --help does not print: {stray}")

    def test_each_flag_documented_once(self):
        rows = doc_rows()
        twice = sorted({f for f in rows if rows.count(f) > 1})
        self.assertEqual(twice, [], f"flags with more than one row in docs/cli.md: {twice}")

    def test_every_flag_in_a_group(self):
        ungrouped = sorted(set(self.groups.get("Options", [])) - {"--help", "--version"})
        self.assertEqual(ungrouped, [], f"flags outside the option groups (tools/onnx_pipetrain.cpp): {ungrouped}")


# Markdown links, and paths in backticks that start with a top-level folder of the repository.
LINK = re.compile(r"\]\(([^)\s]+)\)")
TOP = ("core", "docs", "importer", "kernels", "models", "partitioner", "runtime", "tests", "tools")
CODE_PATH = re.compile(r"`((?:%s)/[A-Za-z0-9_./+-]*[A-Za-z0-9_/])`" % "|".join(TOP))


def anchors(path):
    """The anchors GitHub gives the headings of a Markdown file."""
    with open(path, encoding="utf-8") as f:
        heads = [line.lstrip("#").strip() for line in f if re.match(r"#{1,6} ", line)]
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def doc_files():
    return [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "tests", "README.md")] + sorted(
        glob.glob(os.path.join(ROOT, "docs", "*.md")))


class DocsTest(unittest.TestCase):
    def test_readme_is_short(self):
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            n = sum(1 for _ in f)
        self.assertLessEqual(n, README_MAX_LINES, f"README.md has {n} lines; details belong in docs/")

    def test_links_and_paths_exist(self):
        broken = []
        for path in doc_files():
            here = os.path.dirname(path)
            with open(path, encoding="utf-8") as f:
                for no, line in enumerate(f, 1):
                    for target in LINK.findall(line):
                        if re.match(r"[a-z]+:", target):
                            continue  # a URL
                        if target.startswith("#"):
                            target = os.path.basename(path) + target
                        file, _, anchor = target.partition("#")
                        full = os.path.normpath(os.path.join(here, file))
                        if not os.path.exists(full):
                            broken.append(f"{os.path.relpath(path, ROOT)}:{no}: link {target}")
                        elif anchor and full.endswith(".md") and anchor not in anchors(full):
                            broken.append(f"{os.path.relpath(path, ROOT)}:{no}: no heading for #{anchor} in {file}")
                    for repo_path in CODE_PATH.findall(line):
                        if any(c in repo_path for c in "*<>"):
                            continue  # a pattern, not a file
                        if not os.path.exists(os.path.join(ROOT, repo_path)):
                            broken.append(f"{os.path.relpath(path, ROOT)}:{no}: path {repo_path}")
        self.assertEqual(broken, [], "links or paths to files that do not exist:\n" + "\n".join(broken))


if __name__ == "__main__":
    unittest.main()
