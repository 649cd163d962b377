/* A stand-in for libcuda.so.1 (tests only): the driver calls evo_kernel.py makes, each
 * logged to $FAKE_CUDA_LOG. Functions get handles 0x3000, 0x3001, ... in the order their
 * names are first asked for. cuLaunchKernel of `sdpa_fwd` decodes its parameters with the
 * sdpa_fwd ABI (4 pointers, 4 int, 12 long long, float), so a test sees exactly what
 * ctypes packed; with $FAKE_CUDA_TMAPS = N it also reads the N tensor maps after them
 * (the first 8 bytes, which cuTensorMapEncodeTiled here sets to the global address). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;

static FILE *log_file(void) {
    static FILE *f;
    if (!f) {
        const char *p = getenv("FAKE_CUDA_LOG");
        f = fopen(p ? p : "/dev/stderr", "a");
        setvbuf(f, NULL, _IONBF, 0);
    }
    return f;
}

CUresult cuInit(unsigned flags) { fprintf(log_file(), "cuInit %u\n", flags); return 0; }
CUresult cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    *ctx = (void *)(uintptr_t)(0x1000 + dev);
    fprintf(log_file(), "retain %d\n", dev);
    return 0;
}
/* No context is current: evo_kernel.py pushes the primary one. */
CUresult cuCtxGetCurrent(void **ctx) { *ctx = 0; return 0; }
CUresult cuCtxPushCurrent_v2(void *ctx) { fprintf(log_file(), "push %p\n", ctx); return 0; }
CUresult cuCtxPopCurrent_v2(void **ctx) { *ctx = 0; fprintf(log_file(), "pop\n"); return 0; }
CUresult cuModuleLoadData(void **mod, const void *image) {
    const unsigned char *b = image;
    fprintf(log_file(), "load %02x%02x%02x%02x\n", b[0], b[1], b[2], b[3]);
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
    fprintf(log_file(), "function %p %s\n", mod, name);
    *fn = (void *)(uintptr_t)(0x3000 + function_index(name));
    return 0;
}

CUresult cuTensorMapEncodeTiled(void *map, int dtype, unsigned rank, void *address,
                                const uint64_t *dims, const uint64_t *strides,
                                const uint32_t *box, const uint32_t *element_strides,
                                int interleave, int swizzle, int l2, int oob) {
    FILE *o = log_file();
    fprintf(o, "tmap aligned %d dtype %d rank %u address %llu dims", (int)((uintptr_t)map % 128 == 0),
            dtype, rank, (unsigned long long)(uintptr_t)address);
    for (unsigned i = 0; i < rank; i++) fprintf(o, " %llu", (unsigned long long)dims[i]);
    fprintf(o, " strides");
    for (unsigned i = 0; i + 1 < rank; i++) fprintf(o, " %llu", (unsigned long long)strides[i]);
    fprintf(o, " box");
    for (unsigned i = 0; i < rank; i++) fprintf(o, " %u", box[i]);
    fprintf(o, " element_strides");
    for (unsigned i = 0; i < rank; i++) fprintf(o, " %u", element_strides[i]);
    fprintf(o, " interleave %d swizzle %d l2 %d oob %d\n", interleave, swizzle, l2, oob);
    memset(map, 0, 128);
    uint64_t a = (uint64_t)(uintptr_t)address;
    memcpy(map, &a, sizeof a);
    return 0;
}
CUresult cuFuncSetAttribute(void *fn, int attr, int value) {
    fprintf(log_file(), "attribute %p %d %d\n", fn, attr, value);
    return 0;
}
CUresult cuGetErrorName(CUresult r, const char **s) { (void)r; *s = "CUDA_ERROR_FAKE"; return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, void *stream, void **params, void **extra) {
    FILE *o = log_file();
    fprintf(o, "launch %p grid %u %u %u block %u %u %u smem %u stream %p extra %p args", f, gx, gy,
            gz, bx, by, bz, smem, stream, (void *)extra);
    int index = (int)((uintptr_t)f - 0x3000);
    if (index < 0 || index >= n_names || strcmp(names[index], "sdpa_fwd") != 0) {
        fprintf(o, " (not decoded)\n");
        return 0;
    }
    for (int i = 0; i < 4; i++) fprintf(o, " %llu", *(unsigned long long *)params[i]);
    for (int i = 4; i < 8; i++) fprintf(o, " %d", *(int *)params[i]);
    for (int i = 8; i < 20; i++) fprintf(o, " %lld", *(long long *)params[i]);
    fprintf(o, " %.7g", *(float *)params[20]);
    const char *tmaps = getenv("FAKE_CUDA_TMAPS");
    for (int i = 0; i < (tmaps ? atoi(tmaps) : 0); i++)
        fprintf(o, " tmap:%llu", *(unsigned long long *)params[21 + i]);
    fprintf(o, "\n");
    return 0;
}
