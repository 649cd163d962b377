//! CI's proof that the shipped families build: every valid genome of the gemm family
//! compiles with NVRTC to an sm_90a CUBIN through the real CLI, without spills, with
//! tensor-core instructions in its SASS.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value as Json;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn compile(args: &[&str], config: &std::path::Path) -> Vec<Json> {
    let cache = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("evo")
        .unwrap()
        .env("EVO_CACHE_DIR", cache.path())
        .current_dir(root())
        .args(["--json", "compile", "--arch", "sm_90a", "--sass", "-c"])
        .arg(config)
        .args(args)
        .output()
        .unwrap();
    let reports: Json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}; stderr: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    reports.as_array().unwrap().clone()
}

fn check(reports: &[Json]) {
    check_kernel(reports, "gemm");
}

fn check_kernel(reports: &[Json], kernel: &str) {
    check_kernel_with(reports, kernel, "HMMA");
}

/// Every report compiled, `kernel` without spills or a stack frame, with `opcode`
/// tensor-core instructions in its SASS.
fn check_kernel_with(reports: &[Json], kernel: &str, opcode: &str) {
    for r in reports {
        let g = r["genome"].as_str().unwrap();
        assert_eq!(r["success"], true, "{g}: {}", r["log"]);
        assert_spill_free(r, kernel);
        assert!(r["cubin_bytes"].as_u64().unwrap() > 0);
        assert!(
            r["sass"][kernel]["tensor"][opcode].as_u64().unwrap_or(0) > 0,
            "{g} has no {opcode}: {}",
            r["sass"]
        );
    }
}

/// `kernel` of a compile report (a module may hold others: the FP8 family's quantizer, the
/// split-KV combine) uses no spill stores and no stack frame, and ptxas kept its wgmma
/// instructions pipelined (the static gate rejects a serialized kernel).
fn assert_spill_free(r: &Json, kernel: &str) {
    let g = r["genome"].as_str().unwrap();
    let k = r["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == kernel)
        .unwrap_or_else(|| panic!("{g}: no kernel `{kernel}` in {}", r["kernels"]));
    assert_eq!(k["spill_store_bytes"], 0, "{g}: {kernel} spills");
    assert_eq!(
        k["stack_frame_bytes"], 0,
        "{g}: {kernel} uses a stack frame"
    );
    assert!(
        k.get("wgmma_serialized").is_none(),
        "{g}: ptxas serialized the wgmma instructions of {kernel}: {}",
        k["wgmma_serialized"]
    );
}

/// `text` (a config of configs/) with CAUSAL and DTYPE set for every shape (a shape's own
/// `DTYPE = "bf16"` is dropped, so each shape compiles once), reading this checkout's
/// templates, written to `path`.
fn variant(path: &Path, text: &str, causal: &str, dtype: &str) -> PathBuf {
    let with_templates = text
        .lines()
        .filter(|l| l.trim() != "DTYPE = \"bf16\"")
        .map(|l| {
            if l.starts_with("family = ") {
                format!("{l}\ntemplates = {:?}", root().join("templates"))
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(
        path,
        with_templates
            .replace("CAUSAL = false", &format!("CAUSAL = {causal}"))
            .replace("DTYPE = \"f16\"", &format!("DTYPE = \"{dtype}\"")),
    )
    .unwrap();
    path.to_path_buf()
}

#[test]
fn every_gemm_genome_compiles_for_sm_90a_f16() {
    let listed = Command::cargo_bin("evo")
        .unwrap()
        .current_dir(root())
        .args(["space", "--list", "-c", "configs/gemm.toml"])
        .output()
        .unwrap();
    let count = String::from_utf8_lossy(&listed.stdout).lines().count();
    let reports = compile(&["--all"], &root().join("configs/gemm.toml"));
    assert_eq!(reports.len(), count);
    check(&reports);
}

#[test]
fn a_sample_of_bf16_gemm_genomes_compiles() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("configs/gemm.toml")).unwrap();
    let cfg = dir.path().join("bf16.toml");
    std::fs::write(
        &cfg,
        text.replace("DTYPE = \"f16\"", "DTYPE = \"bf16\"").replace(
            "family = \"gemm_mma\"",
            &format!(
                "family = \"gemm_mma\"\ntemplates = {:?}",
                root().join("templates")
            ),
        ),
    )
    .unwrap();
    let reports = compile(&["--random", "24", "--seed", "7"], &cfg);
    assert_eq!(reports.len(), 24);
    check(&reports);
    assert!(reports.iter().all(|r| r["spec"] == "DTYPE=bf16"));
}

/// A sample of the attention family that combines every pair of knob values the
/// constraints allow (`evo compile --pairwise`) compiles for both head dims, causal and
/// not, fp16 and bf16, without spills (`scripts/compile_all.sh` compiles every genome).
#[test]
fn a_pairwise_sample_of_sdpa_genomes_compiles_for_sm_90a() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("configs/sdpa.toml")).unwrap();
    for (causal, dtype) in [("false", "f16"), ("true", "bf16")] {
        let cfg = variant(
            &dir.path().join(format!("sdpa-{causal}-{dtype}.toml")),
            &text,
            causal,
            dtype,
        );
        let reports = compile(&["--pairwise"], &cfg);
        // Two specializations (head dim 64 and 128) per genome; BLOCK_M x NUM_WARPS alone
        // has 10 pairs the warp_rows constraint allows, each in its own genome.
        assert!(reports.len() >= 2 * 10, "{}", reports.len());
        check_kernel(&reports, "sdpa_fwd");
    }
}

