//! Family files with mistakes must fail to load with a message that names the file, the
//! line where there is one, and the mistake.

use std::path::{Path, PathBuf};

use evo_core::Genome;
use evo_kernels::Family;

const GOOD_TOML: &str = r#"name = "toy"
problem = "gemm"
template = "toy.cu.tera"
min_arch = 80
description = "a toy family for loader tests"

[knobs]
TILE = [16, 32, 64]
MODE = ["plain", "fancy"]
UNROLL = [true, false]

[derived]
THREADS = "TILE * 2"

[constraints]
smem = "TILE * 1024 <= MAX_SMEM"
fancy_needs_big = "MODE != \"fancy\" || TILE >= 32"

[launch]
grid = ["ceil_div(N, TILE)", "ceil_div(M, TILE)"]
block = ["THREADS"]
shared_bytes = "TILE * 1024"
"#;

const GOOD_TEMPLATE: &str = r#"{% include "common/util.cuh" %}
constexpr int TILE = {{ TILE }};
constexpr int THREADS = {{ THREADS }};
constexpr bool UNROLL = {{ UNROLL }};
{% if MODE == "fancy" %}#define FANCY 1{% else %}#define FANCY 0{% endif %}
{% raw %}extern "C" __global__ void gemm() { int x[2] = {{0}}; (void)x; }{% endraw %}
"#;

/// Writes a templates tree with the toy family, after applying `edit` to its files.
fn tree(toml: &str, template: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    std::fs::create_dir_all(root.join("gemm")).unwrap();
    std::fs::create_dir_all(root.join("common")).unwrap();
    // Verbatim header: C++ braces that would confuse Tera if it were parsed.
    std::fs::write(
        root.join("common/util.cuh"),
        "#pragma once\nstruct A { int v[1] = {{1}}; };\n{# not a comment #}\n",
    )
    .unwrap();
    std::fs::write(root.join("gemm/toy.toml"), toml).unwrap();
    std::fs::write(root.join("gemm/toy.cu.tera"), template).unwrap();
    (dir, root)
}

fn load(toml: &str, template: &str) -> Result<Family, String> {
    let (_dir, root) = tree(toml, template);
    Family::load(&root, "gemm", "toy").map_err(|e| e.to_string())
}

fn assert_err(result: Result<Family, String>, needles: &[&str]) {
    let msg = match result {
        Ok(_) => panic!("loaded, but should have failed with {needles:?}"),
        Err(e) => e,
    };
    for n in needles {
        assert!(msg.contains(n), "message {msg:?} lacks {n:?}");
    }
}

#[test]
fn good_family_loads_renders_and_launches() {
    let (_dir, root) = tree(GOOD_TOML, GOOD_TEMPLATE);
    let f = Family::load(&root, "gemm", "toy").unwrap();
    assert_eq!(f.launches.len(), 1);
    assert_eq!(f.launches[0].kernel, "gemm");
    let space = f.space(vec![f.probe_context()]).unwrap();
    let g = Genome::parse("TILE=32,MODE=fancy,UNROLL=true").unwrap();
    assert!(space.is_valid(&g));
    let src = f.render(&space, &g, 0).unwrap();
    assert!(
        src.starts_with("// evo: family toy (problem gemm), genome MODE=fancy,TILE=32,UNROLL=true")
    );
    assert!(src.contains("constexpr int TILE = 32;"));
    assert!(src.contains("#define FANCY 1"));
    assert!(
        src.contains("int x[2] = {{0}};"),
        "raw blocks stay verbatim"
    );
    assert!(
        src.contains("struct A { int v[1] = {{1}}; };\n{# not a comment #}"),
        "common headers stay verbatim"
    );
    let vars = space.vars(&g, 0).unwrap();
    let shape = [("M".to_string(), 100.into()), ("N".to_string(), 65.into())]
        .into_iter()
        .collect();
    let dims = f.launch_dims(&vars, &shape).unwrap();
    assert_eq!(dims[0].1.grid, [3, 4, 1]);
    assert_eq!(dims[0].1.block, [64, 1, 1]);
    assert_eq!(dims[0].1.shared_bytes, 32 * 1024);
}

