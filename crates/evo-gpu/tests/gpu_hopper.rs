//! The Hopper primitives (templates/common/tma.cuh, wgmma.cuh) and the tensor-map path of
//! the runtime. Without a GPU: the probe kernels compile for sm_90a with HGMMA and a TMA
//! load (UTMALDG) in their SASS, and `encode_tensor_map_tiled` refuses bad specs before
//! touching the driver. On an sm_90 GPU (skipped with the reason printed elsewhere):
//! a tensor map encoded by `Gpu::encode_tensor_map_tiled` and passed as a
//! `__grid_constant__` parameter loads a box with the 128-, 64- and 32-byte swizzles and
//! zero fill exactly where `swz_offset` says, and wgmma (shared x shared, K-major; register
//! x shared, N-major B) with each swizzle's descriptors matches a CPU product — the layouts
//! and descriptors sdpa_fwd_wgmma's SWIZZLE_BYTES knob uses.

use std::path::PathBuf;

use evo_core::LaunchDims;
use evo_gpu::runtime::{encode_tensor_map_tiled, Gpu, KernelArg};
use evo_gpu::tensor_map::{Swizzle, TensorDtype, TensorMapError, TiledSpec};
use evo_gpu::{device, CompileRequest, Compiler};
use half::f16;

fn common(name: &str) -> String {
    let manifest =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    let path = PathBuf::from(manifest)
        .join("../../templates/common")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const PROBES: &str = r#"
// TMA: one box of SW / 2 fp16 columns x 64 rows at (c0, c1), the SW-byte swizzle, into a
// 1024-aligned tile, copied out raw.
template <int SW>
__device__ void tma_probe(const evo::TmaDescriptor* map, unsigned short* out, int c0, int c1) {
    __shared__ __align__(1024) unsigned short tile[64 * 64];
    __shared__ __align__(8) unsigned long long bar;
    if (threadIdx.x == 0) {
        evo::tma_prefetch_descriptor(map);
        evo::mbar_init(&bar, 1);
        evo::fence_mbarrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        evo::mbar_arrive_expect_tx(&bar, 64 * SW);
        evo::tma_load_2d(tile, map, &bar, c0, c1);
    }
    evo::mbar_wait_parity(&bar, 0);
    for (int i = threadIdx.x; i < 64 * SW / 2; i += blockDim.x) out[i] = tile[i];
}

// wgmma, one warpgroup, at the largest sdpa_fwd_wgmma tile (head dim 128, BLOCK_N 128), with the
// SW-byte swizzle: S = A B^T (A 64 x 128 [m][k], B 128 x 128 [n][k], both K-major in swizzled
// shared memory as 128 / (SW / 2) column blocks) and O = A V (A from registers, V 128 x 128
// [k][n] N-major: LBO = 128 rows x SW bytes). Dynamic shared memory: 80 KiB + 1 KiB to align.
template <int SW>
__device__ void wgmma_probe(const __half* a, const __half* b, const __half* v, float* s_out,
                            float* o_out) {
    extern __shared__ __align__(1024) unsigned char dyn[];
    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(dyn));
    unsigned char* const sa = dyn + ((1024 - (base & 1023)) & 1023);
    unsigned char* const sb = sa + 64 * 256;
    unsigned char* const sv = sb + 128 * 256;
    const int t = threadIdx.x;
    for (int i = t; i < 64 * 128; i += 128) {
        const int r = i / 128, c = i % 128;
        *reinterpret_cast<__half*>(sa + evo::swz_offset<SW>(64, r, 2 * c)) = a[i];
    }
    for (int i = t; i < 128 * 128; i += 128) {
        const int r = i / 128, c = i % 128;
        *reinterpret_cast<__half*>(sb + evo::swz_offset<SW>(128, r, 2 * c)) = b[i];
        *reinterpret_cast<__half*>(sv + evo::swz_offset<SW>(128, r, 2 * c)) = v[i];
    }
    evo::fence_proxy_async_shared();
    __syncthreads();
    const unsigned ua = static_cast<unsigned>(__cvta_generic_to_shared(sa));
    const unsigned ub = static_cast<unsigned>(__cvta_generic_to_shared(sb));
    const unsigned uv = static_cast<unsigned>(__cvta_generic_to_shared(sv));

    float s[64];
    evo::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        const unsigned block = kk / (SW / 32), within = 32 * (kk % (SW / 32));
        evo::Wgmma<__half, 128, 0>::ss(s, evo::wgmma_desc_kmajor<SW>(ua + block * 64 * SW + within),
                                       evo::wgmma_desc_kmajor<SW>(ub + block * 128 * SW + within), kk > 0);
    }
    evo::wgmma_commit();
    evo::wgmma_wait<0>();
    evo::wgmma_fence_regs(s);

    const int w = t / 32, l = t % 32;
    const int row = 16 * w + l / 4;
    // A fragments straight from global memory (the register layout of wgmma.cuh).
    unsigned fa[8][4];
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        const int k0 = 16 * kk + 2 * (l % 4);
        const __half* r0 = a + row * 128;
        const __half* r8 = a + (row + 8) * 128;
        fa[kk][0] = evo::pack2<__half>(__half2float(r0[k0]), __half2float(r0[k0 + 1]));
        fa[kk][1] = evo::pack2<__half>(__half2float(r8[k0]), __half2float(r8[k0 + 1]));
        fa[kk][2] = evo::pack2<__half>(__half2float(r0[k0 + 8]), __half2float(r0[k0 + 9]));
        fa[kk][3] = evo::pack2<__half>(__half2float(r8[k0 + 8]), __half2float(r8[k0 + 9]));
    }
    float o[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.f;
    evo::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        evo::Wgmma<__half, 128, 1>::rs(o, fa[kk], evo::wgmma_desc_mnmajor<SW>(uv + 16 * SW * kk, 128), 1);
    }
    evo::wgmma_commit();
    evo::wgmma_wait<0>();
    evo::wgmma_fence_regs(o);