/// A sample of the FP8 attention family that uses every value of every knob compiles
/// (head dims 64 and 128 together, causal and not, fp16 and bf16 output; head dim 64
/// alone, where BLOCK_N = 64 is valid too) with tensor-core instructions (HMMA on
/// sm_90a: ptxas unpacks the e4m3 mma.sync to fp16) and no spills; the quantizer kernel
/// ships in the same module.
#[test]
fn a_covering_sample_of_fp8_sdpa_genomes_compiles_for_sm_90a() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("configs/sdpa_fp8.toml")).unwrap();
    let only_64 = |t: &str| -> String {
        t.split("[[shapes]]")
            .filter(|part| !part.contains("HEAD_DIM = 128"))
            .collect::<Vec<_>>()
            .join("[[shapes]]")
    };
    for (causal, dtype, d64) in [
        ("false", "f16", false),
        ("true", "bf16", false),
        ("false", "f16", true),
    ] {
        let cfg = dir.path().join(format!("fp8-{causal}-{dtype}-{d64}.toml"));
        let body = text
            .replace("CAUSAL = false", &format!("CAUSAL = {causal}"))
            .replace("DTYPE = \"f16\"", &format!("DTYPE = \"{dtype}\""))
            .replace(
                "family = \"sdpa_fwd_fp8_mma\"",
                &format!(
                    "family = \"sdpa_fwd_fp8_mma\"\ntemplates = {:?}",
                    root().join("templates")
                ),
            );
        std::fs::write(&cfg, if d64 { only_64(&body) } else { body }).unwrap();
        let reports = compile(&["--cover"], &cfg);
        assert!(reports.len() >= 4, "{}", reports.len());
        check_kernel(&reports, "sdpa_fwd_fp8");
        for r in &reports {
            assert!(
                r["kernels"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k["name"] == "sdpa_fp8_quantize"),
                "{}: no quantizer",
                r["genome"]
            );
        }
        if d64 {
            assert!(reports
                .iter()
                .any(|r| r["genome"].as_str().unwrap().contains("BLOCK_N=64")));
        }
    }
}

/// The end-to-end FP8 config (problem sdpa_fwd_fp8_e2e, a family of four launches with
/// their own arguments): through the CLI, a genome compiles per specialization into one
/// module holding both kernels it launches, spill-free (its code is the FP8 family's, so
/// the covering sample above covers its knobs).
#[test]
fn the_fp8_end_to_end_config_compiles_both_kernels() {
    let reports = compile(
        &[
            "-g",
            "BLOCK_M=64,BLOCK_N=32,NUM_WARPS=4,PRODUCER_WARPS=1,Q_IN_REGS=true,STAGES=2,SWIZZLE=xor,V_LAYOUT=transpose,WARP_SPEC=off",
        ],
        &root().join("configs/sdpa_fp8_e2e.toml"),
    );
    assert_eq!(reports.len(), 2, "one per head dim");
    for r in &reports {
        assert_eq!(r["success"], true, "{}", r["log"]);
        for name in ["sdpa_fp8_quantize", "sdpa_fwd_fp8"] {
            assert_spill_free(r, name);
        }
        let launched: Vec<&str> = r["launch"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l[0].as_str().unwrap())
            .collect();
        assert_eq!(
            launched,
            [
                "sdpa_fp8_quantize",
                "sdpa_fp8_quantize",
                "sdpa_fp8_quantize",
                "sdpa_fwd_fp8"
            ]
        );
    }
}

