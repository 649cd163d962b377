//! `evo export` and `evo verify` without a GPU: a population database written through
//! the evo-store API with measurements of real sdpa_fwd_mma (and sdpa_fwd_wgmma) genomes,
//! exported for real (NVRTC compiles the CUBINs), then the layout, the manifest (no path
//! of this machine in it), the hashes, a standalone compile of kernel.cu, the Python
//! binding's launch plan (fake tensors, no torch), its call path through a fake torch and
//! a fake libcuda.so.1 (plan cache, every fallback reason, strict mode, layout copies, the
//! torch op, transformers), kernel.h's launch rule and example.cpp (through g++), the
//! per-shape export over two runs of two families, the refusals, tamper detection and
//! verify's re-render of every variant from its genome; per-shape entries deferred to
//! PyTorch's SDPA where the run measured evo's variant less than `--min-speedup` times
//! faster than its baseline (`defer`, the Python binding's "slower" fallback,
//! `--keep-slower`, verify's check of the marks).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use evo_core::{Gate, Genome, Status, Value, Vars};
use evo_kernels::harness::ArgSlot;
use evo_store::{CandidateResult, NewCandidate, NewMeasurement, NewRun, Origin, Store};
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const A: &str = "BLOCK_M=64,BLOCK_N=64,EPILOGUE=direct,NUM_WARPS=4,PRODUCER_WARPS=1,Q_IN_REGS=true,STAGES=3,SWIZZLE=xor,WARP_SPEC=off";
const B: &str = "BLOCK_M=128,BLOCK_N=32,EPILOGUE=smem,NUM_WARPS=8,PRODUCER_WARPS=1,Q_IN_REGS=false,STAGES=2,SWIZZLE=pad,WARP_SPEC=off";
const C: &str = "BLOCK_M=64,BLOCK_N=32,EPILOGUE=direct,NUM_WARPS=4,PRODUCER_WARPS=1,Q_IN_REGS=true,STAGES=2,SWIZZLE=xor,WARP_SPEC=off";

/// The ten shapes of configs/sdpa.toml, complete: five in fp16, then the same in bf16.
fn shapes() -> Vec<Vars> {
    with_bf16(&f16_shapes())
}

/// `shapes`, then each of them in bf16 (as the shipped configs list them).
fn with_bf16(shapes: &[Vars]) -> Vec<Vars> {
    let mut out = shapes.to_vec();
    for s in shapes {
        let mut b = s.clone();
        b.insert("DTYPE".into(), Value::Str("bf16".into()));
        out.push(b);
    }
    out
}

/// The five fp16 shapes of configs/sdpa.toml, complete.
fn f16_shapes() -> Vec<Vars> {
    [
        (1, 8, 512, 64),
        (2, 8, 512, 64),
        (2, 8, 2048, 64),
        (2, 8, 512, 128),
        (4, 8, 2048, 64),
    ]
    .iter()
    .map(|&(b, h, s, d)| {
        let mut v = Vars::new();
        for (k, x) in [
            ("BATCH", b),
            ("HEADS", h),
            ("SEQ_Q", s),
            ("SEQ_KV", s),
            ("HEAD_DIM", d),
        ] {
            v.insert(k.into(), Value::Int(x));
        }
        v.insert("DTYPE".into(), Value::Str("f16".into()));
        v.insert("CAUSAL".into(), Value::Bool(false));
        v
    })
    .collect()
}

fn measurement(shape: &Vars, median: Option<f64>) -> NewMeasurement {
    NewMeasurement {
        shape: shape.clone(),
        median_us: median,
        p20_us: median.map(|m| m * 0.98),
        p80_us: median.map(|m| m * 1.03),
        samples: median.map(|m| vec![m; 3]).unwrap_or_default(),
        tflops: median.map(|m| 100.0 / m),
        peak_fraction: None,
        max_abs_err: Some(1.5e-3),
        rel_l2: Some(4e-4),
    }
}

/// A database with run `night` (GPU evaluator): A evaluated (fitness 1.2, fastest on every
/// shape but the third), B evaluated (fitness 1.0, fastest on the third), C incorrect, a
/// pending genome; and run `replayed` (replay evaluator). Returns the candidate ids.
fn fixture(db: &Path) -> BTreeMap<&'static str, i64> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::open(db.to_str().unwrap()).await.unwrap();
        let config = std::fs::read_to_string(root().join("configs/sdpa.toml")).unwrap();
        let new_run = |name: &str, evaluator: &str| NewRun {
            name: name.into(),
            config_toml: config.clone(),
            problem: "sdpa_fwd".into(),
            family: "sdpa_fwd_mma".into(),
            seed: 1,
            strategy: "evolution".into(),
            evaluator: evaluator.into(),
            device: Some("NVIDIA H100 80GB HBM3".into()),
            driver: Some("CUDA 13.0".into()),
            nvrtc_version: Some("13.0".into()),
            arch: Some("sm_90a".into()),
        };
        let run = store.create_run(&new_run("night", "gpu")).await.unwrap();
        let replayed = store
            .create_run(&new_run("replayed", "replay:landscape.json"))
            .await
            .unwrap();
        let genomes = [A, B, C, "BLOCK_M=32,BLOCK_N=32,EPILOGUE=direct,NUM_WARPS=2,PRODUCER_WARPS=1,Q_IN_REGS=true,STAGES=2,SWIZZLE=xor,WARP_SPEC=off"];
        let ids = store
            .insert_candidates(
                run,
                &genomes
                    .iter()
                    .map(|g| NewCandidate::new(Genome::parse(g).unwrap(), 0, Origin::Random))
                    .collect::<Vec<_>>(),
            )
            .await
            .unwrap();
        let rids = store
            .insert_candidates(replayed, &[NewCandidate::new(Genome::parse(A).unwrap(), 0, Origin::Seed)])
            .await
            .unwrap();
        let mut edge = shapes()[0].clone();
        edge.insert("SEQ_Q".into(), Value::Int(77));
        edge.insert("SEQ_KV".into(), Value::Int(77));
        edge.insert("HEADS".into(), Value::Int(3));
        let times = |g: usize| -> Vec<NewMeasurement> {
            let mut v: Vec<NewMeasurement> = shapes()
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let fast = (g == 0) != (i == 2);
                    measurement(s, Some(if fast { 10.0 + i as f64 } else { 20.0 + i as f64 }))
                })
                .collect();
            v.push(measurement(&edge, None));
            v
        };
        let ok = |fitness: f64| CandidateResult {
            status: Status::Evaluated,
            gate: None,
            detail: Some(String::new()),
            resources: None,
            fitness: Some(fitness),
            eval_ms: Some(1000.0),
            source_key: None,
        };
        store.record_result(ids[0], &ok(1.2), &times(0)).await.unwrap();
        store.record_result(ids[1], &ok(1.0), &times(1)).await.unwrap();
        store.record_result(rids[0], &ok(1.5), &times(0)).await.unwrap();
        let bad = CandidateResult {
            status: Status::Incorrect,
            gate: Some(Gate::Correctness),
            detail: Some("rel L2 0.3 > 0.01 on BATCH=1,HEADS=2,SEQ_Q=77".into()),
            ..ok(1.0)
        };
        store
            .record_result(ids[2], &CandidateResult { fitness: None, ..bad }, &[])
            .await
            .unwrap();
        store.close().await;
        BTreeMap::from([
            ("best", ids[0].0),
            ("second", ids[1].0),
            ("incorrect", ids[2].0),
            ("pending", ids[3].0),
            ("replayed", rids[0].0),
        ])
    })
}

fn evo(db: &Path) -> Command {
    let mut c = Command::cargo_bin("evo").unwrap();
    // A fresh compile cache per database: the CUBIN bytes then come from this compile
    // (-lineinfo records the source name and folder, which the cache key leaves out).
    c.env("EVO_DB", db)
        .env("EVO_CACHE_DIR", db.with_extension("cache"))
        .arg("--templates")
        .arg(root().join("templates"));
    c
}

fn manifest(dir: &Path) -> Json {
    serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap()
}

fn sha256(path: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(path).unwrap()))
}

fn python() -> Option<&'static str> {
    let ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipping the Python checks: no python3");
    }
    ok.then_some("python3")
}

