//! Command-line arguments (clap).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "evo",
    version,
    about = "Evolutionary GPU kernel search: Tera templates, NVRTC, gated evaluation, elites in SQLite"
)]
pub struct Cli {
    /// Print data as JSON (for scripts) instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// More log output on stderr (RUST_LOG overrides).
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// Folder holding <problem>/<family>.toml and common/ (default: the config's
    /// `templates`, else ../templates next to the config, else ./templates).
    #[arg(long, global = true, env = "EVO_TEMPLATES")]
    pub templates: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// What evo finds on this machine: CUDA headers, NVRTC, cuobjdump, driver, GPUs,
    /// templates. Exits 0 when a search can run here, 3 when something it needs is missing.
    Doctor {
        /// Only require what compiling needs (NVRTC and headers), not a GPU.
        #[arg(long)]
        compile_only: bool,
    },
    /// Size of a config's search space, rejections per constraint, sample genomes.
    Space {
        #[command(flatten)]
        target: TargetArgs,
        /// Sample genomes to print.
        #[arg(long, default_value_t = 5)]
        samples: usize,
        /// Seed for sampling.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Print every valid genome, one per line (canonical form), and nothing else.
        #[arg(long)]
        list: bool,
    },
    /// Print the CUDA source of one genome.
    Render {
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        pick: GenomeArgs,
        /// Which specialization (e.g. DTYPE=bf16) when the config has several.
        #[arg(long)]
        spec: Option<String>,
        /// Render even if the genome violates a constraint.
        #[arg(long)]
        force: bool,
    },
    /// Compile genomes with NVRTC (no GPU needed) and report resource usage.
    Compile {
        #[command(flatten)]
        target: TargetArgs,
        #[command(flatten)]
        pick: GenomeArgs,
        /// Compile every valid genome of the space.
        #[arg(long, conflicts_with_all = ["genome", "random"])]
        all: bool,
        /// Compile a few genomes that together use every value of every knob.
        #[arg(long, conflicts_with_all = ["genome", "random", "all"])]
        cover: bool,
        /// Compile genomes that together combine every pair of values of two knobs that
        /// the constraints allow (pairwise coverage).
        #[arg(long, conflicts_with_all = ["genome", "random", "all", "cover"])]
        pairwise: bool,
        /// Write <hash>.<spec>.{cu,ptx,cubin,log} for each variant into this folder.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Compile threads (0: one per core).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// Neither read nor write the compile cache.
        #[arg(long)]
        no_cache: bool,
        /// Count tensor-core instructions in the SASS (needs cuobjdump).
        #[arg(long)]
        sass: bool,
    },
    /// The main job: an evolutionary search of a config's space, stored in the
    /// population database. Ctrl-C finishes the evaluations in flight and saves; a killed
    /// run continues with --resume.
    Search {
        /// Search config (TOML); not needed with --resume.
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Name of the new run (default: <family>-<unix time>).
        #[arg(long)]
        run: Option<String>,
        /// Continue this run where it stopped (same config, same search state).
        #[arg(long, value_name = "RUN", conflicts_with = "run")]
        resume: Option<String>,
        /// Population database: a file (created if missing), sqlite://PATH, or a
        /// PostgreSQL server postgres://USER:PASSWORD@HOST:PORT/DB that several hosts
        /// share (see `evo join`).
        #[arg(long, env = "EVO_DB", default_value = "population.db")]
        db: String,
        /// Stop after 8h / 30m / 90s or 500evals (counted from this invocation), or when the
        /// run has 20gen generations.
        #[arg(long)]
        budget: Option<evo_run::Budget>,
        /// How long a host keeps a claimed genome without a heartbeat (e.g. 60s, the
        /// default): a host that dies loses its genomes to the others after this.
        #[arg(long, value_parser = evo_run::parse_duration)]
        lease: Option<std::time::Duration>,
        /// Let hosts whose GPU model differs from this one's join the run (their timings
        /// are then compared as if equal).
        #[arg(long)]
        allow_mixed_gpus: bool,
        /// Stop after this many generations without improvement (overrides [search] patience).
        #[arg(long)]
        patience: Option<u32>,
        /// Override [search] seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Override [search] strategy: surrogate (the default), evolution, random or exhaustive.
        #[arg(long)]
        strategy: Option<String>,
        /// `gpu` (the default for a new run), or `replay:FILE` to answer from a recorded
        /// landscape (no GPU needed). A resumed run keeps its own.
        #[arg(long)]
        evaluator: Option<String>,
        #[command(flatten)]
        gpus: GpuArgs,
        /// No progress bar.
        #[arg(long)]
        no_progress: bool,
    },
    /// Work on a run that another host started (`evo search ... --db postgres://...`):
    /// take pending genomes with a lease, evaluate them on this host's GPUs, write the
    /// results back, advance generations when they complete. Start any number, anywhere
    /// the database is reachable; the run's config, seed and evaluator are used.
    Join {
        /// The run's name (or id).
        run: String,
        /// The shared population database, e.g. postgres://evo:PASSWORD@db-host:5432/evo.
        #[arg(long, env = "EVO_DB")]
        db: String,
        /// Stop this host after 8h / 30m / 90s or 500evals (the run's generation budget
        /// is the run's).
        #[arg(long)]
        budget: Option<evo_run::Budget>,
        /// Must equal the run's evaluator when given (default: the run's).
        #[arg(long)]
        evaluator: Option<String>,
        #[command(flatten)]
        gpus: GpuArgs,
        /// No progress bar.
        #[arg(long)]
        no_progress: bool,
    },
    /// The runs of a population database: status, counts per status, best fitness.
    Runs {
        #[command(flatten)]
        db: DbArg,
    },
    /// The fittest candidates of a run (the newest run without RUN): knobs, fitness,
    /// per-shape µs and TFLOP/s, registers, shared memory, spills, tensor-core
    /// instructions.
    Elites {
        run: Option<String>,
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// One table with every shape's time and TFLOP/s as columns (wide); by default
        /// the candidates and the per-shape times are two tables that fit 100 columns.
        #[arg(long)]
        wide: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// One candidate (id, or a genome hash prefix of 4+ hex digits): status, measurements,
    /// resources; or its source, PTX, SASS or compile log (compiled with NVRTC here, no
    /// GPU needed).
    Show {
        id: String,
        /// The rendered CUDA source.
        #[arg(long, group = "what")]
        source: bool,
        /// PTX from NVRTC.
        #[arg(long, group = "what")]
        ptx: bool,
        /// SASS of the CUBIN (needs cuobjdump).
        #[arg(long, group = "what")]
        sass: bool,
        /// The NVRTC/ptxas log.
        #[arg(long, group = "what")]
        log: bool,
        /// Only this specialization (e.g. HEAD_DIM=128); default: all.
        #[arg(long)]
        spec: Option<String>,
        /// Look the id up in this run only.
        #[arg(long)]
        run: Option<String>,
        #[command(flatten)]
        db: DbArg,
    },
    /// The ancestry of a candidate, oldest first, with the knobs changed at each step.
    Lineage {
        id: String,
        #[arg(long)]
        run: Option<String>,
        #[command(flatten)]
        db: DbArg,
    },
    /// Knob, time and unified source differences between two candidates.
    Diff {
        a: String,
        b: String,
        /// Specialization of the source diff (default: the first).
        #[arg(long)]
        spec: Option<String>,
        #[arg(long)]
        run: Option<String>,
        #[command(flatten)]
        db: DbArg,
    },
    /// Where the candidates of a run stopped (per gate and why), the gate funnel,
    /// evaluations per hour, GPU busy fraction.
    Stats {
        run: Option<String>,
        #[command(flatten)]
        db: DbArg,
    },
    /// A self-contained HTML report of a run: charts (SVG) and the elite table.
    Report {
        run: Option<String>,
        #[arg(long, default_value = "report.html")]
        out: PathBuf,
        /// Elites in the table and the per-shape chart.
        #[arg(long, default_value_t = 10)]
        top: usize,
        #[command(flatten)]
        db: DbArg,
    },
    /// Baselines of a run.
    Baseline {
        #[command(subcommand)]
        action: BaselineAction,
    },
    /// Benchmark the search strategies on a recorded landscape: evaluations each needs
    /// to get within a margin of the landscape's optimum, over many seeds.
    SearchQuality {
        #[command(flatten)]
        target: TargetArgs,
        /// Landscape file (`evo export-landscape`), ideally exhaustive over the space.
        #[arg(
            long,
            required_unless_present = "synthetic",
            conflicts_with = "synthetic"
        )]
        landscape: Option<PathBuf>,
        /// Instead of a file: this many random landscapes over the config's space
        /// (per-knob effects, pairwise interactions, noise and failures), seeds each.
        #[arg(long)]
        synthetic: Option<u64>,
        #[arg(long, default_value_t = 20)]
        seeds: u64,
        /// Margin below the optimum that counts as reached (0.02: within 2%).
        #[arg(long, default_value_t = 0.02)]
        within: f64,
        /// Genomes per generation (default: the config's `[search] population`).
        #[arg(long)]
        population: Option<usize>,
        /// Reverse every knob's value list first (a strategy should not care).
        #[arg(long)]
        reverse: bool,
    },
    /// Write every evaluated genome of a run with its measurements to a landscape file
    /// for the replay evaluator.
    ExportLandscape {
        run: String,
        #[arg(long)]
        out: PathBuf,
        #[arg(long, env = "EVO_DB", default_value = "population.db")]
        db: String,
    },
    /// Write the frozen artifact of a run's best genome (or of candidate ID): manifest.json,
    /// kernel source, PTX and CUBIN per specialization, evo_kernel.py (PyTorch op),
    /// bench.py, kernel.h and example.cpp (C/C++), README.md. RUN is a run name or run:ID;
    /// a number is a candidate id. Several runs with --per-shape: the fastest correct
    /// variant of each shape over all of them.
    Export {
        #[arg(value_name = "RUN|ID", required = true, num_args = 1..)]
        what: Vec<String>,
        /// Folder to write (must not exist or be empty, unless --force).
        #[arg(long)]
        out: PathBuf,
        /// The fastest correct genome of each shape (over every run given), with a
        /// dispatch table that picks by shape.
        #[arg(long)]
        per_shape: bool,
        /// Replace an earlier artifact in --out.
        #[arg(long)]
        force: bool,
        /// Export genomes that have not been through compute-sanitizer (no GPU or no
        /// compute-sanitizer here); the manifest says so. Without it such an export is
        /// refused, and a genome the sanitizers were never run on is sanitized first.
        #[arg(long)]
        unsanitized: bool,
        /// Export genomes whose build here differs from the one the search checked (the
        /// compile key changed: a template, a compile option or NVRTC since the run); the
        /// manifest says so. Without it such an export is refused; `evo verify` gates the
        /// artifact's builds on a GPU.
        #[arg(long)]
        unchecked_build: bool,
        /// With --per-shape: the speedup over PyTorch's SDPA (the run's baseline) a variant
        /// must have measured on a shape for evo_kernel.py to run it there [default: 1.05].
        /// Shapes below it (and the calls nearest to them) go to PyTorch's SDPA, named in
        /// the export's notes.
        #[arg(long, requires = "per_shape", value_parser = parse_speedup)]
        min_speedup: Option<f64>,
        /// With --per-shape: keep evo's kernels in evo_kernel.py on every shape, also where
        /// their run measured PyTorch's SDPA faster (--min-speedup 0).
        #[arg(long, requires = "per_shape", conflicts_with = "min_speedup")]
        keep_slower: bool,
        #[arg(long, env = "EVO_DB", default_value = "population.db")]
        db: String,
    },
    /// Check an artifact: every file's SHA-256, every variant's source re-rendered from its
    /// genome (and the genome's hash), then (on a GPU) every correctness gate and the
    /// timing of its kernels, compared with its manifest. Exit 3 when no GPU is here
    /// (after the checks that need none).
    Verify { dir: PathBuf },
    /// Run every gate on genomes of a config's family (no search): errors and times per
    /// shape, on a GPU.
    Eval {
        #[command(flatten)]
        target: TargetArgs,
        /// Genomes (repeatable) as NAME=value,...
        #[arg(short, long)]
        genome: Vec<String>,
        /// This many random valid genomes.
        #[arg(long)]
        random: Option<usize>,
        /// A few genomes that together use every value of every knob.
        #[arg(long)]
        cover: bool,
        /// Genomes that together combine every pair of knob values the constraints allow.
        #[arg(long, conflicts_with = "cover")]
        pairwise: bool,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Correctness only.
        #[arg(long)]
        no_timing: bool,
        #[command(flatten)]
        gpus: GpuArgs,
    },
    /// Run every gate on hand-written kernels and print a verdict per gate. Files may
    /// carry `// evo-launch:` and `// evo-expect:` headers; with expectations, the exit
    /// code says whether every verdict matched.
    Check(CheckArgs),
    /// GPU self-checks: reference kernels against float64, timing of kernels of known
    /// cost, and fault isolation (a faulting and a hanging kernel, then a good one).
    Selftest {
        #[arg(long, default_value_t = 0)]
        gpu: u32,
    },
    /// The profile gate on one kernel: Nsight Compute counters (tensor pipe, DRAM
    /// throughput, occupancy) and compute-sanitizer checks, each skipped with a reason
    /// where the tool is missing.
    Profile {
        /// A hand-written kernel (with `--problem`), or omit and give -c/-g for a genome.
        file: Option<PathBuf>,
        #[arg(long)]
        problem: Option<String>,
        /// A family config, with --genome.
        #[arg(short, long)]
        config: Option<PathBuf>,
        #[arg(short, long)]
        genome: Option<String>,
        /// The shape to launch, e.g. M=4096,N=4096,K=4096 (default: the config's first); with
        /// a config, the values of its `[spec]` (DTYPE, CAUSAL, ...) it does not name.
        #[arg(long)]
        shape: Option<String>,
        /// Launch rule for a file without an `// evo-launch:` header.
        #[arg(long)]
        launch: Option<String>,
        /// Tools to run: ncu, memcheck, racecheck, initcheck, synccheck; or `none`: only write
        /// the kernel's source and launch plan and print the `evo run-once` line that launches it
        /// (to wrap in a profiler of your own).
        #[arg(long, default_value = "ncu,memcheck,racecheck")]
        tools: String,
        #[arg(long, default_value_t = 0)]
        gpu: u32,
    },
    /// Launch a kernel (or a variant's kernels) once on random inputs (what profilers wrap).
    #[command(hide = true)]
    RunOnce {
        #[arg(long)]
        problem: String,
        #[arg(long)]
        source: PathBuf,
        #[arg(long)]
        shape: String,
        /// One kernel with the problem's ABI, launched by this rule.
        #[arg(long, conflicts_with = "plan", required_unless_present = "plan")]
        launch: Option<String>,
        /// A JSON launch plan (kernels, geometry, arguments, scratch) written by `evo profile`.
        #[arg(long)]
        plan: Option<PathBuf>,
        #[arg(long, default_value_t = 0)]
        gpu: u32,
    },
    /// Serve evaluation jobs for one GPU over stdin/stdout (started by evo itself).
    #[command(hide = true)]
    Worker {
        #[arg(long, default_value_t = 0)]
        gpu: u32,
    },
}

