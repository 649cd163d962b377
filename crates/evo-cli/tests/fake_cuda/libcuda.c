/* A stand-in for libcuda.so.1 (tests only): the driver calls evo_kernel.py makes, each
 * logged to $FAKE_CUDA_LOG (no log when it is unset, for timing the Python side).
 * Functions get handles 0x3000, 0x3001, ... in the order their names are first asked for.
 * cuLaunchKernel of `sdpa_fwd` decodes its parameters with the sdpa_fwd ABI (4 pointers,
 * 4 int, 12 long long, float), so a test sees exactly what ctypes packed; with
 * $FAKE_CUDA_TMAPS = N it also reads the N tensor maps after them (the first 8 bytes,
 * which cuTensorMapEncodeTiled and cuTensorMapReplaceAddress here set to the global
 * address). No context is current until one is pushed, unless $FAKE_CUDA_CURRENT is set
 * (then device 0's primary context is, as on a thread where PyTorch ran). $FAKE_CUDA_CLUSTER
 * gives every function a compiled cluster of that many CTAs. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;

static void say(const char *format, ...) {
    static FILE *f;
    static int opened;
    if (!opened) {
        const char *p = getenv("FAKE_CUDA_LOG");
        f = p ? fopen(p, "a") : NULL;
        if (f) setvbuf(f, NULL, _IONBF, 0);
        opened = 1;
    }
    if (!f) return;
    va_list args;
    va_start(args, format);
    vfprintf(f, format, args);
    va_end(args);
}

CUresult cuInit(unsigned flags) { say("cuInit %u\n", flags); return 0; }
CUresult cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    *ctx = (void *)(uintptr_t)(0x1000 + dev);
    say("retain %d\n", dev);
    return 0;
}
static void *current;
static int current_set;
CUresult cuCtxGetCurrent(void **ctx) {
    if (!current_set) {
        current = getenv("FAKE_CUDA_CURRENT") ? (void *)(uintptr_t)0x1000 : 0;
        current_set = 1;
    }
    *ctx = current;
    return 0;
}
CUresult cuCtxPushCurrent_v2(void *ctx) {
    say("push %p\n", ctx);
    current = ctx;
    current_set = 1;
    return 0;
}
CUresult cuCtxPopCurrent_v2(void **ctx) {
    *ctx = current;
    current = 0;
    say("pop\n");
    return 0;
}
CUresult cuModuleLoadData(void **mod, const void *image) {
    const unsigned char *b = image;
    say("load %02x%02x%02x%02x\n", b[0], b[1], b[2], b[3]);
    *mod = (void *)0x2000;
    return 0;
}
static char names[16][64];
static int n_names;

static int function_index(const char *name) {
    for (int i = 0; i < n_names; i++)
        if (strcmp(names[i], name) == 0) return i;
    snprintf(names[n_names], sizeof names[0], "%s", name);
    return n_names++;
}

CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
    say("function %p %s\n", mod, name);
    *fn = (void *)(uintptr_t)(0x3000 + function_index(name));
    return 0;
}

CUresult cuTensorMapEncodeTiled(void *map, int dtype, unsigned rank, void *address,
                                const uint64_t *dims, const uint64_t *strides,
                                const uint32_t *box, const uint32_t *element_strides,
                                int interleave, int swizzle, int l2, int oob) {
    say("tmap aligned %d dtype %d rank %u address %llu dims", (int)((uintptr_t)map % 128 == 0),
            dtype, rank, (unsigned long long)(uintptr_t)address);
    for (unsigned i = 0; i < rank; i++) say(" %llu", (unsigned long long)dims[i]);
    say(" strides");
    for (unsigned i = 0; i + 1 < rank; i++) say(" %llu", (unsigned long long)strides[i]);
    say(" box");
    for (unsigned i = 0; i < rank; i++) say(" %u", box[i]);
    say(" element_strides");
    for (unsigned i = 0; i < rank; i++) say(" %u", element_strides[i]);
    say(" interleave %d swizzle %d l2 %d oob %d\n", interleave, swizzle, l2, oob);
    memset(map, 0, 128);
    uint64_t a = (uint64_t)(uintptr_t)address;
    memcpy(map, &a, sizeof a);
    return 0;
}
CUresult cuTensorMapReplaceAddress(void *map, void *address) {
    say("replace aligned %d address %llu\n", (int)((uintptr_t)map % 128 == 0),
            (unsigned long long)(uintptr_t)address);
    uint64_t a = (uint64_t)(uintptr_t)address;
    memcpy(map, &a, sizeof a);
    return 0;
}
/* A function's compiled cluster (attributes 11-13: width, height, depth): $FAKE_CUDA_CLUSTER
 * CTAs wide (1 high and deep) when it is set, else none (0); every other attribute 0. */
CUresult cuFuncGetAttribute(int *value, int attr, void *fn) {
    say("get_attribute %p %d\n", fn, attr);
    const char *cluster = getenv("FAKE_CUDA_CLUSTER");
    *value = !cluster ? 0 : attr == 11 ? atoi(cluster) : (attr == 12 || attr == 13) ? 1 : 0;
    return 0;
}
CUresult cuFuncSetAttribute(void *fn, int attr, int value) {
    say("attribute %p %d %d\n", fn, attr, value);
    return 0;
}
CUresult cuGetErrorName(CUresult r, const char **s) { (void)r; *s = "CUDA_ERROR_FAKE"; return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, void *stream, void **params, void **extra) {
    say("launch %p grid %u %u %u block %u %u %u smem %u stream %p extra %p args", f, gx, gy,
            gz, bx, by, bz, smem, stream, (void *)extra);
    int index = (int)((uintptr_t)f - 0x3000);
    if (index < 0 || index >= n_names || strcmp(names[index], "sdpa_fwd") != 0) {
        say(" (not decoded)\n");
        return 0;
    }
    for (int i = 0; i < 4; i++) say(" %llu", *(unsigned long long *)params[i]);
    for (int i = 4; i < 8; i++) say(" %d", *(int *)params[i]);
    for (int i = 8; i < 20; i++) say(" %lld", *(long long *)params[i]);
    say(" %.7g", *(float *)params[20]);
    const char *tmaps = getenv("FAKE_CUDA_TMAPS");
    for (int i = 0; i < (tmaps ? atoi(tmaps) : 0); i++)
        say(" tmap:%llu", *(unsigned long long *)params[21 + i]);
    say("\n");
    return 0;
}
