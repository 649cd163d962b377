//! The `evo` binary end to end, on the shipped gemm family, without a GPU.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;
use predicates::str::contains;
use serde_json::Value as Json;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn config() -> PathBuf {
    root().join("configs/gemm.toml")
}

/// `evo` with a private compile cache.
fn evo(cache: &Path) -> Command {
    let mut c = Command::cargo_bin("evo").unwrap();
    c.env("EVO_CACHE_DIR", cache)
        .env_remove("EVO_TEMPLATES")
        .current_dir(root());
    c
}

fn json(out: &[u8]) -> Json {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(out)))
}

const GENOME: &str = "BLOCK_K=32,BLOCK_M=64,BLOCK_N=64,STAGES=2,SWIZZLE=xor,WARPS_M=2,WARPS_N=2";

#[test]
fn space_counts_match_the_listing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = evo(tmp.path())
        .args(["--json", "space", "-c"])
        .arg(config())
        .assert()
        .success();
    let report = json(&out.get_output().stdout);
    let valid = report["stats"]["valid"].as_u64().unwrap();
    assert!(report["stats"]["exact"].as_bool().unwrap());
    assert!(valid > 100, "{valid}");
    assert_eq!(report["samples"].as_array().unwrap().len(), 5);
    let listed = evo(tmp.path())
        .args(["space", "--list", "-c"])
        .arg(config())
        .assert()
        .success();
    let lines = String::from_utf8_lossy(&listed.get_output().stdout)
        .lines()
        .count() as u64;
    assert_eq!(lines, valid);
    // Human output names the constraints.
    evo(tmp.path())
        .args(["space", "-c"])
        .arg(config())
        .assert()
        .success()
        .stdout(contains("warp_tile_min").and(contains("valid genomes")));
}

#[test]
fn render_prints_the_genome_source() {
    let tmp = tempfile::tempdir().unwrap();
    evo(tmp.path())
        .args(["render", "-c"])
        .arg(config())
        .args(["-g", GENOME])
        .assert()
        .success()
        .stdout(
            contains("extern \"C\"")
                .and(contains(GENOME))
                .and(contains("__launch_bounds__")),
        );
}

#[test]
fn render_explains_bad_genomes() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |g: &str| {
        evo(tmp.path())
            .args(["render", "-c"])
            .arg(config())
            .args(["-g", g])
            .assert()
    };
    run(&GENOME.replace("WARPS_N=2", "WARPS_N=1"))
        .code(1)
        .stderr(contains("violates constraint `warps`").and(contains("--force renders it anyway")));
    // compile has no --force: it does not suggest one.
    evo(tmp.path())
        .args(["compile", "-c"])
        .arg(config())
        .args(["-g", &GENOME.replace("WARPS_N=2", "WARPS_N=1")])
        .assert()
        .code(1)
        .stderr(contains("violates constraint `warps`").and(contains("--force").not()));
    run(&GENOME.replace(",WARPS_N=2", ""))
        .code(1)
        .stderr(contains("lacks knob(s) [\"WARPS_N\"]"));
    run(&GENOME.replace("STAGES=2", "STAGES=9"))
        .code(1)
        .stderr(contains("`STAGES` = `9` is not one of its values"));
    // Not a genome whatever the config: a usage error.
    run("BLOCK_M").code(2).stderr(contains(
        "--genome: genome entry `BLOCK_M` is not of the form NAME=value",
    ));
    // --force renders a constraint-violating genome anyway.
    evo(tmp.path())
        .args(["render", "--force", "-c"])
        .arg(config())
        .args(["-g", &GENOME.replace("WARPS_N=2", "WARPS_N=1")])
        .assert()
        .success();
    // Usage errors exit 2: a genome and --random together; --random 0 says what it asks.
    evo(tmp.path())
        .args(["render", "-c"])
        .arg(config())
        .args(["-g", GENOME, "--random", "2"])
        .assert()
        .code(2)
        .stderr(contains("cannot be used with"));
    evo(tmp.path())
        .args(["render", "-c"])
        .arg(config())
        .args(["--random", "0"])
        .assert()
        .code(2)
        .stderr(contains("--random 0 asks for no genome"));
}

