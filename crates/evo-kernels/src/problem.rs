//! Problems: the fixed contract between evo and every family that implements it.

use evo_core::{Value, Vars};

use crate::harness::{
    dtype, ArgSlot, Call, ElemType, Encoded, EndToEnd, Fill, HostTensor, InputFill, InputKind,
    Layout, ReferenceKernel, TensorSpec, Tolerance,
};
pub use crate::problems::{Fp8Quantize, Gemm, Sdpa, SdpaFp8, SdpaFp8E2e};

/// What values a problem variable takes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum VarKind {
    /// An integer at least `min`, and a multiple of `multiple_of`.
    Int {
        min: i64,
        multiple_of: i64,
    },
    Bool,
    /// One of these strings.
    Choice(&'static [&'static str]),
    /// One of these integers.
    IntChoice(&'static [i64]),
}

impl VarKind {
    /// What a value of this kind is, in words (for messages).
    pub fn expected(self) -> String {
        let list = |items: Vec<String>| items.join(", ");
        match self {
            VarKind::Int { min, multiple_of } if multiple_of > 1 => {
                format!("an integer of at least {min}, a multiple of {multiple_of}")
            }
            VarKind::Int { min, .. } => format!("an integer of at least {min}"),
            VarKind::Bool => "true or false".into(),
            VarKind::Choice(options) => format!(
                "one of {}",
                list(options.iter().map(|o| format!("\"{o}\"")).collect())
            ),
            VarKind::IntChoice(options) => format!(
                "one of {}",
                list(options.iter().map(i64::to_string).collect())
            ),
        }
    }
}

/// A compile-time (specialization) or run-time (shape) variable of a problem.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VarDecl {
    pub name: &'static str,
    pub kind: VarKind,
    /// Value used when a config does not give one (`None`: required).
    pub default: Option<&'static str>,
    pub doc: &'static str,
}

/// The largest value of an integer shape variable: kernels take sizes as `int`.
pub const MAX_DIM: i64 = i32::MAX as i64;

/// The most bytes a shape's tensors may need together (1 TiB, past any GPU's memory): a
/// larger shape is refused when it is loaded, not when a worker fails to allocate it.
pub const MAX_SHAPE_BYTES: f64 = (1u64 << 40) as f64;

impl VarDecl {
    /// Checks one value against the declaration.
    pub fn check(&self, value: &Value) -> Result<(), String> {
        match (self.kind, value) {
            (VarKind::Int { min, multiple_of }, Value::Int(i)) => {
                if *i < min {
                    Err(format!("{} = {i} must be at least {min}", self.name))
                } else if *i > MAX_DIM {
                    // Kernels take sizes as 32-bit ints; larger ones would wrap.
                    Err(format!(
                        "{} = {i} is larger than {MAX_DIM}, the largest size a kernel takes (a 32-bit int)",
                        self.name
                    ))
                } else if i % multiple_of != 0 {
                    Err(format!(
                        "{} = {i} must be a multiple of {multiple_of}",
                        self.name
                    ))
                } else {
                    Ok(())
                }
            }
            (VarKind::Bool, Value::Bool(_)) => Ok(()),
            (VarKind::IntChoice(options), Value::Int(i)) if options.contains(i) => Ok(()),
            (VarKind::IntChoice(options), _) => Err(format!(
                "{} = {value} must be one of {options:?}",
                self.name
            )),
            (VarKind::Choice(options), Value::Str(s)) if options.contains(&s.as_str()) => Ok(()),
            (VarKind::Choice(options), _) => Err(format!(
                "{} = {value} must be one of {options:?}",
                self.name
            )),
            (kind, _) => Err(format!(
                "{} = {} is {}; {} is expected",
                self.name,
                match value {
                    Value::Str(s) => format!("\"{s}\""),
                    other => other.to_string(),
                },
                match value {
                    Value::Bool(_) => "a boolean",
                    Value::Int(_) => "an integer",
                    Value::Str(_) => "a string",
                },
                kind.expected()
            )),
        }
    }

    /// The default value, typed.
    pub fn default_value(&self) -> Option<Value> {
        self.default.map(Value::parse_canonical)
    }

