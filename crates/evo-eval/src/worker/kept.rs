//! References kept for a batch of jobs. The jobs of a batch draw every input from the
//! batch's seeds (`Job::batch_seed`), so the float32 reference of each (shape, call,
//! contents) is computed by the first job that needs it and read by the others: computed
//! from inputs the worker generated, never from what a variant left.
//!
//! A kept reference lives in the same CUDA context as the variants, so a stray write of one
//! variant could change it: each is checksummed when computed (`evo_checksum`), checked
//! before every use (one that changed is computed again, so another variant's bug cannot
//! decide a verdict) and after every job that passed (a change fails that job's variant).
//! Trial references are computed from the worker's pristine copies of the trial's inputs,
//! made before the variant runs.

use std::collections::{HashMap, VecDeque};

use evo_core::Vars;
use evo_gpu::runtime::{CudaError, DeviceBuffer, Gpu};
use evo_kernels::harness::{Call, ReferenceKernel};

use super::describe;
use super::gpu_checks::GateKernels;

/// The most device memory kept references take: a quarter of the device's, at most this.
const MOST_BYTES: usize = 16 << 30;

/// Batches whose references are kept: the candidates in flight around a batch's end reach
/// the GPU in no strict order, so the jobs of two neighbouring batches interleave.
const KEPT_BATCHES: usize = 3;

/// Where a reference is (see [`KeptReferences::lookup`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Kept {
    /// Computed and unchanged since: read it at this address.
    Ready(u64),
    /// Not computed: compute it into this address, then [`KeptReferences::seal`] it.
    Compute(u64),
    /// No room left: compute it into memory of the caller's own.
    Full,
}

struct Entry {
    buffer: DeviceBuffer,
    /// `None` until its reference is computed and sealed.
    checksum: Option<u64>,
    /// The batch of the job that computed it (`None`: a job of no batch).
    batch: Option<u64>,
}

pub(super) struct KeptReferences {
    /// The batches kept, the current one last.
    batches: VecDeque<u64>,
    current: Option<u64>,
    bytes: usize,
    limit: usize,
    entries: HashMap<String, Entry>,
}

/// What a reference is the answer to: the problem, shape and call, the reference kernel as
/// bound (entry, arguments, launch) and the inputs' contents (`contents`: where they come
/// from, e.g. the trial's kind and seed).
pub(super) fn reference_key(
    problem: &str,
    vars: &Vars,
    call: &Call,
    reference: &ReferenceKernel,
    contents: &str,
) -> String {
    format!(
        "{problem} {} {call:?} {} {:?} {:?} | {contents}",
        describe(vars),
        reference.entry,
        reference.args,
        reference.launch
    )
}

impl KeptReferences {
    pub fn new(device_bytes: u64) -> KeptReferences {
        KeptReferences {
            batches: VecDeque::new(),
            current: None,
            bytes: 0,
            limit: MOST_BYTES.min(device_bytes as usize / 4),
            entries: HashMap::new(),
        }
    }

    /// A job of `batch` starts: the references of a job of no batch are dropped, and those
    /// of all but the [`KEPT_BATCHES`] latest batches.
    pub fn start_job(&mut self, batch: Option<u64>) {
        self.drop_where(|b| b.is_none());
        if let Some(b) = batch {
            if let Some(i) = self.batches.iter().position(|&k| k == b) {
                self.batches.remove(i);
            }
            self.batches.push_back(b);
            while self.batches.len() > KEPT_BATCHES {
                let old = self.batches.pop_front();
                self.drop_where(|b| b == old);
            }
        }
        self.current = batch;
    }

    fn drop_where(&mut self, mut drop: impl FnMut(Option<u64>) -> bool) {
        let bytes = &mut self.bytes;
        self.entries.retain(|_, e| {
            let keep = !drop(e.batch);
            if !keep {
                *bytes -= e.buffer.bytes();
            }
            keep
        });
    }

