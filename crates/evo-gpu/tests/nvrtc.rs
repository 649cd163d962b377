//! NVRTC compilation without a GPU: needs the pinned NVRTC (scripts/install-cuda.sh,
//! which scripts/test.sh runs first). These tests fail, not skip, when NVRTC is
//! missing: CI must prove that every family compiles.

use evo_gpu::resources::elf_kernels;
use evo_gpu::{CompileCache, CompileRequest, Compiler};

const MMA_KERNEL: &str = r#"
#include <cuda_fp16.h>
extern "C" __global__ void mma_probe(const unsigned* a, const unsigned* b, float* c) {
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    unsigned a0 = a[threadIdx.x], a1 = a[threadIdx.x + 32], a2 = a[threadIdx.x + 64], a3 = a[threadIdx.x + 96];
    unsigned b0 = b[threadIdx.x], b1 = b[threadIdx.x + 32];
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    __shared__ float s[64];
    s[threadIdx.x] = d[0] + d[1];
    __syncthreads();
    for (int i = 0; i < 4; ++i) c[threadIdx.x * 4 + i] = d[i] + s[(threadIdx.x + 1) % 32];
}
"#;

fn compiler(cache: Option<CompileCache>) -> Compiler {
    Compiler::new("sm_90a", &["-std=c++17".to_string()], 0, cache).unwrap_or_else(|e| {
        panic!("NVRTC is required for these tests (run scripts/install-cuda.sh): {e}")
    })
}

fn request(source: &str) -> CompileRequest {
    CompileRequest {
        name: "probe.cu".into(),
        source: source.into(),
    }
}

#[test]
fn compiles_to_ptx_and_cubin_with_resources() {
    let c = compiler(None);
    assert!(
        c.nvrtc_version().starts_with("13."),
        "{}",
        c.nvrtc_version()
    );
    let out = c.compile(&request(MMA_KERNEL)).unwrap();
    assert!(out.success, "{}", out.log);
    assert!(out.ptx.as_deref().unwrap().contains(".entry mma_probe"));
    let cubin = out.cubin.as_deref().unwrap();
    assert_eq!(&cubin[..4], b"\x7fELF");
    let k = out
        .kernel("mma_probe")
        .unwrap_or_else(|| panic!("ptxas did not report the kernel; log:\n{}", out.log));
    assert!(k.registers > 0);
    assert_eq!(k.static_smem_bytes, 256);
    assert!(!k.spills());
    // The ELF agrees with ptxas.
    let elf = elf_kernels(cubin).unwrap();
    let e = elf.iter().find(|e| e.name == "mma_probe").unwrap();
    assert_eq!(
        (e.registers, e.stack_frame_bytes),
        (k.registers, k.stack_frame_bytes)
    );
    // SASS shows the tensor-core instruction (cuobjdump comes with install-cuda.sh).
    let sass = c
        .sass_counts(cubin)
        .expect("cuobjdump is installed")
        .unwrap();
    assert!(
        sass["mma_probe"].tensor.get("HMMA").copied().unwrap_or(0) >= 1,
        "{sass:?}"
    );
}

#[test]
fn compile_errors_keep_the_log() {
    let out = compiler(None)
        .compile(&request(
            "extern \"C\" __global__ void k() { undefined_thing(); }",
        ))
        .unwrap();
    assert!(!out.success);
    assert!(out.log.contains("undefined_thing"), "{}", out.log);
    assert!(out.cubin.is_none() && out.ptx.is_none());
}

#[test]
fn cache_hits_return_the_same_cubin() {
    let dir = tempfile::tempdir().unwrap();
    let c = compiler(Some(CompileCache::new(dir.path())));
    let first = c.compile(&request(MMA_KERNEL)).unwrap();
    let second = c.compile(&request(MMA_KERNEL)).unwrap();
    assert!(!first.cached && second.cached);
    assert_eq!(first.cubin, second.cubin);
    assert_eq!(first.kernels, second.kernels);
    // Failures are cached too, with their log.
    let bad = request("extern \"C\" __global__ void k() { nope(); }");
    assert!(!c.compile(&bad).unwrap().cached);
    let again = c.compile(&bad).unwrap();
    assert!(again.cached && !again.success && again.log.contains("nope"));
}

