//! The planted-fault kernels (tests/planted/*) are well-formed: headers parse into
//! a launch rule and a known status, and every file compiles with NVRTC, so the GPU run
//! of the suite tests the gates and not typos. The GPU run itself is
//! bench/gpu/gate.sh planted.

use std::path::PathBuf;

use evo_eval::Status;
use evo_gpu::{CompileRequest, Compiler};
use evo_kernels::handwritten;

/// Each suite folder (tests/planted/<name>/, with its check.toml) and its .cu files.
fn suites() -> Vec<(String, Vec<PathBuf>)> {
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/planted");
    let mut out = Vec::new();
    for dir in std::fs::read_dir(base)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
    {
        let config = evo_core::config::SearchConfig::load(&dir.join("check.toml")).unwrap();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "cu"))
            .collect();
        files.sort();
        out.push((config.problem, files));
    }
    out.sort();
    out
}

#[test]
fn planted_kernels_have_headers_and_compile() {
    let suites = suites();
    assert!(
        [
            "gemm",
            "sdpa_fwd",
            "sdpa_fwd_fp8",
            "sdpa_fwd_fp8_e2e",
            "fp8_quantize"
        ]
        .iter()
        .all(|name| suites.iter().any(|(p, _)| p == name)),
        "{suites:?}"
    );
    let compiler = Compiler::new("sm_90a", &["-std=c++17".to_string()], 0, None).unwrap();
    for (problem_name, files) in suites {
        // The gemm and sdpa_fwd suites cover every failure status; the FP8 suites
        // (sdpa_fwd_fp8, sdpa_fwd_fp8_e2e, fp8_quantize) the FP8-specific faults, all
        // `incorrect`.
        let full = problem_name == "gemm" || problem_name == "sdpa_fwd";
        assert!(files.len() >= if full { 10 } else { 3 }, "{files:?}");
        let problem = evo_kernels::problem(&problem_name).unwrap();
        let mut expected = Vec::new();
        for f in &files {
            let source = std::fs::read_to_string(f).unwrap();
            let h = handwritten::header(&source);
            let status = h.expect.as_deref().and_then(Status::parse);
            assert!(
                status.is_some(),
                "{}: evo-expect missing or unknown: {:?}",
                f.display(),
                h.expect
            );
            expected.push(status.unwrap());
            assert!(h.why.is_some(), "{}: no evo-why", f.display());
            handwritten::parse_launch(problem, h.launch.as_deref().unwrap_or(""))
                .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            let out = compiler
                .compile(&CompileRequest {
                    name: "planted.cu".into(),
                    source,
                })
                .unwrap();
            assert!(out.success, "{}:\n{}", f.display(), out.log);
            assert!(
                out.kernel(problem.entry()).is_some(),
                "{}: no `{}` kernel",
                f.display(),
                problem.entry()
            );
        }
        // Each suite covers the statuses the evaluator must tell apart.
        let statuses: &[Status] = if full {
            &[
                Status::Evaluated,
                Status::Incorrect,
                Status::Crashed,
                Status::TimedOut,
                Status::RejectedStatic,
            ]
        } else {
            &[Status::Evaluated, Status::Incorrect]
        };
        for &s in statuses {
            assert!(
                expected.contains(&s),
                "{problem_name}: no planted kernel expects {}",
                s.name()
            );
        }
    }
}

#[test]
fn every_problem_reference_compiles() {
    let compiler = Compiler::new("sm_90a", &["-std=c++17".to_string()], 0, None).unwrap();
    for p in evo_kernels::problems() {
        for dtype in ["f16", "bf16"] {
            // Any complete shape of the problem with this dtype.
            let mut shape: evo_core::Vars = p
                .shape_vars()
                .iter()
                .map(|v| (v.name.to_string(), evo_core::Value::Int(64)))
                .collect();
            for v in p.spec_vars() {
                shape.insert(v.name.to_string(), v.probe_value());
            }
            shape.insert("DTYPE".into(), dtype.into());
            let r = p
                .reference(&shape, &p.default_call(&shape))
                .unwrap_or_else(|| panic!("{} has no reference", p.name()));
            let out = compiler
                .compile(&CompileRequest {
                    name: "reference.cu".into(),
                    source: r.source.into(),
                })
                .unwrap();
            assert!(out.success, "{}:\n{}", p.name(), out.log);
            assert!(
                out.kernel(&r.entry).is_some(),
                "{}: no kernel {}",
                p.name(),
                r.entry
            );
            assert_eq!(
                r.args.len(),
                p.args(&shape).len()
                    + if p.name().starts_with("sdpa_fwd") {
                        2
                    } else {
                        0
                    }
            );
        }
    }
}