#[derive(Subcommand, Debug)]
pub enum BaselineAction {
    /// Replace a run's baseline with per-shape times from an evo-baseline-1 file (e.g.
    /// scripts/torch_sdpa_baseline.py's, measured on the same GPU) and rescore its
    /// candidates.
    Import {
        file: PathBuf,
        #[arg(long)]
        run: String,
        #[arg(long, env = "EVO_DB", default_value = "population.db")]
        db: String,
    },
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Hand-written kernels (.cu) implementing the problem's ABI.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The problem the kernels implement (e.g. gemm, sdpa_fwd).
    #[arg(long)]
    pub problem: String,
    /// Take shapes and gate settings from this search config.
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// A shape (repeatable), e.g. M=1000,N=1000,K=1000 (specialization values too; with
    /// --config, the values of its `[spec]` it does not name).
    #[arg(long)]
    pub shape: Vec<String>,
    /// Launch rule, overriding the file's `// evo-launch:` header, e.g.
    /// "grid = ceil_div(N, 16), ceil_div(M, 16); block = 16, 16; shared_bytes = 0".
    #[arg(long)]
    pub launch: Option<String>,
    /// Correctness only.
    #[arg(long)]
    pub no_timing: bool,
    /// Skip the sanitizer gate (compute-sanitizer memcheck, racecheck and synccheck on a
    /// small shape), which runs by default on every kernel that passes the other gates
    /// when compute-sanitizer is installed.
    #[arg(long)]
    pub no_sanitize: bool,
    /// Compile target without a GPU (default: the config's `[compile] arch`, else sm_90a);
    /// with a GPU its own architecture is used.
    #[arg(long)]
    pub arch: Option<String>,
    #[command(flatten)]
    pub gpus: GpuArgs,
}

