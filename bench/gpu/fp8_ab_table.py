#!/usr/bin/env python3
"""The table of bench/gpu/fp8_ab.sh: bench/gpu/kernel_ab_table.py's, with issue 19's targets.

Rows per shape and genome (status, median us, TFLOP/s, cuDNN/evo, best-SDPA/evo) for the new FP8
family ("new"), the previous one ("old") and the fp16 family ("f16", on fp16 inputs); per shape
the best new and old genome, TFLOP/s (the FLOPs of attention, whatever the input type) and the
ratio to cuDNN fp16. Target column: issue 19's kernel-only ratio to the best PyTorch SDPA
backend in fp16 (cuDNN on Hopper): 1.6 at head dim 128, 1.2 at head dim 64, causal and not.

Usage: fp8_ab_table.py --genomes bench/gpu/fp8_ab_genomes.txt --torch torch.json --eval a.json ...
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_ab_table as kt  # noqa: E402

kt.TARGETS = {
    (4, 16, 4096, 4096, 128): 1.6,
    (1, 16, 16384, 16384, 128): 1.6,
    (4, 16, 4096, 4096, 64): 1.2,
}
kt.SEED_SHAPES = []  # no geomean over issue 18's seed shapes

if __name__ == "__main__":
    sys.exit(kt.main())