#[test]
fn compile_reports_resources() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("out");
    let scratch = tmp.path().join("tmp");
    std::fs::create_dir(&scratch).unwrap();
    let out = evo(tmp.path())
        .env("TMPDIR", &scratch)
        .args(["--json", "compile", "--arch", "sm_90a", "--sass", "-c"])
        .arg(config())
        .args(["-g", GENOME, "--out"])
        .arg(&out_dir)
        .assert()
        .success();
    // cuobjdump reads each CUBIN from the temporary folder; nothing of it is left there.
    let left: Vec<_> = std::fs::read_dir(&scratch).unwrap().collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    let reports = json(&out.get_output().stdout);
    let r = &reports[0];
    assert_eq!(r["success"], true);
    assert_eq!(r["arch"], "sm_90a");
    assert_eq!(r["cached"], false);
    let k = &r["kernels"][0];
    assert_eq!(k["name"], "gemm");
    assert!(k["registers"].as_u64().unwrap() > 0);
    assert_eq!(k["spill_store_bytes"], 0);
    assert!(r["sass"]["gemm"]["tensor"]["HMMA"].as_u64().unwrap() > 0);
    // Launch geometry for the first shape (4096 x 4096, 64 x 64 tiles).
    assert_eq!(r["launch"][0][1]["grid"], serde_json::json!([64, 64, 1]));
    assert_eq!(r["launch"][0][1]["block"], serde_json::json!([128, 1, 1]));
    let names: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| {
            e.unwrap()
                .path()
                .extension()
                .unwrap()
                .to_string_lossy()
                .to_string()
        })
        .collect();
    for ext in ["cu", "ptx", "cubin", "log"] {
        assert!(names.iter().any(|n| n == ext), "{ext} missing in {names:?}");
    }
    // One file per specialization: the file names keep the specialization.
    let files: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(
        files.iter().any(|f| f.ends_with("DTYPE-f16.cu")),
        "{files:?}"
    );
    // The second compile comes from the cache.
    let again = evo(tmp.path())
        .args(["--json", "compile", "--arch", "sm_90a", "-c"])
        .arg(config())
        .args(["-g", GENOME])
        .assert()
        .success();
    assert_eq!(json(&again.get_output().stdout)[0]["cached"], true);
    // Human output shows the table.
    evo(tmp.path())
        .args(["compile", "--arch", "sm_90a", "-c"])
        .arg(config())
        .args(["-g", GENOME])
        .assert()
        .success()
        .stdout(contains("ok (cached)").and(contains("1 variants: 1 compiled, 0 failed")));
}

#[test]
fn broken_configs_are_explained() {
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(config()).unwrap();
    let write = |name: &str, body: &str| {
        let p = root()
            .join("configs")
            .join(format!(".test-{}-{name}.toml", std::process::id()));
        std::fs::write(&p, body).unwrap();
        p
    };
    let typo = write(
        "typo",
        &text.replace("[compile]", "[compile]\noptimise = true"),
    );
    let shape = write("shape", &text.replace("K = 1000", "K = 1001"));
    let arch = write("arch", &text.replace("arch = \"auto\"", "arch = \"sm_61\""));
    let family = write(
        "family",
        &text.replace("family = \"gemm_mma\"", "family = \"gemm_wmma\""),
    );
    let problem = write(
        "problem",
        &text.replace("problem = \"gemm\"", "problem = \"conv\""),
    );
    let cases = [
        (&typo, vec!["unknown field `optimise`", "line"]),
        (&shape, vec!["shape #3", "K = 1001 must be a multiple of 8"]),
        (&arch, vec!["sm_61", "not supported"]),
        (&family, vec!["gemm_wmma.toml"]),
        (&problem, vec!["unknown problem `conv`", "sdpa_fwd"]),
    ];
    for (path, needles) in cases {
        let a = evo(tmp.path())
            .args(["space", "-c"])
            .arg(path)
            .assert()
            .code(1);
        let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
        std::fs::remove_file(path).unwrap();
        for n in needles {
            assert!(err.contains(n), "{n:?} not in {err:?}");
        }
    }
    evo(tmp.path())
        .args(["space", "-c", "no/such/config.toml"])
        .assert()
        .code(1)
        .stderr(contains("cannot read config no/such/config.toml"));
}

