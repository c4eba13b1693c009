"""No function in tools/ or runtime/ is longer than 150 lines (docs/architecture.md: the run path in
phases, the pipeline built in named steps). A function is a brace block whose header ends in a
parameter list (not if/for/while/switch/catch, not a lambda) at any depth outside another function;
lambdas and local classes count towards the function around them. Comments, strings and raw strings
are blanked first, so braces inside them do not count.
Run: /usr/bin/python3 -m unittest tests/code/test_function_length.py (from the repository root)
"""
import os
import re
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDERS = ("tools", "runtime")
MAX_LINES = 150
EXTENSIONS = (".cpp", ".h", ".cu", ".cuh")


def blank(src):
    """src with comments, string and character literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif src.startswith('R"', i) and re.match(r'R"[^(\s]*\(', src[i:]):
            delim = re.match(r'R"([^(\s]*)\(', src[i:]).group(1)
            j = src.find(")" + delim + '"', i)
            j = n if j < 0 else j + len(delim) + 2
        elif src[i] in "\"'" and not (src[i] == "'" and i > 0 and src[i - 1].isalnum()):  # 1'000 digit separators
            q, j = src[i], i + 1
            while j < n and src[j] != q and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j += 1
        else:
            out.append(src[i])
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", src[i:j]))
        i = j
    return "".join(out)


FUNCTION_HEADER = re.compile(r"\)\s*(const|override|noexcept|final|mutable|->\s*[\w:<>,\s*&]+)*\s*$")
CONTROL = re.compile(r"\b(if|for|while|switch|catch)\s*\(.*\)\s*$")
LAMBDA = re.compile(r"\]\s*(\([^;{}]*\))?\s*(mutable)?\s*(->\s*[\w:<>]+)?\s*$")


def functions(text):
    """(first line, line count, header) of each function definition in blanked text."""
    found, stack = [], []
    for m in re.finditer(r"[{}]", text):
        if m.group() == "{":
            header = re.sub(r"\s+", " ", text[max(0, m.start() - 400):m.start()]).rstrip()
            header = header[max(header.rfind(";"), header.rfind("}"), header.rfind("{")) + 1:].strip()
            is_fn = bool(FUNCTION_HEADER.search(header)) and not CONTROL.search(header) and not LAMBDA.search(header)
            inside = any(f for _, f, _ in stack)
            stack.append((text.count("\n", 0, m.start()) + 1, is_fn and not inside, header))
        elif stack:
            first, is_fn, header = stack.pop()
            if is_fn:
                found.append((first, text.count("\n", 0, m.start()) + 2 - first, header))
    return found


class FunctionLengthTest(unittest.TestCase):
    def test_the_parser_sees_functions(self):
        src = 'int f(int a) {\n  auto g = [&](int b) {\n    return "}" + b;\n  };\n  if (a) {\n  }\n  return 1;\n}\n'
        self.assertEqual([(1, 8)], [(a, b) for a, b, _ in functions(blank(src))])

    def test_no_function_over_the_limit(self):
        long_ones, seen = [], 0
        for folder in FOLDERS:
            for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
                for name in sorted(files):
                    if not name.endswith(EXTENSIONS):
                        continue
                    path = os.path.join(dirpath, name)
                    with open(path, encoding="utf-8", errors="replace") as f:
                        for first, lines, header in functions(blank(f.read())):
                            seen += 1
                            if lines > MAX_LINES:
                                long_ones.append("%s:%d: %d lines: %s" % (os.path.relpath(path, ROOT), first, lines,
                                                                          header[-70:]))
        self.assertGreater(seen, 500, "the parser found too few functions to be reading the sources")
        self.assertEqual([], long_ones, "functions over %d lines (split them into named steps)" % MAX_LINES)


if __name__ == "__main__":
    unittest.main()
