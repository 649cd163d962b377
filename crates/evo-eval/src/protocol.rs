//! The messages between the orchestrator and a GPU worker: one JSON object per line on
//! the worker's stdin (requests) and stdout (responses). All serde types of the
//! protocol live here.

use base64::Engine;
use evo_core::{LaunchDims, Vars};
use evo_gpu::device::DeviceInfo;
use evo_gpu::runtime::FunctionAttributes;
use evo_kernels::harness::{ArgSlot, InputKind, TensorSpec, Tolerance};
use serde::{Deserialize, Serialize};

use crate::{Gate, Status};

/// Orchestrator → worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    Evaluate(Box<Job>),
    Shutdown,
}

/// Worker → orchestrator.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    /// Sent once at start, when the worker holds a context on its GPU.
    Ready {
        pid: u32,
        device: Option<DeviceInfo>,
    },
    Result(Box<JobResult>),
}

/// One variant to check and time on every shape.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Job {
    pub id: u64,
    pub problem: String,
    /// What the variant is (a genome, a file), for messages.
    pub label: String,
    /// The CUBIN holding every kernel of the variant.
    pub cubin: Cubin,
    /// Kernel symbols, launched in this order for one call.
    pub kernels: Vec<String>,
    pub shapes: Vec<ShapeJob>,
    pub correctness: CorrectnessPlan,
    /// `None`: correctness only.
    pub timing: Option<TimingPlan>,
    /// The batch of genomes the job belongs to: the batch's jobs draw their inputs from the
    /// same seeds (`correctness.seeds`), so the worker keeps their references for the next
    /// job of the batch (`None`: nothing kept from one job to the next). Kernels never see it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_seed: Option<u64>,
    /// Tensors (by the problem's names) the variant needs contiguous (a family's
    /// `contiguous`, a hand-written kernel's `// evo-contiguous:`): the gate varies the
    /// layout of every other tensor only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contiguous: Vec<String>,
}

/// CUBIN bytes, base64 in JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct Cubin(pub Vec<u8>);