#[derive(Args, Debug)]
pub struct DbArg {
    /// Population database: a file or sqlite://PATH (never created by these commands).
    #[arg(long, env = "EVO_DB", default_value = "population.db")]
    pub db: String,
}

#[derive(Args, Debug)]
pub struct GpuArgs {
    /// GPUs to run workers on, e.g. 0,1, or `all` (one worker process per GPU).
    #[arg(long, default_value = "0")]
    pub gpus: String,
}

#[derive(Args, Debug)]
pub struct TargetArgs {
    /// Search config (TOML).
    #[arg(short, long)]
    pub config: PathBuf,
    /// Target architecture (e.g. sm_90a); default: the config's, where `auto` means the
    /// GPU's own, else sm_90a.
    #[arg(long)]
    pub arch: Option<String>,
}

#[derive(Args, Debug)]
pub struct GenomeArgs {
    /// Genome as NAME=value,NAME=value (every knob; one with a family `[defaults]` entry
    /// may be left out, as in genomes recorded before it existed).
    #[arg(short, long)]
    pub genome: Option<String>,
    /// Instead of --genome: this many random valid genomes.
    #[arg(long, conflicts_with = "genome")]
    pub random: Option<usize>,
    /// Seed for --random.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// A speedup for `--min-speedup`: a finite number of at least 0.
fn parse_speedup(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!(
            "`{text}` is not a speedup: give a number of at least 0 (1.05: evo's kernels where they measured 5% faster than PyTorch's SDPA; 0 keeps them everywhere)"
        )),
    }
}