#[test]
fn unknown_variable_names_line_and_suggests() {
    let toml = GOOD_TOML.replace("TILE * 1024 <= MAX_SMEM", "TILE * 1024 <= MAX_SMEN");
    assert_err(
        load(&toml, GOOD_TEMPLATE),
        &["toy.toml:16", "MAX_SMEN", "did you mean `MAX_SMEM`"],
    );
}

#[test]
fn unparsable_expression_names_line() {
    let toml = GOOD_TOML.replace("THREADS = \"TILE * 2\"", "THREADS = \"TILE * (2\"");
    assert_err(load(&toml, GOOD_TEMPLATE), &["toy.toml:13", "TILE * (2"]);
}

#[test]
fn assignment_instead_of_comparison_is_caught() {
    let toml = GOOD_TOML.replace("MODE != \\\"fancy\\\"", "MODE = \\\"fancy\\\"");
    assert_err(
        load(&toml, GOOD_TEMPLATE),
        &["toy.toml:17", "did you mean `==`"],
    );
}

#[test]
fn missing_launch_rule() {
    let toml = GOOD_TOML.split("[launch]").next().unwrap().to_string();
    assert_err(
        load(&toml, GOOD_TEMPLATE),
        &["toy.toml", "no [launch] rule"],
    );
}

#[test]
fn launch_rule_reading_an_unknown_variable() {
    let toml = GOOD_TOML.replace("ceil_div(N, TILE)", "ceil_div(SEQ, TILE)");
    assert_err(load(&toml, GOOD_TEMPLATE), &["toy.toml:20", "SEQ"]);
}

#[test]
fn unknown_keys_and_problems() {
    let toml = GOOD_TOML.replace("min_arch = 80", "min_arch = 80\nmax_arch = 90");
    assert_err(load(&toml, GOOD_TEMPLATE), &["toy.toml", "max_arch"]);
    let toml = GOOD_TOML.replace("problem = \"gemm\"", "problem = \"gemv\"");
    assert_err(
        load(&toml, GOOD_TEMPLATE),
        &["toy.toml:2", "unknown problem `gemv`"],
    );
    let toml = GOOD_TOML.replace("name = \"toy\"", "name = \"toy2\"");
    assert_err(load(&toml, GOOD_TEMPLATE), &["toy.toml:1", "must match"]);
}

#[test]
fn knob_the_template_never_uses() {
    let template = GOOD_TEMPLATE.replace("constexpr bool UNROLL = {{ UNROLL }};\n", "");
    assert_err(
        load(GOOD_TOML, &template),
        &[
            "toy.toml",
            "knob `UNROLL` never changes the rendered source",
        ],
    );
}

#[test]
fn undefined_template_variable_fails_rendering() {
    let template = format!("{GOOD_TEMPLATE}constexpr int X = {{{{ WARPS }}}};\n");
    assert_err(load(GOOD_TOML, &template), &["rendering toy", "WARPS"]);
    let template = format!("{GOOD_TEMPLATE}{{% if WARPS == 2 %}}x{{% endif %}}\n");
    assert_err(load(GOOD_TOML, &template), &["rendering toy", "WARPS"]);
}

#[test]
fn template_syntax_error_names_the_template() {
    let template = GOOD_TEMPLATE.replace("{% endif %}", "");
    assert_err(load(GOOD_TOML, &template), &["toy.cu.tera"]);
}

#[test]
fn constraints_that_reject_everything() {
    let toml = GOOD_TOML.replace("TILE * 1024 <= MAX_SMEM", "TILE > 1000");
    assert_err(
        load(&toml, GOOD_TEMPLATE),
        &["no genome satisfies every constraint"],
    );
}

#[test]
fn missing_files() {
    let (_dir, root) = tree(GOOD_TOML, GOOD_TEMPLATE);
    let e = Family::load(&root, "gemm", "nope").unwrap_err().to_string();
    assert!(e.contains("nope.toml"), "{e}");
    std::fs::remove_file(root.join("gemm/toy.cu.tera")).unwrap();
    let e = Family::load(&root, "gemm", "toy").unwrap_err().to_string();
    assert!(e.contains("toy.cu.tera"), "{e}");
    let _ = Path::new("");
}
