//! The problems' host-side harness: argument lists match the tensors, generators are
//! seeded and adversarial kinds are what they claim, CPU references compute the math.

use evo_core::{Value, Vars};
use evo_kernels::harness::{ArgSlot, ElemType, HostTensor, InputKind, Layout};
use evo_kernels::{problem, Problem};

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
        let generated = p.generate(&shape, &p.default_call(&shape), InputKind::Random, 1);
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
    let call = p.default_call(&s);
    let zeros = p.generate(&s, &call, InputKind::Zeros, 3);
    assert!(zeros.iter().all(|t| t.to_f64().iter().all(|x| *x == 0.0)));
    let one_hot = p.generate(&s, &call, InputKind::OneHot, 3);
    for row in one_hot[0].to_f64().chunks(16) {
        assert_eq!(row.iter().filter(|x| **x == 1.0).count(), 1);
        assert_eq!(row.iter().filter(|x| **x == 0.0).count(), 15);
    }
    let large = p.generate(&s, &call, InputKind::Large, 3);
    let max = large[0].to_f64().iter().fold(0f64, |m, x| m.max(x.abs()));
    assert!(max > 30.0, "large inputs are only {max}");
    // Large outputs stay finite in fp16.
    let c = p.cpu_reference(&s, &call, &large);
    assert!(c.iter().all(|x| x.abs() < 65504.0));
    // Fresh seeds give fresh inputs.
    assert_ne!(
        p.generate(&s, &call, InputKind::Random, 1),
        p.generate(&s, &call, InputKind::Random, 2)
    );
    assert_eq!(
        p.generate(&s, &call, InputKind::Random, 1),
        p.generate(&s, &call, InputKind::Random, 1)
    );
}

#[test]
fn gemm_cpu_reference() {
    let p = problem("gemm").unwrap();
    let s = gemm_shape(3, 2, 8);
    let call = p.default_call(&s);
    let inputs = p.generate(&s, &call, InputKind::Random, 9);
    let (a, b) = (inputs[0].to_f64(), inputs[1].to_f64());
    let c = p.cpu_reference(&s, &call, &inputs);
    let want: f64 = (0..8).map(|l| a[2 * 8 + l] * b[8 + l]).sum();
    assert_eq!(c[2 * 2 + 1], want);
    let r = p.reference(&s, &call).unwrap();
    assert_eq!(r.entry, "gemm_reference_f16");
    assert_eq!(r.launch.grid, [1, 1, 1]);
}