/// NVRTC is documented as safe to call from several threads on distinct programs; this
/// checks that concurrent compiles give byte-identical results to serial ones.
#[test]
fn concurrent_compiles_match_serial_ones() {
    let c = compiler(None);
    let requests: Vec<CompileRequest> = (0..8)
        .map(|i| request(&MMA_KERNEL.replace("% 32]", &format!("% {}]", 32 - i))))
        .collect();
    let serial: Vec<_> = requests.iter().map(|r| c.compile(r).unwrap()).collect();
    let parallel = c.compile_many(&requests, 4);
    for (s, p) in serial.iter().zip(parallel) {
        let p = p.unwrap();
        assert!(s.success && p.success);
        assert_eq!(s.cubin, p.cubin);
        assert_eq!(s.ptx, p.ptx);
        assert_eq!(s.kernels, p.kernels);
    }
}

/// The first compiles of a process, all at once (nextest runs each test in its own
/// process): every result's ptxas report must describe its CUBIN. On an H200 one such
/// compile once came back without the report; `Compiler::compile` now detects that
/// and compiles again.
#[test]
fn first_compiles_of_a_process_may_run_concurrently() {
    let c = compiler(None);
    let requests: Vec<CompileRequest> = (0..16)
        .map(|i| request(&MMA_KERNEL.replace("% 32]", &format!("% {}]", 40 - i))))
        .collect();
    for r in c.compile_many(&requests, 16) {
        let r = r.unwrap();
        assert!(r.success, "{}", r.log);
        let elf = elf_kernels(r.cubin.as_ref().unwrap()).unwrap();
        assert_eq!(elf.len(), 1);
        let reported = r.kernel(&elf[0].name).expect("kernel in the ptxas report");
        assert_eq!(reported.registers, elf[0].registers, "{}", r.log);
    }
}

/// The same CUBIN disassembled by many threads at once (a sweep compiles genomes whose
/// code is equal for some specialization): every call gets its SASS.
#[test]
fn concurrent_disassembly_of_one_cubin() {
    let c = compiler(None);
    if c.install().cuobjdump.is_none() {
        eprintln!("skipping: no cuobjdump (scripts/install-cuda.sh installs it)");
        return;
    }
    let out = c.compile(&request(MMA_KERNEL)).unwrap();
    let cubin = out.cubin.unwrap();
    std::thread::scope(|s| {
        let calls: Vec<_> = (0..16)
            .map(|_| s.spawn(|| c.sass_counts(&cubin).unwrap()))
            .collect();
        for (i, call) in calls.into_iter().enumerate() {
            let counts = call
                .join()
                .unwrap()
                .unwrap_or_else(|e| panic!("call {i}: {e}"));
            assert!(
                counts["mma_probe"].tensor["HMMA"] > 0,
                "call {i}: {counts:?}"
            );
        }
    });
}

/// A planted wgmma kernel (m64n8k16, f16): `TOUCH` 1 adds to an accumulator register between
/// two wgmma of one pipeline stage, which makes ptxas serialize them (its notice C7515); 0 is
/// the same kernel without that add.
fn wgmma_probe(touch: bool) -> String {
    format!(
        r#"
#define TOUCH {}
__device__ __forceinline__ void mma(float (&d)[4], unsigned long long a, unsigned long long b, int acc) {{
    asm volatile("{{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {{%0, %1, %2, %3}}, %4, %5, p, 1, 1, 0, 0;\n}}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "l"(a), "l"(b), "r"(acc));
}}
extern "C" __global__ void wgmma_probe(float* out, unsigned long long a, unsigned long long b) {{
    float d[4] = {{0.f, 0.f, 0.f, 0.f}};
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    mma(d, a, b, 0);
#if TOUCH
    d[0] += out[0];
#endif
    mma(d, a + 2, b + 2, 1);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    for (int i = 0; i < 4; ++i) out[threadIdx.x * 4 + i] = d[i];
}}
"#,
        touch as i32
    )
}

/// ptxas's notice of a serialized wgmma pipeline reaches the kernel's resources (which the
/// static gate rejects, `[static] allow_wgmma_serialization`), and only where ptxas gives it.
#[test]
fn a_serialized_wgmma_pipeline_is_reported() {
    let c = compiler(None);
    let serialized = c.compile(&request(&wgmma_probe(true))).unwrap();
    assert!(serialized.success, "{}", serialized.log);
    let k = serialized.kernel("wgmma_probe").unwrap();
    let why = k
        .wgmma_serialized
        .as_deref()
        .unwrap_or_else(|| panic!("no serialization notice in:\n{}", serialized.log));
    assert!(why.starts_with("due to "), "{why}");
    let plain = c.compile(&request(&wgmma_probe(false))).unwrap();
    assert!(plain.success, "{}", plain.log);
    assert_eq!(
        plain.kernel("wgmma_probe").unwrap().wgmma_serialized,
        None,
        "{}",
        plain.log
    );
}