    /// A representative value, used to validate families without a config: the default
    /// or the first choice.
    pub fn probe_value(&self) -> Value {
        self.default_value().unwrap_or_else(|| match self.kind {
            VarKind::Int { min, multiple_of } => Value::Int(min.max(multiple_of)),
            VarKind::Bool => Value::Bool(false),
            VarKind::Choice(options) => Value::Str(options[0].to_string()),
            VarKind::IntChoice(options) => Value::Int(options[0]),
        })
    }
}

/// One parameter of a problem's kernel signature ([`Problem::abi`]), as [`abi_params`] reads it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AbiParam {
    pub name: String,
    /// C type as written in the signature (`const T*`, `int`, `long long`, `float`).
    pub ctype: String,
    /// `pointer`, `i32`, `i64` or `f32`: how a caller packs it.
    pub kind: String,
}

/// The parameters of an ABI text's first line-spanning signature
/// `extern "C" __global__ void NAME(TYPE name, ...)`.
pub fn abi_params(abi: &str) -> Result<Vec<AbiParam>, String> {
    let open = abi.find('(').ok_or("the ABI text has no `(`")?;
    let close = abi[open..]
        .find(')')
        .map(|i| open + i)
        .ok_or("the ABI text has no `)`")?;
    let mut params = Vec::new();
    for part in abi[open + 1..close].split(',') {
        let part = part.split_whitespace().collect::<Vec<_>>().join(" ");
        let split = part
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .ok_or_else(|| format!("cannot read parameter `{part}`"))?;
        let (ctype, name) = (
            part[..=split].trim().to_string(),
            part[split + 1..].to_string(),
        );
        if name.is_empty() || ctype.is_empty() {
            return Err(format!("cannot read parameter `{part}`"));
        }
        let kind = if ctype.ends_with('*') {
            "pointer"
        } else {
            match ctype.as_str() {
                "int" => "i32",
                "long long" | "int64_t" => "i64",
                "float" => "f32",
                other => {
                    return Err(format!(
                        "parameter `{name}` has type `{other}`, which the artifact cannot pack"
                    ))
                }
            }
        };
        params.push(AbiParam {
            name,
            ctype,
            kind: kind.into(),
        });
    }
    Ok(params)
}