#[test]
fn export_writes_a_complete_artifact() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("population.db");
    let ids = fixture(&db);
    let out = tmp.path().join("art");
    let o = evo(&db)
        .args(["export", "--unsanitized", "night", "--out"])
        .arg(&out)
        .assert()
        .success();
    let text = String::from_utf8_lossy(&o.get_output().stdout).to_string();
    assert!(text.contains("evo verify"), "{text}");

    // Layout: every file present, hashes as the manifest says.
    let m = manifest(&out);
    let files = m["files"].as_object().unwrap();
    let mut names: Vec<&str> = files.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "README.md",
            "bench.py",
            "evo_kernel.py",
            "example.cpp",
            "kernel.bf16_hd128.cu",
            "kernel.bf16_hd128.ptx",
            "kernel.bf16_hd128.sm_90a.cubin",
            "kernel.bf16_hd64.cu",
            "kernel.bf16_hd64.ptx",
            "kernel.bf16_hd64.sm_90a.cubin",
            "kernel.f16_hd128.cu",
            "kernel.f16_hd128.ptx",
            "kernel.f16_hd128.sm_90a.cubin",
            "kernel.f16_hd64.cu",
            "kernel.f16_hd64.ptx",
            "kernel.f16_hd64.sm_90a.cubin",
            "kernel.h",
            "sdpa_bench.py",
        ]
    );
    for (name, hash) in files {
        assert_eq!(sha256(&out.join(name)), hash.as_str().unwrap(), "{name}");
    }
    let on_disk: usize = std::fs::read_dir(&out).unwrap().count();
    assert_eq!(
        on_disk,
        files.len() + 1,
        "only the listed files and manifest.json"
    );

    // The artifact's copy of the timing module is the repository's.
    assert_eq!(
        std::fs::read(out.join("sdpa_bench.py")).unwrap(),
        std::fs::read(root().join("scripts/sdpa_bench.py")).unwrap()
    );

    // Manifest schema: every field the format promises.
    assert_eq!(m["schema"], "evo-artifact-3");
    for key in [
        "evo_version",
        "exported_unix",
        "problem",
        "mode",
        "sources",
        "device",
        "driver",
        "nvrtc_version",
        "arch",
        "abi",
        "spec_vars",
        "shape_vars",
        "variants",
        "dispatch",
        "files",
    ] {
        assert!(!m[key].is_null(), "manifest lacks {key}");
    }
    assert_eq!(m["problem"], "sdpa_fwd");
    assert_eq!(m["device"], "NVIDIA H100 80GB HBM3");
    assert_eq!(m["arch"], "sm_90a");
    let sources = m["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 1);
    let source = &sources[0];
    assert_eq!(source["run"], "night");
    assert_eq!(source["family"], "sdpa_fwd_mma");
    assert_eq!(source["evaluator"], "gpu");
    assert_eq!(source["search_nvrtc_version"], "13.0");
    assert_eq!(
        source["compile"]["options"],
        serde_json::json!(["-std=c++17", "-lineinfo"])
    );
    // No path of this machine: the CUDA include folder is named by its role.
    let text = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    let include = evo_gpu::CudaInstall::global().unwrap().include.clone();
    for path in [include.display().to_string(), root().display().to_string()] {
        assert!(!text.contains(&path), "manifest.json names {path}");
    }
    assert!(!text.contains(&tmp.path().display().to_string()));
    let options: Vec<&str> = source["compile"]["nvrtc_options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap())
        .collect();
    assert!(options.contains(&"-I{cuda_include}"), "{options:?}");
    assert!(
        options.contains(&"--gpu-architecture=sm_90a"),
        "{options:?}"
    );
    let params = m["abi"]["params"].as_array().unwrap();
    assert_eq!(params.len(), 21);
    assert_eq!(params[20]["name"], "softmax_scale");
    let variants = m["variants"].as_array().unwrap();
    let names: Vec<&str> = variants
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["f16_hd64", "f16_hd128", "bf16_hd64", "bf16_hd128"]);
    for v in variants {
        assert_eq!(v["candidate_id"], ids["best"]);
        assert_eq!(v["genome"], A);
        assert_eq!(v["run"], "night");
        assert_eq!(v["family"], "sdpa_fwd_mma");
        assert_eq!(
            v["contiguous"],
            serde_json::json!([]),
            "the mma family reads strides"
        );
        for key in [
            "specialization",
            "launches",
            "constants",
            "resources",
            "shapes",
            "compile_key",
            "cubin_file",
        ] {
            assert!(!v[key].is_null(), "variant lacks {key}");
        }
        assert_eq!(v["launches"].as_array().unwrap().len(), 1);
        assert_eq!(v["launches"][0]["kernel"], "sdpa_fwd");
        assert_eq!(v["launches"][0]["grid"][0], "ceil_div(SEQ_Q, BLOCK_M)");
        assert!(v["launches"][0]["args"].is_null(), "the ABI: no own args");
        assert!(v["scratch"].is_null(), "no scratch");
        assert_eq!(v["constants"]["BLOCK_M"], 64);
    }
    let hd64 = &variants[0];
    assert_eq!(hd64["name"], "f16_hd64");
    assert_eq!(
        hd64["specialization"],
        serde_json::json!({"CAUSAL": false, "DTYPE": "f16", "HEAD_DIM": 64})
    );
    // Four timed shapes of head dim 64 plus the edge shape, with the database's numbers.
    let shapes = hd64["shapes"].as_array().unwrap();
    assert_eq!(shapes.len(), 5);
    assert_eq!(shapes.iter().filter(|s| s["timed"] == true).count(), 4);
    assert_eq!(shapes[0]["median_us"], 10.0);
    assert_eq!(shapes[0]["max_abs_err"], 1.5e-3);
    // (1, 8, 512): grid ceil(512/64) x 8 x 1, 128 threads.
    assert_eq!(
        shapes[0]["launches"][0]["grid"],
        serde_json::json!([8, 8, 1])
    );
    assert_eq!(
        shapes[0]["launches"][0]["block"],
        serde_json::json!([128, 1, 1])
    );
    assert_eq!(m["dispatch"]["mode"], "specialization");

    // kernel.cu is self-contained: NVRTC compiles it alone (only CUDA's own headers),
    // to the very CUBIN of the artifact when given the manifest's options (with this
    // machine's CUDA include folder in its role's place).
    let source = std::fs::read_to_string(out.join("kernel.f16_hd64.cu")).unwrap();
    assert!(
        !source.contains("#include \""),
        "kernel.cu includes a local header"
    );
    assert!(source.contains("extern \"C\" __global__"));
    let options: Vec<String> = options
        .iter()
        .map(|o| o.replace("{cuda_include}", &include.display().to_string()))
        .collect();
    // (Under the name the search gave NVRTC, which -lineinfo records.)
    let name = m["variants"][0]["nvrtc_name"].as_str().unwrap();
    assert_eq!(name, format!("{A}@CAUSAL=false,DTYPE=f16,HEAD_DIM=64.cu"));
    let compiled = evo_gpu::nvrtc::compile(&source, name, &options).unwrap();
    assert!(compiled.success, "{}", compiled.log);
    assert_eq!(
        hex::encode(Sha256::digest(compiled.cubin.unwrap())),
        sha256(&out.join("kernel.f16_hd64.sm_90a.cubin")),
        "recompiling kernel.cu gives the artifact's CUBIN"
    );
    assert!(std::fs::read_to_string(out.join("kernel.f16_hd64.ptx"))
        .unwrap()
        .contains(".entry sdpa_fwd"));
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(
        readme.contains("evo_kernel.scaled_dot_product_attention(q, k, v"),
        "{readme}"
    );
    assert!(readme.contains("register_transformers()"), "{readme}");

    check_python_plan(&out, 0);
    check_python_launch(&out, 0);
    check_python_loader(&out);
    check_kernel_h(&out);

    // --force replaces it; without it, a non-empty folder is refused.
    let e = evo(&db)
        .args(["export", "--unsanitized", "night", "--out"])
        .arg(&out)
        .assert()
        .failure();
    let err = String::from_utf8_lossy(&e.get_output().stderr).to_string();
    assert!(
        err.contains("not empty") && err.contains("--force"),
        "{err}"
    );
    evo(&db)
        .args([
            "export",
            "--unsanitized",
            &ids["second"].to_string(),
            "--force",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    assert_eq!(manifest(&out)["variants"][0]["genome"], B);
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 19);

    // verify: intact → hashes ok, then no GPU here (exit 3) or a real check on a GPU.
    let v = evo(&db).arg("verify").arg(&out).assert();
    let o = v.get_output();
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(stdout.contains("hashes: ok (18 files)"), "{stdout}");
    assert!(
        stdout.contains("genomes: every variant's genome matches its hash and renders to its kernel source (4 variants)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("f16_hd64: 4 timed shapes + 5 correctness-only shapes"),
        "{stdout}"
    );
    if evo_gpu::device::probe()
        .map(|i| i.devices.is_empty())
        .unwrap_or(true)
    {
        assert_eq!(o.status.code(), Some(3), "{stdout}{stderr}");
        assert!(
            stderr.contains("cannot run here") && stderr.contains("GPU"),
            "{stderr}"
        );
    }
    // Tampered: one byte of a CUBIN, and a deleted file.
    let cubin = out.join("kernel.f16_hd128.sm_90a.cubin");
    let mut bytes = std::fs::read(&cubin).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 1;
    std::fs::write(&cubin, bytes).unwrap();
    std::fs::remove_file(out.join("kernel.h")).unwrap();
    let v = evo(&db).arg("verify").arg(&out).assert().code(1);
    let stdout = String::from_utf8_lossy(&v.get_output().stdout).to_string();
    assert!(
        stdout.contains("MODIFIED  kernel.f16_hd128.sm_90a.cubin"),
        "{stdout}"
    );
    assert!(stdout.contains("MISSING   kernel.h"), "{stdout}");
    assert!(stdout.contains("not run"), "{stdout}");
    // The same in JSON, in words rather than Rust names.
    let v = evo(&db)
        .args(["--json", "verify"])
        .arg(&out)
        .assert()
        .code(1);
    let report: Json = serde_json::from_slice(&v.get_output().stdout).unwrap();
    let state = |name: &str| {
        report["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f[0] == name)
            .map(|f| f[1].clone())
            .unwrap_or_else(|| panic!("{name} not in {report}"))
    };
    assert_eq!(state("kernel.h")["state"], "missing", "{report}");
    assert_eq!(
        state("kernel.f16_hd128.sm_90a.cubin")["state"],
        "modified",
        "{report}"
    );
    assert_eq!(state("README.md")["state"], "ok", "{report}");
}

/// evo_kernel.plan() on fake tensors (no torch, no GPU): the packed arguments equal the
/// problem's own argument list, and the launch equals the manifest's, on every shape.
fn check_python_plan(dir: &Path, tmaps: usize) {
    let Some(py) = python() else { return };
    let script = root().join("crates/evo-cli/tests/artifact_plan.py");
    let o = std::process::Command::new(py)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .arg(&script)
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let report: Json = serde_json::from_slice(&o.stdout).unwrap();
    let m = manifest(dir);
    let problem = evo_kernels::problem("sdpa_fwd").unwrap();
    let mut checked = 0;
    for plan in report["plans"].as_array().unwrap() {
        let shape: Vars = serde_json::from_value(plan["shape"].clone()).unwrap();
        let variant = m["variants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == plan["variant"])
            .unwrap();
        let rec = variant["shapes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| serde_json::from_value::<Vars>(s["shape"].clone()).unwrap() == shape)
            .unwrap();
        let launch = &plan["launches"][0];
        assert_eq!(plan["launches"].as_array().unwrap().len(), 1);
        assert_eq!(launch["grid"], rec["launches"][0]["grid"]);
        assert_eq!(launch["block"], rec["launches"][0]["block"]);
        assert_eq!(launch["shared_bytes"], rec["launches"][0]["shared_bytes"]);
        assert_eq!(plan["scratch"], serde_json::json!([]));
        let args = launch["args"].as_array().unwrap();
        let expected = problem.args(&shape);
        assert_eq!(args.len(), expected.len() + tmaps);
        // The tensor maps after the ABI (the Hopper family's q, k, v): each tensor as a
        // (HEAD_DIM, seq, HEADS, BATCH) tensor over the call's strides (here contiguous) read
        // in 64-column boxes.
        let int = |k: &str| shape[k].as_int().unwrap() as u64;
        let c = &variant["constants"];
        for (i, a) in args[expected.len()..].iter().enumerate() {
            let (seq, rows) = if i == 0 {
                (int("SEQ_Q"), c["BLOCK_M"].as_u64().unwrap())
            } else {
                (int("SEQ_KV"), c["BLOCK_N"].as_u64().unwrap())
            };
            let d = int("HEAD_DIM");
            assert_eq!(a[1], "tensor_map", "{a}");
            assert_eq!(
                a[2],
                serde_json::json!({
                    "elem": shape["DTYPE"].to_string(),
                    "address": 4096 * (i as u64 + 1),
                    "dims": [d, seq, int("HEADS"), int("BATCH")],
                    "strides_bytes": [d * 2, d * seq * 2, d * seq * int("HEADS") * 2],
                    "box": [64, rows, 1, 1],
                    "swizzle_bytes": 128,
                }),
                "{a}"
            );
        }
        for (a, e) in args.iter().zip(&expected) {
            match e {
                ArgSlot::Input(i) => assert_eq!(a[2], 4096 * (*i as u64 + 1), "{a}"),
                ArgSlot::Output => assert_eq!(a[1], "pointer"),
                ArgSlot::I32(x) => assert_eq!(
                    (a[1].as_str(), a[2].as_i64()),
                    (Some("i32"), Some(*x as i64)),
                    "{a}"
                ),
                ArgSlot::I64(x) => assert_eq!(
                    (a[1].as_str(), a[2].as_i64()),
                    (Some("i64"), Some(*x)),
                    "{a}"
                ),
                ArgSlot::F32(x) => {
                    assert!((a[2].as_f64().unwrap() - *x as f64).abs() < 1e-6, "{a}")
                }
                other => panic!("no {other:?} in a single-kernel ABI"),
            }
        }
        checked += 1;
    }
    assert!(checked >= 5, "plans for every manifest shape");
    // Calls the kernels do not serve (the binding falls back to PyTorch for them).
    let errors = report["errors"].as_object().unwrap();
    let expect = [
        ("float32", "dtype torch.float32"),
        ("cpu", "the kernels run on CUDA devices"),
        ("head_dim_96", "head dim 96"),
        ("causal", "is_causal=True"),
        ("kv_mismatch", "shapes do not fit"),
        ("three_d", "4-D (batch, heads, seq, head_dim)"),
        ("mixed_dtypes", "different dtypes"),
        ("grid_z", "grid.z"),
    ];
    for (case, text) in expect {
        let got = errors[case].as_str().unwrap_or("(no error)");
        assert!(got.contains(text), "{case}: {got}");
    }
    // Layouts the kernels cannot read are copied to contiguous first: a strided last
    // dimension, strides that are not multiples of 8 elements (of a dimension of more than one
    // element). Padded rows are read in place
    // (the Hopper family's maps take the call's strides). Misaligned data is cloned at call
    // time (plan() does not see addresses).
    let copies = &report["copies"];
    for case in ["last_dim_strided", "seq_stride_odd"] {
        assert_eq!(copies[case], serde_json::json!(["q"]), "{case}");
    }
    for case in ["misaligned", "padded_rows", "one_batch_odd_stride"] {
        assert_eq!(copies[case], serde_json::json!([]), "{case}");
    }
    // Elements that share memory (an expand()ed k) are outside the ABI: copied.
    assert_eq!(copies["expanded_k"], serde_json::json!(["k"]));
    // A model's (batch, seq, heads, dim) views: read in place, each map stepping over rows
    // HEADS * HEAD_DIM apart, heads HEAD_DIM apart, batches SEQ * HEADS * HEAD_DIM apart.
    let bshd = &report["bshd"];
    assert_eq!(bshd["copies"], serde_json::json!([]));
    let maps = bshd["maps"].as_array().unwrap();
    assert_eq!(maps.len(), tmaps);
    let sh = &bshd["shape"];
    let int = |k: &str| sh[k].as_u64().unwrap();
    let (h, d) = (int("HEADS"), int("HEAD_DIM"));
    for (i, m) in maps.iter().enumerate() {
        let seq = if i == 0 { int("SEQ_Q") } else { int("SEQ_KV") };
        assert_eq!(
            m["dims"],
            serde_json::json!([d, seq, h, int("BATCH")]),
            "{m}"
        );
        assert_eq!(
            m["strides_bytes"],
            serde_json::json!([h * d * 2, d * 2, seq * h * d * 2]),
            "{m}"
        );
    }
}

/// A fake libcuda.so.1 built from tests/fake_cuda/libcuda.c into `dir`, or None (with
/// the reason printed) when there is no gcc.
fn fake_driver(dir: &Path) -> Option<()> {
    let gcc = std::process::Command::new("gcc")
        .args(["-shared", "-fPIC", "-Wall", "-Werror", "-o"])
        .arg(dir.join("libcuda.so.1"))
        .arg(root().join("crates/evo-cli/tests/fake_cuda/libcuda.c"))
        .output();
    match gcc {
        Ok(o) if o.status.success() => Some(()),
        Ok(o) => panic!("gcc: {}", String::from_utf8_lossy(&o.stderr)),
        Err(_) => {
            eprintln!("skipping the fake-driver checks: no gcc");
            None
        }
    }
}

/// `script DIR` under the fake torch and transformers and the fake driver in `lib`, with
/// `env`; its stdout as JSON (a failure prints its output).
fn run_fake(lib: &Path, script: &str, dir: &Path, env: &[(&str, String)]) -> Option<Json> {
    let py = python()?;
    let mut c = std::process::Command::new(py);
    c.env("PYTHONDONTWRITEBYTECODE", "1")
        .arg(root().join("crates/evo-cli/tests").join(script))
        .arg(dir)
        .env("PYTHONPATH", root().join("crates/evo-cli/tests/fake_cuda"))
        .env("LD_LIBRARY_PATH", lib)
        .env_remove("EVO_KERNEL_STRICT");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{script}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    Some(serde_json::from_slice(&o.stdout).unwrap())
}

/// evo_kernel's call path (tests/artifact_loader.py) on a fake torch and driver: the plan
/// cache, every fallback reason, strict mode, layout copies, the op, transformers.
fn check_python_loader(dir: &Path) {
    let tmp = tempfile::tempdir().unwrap();
    if fake_driver(tmp.path()).is_none() {
        return;
    }
    let Some(report) = run_fake(tmp.path(), "artifact_loader.py", dir, &[]) else {
        return;
    };
    let checked: Vec<&str> = report["checked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    for what in [
        "cache",
        "served",
        "fallback:mask",
        "fallback:dropout",
        "fallback:gqa",
        "fallback:dtype",
        "fallback:head_dim",
        "fallback:device",
        "fallback:arch",
        "fallback:shape",
        "fallback:grad",
        "strict:function",
        "strict:environment",
        "layout",
        "op",
        "transformers",
    ] {
        assert!(checked.contains(&what), "{what} not checked: {checked:?}");
    }
}

/// evo_kernel.attention() through ctypes into a fake libcuda.so.1 (and a fake torch):
/// the driver calls it makes, and every launch parameter as the kernel would read it; a
/// second call of a shape reuses its plan and re-points its tensor maps. The fake driver
/// reports a compiled cluster of 16 CTAs: each function gets the non-portable cluster
/// permission once, when it is loaded.
fn check_python_launch(dir: &Path, tmaps: usize) {
    let tmp = tempfile::tempdir().unwrap();
    if fake_driver(tmp.path()).is_none() {
        return;
    }
    let log = tmp.path().join("cuda.log");
    let Some(report) = run_fake(
        tmp.path(),
        "artifact_launch.py",
        dir,
        &[
            ("FAKE_CUDA_LOG", log.display().to_string()),
            ("FAKE_CUDA_TMAPS", tmaps.to_string()),
            ("FAKE_CUDA_CLUSTER", "16".into()),
        ],
    ) else {
        return;
    };
    assert_eq!(report["float32"], serde_json::json!({"dtype": 1}));
    assert_eq!(report["served"], report["calls"].as_array().unwrap().len());
    let log = std::fs::read_to_string(&log).unwrap();
    let m = manifest(dir);
    let variants = m["variants"].as_array().unwrap();
    // One driver init, one module load (an ELF image) and function per variant.
    assert_eq!(log.matches("cuInit 0").count(), 1, "{log}");
    assert_eq!(
        log.matches("load 7f454c46").count(),
        variants.len(),
        "{log}"
    );
    assert_eq!(
        log.matches("function 0x2000 sdpa_fwd").count(),
        variants.len(),
        "{log}"
    );
    for query in ["get_attribute 0x3000 11\n", "attribute 0x3000 14 1\n"] {
        assert_eq!(log.matches(query).count(), variants.len(), "{query}: {log}");
    }
    assert_eq!(
        log.matches("push").count(),
        log.matches("pop").count(),
        "{log}"
    );
    let launches: Vec<&str> = log.lines().filter(|l| l.starts_with("launch")).collect();
    let calls = report["calls"].as_array().unwrap();
    let launched = report["launched"].as_array().unwrap();
    // A call's q, k, v and o addresses as the launch log prints them.
    let ptr_strings = |call: &serde_json::Value| -> Vec<String> {
        call["ptrs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.to_string())
            .collect()
    };
    assert_eq!(launches.len(), calls.len() + launched.len());
    // Two plans per variant, each encoding its maps once; the third call re-points them, as
    // does each of kernel_launcher's two calls (the first shape's plan, new tensors).
    assert_eq!(
        log.matches("tmap aligned").count(),
        2 * tmaps * variants.len(),
        "{log}"
    );
    assert_eq!(
        log.matches("replace aligned 1").count(),
        4 * tmaps * variants.len(),
        "{log}"
    );
    // kernel_launcher: each launch takes its call's q, k, v and the launcher's one output (the
    // third a given one), and is not counted as served.
    assert_eq!(report["served_after_launcher"], report["served"]);
    assert_eq!(launched.len(), 3 * variants.len());
    for (pair, lines) in launched.chunks(3).zip(launches[calls.len()..].chunks(3)) {
        assert_eq!(pair[2]["ptrs"][3], pair[2]["given"]);
        assert_ne!(pair[2]["ptrs"][3], pair[0]["ptrs"][3]);
        for (l, line) in pair.iter().zip(lines) {
            let ptrs = ptr_strings(l);
            assert!(
                line.contains(&format!(" args {} ", ptrs.join(" "))),
                "{line}: {ptrs:?}"
            );
        }
        assert_eq!(
            pair[0]["ptrs"][3], pair[1]["ptrs"][3],
            "one output per launcher"
        );
        assert_ne!(pair[0]["ptrs"][0], pair[1]["ptrs"][0]);
    }
    let problem = evo_kernels::problem("sdpa_fwd").unwrap();
    for (n, (line, call)) in launches.iter().zip(calls).enumerate() {
        let dims: Vec<i64> = call["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect();
        let (b, h, sq, skv, d) = (dims[0], dims[1], dims[2], dims[3], dims[4]);
        let mut shape = shapes()[0].clone();
        for (k, x) in [
            ("BATCH", b),
            ("HEADS", h),
            ("SEQ_Q", sq),
            ("SEQ_KV", skv),
            ("HEAD_DIM", d),
        ] {
            shape.insert(k.into(), Value::Int(x));
        }
        let v = variants
            .iter()
            .find(|v| {
                v["specialization"]["HEAD_DIM"] == d
                    && v["specialization"]["DTYPE"] == call["dtype"]
            })
            .unwrap();
        let c = &v["constants"];
        let block_m = c["BLOCK_M"].as_i64().unwrap();
        let smem = c["SMEM_BYTES"].as_i64().unwrap();
        let ptrs = ptr_strings(call);
        let mut want = format!(
            "launch 0x3000 grid {} {h} {b} block {} 1 1 smem {smem} stream 0x5500 extra (nil) args {}",
            (sq + block_m - 1) / block_m,
            c["THREADS"],
            ptrs.join(" ")
        );
        for a in &problem.args(&shape)[4..] {
            match a {
                ArgSlot::I32(x) => want.push_str(&format!(" {x}")),
                ArgSlot::I64(x) => want.push_str(&format!(" {x}")),
                ArgSlot::F32(x) => want.push_str(&format!(" {}", format_g7(*x))),
                _ => unreachable!("pointers come first"),
            }
        }
        // Each tensor map (q, k, v) encoded over its tensor (or, on the plan's next call,
        // given the new tensor's address), and passed by value.
        for (i, p) in ptrs.iter().take(tmaps).enumerate() {
            if n % 3 == 2 {
                want.push_str(&format!(" tmap:{p}"));
                let replace = format!("replace aligned 1 address {p}\n");
                assert!(log.contains(&replace), "{replace}\n{log}");
                continue;
            }
            want.push_str(&format!(" tmap:{p}"));
            let (seq, rows) = if i == 0 {
                (sq, block_m)
            } else {
                (skv, c["BLOCK_N"].as_i64().unwrap())
            };
            let encode = format!(
                "tmap aligned 1 dtype {} rank 4 address {p} dims {d} {seq} {h} {b} strides {} {} {} box 64 {rows} 1 1 element_strides 1 1 1 1 interleave 0 swizzle 3 l2 2 oob 0",
                if call["dtype"] == "bf16" { 9 } else { 6 },
                d * 2,
                d * seq * 2,
                d * seq * h * 2
            );
            assert!(log.contains(&encode), "{encode}\n{log}");
        }
        assert_eq!(*line, want);
        assert_eq!(call["out_shape"], serde_json::json!([b, h, sq, d]));
        if smem > 48 * 1024 {
            assert!(log.contains(&format!("attribute 0x3000 8 {smem}")), "{log}");
        }
    }
}

/// C's `%.7g` of the softmax scales the tests use (1/8 and 1/sqrt(128)).
fn format_g7(x: f32) -> String {
    if x == 0.125 {
        "0.125".into()
    } else if (x - 0.088_388_35).abs() < 1e-8 {
        "0.08838835".into()
    } else {
        panic!("no %.7g for {x}")
    }
}

/// kernel.h compiles with g++ against cuda.h, its launch_dims() gives the manifest's
/// launch on every shape, its `variants[]` table lists every variant with its
/// specialization, and example.cpp compiles against it.
fn check_kernel_h(dir: &Path) {
    let include = evo_gpu::CudaInstall::global().unwrap().include.clone();
    if std::process::Command::new("g++")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipping the kernel.h check: no g++");
        return;
    }
    let m = manifest(dir);
    let mut main = String::from("#include \"kernel.h\"\n#include <cstdio>\nint main() {\n");
    let mut expected = String::new();
    for v in m["variants"].as_array().unwrap() {
        for s in v["shapes"].as_array().unwrap() {
            let sh = &s["shape"];
            main.push_str(&format!(
                "  {{ auto d = evo_artifact::{}::launch_dims(0, {}, {}, {}, {}); std::printf(\"%u %u %u %u %u %u %u\\n\", d.grid[0], d.grid[1], d.grid[2], d.block[0], d.block[1], d.block[2], d.shared_bytes); }}\n",
                v["name"].as_str().unwrap(), sh["BATCH"], sh["HEADS"], sh["SEQ_Q"], sh["SEQ_KV"]
            ));
            let l = &s["launches"][0];
            expected.push_str(&format!(
                "{} {} {} {} {} {} {}\n",
                l["grid"][0],
                l["grid"][1],
                l["grid"][2],
                l["block"][0],
                l["block"][1],
                l["block"][2],
                l["shared_bytes"]
            ));
        }
    }
    // The variant table, in manifest order, with each variant's specialization.
    main.push_str(
        "  for (const auto& v : evo_artifact::variants) std::printf(\"%s %s %s %lld %d %d\\n\", v.name, v.cubin, v.dtype, v.head_dim, (int)v.causal, v.num_kernels);\n",
    );
    for v in m["variants"].as_array().unwrap() {
        let spec = &v["specialization"];
        expected.push_str(&format!(
            "{} {} {} {} {} {}\n",
            v["name"].as_str().unwrap(),
            v["cubin_file"].as_str().unwrap(),
            spec["DTYPE"].as_str().unwrap(),
            spec["HEAD_DIM"],
            spec["CAUSAL"].as_bool().unwrap() as i32,
            v["launches"].as_array().unwrap().len()
        ));
    }
    main.push_str("  return 0;\n}\n");
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("main.cpp"), main).unwrap();
    let exe = tmp.path().join("main");
    // The variant table takes each launch()'s address: linked against the fake driver.
    fake_driver(tmp.path()).expect("gcc, as g++ is here");
    let o = std::process::Command::new("g++")
        .arg("-std=c++17")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(dir)
        .arg("-I")
        .arg(&include)
        .arg(tmp.path().join("main.cpp"))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(tmp.path())
        .arg("-l:libcuda.so.1")
        .arg(format!("-Wl,-rpath,{}", tmp.path().display()))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "g++: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let run = std::process::Command::new(&exe).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout), expected);
    // launch() (scratch, tensor maps, every kernel) compiles too; not linked (no libcuda here).
    let mut calls = String::from("#include \"kernel.h\"\n");
    for (i, v) in m["variants"].as_array().unwrap().iter().enumerate() {
        let zeros = vec!["0"; m["abi"]["params"].as_array().unwrap().len()].join(", ");
        calls.push_str(&format!(
            "CUresult call{i}(const CUfunction* f, CUstream s) {{ return evo_artifact::{}::launch(f, s, {zeros}, 0); }}\n",
            v["name"].as_str().unwrap()
        ));
    }
    std::fs::write(tmp.path().join("calls.cpp"), calls).unwrap();
    let o = std::process::Command::new("g++")
        .args(["-std=c++17", "-Wall", "-Werror", "-c", "-I"])
        .arg(dir)
        .arg("-I")
        .arg(&include)
        .arg(tmp.path().join("calls.cpp"))
        .arg("-o")
        .arg(tmp.path().join("calls.o"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "g++ -c: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // example.cpp (the artifact's C++ program over kernel.h's variant table) compiles and
    // links (the driver calls the fake driver lacks left unresolved: it does not run here).
    let o = std::process::Command::new("g++")
        .args(["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(dir)
        .arg("-I")
        .arg(&include)
        .arg(dir.join("example.cpp"))
        .arg("-o")
        .arg(tmp.path().join("example"))
        .args(["-Wl,--unresolved-symbols=ignore-all"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "g++ example.cpp: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn per_shape_export_picks_the_fastest_genome_of_each_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("population.db");
    fixture(&db);
    let out = tmp.path().join("art");
    evo(&db)
        .args(["export", "--unsanitized", "night", "--per-shape", "--out"])
        .arg(&out)
        .assert()
        .success();
    let m = manifest(&out);
    assert_eq!(m["mode"], "per_shape");
    assert_eq!(m["dispatch"]["mode"], "per_shape");
    let table = m["dispatch"]["table"].as_array().unwrap();
    assert_eq!(table.len(), 10);
    let a = Genome::parse(A).unwrap().hash().0;
    let b = Genome::parse(B).unwrap().hash().0;
    // B is the faster on the third fp16 shape only.
    let want = [
        format!("f16_hd64_{}", &a[..8]),
        format!("f16_hd64_{}", &a[..8]),
        format!("f16_hd64_{}", &b[..8]),
        format!("f16_hd128_{}", &a[..8]),
        format!("f16_hd64_{}", &a[..8]),
        format!("bf16_hd64_{}", &a[..8]),
        format!("bf16_hd64_{}", &a[..8]),
        format!("bf16_hd64_{}", &a[..8]),
        format!("bf16_hd128_{}", &a[..8]),
        format!("bf16_hd64_{}", &a[..8]),
    ];
    for (e, w) in table.iter().zip(&want) {
        assert_eq!(e["variant"].as_str().unwrap(), w);
        assert!(e["shape"]["SEQ_Q"].is_i64());
    }
    assert_eq!(m["variants"].as_array().unwrap().len(), 5);
    for (name, hash) in m["files"].as_object().unwrap() {
        assert_eq!(sha256(&out.join(name)), hash.as_str().unwrap(), "{name}");
    }
    // Python's dispatch: exact match, else the nearest in log2 distance.
    if let Some(py) = python() {
        let script = root().join("crates/evo-cli/tests/artifact_plan.py");
        let o = std::process::Command::new(py)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .arg(&script)
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let report: Json = serde_json::from_slice(&o.stdout).unwrap();
        let picks = &report["picks"];
        assert_eq!(picks["2,8,2048,64"], want[2].as_str());
        assert_eq!(
            picks["2,8,1800,64"],
            want[2].as_str(),
            "nearest to seq 2048 at batch 2"
        );
        assert_eq!(
            picks["1,8,600,64"],
            want[0].as_str(),
            "nearest to (1, 8, 512)"
        );
        assert_eq!(
            picks["3,8,512,128"],
            want[3].as_str(),
            "the only head-dim-128 entry"
        );
    }
}

/// Sets run `run`'s baselines: each shape's time and the store's source text (what
/// evo_run::baseline writes: `torch: ...`, `import:FILE (...)`, `genome:HASH`).
fn set_baselines(db: &Path, run: &str, rows: &[(&Vars, f64, &str)]) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::open(db.to_str().unwrap()).await.unwrap();
        let id = store.run(run).await.unwrap().unwrap().id;
        let rows: Vec<(String, f64, &str)> = rows
            .iter()
            .map(|(s, t, source)| (evo_core::shape_key(s), *t, *source))
            .collect();
        store.set_baselines(id, &rows).await.unwrap();
        store.close().await;
    });
}

/// The fixture with baselines for run `night`, whose per-shape winners take 10 + i µs on
/// shape i (B's 12 µs on the third): PyTorch faster on shapes 1 and 2 (timed at the run's
/// start) and 5 (imported), 1.06x slower on 0, equal on 3, a faster genome baseline on 6
/// (says nothing about PyTorch), none elsewhere.
fn fixture_with_baselines(db: &Path) {
    fixture(db);
    let s = shapes();
    let torch = "torch: torch 2.9 sdpa (default backend), CUDA graph";
    set_baselines(
        db,
        "night",
        &[
            (&s[0], 10.6, torch),
            (&s[1], 10.9, torch),
            (&s[2], 11.0, torch),
            (&s[3], 13.0, torch),
            (
                &s[5],
                14.0,
                "import:/tmp/torch_baseline.json (torch 2.9 sdpa)",
            ),
            (&s[6], 1.0, "genome:3faffb3e200ffd91"),
        ],
    );
}

/// The table indices of `fixture_with_baselines` an export marks `defer`, with (variant
/// µs, baseline µs): at the default --min-speedup 1.05 the shapes where PyTorch was
/// faster or equal (not the 1.06x one, nor the genome baseline's); at 1 only the faster.
const DEFERRED: [(usize, f64, f64); 4] = [
    (1, 11.0, 10.9),
    (2, 12.0, 11.0),
    (3, 13.0, 13.0),
    (5, 15.0, 14.0),
];
const DEFERRED_AT_1: [(usize, f64, f64); 3] = [(1, 11.0, 10.9), (2, 12.0, 11.0), (5, 15.0, 14.0)];

/// The calls (B,H,S,D,dtype) of artifact_slower.py for the fixture's table at --min-speedup
/// 1: the marked shapes, and one nearest to the third (2, 8, 2048, 64); the others. At the
/// default 1.05 the equal shape (2, 8, 512, 128) goes to PyTorch too.
const SLOWER_CALLS: &str = "2,8,512,64,f16;2,8,2048,64,f16;2,8,1800,64,f16;1,8,512,64,bf16";
const EQUAL_CALL: &str = "2,8,512,128,f16";
const SERVED_CALLS: &str = "1,8,512,64,f16;4,8,2048,64,f16;2,8,512,64,bf16;4,8,2048,64,bf16";

/// evo's stdout and stderr of a command that must fail, for the message.
fn failing(c: &mut Command) -> String {
    let a = c.assert().failure();
    String::from_utf8_lossy(&a.get_output().stderr).to_string()
}

/// A per-shape export marks exactly the entries whose run measured the chosen variant less
/// than 1.05x faster than PyTorch's SDPA, or slower (not where it was 1.06x faster, had no
/// PyTorch time, or where the faster baseline was a genome), with both times; says so in
/// its notes, its summary, kernel.h and README.md; evo_kernel.py sends those calls (and the
/// nearest ones) to PyTorch as "slower" and serves the others; verify accepts the marks and
/// refuses a manifest whose mark was removed, invented or altered, or whose record of the
/// threshold was edited.
#[test]
fn per_shape_export_defers_to_pytorch_where_it_was_not_faster() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("population.db");
    fixture_with_baselines(&db);
    let want = DEFERRED;
    let out = tmp.path().join("art");
    let o = evo(&db)
        .args(["export", "--unsanitized", "night", "--per-shape", "--out"])
        .arg(&out)
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&o.get_output().stdout).to_string();
    let stderr = String::from_utf8_lossy(&o.get_output().stderr).to_string();
    let m = manifest(&out);
    assert_eq!(m["dispatch"]["min_speedup"], 1.05);
    assert_eq!(m["dispatch"]["table"].as_array().unwrap().len(), 10);
    assert_marks(&m, &want);
    let kinds = &m["sources"][0]["baseline_kind"];
    assert_eq!(kinds[evo_core::shape_key(&shapes()[5])], "import");
    assert_eq!(kinds[evo_core::shape_key(&shapes()[6])], "genome");
    assert_eq!(kinds[evo_core::shape_key(&shapes()[2])], "torch");
    // The shapes without a PyTorch baseline (none, or the genome's on shape 6) are said.
    assert!(
        stderr.contains(
            "5 of 10 shapes were not measured against PyTorch's SDPA (the baseline of run `night`"
        ),
        "{stderr}"
    );
    // The notes name the deferred shapes with both times; the summary marks their lines.
    let third = "CAUSAL=false,DTYPE=f16,HEAD_DIM=64 BATCH=2,HEADS=8,SEQ_KV=2048,SEQ_Q=2048";
    assert!(
        stderr.contains("4 shapes go to PyTorch's SDPA in evo_kernel.py")
            && stderr.contains("less than 1.05x faster than it")
            && stderr.contains(&format!("{third} (PyTorch's SDPA 11.00 µs,"))
            && stderr.contains("12.00 µs: evo 0.92x)")
            && stderr.contains("13.00 µs: evo 1.00x)"),
        "{stderr}"
    );
    assert_eq!(
        stdout.matches("(evo_kernel.py: PyTorch's SDPA,").count(),
        4,
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "dispatch {third} -> f16_hd64_{} (evo_kernel.py: PyTorch's SDPA, 11.00 us against the variant's 12.00 us)",
            &Genome::parse(B).unwrap().hash().0[..8]
        )),
        "{stdout}"
    );
    let kernel_h = std::fs::read_to_string(out.join("kernel.h")).unwrap();
    assert!(
        kernel_h.contains("C++ has no SDPA to fall back to")
            && kernel_h.contains(&format!("//   {third} -> ")),
        "{kernel_h}"
    );
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert_eq!(
        readme
            .matches("| PyTorch's SDPA (11.00 µs; the variant 12.00 µs) |")
            .count(),
        1,
        "{readme}"
    );
    assert!(readme.contains("C++ callers keep the variant"), "{readme}");

    // evo_kernel.py: the marked shapes and the nearest fall back as "slower", the rest run.
    let lib = tempfile::tempdir().unwrap();
    if fake_driver(lib.path()).is_some() {
        if let Some(report) = run_fake(
            lib.path(),
            "artifact_slower.py",
            &out,
            &[
                ("SLOWER", format!("{SLOWER_CALLS};{EQUAL_CALL}")),
                ("SERVED", SERVED_CALLS.into()),
            ],
        ) {
            let checked = report["checked"].as_array().unwrap();
            assert_eq!(checked.len(), 9, "{report}");
            assert_eq!(report["stats"]["fallback"]["slower"], 5, "{report}");
            let details = &report["details"];
            assert!(
                details["2,8,2048,64,f16"]
                    .as_str()
                    .unwrap()
                    .contains("PyTorch's SDPA at 11.00 us and evo's"),
                "{report}"
            );
            assert!(
                details["2,8,1800,64,f16"]
                    .as_str()
                    .unwrap()
                    .contains("the nearest searched shape"),
                "{report}"
            );
        }
    }

    // verify: the marks agree with the manifest's own times.
    let v = evo(&db).arg("verify").arg(&out).assert();
    let text = String::from_utf8_lossy(&v.get_output().stdout).to_string();
    assert!(
        text.contains(
            "dispatch: marks agree with the manifest's times: 4 of 10 shapes go to PyTorch's SDPA"
        ),
        "{text}"
    );
    // Hand edits of the (unhashed) manifest fail, each with its reason.
    let original = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    let edit = |f: &dyn Fn(&mut Json), needle: &str| {
        let mut m: Json = serde_json::from_str(&original).unwrap();
        f(&mut m);
        std::fs::write(out.join("manifest.json"), m.to_string()).unwrap();
        let err = failing(evo(&db).arg("verify").arg(&out));
        assert!(err.contains(needle), "{needle}: {err}");
    };
    edit(
        &|m| {
            m["dispatch"]["table"][2]
                .as_object_mut()
                .unwrap()
                .remove("defer");
        },
        &format!("dispatch entry {third} has no defer mark, but its run measured evo's variant less than 1.05x faster than PyTorch's SDPA there (PyTorch's SDPA 11 µs"),
    );
    edit(
        &|m| {
            m["dispatch"]["table"][0]["defer"] =
                serde_json::json!({"variant_us": 10.0, "baseline_us": 10.6})
        },
        "is marked defer (PyTorch's SDPA 10.6 µs, f16_hd64_",
    );
    edit(
        &|m| m["dispatch"]["table"][2]["defer"]["baseline_us"] = Json::from(9.0),
        "defer mark says PyTorch's SDPA 9 µs",
    );
    // The threshold is checked with the marks: at 1 the equal shape is not deferred, at 0
    // none is, and a threshold that is no speedup is refused.
    edit(
        &|m| m["dispatch"]["min_speedup"] = Json::from(1.0),
        "is marked defer (PyTorch's SDPA 13 µs",
    );
    edit(
        &|m| m["dispatch"]["min_speedup"] = Json::from(0.0),
        "dispatch.min_speedup (0) it is not",
    );
    edit(
        &|m| m["dispatch"]["min_speedup"] = Json::from(-1.0),
        "dispatch.min_speedup is -1, not a speedup",
    );
    edit(
        &|m| {
            m["dispatch"].as_object_mut().unwrap().remove("min_speedup");
            for e in m["dispatch"]["table"].as_array_mut().unwrap() {
                e.as_object_mut().unwrap().remove("defer");
            }
        },
        "dispatch.min_speedup is missing",
    );
    std::fs::write(out.join("manifest.json"), &original).unwrap();
    evo(&db)
        .arg("verify")
        .arg(&out)
        .assert()
        .stdout(predicates::str::contains("dispatch: marks agree"));
}

/// `--min-speedup 1` marks only the shapes where PyTorch was faster (the equal one runs
/// evo's kernel). `--keep-slower` marks nothing (and records it): evo_kernel.py runs evo's
/// kernels on every shape, the notes name the shapes where PyTorch was faster, and verify
/// refuses a mark added by hand. A specialization-mode export (one variant for every shape)
/// marks nothing either; --keep-slower or --min-speedup without --per-shape, both together,
/// or a negative speedup are usage errors.
#[test]
fn min_speedup_keep_slower_and_specialization_exports() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("population.db");
    fixture_with_baselines(&db);
    let at_1 = tmp.path().join("at_1");
    evo(&db)
        .args([
            "export",
            "--unsanitized",
            "night",
            "--per-shape",
            "--min-speedup",
            "1",
            "--out",
        ])
        .arg(&at_1)
        .assert()
        .success()
        .stderr(predicates::str::contains(
            "3 shapes go to PyTorch's SDPA in evo_kernel.py",
        ));
    let m = manifest(&at_1);
    assert_eq!(m["dispatch"]["min_speedup"], 1.0);
    assert_marks(&m, &DEFERRED_AT_1);
    let lib = tempfile::tempdir().unwrap();
    if fake_driver(lib.path()).is_some() {
        if let Some(report) = run_fake(
            lib.path(),
            "artifact_slower.py",
            &at_1,
            &[
                ("SLOWER", SLOWER_CALLS.into()),
                ("SERVED", format!("{SERVED_CALLS};{EQUAL_CALL}")),
            ],
        ) {
            assert_eq!(report["checked"].as_array().unwrap().len(), 9, "{report}");
            assert_eq!(report["stats"]["fallback"]["slower"], 4, "{report}");
        }
    }
    evo(&db)
        .arg("verify")
        .arg(&at_1)
        .assert()
        .stdout(predicates::str::contains(
            "3 of 10 shapes go to PyTorch's SDPA in evo_kernel.py (their run measured evo's variant less than 1x faster than it)",
        ));

    let out = tmp.path().join("art");
    let o = evo(&db)
        .args([
            "export",
            "--unsanitized",
            "night",
            "--per-shape",
            "--keep-slower",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    let stderr = String::from_utf8_lossy(&o.get_output().stderr).to_string();
    assert!(
        stderr.contains("--keep-slower: evo_kernel.py runs evo's kernels on 3 shapes where their run measured PyTorch's SDPA faster"),
        "{stderr}"
    );
    let m = manifest(&out);
    assert_eq!(m["dispatch"]["min_speedup"], 0.0);
    assert_marks(&m, &[]);
    if fake_driver(lib.path()).is_some() {
        if let Some(report) = run_fake(
            lib.path(),
            "artifact_slower.py",
            &out,
            &[(
                "SERVED",
                format!("{SLOWER_CALLS};{SERVED_CALLS};{EQUAL_CALL}"),
            )],
        ) {
            assert_eq!(report["checked"].as_array().unwrap().len(), 9, "{report}");
            assert_eq!(report["stats"]["fallback"], serde_json::json!({}));
        }
    }
    let v = evo(&db).arg("verify").arg(&out).assert();
    let text = String::from_utf8_lossy(&v.get_output().stdout).to_string();
    assert!(
        text.contains("dispatch: exported with --keep-slower"),
        "{text}"
    );
    let original = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    let mut edited: Json = serde_json::from_str(&original).unwrap();
    edited["dispatch"]["table"][2]["defer"] =
        serde_json::json!({"variant_us": 12.0, "baseline_us": 11.0});
    std::fs::write(out.join("manifest.json"), edited.to_string()).unwrap();
    let err = failing(evo(&db).arg("verify").arg(&out));
    assert!(err.contains("dispatch.min_speedup (0) it is not"), "{err}");

    // Specialization mode: no marks, no record of the choice, and a mark added is refused.
    let best = tmp.path().join("best");
    evo(&db)
        .args(["export", "--unsanitized", "night", "--out"])
        .arg(&best)
        .assert()
        .success();
    let m = manifest(&best);
    assert!(m["dispatch"].get("min_speedup").is_none());
    assert_marks(&m, &[]);
    let text = std::fs::read_to_string(best.join("manifest.json")).unwrap();
    let mut edited: Json = serde_json::from_str(&text).unwrap();
    edited["dispatch"]["table"][0]["defer"] =
        serde_json::json!({"variant_us": 12.0, "baseline_us": 11.0});
    std::fs::write(best.join("manifest.json"), edited.to_string()).unwrap();
    let err = failing(evo(&db).arg("verify").arg(&best));
    assert!(
        err.contains("is marked defer") && err.contains("this artifact marks no entry"),
        "{err}"
    );
    for (args, needle) in [
        (&["--keep-slower"][..], "--per-shape"),
        (&["--min-speedup", "1.1"][..], "--per-shape"),
        (
            &["--per-shape", "--keep-slower", "--min-speedup", "1.1"][..],
            "cannot be used with",
        ),
        (&["--per-shape", "--min-speedup=-1"][..], "is not a speedup"),
    ] {
        let a = evo(&db)
            .args(["export", "night", "--out"])
            .arg(tmp.path().join("usage"))
            .args(args)
            .assert()
            .code(2);
        let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// The `defer` marks of a manifest's dispatch table are exactly `want`'s (table index,
/// variant µs, baseline µs).
fn assert_marks(m: &Json, want: &[(usize, f64, f64)]) {
    let table = m["dispatch"]["table"].as_array().unwrap();
    for (i, e) in table.iter().enumerate() {
        match want.iter().find(|w| w.0 == i) {
            Some(&(_, variant_us, baseline_us)) => assert_eq!(
                e["defer"],
                serde_json::json!({"variant_us": variant_us, "baseline_us": baseline_us}),
                "entry {i}"
            ),
            None => assert!(e.get("defer").is_none(), "entry {i}: {e}"),
        }
    }
}

/// A database with run `name` of `configs/<config>.toml` (family `family`): one evaluated
/// genome with a time on each of `shapes` (10, 11, ... µs), measured on an H200.
fn one_genome_run(
    db: &Path,
    name: &str,
    config: &str,
    family: &str,
    genome: &str,
    shapes: &[Vars],
) {
    genome_run(
        db,
        &OneGenome {
            name,
            config_toml: std::fs::read_to_string(root().join(format!("configs/{config}.toml")))
                .unwrap(),
            family,
            genome,
            device: "NVIDIA H200",
            times: shapes
                .iter()
                .enumerate()
                .map(|(i, s)| (s.clone(), Some(10.0 + i as f64)))
                .collect(),
            status: Status::Evaluated,
            resources: None,
        },
    );
}

/// A run of one genome: its config text, family, GPU, time per shape (None: not timed there),
/// its status (evaluated, or regressed: no fitness) and the resources its result records (a
/// search's: per specialization, its compile key).
struct OneGenome<'a> {
    name: &'a str,
    config_toml: String,
    family: &'a str,
    genome: &'a str,
    device: &'a str,
    times: Vec<(Vars, Option<f64>)>,
    status: Status,
    resources: Option<Json>,
}

/// Writes the run; returns its candidate's id.
fn genome_run(db: &Path, r: &OneGenome) -> i64 {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::open(db.to_str().unwrap()).await.unwrap();
        let run = store
            .create_run(&NewRun {
                name: r.name.into(),
                config_toml: r.config_toml.clone(),
                problem: r
                    .config_toml
                    .lines()
                    .find_map(|l| l.strip_prefix("problem = "))
                    .map(|p| p.trim_matches('"').to_string())
                    .expect("the config names its problem"),
                family: r.family.into(),
                seed: 1,
                strategy: "evolution".into(),
                evaluator: "gpu".into(),
                device: Some(r.device.into()),
                driver: Some("CUDA 13.0".into()),
                nvrtc_version: Some("13.0".into()),
                arch: Some("sm_90a".into()),
            })
            .await
            .unwrap();
        let ids = store
            .insert_candidates(
                run,
                &[NewCandidate::new(
                    Genome::parse(r.genome).unwrap(),
                    0,
                    Origin::Seed,
                )],
            )
            .await
            .unwrap();
        let times: Vec<NewMeasurement> = r.times.iter().map(|(s, t)| measurement(s, *t)).collect();
        let evaluated = r.status == Status::Evaluated;
        let result = CandidateResult {
            status: r.status,
            gate: None,
            detail: Some(if evaluated {
                String::new()
            } else {
                "slower than the baseline on 5 shapes".into()
            }),
            resources: r.resources.clone(),
            fitness: evaluated.then_some(1.1),
            eval_ms: Some(1000.0),
            source_key: None,
        };
        store.record_result(ids[0], &result, &times).await.unwrap();
        store.close().await;
        ids[0].0
    })
}

/// A genome of the split-KV Hopper family: two kernels, tensor maps and two scratch buffers.
const SPLIT: &str = "BLOCK_N=64,CONSUMER_WG=1,EXP2_POLY=off,KV_SPLITS=4,LOADER=tma,OVERLAP=off,PINGPONG=off,PRODUCER_REGS=40,RESCALE=always,SCHEDULER=grid,SETMAXNREG=false,STAGES=3,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows";

/// A variant of several kernels with scratch exports: both launches in order with their
/// arguments, the scratch buffers with their lengths, the Python plan's launches and
/// scratch sizes as the family computes them, kernel.h's launch rules and its launch()
/// (which lays the scratch out in one workspace) through g++.
#[test]
fn export_of_a_split_kv_variant_with_scratch() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("population.db");
    let shape = |b: i64, h: i64, sq: i64, skv: i64, d: i64| -> Vars {
        let mut v = shapes()[0].clone();
        for (k, x) in [
            ("BATCH", b),
            ("HEADS", h),
            ("SEQ_Q", sq),
            ("SEQ_KV", skv),
            ("HEAD_DIM", d),
        ] {
            v.insert(k.into(), Value::Int(x));
        }
        v
    };
    // The shapes of configs/sdpa_wgmma_splitkv.toml.
    let measured = with_bf16(&[
        shape(1, 8, 128, 4096, 64),
        shape(1, 4, 64, 8192, 128),
        shape(2, 8, 512, 512, 64),
        shape(1, 8, 64, 16384, 64),
    ]);
    one_genome_run(
        &db,
        "split",
        "sdpa_wgmma_splitkv",
        "sdpa_fwd_wgmma_splitkv",
        SPLIT,
        &measured,
    );
    let out = tmp.path().join("art");
    evo(&db)
        .args(["export", "--unsanitized", "split", "--out"])
        .arg(&out)
        .assert()
        .success();
    let m = manifest(&out);
    for v in m["variants"].as_array().unwrap() {
        let kernels: Vec<&str> = v["launches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["kernel"].as_str().unwrap())
            .collect();
        assert_eq!(kernels, ["sdpa_fwd", "sdpa_splitkv_combine"]);
        assert_eq!(
            v["scratch"],
            serde_json::json!([
                {"name": "o_part", "elem": "f32", "len": "KV_SPLITS * BATCH * HEADS * SEQ_Q * HEAD_DIM"},
                {"name": "lse_part", "elem": "f32", "len": "KV_SPLITS * BATCH * HEADS * SEQ_Q"},
            ])
        );
        let combine = v["launches"][1]["args"].as_array().unwrap();
        assert_eq!(combine.len(), 21 + 2);
        assert_eq!(combine[21], serde_json::json!({"scratch": "o_part"}));
        assert_eq!(v["constants"]["KV_SPLITS"], 4);
    }
    // The Python plan: both launches, the scratch sizes in bytes.
    if let Some(py) = python() {
        let script =
            "import json, sys\nsys.path.insert(0, sys.argv[1])\nsys.path.insert(0, sys.argv[2])\n\
            import evo_kernel as ek, artifact_fakes as f\n\
            q, k, v = f.qkv(1, 8, 128, 4096, 64)\n\
            print(json.dumps(ek.plan(q, k, v).as_dict()))\n";
        let o = std::process::Command::new(py)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .args(["-c", script])
            .arg(&out)
            .arg(root().join("crates/evo-cli/tests"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let plan: Json = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            plan["scratch"],
            serde_json::json!([
                ["o_part", 4 * 8 * 128 * 64 * 4],
                ["lse_part", 4 * 8 * 128 * 4]
            ])
        );
        let launches = plan["launches"].as_array().unwrap();
        assert_eq!(launches[0]["grid"], serde_json::json!([2, 8, 4]));
        assert_eq!(launches[1]["grid"], serde_json::json!([256, 1, 1]));
        assert_eq!(
            launches[1]["args"][21],
            serde_json::json!(["o_part", "pointer", 0])
        );
    }
    check_kernel_h(&out);
}

/// A genome of the Hopper family (its kernel takes the ABI plus TMA tensor maps of q, k, v).
const W: &str =
    "BLOCK_N=64,CONSUMER_WG=2,EXP2_POLY=off,KEY_CTAS=1,LOADER=tma,OVERLAP=off,PINGPONG=off,PRODUCER_REGS=40,PSUM=f32,RESCALE=always,SCHEDULER=grid,SETMAXNREG=true,SPECULATIVE_EXP=off,STAGES=2,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows";

/// A family whose kernel has its own argument list (sdpa_fwd_wgmma: the ABI, then three
/// tensor maps) exports: the manifest names every argument, the Python binding encodes
/// the maps over the call's tensors (through a fake driver) and refuses tensors a map
/// cannot describe, kernel.h encodes them in C++.
#[test]
fn export_of_a_family_with_tensor_map_arguments() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("population.db");
    one_genome_run(&db, "hopper", "sdpa_wgmma", "sdpa_fwd_wgmma", W, &shapes());
    let out = tmp.path().join("art");
    evo(&db)
        .args(["export", "--unsanitized", "hopper", "--out"])
        .arg(&out)
        .assert()
        .success();
    let m = manifest(&out);
    assert_eq!(m["sources"][0]["family"], "sdpa_fwd_wgmma");
    for v in m["variants"].as_array().unwrap() {
        assert_eq!(v["family"], "sdpa_fwd_wgmma");
        // The maps take each call's strides: nothing is declared contiguous.
        assert_eq!(v["contiguous"], serde_json::json!([]), "{v}");
        let launches = v["launches"].as_array().unwrap();
        assert_eq!(launches.len(), 1);
        let args = launches[0]["args"].as_array().unwrap();
        assert_eq!(args.len(), 21 + 3);
        assert_eq!(args[0], serde_json::json!({"param": "q"}));
        assert_eq!(args[20], serde_json::json!({"param": "softmax_scale"}));
        assert_eq!(
            args[21],
            serde_json::json!({"tensor_map": {
                "param": "q",
                "elem": v["specialization"]["DTYPE"],
                "dims": ["HEAD_DIM", "SEQ_Q", "HEADS", "BATCH"],
                "box_dims": ["SWIZZLE_BYTES / 2", "BLOCK_M", "1", "1"],
                "swizzle_bytes": 128,
                "strides": ["q_seq_stride", "q_head_stride", "q_batch_stride"],
            }})
        );
        assert_eq!(args[23]["tensor_map"]["param"], "v");
        // The swizzle span: a number (the genome's), and a constant the box expressions read.
        assert_eq!(v["constants"]["SWIZZLE_BYTES"], 128);
        assert_eq!(v["constants"]["BLOCK_M"], 128);
        assert_eq!(v["constants"]["BLOCK_N"], 64);
        assert_eq!(v["constants"]["HEAD_DIM"], v["specialization"]["HEAD_DIM"]);
        assert_eq!(v["tensor_ops"]["HGMMA"].as_u64().map(|n| n > 0), Some(true));
    }
    check_python_plan(&out, 3);
    check_python_launch(&out, 3);
    check_python_loader(&out);
    check_kernel_h(&out);
    // evo verify reads the arguments back (no GPU here: it stops after the hashes).
    let v = evo(&db).arg("verify").arg(&out).assert();
    let stdout = String::from_utf8_lossy(&v.get_output().stdout).to_string();
    assert!(stdout.contains("hashes: ok"), "{stdout}");
    assert!(stdout.contains("manifest: consistent"), "{stdout}");
}

/// The first seed of configs/sdpa_fp8_e2e_ws.toml (the kernel-only family's n192-L).
const E2E_WS: &str = "BLOCK_N=192,CONSUMER_WG=2,EXP2_POLY=off,OVERLAP=on,PINGPONG=on,PRODUCER_REGS=40,PSUM=f32,RESCALE=lazy,SETMAXNREG=true,STAGES=2";

/// End-to-end FP8 (problem sdpa_fwd_fp8_e2e, family sdpa_fwd_fp8_e2e_ws) exports with sdpa_fwd's
/// arguments: seven launches (the quantizer into scratch, then the QGMMA kernel) whose tensor
/// maps view the scratch codes; the Python plan points those maps into the call's workspace,
/// kernel.h encodes them over its scratch pointers, and verify reads them back.
#[test]
fn export_of_an_end_to_end_fp8_variant_with_maps_over_scratch() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("population.db");
    let shape = |b: i64, h: i64, s: i64, d: i64, causal: bool, dtype: &str| -> Vars {
        let mut v = f16_shapes()[0].clone();
        for (k, x) in [
            ("BATCH", b),
            ("HEADS", h),
            ("SEQ_Q", s),
            ("SEQ_KV", s),
            ("HEAD_DIM", d),
        ] {
            v.insert(k.into(), Value::Int(x));
        }
        v.insert("CAUSAL".into(), Value::Bool(causal));
        v.insert("DTYPE".into(), Value::Str(dtype.into()));
        v
    };
    // The config's shapes: every specialization (f16/bf16, head dim 64/128, causal or not).
    let mut measured = Vec::new();
    for (b, s, d, dtypes) in [
        (4, 4096, 128, &["f16", "bf16"][..]),
        (1, 16384, 128, &["f16"][..]),
        (4, 4096, 64, &["f16", "bf16"][..]),
    ] {
        for dtype in dtypes {
            for causal in [false, true] {
                measured.push(shape(b, 16, s, d, causal, dtype));
            }
        }
    }
    one_genome_run(
        &db,
        "e2e",
        "sdpa_fp8_e2e_ws",
        "sdpa_fwd_fp8_e2e_ws",
        E2E_WS,
        &measured,
    );
    let out = tmp.path().join("art");
    evo(&db)
        .args(["export", "--unsanitized", "e2e", "--out"])
        .arg(&out)
        .assert()
        .success();
    let m = manifest(&out);
    assert_eq!(m["problem"], "sdpa_fwd_fp8_e2e");
    assert_eq!(m["abi"]["params"].as_array().unwrap().len(), 21);
    let variants = m["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 8);
    for v in variants {
        let d = v["specialization"]["HEAD_DIM"].as_i64().unwrap();
        let launches = v["launches"].as_array().unwrap();
        assert_eq!(launches.len(), 7);
        assert_eq!(launches[6]["kernel"], "sdpa_fwd_fp8");
        let args = launches[6]["args"].as_array().unwrap();
        assert_eq!(args.len(), 27);
        assert_eq!(args[0], serde_json::json!({"scratch": "q8"}));
        assert_eq!(args[3], serde_json::json!({"param": "o"}));
        assert_eq!(args[4], serde_json::json!({"scratch": "q_descale"}));
        assert_eq!(args[23], serde_json::json!({"param": "softmax_scale"}));
        assert_eq!(
            args[24],
            serde_json::json!({"tensor_map": {
                "scratch": "q8",
                "elem": "e4m3",
                "dims": ["HEAD_DIM", "SEQ_Q", "BATCH * HEADS"],
                "box_dims": ["HEAD_DIM", "BLOCK_M", "1"],
                "swizzle_bytes": d,
            }})
        );
        assert_eq!(args[26]["tensor_map"]["scratch"], "v8");
        assert_eq!(v["contiguous"], serde_json::json!(["q", "k", "v"]));
    }
    // The Python plan: the maps' addresses are their scratch buffers' in the workspace.
    if let Some(py) = python() {
        let script =
            "import json, sys\nsys.path.insert(0, sys.argv[1])\nsys.path.insert(0, sys.argv[2])\n\
            import evo_kernel as ek, artifact_fakes as f\n\
            q, k, v = f.qkv(4, 16, 4096, 4096, 128)\n\
            p = ek.plan(q, k, v, scratch={'q8': 1 << 20, 'k8': 2 << 20, 'v8': 3 << 20})\n\
            print(json.dumps(p.as_dict()))\n";
        let o = std::process::Command::new(py)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .args(["-c", script])
            .arg(&out)
            .arg(root().join("crates/evo-cli/tests"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let plan: Json = serde_json::from_slice(&o.stdout).unwrap();
        let attention = &plan["launches"][6]["args"];
        assert_eq!(attention[0], serde_json::json!(["q8", "pointer", 1 << 20]));
        for (i, (name, address)) in [("q8", 1 << 20), ("k8", 2 << 20), ("v8", 3 << 20)]
            .into_iter()
            .enumerate()
        {
            let map = &attention[24 + i];
            assert_eq!(map[0], format!("tensor_map({name})"), "{map}");
            assert_eq!(map[2]["address"], address, "{map}");
            assert_eq!(map[2]["elem"], "e4m3", "{map}");
        }
        assert_eq!(
            attention[24][2]["dims"],
            serde_json::json!([128, 4096, 4 * 16])
        );
        assert_eq!(
            plan["scratch"][0],
            serde_json::json!(["q8", 4 * 16 * 4096 * 128])
        );
    }
    check_kernel_h(&out);
    let kernel_h = std::fs::read_to_string(out.join("kernel.h")).unwrap();
    assert!(kernel_h.contains("constexpr bool through_fp8 = true;"));
    assert!(
        kernel_h.contains("CU_TENSOR_MAP_DATA_TYPE_UINT8, scratch_q8,"),
        "{kernel_h}"
    );
    let v = evo(&db).arg("verify").arg(&out).assert();
    let stdout = String::from_utf8_lossy(&v.get_output().stdout).to_string();
    assert!(stdout.contains("hashes: ok"), "{stdout}");
    assert!(stdout.contains("manifest: consistent"), "{stdout}");
}

/// A run recorded before SCHEDULER, EXP2_POLY, SPECULATIVE_EXP, PSUM and KEY_CTAS existed: its
/// genome names none of them. The family's `[defaults]` (SCHEDULER = "grid", EXP2_POLY = "off",
/// SPECULATIVE_EXP = "off", PSUM = "f32", KEY_CTAS = 1) complete it: `evo export` freezes the completed genome
/// (the manifest's genome and hash are W's, the source is W's), the stored row is still
/// found by its stored hash, `evo render -g` takes the old text, and the artifact verifies.
#[test]
fn export_of_a_run_recorded_before_a_knob_existed() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("population.db");
    let old = W
        .replace("SCHEDULER=grid,", "")
        .replace("EXP2_POLY=off,", "")
        .replace("SPECULATIVE_EXP=off,", "")
        .replace("PSUM=f32,", "")
        .replace("KEY_CTAS=1,", "");
    assert_ne!(old, W);
    one_genome_run(
        &db,
        "before",
        "sdpa_wgmma",
        "sdpa_fwd_wgmma",
        &old,
        &shapes(),
    );
    let out = tmp.path().join("art");
    evo(&db)
        .args(["export", "--unsanitized", "before", "--out"])
        .arg(&out)
        .assert()
        .success();
    let m = manifest(&out);
    let w = Genome::parse(W).unwrap();
    let variants = m["variants"].as_array().unwrap();
    assert!(!variants.is_empty());
    for v in variants {
        assert_eq!(v["genome"], W);
        assert_eq!(v["genome_hash"], w.hash().0.as_str());
    }
    // The stored row keeps its stored text and hash: `evo show` finds it by that hash.
    let old_hash = Genome::parse(&old).unwrap().hash().0;
    let show = evo(&db).args(["show", &old_hash[..8]]).assert().success();
    let stdout = String::from_utf8_lossy(&show.get_output().stdout).to_string();
    assert!(stdout.contains(&old_hash[..8]), "{stdout}");
    // Its source is the completed genome's.
    let source = evo(&db)
        .args(["show", &old_hash[..8], "--source"])
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&source.get_output().stdout).to_string();
    assert!(
        stdout.contains(&format!("genome {W} [{}]", w.hash())),
        "{stdout}"
    );
    // `evo render -g OLD` is `evo render -g W`.
    let config = root().join("configs/sdpa_wgmma.toml");
    let render = |g: &str| {
        let o = evo(&db)
            .arg("render")
            .arg("-c")
            .arg(&config)
            .args(["--arch", "sm_90a", "-g", g])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    assert_eq!(render(&old), render(W));
    let v = evo(&db).arg("verify").arg(&out).assert();
    let stdout = String::from_utf8_lossy(&v.get_output().stdout).to_string();
    assert!(stdout.contains("manifest: consistent"), "{stdout}");
}

/// Stores `verdict` (the sanitizer gate's JSON, as a run stores it) for `candidate`.
fn store_sanitizer_verdict(db: &Path, candidate: i64, verdict: Json) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::open(db.to_str().unwrap()).await.unwrap();
        let profile = evo_store::NewProfile {
            tool: "sanitizer".into(),
            shape: None,
            metrics: verdict,
        };
        store
            .insert_profile(evo_store::CandidateId(candidate), &profile)
            .await
            .unwrap();
        store.close().await;
    })
}

/// Nothing leaves evo without the sanitizer gate: a stored finding refuses the export of
/// that candidate (even with --unsanitized) and makes a run's export take the next fastest;
/// a stored clean verdict exports and says `clean`; with no
/// verdict and no GPU here the export is refused with what to do, and --unsanitized
/// exports with `not run: <why>` in the manifest and a note.
#[test]
fn export_needs_the_sanitizer_gate() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("population.db");
    let ids = fixture(&db);
    let out = tmp.path().join("art");
    let export = |args: &[&str]| {
        let mut c = evo(&db);
        c.arg("export")
            .args(args)
            .arg("--out")
            .arg(&out)
            .arg("--force");
        c.assert()
    };
    let (best, second) = (ids["best"].to_string(), ids["second"].to_string());
    store_sanitizer_verdict(
        &db,
        ids["best"],
        serde_json::json!({"verdict": "finding", "finding": "compute-sanitizer racecheck reports 4 error(s)", "reports": []}),
    );
    for args in [vec![best.as_str()], vec![best.as_str(), "--unsanitized"]] {
        let a = export(&args).failure();
        let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
        assert!(
            err.contains("fails the sanitizer gate") && err.contains("racecheck reports 4"),
            "{args:?}: {err}"
        );
        assert!(!out.join("manifest.json").exists());
    }
    store_sanitizer_verdict(
        &db,
        ids["second"],
        serde_json::json!({"verdict": "clean", "reports": []}),
    );
    export(&[&second]).success();
    let m = manifest(&out);
    for v in m["variants"].as_array().unwrap() {
        assert_eq!(v["sanitizer"], "clean", "{v}");
    }
    // Run `night`'s best has a finding: the run's export takes the next fastest, and says so.
    let a = export(&["night"]).success();
    let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
    assert!(
        err.contains("fails the sanitizer gate")
            && err.contains("the next fastest candidate was taken"),
        "{err}"
    );
    for v in manifest(&out)["variants"].as_array().unwrap() {
        assert_eq!(v["candidate_id"], ids["second"], "{v}");
        assert_eq!(v["sanitizer"], "clean", "{v}");
    }
    // A fresh database: no verdict at all.
    let tmp2 = tempfile::tempdir().unwrap();
    let db2 = tmp2.path().join("population.db");
    fixture(&db2);
    let out2 = tmp2.path().join("art");
    if evo_gpu::device::probe().is_ok_and(|i| !i.devices.is_empty()) {
        eprintln!("skipped the no-GPU refusal: this machine has a GPU (the export would sanitize)");
    } else {
        let a = evo(&db2)
            .args(["export", "night", "--out"])
            .arg(&out2)
            .assert()
            .failure();
        let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
        assert!(
            err.contains("has not been through compute-sanitizer") && err.contains("--unsanitized"),
            "{err}"
        );
        assert!(!out2.exists());
        let a = evo(&db2)
            .args(["export", "night", "--unsanitized", "--out"])
            .arg(&out2)
            .assert()
            .success();
        let stderr = String::from_utf8_lossy(&a.get_output().stderr).to_string();
        assert!(
            stderr.contains("note: candidate") && stderr.contains("without the sanitizer gate"),
            "{stderr}"
        );
        for v in manifest(&out2)["variants"].as_array().unwrap() {
            assert!(
                v["sanitizer"].as_str().unwrap().starts_with("not run: "),
                "{v}"
            );
        }
    }
}

/// verify trusts no file the manifest does not hash: a manifest whose `files` lacks a
/// file the artifact needs (one CUBIN's entry removed and that CUBIN corrupted; `files`
/// emptied and evo_kernel.py edited) is refused, exit 1, naming the file and saying to
/// export again; so is a file name outside the folder; files the artifact does not need
/// (Python's `__pycache__`, a user's notes) are only noted.
#[test]
fn verify_refuses_a_manifest_that_does_not_hash_a_needed_file() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("population.db");
    let ids = fixture(&db);
    let out = tmp.path().join("art");
    store_sanitizer_verdict(
        &db,
        ids["second"],
        serde_json::json!({"verdict": "clean", "reports": []}),
    );
    evo(&db)
        .arg("export")
        .arg(ids["second"].to_string())
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let text = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    let clean: Json = serde_json::from_str(&text).unwrap();
    let listed = clean["files"].as_object().unwrap().len();
    let variants = clean["variants"].as_array().unwrap();
    assert_eq!(listed, 3 * variants.len() + 6, "{}", clean["files"]);
    let no_gpu = evo_gpu::device::probe()
        .map(|i| i.devices.is_empty())
        .unwrap_or(true);

    // (c) Clean, with files the artifact does not need: the hashes pass, the notes are
    // notes (no GPU here: exit 3 after the GPU-free checks).
    std::fs::create_dir(out.join("__pycache__")).unwrap();
    std::fs::write(out.join("__pycache__/x.pyc"), b"bytecode").unwrap();
    std::fs::write(out.join("notes.txt"), b"my notes").unwrap();
    let v = evo(&db).arg("verify").arg(&out).assert();
    let o = v.get_output();
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        stdout.contains(&format!("hashes: ok ({listed} files)")),
        "{stdout}{stderr}"
    );
    assert!(
        stdout.contains("note: notes.txt is not part of the artifact"),
        "{stdout}"
    );
    assert!(!stdout.contains("__pycache__"), "{stdout}");
    assert!(
        stdout.contains("genomes: every variant"),
        "{stdout}{stderr}"
    );
    if no_gpu {
        assert_eq!(o.status.code(), Some(3), "{stdout}{stderr}");
    }

    let refused = |needles: &[&str]| {
        for json in [false, true] {
            let mut c = evo(&db);
            if json {
                c.arg("--json");
            }
            let a = c.arg("verify").arg(&out).assert().code(1);
            let stdout = String::from_utf8_lossy(&a.get_output().stdout).to_string();
            let stderr = String::from_utf8_lossy(&a.get_output().stderr).to_string();
            for needle in needles {
                assert!(stderr.contains(needle), "{needle}: {stderr}");
            }
            assert!(!stdout.contains("hashes: ok"), "{stdout}");
            assert!(!stdout.contains("genomes:"), "{stdout}");
        }
    };

    // (a) One CUBIN's entry removed from `files`, and that CUBIN corrupted.
    let cubin_name = variants[0]["cubin_file"].as_str().unwrap().to_string();
    let cubin = out.join(&cubin_name);
    let cubin_bytes = std::fs::read(&cubin).unwrap();
    let mut edited = clean.clone();
    edited["files"]
        .as_object_mut()
        .unwrap()
        .remove(&cubin_name)
        .unwrap();
    std::fs::write(out.join("manifest.json"), edited.to_string()).unwrap();
    let mut bytes = cubin_bytes.clone();
    let n = bytes.len();
    bytes[n / 2] ^= 1;
    std::fs::write(&cubin, &bytes).unwrap();
    refused(&[
        "lists no SHA-256 for 1 file the artifact needs",
        &format!(
            "{cubin_name} (the cubin_file of variant {})",
            variants[0]["name"].as_str().unwrap()
        ),
        "Export it again with `evo export`",
    ]);
    // The same with the CUBIN intact: still refused (a manifest without the hash proves
    // nothing about the file).
    std::fs::write(&cubin, &cubin_bytes).unwrap();
    refused(&[&cubin_name, "Export it again"]);

    // (b) `files` emptied and evo_kernel.py edited.
    let mut edited = clean.clone();
    edited["files"] = serde_json::json!({});
    std::fs::write(out.join("manifest.json"), edited.to_string()).unwrap();
    let py = std::fs::read_to_string(out.join("evo_kernel.py")).unwrap();
    std::fs::write(
        out.join("evo_kernel.py"),
        format!("{py}\nimport os  # an adversary's line\n"),
    )
    .unwrap();
    let mut needles: Vec<String> = vec![
        format!("lists no SHA-256 for {listed} files the artifact needs"),
        "evo_kernel.py (a file every artifact holds)".into(),
        "Export it again with `evo export`".into(),
    ];
    for name in clean["files"].as_object().unwrap().keys() {
        needles.push(format!("{name} ("));
    }
    refused(&needles.iter().map(String::as_str).collect::<Vec<_>>());
    std::fs::write(out.join("evo_kernel.py"), &py).unwrap();

    // Names outside the folder stay refused, listed or not.
    for bad in ["../kernel.cubin", "/tmp/kernel.cubin"] {
        let mut edited = clean.clone();
        edited["variants"][0]["cubin_file"] = Json::from(bad);
        std::fs::write(out.join("manifest.json"), edited.to_string()).unwrap();
        refused(&["outside the artifact", bad]);
        edited["files"][bad] = Json::from(sha256(&cubin));
        std::fs::write(out.join("manifest.json"), edited.to_string()).unwrap();
        refused(&["outside the artifact", bad]);
    }

    // Restored: verify passes the hashes again.
    std::fs::write(out.join("manifest.json"), &text).unwrap();
    evo(&db)
        .arg("verify")
        .arg(&out)
        .assert()
        .stdout(predicates::str::contains(format!(
            "hashes: ok ({listed} files)"
        )));
}