/// The Hopper attention family compiles for sm_90a (both head dims): genomes combining every
/// pair of knob values (f16 non-causal) and a covering sample (bf16 causal), without spills or
/// a stack frame, with HGMMA (warpgroup MMA) in the SASS: the opcode the family requires from
/// the static gate. (All 1452 grid genomes x 2 head dims, f16 non-causal, compiled spill-free when
/// the register constraints were last measured: `evo compile --all -c configs/sdpa_wgmma.toml`,
/// run in chunks of one BLOCK_N and RESCALE each; the 678 persistent ones at head dim 128,
/// causal and not, through a copy of the family constrained to SCHEDULER persistent.)
#[test]
fn a_pairwise_sample_of_wgmma_sdpa_genomes_compiles_with_hgmma() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("configs/sdpa_wgmma.toml")).unwrap();
    for (causal, dtype, which) in [("false", "f16", "--pairwise"), ("true", "bf16", "--cover")] {
        let cfg = variant(
            &dir.path().join(format!("wgmma-{causal}-{dtype}.toml")),
            &text,
            causal,
            dtype,
        );
        let reports = compile(&[which], &cfg);
        if which == "--pairwise" {
            assert!(reports.len() >= 20, "{}", reports.len());
            // The schedules this sample must reach: ping-pong over two and three consumer
            // warpgroups, every swizzle span, the 176- and 192-key tiles, the lazy rescale and
            // consumers splitting the keys of one row block (two and three of them), the
            // persistent scheduler with one to three consumers and with ping-pong.
            for needle in [
                "CONSUMER_WG=2,LOADER=tma,OVERLAP=on,PINGPONG=on",
                "CONSUMER_WG=3",
                "SWIZZLE_BYTES=32",
                "SWIZZLE_BYTES=64",
                "BLOCK_N=176",
                "BLOCK_N=192",
                "RESCALE=lazy",
                "CONSUMER_WG=2,WG_SPLIT=keys",
                "CONSUMER_WG=3,WG_SPLIT=keys",
                "CONSUMER_WG=1,SCHEDULER=persistent",
                "CONSUMER_WG=3,SCHEDULER=persistent",
                "PINGPONG=on,SCHEDULER=persistent",
                "EXP2_POLY=eighth",
                "EXP2_POLY=quarter",
            ] {
                let hit = reports.iter().any(|r| {
                    let g = r["genome"].as_str().unwrap();
                    needle.split(',').all(|kv| g.contains(kv))
                });
                assert!(hit, "no genome with {needle}");
            }
        } else {
            assert!(reports.len() >= 6, "{}", reports.len());
            assert!(reports.iter().any(|r| r["genome"]
                .as_str()
                .unwrap()
                .contains("SCHEDULER=persistent")));
        }
        check_kernel_with(&reports, "sdpa_fwd", "HGMMA");
    }
}

