//! The problems' host-side harness: argument lists match the tensors, generators are
//! seeded and adversarial kinds are what they claim, CPU references compute the math.

use evo_core::{Value, Vars};
use evo_kernels::harness::{ArgSlot, InputKind};
use evo_kernels::problem;

fn vars(pairs: &[(&str, Value)]) -> Vars {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn gemm_shape(m: i64, n: i64, k: i64) -> Vars {
    vars(&[
        ("M", m.into()),
        ("N", n.into()),
        ("K", k.into()),
        ("DTYPE", "f16".into()),
    ])
}

fn sdpa_shape(sq: i64, skv: i64, causal: bool) -> Vars {
    vars(&[
        ("BATCH", 2.into()),
        ("HEADS", 3.into()),
        ("SEQ_Q", sq.into()),
        ("SEQ_KV", skv.into()),
        ("HEAD_DIM", 64.into()),
        ("CAUSAL", causal.into()),
        ("DTYPE", "f16".into()),
    ])
}

#[test]
fn args_reference_every_tensor() {
    for (name, shape) in [
        ("gemm", gemm_shape(5, 7, 16)),
        ("sdpa_fwd", sdpa_shape(9, 11, false)),
    ] {
        let p = problem(name).unwrap();
        let args = p.args(&shape);
        let n_inputs = p.inputs(&shape).len();
        for i in 0..n_inputs {
            assert!(
                args.contains(&ArgSlot::Input(i)),
                "{name}: input {i} not passed"
            );
        }
        assert_eq!(args.iter().filter(|a| **a == ArgSlot::Output).count(), 1);
        let generated = p.generate(&shape, InputKind::Random, 1);
        assert_eq!(generated.len(), n_inputs);
        for (g, spec) in generated.iter().zip(p.inputs(&shape)) {
            assert_eq!(g.len(), spec.len);
            assert_eq!(g.elem, spec.elem);
        }
    }
}

#[test]
fn input_kinds_are_what_they_say() {
    let p = problem("gemm").unwrap();
    let s = gemm_shape(6, 5, 16);
    let zeros = p.generate(&s, InputKind::Zeros, 3);
    assert!(zeros.iter().all(|t| t.to_f64().iter().all(|x| *x == 0.0)));
    let one_hot = p.generate(&s, InputKind::OneHot, 3);
    for row in one_hot[0].to_f64().chunks(16) {
        assert_eq!(row.iter().filter(|x| **x == 1.0).count(), 1);
        assert_eq!(row.iter().filter(|x| **x == 0.0).count(), 15);
    }
    let large = p.generate(&s, InputKind::Large, 3);
    let max = large[0].to_f64().iter().fold(0f64, |m, x| m.max(x.abs()));
    assert!(max > 30.0, "large inputs are only {max}");
    // Large outputs stay finite in fp16.
    let c = p.cpu_reference(&s, &large);
    assert!(c.iter().all(|x| x.abs() < 65504.0));
    // Fresh seeds give fresh inputs.
    assert_ne!(
        p.generate(&s, InputKind::Random, 1),
        p.generate(&s, InputKind::Random, 2)
    );
    assert_eq!(
        p.generate(&s, InputKind::Random, 1),
        p.generate(&s, InputKind::Random, 1)
    );
}

#[test]
fn gemm_cpu_reference() {
    let p = problem("gemm").unwrap();
    let s = gemm_shape(3, 2, 8);
    let inputs = p.generate(&s, InputKind::Random, 9);
    let (a, b) = (inputs[0].to_f64(), inputs[1].to_f64());
    let c = p.cpu_reference(&s, &inputs);
    let want: f64 = (0..8).map(|l| a[2 * 8 + l] * b[8 + l]).sum();
    assert_eq!(c[2 * 2 + 1], want);
    let r = p.reference(&s).unwrap();
    assert_eq!(r.entry, "gemm_reference_f16");
    assert_eq!(r.launch.grid, [1, 1, 1]);
}

#[test]
fn sdpa_cpu_reference() {
    let p = problem("sdpa_fwd").unwrap();
    // Zero queries: uniform attention, output = mean of the visible value rows.
    for causal in [false, true] {
        let s = sdpa_shape(4, 6, causal);
        let mut inputs = p.generate(&s, InputKind::Random, 5);
        inputs[0] = p.generate(&s, InputKind::Zeros, 5).remove(0);
        let o = p.cpu_reference(&s, &inputs);
        let v = inputs[2].to_f64();
        for i in 0..4 {
            let visible = if causal { i + 1 } else { 6 };
            for x in [0, 63] {
                let mean: f64 = (0..visible).map(|j| v[j * 64 + x]).sum::<f64>() / visible as f64;
                assert!(
                    (o[i * 64 + x] - mean).abs() < 1e-12,
                    "causal={causal} row {i}"
                );
            }
        }
    }
    // Huge logits stay finite.
    let s = sdpa_shape(5, 5, false);
    let o = p.cpu_reference(&s, &p.generate(&s, InputKind::Large, 1));
    assert!(o.iter().all(|x| x.is_finite()));
    // Edge shapes cover length 1 and ragged lengths for every specialization.
    let edges = p.edge_shapes(&[sdpa_shape(512, 512, false), sdpa_shape(512, 512, true)]);
    assert!(edges
        .iter()
        .any(|e| e["SEQ_Q"] == Value::Int(1) && e["CAUSAL"] == Value::Bool(true)));
    assert!(edges
        .iter()
        .any(|e| e["SEQ_Q"] == Value::Int(77) && e["CAUSAL"] == Value::Bool(false)));
}
