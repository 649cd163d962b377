//! The artifact's files besides the kernels: fixed text that reads `manifest.json`
//! (`evo_kernel.py`, the PyTorch op; `bench.py` with `sdpa_bench.py`, its timing against
//! every SDPA backend; `example.cpp`, a C++ program over `kernel.h`) and generated text
//! (`kernel.h`: launch rule and argument packing per variant, in C++; `README.md`).

use std::fmt::Write as _;

use anyhow::{anyhow, bail, Result};
use evo_core::{Genome, Value};
use evo_kernels::harness::MappedBuffer;

use crate::manifest::{LaunchArg, Manifest, ScratchText, Variant};

/// The PyTorch binding; it reads everything it needs from `manifest.json` beside it.
pub const EVO_KERNEL_PY: &str = include_str!("evo_kernel.py");

/// `python3 DIR/bench.py`: the artifact against every SDPA backend, eager and in CUDA
/// graphs, on the manifest's shapes.
pub const BENCH_PY: &str = include_str!("bench.py");

/// The timing method bench.py uses, the one of evo's timing gate: the repository's
/// `scripts/sdpa_bench.py`, copied so that the artifact stands alone.
pub const SDPA_BENCH_PY: &str = include_str!("../../../scripts/sdpa_bench.py");

/// A C++ program over `kernel.h`: a variant on a small shape against a CPU reference.
pub const EXAMPLE_CPP: &str = include_str!("example.cpp");

/// The fixed files every artifact holds, by file name.
pub fn fixed_files() -> [(&'static str, &'static str); 4] {
    [
        ("evo_kernel.py", EVO_KERNEL_PY),
        ("bench.py", BENCH_PY),
        ("sdpa_bench.py", SDPA_BENCH_PY),
        ("example.cpp", EXAMPLE_CPP),
    ]
}

fn c_param(kind: &str, name: &str) -> String {
    match kind {
        "pointer" => format!("CUdeviceptr {name}"),
        "i32" => format!("int {name}"),
        "i64" => format!("long long {name}"),
        _ => format!("float {name}"),
    }
}

/// `CUtensorMapDataType` of an artifact element type.
fn c_tensor_map_dtype(elem: &str) -> Result<&'static str> {
    Ok(match elem {
        "f16" => "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
        "bf16" => "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
        "f32" => "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
        "e4m3" | "u8" => "CU_TENSOR_MAP_DATA_TYPE_UINT8",
        other => bail!("no CUtensorMapDataType for element type `{other}`"),
    })
}