/// The `[search]` seeds of config `text` that contain `needle` (a `KNOB=value`).
fn seeds_with(text: &str, needle: &str) -> Vec<String> {
    let config: toml::Table = toml::from_str(text).unwrap();
    config["search"]["seeds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .filter(|s| s.contains(needle))
        .map(str::to_string)
        .collect()
}

/// Four consumer warpgroups (CONSUMER_WG 4: 256 query rows a CTA, 112 registers a consumer) fit
/// at head dim 64 only, so the mixed-head-dim configs never compile them: a covering sample of
/// each Hopper family's head-dim-64 search config (f16 non-causal) reaches them and compiles for
/// sm_90a without spills or a stack frame, with the family's warpgroup MMA, as do the configs'
/// four-consumer seeds (f16 non-causal and bf16 causal).
#[test]
fn four_consumer_warpgroups_compile_at_head_dim_64() {
    let dir = tempfile::tempdir().unwrap();
    for (config, kernel, opcode) in [
        ("configs/sdpa_wgmma_hd64_search.toml", "sdpa_fwd", "HGMMA"),
        (
            "configs/sdpa_fp8_ws_hd64_search.toml",
            "sdpa_fwd_fp8",
            "QGMMA",
        ),
    ] {
        let text = std::fs::read_to_string(root().join(config)).unwrap();
        let seeds = seeds_with(&text, "CONSUMER_WG=4");
        assert!(!seeds.is_empty(), "{config}: no four-consumer seed");
        for (causal, dtype) in [("false", "f16"), ("true", "bf16")] {
            let name = format!("{kernel}-hd64-{causal}-{dtype}.toml");
            let cfg = variant(&dir.path().join(name), &text, causal, dtype);
            let mut reports = Vec::new();
            if causal == "false" {
                reports = compile(&["--cover"], &cfg);
                assert!(
                    reports
                        .iter()
                        .any(|r| r["genome"].as_str().unwrap().contains("CONSUMER_WG=4")),
                    "{config}: the covering sample has no four-consumer genome"
                );
            }
            for seed in &seeds {
                reports.extend(compile(&["-g", seed], &cfg));
            }
            check_kernel_with(&reports, kernel, opcode);
        }
    }
}

/// KEY_CTAS 2 and 4 (a cluster of that many CTAs per query block, the other ranks' partials
/// merged into rank 0's through distributed shared memory) compile for sm_90a without spills or
/// a stack frame, with HGMMA, and launch KEY_CTAS times the grid's query blocks in x: the Hopper
/// search configs' cluster seeds at head dims 64 and 128 (f16 non-causal, bf16 causal), and at
/// head dim 64 the cluster copies of two consumers owning rows (ping-pong), two and three
/// consumers splitting the keys, four consumers, and the four-CTA genomes measured in session 29.
#[test]
fn key_ctas_clusters_compile_with_key_ctas_times_the_query_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let quick = std::fs::read_to_string(root().join("configs/sdpa_wgmma_quick.toml")).unwrap();
    let hd64 = std::fs::read_to_string(root().join("configs/sdpa_wgmma_hd64_search.toml")).unwrap();
    let mut hd64_genomes = seeds_with(&hd64, "KEY_CTAS=2");
    assert!(!hd64_genomes.is_empty(), "no cluster seed at head dim 64");
    for g in [
        "BLOCK_N=128,CONSUMER_WG=2,KEY_CTAS=2,LOADER=tma,OVERLAP=on,PINGPONG=on,PRODUCER_REGS=24,RESCALE=lazy,SCHEDULER=grid,SETMAXNREG=true,STAGES=2,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows",
        "BLOCK_N=128,CONSUMER_WG=2,KEY_CTAS=2,LOADER=tma,OVERLAP=on,PINGPONG=off,PRODUCER_REGS=24,RESCALE=lazy,SCHEDULER=grid,SETMAXNREG=true,STAGES=2,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=keys",
        "BLOCK_N=176,CONSUMER_WG=3,KEY_CTAS=2,LOADER=tma,OVERLAP=off,PINGPONG=off,PRODUCER_REGS=24,RESCALE=lazy,SCHEDULER=grid,SETMAXNREG=true,STAGES=3,SWIZZLE_BYTES=64,WARP_SPEC=on,WG_SPLIT=keys",
        "BLOCK_N=64,CONSUMER_WG=4,KEY_CTAS=2,LOADER=tma,OVERLAP=on,PINGPONG=on,PRODUCER_REGS=24,RESCALE=lazy,SCHEDULER=grid,SETMAXNREG=true,STAGES=2,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows",
        "BLOCK_N=64,CONSUMER_WG=1,KEY_CTAS=4,LOADER=tma,OVERLAP=off,PINGPONG=off,PRODUCER_REGS=40,RESCALE=lazy,SCHEDULER=grid,SETMAXNREG=false,STAGES=2,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows",
        "BLOCK_N=128,CONSUMER_WG=1,KEY_CTAS=4,LOADER=tma,OVERLAP=off,PINGPONG=off,PRODUCER_REGS=40,RESCALE=lazy,SCHEDULER=grid,SETMAXNREG=false,STAGES=2,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows",
        "BLOCK_N=64,CONSUMER_WG=2,KEY_CTAS=4,LOADER=tma,OVERLAP=off,PINGPONG=off,PRODUCER_REGS=24,RESCALE=lazy,SCHEDULER=grid,SETMAXNREG=true,STAGES=2,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows",
    ] {
        hd64_genomes.push(g.to_string());
    }
    let quick_seeds = seeds_with(&quick, "KEY_CTAS=2");
    assert!(
        !quick_seeds.is_empty(),
        "no cluster seed in the quick config"
    );
    for (name, text, genomes) in [
        ("quick", &quick, quick_seeds),
        ("hd64", &hd64, hd64_genomes),
    ] {
        for (causal, dtype) in [("false", "f16"), ("true", "bf16")] {
            let cfg = variant(
                &dir.path()
                    .join(format!("key-ctas-{name}-{causal}-{dtype}.toml")),
                text,
                causal,
                dtype,
            );
            let mut reports = Vec::new();
            for g in &genomes {
                reports.extend(compile(&["-g", g], &cfg));
            }
            check_kernel_with(&reports, "sdpa_fwd", "HGMMA");
            // The launch is planned for the config's first shape of the report's head dim; query
            // blocks of 64 rows (one consumer, or split keys) or 64 per consumer.
            let shapes: toml::Table = toml::from_str(text).unwrap();
            let shapes = shapes["shapes"].as_array().unwrap();
            for r in &reports {
                let g = r["genome"].as_str().unwrap();
                let launch = &r["launch"][0];
                assert_eq!(launch[0], "sdpa_fwd");
                let head_dim: i64 = r["spec"]
                    .as_str()
                    .unwrap()
                    .split("HEAD_DIM=")
                    .nth(1)
                    .unwrap()
                    .parse()
                    .unwrap();
                let shape = shapes
                    .iter()
                    .find(|s| s["HEAD_DIM"].as_integer() == Some(head_dim))
                    .unwrap();
                let seq = shape["SEQ_Q"].as_integer().unwrap() as u64;
                let consumers = (2..=4u64)
                    .find(|c| g.contains(&format!("CONSUMER_WG={c}")))
                    .unwrap_or(1);
                let rows = if g.contains("WG_SPLIT=keys") {
                    64
                } else {
                    64 * consumers
                };
                let key_ctas = if g.contains("KEY_CTAS=4") { 4 } else { 2 };
                assert_eq!(
                    launch[1]["grid"][0].as_u64().unwrap(),
                    key_ctas * seq.div_ceil(rows),
                    "{g}: {launch}"
                );
            }
        }
    }
}