/// A problem evo can search kernels for.
pub trait Problem: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;
    /// The `extern "C"` kernel symbol a single-kernel family defines.
    fn entry(&self) -> &'static str;
    /// The kernel signature and its meaning, for documentation and `evo check`.
    fn abi(&self) -> &'static str;
    /// Compile-time variables: each distinct assignment is compiled separately.
    fn spec_vars(&self) -> &'static [VarDecl];
    /// Run-time variables: the shape passed as kernel arguments.
    fn shape_vars(&self) -> &'static [VarDecl];
    /// A shape's run-time variables in [`Problem::shape_vars`]'s order, e.g.
    /// `M=77 N=130 K=264`: how tables and an artifact's README name a shape.
    fn shape_text(&self, shape: &Vars) -> String {
        self.shape_vars()
            .iter()
            .filter_map(|d| shape.get(d.name).map(|x| format!("{}={x}", d.name)))
            .collect::<Vec<_>>()
            .join(" ")
    }
    /// Floating-point operations of one call.
    fn flops(&self, shape: &Vars) -> f64;
    /// Fewest bytes one call must move through device memory.
    fn min_bytes(&self, shape: &Vars) -> f64;

    /// Input tensors of one call, in the order [`ArgSlot::Input`] indexes them (`len`: the
    /// number of elements, whatever the call's layout).
    fn inputs(&self, shape: &Vars) -> Vec<TensorSpec>;
    /// The output tensor (element type of the specialization).
    fn output(&self, shape: &Vars) -> TensorSpec;
    /// The plain call: every tensor contiguous, the default scalars. Problems whose ABI
    /// takes strides or float arguments give their tensors' dimensions and scalars here.
    fn default_call(&self, shape: &Vars) -> Call {
        let layouts = self
            .inputs(shape)
            .iter()
            .chain([&self.output(shape)])
            .map(|t| Layout::contiguous(&[t.len]))
            .collect();
        Call {
            layouts,
            scalars: Vec::new(),
        }
    }
    /// A call as a caller may make it, drawn from `seed`: each tensor's layout and each
    /// scalar within what the ABI allows. `contiguous[i]` (inputs, then the output) keeps
    /// tensor i in its default layout (a family that declares it needs that).
    fn varied_call(&self, shape: &Vars, seed: u64, contiguous: &[bool]) -> Call {
        let _ = (seed, contiguous);
        self.default_call(shape)
    }
    /// The candidate kernel's arguments for `call`, in ABI order.
    fn call_args(&self, shape: &Vars, call: &Call) -> Vec<ArgSlot>;
    /// The arguments of [`Problem::default_call`].
    fn args(&self, shape: &Vars) -> Vec<ArgSlot> {
        self.call_args(shape, &self.default_call(shape))
    }
    /// Named argument lists a multi-kernel family may splice into a launch's `args`
    /// (`"@name"`), as ranges of [`Problem::args`] (so an artifact can name each
    /// argument): always `abi` (all of it), plus what the problem offers (e.g. the
    /// scalars after the pointers).
    fn arg_lists(&self, shape: &Vars) -> Vec<(&'static str, std::ops::Range<usize>)> {
        vec![("abi", 0..self.args(shape).len())]
    }
    /// Seeded inputs of one kind for `call` (whose scalars some kinds aim for), one logical
    /// (row-major) tensor per [`Problem::inputs`] entry.
    fn generate(&self, shape: &Vars, call: &Call, kind: InputKind, seed: u64) -> Vec<HostTensor>;
    /// The same inputs as [`Problem::generate`], one [`InputFill`] per input, where every
    /// input of this kind is a function of its element index alone: the worker then writes
    /// them on the GPU in the call's layout and the host builds nothing. `None` (the
    /// default): the worker uploads `generate`'s tensors. An implementation must give what
    /// `generate` gives, bit for bit once encoded ([`crate::problems`]' tests check it).
    fn input_fills(
        &self,
        shape: &Vars,
        call: &Call,
        kind: InputKind,
        seed: u64,
    ) -> Option<Vec<InputFill>> {
        let _ = (shape, call, kind, seed);
        None
    }
    /// How the worker fills input `input` with fresh values on the GPU for every timing
    /// replay (no host copy: the reference is computed on the GPU).
    fn random_fill(&self, shape: &Vars, input: usize) -> Fill {
        let _ = (shape, input);
        Fill::Normal(1.0)
    }
    /// The GPU reference kernel for `call` (inputs in the call's layouts; float32 output,
    /// contiguous in logical order), or `None` if the problem has none yet.
    fn reference(&self, shape: &Vars, call: &Call) -> Option<ReferenceKernel>;
    /// The exact answer in float64, in logical order, from logical inputs (tests and
    /// self-test).
    fn cpu_reference(&self, shape: &Vars, call: &Call, inputs: &[HostTensor]) -> Vec<f64>;
    /// Error bounds for the specialization of `shape`.
    fn tolerance(&self, shape: &Vars) -> Tolerance;
    /// Correctness-only shapes derived from the configured ones: lengths that are not
    /// multiples of any tile, length 1, ... (same specializations as `shapes`).
    fn edge_shapes(&self, shapes: &[Vars]) -> Vec<Vars>;
    /// The element type of the problem's arithmetic, whose tensor-core peak bounds how
    /// fast a call can be (the timing gate's roofline floor).
    fn compute_elem(&self, shape: &Vars) -> ElemType {
        dtype(shape)
    }

    /// For problems whose inputs are a lossy encoding of original ones (FP8): the
    /// original inputs of the trial `(kind, seed)` (logical, contiguous), the GPU reference
    /// that computes the exact answer from them, and the bound on the end-to-end error.
    /// `None`: the inputs are the originals.
    fn end_to_end(
        &self,
        _shape: &Vars,
        _call: &Call,
        _kind: InputKind,
        _seed: u64,
    ) -> Option<EndToEnd> {
        None
    }

    /// For problems whose kernels encode the original inputs themselves (FP8 end to end):
    /// the trial's inputs as the encoding rule makes them, the reference on them and the
    /// tolerance a kernel on them is held to (see [`crate::harness::Encoded`]). `None`: no
    /// encoding inside the call.
    fn encoded(
        &self,
        _shape: &Vars,
        _call: &Call,
        _kind: InputKind,
        _seed: u64,
    ) -> Option<Encoded> {
        None
    }

    /// Fills defaults and checks every variable of a shape (spec and run-time part).
    fn complete_shape(&self, shape: &Vars) -> Result<Vars, String> {
        let decls: Vec<&VarDecl> = self.spec_vars().iter().chain(self.shape_vars()).collect();
        for name in shape.keys() {
            if !decls.iter().any(|d| d.name == name) {
                let known: Vec<&str> = decls.iter().map(|d| d.name).collect();
                return Err(format!(
                    "`{name}` is not a variable of problem `{}` (it has {known:?})",
                    self.name()
                ));
            }
        }
        let mut out = Vars::new();
        for d in decls {
            let v = match shape.get(d.name) {
                Some(v) => v.clone(),
                None => d.default_value().ok_or_else(|| {
                    format!("`{}` is missing ({}), and has no default", d.name, d.doc)
                })?,
            };
            d.check(&v)?;
            out.insert(d.name.to_string(), v);
        }
        let bytes = self.min_bytes(&out);
        if bytes.is_nan() || bytes > MAX_SHAPE_BYTES {
            return Err(format!(
                "the tensors of this shape need {:.3e} bytes, more than any GPU has (evo accepts up to 1 TiB)",
                bytes
            ));
        }
        Ok(out)
    }
}

