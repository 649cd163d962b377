#!/usr/bin/env bash
# Installs the pinned CUDA 13.0 compiler pieces evo needs on a machine without a CUDA
# toolkit, into the project-local, git-ignored folder .cuda/ (evo finds it there):
#   NVRTC 13.0 (+ builtins), the CUDA headers (runtime + crt), and cuobjdump/nvdisasm
#   13.2 to read CUBINs (no 13.0 wheel of those exists; 13.2 reads 13.0 CUBINs).
# NVRTC stays at 13.0: PTX from a newer NVRTC does not load on a 13.0 driver.
# Idempotent: does nothing when the pinned versions are already there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.cuda"
pins=(
  nvidia-cuda-nvrtc==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-crt==13.0.88
  nvidia-cuda-cuobjdump==13.2.51
  nvidia-cuda-nvdisasm==13.2.51
)
stamp="$dest/.pins"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${pins[*]}" ] \
   && [ -f "$dest/nvidia/cu13/lib/libnvrtc.so.13" ]; then
  exit 0
fi
python=${PYTHON:-python3}
command -v "$python" >/dev/null || { echo "install-cuda.sh: needs python3 with pip" >&2; exit 1; }
echo "installing ${pins[*]} into $dest" >&2
rm -rf "$dest.tmp"
"$python" -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest.tmp" "${pins[@]}"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
printf '%s' "${pins[*]}" > "$stamp"
test -f "$dest/nvidia/cu13/lib/libnvrtc.so.13"
test -f "$dest/nvidia/cu13/include/cuda_fp16.h"
test -f "$dest/nvidia/cu13/include/crt/host_defines.h"
echo "CUDA compiler pieces ready in $dest/nvidia/cu13" >&2