#pragma unroll
    for (int i = 0; i < 64; ++i) {
        const int r = row + 8 * ((i >> 1) & 1);
        const int c = 8 * (i >> 2) + 2 * (l % 4) + (i & 1);
        s_out[r * 128 + c] = s[i];
        o_out[r * 128 + c] = o[i];
    }
}

#define EVO_PROBES(SW)                                                                              \
    extern "C" __global__ void tma_probe_##SW(const __grid_constant__ evo::TmaDescriptor map,        \
                                              unsigned short* out, int c0, int c1) {               \
        tma_probe<SW>(&map, out, c0, c1);                                                           \
    }                                                                                               \
    extern "C" __global__ void __launch_bounds__(128, 1)                                            \
    wgmma_probe_##SW(const __half* a, const __half* b, const __half* v, float* s_out, float* o_out) { \
        wgmma_probe<SW>(a, b, v, s_out, o_out);                                                     \
    }
EVO_PROBES(128)
EVO_PROBES(64)
EVO_PROBES(32)
"#;

fn source() -> String {
    format!(
        "{}\n{}\n{}\n{}",
        common("mbarrier.cuh"),
        common("tma.cuh"),
        common("wgmma.cuh"),
        PROBES
    )
}

fn compile(arch: &str) -> evo_gpu::Compiled {
    let c = Compiler::new(arch, &["-std=c++17".to_string()], 0, None).unwrap_or_else(|e| {
        panic!("NVRTC is required for these tests (run scripts/install-cuda.sh): {e}")
    });
    let out = c
        .compile(&CompileRequest {
            name: "hopper_probes.cu".into(),
            source: source(),
        })
        .unwrap();
    assert!(out.success, "{}", out.log);
    out
}

#[test]
fn probes_compile_for_sm_90a_with_hgmma_and_tma() {
    let out = compile("sm_90a");
    for sw in SWIZZLES {
        for k in [format!("tma_probe_{sw}"), format!("wgmma_probe_{sw}")] {
            let r = out
                .kernel(&k)
                .unwrap_or_else(|| panic!("no {k}: {}", out.log));
            assert!(!r.spills(), "{k} spills");
        }
    }
    let c = Compiler::new("sm_90a", &[], 0, None).unwrap();
    match c.sass_counts(out.cubin.as_deref().unwrap()) {
        Some(Ok(sass)) => {
            for sw in SWIZZLES {
                let w = &sass[&format!("wgmma_probe_{sw}")];
                assert!(w.tensor.get("HGMMA").copied().unwrap_or(0) >= 8, "{w:?}");
            }
            let tool = c.install().cuobjdump.clone().expect("cuobjdump");
            let text =
                evo_gpu::resources::disassemble(&tool, out.cubin.as_deref().unwrap()).unwrap();
            assert!(
                text.contains("UTMALDG"),
                "no TMA load in the SASS of tma_probe"
            );
        }
        Some(Err(e)) => panic!("cuobjdump failed: {e}"),
        None => println!("no cuobjdump: SASS not checked"),
    }
}