    /// Room for `bytes` more, dropping other batches' references (least recent first) if
    /// that makes it.
    fn make_room(&mut self, bytes: usize) -> bool {
        let others: Vec<u64> = self
            .batches
            .iter()
            .copied()
            .filter(|&b| Some(b) != self.current)
            .collect();
        for old in others {
            if self.bytes + bytes <= self.limit {
                break;
            }
            self.drop_where(|b| b == Some(old));
            self.batches.retain(|&b| b != old);
        }
        self.bytes + bytes <= self.limit
    }

    /// The current checksums of the entries `keys` (all present), in one pass.
    fn checksums<'k>(
        &self,
        gpu: &Gpu,
        gate: &GateKernels,
        keys: impl IntoIterator<Item = &'k str>,
    ) -> Result<Vec<u64>, CudaError> {
        let regions: Vec<(u64, u64)> = keys
            .into_iter()
            .map(|k| {
                let b = &self.entries[k].buffer;
                (b.ptr(), b.bytes() as u64)
            })
            .collect();
        gate.checksum(gpu, &regions)
    }

    /// The sealed entries among `keys` whose bytes no longer match their checksums.
    fn changed_among<'k>(
        &self,
        gpu: &Gpu,
        gate: &GateKernels,
        keys: impl IntoIterator<Item = &'k str>,
    ) -> Result<Vec<String>, CudaError> {
        let sealed: Vec<(&str, u64)> = keys
            .into_iter()
            .filter_map(|k| Some((k, self.entries.get(k)?.checksum?)))
            .collect();
        let now = self.checksums(gpu, gate, sealed.iter().map(|(k, _)| *k))?;
        Ok(sealed
            .into_iter()
            .zip(now)
            .filter(|((_, kept), now)| kept != now)
            .map(|((k, _), _)| k.to_string())
            .collect())
    }

    /// Where each reference of `wanted` (key, bytes) is: those computed before are checked
    /// against their checksums first (in one pass), and any that changed is to be computed
    /// again.
    pub fn lookup(
        &mut self,
        gpu: &Gpu,
        gate: &GateKernels,
        wanted: &[(&str, usize)],
    ) -> Result<Vec<Kept>, CudaError> {
        for key in self.changed_among(gpu, gate, wanted.iter().map(|(k, _)| *k))? {
            eprintln!(
                "evo worker: a kept reference changed after it was computed (a variant wrote outside its buffers?); computing it again: {key}"
            );
            if let Some(e) = self.entries.get_mut(&key) {
                e.checksum = None;
            }
        }
        let mut out = Vec::with_capacity(wanted.len());
        for &(key, bytes) in wanted {
            if let Some(e) = self.entries.get_mut(key) {
                // Used by this batch now: kept as long as it is.
                e.batch = self.current;
                out.push(match e.checksum {
                    Some(_) => Kept::Ready(e.buffer.ptr()),
                    None => Kept::Compute(e.buffer.ptr()),
                });
                continue;
            }
            if !self.make_room(bytes) {
                out.push(Kept::Full);
                continue;
            }
            let buffer = gpu.alloc(bytes)?;
            let ptr = buffer.ptr();
            self.bytes += buffer.bytes();
            self.entries.insert(
                key.to_string(),
                Entry {
                    buffer,
                    checksum: None,
                    batch: self.current,
                },
            );
            out.push(Kept::Compute(ptr));
        }
        Ok(out)
    }

    /// The references of `keys` are computed (their launches queued on `gpu`'s stream):
    /// their checksums are taken.
    pub fn seal(&mut self, gpu: &Gpu, gate: &GateKernels, keys: &[&str]) -> Result<(), CudaError> {
        let held: Vec<&str> = keys
            .iter()
            .copied()
            .filter(|k| self.entries.contains_key(*k))
            .collect();
        let sums = self.checksums(gpu, gate, held.iter().copied())?;
        for (k, sum) in held.into_iter().zip(sums) {
            if let Some(e) = self.entries.get_mut(k) {
                e.checksum = Some(sum);
            }
        }
        Ok(())
    }

    /// The sealed references whose bytes changed since they were sealed (one pass over all
    /// of them); they are dropped. Run after every job that passed: only that job's variant
    /// ran since the previous pass, so a change is its stray write.
    pub fn changed(&mut self, gpu: &Gpu, gate: &GateKernels) -> Result<Vec<String>, CudaError> {
        let changed = self.changed_among(gpu, gate, self.entries.keys().map(String::as_str))?;
        for k in &changed {
            self.forget(k);
        }
        Ok(changed)
    }

    /// Drops a reference (found not finite: the evaluator's failure, never kept).
    pub fn forget(&mut self, key: &str) {
        if let Some(e) = self.entries.remove(key) {
            self.bytes -= e.buffer.bytes();
        }
    }
}