/// `kernel.h`: per variant, its CUBIN file and kernel names, `launch_dims(kernel,
/// shape)` from the launch rules, `workspace_bytes(shape)` (scratch) and
/// `launch(functions, stream, ABI arguments..., workspace)`, which encodes the tensor
/// maps and launches every kernel in order; then `variants[]`, every variant with its
/// specialization, for picking one at run time.
pub(crate) fn kernel_h(m: &Manifest) -> Result<String> {
    let mut h = String::new();
    let first = &m.variants[0];
    let shape_params: Vec<String> = m
        .shape_vars
        .iter()
        .map(|s| format!("long long {s}"))
        .collect();
    // Each run-time shape variable is passed to the kernel as the ABI parameter of the
    // same name in lower case (BATCH -> batch).
    for s in &m.shape_vars {
        if !m
            .abi
            .params
            .iter()
            .any(|p| p.name == s.to_lowercase() && p.kind == "i32")
        {
            bail!(
                "problem {}: shape variable {s} is not an int ABI parameter `{}`",
                m.problem,
                s.to_lowercase()
            );
        }
    }
    let abi_params: Vec<String> = m
        .abi
        .params
        .iter()
        .map(|p| c_param(&p.kind, &p.name))
        .collect();
    let shape_args = m
        .shape_vars
        .iter()
        .map(|s| s.to_lowercase())
        .collect::<Vec<_>>()
        .join(", ");
    writeln!(
        h,
        "// kernel.h: C/C++ launch helper for the evo artifact in this folder (written by evo export {}).\n\
         // Problem {}, famil{} {}, run{} {}. manifest.json has the measurements; README.md the details.\n\
         //\n\
         // Usage (CUDA driver API, link with -lcuda):\n\
         //   namespace v = evo_artifact::{v};\n\
         //   CUmodule mod; cuModuleLoad(&mod, v::cubin);   // path relative to this folder\n\
         //   CUfunction fns[v::num_kernels];\n\
         //   for (int i = 0; i < v::num_kernels; ++i) cuModuleGetFunction(&fns[i], mod, v::kernels[i]);\n\
         //   // scratch: v::workspace_bytes({shape}) bytes of device memory (0: pass 0)\n\
         //   v::launch(fns, stream, {args}, workspace);\n\
         //\n\
         // Kernel ABI:\n//   {}",
        m.evo_version,
        m.problem,
        if families(m).len() == 1 { "y" } else { "ies" },
        families(m).join(", "),
        if m.sources.len() == 1 { "" } else { "s" },
        m.sources
            .iter()
            .map(|s| s.run.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        m.abi.text.replace('\n', "\n//   "),
        v = first.name,
        shape = shape_args,
        args = m
            .abi
            .params
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
    )?;
    h.push_str(
        "#pragma once\n#include <cuda.h>\n\nnamespace evo_artifact {\n\n\
         struct LaunchDims {\n    unsigned grid[3];\n    unsigned block[3];\n    unsigned shared_bytes;\n};\n\n\
         // The functions launch rules may use (integer arithmetic, as evo evaluates them).\n\
         inline long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }\n\
         inline long long round_up(long long a, long long b) { return ceil_div(a, b) * b; }\n\
         inline long long min(long long a, long long b) { return a < b ? a : b; }\n\
         inline long long max(long long a, long long b) { return a > b ? a : b; }\n\n\
         // A tiled tensor map over a tensor of dims[0..rank) elements (innermost first), contiguous or\n\
         // (strides: rank - 1 entries, in elements) with the caller's strides for the dimensions after\n\
         // the first: no interleave, element strides 1, L2 promotion 128 B, out-of-bounds elements read\n\
         // as zero.\n\
         inline CUresult encode_tensor_map(CUtensorMap* map, CUtensorMapDataType dtype, CUdeviceptr address,\n\
         \x20                                 unsigned rank, const cuuint64_t* dims, unsigned elem_bytes,\n\
         \x20                                 const cuuint32_t* box, CUtensorMapSwizzle swizzle,\n\
         \x20                                 const long long* strides_elems = nullptr) {\n\
         \x20   cuuint64_t strides[4];\n\
         \x20   cuuint64_t stride = elem_bytes;\n\
         \x20   for (unsigned i = 0; i + 1 < rank; ++i) {\n\
         \x20       stride *= dims[i];\n\
         \x20       if (strides_elems && strides_elems[i] < 0) return CUDA_ERROR_INVALID_VALUE;\n\
         \x20       strides[i] = strides_elems ? (cuuint64_t)strides_elems[i] * elem_bytes : stride;\n\
         \x20   }\n\
         \x20   const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};\n\
         \x20   return cuTensorMapEncodeTiled(map, dtype, rank, reinterpret_cast<void*>(address), dims, strides, box,\n\
         \x20                                 element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,\n\
         \x20                                 CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);\n\
         }\n\n\
         // A kernel compiled with a thread-block cluster of more than 8 CTAs launches only with the\n\
         // non-portable cluster permission (sm_90: up to 16). A GPU or driver without clusters\n\
         // refuses the query: nothing to allow.\n\
         inline CUresult allow_compiled_cluster(CUfunction fn) {\n\
         \x20   int ctas = 1;\n\
         \x20   const CUfunction_attribute dims[3] = {CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH,\n\
         \x20                                         CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT,\n\
         \x20                                         CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH};\n\
         \x20   for (CUfunction_attribute a : dims) {\n\
         \x20       int v = 0;\n\
         \x20       if (cuFuncGetAttribute(&v, a, fn) != CUDA_SUCCESS) return CUDA_SUCCESS;\n\
         \x20       ctas *= v > 0 ? v : 0;\n\
         \x20   }\n\
         \x20   return ctas > 8 ? cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1) : CUDA_SUCCESS;\n\
         }\n",
    );
    writeln!(
        h,
        "\n// Whether the variants compute through FP8 e4m3 from DTYPE inputs (problem sdpa_fwd_fp8_e2e):\n\
         // example.cpp then holds them to the gates' end-to-end bound, not to DTYPE rounding.\n\
         constexpr bool through_fp8 = {};",
        m.problem == "sdpa_fwd_fp8_e2e"
    )?;
    writeln!(
        h,
        "\n// Dispatch ({}): {}",
        m.dispatch.mode, m.dispatch.rule
    )?;
    // The entries evo_kernel.py defers to PyTorch's SDPA: C++ has no SDPA to fall back to,
    // so kernel.h keeps their variants (said here, where a C++ reader picks variants).
    let marked: Vec<String> = m
        .dispatch
        .table
        .iter()
        .filter_map(|e| {
            e.defer.map(|b| {
                format!(
                    "//   {} -> {} (PyTorch's SDPA {:.2} us, the variant {:.2} us)",
                    e.key_text(),
                    e.variant,
                    b.baseline_us,
                    b.variant_us
                )
            })
        })
        .collect();
    if !marked.is_empty() {
        writeln!(
            h,
            "// On these shapes the run measured the variant less than {}x faster than PyTorch's SDPA, and\n\
             // evo_kernel.py calls PyTorch's SDPA instead (manifest.json: dispatch entries marked `defer`).\n\
             // C++ has no SDPA to fall back to: the variants below serve these shapes too.\n{}",
            m.dispatch.min_speedup.unwrap_or(1.0),
            marked.join("\n")
        )?;
    }
    // The variables every expression of a variant may read, as C++ constants.
    let bind = |v: &Variant, from_abi: bool| -> String {
        let mut b = String::new();
        for (name, value) in &v.constants {
            let _ = writeln!(b, "    const long long {name} = {value};");
        }
        for s in &m.shape_vars {
            if from_abi {
                let _ = writeln!(b, "    const long long {s} = {};", s.to_lowercase());
            }
        }
        for name in v.constants.keys().chain(&m.shape_vars) {
            let _ = writeln!(b, "    (void){name};");
        }
        b
    };
    for v in &m.variants {
        writeln!(
            h,
            "\n// {}: {} genome {} [{}]",
            v.name,
            Genome::from_vars(v.specialization.clone()).canonical(),
            v.genome,
            v.genome_hash
        )?;
        writeln!(h, "namespace {} {{", v.name)?;
        writeln!(h, "constexpr const char* cubin = \"{}\";", v.cubin_file)?;
        writeln!(h, "constexpr int num_kernels = {};", v.launches.len())?;
        writeln!(
            h,
            "constexpr const char* kernels[num_kernels] = {{{}}};",
            v.launches
                .iter()
                .map(|l| format!("\"{}\"", l.kernel))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        writeln!(
            h,
            "// The launch rule of kernels[kernel].\n\
             inline LaunchDims launch_dims(int kernel, {}) {{",
            shape_params.join(", ")
        )?;
        h.push_str(&bind(v, false));
        h.push_str("    switch (kernel) {\n");
        let dim = |e: &String| format!("(unsigned)({e})");
        for (i, l) in v.launches.iter().enumerate() {
            writeln!(
                h,
                "    case {i}: return LaunchDims{{{{{}}}, {{{}}}, {}}};",
                l.grid.iter().map(dim).collect::<Vec<_>>().join(", "),
                l.block.iter().map(dim).collect::<Vec<_>>().join(", "),
                dim(&l.shared_bytes)
            )?;
        }
        h.push_str("    default: return LaunchDims{{0, 0, 0}, {0, 0, 0}, 0};\n    }\n}\n");
        // Scratch buffers lie in one workspace, each at a 256-byte aligned offset.
        let elem_bytes = |e: &str| -> Result<u32> {
            Ok(match e {
                "f16" | "bf16" => 2,
                "f32" => 4,
                "e4m3" | "u8" => 1,
                other => bail!("scratch of element type `{other}`"),
            })
        };
        writeln!(
            h,
            "// Bytes of device memory launch() needs as `workspace` (its scratch buffers).\n\
             inline unsigned long long workspace_bytes({}) {{",
            shape_params.join(", ")
        )?;
        h.push_str(&bind(v, false));
        h.push_str("    unsigned long long bytes = 0;\n");
        // Each buffer at a 256-byte aligned offset: the same sum launch() walks.
        let padded = |s: &ScratchText| -> Result<String> {
            Ok(format!(
                "(unsigned long long)round_up(({}) * {}, 256)",
                s.len,
                elem_bytes(&s.elem)?
            ))
        };
        for s in &v.scratch {
            writeln!(h, "    bytes += {};  // {}", padded(s)?, s.name)?;
        }
        h.push_str("    return bytes;\n}\n");
        writeln!(
            h,
            "// Launches kernels[0..num_kernels) (`fns[i]` loaded from this variant's CUBIN) on `stream`;\n\
             // `workspace`: workspace_bytes() bytes of device memory, 256-byte aligned (0 when that is 0).\n\
             inline CUresult launch(const CUfunction* fns, CUstream stream, {}, CUdeviceptr workspace) {{",
            abi_params.join(", ")
        )?;
        h.push_str(&bind(v, true));
        h.push_str("    (void)workspace;\n    CUresult r = CUDA_SUCCESS;\n    unsigned long long offset = 0;\n    (void)offset;\n");
        for s in &v.scratch {
            writeln!(
                h,
                "    const CUdeviceptr scratch_{} = workspace + offset;\n    offset += {};",
                s.name,
                padded(s)?
            )?;
        }
        for (i, l) in v.launches.iter().enumerate() {
            writeln!(h, "    {{  // {}", l.kernel)?;
            writeln!(
                h,
                "        const LaunchDims d = launch_dims({i}, {shape_args});\n\
                 \x20       r = allow_compiled_cluster(fns[{i}]);\n\
                 \x20       if (r != CUDA_SUCCESS) return r;\n\
                 \x20       if (d.shared_bytes > 48 * 1024) {{\n\
                 \x20           r = cuFuncSetAttribute(fns[{i}], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)d.shared_bytes);\n\
                 \x20           if (r != CUDA_SUCCESS) return r;\n\
                 \x20       }}"
            )?;
            let mut refs = Vec::new();
            match &l.args {
                None => refs.extend(m.abi.params.iter().map(|p| format!("(void*)&{}", p.name))),
                Some(args) => {
                    for (j, a) in args.iter().enumerate() {
                        match a {
                            LaunchArg::Param(name) => refs.push(format!("(void*)&{name}")),
                            LaunchArg::Scratch(name) => {
                                refs.push(format!("(void*)&scratch_{name}"))
                            }
                            LaunchArg::I32(e) => {
                                writeln!(h, "        int a{j} = (int)({e});")?;
                                refs.push(format!("&a{j}"));
                            }
                            LaunchArg::I64(e) => {
                                writeln!(h, "        long long a{j} = (long long)({e});")?;
                                refs.push(format!("&a{j}"));
                            }
                            LaunchArg::TensorMap(t) => {
                                let address =
                                    match t.buffer().map_err(|e| anyhow!("{}: {e}", v.name))? {
                                        (MappedBuffer::Input, param) => param.to_string(),
                                        (MappedBuffer::Scratch, name) => format!("scratch_{name}"),
                                    };
                                let strides = if t.strides.is_empty() {
                                    String::new()
                                } else {
                                    writeln!(
                                        h,
                                        "        const long long strides{j}[] = {{{}}};",
                                        t.strides
                                            .iter()
                                            .map(|p| format!("(long long)({p})"))
                                            .collect::<Vec<_>>()
                                            .join(", ")
                                    )?;
                                    format!(", strides{j}")
                                };
                                writeln!(
                                    h,
                                    "        const cuuint64_t dims{j}[] = {{{}}};\n\
                                     \x20       const cuuint32_t box{j}[] = {{{}}};\n\
                                     \x20       CUtensorMap a{j};\n\
                                     \x20       r = encode_tensor_map(&a{j}, {}, {}, {}, dims{j}, {}, box{j}, CU_TENSOR_MAP_SWIZZLE_{}{strides});\n\
                                     \x20       if (r != CUDA_SUCCESS) return r;",
                                    t.dims.iter().map(|e| format!("(cuuint64_t)({e})")).collect::<Vec<_>>().join(", "),
                                    t.box_dims.iter().map(|e| format!("(cuuint32_t)({e})")).collect::<Vec<_>>().join(", "),
                                    c_tensor_map_dtype(&t.elem)?,
                                    address,
                                    t.dims.len(),
                                    elem_bytes(&t.elem)?,
                                    match t.swizzle_bytes {
                                        0 => "NONE",
                                        32 => "32B",
                                        64 => "64B",
                                        128 => "128B",
                                        other => bail!("swizzle of {other} bytes"),
                                    }
                                )?;
                                refs.push(format!("&a{j}"));
                            }
                        }
                    }
                }
            }
            writeln!(
                h,
                "        void* args[] = {{{}}};\n\
                 \x20       r = cuLaunchKernel(fns[{i}], d.grid[0], d.grid[1], d.grid[2], d.block[0], d.block[1], d.block[2],\n\
                 \x20                          d.shared_bytes, stream, args, nullptr);\n\
                 \x20       if (r != CUDA_SUCCESS) return r;\n    }}",
                refs.join(", ")
            )?;
        }
        h.push_str("    return r;\n}\n");
        writeln!(h, "}}  // namespace {}", v.name)?;
    }
    h.push_str(&variant_table(m, &shape_params, &abi_params)?);
    h.push_str("\n}  // namespace evo_artifact\n");
    Ok(h)
}

/// The families of a manifest's variants, in order of appearance.
fn families(m: &Manifest) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for v in &m.variants {
        if !out.contains(&v.family.as_str()) {
            out.push(&v.family);
        }
    }
    out
}

/// `struct Variant` and `variants[]`: each variant's name, CUBIN, specialization (one
/// field per spec variable, in lower case: `dtype`, `head_dim`, `causal`) and pointers
/// to its `workspace_bytes` and `launch`, so a program picks a variant at run time.
fn variant_table(m: &Manifest, shape_params: &[String], abi_params: &[String]) -> Result<String> {
    let mut h = String::new();
    let fields: Vec<(String, &str)> = m
        .spec_vars
        .iter()
        .map(|name| {
            let ty = match m.variants[0].specialization.get(name) {
                Some(Value::Int(_)) => "long long",
                Some(Value::Bool(_)) => "bool",
                Some(Value::Str(_)) => "const char*",
                None => bail!("variant {} has no {name}", m.variants[0].name),
            };
            Ok((name.to_lowercase(), ty))
        })
        .collect::<Result<_>>()?;
    h.push_str("\n// Every variant, for picking one at run time (example.cpp does).\nstruct Variant {\n    const char* name;\n    const char* cubin;\n");
    for (field, ty) in &fields {
        writeln!(h, "    {ty} {field};")?;
    }
    writeln!(
        h,
        "    int num_kernels;\n    const char* const* kernels;\n    \
         unsigned long long (*workspace_bytes)({});\n    \
         CUresult (*launch)(const CUfunction* fns, CUstream stream, {}, CUdeviceptr workspace);\n}};",
        shape_params.join(", "),
        abi_params.join(", ")
    )?;
    writeln!(h, "constexpr int num_variants = {};", m.variants.len())?;
    h.push_str("inline const Variant variants[num_variants] = {\n");
    for v in &m.variants {
        let mut values = Vec::new();
        for name in &m.spec_vars {
            values.push(match v.specialization.get(name) {
                Some(Value::Int(i)) => format!("{i}"),
                Some(Value::Bool(b)) => format!("{b}"),
                Some(Value::Str(s)) => format!("\"{s}\""),
                None => bail!("variant {} has no {name}", v.name),
            });
        }
        writeln!(
            h,
            "    {{\"{n}\", {n}::cubin, {}, {n}::num_kernels, {n}::kernels, &{n}::workspace_bytes, &{n}::launch}},",
            values.join(", "),
            n = v.name
        )?;
    }
    h.push_str("};\n");
    Ok(h)
}

/// `README.md`: what the artifact is, how to call it, and its numbers.
pub fn readme(m: &Manifest) -> String {
    let mut r = String::new();
    let problem = evo_kernels::problem(&m.problem);
    let _ = writeln!(
        r,
        "# evo artifact: {} ({})\n\n\
         Exported by evo {} from run{} {} (searched on {}, {}; compiled by NVRTC {} for {}).\n\
         Kernels that passed every correctness gate of the search; `manifest.json` has the\n\
         genomes, the launch rule, the measured times and errors per shape, and the SHA-256\n\
         of every file.\n",
        m.problem,
        families(m).join(", "),
        m.evo_version,
        if m.sources.len() == 1 { "" } else { "s" },
        m.sources
            .iter()
            .map(|s| format!("`{}`", s.run))
            .collect::<Vec<_>>()
            .join(", "),
        m.device.as_deref().unwrap_or("an unknown GPU"),
        m.driver.as_deref().unwrap_or("unknown driver"),
        m.nvrtc_version,
        m.arch
    );
    let specs: Vec<String> = m
        .dispatch
        .table
        .iter()
        .map(|e| Genome::from_vars(e.specialization.clone()).canonical())
        .fold(Vec::new(), |mut acc, s| {
            if !acc.contains(&s) {
                acc.push(s);
            }
            acc
        });
    let _ = writeln!(
        r,
        "## Use it from PyTorch\n\n\
         Needs PyTorch (2.4 or newer for torch.compile) and the CUDA driver only (no evo, no\n\
         compiler). The signature is `torch.nn.functional.scaled_dot_product_attention`'s:\n\n\
         ```python\n\
         import sys; sys.path.insert(0, \"/path/to/this/folder\")\n\
         import evo_kernel\n\
         o = evo_kernel.scaled_dot_product_attention(q, k, v, is_causal=True)  # (batch, heads, seq, head_dim) CUDA tensors\n\
         print(evo_kernel.stats())   # calls served by the artifact's kernels, and fallbacks to PyTorch by reason\n\
         ```\n\n\
         The kernels cover {}. Every other call (a mask, dropout, grouped-query heads,\n\
         another dtype or head dim, inputs that require grad, ...) goes to PyTorch's own\n\
         `scaled_dot_product_attention` with the same arguments and is counted by reason in\n\
         `evo_kernel.stats()`; `evo_kernel.set_strict(True)` or `EVO_KERNEL_STRICT=1` raises\n\
         `evo_kernel.FallbackError` naming the reason instead. A call is planned once per\n\
         (device, dtype, shapes, strides, causal, scale) and then costs a dictionary look-up, the\n\
         output allocation and the driver launch on PyTorch's current stream. It is also the\n\
         torch op `evo_kernel.OP` (`torch.ops.evo.*`, with a fake implementation), so\n\
         `torch.compile(fullgraph=True)` and CUDA-graph capture take it. In a Hugging Face model:\n\n\
         ```python\n\
         evo_kernel.register_transformers()   # registers attn_implementation=\"evo\"\n\
         model = AutoModelForCausalLM.from_pretrained(..., attn_implementation=\"evo\")\n\
         ```\n\n\
         `python3 bench.py` (in this folder) times it against every PyTorch SDPA backend, eager\n\
         and in CUDA graphs, on the manifest's shapes.\n",
        specs.join("; ")
    );
    let _ = writeln!(
        r,
        "## From C or C++\n\n\
         `kernel.h` has, per variant, the CUBIN's file name and kernel names, `launch_dims(i, ...)`\n\
         (kernel i's launch rule), `workspace_bytes(...)` (its scratch buffers) and\n\
         `launch(fns, stream, ..., workspace)`, which takes the arguments in ABI order, encodes\n\
         any TMA tensor maps and launches every kernel in order; `variants[]` lists them with\n\
         their specializations. `example.cpp` runs a variant on a small shape against a CPU\n\
         reference and times it:\n\n\
         ```sh\n\
         g++ -std=c++17 -O2 -I. -I$CUDA_HOME/include example.cpp -o example -lcuda && ./example . [VARIANT]\n\
         ```\n\n\
         The kernel ABI:\n\n\
         ```\n{}\n```\n",
        m.abi.text
    );
    let _ = writeln!(
        r,
        "## Kernels\n\n\
         Dispatch ({}): {}\n\n\
         | variant | family (run) | specialization | genome | files |\n|---|---|---|---|---|",
        m.dispatch.mode, m.dispatch.rule
    );
    for v in &m.variants {
        let _ = writeln!(
            r,
            "| {} | {} ({}) | {} | `{}` [{}] | {}, {}, {} |",
            v.name,
            v.family,
            v.run,
            Genome::from_vars(v.specialization.clone()).canonical(),
            v.genome,
            v.genome_hash,
            v.source_file,
            v.ptx_file,
            v.cubin_file
        );
    }
    if m.dispatch.mode == "per_shape" {
        let _ = writeln!(
            r,
            "\n| shape | variant | evo_kernel.py runs |\n|---|---|---|"
        );
        for e in &m.dispatch.table {
            let _ = writeln!(
                r,
                "| {} | {} | {} |",
                e.key_text(),
                e.variant,
                e.defer.map_or("the variant".into(), |b| format!(
                    "PyTorch's SDPA ({:.2} µs; the variant {:.2} µs)",
                    b.baseline_us, b.variant_us
                ))
            );
        }
        let marked = m.dispatch.deferred();
        let _ = writeln!(
            r,
            "\n{}",
            match m.dispatch.min_speedup {
                Some(min) if min > 0.0 && marked > 0 => format!(
                    "On {marked} shape{} the run measured evo's fastest variant less than {min}x faster than\n\
                     PyTorch's SDPA (or slower): `evo_kernel.py` calls PyTorch's SDPA there, and for calls whose\n\
                     nearest searched shape is one of them (fallback reason `slower` in `evo_kernel.stats()`), so\n\
                     it does not make a PyTorch user slower than PyTorch where the search measured both. `kernel.h`\n\
                     has no SDPA to fall back to: C++ callers keep the variant on those shapes.",
                    if marked == 1 { "" } else { "s" }
                ),
                Some(min) if min <= 0.0 => "Exported with `--keep-slower`: `evo_kernel.py` runs evo's kernels on every shape,\n\
                     including any where the run measured PyTorch's SDPA faster."
                    .into(),
                Some(min) => format!(
                    "On every shape evo's variant was at least {min}x faster than the run's PyTorch\n\
                     baseline (where it had one)."
                ),
                None => "No dispatch entry is marked to defer to PyTorch's SDPA.".into(),
            }
        );
    }
    let _ = writeln!(
        r,
        "\n## Measured by the search\n\n| variant | shape | median µs | p20–p80 µs | TFLOP/s | max abs err | rel L2 |\n|---|---|---|---|---|---|---|"
    );
    for v in &m.variants {
        for s in v.shapes.iter().filter(|s| s.timed) {
            let shape = match problem {
                Some(p) => p.shape_text(&s.shape),
                None => Genome::from_vars(s.shape.clone()).canonical(),
            };
            let f = |x: Option<f64>, p: usize| x.map_or("-".into(), |x| format!("{x:.p$}"));
            let e = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.1e}"));
            let _ = writeln!(
                r,
                "| {} | {} | {} | {}–{} | {} | {} | {} |",
                v.name,
                shape,
                f(s.median_us, 2),
                f(s.p20_us, 2),
                f(s.p80_us, 2),
                f(s.tflops, 1),
                e(s.max_abs_err),
                e(s.rel_l2)
            );
        }
    }
    let _ = writeln!(
        r,
        "\n## Check it\n\n\
         `evo verify <this folder>` checks every SHA-256 and that every kernel source is what its\n\
         genome renders to, then re-runs the correctness gates and the timing on the current GPU\n\
         and compares with the numbers above (a different GPU, driver or NVRTC is reported).\n\
         `python3 bench.py` compares it with PyTorch SDPA (every backend, eager and CUDA graph)."
    );
    r
}