#[test]
fn encode_refuses_bad_specs_before_the_driver() {
    // No GPU or driver needed: validation runs first.
    let spec = TiledSpec {
        dtype: TensorDtype::F16,
        address: 0x1000,
        dims: vec![128, 100],
        strides_bytes: vec![250],
        box_dims: vec![64, 64],
        swizzle: Swizzle::B128,
    };
    assert!(matches!(
        encode_tensor_map_tiled(&spec),
        Err(TensorMapError::Stride {
            index: 1,
            value: 250
        })
    ));
}

fn sm90_gpu() -> Option<Gpu> {
    match device::probe() {
        Ok(info) => match info.devices.first() {
            Some(d) if d.compute_capability.0 == 9 => Some(Gpu::open(0).expect("GPU 0")),
            Some(d) => {
                println!(
                    "skipping: GPU 0 is sm_{}{}, TMA/wgmma need sm_90",
                    d.compute_capability.0, d.compute_capability.1
                );
                None
            }
            None => {
                println!("skipping: the driver sees no GPU");
                None
            }
        },
        Err(e) => {
            println!("skipping: no GPU ({e})");
            None
        }
    }
}

/// The swizzle spans the probes are built for (bytes).
const SWIZZLES: [usize; 3] = [128, 64, 32];

/// Byte offset of fp16 element (r, c) in a tile of `rows` rows with the `sw`-byte swizzle
/// (common/wgmma.cuh's swz_offset, written out independently).
fn swz_offset(sw: usize, rows: usize, r: usize, c: usize) -> usize {
    let b = 2 * c;
    let (block, in_row) = (b / sw, b % sw);
    let phase = (r / (128 / sw)) % (sw / 16);
    block * rows * sw + r * sw + (((in_row / 16) ^ phase) * 16) + in_row % 16
}

fn swizzle(sw: usize) -> Swizzle {
    match sw {
        128 => Swizzle::B128,
        64 => Swizzle::B64,
        32 => Swizzle::B32,
        _ => unreachable!(),
    }
}