#[test]
fn broken_templates_are_explained() {
    let tmp = tempfile::tempdir().unwrap();
    let templates = tmp.path().join("templates");
    std::fs::create_dir_all(templates.join("gemm")).unwrap();
    std::fs::create_dir_all(templates.join("common")).unwrap();
    for entry in std::fs::read_dir(root().join("templates/common")).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, templates.join("common").join(p.file_name().unwrap())).unwrap();
    }
    let toml = std::fs::read_to_string(root().join("templates/gemm/gemm_mma.toml")).unwrap();
    let tera = std::fs::read_to_string(root().join("templates/gemm/gemm_mma.cu.tera")).unwrap();
    std::fs::write(templates.join("gemm/gemm_mma.toml"), &toml).unwrap();
    std::fs::write(
        templates.join("gemm/gemm_mma.cu.tera"),
        format!("{tera}\n// {{{{ UNDEFINED_KNOB }}}}\n"),
    )
    .unwrap();
    // `evo space` over the broken templates: refused, with what is wrong.
    let space_fails_with = |needle: &str| {
        evo(tmp.path())
            .args(["space", "-c"])
            .arg(config())
            .arg("--templates")
            .arg(&templates)
            .assert()
            .code(1)
            .stderr(contains(needle));
    };
    space_fails_with("UNDEFINED_KNOB");
    // A constraint evalexpr parses but cannot evaluate (an operator short of an operand)
    // rejects every genome: it is named, not reported as an empty space.
    std::fs::write(templates.join("gemm/gemm_mma.cu.tera"), &tera).unwrap();
    let broken = toml.replace(
        "warps = \"NUM_WARPS >= 4 && NUM_WARPS <= 8\"",
        "warps = \"NUM_WARPS >= && 4\"",
    );
    assert_ne!(broken, toml, "gemm_mma.toml's `warps` constraint moved");
    std::fs::write(templates.join("gemm/gemm_mma.toml"), &broken).unwrap();
    space_fails_with("constraint `warps` cannot be evaluated");
}

#[test]
fn missing_nvrtc_is_exit_code_3_with_install_hint() {
    let tmp = tempfile::tempdir().unwrap();
    evo(tmp.path())
        .env("EVO_CUDA_HOME", tmp.path())
        .args(["compile", "--arch", "sm_90a", "-c"])
        .arg(config())
        .args(["-g", GENOME])
        .assert()
        .code(3)
        .stderr(contains("EVO_CUDA_HOME").and(contains("scripts/install-cuda.sh")));
}

#[test]
fn doctor_exit_code_matches_its_verdict() {
    let tmp = tempfile::tempdir().unwrap();
    let out = evo(tmp.path()).args(["--json", "doctor"]).output().unwrap();
    let report = json(&out.stdout);
    assert_eq!(report["can_compile"], true, "{report}");
    let families = report["families"].as_array().unwrap();
    assert!(
        families
            .iter()
            .any(|f| f["family"] == "gemm_mma" && f["ok"] == true),
        "{report}"
    );
    let can_search = report["can_search"].as_bool().unwrap();
    assert_eq!(out.status.code(), Some(if can_search { 0 } else { 3 }));
    evo(tmp.path())
        .args(["doctor", "--compile-only"])
        .assert()
        .success()
        .stdout(contains("NVRTC version 13."));
}

/// `evo profile --tools none` runs no tool: on a GPU it writes the kernel's plan and prints the
/// `evo run-once` line to wrap in a profiler; without one it stops where the GPU is needed.
/// Never a usage error (it was one: an empty --tools list is refused).
#[test]
fn profile_with_no_tool_prints_the_run_once_line() {
    let tmp = tempfile::tempdir().unwrap();
    let args = [
        "profile",
        "tests/planted/gemm/j_correct.cu",
        "--problem",
        "gemm",
        "--shape",
        "M=64,N=64,K=64",
        "--tools",
        "none",
    ];
    if evo_gpu::device::probe().is_ok_and(|d| !d.devices.is_empty()) {
        let a = evo(tmp.path()).args(args).assert().success();
        let out = String::from_utf8_lossy(&a.get_output().stdout).to_string();
        assert!(out.contains("launch it once with: "), "{out}");
        assert!(out.contains(" run-once --problem gemm --source "), "{out}");
        assert!(!out.contains("memcheck"), "no tool ran: {out}");
    } else {
        evo(tmp.path())
            .args(args)
            .assert()
            .code(3)
            .stderr(contains("needs a GPU"));
    }
    evo(tmp.path())
        .args(["profile", "tests/planted/gemm/j_correct.cu", "--problem", "gemm", "--tools", ","])
        .assert()
        .code(2)
        .stderr(contains("--tools names no tool; give some of ncu, memcheck, racecheck, initcheck, synccheck, or none"));
}

