#!/usr/bin/python3
"""Renders sample partition.html reports in headless Chromium and checks the pictures are there.

Usage: render_html_test.py PARTITIONER_TESTS_BINARY [OUT_DIR]

The gtest ReportSample.WritesSampleReports writes a 1F1B report (manual plan, measured times,
automatic comparison) and a GPipe report into OUT_DIR. For each, Chromium's DOM dump must hold the
four <svg> pictures, and its 1400x2000 screenshot must be mostly non-blank and show the forward and
backward colours of the bars and the timeline. Prints the screenshot paths; exits 77 (skipped) when
Chromium is not installed.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

SVG_IDS = ["svg-stage-times", "svg-memory", "svg-timeline", "svg-layers"]
FWD = (0x4E, 0x79, 0xA7)  # kFwdColor in partitioner/report_util.h
BWD = (0xF2, 0x8E, 0x2B)  # kBwdColor


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium_args(chromium, profile):
    return [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--user-data-dir=" + profile, "--no-first-run", "--window-size=1400,2000"]


def decode_png(path):
    """(width, height, rows of RGB tuples' flat bytes, channels) of an 8-bit RGB/RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path + ": not a PNG"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), "unexpected PNG format %d/%d" % (depth, color)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        filt = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if filt == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 255
        elif filt == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif filt == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif filt == 4:
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b = prev[i]
                c = prev[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows, channels


def check_screenshot(path):
    width, height, rows, ch = decode_png(path)
    assert (width, height) == (1400, 2000), "screenshot is %dx%d" % (width, height)
    non_white = fwd = bwd = 0
    for y in range(0, height, 2):
        row = rows[y]
        for x in range(0, width * ch, 2 * ch):
            r, g, b = row[x], row[x + 1], row[x + 2]
            if r < 235 or g < 235 or b < 235:
                non_white += 1
            if abs(r - FWD[0]) < 8 and abs(g - FWD[1]) < 8 and abs(b - FWD[2]) < 8:
                fwd += 1
            elif abs(r - BWD[0]) < 8 and abs(g - BWD[1]) < 8 and abs(b - BWD[2]) < 8:
                bwd += 1
    sampled = (height // 2) * (width // 2)
    assert non_white > 0.05 * sampled, "%s is almost blank (%d of %d pixels)" % (path, non_white, sampled)
    assert fwd > 500 and bwd > 500, "%s lacks the forward/backward bars (%d, %d pixels)" % (path, fwd, bwd)
    return non_white / sampled, fwd, bwd


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    binary = sys.argv[1]
    out = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="pipetrain-html-")
    chromium = find_chromium()
    if not chromium:
        print("SKIP: chromium is not installed")
        return 77
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, PIPETRAIN_REPORT_SAMPLE_DIR=out)
    subprocess.run([binary, "--gtest_filter=ReportSample.*", "--gtest_color=no"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    failures = 0
    for name in ("1f1b", "gpipe"):
        html = os.path.join(out, name, "partition.html")
        png = os.path.join(out, name + ".png")
        url = "file://" + html
        with tempfile.TemporaryDirectory(prefix="pipetrain-chromium-") as profile:
            dom = subprocess.run(chromium_args(chromium, profile) + ["--dump-dom", url], capture_output=True,
                                 text=True, timeout=180).stdout
            if os.path.exists(png):
                os.remove(png)
            subprocess.run(chromium_args(chromium, profile) + ["--screenshot=" + png, url], capture_output=True,
                           timeout=180)
        try:
            missing = [i for i in SVG_IDS if 'id="%s"' % i not in dom]
            assert not missing, "%s: Chromium's DOM lacks %s" % (html, ", ".join(missing))
            assert os.path.exists(png), png + " was not written"
            ink, fwd, bwd = check_screenshot(png)
            print("ok %s: %s (%.0f%% ink, %d forward / %d backward samples)" % (name, png, 100 * ink, fwd, bwd))
        except AssertionError as e:
            print("FAIL", e)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
