#!/usr/bin/env bash
# Builds .gpu/ (release evo, nextest archive of the GPU test crates, the runner) with
# ../shared/tools/gpu-bundle.sh, then shrinks it below the 64 MiB a device call carries:
# debug info stripped from evo (symbols kept, for backtraces), from the archived test
# binaries and from cargo-nextest, the archive recompressed with zstd -19.
# Usage, from the repo root: bench/gpu/bundle.sh [-p CRATE]...  (default evo-gpu evo-eval)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
pkgs=("$@"); [ ${#pkgs[@]} -gt 0 ] || pkgs=(-p evo-gpu -p evo-eval)
../shared/tools/gpu-bundle.sh "${pkgs[@]}" 2>&1 | grep -v "^warning: .gpu is" || true
strip --strip-debug .gpu/evo
strip .gpu/cargo-nextest
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
tar --zstd -xf .gpu/tests.tar.zst -C "$tmp"
tar --zstd -tf .gpu/tests.tar.zst > "$tmp.order"
find "$tmp/target" -type f -perm -u+x -exec sh -c 'file "$1" | grep -q ELF && strip --strip-debug "$1"' _ {} \;
(cd "$tmp" && tar -cf - --no-recursion -T "$tmp.order") | zstd -19 -T0 -q -f -o .gpu/tests.tar.zst
rm -f "$tmp.order"
du -sh .gpu/*
total=$(du -sm .gpu | cut -f1)
[ "$total" -le 60 ] || { echo "error: .gpu is ${total} MiB; a device call carries at most 64 MiB with the tree" >&2; exit 1; }