/// Tensor-core instructions `op` (HGMMA, QGMMA, HMMA) in `kernel`'s SASS of a compile report.
fn tensor_ops(report: &Json, kernel: &str, op: &str) -> u64 {
    report["sass"][kernel]["tensor"][op].as_u64().unwrap_or(0)
}

/// The Hopper FP8 family compiles for sm_90a without spills or a stack frame (a covering
/// sample over both head dims: f16 non-causal, bf16 causal), with native FP8 warpgroup MMA
/// (QGMMA, which its static gate requires) in the attention kernel: for S = Q K^T always, and
/// for P V with PV = e4m3 (PV = f16 runs P V as HGMMA); the quantizer ships beside it.
#[test]
fn a_covering_sample_of_fp8_wgmma_genomes_compiles_with_qgmma() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("configs/sdpa_fp8_wgmma.toml")).unwrap();
    for (causal, dtype) in [("false", "f16"), ("true", "bf16")] {
        let cfg = variant(
            &dir.path().join(format!("fp8-wgmma-{causal}-{dtype}.toml")),
            &text,
            causal,
            dtype,
        );
        let reports = compile(&["--cover"], &cfg);
        assert!(reports.len() >= 6, "{}", reports.len());
        check_kernel_with(&reports, "sdpa_fwd_fp8", "QGMMA");
        for r in &reports {
            let g = r["genome"].as_str().unwrap();
            let count = |op: &str| tensor_ops(r, "sdpa_fwd_fp8", op);
            // Q K^T: HEAD_DIM / 32 k32 steps of QGMMA; P V: BLOCK_N / 32 more with PV = e4m3.
            if g.contains("PV=f16") {
                assert!(count("HGMMA") > 0, "{g} has no HGMMA: {}", r["sass"]);
            } else {
                assert_eq!(count("HGMMA"), 0, "{g}: {}", r["sass"]);
            }
            assert_eq!(count("HMMA"), 0, "{g}: {}", r["sass"]);
            assert!(
                r["kernels"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k["name"] == "sdpa_fp8_quantize"),
                "{g}: no quantizer"
            );
        }
    }
}

