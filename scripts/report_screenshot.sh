#!/usr/bin/env bash
# Renders an `evo report` HTML file with headless Chromium (Debian's `chromium`
# package, installed with apt-get when missing) and checks the screenshot is not blank:
# enough non-white pixels, enough distinct colours, and the chart colours present.
#
#   scripts/report_screenshot.sh report.html [out.png] [WIDTHxHEIGHT]
#
# Prints what it checked; exits non-zero when the page did not render.
set -euo pipefail

html=${1:?usage: scripts/report_screenshot.sh report.html [out.png] [WIDTHxHEIGHT]}
png=${2:-${html%.html}.png}
size=${3:-1400x5200}

if [[ ! -f $html ]]; then
    echo "no such file: $html" >&2
    exit 1
fi

browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $browser ]]; then
    echo "installing Debian's chromium (apt-get) ..."
    if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
    browser=$(command -v chromium)
fi
echo "browser: $($browser --version 2>/dev/null || echo "$browser")"

profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
abs_html=$(realpath "$html")
abs_png=$(realpath -m "$png")
rm -f "$abs_png"
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --hide-scrollbars --user-data-dir="$profile" \
    --screenshot="$abs_png" --window-size="${size/x/,}" "file://$abs_html" \
    >"$profile/chromium.log" 2>&1 || {
    cat "$profile/chromium.log" >&2
    echo "chromium failed" >&2
    exit 1
}
if [[ ! -s $abs_png ]]; then
    cat "$profile/chromium.log" >&2
    echo "chromium wrote no screenshot" >&2
    exit 1
fi

# The check: decode the PNG with Python's standard library only (zlib + the PNG
# filters), count non-white pixels, distinct colours, and the report's chart colours.
python3 - "$abs_png" <<'PY'
import struct, sys, zlib

path = sys.argv[1]
data = open(path, "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, width = 8, b"", 0
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
        assert depth == 8 and ctype in (2, 6), f"unexpected PNG format depth={depth} type={ctype}"
        bpp = 3 if ctype == 2 else 4
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
raw = zlib.decompress(idat)
stride = width * bpp
prev = bytearray(stride)
pixels_nonwhite = 0
colours = {}
row_start = 0
for y in range(height):
    f = raw[row_start]
    line = bytearray(raw[row_start + 1:row_start + 1 + stride])
    row_start += 1 + stride
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b = prev[i]
        c = prev[i - bpp] if i >= bpp else 0
        if f == 1:
            line[i] = (line[i] + a) & 255
        elif f == 2:
            line[i] = (line[i] + b) & 255
        elif f == 3:
            line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    prev = line
    for x in range(0, stride, bpp * 2):  # every other pixel is plenty
        rgb = (line[x], line[x + 1], line[x + 2])
        if rgb != (255, 255, 255):
            pixels_nonwhite += 1
            colours[rgb] = colours.get(rgb, 0) + 1
sampled = height * ((width + 1) // 2)
share = pixels_nonwhite / sampled

def near(target, tol=40):
    return sum(n for c, n in colours.items() if all(abs(c[i] - target[i]) <= tol for i in range(3)))

checks = {
    "funnel bars (green #2ca02c)": near((0x2c, 0xa0, 0x2c)),
    "points and bars (blue #1f77b4, blended)": near((0x1f, 0x77, 0xb4), 90),
    "best-so-far line (red #d62728)": near((0xd6, 0x27, 0x28)),
}
print(f"screenshot {path}: {width}x{height}, {share:.1%} of sampled pixels not white, {len(colours)} distinct colours")
ok = share > 0.03 and len(colours) > 50
for name, n in checks.items():
    print(f"  {name}: {n} sampled pixels")
    ok = ok and n > 20
if not ok:
    print("FAIL: the screenshot looks blank or lacks the charts")
    sys.exit(1)
print("OK: the report rendered with its charts")
PY