/// Every problem evo knows.
pub fn problems() -> &'static [&'static dyn Problem] {
    &[&Gemm, &Sdpa, &SdpaFp8, &SdpaFp8E2e, &Fp8Quantize]
}

pub fn problem(name: &str) -> Option<&'static dyn Problem> {
    problems().iter().copied().find(|p| p.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problems::Sdpa;

    fn shape(pairs: &[(&str, Value)]) -> Vars {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    /// Where a problem says its inputs are fills (the worker then writes them on the GPU),
    /// they are exactly what `generate` gives, in every call and every kind; the problems
    /// that should have fills have them.
    #[test]
    fn input_fills_are_the_generated_inputs() {
        let shapes = [
            (
                "sdpa_fwd",
                shape(&[
                    ("BATCH", 2.into()),
                    ("HEADS", 3.into()),
                    ("SEQ_Q", 77.into()),
                    ("SEQ_KV", 50.into()),
                    ("HEAD_DIM", 64.into()),
                    ("DTYPE", "bf16".into()),
                ]),
            ),
            (
                "gemm",
                shape(&[("M", 33.into()), ("N", 17.into()), ("K", 24.into())]),
            ),
        ];
        let mut filled = 0;
        for (name, partial) in shapes {
            let p = problem(name).unwrap();
            let s = p.complete_shape(&partial).unwrap();
            for (kind, seed) in [InputKind::Random]
                .into_iter()
                .chain(InputKind::ADVERSARIAL)
                .zip(40..)
            {
                let call = p.varied_call(&s, seed, &[]);
                let generated = p.generate(&s, &call, kind, seed);
                let Some(fills) = p.input_fills(&s, &call, kind, seed) else {
                    continue;
                };
                filled += 1;
                assert_eq!(fills.len(), generated.len(), "{name} {kind:?}");
                for ((fill, host), spec) in fills.iter().zip(&generated).zip(p.inputs(&s)) {
                    let encoded = HostTensor::from_f32(spec.elem, &fill.values(spec.len));
                    assert_eq!(encoded, *host, "{name} {kind:?} input {}", spec.name);
                }
                // Another seed, other values (zeros aside).
                if !matches!(fills[0], InputFill::Zeros) {
                    let other = p.input_fills(&s, &call, kind, seed + 1).unwrap();
                    assert_ne!(other[0].values(64), fills[0].values(64), "{name} {kind:?}");
                }
            }
        }
        // sdpa: every kind; gemm: all but Large.
        assert_eq!(filled, 9);
    }

    #[test]
    fn gemm_shapes_are_completed_and_checked() {
        let p = problem("gemm").unwrap();
        let s = p
            .complete_shape(&shape(&[
                ("M", 3.into()),
                ("N", 5.into()),
                ("K", 16.into()),
            ]))
            .unwrap();
        assert_eq!(s["DTYPE"], Value::Str("f16".into()));
        assert_eq!(p.flops(&s), 2.0 * 3.0 * 5.0 * 16.0);
        assert_eq!(p.min_bytes(&s), 2.0 * (48.0 + 80.0 + 15.0));
        let e = p
            .complete_shape(&shape(&[
                ("M", 3.into()),
                ("N", 5.into()),
                ("K", 12.into()),
            ]))
            .unwrap_err();
        assert!(e.contains("multiple of 8"), "{e}");
        // Sizes that would wrap in a kernel's int, or need more memory than a GPU has.
        let e = p
            .complete_shape(&shape(&[
                ("M", 9_223_372_036_854_775_000i64.into()),
                ("N", 8.into()),
                ("K", 16.into()),
            ]))
            .unwrap_err();
        assert!(e.contains("larger than 2147483647"), "{e}");
        let e = p
            .complete_shape(&shape(&[
                ("M", (1i64 << 20).into()),
                ("N", (1i64 << 20).into()),
                ("K", 16.into()),
            ]))
            .unwrap_err();
        assert!(e.contains("more than any GPU has"), "{e}");
        let e = p.complete_shape(&shape(&[("M", 3.into())])).unwrap_err();
        assert!(e.contains("`N` is missing"), "{e}");
        let e = p
            .complete_shape(&shape(&[("M", 3.into()), ("Q", 1.into())]))
            .unwrap_err();
        assert!(e.contains("`Q` is not a variable"), "{e}");
        let e = p
            .complete_shape(&shape(&[
                ("M", 3.into()),
                ("N", 5.into()),
                ("K", 16.into()),
                ("DTYPE", "f32".into()),
            ]))
            .unwrap_err();
        assert!(e.contains("one of"), "{e}");
        // A size written as a string: said in words, the quotes kept.
        let e = p
            .complete_shape(&shape(&[
                ("M", "4096".into()),
                ("N", 5.into()),
                ("K", 16.into()),
            ]))
            .unwrap_err();
        assert!(
            e.contains(r#"M = "4096" is a string; an integer of at least 1 is expected"#),
            "{e}"
        );
    }

    #[test]
    fn sdpa_counts() {
        let p = problem("sdpa_fwd").unwrap();
        let s = p
            .complete_shape(&shape(&[
                ("BATCH", 2.into()),
                ("HEADS", 8.into()),
                ("SEQ_Q", 512.into()),
                ("SEQ_KV", 512.into()),
                ("HEAD_DIM", 64.into()),
            ]))
            .unwrap();
        assert_eq!(s["CAUSAL"], Value::Bool(false));
        assert_eq!(p.flops(&s), 4.0 * 2.0 * 8.0 * 512.0 * 512.0 * 64.0);
        assert_eq!(p.min_bytes(&s), 2.0 * 2.0 * 8.0 * 64.0 * 4.0 * 512.0);
        // Causal, square: S(S+1)/2 pairs; tall (SEQ_Q > SEQ_KV): extra rows see all keys.
        assert_eq!(Sdpa::visible_pairs(4, 4, true), 10.0);
        assert_eq!(Sdpa::visible_pairs(6, 4, true), 10.0 + 2.0 * 4.0);
        assert_eq!(Sdpa::visible_pairs(2, 5, true), 3.0);
        let bad = shape(&[
            ("BATCH", 1.into()),
            ("HEADS", 1.into()),
            ("SEQ_Q", 1.into()),
            ("SEQ_KV", 1.into()),
            ("HEAD_DIM", 96.into()),
        ]);
        assert!(p.complete_shape(&bad).unwrap_err().contains("[64, 128]"));
    }
}
