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

/// The toy family as two kernels: `scale` writes a scratch copy of A, `gemm` reads it.
fn multi_toml(scale_args: &str, gemm_args: &str, scratch: &str) -> String {
    let head = GOOD_TOML.split("[launch]").next().unwrap();
    format!(
        "{head}{scratch}
[[launch]]
kernel = \"scale\"
args = {scale_args}
grid = [\"ceil_div(M * K, 256)\"]
block = [\"256\"]

[[launch]]
kernel = \"gemm\"
args = {gemm_args}
grid = [\"ceil_div(N, TILE)\", \"ceil_div(M, TILE)\"]
block = [\"THREADS\"]
shared_bytes = \"TILE * 1024\"
"
    )
}

const SCRATCH: &str = "[[scratch]]
name = \"a2\"
elem = \"f32\"
len = \"M * K + TILE\"
";

/// 1-based line of the first line of `toml` containing `needle`, after the first `after`.
fn line_with(toml: &str, needle: &str, after: usize) -> usize {
    toml.lines()
        .enumerate()
        .skip(after)
        .find(|(_, l)| l.contains(needle))
        .map(|(i, _)| i + 1)
        .unwrap()
}

#[test]
fn kernels_take_their_own_arguments_and_scratch() {
    use evo_kernels::harness::{ArgSlot, ElemType};
    let toml = multi_toml(
        r#"["a", "a2", "i32:M * K", "i64:M * K * 4"]"#,
        r#"["a2", "b", "c", "@abi"]"#,
        SCRATCH,
    );
    let (_dir, root) = tree(&toml, GOOD_TEMPLATE);
    let f = Family::load(&root, "gemm", "toy").unwrap();
    assert!(f.is_multi_arg());
    let space = f.space(vec![f.probe_context()]).unwrap();
    let g = Genome::parse("TILE=32,MODE=fancy,UNROLL=true").unwrap();
    let vars = space.vars(&g, 0).unwrap();
    let shape = toy_gemm_shape();
    let args = f.launch_args(&vars, &shape).unwrap();
    assert_eq!(
        args[0],
        vec![
            ArgSlot::Input(0),
            ArgSlot::Scratch(0),
            ArgSlot::I32(6400),
            ArgSlot::I64(25600)
        ]
    );
    let abi = evo_kernels::problem("gemm").unwrap().args(&shape);
    assert_eq!(
        args[1][..3],
        [ArgSlot::Scratch(0), ArgSlot::Input(1), ArgSlot::Output]
    );
    // `@abi`'s tensors are slots; its sizes, strides and scalars stay symbolic until a
    // call binds them, then they are that call's.
    assert_eq!(
        args[1][3..6],
        [ArgSlot::Input(0), ArgSlot::Input(1), ArgSlot::Output]
    );
    assert_eq!(
        args[1][6..],
        (3..abi.len()).map(ArgSlot::Abi).collect::<Vec<_>>()[..]
    );
    let bound = evo_kernels::bind_abi(&args[1], &abi).unwrap();
    assert_eq!(bound[3..], abi[..]);
    assert!(evo_kernels::bind_abi(&[ArgSlot::Abi(abi.len())], &abi).is_err());
    let scratch = f.scratch_specs(&vars, &shape).unwrap();
    assert_eq!(scratch.len(), 1);
    assert_eq!(
        (scratch[0].elem, scratch[0].len),
        (ElemType::F32, 6400 + 32)
    );
    // DTYPE scratch takes the specialization's element type.
    let toml = multi_toml(
        r#"["a", "a2"]"#,
        r#"["a2"]"#,
        &SCRATCH.replace("\"f32\"", "\"DTYPE\""),
    );
    let (_dir, root) = tree(&toml, GOOD_TEMPLATE);
    let f = Family::load(&root, "gemm", "toy").unwrap();
    let mut bf = shape.clone();
    bf.insert("DTYPE".into(), "bf16".into());
    assert_eq!(f.scratch_specs(&vars, &bf).unwrap()[0].elem, ElemType::Bf16);
    // An i32 that does not fit is an error at launch time, naming the kernel.
    let toml = multi_toml(r#"["a", "a2", "i32:M * K * K * K"]"#, r#"["a2"]"#, SCRATCH);
    let (_dir, root) = tree(&toml, GOOD_TEMPLATE);
    let f = Family::load(&root, "gemm", "toy").unwrap();
    let mut big = shape.clone();
    big.insert("K".into(), 4096.into());
    let e = f.launch_args(&vars, &big).unwrap_err();
    assert!(e.contains("`scale`") && e.contains("32 bits"), "{e}");
}

#[test]
fn bad_per_launch_arguments_name_file_and_line() {
    let ok_gemm = r#"["a2", "b", "c", "@abi"]"#;
    let twice = multi_toml(
        r#"["a", "a2"]"#,
        ok_gemm,
        &format!("{SCRATCH}\n{}", SCRATCH.replace("M * K + TILE", "M")),
    );
    let cases: Vec<(String, &str, usize, Vec<&str>)> = vec![
        // Unknown tensor in the second launch: the line of the second `args`.
        (
            multi_toml(r#"["a", "a2"]"#, r#"["a2", "bb", "c"]"#, SCRATCH),
            "args = [\"a2\", \"bb\"",
            0,
            vec![
                "unknown argument `bb`",
                "launch rule #2 (`gemm`)",
                "\"a\", \"b\"",
                "[\"a2\"]",
            ],
        ),
        (
            multi_toml(r#"["a", "a2", "@scalars"]"#, ok_gemm, SCRATCH),
            "args = [\"a\", \"a2\", \"@scalars\"]",
            0,
            vec!["no argument list `scalars`", "[\"abi\"]"],
        ),
        (
            multi_toml(r#"["a", "a2", "i32:M * KK"]"#, ok_gemm, SCRATCH),
            "i32:M * KK",
            0,
            vec!["KK", "did you mean `K`"],
        ),
        (
            multi_toml(r#"["a", "a2", "f32:0.5"]"#, ok_gemm, SCRATCH),
            "f32:0.5",
            0,
            vec!["scalar type `f32`"],
        ),
        (
            multi_toml(r#"["a", "a2", "i64:(M"]"#, ok_gemm, SCRATCH),
            "i64:(M",
            0,
            vec!["i64:(M"],
        ),
        // Scratch mistakes: the line of the offending key in its [[scratch]] table.
        (
            multi_toml(r#"["a"]"#, ok_gemm.replace("a2", "b").as_str(), SCRATCH),
            "name = \"a2\"",
            0,
            vec!["scratch `a2` is declared but no [[launch]] passes it"],
        ),
        (
            multi_toml(
                r#"["a", "a2"]"#,
                ok_gemm,
                &SCRATCH.replace("\"f32\"", "\"f64\""),
            ),
            "elem = \"f64\"",
            0,
            vec!["scratch `a2`", "elem = \"f64\""],
        ),
        (
            multi_toml(
                r#"["a", "a2"]"#,
                ok_gemm,
                &SCRATCH.replace("M * K + TILE", "M * KX"),
            ),
            "M * KX",
            0,
            vec!["scratch `a2`, len", "KX"],
        ),
        // Declared twice: the line of the second declaration.
        (
            twice.clone(),
            "name = \"a2\"",
            line_with(&twice, "name = \"a2\"", 0),
            vec!["scratch `a2`: declared twice"],
        ),
    ];
    for (toml, needle, after, messages) in cases {
        let line = line_with(&toml, needle, after);
        let mut want = vec![format!("toy.toml:{line}:")];
        want.extend(messages.iter().map(|m| m.to_string()));
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        assert_err(load(&toml, GOOD_TEMPLATE), &want);
    }
    // A scratch buffer may not shadow a tensor of the problem.
    let toml = multi_toml(r#"["a", "b"]"#, r#"["b"]"#, &SCRATCH.replace("a2", "b"));
    assert_err(
        load(&toml, GOOD_TEMPLATE),
        &["scratch `b` has the name of a tensor"],
    );
}

#[test]
fn base_files_lend_every_key_not_set() {
    let (_dir, root) = tree(GOOD_TOML, GOOD_TEMPLATE);
    std::fs::create_dir_all(root.join("gemm2")).unwrap();
    let derived = "base = \"../gemm/toy.toml\"\nname = \"toy2\"\ndescription = \"derived\"\n\n[launch]\nkernel = \"gemm\"\ngrid = [\"1\"]\nblock = [\"THREADS\"]\n";
    std::fs::write(root.join("gemm2/toy2.toml"), derived).unwrap();
    let f = Family::load_file(&root.join("gemm2/toy2.toml"), &root).unwrap();
    assert_eq!(f.name, "toy2");
    assert_eq!(f.description, "derived");
    assert_eq!(f.knobs.len(), 3);
    assert_eq!(f.launches[0].grid[0].source(), "1");
    // The template comes from the base's folder.
    let space = f.space(vec![f.probe_context()]).unwrap();
    let g = Genome::parse("TILE=32,MODE=fancy,UNROLL=true").unwrap();
    assert!(f
        .render(&space, &g, 0)
        .unwrap()
        .contains("constexpr int TILE = 32;"));
    // One level only; a missing base is a read error naming it.
    std::fs::write(
        root.join("gemm2/toy3.toml"),
        derived
            .replace("../gemm/toy.toml", "toy2.toml")
            .replace("toy2\"", "toy3\""),
    )
    .unwrap();
    let e = Family::load_file(&root.join("gemm2/toy3.toml"), &root)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("toy3.toml:1") && e.contains("one level only"),
        "{e}"
    );
    std::fs::write(
        root.join("gemm2/toy4.toml"),
        derived.replace("../gemm/toy.toml", "nope.toml"),
    )
    .unwrap();
    let e = Family::load_file(&root.join("gemm2/toy4.toml"), &root)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope.toml"), "{e}");
}

/// `[knobs]`, `[derived]` and `[constraints]` of a `base` family merge entry by entry: the
/// derived file adds a knob, narrows one, redefines a derived value and adds a constraint,
/// and keeps every other entry of the base.
#[test]
fn base_files_merge_knobs_derived_and_constraints_by_entry() {
    let (_dir, root) = tree(
        &GOOD_TOML.replace(
            "THREADS = \"TILE * 2\"",
            "THREADS = \"TILE * 2\"\nEXTRA = \"0\"",
        ),
        &GOOD_TEMPLATE.replace(
            "constexpr int TILE",
            "constexpr int EXTRA = {{ EXTRA }};\nconstexpr int TILE",
        ),
    );
    std::fs::create_dir_all(root.join("gemm2")).unwrap();
    let derived = "base = \"../gemm/toy.toml\"\nname = \"toy2\"\n\n[knobs]\nMORE = [1, 2]\nMODE = [\"fancy\"]\n\n[derived]\nEXTRA = \"MORE * 10\"\n\n[constraints]\nsmall = \"TILE <= 32\"\n";
    std::fs::write(root.join("gemm2/toy2.toml"), derived).unwrap();
    let f = Family::load_file(&root.join("gemm2/toy2.toml"), &root).unwrap();
    let knobs: Vec<(&str, usize)> = f
        .knobs
        .iter()
        .map(|k| (k.name.as_str(), k.values.len()))
        .collect();
    assert_eq!(
        knobs,
        [("TILE", 3), ("MODE", 1), ("UNROLL", 2), ("MORE", 2)]
    );
    let derived: Vec<(&str, &str)> = f
        .derived
        .iter()
        .map(|(n, e)| (n.as_str(), e.source()))
        .collect();
    assert_eq!(derived, [("THREADS", "TILE * 2"), ("EXTRA", "MORE * 10")]);
    let constraints: Vec<&str> = f.constraints.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(constraints, ["smem", "fancy_needs_big", "small"]);
    let space = f.space(vec![f.probe_context()]).unwrap();
    // MODE = fancy needs TILE >= 32 (the base's constraint), TILE <= 32 (this file's).
    let valid: Vec<String> = space.iter_valid().map(|g| g.canonical()).collect();
    assert_eq!(valid.len(), 4, "{valid:?}");
    assert!(valid.iter().all(|g| g.contains("TILE=32")), "{valid:?}");
    let g = Genome::parse("TILE=32,MODE=fancy,UNROLL=true,MORE=2").unwrap();
    assert!(f
        .render(&space, &g, 0)
        .unwrap()
        .contains("constexpr int EXTRA = 20;"));
}

/// A launch's own `require_sass` replaces the family's for its kernel in the static rules
/// the family hands the gate; kernels without one keep the family's.
#[test]
fn launches_may_replace_the_familys_required_opcodes() {
    let toml = multi_toml(r#"["a", "a2"]"#, r#"["a2", "b", "c"]"#, SCRATCH)
        .replace(
            "min_arch = 80\n",
            "min_arch = 80\nrequire_sass = [\"HMMA\"]\n",
        )
        .replace(
            "block = [\"256\"]\n",
            "block = [\"256\"]\nrequire_sass = []\n",
        );
    let f = load(&toml, GOOD_TEMPLATE).unwrap();
    assert_eq!(f.launch_require_sass, [Some(Vec::new()), None]);
    let config = evo_core::config::StaticConfig {
        require_sass: vec!["IMMA".into()],
        ..Default::default()
    };
    let rules = f.static_rules(config);
    assert_eq!(rules.sass_required_of("scale"), ["IMMA"]);
    assert_eq!(rules.sass_required_of("gemm"), ["IMMA", "HMMA"]);
    // Without per-launch lists, every kernel gets the family's.
    let plain = load(&toml.replace("require_sass = []\n", ""), GOOD_TEMPLATE).unwrap();
    let rules = plain.static_rules(Default::default());
    assert_eq!(rules.sass_required_of("scale"), ["HMMA"]);
    assert!(rules.kernel_require_sass.is_empty());
}

/// `tmap:NAME:DIMS:BOX:SWIZZLE` in a launch's `args` becomes a tensor-map slot over the
/// input with contiguous byte strides and the input's element type; malformed ones are
/// refused at load time.
#[test]
fn tensor_map_arguments() {
    use evo_kernels::harness::{ArgSlot, MappedBuffer, TensorMapSlot};
    let toml = declared_contiguous(&multi_toml(
        r#"["a", "a2"]"#,
        r#"["a2", "b", "c", "@abi", "tmap:b:K;N:64;TILE:128"]"#,
        SCRATCH,
    ));
    let (_dir, root) = tree(&toml, GOOD_TEMPLATE);
    let f = Family::load(&root, "gemm", "toy").unwrap();
    let space = f.space(vec![f.probe_context()]).unwrap();
    let g = Genome::parse("TILE=32,MODE=fancy,UNROLL=true").unwrap();
    let vars = space.vars(&g, 0).unwrap();
    let problem = evo_kernels::problem("gemm").unwrap();
    let shape = toy_gemm_shape();
    let elem = problem.inputs(&shape)[1].elem;
    let args = f.launch_args(&vars, &shape).unwrap();
    assert_eq!(
        *args[1].last().unwrap(),
        ArgSlot::TensorMap(TensorMapSlot {
            buffer: 1,
            of: MappedBuffer::Input,
            elem,
            rank: 2,
            dims: [64, 65, 1, 1, 1],
            strides_bytes: [64 * elem.size() as u64, 0, 0, 0],
            box_dims: [64, 32, 1, 1, 1],
            swizzle_bytes: 128,
            stride_abi: [None; 4],
        })
    );
    for (bad, needle) in [
        (
            "tmap:bb:K;N:64;TILE:128",
            r#"`bb` is neither an input ["a", "b"] nor a [[scratch]] buffer ["a2"]"#,
        ),
        ("tmap:b:K;N:64:128", "1 to 5 of each"),
        ("tmap:b:K;N:64;TILE:48", "swizzle `48`"),
        ("tmap:b:K;N:64;TILE", "write tmap:NAME"),
        ("tmap:b:K;NN:64;TILE:128", "NN"),
        ("tmap:b:K;N:64;TILE:SWIZ", "SWIZ"),
    ] {
        let toml = declared_contiguous(&multi_toml(
            r#"["a", "a2"]"#,
            &format!(r#"["a2", "b", "c", "@abi", "{bad}"]"#),
            SCRATCH,
        ));
        let e = load(&toml, GOOD_TEMPLATE).unwrap_err();
        assert!(e.contains(needle), "{bad}: {e}");
    }
    // The swizzle may be an expression of the genome (a swizzle-width knob): resolved per
    // genome, and refused when it resolves to no swizzle span.
    let swizzle_of = |expr: &str, tile: i64| -> Result<u32, String> {
        let toml = declared_contiguous(&multi_toml(
            r#"["a", "a2"]"#,
            &format!(r#"["a2", "b", "c", "@abi", "tmap:b:K;N:TILE;TILE:{expr}"]"#),
            SCRATCH,
        ));
        let (_dir, root) = tree(&toml, GOOD_TEMPLATE);
        let f = Family::load(&root, "gemm", "toy").unwrap();
        let space = f.space(vec![f.probe_context()]).unwrap();
        let g = Genome::parse(&format!("TILE={tile},MODE=fancy,UNROLL=true")).unwrap();
        let args = f.launch_args(&space.vars(&g, 0).unwrap(), &shape)?;
        match args[1].last().unwrap() {
            ArgSlot::TensorMap(m) => Ok(m.swizzle_bytes),
            other => panic!("{other:?}"),
        }
    };
    for (tile, want) in [(16, 32), (32, 64), (64, 128)] {
        assert_eq!(swizzle_of("TILE * 2", tile).unwrap(), want, "TILE={tile}");
    }
    let e = swizzle_of("TILE * 3", 32).unwrap_err();
    assert!(e.to_string().contains("swizzle `96`"), "{e}");
}

/// `tmap:NAME:DIMS:BOX:SWIZZLE:STRIDES`: the map takes each stride from the named ABI
/// argument of the call (bound by `bind_abi`, in bytes), needs no `contiguous` declaration
/// (the gate then varies the input's layout), and names only integer ABI parameters.
#[test]
fn tensor_maps_with_the_calls_strides() {
    use evo_kernels::harness::{ArgSlot, TensorMapSlot};
    let toml = multi_toml(
        r#"["a", "a2"]"#,
        r#"["a2", "b", "c", "@abi", "tmap:b:K;N:64;TILE:128:ldb"]"#,
        SCRATCH,
    );
    let (_dir, root) = tree(&toml, GOOD_TEMPLATE);
    let f = Family::load(&root, "gemm", "toy").unwrap();
    assert!(f.contiguous.is_empty());
    let space = f.space(vec![f.probe_context()]).unwrap();
    let g = Genome::parse("TILE=32,MODE=fancy,UNROLL=true").unwrap();
    let vars = space.vars(&g, 0).unwrap();
    let problem = evo_kernels::problem("gemm").unwrap();
    let shape = toy_gemm_shape();
    let elem = problem.inputs(&shape)[1].elem;
    let args = f.launch_args(&vars, &shape).unwrap();
    let ArgSlot::TensorMap(map) = *args[1].last().unwrap() else {
        panic!("{:?}", args[1]);
    };
    // ldb is the gemm ABI's argument 7; unbound until a call's arguments come.
    assert_eq!(map.stride_abi, [Some(7), None, None, None]);
    assert!(!map.is_bound());
    let mut call_abi = problem.args(&shape);
    call_abi[7] = ArgSlot::I32(72);
    let bound = evo_kernels::bind_abi(&args[1], &call_abi).unwrap();
    assert_eq!(
        *bound.last().unwrap(),
        ArgSlot::TensorMap(TensorMapSlot {
            strides_bytes: [72 * elem.size() as u64, 0, 0, 0],
            stride_abi: [None; 4],
            ..map
        })
    );
    // A negative stride is refused, not wrapped.
    call_abi[7] = ArgSlot::I32(-8);
    let e = evo_kernels::bind_abi(&args[1], &call_abi).unwrap_err();
    assert!(e.contains("-8 elements"), "{e}");
    for (bad, needle) in [
        (
            "tmap:b:K;N:64;TILE:128:ldq",
            "stride `ldq` is not a parameter",
        ),
        (
            "tmap:b:K;N:64;TILE:128:b",
            "stride `b` is a const T* parameter",
        ),
        (
            "tmap:b:K;N:64;TILE:128:ldb;lda",
            "2 strides for 2 dimensions",
        ),
        ("tmap:b:K;N:64;TILE:128:ldb:x", "write tmap:NAME"),
    ] {
        let toml = multi_toml(
            r#"["a", "a2"]"#,
            &format!(r#"["a2", "b", "c", "@abi", "{bad}"]"#),
            SCRATCH,
        );
        let e = load(&toml, GOOD_TEMPLATE).unwrap_err();
        assert!(e.contains(needle), "{bad}: {e}");
    }
    // Without strides, a map over an undeclared input is still refused.
    let e = load(
        &multi_toml(
            r#"["a", "a2"]"#,
            r#"["a2", "b", "c", "@abi", "tmap:b:K;N:64;TILE:128"]"#,
            SCRATCH,
        ),
        GOOD_TEMPLATE,
    )
    .unwrap_err();
    assert!(e.contains("give the map the call's strides"), "{e}");
}

/// `tmap:NAME:...` over a `[[scratch]]` buffer: a slot over that scratch buffer with its
/// declared element type (DTYPE: the specialization's), contiguous strides; the map counts
/// as passing the buffer, and needs no `contiguous` declaration (scratch is contiguous).
#[test]
fn tensor_maps_over_scratch_buffers() {
    use evo_kernels::harness::{ArgSlot, ElemType, MappedBuffer, TensorMapSlot};
    let scratch = format!(
        "{SCRATCH}
[[scratch]]
name = \"b8\"
elem = \"u8\"
len = \"K * N\"

[[scratch]]
name = \"bt\"
elem = \"DTYPE\"
len = \"K * N\"
"
    );
    let toml = multi_toml(
        r#"["a", "a2"]"#,
        r#"["a2", "b", "c", "@abi", "tmap:b8:K;N:64;TILE:64", "tmap:bt:N;K:16;16:32"]"#,
        &scratch,
    );
    let (_dir, root) = tree(&toml, GOOD_TEMPLATE);
    let f = Family::load(&root, "gemm", "toy").unwrap();
    assert!(f.contiguous.is_empty());
    let space = f.space(vec![f.probe_context()]).unwrap();
    let g = Genome::parse("TILE=32,MODE=fancy,UNROLL=true").unwrap();
    let vars = space.vars(&g, 0).unwrap();
    let shape = toy_gemm_shape();
    let dtype = evo_kernels::harness::dtype(&shape);
    let args = f.launch_args(&vars, &shape).unwrap();
    let n = args[1].len();
    assert_eq!(
        args[1][n - 2..],
        [
            ArgSlot::TensorMap(TensorMapSlot {
                buffer: 1,
                of: MappedBuffer::Scratch,
                elem: ElemType::U8,
                rank: 2,
                dims: [64, 65, 1, 1, 1],
                strides_bytes: [64, 0, 0, 0],
                box_dims: [64, 32, 1, 1, 1],
                swizzle_bytes: 64,
                stride_abi: [None; 4],
            }),
            ArgSlot::TensorMap(TensorMapSlot {
                buffer: 2,
                of: MappedBuffer::Scratch,
                elem: dtype,
                rank: 2,
                dims: [65, 64, 1, 1, 1],
                strides_bytes: [65 * dtype.size() as u64, 0, 0, 0],
                box_dims: [16, 16, 1, 1, 1],
                swizzle_bytes: 32,
                stride_abi: [None; 4],
            }),
        ]
    );
    // A scratch buffer no launch passes, by name or through a map, is still refused.
    let unused = multi_toml(
        r#"["a", "a2"]"#,
        r#"["a2", "b", "c", "@abi", "tmap:b8:K;N:64;TILE:64"]"#,
        &scratch,
    );
    assert_err(
        load(&unused, GOOD_TEMPLATE),
        &["scratch `bt` is declared but no [[launch]] passes it"],
    );
}

/// The gemm shape (M 100, N 65, K 64) the launch-argument tests resolve against.
fn toy_gemm_shape() -> evo_core::Vars {
    evo_kernels::problem("gemm")
        .unwrap()
        .complete_shape(
            &[("M", 100), ("N", 65), ("K", 64)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.into()))
                .collect(),
        )
        .unwrap()
}

/// The toy family with input `b` declared contiguous (top-level key, before any table).
fn declared_contiguous(toml: &str) -> String {
    format!("contiguous = [\"b\"]\n{toml}")
}

/// `contiguous` names problem tensors the kernels need contiguous; a tensor map over an
/// input that is not declared is refused (it would silently assume a layout).
#[test]
fn layout_declarations() {
    let tmap = r#"["a2", "b", "c", "@abi", "tmap:b:K;N:64;TILE:128"]"#;
    let toml = multi_toml(r#"["a", "a2"]"#, tmap, SCRATCH);
    assert_err(
        load(&toml, GOOD_TEMPLATE),
        &["input `b` as a contiguous tensor", "contiguous = [\"b\""],
    );
    let f = load(&declared_contiguous(&toml), GOOD_TEMPLATE).unwrap();
    assert_eq!(f.contiguous, vec!["b".to_string()]);
    // The output may be declared too; unknown and repeated names are refused with the line.
    let f = load(&format!("contiguous = [\"c\"]\n{GOOD_TOML}"), GOOD_TEMPLATE).unwrap();
    assert_eq!(f.contiguous, vec!["c".to_string()]);
    for (decl, needle) in [
        (
            r#"contiguous = ["q"]"#,
            "`q` is not a tensor of problem `gemm`",
        ),
        (r#"contiguous = ["b", "b"]"#, "`b` is named twice"),
    ] {
        let e = load(&format!("{decl}\n{GOOD_TOML}"), GOOD_TEMPLATE).unwrap_err();
        assert!(e.contains(needle) && e.contains(":1"), "{decl}: {e}");
    }
    // Families without tensor maps need no declaration.
    assert!(load(GOOD_TOML, GOOD_TEMPLATE)
        .unwrap()
        .contiguous
        .is_empty());
}

/// GOOD_TOML with an `[ordinal]` table holding `entries` (its first entry on line 20).
fn with_ordinal(entries: &str) -> String {
    GOOD_TOML.replace("[launch]", &format!("[ordinal]\n{entries}\n\n[launch]"))
}

#[test]
fn ordinal_knobs_reach_the_space() {
    let (_dir, root) = tree(&with_ordinal("TILE = true\nMODE = false"), GOOD_TEMPLATE);
    let f = Family::load(&root, "gemm", "toy").unwrap();
    assert_eq!(f.ordinal.iter().collect::<Vec<_>>(), ["TILE"]);
    let space = f.space(vec![f.probe_context()]).unwrap();
    assert!(space.is_ordinal("TILE"));
    assert!(!space.is_ordinal("MODE") && !space.is_ordinal("UNROLL"));
    // Without the table every knob is categorical.
    let plain = load(GOOD_TOML, GOOD_TEMPLATE).unwrap();
    assert!(plain.ordinal.is_empty());
}

#[test]
fn ordinal_mistakes_name_the_line() {
    assert_err(
        load(&with_ordinal("TILE = true\nTILES = true"), GOOD_TEMPLATE),
        &[
            "toy.toml:21",
            "`TILES`, which is not a knob",
            "did you mean `TILE`",
        ],
    );
    assert_err(
        load(&with_ordinal("TILE = 1"), GOOD_TEMPLATE),
        &["toy.toml:20", "must be true or false, not integer"],
    );
    let shuffled = with_ordinal("TILE = true").replace("[16, 32, 64]", "[16, 64, 32]");
    assert_err(
        load(&shuffled, GOOD_TEMPLATE),
        &["toy.toml:20", "[16, 64, 32] are not in order"],
    );
    // Descending is an order too.
    let descending = with_ordinal("TILE = true").replace("[16, 32, 64]", "[64, 32, 16]");
    assert!(load(&descending, GOOD_TEMPLATE)
        .unwrap()
        .ordinal
        .contains("TILE"));
}

#[test]
fn a_derived_family_merges_and_undoes_ordinal_entries() {
    let (_dir, root) = tree(&with_ordinal("TILE = true\nMODE = true"), GOOD_TEMPLATE);
    std::fs::write(
        root.join("gemm/toy2.toml"),
        "base = \"toy.toml\"\nname = \"toy2\"\n[ordinal]\nMODE = false\n",
    )
    .unwrap();
    let f = Family::load(&root, "gemm", "toy2").unwrap();
    assert_eq!(f.ordinal.iter().collect::<Vec<_>>(), ["TILE"]);
}

/// GOOD_TOML with a `[defaults]` table holding `entries` (its first entry on line 20).
fn with_defaults(entries: &str) -> String {
    GOOD_TOML.replace("[launch]", &format!("[defaults]\n{entries}\n\n[launch]"))
}

#[test]
fn defaults_complete_genomes_that_lack_a_knob() {
    let (_dir, root) = tree(&with_defaults("MODE = \"plain\""), GOOD_TEMPLATE);
    let f = Family::load(&root, "gemm", "toy").unwrap();
    let space = f.space(vec![f.probe_context()]).unwrap();
    let old = Genome::parse("TILE=32,UNROLL=true").unwrap();
    let full = Genome::parse("TILE=32,MODE=plain,UNROLL=true").unwrap();
    assert_eq!(space.complete(&old).unwrap(), full);
    // The same source, header included: the completed genome is the genome.
    assert_eq!(
        f.render(&space, &old, 0).unwrap(),
        f.render(&space, &full, 0).unwrap()
    );
    // A knob without a default is still missing.
    let no_tile = Genome::parse("MODE=plain,UNROLL=true").unwrap();
    let err = space.complete(&no_tile).unwrap_err().to_string();
    assert!(err.contains("lacks knob(s) [\"TILE\"]"), "{err}");
    // Without the table, MODE is missing too.
    let plain = load(GOOD_TOML, GOOD_TEMPLATE).unwrap();
    let space = plain.space(vec![plain.probe_context()]).unwrap();
    let err = space.complete(&old).unwrap_err().to_string();
    assert!(err.contains("lacks knob(s) [\"MODE\"]"), "{err}");
    // A derived family inherits the default.
    std::fs::write(
        root.join("gemm/toy2.toml"),
        "base = \"toy.toml\"\nname = \"toy2\"\n",
    )
    .unwrap();
    let f2 = Family::load(&root, "gemm", "toy2").unwrap();
    assert_eq!(f2.defaults, f.defaults);
}

#[test]
fn default_mistakes_name_the_file_line_and_knob() {
    assert_err(
        load(&with_defaults("MODE = \"diagonal\""), GOOD_TEMPLATE),
        &[
            "toy.toml:20",
            "[defaults] MODE = \"diagonal\" is not one of knob `MODE`'s values [plain, fancy]",
        ],
    );
    assert_err(
        load(&with_defaults("TILE = 48"), GOOD_TEMPLATE),
        &["toy.toml:20", "knob `TILE`'s values [16, 32, 64]"],
    );
    assert_err(
        load(&with_defaults("TILE = \"32\""), GOOD_TEMPLATE),
        &["toy.toml:20", "[defaults] TILE"],
    );
    assert_err(
        load(&with_defaults("MODES = \"plain\""), GOOD_TEMPLATE),
        &[
            "toy.toml:20",
            "`MODES`, which is not a knob",
            "did you mean `MODE`",
        ],
    );
}
