//! The artifact's generated files besides the kernels: `evo_kernel.py` (fixed text that
//! reads `manifest.json`), `kernel.h` (launch rule and argument packing per variant, in
//! C++) and `README.md`.

use std::fmt::Write as _;

use anyhow::{bail, Result};
use evo_core::Genome;

use super::manifest::Manifest;

/// The PyTorch binding; it reads everything it needs from `manifest.json` beside it.
pub const EVO_KERNEL_PY: &str = include_str!("evo_kernel.py");

fn c_param(kind: &str, name: &str) -> String {
    match kind {
        "pointer" => format!("CUdeviceptr {name}"),
        "i32" => format!("int {name}"),
        "i64" => format!("long long {name}"),
        _ => format!("float {name}"),
    }
}

/// `kernel.h`: per variant, its CUBIN file, `launch_dims(shape)` from the launch rule and
/// `launch(function, stream, ABI arguments...)`.
pub fn kernel_h(m: &Manifest) -> Result<String> {
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
    writeln!(
        h,
        "// kernel.h: C/C++ launch helper for the evo artifact in this folder (written by evo export {}).\n\
         // Problem {}, family {}, run {}. manifest.json has the measurements; README.md the details.\n\
         //\n\
         // Usage (CUDA driver API, link with -lcuda):\n\
         //   CUmodule mod; cuModuleLoad(&mod, evo_artifact::{v}::cubin);   // path relative to this folder\n\
         //   CUfunction fn; cuModuleGetFunction(&fn, mod, evo_artifact::{v}::kernel);\n\
         //   evo_artifact::{v}::launch(fn, stream, {args});\n\
         //\n\
         // Kernel ABI:\n//   {}",
        m.evo_version,
        m.problem,
        m.family,
        m.source.run,
        m.abi.text.replace('\n', "\n//   "),
        v = first.name,
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
         inline long long max(long long a, long long b) { return a > b ? a : b; }\n",
    );
    writeln!(
        h,
        "\n// Dispatch ({}): {}",
        m.dispatch.mode, m.dispatch.rule
    )?;
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
        writeln!(h, "constexpr const char* kernel = \"{}\";", v.launch.kernel)?;
        writeln!(
            h,
            "inline LaunchDims launch_dims({}) {{",
            shape_params.join(", ")
        )?;
        for (name, value) in &v.launch.constants {
            writeln!(h, "    const long long {name} = {value};")?;
        }
        for s in &m.shape_vars {
            writeln!(h, "    (void){s};")?;
        }
        let dim = |e: &String| format!("(unsigned)({e})");
        writeln!(
            h,
            "    LaunchDims d = {{{{{}}}, {{{}}}, {}}};\n    return d;\n}}",
            v.launch.grid.iter().map(dim).collect::<Vec<_>>().join(", "),
            v.launch
                .block
                .iter()
                .map(dim)
                .collect::<Vec<_>>()
                .join(", "),
            dim(&v.launch.shared_bytes)
        )?;
        writeln!(
            h,
            "// Launches `fn` (the `{}` of this variant's CUBIN) on `stream`.\n\
             inline CUresult launch(CUfunction fn, CUstream stream, {}) {{",
            v.launch.kernel,
            abi_params.join(", ")
        )?;
        writeln!(
            h,
            "    LaunchDims d = launch_dims({});",
            m.shape_vars
                .iter()
                .map(|s| s.to_lowercase())
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        h.push_str(
            "    if (d.shared_bytes > 48 * 1024) {\n\
             \x20       CUresult r = cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)d.shared_bytes);\n\
             \x20       if (r != CUDA_SUCCESS) return r;\n    }\n",
        );
        writeln!(
            h,
            "    void* args[] = {{{}}};",
            m.abi
                .params
                .iter()
                .map(|p| format!("&{}", p.name))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        h.push_str(
            "    return cuLaunchKernel(fn, d.grid[0], d.grid[1], d.grid[2], d.block[0], d.block[1], d.block[2],\n\
             \x20                         d.shared_bytes, stream, args, nullptr);\n}\n",
        );
        writeln!(h, "}}  // namespace {}", v.name)?;
    }
    h.push_str("\n}  // namespace evo_artifact\n");
    Ok(h)
}

/// `README.md`: what the artifact is, the three lines to call it, and its numbers.
pub fn readme(m: &Manifest) -> String {
    let mut r = String::new();
    let problem = evo_kernels::problem(&m.problem);
    let _ = writeln!(
        r,
        "# evo artifact: {} ({})\n\n\
         Exported by evo {} from run `{}` (searched on {}, {}; compiled by NVRTC {} for {}).\n\
         Kernels that passed every correctness gate of the search; `manifest.json` has the\n\
         genomes, the launch rule, the measured times and errors per shape, and the SHA-256\n\
         of every file.\n",
        m.problem,
        m.family,
        m.evo_version,
        m.source.run,
        m.device.as_deref().unwrap_or("an unknown GPU"),
        m.driver.as_deref().unwrap_or("unknown driver"),
        m.nvrtc_version,
        m.arch
    );
    let dtypes: Vec<String> = m
        .variants
        .iter()
        .filter_map(|v| v.specialization.get("DTYPE").map(|d| d.to_string()))
        .collect();
    let torch_dtype = if dtypes.iter().all(|d| d == "bf16") {
        "bfloat16"
    } else {
        "float16"
    };
    let _ = writeln!(
        r,
        "## Use it from PyTorch\n\n\
         Needs PyTorch and the CUDA driver only (no evo, no compiler):\n\n\
         ```python\n\
         import sys; sys.path.insert(0, \"/path/to/this/folder\")\n\
         from evo_kernel import attention\n\
         o = attention(q, k, v, causal={})  # q: (batch, heads, seq_q, head_dim), k, v: (batch, heads, seq_kv, head_dim), torch.{torch_dtype} on the GPU\n\
         ```\n\n\
         `attention` checks dtype, device, shapes, head dim, causal support and layout (last\n\
         dimension contiguous, other strides multiples of 8 elements) and says what to change;\n\
         `scale=` overrides the default 1/sqrt(head_dim). It loads the CUBIN into the\n\
         device's primary context (PyTorch's) and launches on the current stream.\n",
        if m.variants.iter().all(|v| v.specialization.get("CAUSAL") == Some(&evo_core::Value::Bool(true))) {
            "True"
        } else {
            "False"
        }
    );
    let _ = writeln!(
        r,
        "## From C or C++\n\n\
         `kernel.h` has, per variant, the CUBIN's file name, `launch_dims(...)` (the launch\n\
         rule) and `launch(fn, stream, ...)` taking the kernel's arguments in ABI order:\n\n\
         ```\n{}\n```\n",
        m.abi.text
    );
    let _ = writeln!(
        r,
        "## Kernels\n\n\
         Dispatch ({}): {}\n\n\
         | variant | specialization | genome | files |\n|---|---|---|---|",
        m.dispatch.mode, m.dispatch.rule
    );
    for v in &m.variants {
        let _ = writeln!(
            r,
            "| {} | {} | `{}` [{}] | {}, {}, {} |",
            v.name,
            Genome::from_vars(v.specialization.clone()).canonical(),
            v.genome,
            v.genome_hash,
            v.source_file,
            v.ptx_file,
            v.cubin_file
        );
    }
    if m.dispatch.mode == "per_shape" {
        let _ = writeln!(r, "\n| shape | variant |\n|---|---|");
        for e in &m.dispatch.table {
            let _ = writeln!(
                r,
                "| {} {} | {} |",
                Genome::from_vars(e.specialization.clone()).canonical(),
                e.shape
                    .as_ref()
                    .map(|s| Genome::from_vars(s.clone()).canonical())
                    .unwrap_or_default(),
                e.variant
            );
        }
    }
    let _ = writeln!(
        r,
        "\n## Measured by the search\n\n| variant | shape | median µs | p20–p80 µs | TFLOP/s | max abs err | rel L2 |\n|---|---|---|---|---|---|---|"
    );
    for v in &m.variants {
        for s in v.shapes.iter().filter(|s| s.timed) {
            let shape = match problem {
                Some(p) => crate::commands::check::shape_text(p, &s.shape),
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
         `evo verify <this folder>` checks every SHA-256, then re-runs the correctness gates and\n\
         the timing on the current GPU and compares with the numbers above (a different GPU,\n\
         driver or NVRTC is reported). `python3 scripts/compare_torch.py <this folder>` (in the\n\
         evo repository) compares it with PyTorch SDPA."
    );
    r
}