/// A covering sample of the FP8 family on the fp16 schedule (sdpa_fwd_fp8_ws, issue 19)
/// compiles for sm_90a (head dims 64 and 128; f16 non-causal and bf16 causal) without spills or
/// a stack frame, both GEMMs as QGMMA: Q K^T HEAD_DIM / 32 and P V BLOCK_N / 32 k32 steps per
/// tile, no HGMMA or HMMA anywhere (V is never decoded to f16).
#[test]
fn a_covering_sample_of_fp8_ws_genomes_compiles_with_qgmma_only() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("configs/sdpa_fp8_ws_search.toml")).unwrap();
    for (causal, dtype) in [("false", "f16"), ("true", "bf16")] {
        let cfg = variant(
            &dir.path().join(format!("fp8-ws-{causal}-{dtype}.toml")),
            &text,
            causal,
            dtype,
        );
        let reports = compile(&["--cover"], &cfg);
        assert!(reports.len() >= 6, "{}", reports.len());
        check_kernel_with(&reports, "sdpa_fwd_fp8", "QGMMA");
        for r in &reports {
            let g = r["genome"].as_str().unwrap();
            let count = |op: &str| tensor_ops(r, "sdpa_fwd_fp8", op);
            assert_eq!(count("HGMMA"), 0, "{g}: {}", r["sass"]);
            assert_eq!(count("HMMA"), 0, "{g}: {}", r["sass"]);
        }
    }
}

/// The end-to-end ws families compile for sm_90a with the first seed of
/// configs/sdpa_fp8_e2e_ws.toml in every specialization it asks for (f16 and bf16, head dims 64
/// and 128, causal and not): the attention kernel spill-free with QGMMA and no HGMMA or HMMA, the
/// quantizer kernels spill-free beside it, launched first: sdpa_fwd_fp8_e2e_ws the split
/// quantizer's six, sdpa_fwd_fp8_e2e_ws_cluster (the same config, that family) the cluster
/// quantizer of q, k and v at the seed's quantizer schedule (the family's defaults). (The attention code is sdpa_fwd_fp8_ws's, whose covering sample
/// compiles above.)
#[test]
fn the_fp8_e2e_ws_config_compiles_the_quantizer_and_the_qgmma_kernel() {
    let config = root().join("configs/sdpa_fp8_e2e_ws.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let seed = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("\"BLOCK_N="))
        .map(|l| format!("BLOCK_N={}", l.trim_end_matches(['"', ','])))
        .unwrap_or_else(|| panic!("no seed in {text}"));
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster.toml");
    std::fs::write(
        &cluster,
        text.replace(
            "family = \"sdpa_fwd_fp8_e2e_ws\"",
            &format!(
                "family = \"sdpa_fwd_fp8_e2e_ws_cluster\"\ntemplates = {:?}",
                root().join("templates")
            ),
        ),
    )
    .unwrap();
    let split_quantizer = [
        "sdpa_fp8_amax",
        "sdpa_fp8_quantize_chunks",
        "sdpa_fp8_amax",
        "sdpa_fp8_quantize_chunks",
        "sdpa_fp8_amax",
        "sdpa_fp8_quantize_chunks",
    ];
    let cluster_quantizer = ["sdpa_fp8_quantize_qkv"];
    for (config, quantizer) in [
        (&config, &split_quantizer[..]),
        (&cluster, &cluster_quantizer[..]),
    ] {
        let reports = compile(&["-g", &seed], config);
        // f16 and bf16 x head dims 64 and 128 x causal and not.
        assert_eq!(reports.len(), 8);
        check_kernel_with(&reports, "sdpa_fwd_fp8", "QGMMA");
        for r in &reports {
            let g = r["genome"].as_str().unwrap();
            assert_eq!(tensor_ops(r, "sdpa_fwd_fp8", "HGMMA"), 0, "{g}");
            assert_eq!(tensor_ops(r, "sdpa_fwd_fp8", "HMMA"), 0, "{g}");
            let launched: Vec<&str> = r["launch"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l[0].as_str().unwrap())
                .collect();
            assert_eq!(launched[..quantizer.len()], *quantizer, "{g}");
            assert_eq!(launched[quantizer.len()..], ["sdpa_fwd_fp8"], "{g}");
            for name in quantizer {
                assert_spill_free(r, name);
            }
        }
    }
    // The cluster quantizer's other schedules (QUANT_CLUSTER x QUANT_CTAS_PER_SM) compile
    // spill-free too, each in every specialization.
    for schedule in [
        "QUANT_CLUSTER=8,QUANT_CTAS_PER_SM=3",
        "QUANT_CLUSTER=16,QUANT_CTAS_PER_SM=1",
        "QUANT_CLUSTER=16,QUANT_CTAS_PER_SM=3",
    ] {
        let reports = compile(&["-g", &format!("{seed},{schedule}")], &cluster);
        assert_eq!(reports.len(), 8, "{schedule}");
        for r in &reports {
            assert!(r["genome"].as_str().unwrap().contains(schedule), "{r}");
            assert_spill_free(r, "sdpa_fp8_quantize_qkv");
        }
    }
}