/// The gates ran on the search's build of a genome: an export whose build differs (the
/// compile key the search stored is not the one here: a template, option or NVRTC changed
/// since) is refused with what to do, and --unchecked-build exports it with a note and
/// `compile_key_matches_search: false`; the search's own keys export as checked; a run
/// that stored no key exports with a note that says so.
#[test]
fn export_refuses_a_build_the_search_did_not_check() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("population.db");
    let ids = fixture(&db);
    let clean = serde_json::json!({"verdict": "clean", "reports": []});
    store_sanitizer_verdict(&db, ids["best"], clean.clone());
    let out = tmp.path().join("art");
    let export = |what: &str, extra: &[&str]| {
        let mut c = evo(&db);
        c.args(["export", what, "--force", "--out"])
            .arg(&out)
            .args(extra);
        c.assert()
    };
    let stderr = |a: &assert_cmd::assert::Assert| {
        String::from_utf8_lossy(&a.get_output().stderr).to_string()
    };
    // No key stored (the fixture's results): exported, with a note.
    let a = export(&ids["best"].to_string(), &[]).success();
    assert!(
        stderr(&a).contains("the run stored no compile key"),
        "{}",
        stderr(&a)
    );
    let keys: Vec<(String, String)> = manifest(&out)["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let spec: Vars = serde_json::from_value(v["specialization"].clone()).unwrap();
            (
                Genome::from_vars(spec).canonical(),
                v["compile_key"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(keys.len() >= 2, "{keys:?}");
    // A run of the same genome whose result records these keys, or others.
    let keyed_run = |name: &'static str, keys: &[(String, String)]| {
        let resources = keys
            .iter()
            .map(|(spec, key)| serde_json::json!({"specialization": spec, "compile": {"key": key}}))
            .collect();
        let id = genome_run(
            &db,
            &OneGenome {
                name,
                config_toml: std::fs::read_to_string(root().join("configs/sdpa.toml")).unwrap(),
                family: "sdpa_fwd_mma",
                genome: A,
                device: "NVIDIA H100 80GB HBM3",
                times: shapes().into_iter().map(|s| (s, Some(10.0))).collect(),
                status: Status::Evaluated,
                resources: Some(Json::Array(resources)),
            },
        );
        store_sanitizer_verdict(&db, id, clean.clone());
    };
    keyed_run("same", &keys);
    let a = export("same", &[]).success();
    assert!(!stderr(&a).contains("compile key"), "{}", stderr(&a));
    for v in manifest(&out)["variants"].as_array().unwrap() {
        assert_eq!(v["compile_key_matches_search"], true, "{v}");
    }
    // One specialization's key changed since the run.
    let mut changed = keys.clone();
    changed[1].1 = "0".repeat(64);
    keyed_run("changed", &changed);
    std::fs::remove_dir_all(&out).unwrap();
    let a = export("changed", &[]).failure();
    let err = stderr(&a);
    assert!(
        err.contains("is not the one the search checked") && err.contains("--unchecked-build"),
        "{err}"
    );
    assert!(!out.join("manifest.json").exists());
    let a = export("changed", &["--unchecked-build"]).success();
    assert!(
        stderr(&a).contains("exported with --unchecked-build"),
        "{}",
        stderr(&a)
    );
    let flags: Vec<Json> = manifest(&out)["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["compile_key_matches_search"].clone())
        .collect();
    assert_eq!(
        flags.iter().filter(|f| **f == Json::Bool(false)).count(),
        1,
        "{flags:?}"
    );
}

#[test]
fn export_refuses_what_it_cannot_freeze() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("population.db");
    let ids = fixture(&db);
    let out = tmp.path().join("art");
    let refuse = |args: &[&str], needle: &str| {
        let a = evo(&db)
            .arg("export")
            .args(args)
            .arg("--out")
            .arg(&out)
            .assert()
            .failure();
        let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    };
    refuse(&["nosuchrun"], "no run `nosuchrun`");
    refuse(&["run:99"], "no run `99`");
    refuse(&["999"], "no candidate with id 999");
    refuse(
        &[&ids["incorrect"].to_string()],
        "is `incorrect` at the correctness gate",
    );
    refuse(&[&ids["pending"].to_string()], "has not been evaluated yet");
    refuse(&["replayed"], "replay evaluator");
    refuse(&[&ids["replayed"].to_string()], "replay evaluator");
    refuse(&[&ids["best"].to_string(), "--per-shape"], "give a run");
    let a = Command::cargo_bin("evo")
        .unwrap()
        .args(["export", "--unsanitized", "night", "--db"])
        .arg(tmp.path().join("missing.db"))
        .arg("--out")
        .arg(&out)
        .assert()
        .failure();
    assert!(String::from_utf8_lossy(&a.get_output().stderr).contains("no population database"));
    assert!(!tmp.path().join("missing.db").exists());
    // verify of a folder that is no artifact.
    let a = evo(&db).arg("verify").arg(tmp.path()).assert().failure();
    assert!(String::from_utf8_lossy(&a.get_output().stderr).contains("manifest.json"));
}

/// A run whose only gated candidate is `regressed` and untimed in its bf16 specializations
/// (the regression rule stopped its timing) has nothing to freeze without --per-shape: the
/// export says why and what to do, before any sanitizer or compile, and writes nothing.
#[test]
fn export_refuses_a_run_with_no_candidate_timed_in_every_specialization() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("population.db");
    genome_run(
        &db,
        &OneGenome {
            name: "short",
            config_toml: std::fs::read_to_string(root().join("configs/sdpa.toml")).unwrap(),
            family: "sdpa_fwd_mma",
            genome: A,
            device: "NVIDIA H200",
            times: shapes()
                .into_iter()
                .map(|s| {
                    let f16 = s.get("DTYPE") == Some(&Value::Str("f16".into()));
                    (s, f16.then_some(30.0))
                })
                .collect(),
            status: Status::Regressed,
            resources: None,
        },
    );
    let out = tmp.path().join("art");
    let err = failing(
        evo(&db)
            .args(["export", "--unsanitized", "short", "--out"])
            .arg(&out),
    );
    assert!(
        err.contains("run `short` has no candidate timed in every specialization (regressed 1)"),
        "{err}"
    );
    assert!(
        err.contains("search longer, or export with --per-shape"),
        "{err}"
    );
    assert!(!out.exists(), "the refused export wrote {}", out.display());
}