/// A float32 reference on the GPU: the batch's kept copy, or the caller's own memory.
pub(super) struct Reference {
    pub ptr: u64,
    pub key: String,
    _own: Option<DeviceBuffer>,
}

impl super::Worker {
    /// The reference named `key` (see [`reference_key`]): the batch's kept copy when it is
    /// there and unchanged, else computed by `reference` on the inputs `inputs` gives
    /// (pointers, and buffers to hold until the launch is done) and kept where there is room.
    pub(super) fn kept_reference(
        &self,
        key: String,
        reference: &ReferenceKernel,
        out_len: usize,
        inputs: impl FnOnce() -> Result<(Vec<u64>, Vec<DeviceBuffer>), super::Stop>,
    ) -> Result<Reference, super::Stop> {
        let _t = self.stages.timer("reference");
        let gate = self.gate();
        let mut kept = self.kept.borrow_mut();
        let (ptr, own) = match kept.lookup(&self.gpu, gate, &[(&key, out_len * 4)])?[0] {
            Kept::Ready(ptr) => {
                return Ok(Reference {
                    ptr,
                    key,
                    _own: None,
                })
            }
            Kept::Compute(ptr) => (ptr, None),
            Kept::Full => {
                let b = self.gpu.alloc(out_len * 4)?;
                (b.ptr(), Some(b))
            }
        };
        let (pointers, _held) = inputs()?;
        self.launch_reference(reference, &pointers, ptr)?;
        if own.is_none() {
            kept.seal(&self.gpu, gate, &[&key])?;
        }
        self.gpu.synchronize()?;
        Ok(Reference {
            ptr,
            key,
            _own: own,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::gpu_checks::{gpu_with_kernels, PatternJob};

    fn write(gpu: &Gpu, gate: &GateKernels, ptr: u64, n: u64, byte: u8) {
        gate.pattern(
            gpu,
            &[PatternJob {
                ptr,
                n,
                pattern: vec![byte],
                layout: None,
            }],
        )
        .unwrap();
    }

    /// On a GPU: a reference is computed once and then read; a kept reference whose bytes
    /// changed after it was sealed (a stray write) is to be computed again, in place; past
    /// the memory limit other batches' references make room, else nothing is kept; a job of
    /// no batch keeps nothing for the next, and a batch's references go once
    /// `KEPT_BATCHES` newer batches came.
    #[test]
    fn gpu_kept_references_are_checked_before_use() {
        let Some((gpu, gate)) = gpu_with_kernels() else {
            return;
        };
        let bytes = 1 << 20;
        let n = bytes as u64;
        // Room for three references.
        let mut kept = KeptReferences::new(4 * 3 * n);
        let is_compute = |k: Kept| matches!(k, Kept::Compute(_));
        kept.start_job(Some(1));
        let Kept::Compute(a) = kept.lookup(&gpu, &gate, &[("a", bytes)]).unwrap()[0] else {
            panic!("a new reference is computed");
        };
        write(&gpu, &gate, a, n, 0x3c);
        kept.seal(&gpu, &gate, &["a"]).unwrap();
        kept.start_job(Some(1));
        let found = kept
            .lookup(&gpu, &gate, &[("a", bytes), ("b", bytes)])
            .unwrap();
        assert_eq!(
            found[0],
            Kept::Ready(a),
            "the next job of the batch reads it"
        );
        assert!(is_compute(found[1]));
        // One byte at the end changes: the pass after a job finds it (and drops it), ...
        write(&gpu, &gate, a + n - 1, 1, 0x3d);
        assert_eq!(kept.changed(&gpu, &gate).unwrap(), vec!["a".to_string()]);
        assert!(is_compute(
            kept.lookup(&gpu, &gate, &[("a", bytes)]).unwrap()[0]
        ));
        let Kept::Compute(a) = kept.lookup(&gpu, &gate, &[("a", bytes)]).unwrap()[0] else {
            panic!("computed again");
        };
        write(&gpu, &gate, a, n, 0x3c);
        kept.seal(&gpu, &gate, &["a"]).unwrap();
        assert!(kept.changed(&gpu, &gate).unwrap().is_empty());
        // ... and so does the next lookup, which computes it again where it is.
        write(&gpu, &gate, a + n - 1, 1, 0x3d);
        assert_eq!(
            kept.lookup(&gpu, &gate, &[("a", bytes)]).unwrap()[0],
            Kept::Compute(a)
        );
        write(&gpu, &gate, a, n, 0x3c);
        kept.seal(&gpu, &gate, &["a"]).unwrap();
        assert_eq!(
            kept.lookup(&gpu, &gate, &[("a", bytes)]).unwrap()[0],
            Kept::Ready(a)
        );
        // a, b, c fill the room; nothing of another batch to drop.
        let more = kept
            .lookup(&gpu, &gate, &[("c", bytes), ("d", bytes)])
            .unwrap();
        assert!(is_compute(more[0]), "{more:?}");
        assert_eq!(more[1], Kept::Full);
        kept.forget("b");
        assert!(is_compute(
            kept.lookup(&gpu, &gate, &[("d", bytes)]).unwrap()[0]
        ));
        // Batch 2 reads batch 1's a (it becomes batch 2's), and makes room by dropping
        // batch 1's c and d.
        kept.start_job(Some(2));
        assert_eq!(
            kept.lookup(&gpu, &gate, &[("a", bytes)]).unwrap()[0],
            Kept::Ready(a)
        );
        let found = kept
            .lookup(&gpu, &gate, &[("e", bytes), ("c", bytes), ("d", bytes)])
            .unwrap();
        assert!(is_compute(found[0]) && is_compute(found[1]), "{found:?}");
        assert_eq!(found[2], Kept::Full, "a, e and c are batch 2's");
        // A job of no batch: its references are not there for the next job.
        kept.start_job(None);
        assert!(is_compute(
            kept.lookup(&gpu, &gate, &[("x", bytes)]).unwrap()[0]
        ));
        kept.seal(&gpu, &gate, &["x"]).unwrap();
        kept.start_job(Some(3));
        assert!(is_compute(
            kept.lookup(&gpu, &gate, &[("x", bytes)]).unwrap()[0]
        ));
        kept.seal(&gpu, &gate, &["x"]).unwrap();
        // x is batch 3's; read (so batch 5's) two batches later; gone three after that.
        kept.start_job(Some(4));
        kept.start_job(Some(5));
        assert!(matches!(
            kept.lookup(&gpu, &gate, &[("x", bytes)]).unwrap()[0],
            Kept::Ready(_)
        ));
        for batch in [6, 7, 8] {
            kept.start_job(Some(batch));
        }
        assert!(is_compute(
            kept.lookup(&gpu, &gate, &[("x", bytes)]).unwrap()[0]
        ));
    }

    #[test]
    fn keys_name_the_contents_and_the_call() {
        let p = evo_kernels::problem("sdpa_fwd").unwrap();
        let vars = p
            .complete_shape(
                &[
                    ("BATCH", 1),
                    ("HEADS", 2),
                    ("SEQ_Q", 64),
                    ("SEQ_KV", 64),
                    ("HEAD_DIM", 64),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.into()))
                .collect(),
            )
            .unwrap();
        let call = p.default_call(&vars);
        let varied = p.varied_call(&vars, 3, &[]);
        let r = p.reference(&vars, &call).unwrap();
        let rv = p.reference(&vars, &varied).unwrap();
        let key = reference_key(p.name(), &vars, &call, &r, "trial Random seed 1");
        assert_eq!(
            key,
            reference_key(p.name(), &vars, &call, &r, "trial Random seed 1")
        );
        assert_ne!(
            key,
            reference_key(p.name(), &vars, &call, &r, "trial Random seed 2")
        );
        assert_ne!(
            key,
            reference_key(p.name(), &vars, &varied, &rv, "trial Random seed 1")
        );
    }
}