impl Serialize for Cubin {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Cubin {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(Cubin)
            .map_err(serde::de::Error::custom)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ShapeJob {
    /// Complete shape: specialization and run-time variables.
    pub vars: Vars,
    /// Launch geometry of each kernel, in [`Job::kernels`] order.
    pub launches: Vec<LaunchDims>,
    /// Time this shape (edge shapes are checked, not timed).
    pub timed: bool,
    /// Stop sampling once the genome is out of contention here ([`CandidateShape::contend_us`]).
    ///
    /// [`CandidateShape::contend_us`]: crate::pipeline::CandidateShape::contend_us
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contend_us: Option<f64>,
    /// Each kernel's own arguments, in [`Job::kernels`] order; empty: every kernel gets
    /// the problem's ABI ([`evo_kernels::Problem::args`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Vec<ArgSlot>>,
    /// Scratch buffers of the variant ([`ArgSlot::Scratch`] indexes them): allocated per
    /// call, NaN-poisoned before every checked call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scratch: Vec<TensorSpec>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CorrectnessPlan {
    /// Seeds of the random trials (fresh per variant; recorded in the result).
    pub seeds: Vec<u64>,
    pub adversarial: bool,
    pub repeat_check: bool,
    pub guard_bytes: usize,
    /// Error bounds per dtype name after config overrides (`None`: the problem's).
    pub tolerance: Vec<(String, Tolerance)>,
    /// Config override of the end-to-end bound (`[correctness.tolerance.end_to_end]`).
    #[serde(default)]
    pub end_to_end: Option<evo_core::config::ToleranceOverride>,
}

/// How the timing gate samples: the config's `[timing]` section as it is.
pub use evo_core::config::TimingConfig as TimingPlan;

/// Verdict on one variant.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct JobResult {
    pub id: u64,
    pub status: Status,
    /// The gate that failed, if any.
    pub gate: Option<Gate>,
    /// Why it failed (the check, the CUDA error, the shape), or a summary.
    pub detail: String,
    pub shapes: Vec<ShapeResult>,
    /// What the driver says about each kernel, with resident blocks per SM.
    pub kernels: Vec<KernelReport>,
    pub elapsed_ms: f64,
    /// Of `elapsed_ms`, the part spent in the correctness checks (inputs, references,
    /// launches, comparisons) and the part spent timing.
    #[serde(default)]
    pub check_ms: f64,
    #[serde(default)]
    pub timing_ms: f64,
    /// Where the worker's time went, by stage (ms): `inputs` (generated and laid out on
    /// the host), `upload`, `reference`, `launch`, `download`, `compare`, `alloc`, and for
    /// timing `replays` (the timed graphs), `fill`, `verify` (the checks of timed outputs).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub stages_ms: std::collections::BTreeMap<String, f64>,
}

impl JobResult {
    pub fn failed(
        id: u64,
        status: Status,
        gate: Option<Gate>,
        detail: impl Into<String>,
    ) -> JobResult {
        JobResult {
            id,
            status,
            gate,
            detail: detail.into(),
            shapes: Vec::new(),
            kernels: Vec::new(),
            elapsed_ms: 0.0,
            check_ms: 0.0,
            timing_ms: 0.0,
            stages_ms: Default::default(),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct KernelReport {
    pub name: String,
    pub attributes: FunctionAttributes,
    pub blocks_per_sm: i32,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ShapeResult {
    pub vars: Vars,
    pub trials: Vec<TrialReport>,
    pub timing: Option<TimingReport>,
    /// Wall time of this shape's correctness checks (inputs, reference, launches,
    /// comparisons), for the run log.
    #[serde(default)]
    pub check_ms: f64,
}

impl ShapeResult {
    /// The worst error of any trial.
    pub fn worst(&self) -> Option<&ErrorStats> {
        self.trials
            .iter()
            .map(|t| &t.stats)
            .max_by(|a, b| a.rel_l2.total_cmp(&b.rel_l2))
    }

    /// The worst end-to-end error of any trial (problems with encoded inputs only).
    pub fn worst_end_to_end(&self) -> Option<&ErrorStats> {
        self.trials
            .iter()
            .filter_map(|t| t.end_to_end.as_ref())
            .max_by(|a, b| a.rel_l2.total_cmp(&b.rel_l2))
    }

    /// The relative L2 column of tables: the worst error, and the worst end-to-end one
    /// where there is one.
    pub fn rel_l2_text(&self) -> String {
        let w = self.worst().map_or(0.0, |w| w.rel_l2);
        match self.worst_end_to_end() {
            Some(e) => format!("{w:.2e} (e2e {:.2e})", e.rel_l2),
            None => format!("{w:.2e}"),
        }
    }
}

/// What an output buffer holds before a checked launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prefill {
    /// NaN in every element: an element the kernel does not write stays NaN.
    #[default]
    Nan,
    /// Finite values that are not the answer (as a reused buffer holds): a kernel that
    /// skips work when its output already looks computed leaves them.
    Finite,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TrialReport {
    pub kind: InputKind,
    pub seed: u64,
    /// The call's layouts and scalars, in words (`contiguous tensors, scalars [0.125]`).
    #[serde(default)]
    pub call: String,
    #[serde(default)]
    pub prefill: Prefill,
    pub stats: ErrorStats,
    /// The first check this trial failed.
    pub failure: Option<CheckFailure>,
    /// Problems with encoded inputs (FP8): the error against the exact answer on the
    /// original inputs ([`evo_kernels::Problem::end_to_end`]), checked only when the
    /// output passed against its own reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_to_end: Option<ErrorStats>,
}

/// Error of an output against the reference.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ErrorStats {
    pub max_abs: f64,
    /// ‖got − ref‖ / ‖ref‖ (0 when both are zero).
    pub rel_l2: f64,
    /// Elements outside `atol + rtol·|ref|`, NaN and Inf included.
    pub bad: u64,
    pub first_bad: Option<usize>,
    pub nan: u64,
    pub inf: u64,
    pub max_ref: f64,
}

/// Which correctness check failed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum CheckFailure {
    /// Output elements still hold the NaN poison or are NaN/Inf.
    NotFinite { count: u64, first: usize },
    /// Elements outside the tolerance.
    Tolerance { count: u64, first: usize },
    /// Relative L2 error above the bound.
    RelativeL2 { value: f64, bound: f64 },
    /// A guard region around a buffer (an input, the output or scratch) was written.
    Guard {
        #[serde(default)]
        buffer: String,
        before: bool,
        offset: usize,
    },
    /// A byte between the output's elements (padding of a strided layout) was written.
    PaddingModified { tensor: String, element: usize },
    /// An input tensor changed during the launch.
    InputModified { input: String },
    /// A second launch on the same inputs gave a different output.
    Nondeterministic { differing: u64, first: usize },
    /// The output is too far from the exact answer on the original (unencoded) inputs.
    EndToEnd { failure: Box<CheckFailure> },
    /// A timed launch's output or inputs failed a check (the timing gate verifies what
    /// it times: every replay's inputs are fresh and its outputs checked).
    Timed {
        replay: u32,
        set: u32,
        failure: Box<CheckFailure>,
    },
}

impl std::fmt::Display for CheckFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckFailure::NotFinite { count, first } => {
                write!(f, "{count} output elements not finite (NaN poison left or NaN/Inf written), first at {first}")
            }
            CheckFailure::Tolerance { count, first } => write!(f, "{count} elements outside tolerance, first at {first}"),
            CheckFailure::RelativeL2 { value, bound } => write!(f, "relative L2 error {value:.3e} > {bound:.1e}"),
            CheckFailure::Guard { buffer, before, offset } => write!(
                f,
                "write outside `{buffer}`: the guard region {} it changed at byte {offset}",
                if *before { "before" } else { "after" }
            ),
            CheckFailure::PaddingModified { tensor, element } => write!(
                f,
                "write between the elements of `{tensor}`: padding slot {element} of its strided layout changed"
            ),
            CheckFailure::InputModified { input } => write!(f, "input `{input}` was modified"),
            CheckFailure::Nondeterministic { differing, first } => write!(
                f,
                "second launch on the same inputs differs in {differing} elements (first at {first}): a race or nondeterminism"
            ),
            CheckFailure::EndToEnd { failure } => write!(
                f,
                "end to end, against the original inputs: {failure}"
            ),
            CheckFailure::Timed { replay, set, failure } => write!(
                f,
                "a timed launch (replay {replay}, input set {set}) did not do the checked work: {failure}"
            ),
        }
    }
}