/// A sample of each split-KV attention family that uses every value of every knob compiles
/// for sm_90a (both head dims; f16 non-causal and bf16 causal) without spills or a stack
/// frame in either kernel: the attention kernel with its tensor-core instructions (HGMMA for
/// sdpa_fwd_wgmma_splitkv, which its static gate requires; HMMA for sdpa_fwd_mma_splitkv),
/// the combine kernel beside it in the module, launched second.
#[test]
fn a_covering_sample_of_split_kv_genomes_compiles_for_sm_90a() {
    let dir = tempfile::tempdir().unwrap();
    for (config, opcode) in [
        ("sdpa_wgmma_splitkv", "HGMMA"),
        ("sdpa_mma_splitkv", "HMMA"),
    ] {
        let text = std::fs::read_to_string(root().join(format!("configs/{config}.toml"))).unwrap();
        for (causal, dtype) in [("false", "f16"), ("true", "bf16")] {
            let cfg = variant(
                &dir.path().join(format!("{config}-{causal}-{dtype}.toml")),
                &text,
                causal,
                dtype,
            );
            let reports = compile(&["--cover"], &cfg);
            assert!(reports.len() >= 6, "{config}: {}", reports.len());
            for splits in [2, 4, 8] {
                assert!(
                    reports.iter().any(|r| r["genome"]
                        .as_str()
                        .unwrap()
                        .contains(&format!("KV_SPLITS={splits}"))),
                    "{config}: no KV_SPLITS={splits}"
                );
            }
            check_kernel_with(&reports, "sdpa_fwd", opcode);
            for r in &reports {
                let g = r["genome"].as_str().unwrap();
                assert_spill_free(r, "sdpa_splitkv_combine");
                let launched: Vec<&str> = r["launch"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|l| l[0].as_str().unwrap())
                    .collect();
                assert_eq!(launched, ["sdpa_fwd", "sdpa_splitkv_combine"], "{g}");
            }
        }
    }
}

