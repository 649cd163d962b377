//! Timing arithmetic: percentiles, when sampling has settled, how many input sets to
//! rotate, and the device's dense tensor peak. The GPU side is in `worker`.
//!
//! Method (DESIGN.md, "timing"): a sample is one replay of a CUDA graph holding R
//! launches back to back, timed with two CUDA events and divided by R; launch i reads
//! input set i mod S, with S sets whose bytes exceed `l2_multiple` × the L2 size, so the
//! data comes from memory and not from cache (this rotation is the L2 flush). Samples are
//! taken until (p80 − p20) / median ≤ `target_spread` after `min_samples`, or
//! `max_samples`, or the time budget.

use evo_kernels::harness::ElemType;

use crate::protocol::TimingPlan;

/// Percentile `p` in [0, 1] of sorted values, by linear interpolation.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    assert!(!sorted.is_empty());
    let pos = p.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// (median, p20, p80) of unsorted samples.
pub fn summary(samples: &[f64]) -> (f64, f64, f64) {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    (
        percentile(&s, 0.5),
        percentile(&s, 0.2),
        percentile(&s, 0.8),
    )
}

/// Whether sampling can stop.
pub fn settled(samples: &[f64], plan: &TimingPlan) -> bool {
    if samples.len() as u32 >= plan.max_samples {
        return true;
    }
    if (samples.len() as u32) < plan.min_samples.max(3) {
        return false;
    }
    let (median, p20, p80) = summary(samples);
    median > 0.0 && (p80 - p20) / median <= plan.target_spread
}

/// Samples taken before a shape can be out of contention.
pub const CONTENTION_SAMPLES: usize = 3;

/// How much slower than the contention time every sample must be.
pub const CONTENTION_MARGIN: f64 = 0.05;

/// Whether sampling can stop because the variant cannot contend on this shape: after
/// [`CONTENTION_SAMPLES`], its fastest sample is still more than [`CONTENTION_MARGIN`]
/// slower than `contend_us` (the slowest elite's median here). Each sample is the mean of
/// a CUDA graph of many launches, so a variant whose true median is within the margin
/// would need every one of its first samples to land that far above it; the timing rule
/// itself accepts a p80 - p20 spread of `target_spread` (2%), well inside 5%.
pub fn out_of_contention(samples: &[f64], contend_us: Option<f64>) -> bool {
    let Some(limit) = contend_us else {
        return false;
    };
    samples.len() >= CONTENTION_SAMPLES
        && samples.iter().copied().fold(f64::INFINITY, f64::min) > limit * (1.0 + CONTENTION_MARGIN)
}

/// Input sets to rotate so their bytes exceed `l2_multiple` × L2, within the cap.
pub fn input_sets(bytes_per_set: usize, l2_bytes: usize, plan: &TimingPlan) -> u32 {
    let want = (plan.l2_multiple * l2_bytes as f64 / bytes_per_set.max(1) as f64).ceil() as u32;
    want.clamp(1, plan.max_input_sets.max(1))
}

/// Input sets of a replay: enough that their bytes exceed `l2_multiple` × L2 ([`input_sets`])
/// and that a replay lasts about `sample_ms` at `one_call_us` a call, within the cap. The
/// second count is rounded to a power of two (a replay then lasts 0.71 to 1.41 × `sample_ms`):
/// variants of a shape then mostly rotate the same number of sets, so they draw the same sets
/// to check and share those sets' references.
pub fn replay_sets(
    bytes_per_set: usize,
    l2_bytes: usize,
    one_call_us: f64,
    plan: &TimingPlan,
) -> u32 {
    let for_sample = (plan.sample_ms * 1e3 / one_call_us.max(1e-3)).max(1.0);
    let rounded = 2f64
        .powi(for_sample.log2().round() as i32)
        .min(u32::MAX as f64) as u32;
    input_sets(bytes_per_set, l2_bytes, plan)
        .max(rounded)
        .clamp(1, plan.max_input_sets.max(1))
}

/// Dense tensor-core peak in TFLOP/s where known: multiprocessors × dense flops per
/// clock per SM × clock. Hopper's clock is capped at 1830 MHz, the clock behind NVIDIA's
/// 989 TFLOP/s fp16 figure for H100 SXM (the driver reports the 1980 MHz maximum).
pub fn dense_peak_tflops(cc: (u32, u32), sms: u32, clock_mhz: u32, elem: ElemType) -> Option<f64> {
    let (per_clock, clock) = match (cc, elem) {
        ((9, 0), ElemType::F16 | ElemType::Bf16) => (4096.0, clock_mhz.min(1830)),
        ((8, 0), ElemType::F16 | ElemType::Bf16) => (2048.0, clock_mhz.min(1410)),
        _ => return None,
    };
    Some(sms as f64 * per_clock * clock as f64 * 1e6 / 1e12)
}

