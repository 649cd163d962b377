#!/usr/bin/env bash
# The templates of an earlier commit, for A/B runs of the previous kernel against the current one
# (bench/gpu/kernel_ab.sh reads them from BASELINE_TEMPLATES, default bench/gpu/baseline-templates,
# which .gitignore leaves out: hand it to a device run as a carried path).
# Usage: bench/kernel/baseline_templates.sh [REV] [DIR]
#   REV: default 5260695 (main before issue 18's kernel work); DIR: default bench/gpu/baseline-templates
set -euo pipefail
cd "$(dirname "$0")/../.."
REV=${1:-5260695}
DIR=${2:-bench/gpu/baseline-templates}
git rev-parse --verify -q "$REV^{commit}" > /dev/null || { echo "baseline_templates.sh: no commit $REV in this repository" >&2; exit 1; }
rm -rf "$DIR"
mkdir -p "$DIR"
git archive "$REV" templates | tar -x -C "$DIR" --strip-components=1
# Families that view q, k, v through TMA tensor maps declare them contiguous today (the loader
# refuses the family otherwise); an earlier commit's TOML gets the same declaration, its kernel
# unchanged.
for t in "$DIR"/sdpa_fwd/sdpa_fwd_wgmma.toml; do
  [ -f "$t" ] && ! grep -q '^contiguous' "$t" && sed -i '/^template = /a contiguous = ["q", "k", "v"]' "$t"
done
echo "templates of $(git rev-parse --short "$REV") in $DIR ($(find "$DIR" -type f | wc -l) files)"