/// The Hopper families refuse setmaxnreg targets beyond the registers the CTA launched with,
/// which would leave the consumers' `setmaxnreg.inc` waiting forever. In a copy of each family
/// whose CONSUMER_REGS is edited, a genome fails to compile with the guard's message, while the
/// unedited copy compiles it: two consumers at 256 registers (24 + 2 x 256 > 504), and four
/// consumers at the rule before they existed, (512 - 24) / 4 = 120 registers (24 + 4 x 120 =
/// 504, within 512 but beyond the 480 per warpgroup thread a CTA of 640 threads launches with).
#[test]
fn setmaxnreg_targets_beyond_the_register_file_do_not_compile() {
    const RULE: &str = "CONSUMER_REGS = \"min(240, (65536 / THREADS / 8 * 8 * THREADS / 128 - PRODUCER_REGS) / CONSUMER_WG / 8 * 8)\"";
    const OLD_RULE: &str =
        "CONSUMER_REGS = \"min(240, (512 - PRODUCER_REGS) / CONSUMER_WG / 8 * 8)\"";
    const FIXED: &str = "CONSUMER_REGS = \"256\"";
    let cases = [
        (
            "sdpa_fwd",
            "sdpa_fwd_wgmma",
            "sdpa_fwd",
            "BLOCK_N=64,CONSUMER_WG=2,EXP2_POLY=off,LOADER=tma,OVERLAP=off,PINGPONG=off,PRODUCER_REGS=24,RESCALE=always,SCHEDULER=grid,SETMAXNREG=true,SPECULATIVE_EXP=off,STAGES=2,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows",
            FIXED,
        ),
        (
            "sdpa_fwd",
            "sdpa_fwd_wgmma",
            "sdpa_fwd",
            "BLOCK_N=64,CONSUMER_WG=4,EXP2_POLY=off,LOADER=tma,OVERLAP=on,PINGPONG=on,PRODUCER_REGS=24,RESCALE=lazy,SCHEDULER=grid,SETMAXNREG=true,SPECULATIVE_EXP=off,STAGES=2,SWIZZLE_BYTES=128,WARP_SPEC=on,WG_SPLIT=rows",
            OLD_RULE,
        ),
        (
            "sdpa_fwd_fp8",
            "sdpa_fwd_fp8_ws",
            "sdpa_fwd_fp8",
            "BLOCK_N=128,CONSUMER_WG=2,EXP2_POLY=off,OVERLAP=on,PINGPONG=on,PRODUCER_REGS=24,PSUM=f32,RESCALE=lazy,SCHEDULER=grid,SETMAXNREG=true,STAGES=2",
            FIXED,
        ),
        (
            "sdpa_fwd_fp8",
            "sdpa_fwd_fp8_ws",
            "sdpa_fwd_fp8",
            "BLOCK_N=96,CONSUMER_WG=4,EXP2_POLY=off,OVERLAP=off,PINGPONG=off,PRODUCER_REGS=24,PSUM=mma,RESCALE=lazy,SCHEDULER=grid,SETMAXNREG=true,STAGES=2",
            OLD_RULE,
        ),
    ];
    for (dir, family, problem, genome, replacement) in cases {
        for edited in [false, true] {
            let tmp = tempfile::tempdir().unwrap();
            let templates = tmp.path().join("templates");
            for sub in ["common", dir] {
                std::fs::create_dir_all(templates.join(sub)).unwrap();
                for entry in std::fs::read_dir(root().join("templates").join(sub)).unwrap() {
                    let path = entry.unwrap().path();
                    std::fs::copy(&path, templates.join(sub).join(path.file_name().unwrap()))
                        .unwrap();
                }
            }
            let toml = templates.join(dir).join(format!("{family}.toml"));
            let text = std::fs::read_to_string(&toml).unwrap();
            assert!(text.contains(RULE), "{family}: CONSUMER_REGS changed");
            if edited {
                std::fs::write(&toml, text.replace(RULE, replacement)).unwrap();
            }
            let config = tmp.path().join("config.toml");
            std::fs::write(
                &config,
                format!(
                    "problem = \"{problem}\"\nfamily = \"{family}\"\ntemplates = {templates:?}\n\n\
                     [spec]\nDTYPE = \"f16\"\nCAUSAL = false\n\n\
                     [[shapes]]\nBATCH = 1\nHEADS = 2\nSEQ_Q = 256\nSEQ_KV = 256\nHEAD_DIM = 64\n"
                ),
            )
            .unwrap();
            let out = Command::cargo_bin("evo")
                .unwrap()
                .env("EVO_CACHE_DIR", tmp.path().join("cache"))
                .args(["--json", "compile", "--arch", "sm_90a", "-c"])
                .arg(&config)
                .args(["-g", genome])
                .output()
                .unwrap();
            let reports: Json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                panic!("{e}; stderr: {}", String::from_utf8_lossy(&out.stderr))
            });
            let r = &reports[0];
            if edited {
                assert_eq!(
                    r["success"], false,
                    "{family} {genome}: compiled with {replacement}"
                );
                assert!(
                    r["log"]
                        .as_str()
                        .unwrap()
                        .contains("setmaxnreg targets exceed the register file"),
                    "{family}: {}",
                    r["log"]
                );
            } else {
                assert_eq!(r["success"], true, "{family} {genome}: {}", r["log"]);
            }
        }
    }
}