/// Dense tensor-core operations per clock per multiprocessor, where known.
fn tensor_ops_per_clock(cc: (u32, u32), elem: ElemType) -> Option<f64> {
    match (cc, elem) {
        ((9, 0), ElemType::F16 | ElemType::Bf16) => Some(4096.0),
        ((9, 0), ElemType::E4m3) => Some(8192.0),
        ((8, 0), ElemType::F16 | ElemType::Bf16) => Some(2048.0),
        _ => None,
    }
}

/// Headroom on the driver's memory bandwidth before a time counts as impossible: the
/// driver's clock is nominal, and up to an L2's worth of a replay's writes may still sit in
/// the cache when its end event fires.
pub const MEMORY_HEADROOM: f64 = 1.25;

/// The shortest time (µs) a call could take on `device`: its FLOPs at the dense tensor
/// peak of `elem` at the maximum clock, or its minimum bytes at the memory bandwidth
/// ceiling (with [`MEMORY_HEADROOM`]), whichever is larger; `None` when the device reports
/// neither. A measured time below it is not a measurement of the work (the timing gate
/// rejects it).
pub fn roofline_floor_us(
    flops: f64,
    min_bytes: f64,
    device: &evo_gpu::device::DeviceInfo,
    elem: ElemType,
) -> Option<f64> {
    let compute = tensor_ops_per_clock(device.compute_capability, elem).map(|per_clock| {
        let peak = device.multiprocessors as f64 * per_clock * device.clock_mhz as f64 * 1e6;
        flops / peak * 1e6
    });
    let memory = device
        .peak_memory_gb_per_s()
        .map(|gb| min_bytes / (gb * 1e9 * MEMORY_HEADROOM) * 1e6);
    match (compute, memory) {
        (None, None) => None,
        (c, m) => Some(c.unwrap_or(0.0).max(m.unwrap_or(0.0))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> TimingPlan {
        TimingPlan {
            enabled: true,
            warmup_ms: 10.0,
            min_samples: 5,
            max_samples: 50,
            target_spread: 0.02,
            sample_ms: 1.0,
            l2_multiple: 2.0,
            max_input_sets: 64,
            budget_ms: 1000.0,
        }
    }

    #[test]
    fn percentiles() {
        let (m, p20, p80) = summary(&[5.0, 1.0, 4.0, 2.0, 3.0]);
        assert_eq!((m, p20, p80), (3.0, 1.8, 4.2));
        assert_eq!(percentile(&[7.0], 0.2), 7.0);
    }

    #[test]
    fn settling() {
        let p = plan();
        assert!(!settled(&[10.0, 10.0, 10.0], &p), "needs min_samples");
        assert!(settled(&[10.0, 10.01, 10.02, 9.99, 10.0], &p));
        assert!(!settled(&[10.0, 12.0, 10.0, 12.0, 11.0], &p));
        assert!(settled(&[10.0, 20.0].repeat(25), &p), "max_samples stops");
    }

    #[test]
    fn contention() {
        let slow = [11.0, 10.6, 10.8];
        assert!(out_of_contention(&slow, Some(10.0)), "every sample > 10.5");
        assert!(
            !out_of_contention(&slow[..2], Some(10.0)),
            "needs 3 samples"
        );
        assert!(
            !out_of_contention(&[11.0, 10.4, 10.8], Some(10.0)),
            "one within 5%"
        );
        assert!(
            !out_of_contention(&[9.0, 9.0, 9.0], Some(10.0)),
            "a contender"
        );
        assert!(
            !out_of_contention(&slow, None),
            "no elites yet: full timing"
        );
    }

    #[test]
    fn input_set_rotation_exceeds_twice_l2() {
        let p = plan();
        // 50 MB L2, 2 MB per set: 50 sets move 100 MB.
        assert_eq!(input_sets(2 << 20, 50 << 20, &p), 50);
        // Sets larger than twice the L2: one is enough.
        assert_eq!(input_sets(200 << 20, 50 << 20, &p), 1);
        // Tiny sets hit the cap.
        assert_eq!(input_sets(1024, 50 << 20, &p), 64);
    }

    #[test]
    fn replay_sets_fill_a_sample_in_powers_of_two() {
        let p = plan(); // sample_ms 1, at most 64 sets
        let big = 200 << 20; // one set passes the L2 twice
                             // 1000 µs of calls: 20 µs → 50 → 64; 150 µs → 6.7 → 8; 180 µs → 5.6 → 4; 400 µs →
                             // 2.5 → 2; 3 ms → 1.
        for (us, sets) in [(20.0, 64), (150.0, 8), (180.0, 4), (400.0, 2), (3000.0, 1)] {
            assert_eq!(replay_sets(big, 50 << 20, us, &p), sets, "{us} µs");
        }
        // Variants 20% apart share a count.
        assert_eq!(
            replay_sets(big, 50 << 20, 100.0, &p),
            replay_sets(big, 50 << 20, 120.0, &p)
        );
        // The L2 still rules small sets: 2 MB sets need 50.
        assert_eq!(replay_sets(2 << 20, 50 << 20, 1000.0, &p), 50);
    }

    fn h100() -> evo_gpu::device::DeviceInfo {
        evo_gpu::device::DeviceInfo {
            ordinal: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            compute_capability: (9, 0),
            multiprocessors: 132,
            memory_bytes: 80 << 30,
            l2_bytes: 50 << 20,
            max_smem_per_block_optin: 232448,
            clock_mhz: 1980,
            memory_clock_mhz: 2619,
            memory_bus_bits: 5120,
        }
    }

    /// The floor is the larger of the compute and memory bounds; FP8 work gets the FP8
    /// peak; a time a correct attention kernel measured is above it, the 1.2 µs of a kernel
    /// that skipped its work is far below it.
    #[test]
    fn roofline_floor() {
        let d = h100();
        assert!((d.peak_memory_gb_per_s().unwrap() - 3352.3).abs() < 1.0);
        // (4, 16, 4096, 128) attention: 550 GFLOP, compute-bound: 514 µs at 1070 TFLOP/s
        // (cuDNN measured about 844 µs on an H200).
        let flops = 4.0 * 4.0 * 16.0 * 4096.0 * 4096.0 * 128.0;
        let bytes = 2.0 * 4.0 * 16.0 * 128.0 * 4.0 * 4096.0;
        let f16 = roofline_floor_us(flops, bytes, &d, ElemType::F16).unwrap();
        assert!((f16 - 513.5).abs() < 1.0, "{f16}");
        let fp8 = roofline_floor_us(flops, bytes, &d, ElemType::E4m3).unwrap();
        assert!((fp8 - f16 / 2.0).abs() < 0.5, "{fp8}");
        // (1, 8, 512, 64): 0.54 GFLOP and 2 MiB, both bounds near 0.5 µs: the larger one.
        let (flops, bytes) = (
            4.0 * 8.0 * 512.0 * 512.0 * 64.0,
            2.0 * 8.0 * 64.0 * 4.0 * 512.0,
        );
        let small = roofline_floor_us(flops, bytes, &d, ElemType::F16).unwrap();
        let memory = bytes / (3352.3e9 * MEMORY_HEADROOM) * 1e6;
        let compute = flops / (132.0 * 4096.0 * 1980e6) * 1e6;
        assert!(
            (small - memory.max(compute)).abs() < 1e-3,
            "{small} {memory} {compute}"
        );
        // 1.2 µs for (2, 8, 2048, 64) (a kernel that skipped its work) is far below its floor.
        let flops = 4.0 * 2.0 * 8.0 * 2048.0 * 2048.0 * 64.0;
        let floor = roofline_floor_us(
            flops,
            4.0 * 2.0 * 2.0 * 8.0 * 2048.0 * 64.0,
            &d,
            ElemType::F16,
        );
        assert!(floor.unwrap() > 1.2 * 10.0, "{floor:?}");
        // An unknown GPU: only what the driver reports.
        let mut other = d.clone();
        other.compute_capability = (7, 5);
        let m = roofline_floor_us(1e12, 1e9, &other, ElemType::F16).unwrap();
        let bw = d.peak_memory_gb_per_s().unwrap() * 1e9 * MEMORY_HEADROOM;
        assert!((m - 1e9 / bw * 1e6).abs() < 1e-9, "{m}");
        other.memory_clock_mhz = 0;
        assert_eq!(roofline_floor_us(1e12, 1e9, &other, ElemType::F16), None);
    }

    #[test]
    fn hopper_peak() {
        let p = dense_peak_tflops((9, 0), 132, 1980, ElemType::F16).unwrap();
        assert!((p - 989.6).abs() < 1.0, "{p}");
        assert_eq!(dense_peak_tflops((7, 5), 40, 1500, ElemType::F16), None);
    }
}