#[test]
fn sdpa_cpu_reference() {
    let p = problem("sdpa_fwd").unwrap();
    // Zero queries: uniform attention, output = mean of the visible value rows.
    for causal in [false, true] {
        let s = sdpa_shape(4, 6, causal);
        let call = p.default_call(&s);
        let mut inputs = p.generate(&s, &call, InputKind::Random, 5);
        inputs[0] = p.generate(&s, &call, InputKind::Zeros, 5).remove(0);
        let o = p.cpu_reference(&s, &call, &inputs);
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
    let call = p.default_call(&s);
    let o = p.cpu_reference(&s, &call, &p.generate(&s, &call, InputKind::Large, 1));
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

fn complete(p: &dyn Problem, s: &Vars) -> Vars {
    p.complete_shape(s).unwrap()
}

/// Varied calls stay inside each ABI: last dimension contiguous, strides multiples of 16
/// bytes, elements apart and inside the buffer, a positive scale; declared tensors stay
/// contiguous; and over a few seeds every tensor sees contiguous, model (b, s, h, d) and
/// padded layouts of its own, and the scale really varies.
#[test]
fn varied_calls_cover_the_abi_and_only_the_abi() {
    for (name, align) in [("sdpa_fwd", 8usize), ("sdpa_fwd_fp8", 16), ("gemm", 8)] {
        let p = problem(name).unwrap();
        let shape = if name == "gemm" {
            complete(p, &gemm_shape(33, 17, 24))
        } else {
            complete(p, &sdpa_shape(77, 130, true))
        };
        let default = p.default_call(&shape);
        let n = default.layouts.len();
        assert_eq!(n, p.inputs(&shape).len() + 1, "{name}");
        assert!(default.layouts.iter().all(Layout::is_contiguous), "{name}");
        let mut seen_padded = vec![false; n];
        let mut seen_model = vec![false; n];
        let mut scales = Vec::new();
        let mut o_differs_from_q = false;
        for seed in 0..64u64 {
            let c = p.varied_call(&shape, seed, &[]);
            assert_eq!(c.layouts.len(), n);
            for (i, (l, d)) in c.layouts.iter().zip(&default.layouts).enumerate() {
                assert_eq!(l.dims, d.dims, "{name}: tensor {i} changed its dimensions");
                // The constructor's checks: apart and inside the buffer.
                Layout::new(l.dims.clone(), l.strides.clone(), l.len).unwrap();
                if l.dims.len() > 1 {
                    assert_eq!(*l.strides.last().unwrap(), 1, "{name}: last dim strided");
                    let row = l.dims[l.dims.len() - 1];
                    assert!(
                        l.strides
                            .iter()
                            .all(|s| *s == 1 || *s == row || s % align == 0),
                        "{name} {l:?}"
                    );
                }
                seen_padded[i] |= l.len > l.elements();
                // (batch, seq, heads, dim): the head stride is the row length.
                seen_model[i] |= l.dims.len() == 4 && l.strides[1] == l.dims[3];
            }
            if name != "gemm" {
                o_differs_from_q |= c.layouts[0].strides != c.output().strides;
                let s = c.scalars[0];
                assert!(s > 0.0 && s.is_finite(), "{name}: scale {s}");
                scales.push(s);
                // The arguments carry the call's strides and scale.
                let args = p.call_args(&shape, &c);
                assert!(args.contains(&ArgSlot::F32(s)));
                let q_seq = ArgSlot::I64(c.layouts[0].strides[2] as i64);
                assert!(args.contains(&q_seq), "{name}: q's seq stride not passed");
            }
            // Declared tensors stay in the default layout.
            let fixed = vec![true; n];
            assert_eq!(p.varied_call(&shape, seed, &fixed).layouts, default.layouts);
        }
        for i in 0..n {
            let descale = name == "sdpa_fwd_fp8" && (3..6).contains(&i);
            if !descale {
                assert!(seen_padded[i], "{name}: tensor {i} never padded");
                if name != "gemm" {
                    assert!(seen_model[i], "{name}: tensor {i} never in (b, s, h, d)");
                }
            }
        }
        if name != "gemm" {
            assert!(o_differs_from_q, "{name}: o always has q's strides");
            let (lo, hi) = scales
                .iter()
                .fold((f32::MAX, 0f32), |(a, b), s| (a.min(*s), b.max(*s)));
            assert!(hi / lo > 10.0, "{name}: scales {lo}..{hi}");
        }
    }
}

/// A layout's buffer holds the logical tensor where the strides say, poison elsewhere;
/// gather undoes scatter; a write into the padding is found; overlapping or overflowing
/// strides are refused.
#[test]
fn layouts_scatter_gather_and_guard_their_padding() {
    let dims = vec![2, 3, 5, 8];
    let logical = HostTensor::from_f32(
        ElemType::F16,
        &(0..240).map(|i| i as f32).collect::<Vec<_>>(),
    );
    let pad = ElemType::F16.nan_bytes();
    let contiguous = Layout::contiguous(&dims);
    assert_eq!(contiguous.strides, vec![120, 40, 8, 1]);
    // (b, s, h, d) with 8 elements after every row and 16 after every batch.
    let l = Layout::new(dims.clone(), vec![3 * 5 * 16 + 16, 16, 3 * 16, 1], 2 * 256).unwrap();
    let buf = l.scatter(&logical, &pad);
    assert_eq!(buf.len(), 512);
    // Element (1, 2, 4, 7) = 1*120 + 2*40 + 4*8 + 7 = 239 lives at 256 + 32 + 192 + 7.
    assert_eq!(buf.get(256 + 32 + 4 * 48 + 7), 239.0);
    assert!(buf.get(8).is_nan(), "padding after the first row");
    assert_eq!(l.gather(ElemType::F16, &buf.bytes), logical);
    assert_eq!(l.padding_changed(&buf.bytes, &pad), None);
    let mut hit = buf.bytes.clone();
    hit[2 * 9 + 1] = 0; // element slot 9: inside the first row's padding
    assert_eq!(l.padding_changed(&hit, &pad), Some(9));
    assert_eq!(
        contiguous.padding_changed(&hit, &pad),
        None,
        "no padding to check"
    );
    assert!(
        Layout::new(dims.clone(), vec![120, 40, 4, 1], 240).is_err(),
        "rows overlap"
    );
    assert!(
        Layout::new(dims, vec![120, 40, 8, 1], 239).is_err(),
        "past the buffer"
    );
}

/// The scale is the call's: another scale gives another answer.
#[test]
fn the_cpu_reference_uses_the_calls_scale() {
    let p = problem("sdpa_fwd").unwrap();
    let s = complete(p, &sdpa_shape(9, 11, true));
    let plain = p.default_call(&s);
    let inputs = p.generate(&s, &plain, InputKind::Random, 4);
    let mut other = plain.clone();
    other.scalars[0] *= 3.0;
    let a = p.cpu_reference(&s, &plain, &inputs);
    let b = p.cpu_reference(&s, &other, &inputs);
    let diff = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f64, f64::max);
    assert!(diff > 0.05, "scale ignored: {diff}");
}

/// `Rows` plants the adversarial rows and heads it promises among normal ones.
#[test]
fn adversarial_rows_are_planted() {
    let p = problem("sdpa_fwd").unwrap();
    let shape = vars(&[
        ("BATCH", 2.into()),
        ("HEADS", 4.into()),
        ("SEQ_Q", 40.into()),
        ("SEQ_KV", 40.into()),
        ("HEAD_DIM", 64.into()),
        ("DTYPE", "f16".into()),
    ]);
    let s = complete(p, &shape);
    let call = p.varied_call(&s, 3, &[]);
    let scale = call.scalars[0] as f64;
    let t = p.generate(&s, &call, InputKind::Rows, 9);
    let (q, k) = (t[0].to_f64(), t[1].to_f64());
    let hd = 64;
    let rows = |x: &[f64]| x.chunks(hd).map(|r| r.to_vec()).collect::<Vec<_>>();
    let (qr, kr) = (rows(&q), rows(&k));
    let zero_q = qr.iter().filter(|r| r.iter().all(|x| *x == 0.0)).count();
    assert!(
        zero_q > 0 && zero_q < qr.len() / 2,
        "{zero_q} zero query rows"
    );
    let mut zero_key_heads = 0;
    let mut identical_key_heads = 0;
    let mut very_negative_rows = 0;
    for bh in 0..8 {
        let keys = &kr[bh * 40..(bh + 1) * 40];
        if keys.iter().all(|r| r.iter().all(|x| *x == 0.0)) {
            zero_key_heads += 1;
        } else if keys.iter().all(|r| *r == keys[0]) {
            identical_key_heads += 1;
        }
        for qrow in &qr[bh * 40..(bh + 1) * 40] {
            let best = keys
                .iter()
                .map(|kk| scale * qrow.iter().zip(kk).map(|(a, b)| a * b).sum::<f64>())
                .fold(f64::NEG_INFINITY, f64::max);
            if best < -200.0 {
                very_negative_rows += 1;
            }
        }
    }
    assert!(zero_key_heads > 0, "no head of zero keys");
    assert!(identical_key_heads > 0, "no head of identical keys");
    assert!(
        very_negative_rows > 0,
        "no row whose scores are all below -200"
    );
    // Every row's answer stays finite.
    let o = p.cpu_reference(&s, &call, &t);
    assert!(o.iter().all(|x| x.is_finite()));
}