/// The GPU-side scripts at least parse (they need torch and a GPU to run); so does the
/// GPU evidence script of the artifact (bench/gpu/artifact.sh).
#[test]
fn torch_scripts_compile() {
    let Some(py) = python() else { return };
    for f in [
        "scripts/compare_torch.py",
        "scripts/sdpa_bench.py",
        "scripts/torch_sdpa_baseline.py",
        "scripts/artifact_overhead.py",
        "crates/evo-artifact/src/evo_kernel.py",
        "crates/evo-artifact/src/bench.py",
        "bench/gpu/artifact_torch_test.py",
        "bench/gpu/artifact_transformers.py",
        "bench/gpu/artifact_bench_cpu.py",
    ] {
        let o = std::process::Command::new(py)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .args([
                "-c",
                "import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])",
            ])
            .arg(root().join(f))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{f}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let o = std::process::Command::new("bash")
        .arg("-n")
        .arg(root().join("bench/gpu/artifact.sh"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "bench/gpu/artifact.sh: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The artifact's eager timing (scripts/sdpa_bench.py `eager_times`, run here against a stand-in
/// torch that logs calls and synchronizes): every timed loop follows an untimed loop of the same
/// call, so no loop starts in its predecessor's power state, and the calls' order changes from
/// rep to rep (a fixed cycle gave each call the same predecessor every time).
#[test]
fn eager_loops_settle_on_their_own_call_in_a_shuffled_order() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let torch = tmp.path().join("torch");
    std::fs::create_dir_all(torch.join("nn")).unwrap();
    std::fs::write(
        torch.join("__init__.py"),
        "LOG = []\nfloat16 = 'f16'\nbfloat16 = 'bf16'\n\
         class cuda:\n    @staticmethod\n    def synchronize():\n        LOG.append('|')\n",
    )
    .unwrap();
    std::fs::write(torch.join("nn/__init__.py"), "").unwrap();
    std::fs::write(
        torch.join("nn/attention.py"),
        "class SDPBackend:\n    FLASH_ATTENTION = 1\n    EFFICIENT_ATTENTION = 2\n    CUDNN_ATTENTION = 3\n",
    )
    .unwrap();
    let script = r#"
import sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import torch, sdpa_bench
def make(name):
    def call(q, k, v):
        torch.LOG.append(name)
        time.sleep(0.0002)
    return call
calls = [make(c) for c in "abc"]
loops = [[], [], []]
sdpa_bench.eager_times(calls, None, None, None, iters=3, reps=6, target_ms=2.0, loops=loops)
assert [len(l) for l in loops] == [6, 6, 6], loops
blocks = "".join(torch.LOG).split("|")
# Per call: 3 warm-up calls, 5 to measure one call, then per rep (settle loop, timed loop).
body = [b for b in blocks[6:] if b]
assert len(body) == 2 * 6 * 3, body
orders = []
for r in range(6):
    rep = body[6 * r:6 * r + 6]
    for settle, timed in zip(rep[0::2], rep[1::2]):
        assert timed == timed[0] * 3, timed
        assert settle and set(settle) == {timed[0]}, (settle, timed)
    orders.append("".join(t[0] for t in rep[1::2]))
assert all(sorted(o) == ["a", "b", "c"] for o in orders), orders
assert len(set(orders)) > 1, orders
print("ok", orders)
"#;
    let o = std::process::Command::new(py)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .arg("-c")
        .arg(script)
        .arg(tmp.path())
        .arg(root().join("scripts"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A complete fp16 sdpa_fwd shape.
fn sdpa_shape(b: i64, h: i64, s: i64, d: i64, causal: bool) -> Vars {
    let mut v = f16_shapes()[0].clone();
    for (k, x) in [
        ("BATCH", b),
        ("HEADS", h),
        ("SEQ_Q", s),
        ("SEQ_KV", s),
        ("HEAD_DIM", d),
    ] {
        v.insert(k.into(), Value::Int(x));
    }
    v.insert("CAUSAL".into(), Value::Bool(causal));
    v
}

/// A config text without its bf16 shapes (each `[[shapes]]` block that sets bf16 dropped).
fn f16_only(text: &str) -> String {
    let mut out = Vec::new();
    let mut block: Vec<&str> = Vec::new();
    let mut in_block = false;
    for line in text.lines().chain([""]) {
        if line.trim() == "[[shapes]]" {
            in_block = true;
        }
        if in_block {
            if line.trim().is_empty() || (line.starts_with('[') && line.trim() != "[[shapes]]") {
                if !block.iter().any(|l| l.trim() == "DTYPE = \"bf16\"") {
                    out.append(&mut block);
                }
                block.clear();
                in_block = line.trim() == "[[shapes]]";
                if !in_block {
                    out.push(line);
                    continue;
                }
            }
            block.push(line);
        } else {
            out.push(line);
        }
    }
    out.join("\n")
}

/// `evo export RUN_A RUN_B --per-shape`: two runs of two families (sdpa_fwd_mma on
/// configs/sdpa.toml, sdpa_fwd_wgmma on the fp16 shapes of configs/sdpa_wgmma_quick.toml),
/// one GPU. Every shape either run measured gets the fastest correct variant over both
/// (the Hopper genome wins the long shape both measured, and is the only one for its own
/// shapes); each variant names its run and family; evo verify re-renders every variant
/// with its own run's family and config; Python's dispatch sends a causal call at a seed
/// shape to the nearest causal (Hopper) kernel and a non-causal one to mma. An edited
/// genome in the manifest fails verify, with or without its hash edited to match.
#[test]
fn per_shape_export_over_two_runs_of_two_families() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("population.db");
    fixture(&db);
    let quick =
        f16_only(&std::fs::read_to_string(root().join("configs/sdpa_wgmma_quick.toml")).unwrap());
    assert_eq!(quick.matches("[[shapes]]").count(), 12, "{quick}");
    // In the config's order; night is faster at the non-causal 512-token shapes.
    let hopper = [
        (sdpa_shape(2, 8, 2048, 64, false), 5.0),
        (sdpa_shape(4, 16, 4096, 128, false), 900.0),
        (sdpa_shape(2, 8, 2048, 64, true), 40.0),
        (sdpa_shape(4, 16, 4096, 128, true), 600.0),
        (sdpa_shape(4, 8, 2048, 64, false), 70.0),
        (sdpa_shape(4, 8, 2048, 64, true), 60.0),
        (sdpa_shape(1, 8, 512, 64, false), 1000.0),
        (sdpa_shape(1, 8, 512, 64, true), 7.0),
        (sdpa_shape(2, 8, 512, 64, false), 1000.0),
        (sdpa_shape(2, 8, 512, 64, true), 8.0),
        (sdpa_shape(2, 8, 512, 128, false), 1000.0),
        (sdpa_shape(2, 8, 512, 128, true), 9.0),
    ];
    genome_run(
        &db,
        &OneGenome {
            name: "hopper",
            config_toml: quick,
            family: "sdpa_fwd_wgmma",
            genome: W,
            device: "NVIDIA H100 80GB HBM3",
            times: hopper.iter().map(|(s, t)| (s.clone(), Some(*t))).collect(),
            status: Status::Evaluated,
            resources: None,
        },
    );
    let out = tmp.path().join("art");
    let o = evo(&db)
        .args([
            "export",
            "--unsanitized",
            "night",
            "hopper",
            "--per-shape",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&o.get_output().stdout).to_string();
    assert!(
        stdout.contains("exported runs night, hopper (8 variants)"),
        "{stdout}"
    );
    let m = manifest(&out);
    let runs: Vec<(&str, &str)> = m["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["run"].as_str().unwrap(), s["family"].as_str().unwrap()))
        .collect();
    assert_eq!(
        runs,
        [("night", "sdpa_fwd_mma"), ("hopper", "sdpa_fwd_wgmma")]
    );
    let a = &Genome::parse(A).unwrap().hash().0[..8];
    let w = &Genome::parse(W).unwrap().hash().0[..8];
    // night's ten shapes in its order (the Hopper genome wins the third; night's 14 us beats
    // its 70 at the fifth), then hopper's own.
    let want = [
        format!("f16_hd64_{a}"),
        format!("f16_hd64_{a}"),
        format!("f16_hd64_{w}"),
        format!("f16_hd128_{a}"),
        format!("f16_hd64_{a}"),
        format!("bf16_hd64_{a}"),
        format!("bf16_hd64_{a}"),
        format!("bf16_hd64_{a}"),
        format!("bf16_hd128_{a}"),
        format!("bf16_hd64_{a}"),
        format!("f16_hd128_{w}"),
        format!("f16_hd64_causal_{w}"),
        format!("f16_hd128_causal_{w}"),
        format!("f16_hd64_causal_{w}"),
        format!("f16_hd64_causal_{w}"),
        format!("f16_hd64_causal_{w}"),
        format!("f16_hd128_causal_{w}"),
    ];
    let table: Vec<&str> = m["dispatch"]["table"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["variant"].as_str().unwrap())
        .collect();
    assert_eq!(table, want);
    let variants = m["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 8);
    for v in variants {
        let name = v["name"].as_str().unwrap();
        let (run, family, genome) = if name.ends_with(w) {
            ("hopper", "sdpa_fwd_wgmma", W)
        } else {
            ("night", "sdpa_fwd_mma", A)
        };
        assert_eq!(
            (
                v["run"].as_str(),
                v["family"].as_str(),
                v["genome"].as_str()
            ),
            (Some(run), Some(family), Some(genome)),
            "{name}"
        );
        // Neither family reads a tensor in the contiguous layout only (the Hopper one's tensor
        // maps take the call's strides).
        assert_eq!(v["contiguous"], serde_json::json!([]), "{name}");
    }
    // The Hopper variant of the shape both runs measured carries its own run's time.
    let won = variants
        .iter()
        .find(|v| v["name"] == format!("f16_hd64_{w}"))
        .unwrap();
    assert_eq!(won["shapes"][0]["median_us"], 5.0);
    for (name, hash) in m["files"].as_object().unwrap() {
        assert_eq!(sha256(&out.join(name)), hash.as_str().unwrap(), "{name}");
    }
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(readme.contains("sdpa_fwd_mma, sdpa_fwd_wgmma"), "{readme}");

    // Python's dispatch over the combined table.
    if let Some(py) = python() {
        let script = "import json, sys\nsys.path.insert(0, sys.argv[1])\nsys.path.insert(0, sys.argv[2])\n\
            import evo_kernel as ek, artifact_fakes as f\n\
            out = {}\n\
            for b, h, s, d, c in [(1, 8, 512, 64, False), (1, 8, 512, 64, True), (2, 8, 2048, 64, False), (4, 16, 4096, 128, True), (1, 8, 512, 128, True)]:\n\
            \x20   out[f'{b},{h},{s},{d},{c}'] = ek.plan(*f.qkv(b, h, s, s, d), causal=c).variant['name']\n\
            print(json.dumps(out))\n";
        let o = std::process::Command::new(py)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .args(["-c", script])
            .arg(&out)
            .arg(root().join("crates/evo-cli/tests"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let picks: Json = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(picks["1,8,512,64,False"], format!("f16_hd64_{a}"));
        assert_eq!(picks["1,8,512,64,True"], format!("f16_hd64_causal_{w}"));
        assert_eq!(picks["2,8,2048,64,False"], format!("f16_hd64_{w}"));
        assert_eq!(picks["4,16,4096,128,True"], format!("f16_hd128_causal_{w}"));
        assert_eq!(picks["1,8,512,128,True"], format!("f16_hd128_causal_{w}"));
    }

    // verify re-renders every variant with its own run's family and config.
    let v = evo(&db).arg("verify").arg(&out).assert();
    let stdout = String::from_utf8_lossy(&v.get_output().stdout).to_string();
    assert!(stdout.contains("hashes: ok"), "{stdout}");
    assert!(
        stdout.contains("renders to its kernel source (8 variants)"),
        "{stdout}"
    );
    assert!(stdout.contains("manifest: consistent"), "{stdout}");

    // An edited genome (the manifest is not hashed): refused, whether the hash was left
    // alone or edited to match.
    let text = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    let mut edited: Json = serde_json::from_str(&text).unwrap();
    let first = &mut edited["variants"][0];
    assert_eq!(first["genome"], A);
    first["genome"] = Json::from(C);
    std::fs::write(out.join("manifest.json"), edited.to_string()).unwrap();
    let e = evo(&db).arg("verify").arg(&out).assert().failure();
    let err = String::from_utf8_lossy(&e.get_output().stderr).to_string();
    assert!(
        err.contains("the manifest gives genome hash") && err.contains("hashes to"),
        "{err}"
    );
    edited["variants"][0]["genome_hash"] = Json::from(Genome::parse(C).unwrap().hash().0);
    std::fs::write(out.join("manifest.json"), edited.to_string()).unwrap();
    let e = evo(&db).arg("verify").arg(&out).assert().failure();
    let err = String::from_utf8_lossy(&e.get_output().stderr).to_string();
    assert!(
        err.contains(&format!(
            "kernel.f16_hd64_{a}.cu is not the source genome `{C}` renders to"
        )),
        "{err}"
    );
    // The same with stdout closed by its reader (`evo verify DIR | head -1`): the checks
    // still run and the verdict is still a failure.
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("evo"))
        .args(["verify"])
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{status:?}");
    std::fs::write(out.join("manifest.json"), &text).unwrap();
    evo(&db)
        .arg("verify")
        .arg(&out)
        .assert()
        .stdout(predicates::str::contains("genomes: every variant"));
}

/// Combining runs: only per shape, each run once, runs of one GPU, no candidate ids.
#[test]
fn export_refuses_runs_it_cannot_combine() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("population.db");
    let ids = fixture(&db);
    one_genome_run(&db, "h200", "sdpa_wgmma", "sdpa_fwd_wgmma", W, &shapes());
    let out = tmp.path().join("art");
    let second = ids["second"].to_string();
    for (args, needle) in [
        (vec!["night", "h200"], "add --per-shape"),
        (
            vec!["night", "night", "--per-shape"],
            "run `night` is named twice",
        ),
        (
            vec!["night", second.as_str(), "--per-shape"],
            "exported alone",
        ),
        (
            vec!["night", "h200", "--per-shape"],
            "runs `night` and `h200` differ in GPU (NVIDIA H100 80GB HBM3 vs NVIDIA H200)",
        ),
    ] {
        let a = evo(&db)
            .arg("export")
            .args(&args)
            .arg("--out")
            .arg(&out)
            .assert()
            .failure();
        let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}