#[test]
fn gpu_commands_without_a_gpu_exit_3() {
    if evo_gpu::device::probe().is_ok_and(|d| !d.devices.is_empty()) {
        println!("skipping: this machine has a GPU");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    evo(tmp.path())
        .args([
            "check",
            "tests/planted/gemm/j_correct.cu",
            "--problem",
            "gemm",
            "--shape",
            "M=64,N=64,K=64",
        ])
        .assert()
        .code(3)
        .stdout(contains("correctness  needs a GPU"))
        .stderr(contains(
            "passed compile, static and ABI checks for sm_90a; correctness, timing and the sanitizers need a GPU",
        ));
    evo(tmp.path())
        .args(["selftest"])
        .assert()
        .code(3)
        .stderr(contains("needs a GPU"));
    // A search refused for want of a GPU (or for its config) creates no database.
    let files = tempfile::tempdir().unwrap();
    let db = files.path().join("new.db");
    evo(tmp.path())
        .args(["search", "-c", "configs/gemm.toml", "--db"])
        .arg(&db)
        .assert()
        .code(3)
        .stderr(contains("needs a GPU"));
    let bad = files.path().join("no_shapes.toml");
    std::fs::write(&bad, "problem = \"gemm\"\nfamily = \"gemm_mma\"\n").unwrap();
    evo(tmp.path())
        .args(["search", "-c"])
        .arg(&bad)
        .arg("--db")
        .arg(&db)
        .assert()
        .code(1)
        .stderr(contains("no [[shapes]]"));
    assert_eq!(
        std::fs::read_dir(files.path()).unwrap().count(),
        1,
        "only the config was written"
    );
}

/// The gates that need no GPU run without one: a kernel whose parameters disagree with
/// the problem's ABI is `rejected_static` (exit 1, no GPU needed), naming what differs.
#[test]
fn check_rejects_a_wrong_abi_without_a_gpu() {
    let tmp = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(root().join("tests/planted/gemm/j_correct.cu"))
        .unwrap()
        .replace(
            "int lda, int ldb, int ldc",
            "long long lda, int ldb, int ldc",
        );
    let file = tmp.path().join("wrong_abi.cu");
    std::fs::write(&file, source).unwrap();
    let out = evo(tmp.path())
        .args(["check", file.to_str().unwrap(), "--problem", "gemm"])
        .args(["--shape", "M=64,N=64,K=64", "--json", "--no-sanitize"])
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    let v = json(&out);
    assert_eq!(v[0]["verdict"]["status"], "rejected_static", "{v}");
    assert_eq!(v[0]["decided"], true);
    let detail = v[0]["verdict"]["detail"].as_str().unwrap();
    assert!(
        detail.contains("does not match the kernel's parameters") && detail.contains("gemm"),
        "{detail}"
    );
}

#[test]
fn check_explains_bad_arguments() {
    let tmp = tempfile::tempdir().unwrap();
    evo(tmp.path())
        .args([
            "check",
            "tests/planted/gemm/j_correct.cu",
            "--problem",
            "gemv",
            "--shape",
            "M=64",
        ])
        .assert()
        .code(2)
        .stderr(contains("unknown problem `gemv`"));
    evo(tmp.path())
        .args([
            "check",
            "tests/planted/gemm/j_correct.cu",
            "--problem",
            "gemm",
            "--shape",
            "M=64,N=64,K=60",
        ])
        .assert()
        .code(1)
        .stderr(contains("multiple of 8"));
    evo(tmp.path())
        .args([
            "check",
            "tests/planted/gemm/j_correct.cu",
            "--problem",
            "gemm",
        ])
        .assert()
        .code(2)
        .stderr(contains("no shapes"));
}

#[test]
fn search_quality_reports_coverage_and_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let landscape = root().join("tests/data/landscape_sdpa_fwd_mma_h200.json");
    let run = || {
        let out = evo(dir.path())
            .args(["--json", "search-quality", "-c"])
            .arg(root().join("configs/sdpa_replay.toml"))
            .arg("--landscape")
            .arg(&landscape)
            .args(["--seeds", "5"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut report = json(&out.stdout);
        // Everything but the time per generation (a measurement) repeats.
        for s in report["strategies"].as_array_mut().unwrap() {
            let ms = s.as_object_mut().unwrap().remove("ms_per_generation");
            assert!(ms.and_then(|m| m.as_f64()).is_some_and(|m| m > 0.0), "{s}");
        }
        report
    };
    let a = run();
    assert_eq!(a, run(), "same seeds, same landscape, same answer");
    let points = json(&std::fs::read(&landscape).unwrap())["points"]
        .as_object()
        .unwrap()
        .len() as u64;
    let (valid, recorded) = (
        a["valid_genomes"].as_u64().unwrap(),
        a["recorded"].as_u64().unwrap(),
    );
    assert!(
        recorded > 0 && recorded <= points && recorded < valid,
        "{a}"
    );
    // One count per landscape: here the one recorded.
    assert!(a["genomes_within"][0].as_u64().unwrap() >= 1);
    let strategies = a["strategies"].as_array().unwrap();
    let names: Vec<&str> = strategies
        .iter()
        .map(|s| s["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["surrogate", "evolution", "random"]);
    for s in strategies {
        let needed: Vec<u64> = s["evaluations_needed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(needed.len() as u64, s["reached"].as_u64().unwrap());
        assert!(needed.len() <= 5 && needed.windows(2).all(|w| w[0] <= w[1]));
        assert!(needed.iter().all(|n| (1..=valid).contains(n)), "{s}");
    }
    // A landscape of another family is refused.
    let out = evo(dir.path())
        .args(["search-quality", "-c"])
        .arg(root().join("configs/gemm.toml"))
        .arg("--landscape")
        .arg(&landscape)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("records family `sdpa_fwd_mma`"));
}

/// `evo run-once` (what `evo profile` hands to ncu and compute-sanitizer) takes a launch
/// rule or a launch plan, not both and not neither, and says what is wrong with a plan file
/// before it looks for a GPU.
#[test]
fn run_once_wants_a_launch_rule_or_a_plan() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("k.cu");
    std::fs::write(&src, "extern \"C\" __global__ void sdpa_fwd() {}").unwrap();
    let base = |extra: &[&str]| {
        let mut c = Command::cargo_bin("evo").unwrap();
        c.args(["run-once", "--problem", "sdpa_fwd", "--source"])
            .arg(&src)
            .args(["--shape", "BATCH=1,HEADS=1,SEQ_Q=8,SEQ_KV=8,HEAD_DIM=64"])
            .args(extra);
        c
    };
    base(&[]).assert().code(2);
    base(&[
        "--launch",
        "grid = 1, 1, 1; block = 32, 1, 1",
        "--plan",
        "p.json",
    ])
    .assert()
    .code(2);
    let plan = dir.path().join("plan.json");
    std::fs::write(&plan, "{\"kernels\": 3}").unwrap();
    let o = base(&["--plan", plan.to_str().unwrap()]).assert().failure();
    let err = String::from_utf8_lossy(&o.get_output().stderr).to_string();
    assert!(err.contains("is not a launch plan"), "{err}");
}

/// An error says each cause once (it used to print "No such file or directory (os error 2)"
/// twice, and a failed migration's cause four times).
#[test]
fn errors_say_each_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.toml");
    let a = Command::cargo_bin("evo")
        .unwrap()
        .args(["space", "-c"])
        .arg(&missing)
        .assert()
        .failure();
    let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
    assert!(
        err.contains("cannot read config") && err.contains("none.toml"),
        "{err}"
    );
    assert_eq!(err.matches("os error 2").count(), 1, "{err}");
}

/// A usage error a command finds after parsing (an option missing, options that conflict,
/// a value an option does not take) exits 2 like clap's own, said once, before any
/// database file or GPU is touched; a runtime failure still exits 1.
#[test]
fn usage_errors_found_by_commands_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("population.db");
    let usage = |args: &[&str], says: &str| {
        let a = evo(tmp.path())
            .args(args)
            .arg("--db")
            .arg(&db)
            .assert()
            .code(2);
        let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
        assert_eq!(err.matches(says).count(), 1, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    };
    usage(
        &["search"],
        "error: give a config with -c (or --resume RUN)",
    );
    usage(
        &["search", "-c", "configs/gemm.toml", "--strategy", "bogus"],
        "--strategy: unknown strategy `bogus`",
    );
    usage(
        &["search", "-c", "configs/gemm.toml", "--evaluator", "cpu"],
        "--evaluator must be `gpu` or `replay:FILE`, not `cpu`",
    );
    // Before the GPU is looked for (no GPU here would be exit 3).
    usage(
        &["search", "-c", "configs/gemm.toml", "--gpus", "one"],
        "--gpus: `one` is not a GPU number",
    );
    usage(
        &["join", "night", "--budget", "3gen"],
        "the generation budget belongs to the run",
    );
    usage(
        &["search", "-c", "configs/gemm.toml", "--run", "../night"],
        "--run `../night`: a run name uses letters, digits",
    );
    assert!(!db.exists(), "a usage error creates no database");
    // A database location evo cannot open, whatever is there, on every command taking --db.
    for args in [
        &["search", "-c", "configs/gemm.toml"][..],
        &["join", "night"],
        &["runs"],
        &["elites"],
        &["report", "night"],
        &["export", "night", "--out", "artifact"],
        &["export-landscape", "night", "--out", "l.json"],
        &["baseline", "import", "b.json", "--run", "night"],
    ] {
        let a = evo(tmp.path())
            .args(args)
            .args(["--db", "mysql://evo:s3cret@db/evo"])
            .assert()
            .code(2);
        let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
        assert!(
            err.contains("unsupported database `mysql://evo:***@db/evo`")
                && err.contains("postgres://USER:PASSWORD@HOST:PORT/DATABASE")
                && !err.contains("s3cret"),
            "{args:?}: {err}"
        );
    }
    // Values found bad after parsing by the commands without a database.
    let gemm = config();
    let gemm = gemm.to_str().unwrap();
    let kernel = "tests/planted/gemm/j_correct.cu";
    for (args, says) in [
        (
            vec!["space", "-c", gemm, "--arch", "sm_bogus"],
            "--arch: `sm_bogus` is not a GPU architecture; write it like `sm_90a`",
        ),
        (
            vec!["compile", "-c", gemm, "--random", "1", "--arch", "sm_12"],
            "--arch: architecture `sm_12` is not supported; evo knows",
        ),
        (
            vec!["render", "-c", gemm, "-g", GENOME, "--spec", "DTYPE"],
            "--spec: genome entry `DTYPE` is not of the form NAME=value",
        ),
        (
            vec!["check", kernel, "--problem", "gemm", "--shape", "M"],
            "--shape: genome entry `M` is not of the form NAME=value",
        ),
        (
            vec!["check", kernel, "--problem", "gemm", "--arch", "sm_1"],
            "--arch: architecture `sm_1` is not supported",
        ),
        // Before the GPU is looked for (no GPU here would be exit 3).
        (
            vec![
                "profile",
                kernel,
                "--problem",
                "gemm",
                "--tools",
                "ncu,bogus",
            ],
            "--tools: unknown tool `bogus`; give some of ncu, memcheck",
        ),
    ] {
        let a = evo(tmp.path()).args(&args).assert().code(2);
        let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
        assert_eq!(err.matches(says).count(), 1, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    // A runtime failure: the database a read command names is not there.
    evo(tmp.path())
        .args(["runs", "--db"])
        .arg(&db)
        .assert()
        .code(1)
        .stderr(contains("no population database at"));
}