/// Timing of one shape.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TimingReport {
    pub median_us: f64,
    pub p20_us: f64,
    pub p80_us: f64,
    /// Per-launch time of every sample (a graph replay divided by its launches).
    pub samples_us: Vec<f64>,
    pub launches_per_sample: u32,
    pub input_sets: u32,
    pub tflops: f64,
    /// Of the device's dense tensor peak for the dtype, where known.
    pub peak_fraction: Option<f64>,
    /// Minimum bytes over median time.
    pub gb_per_s: f64,
    /// Timed launches whose outputs and inputs were checked afterwards (one input set of
    /// every replay, and every set of the last).
    #[serde(default)]
    pub verified_launches: u32,
    /// The shortest time the device allows for this call (`timing::roofline_floor_us`).
    #[serde(default)]
    pub floor_us: Option<f64>,
    /// Sampling stopped early: every sample was out of contention ([`ShapeJob::contend_us`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub out_of_contention: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_as_single_lines() {
        let job = Job {
            id: 7,
            problem: "gemm".into(),
            label: "g".into(),
            cubin: Cubin(vec![0x7f, b'E', b'L', b'F', 0, 255]),
            kernels: vec!["gemm".into()],
            shapes: vec![ShapeJob {
                vars: [("M".to_string(), evo_core::Value::Int(4))]
                    .into_iter()
                    .collect(),
                launches: vec![LaunchDims {
                    grid: [1, 2, 3],
                    block: [32, 1, 1],
                    shared_bytes: 0,
                }],
                timed: true,
                contend_us: None,
                args: vec![],
                scratch: vec![],
            }],
            correctness: CorrectnessPlan {
                seeds: vec![1, 2],
                adversarial: true,
                repeat_check: true,
                guard_bytes: 4096,
                tolerance: vec![],
                end_to_end: None,
            },
            timing: None,
            batch_seed: None,
            contiguous: vec![],
        };
        let line = serde_json::to_string(&Request::Evaluate(Box::new(job.clone()))).unwrap();
        assert!(!line.contains('\n'));
        let Request::Evaluate(back) = serde_json::from_str(&line).unwrap() else {
            panic!("wrong variant")
        };
        assert_eq!(back.cubin, job.cubin);
        assert_eq!(back.shapes, job.shapes);
        // A single-kernel job's line has no per-kernel fields (as before multi-kernel jobs).
        assert!(!line.contains("\"args\"") && !line.contains("\"scratch\""));
        // Several kernels with their own arguments and scratch.
        let mut multi = job.clone();
        multi.kernels = vec!["quantize".into(), "attention".into()];
        let dims = multi.shapes[0].launches[0];
        multi.shapes[0].launches = vec![dims, dims];
        multi.shapes[0].args = vec![
            vec![
                ArgSlot::Input(0),
                ArgSlot::Scratch(0),
                ArgSlot::I64(1 << 40),
            ],
            vec![
                ArgSlot::Scratch(0),
                ArgSlot::Output,
                ArgSlot::I32(-3),
                ArgSlot::F32(0.125),
            ],
        ];
        multi.shapes[0].scratch = vec![TensorSpec {
            name: "q8".into(),
            elem: evo_kernels::harness::ElemType::E4m3,
            len: 1 << 33,
        }];
        let line = serde_json::to_string(&Request::Evaluate(Box::new(multi.clone()))).unwrap();
        assert!(!line.contains('\n'));
        let Request::Evaluate(back) = serde_json::from_str(&line).unwrap() else {
            panic!("wrong variant")
        };
        assert_eq!(back.kernels, multi.kernels);
        assert_eq!(back.shapes, multi.shapes);
        let ready: Response =
            serde_json::from_str(r#"{"type":"ready","pid":5,"device":null}"#).unwrap();
        assert!(matches!(
            ready,
            Response::Ready {
                pid: 5,
                device: None
            }
        ));
    }
}