#[test]
fn tma_box_lands_swizzled_with_zero_fill_on_the_gpu() {
    let Some(gpu) = sm90_gpu() else { return };
    let out = compile("sm_90a");
    let module = gpu.load_module(out.cubin.as_deref().unwrap()).unwrap();
    let (rows, cols) = (100usize, 128usize);
    let value = |r: usize, c: usize| (r * cols + c) as u16 + 1;
    let host: Vec<u8> = (0..rows * cols)
        .flat_map(|i| value(i / cols, i % cols).to_le_bytes())
        .collect();
    let buf = gpu.alloc(host.len()).unwrap();
    gpu.upload(&buf, &host).unwrap();
    let dev_out = gpu.alloc(64 * 64 * 2).unwrap();
    for sw in SWIZZLES {
        let f = module.function(&format!("tma_probe_{sw}")).unwrap();
        let box_cols = sw / 2;
        let map = gpu
            .encode_tensor_map_tiled(&TiledSpec {
                dtype: TensorDtype::F16,
                address: buf.ptr(),
                dims: vec![cols as u64, rows as u64],
                strides_bytes: vec![(cols * 2) as u64],
                box_dims: vec![box_cols as u32, 64],
                swizzle: swizzle(sw),
            })
            .unwrap();
        assert!(map.0.iter().any(|&b| b != 0), "driver wrote an empty map");
        // Box at column 64, row 64: rows 64..99 exist, 100..127 are out of bounds (zero).
        let (c0, c1) = (64usize, 64usize);
        let dims = LaunchDims {
            grid: [1, 1, 1],
            block: [128, 1, 1],
            shared_bytes: 0,
        };
        gpu.launch(
            &f,
            &dims,
            &[
                KernelArg::TensorMap(map),
                KernelArg::Ptr(dev_out.ptr()),
                KernelArg::I32(c0 as i32),
                KernelArg::I32(c1 as i32),
            ],
        )
        .unwrap();
        gpu.synchronize().unwrap();
        let raw = gpu.download(&dev_out).unwrap();
        let got = |off: usize| u16::from_le_bytes([raw[off], raw[off + 1]]);
        let mut wrong = Vec::new();
        for r in 0..64 {
            for c in 0..box_cols {
                let (gr, gc) = (c1 + r, c0 + c);
                let want = if gr < rows { value(gr, gc) } else { 0 };
                let have = got(swz_offset(sw, 64, r, c));
                if have != want {
                    wrong.push((r, c, have, want));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "{sw}-byte swizzle: {} of {} elements misplaced, first (r, c, got, want): {:?}",
            wrong.len(),
            64 * box_cols,
            &wrong[..wrong.len().min(8)]
        );
        println!(
            "TMA box, {sw}-byte swizzle: {} elements placed as swz_offset says, rows past 100 zero-filled",
            64 * box_cols
        );
    }
}

#[test]
fn wgmma_matches_the_cpu_on_the_gpu() {
    let Some(gpu) = sm90_gpu() else { return };
    let out = compile("sm_90a");
    let module = gpu.load_module(out.cubin.as_deref().unwrap()).unwrap();
    // Small integers / 4: exact in fp16 and in the f32 sums.
    let gen = |seed: usize, len: usize| -> Vec<f32> {
        (0..len)
            .map(|i| (((i * 7 + seed * 13) % 9) as f32 - 4.0) / 4.0)
            .collect()
    };
    let (a, b, v) = (gen(1, 64 * 128), gen(2, 128 * 128), gen(3, 128 * 128));
    let bytes = |x: &[f32]| -> Vec<u8> {
        x.iter()
            .flat_map(|&e| f16::from_f32(e).to_bits().to_le_bytes())
            .collect()
    };
    let bufs: Vec<_> = [&a, &b, &v]
        .iter()
        .map(|x| {
            let d = gpu.alloc(x.len() * 2).unwrap();
            gpu.upload(&d, &bytes(x)).unwrap();
            d
        })
        .collect();
    for sw in SWIZZLES {
        let s_out = gpu.alloc(64 * 128 * 4).unwrap();
        let o_out = gpu.alloc(64 * 128 * 4).unwrap();
        let f = module.function(&format!("wgmma_probe_{sw}")).unwrap();
        let smem = (64 + 128 + 128) * 256 + 1024;
        f.set_max_dynamic_smem(smem).unwrap();
        let dims = LaunchDims {
            grid: [1, 1, 1],
            block: [128, 1, 1],
            shared_bytes: smem,
        };
        gpu.launch(
            &f,
            &dims,
            &[
                KernelArg::Ptr(bufs[0].ptr()),
                KernelArg::Ptr(bufs[1].ptr()),
                KernelArg::Ptr(bufs[2].ptr()),
                KernelArg::Ptr(s_out.ptr()),
                KernelArg::Ptr(o_out.ptr()),
            ],
        )
        .unwrap();
        gpu.synchronize().unwrap();
        let floats = |raw: Vec<u8>| -> Vec<f32> {
            raw.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        let s = floats(gpu.download(&s_out).unwrap());
        let o = floats(gpu.download(&o_out).unwrap());
        let mut bad_s = 0;
        let mut bad_o = 0;
        for m in 0..64 {
            for n in 0..128 {
                let ws: f32 = (0..128).map(|k| a[m * 128 + k] * b[n * 128 + k]).sum();
                let wo: f32 = (0..128).map(|k| a[m * 128 + k] * v[k * 128 + n]).sum();
                bad_s += usize::from((s[m * 128 + n] - ws).abs() > 1e-3);
                bad_o += usize::from((o[m * 128 + n] - wo).abs() > 1e-3);
            }
        }
        assert_eq!(
            (bad_s, bad_o),
            (0, 0),
            "{sw}-byte swizzle: wrong elements of S = A B^T (shared x shared) and O = A V (registers x shared, N-major)"
        );
        println!("wgmma, {sw}-byte swizzle: S = A B^T and O = A V exact on 64 x 128 x 128");
    }
}
