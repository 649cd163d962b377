//! The orchestrator's side of the workers: one disposable worker process per GPU,
//! spoken to in JSON lines, watched by a deadline.
//!
//! `Pool::evaluate` never fails: a worker that does not answer in time is killed and
//! the variant is `timed_out`; a worker that dies (a fault, an abort) gives `crashed`
//! with its exit status and the end of its stderr; a worker that reports a sticky CUDA
//! error exits by itself. In every case the next job starts a fresh worker, so one bad
//! kernel never stops a run.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use evo_core::config::TimeoutConfig;
use evo_gpu::device::DeviceInfo;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, Mutex};

use crate::protocol::{Job, JobResult, Request, Response};
use crate::Status;

/// How to start the worker of one GPU.
#[derive(Clone, Debug)]
pub struct WorkerCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl WorkerCommand {
    /// `<this executable> worker --gpu <gpu>`.
    pub fn evo_worker(gpu: u32) -> std::io::Result<WorkerCommand> {
        Ok(WorkerCommand {
            program: std::env::current_exe()?,
            args: vec!["worker".into(), "--gpu".into(), gpu.to_string()],
        })
    }
}

/// Lines of a worker's stderr kept for crash reports.
const STDERR_TAIL: usize = 30;

struct Proc {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: Arc<StdMutex<VecDeque<String>>>,
}

impl Proc {
    fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().expect("stderr lock");
        tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    async fn kill(mut self) -> String {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        // Give the stderr reader a moment to drain.
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.stderr_tail()
    }
}

struct Slot {
    gpu: u32,
    command: WorkerCommand,
    proc: Option<Proc>,
    device: Option<DeviceInfo>,
    starts: u32,
    /// Time spent running jobs on this worker (its GPU's busy time).
    busy: Duration,
}

/// Worker processes, one per GPU, shared by concurrent `evaluate` calls.
pub struct Pool {
    slots: Vec<Mutex<Slot>>,
    free_tx: mpsc::UnboundedSender<usize>,
    free_rx: Mutex<mpsc::UnboundedReceiver<usize>>,
    timeouts: TimeoutConfig,
}

impl Pool {
    /// A pool with one worker per `(gpu, command)`; processes start on first use.
    pub fn new(workers: Vec<(u32, WorkerCommand)>, timeouts: TimeoutConfig) -> Pool {
        let (free_tx, free_rx) = mpsc::unbounded_channel();
        let slots = workers
            .into_iter()
            .enumerate()
            .map(|(i, (gpu, command))| {
                free_tx.send(i).expect("receiver alive");
                Mutex::new(Slot {
                    gpu,
                    command,
                    proc: None,
                    device: None,
                    starts: 0,
                    busy: Duration::ZERO,
                })
            })
            .collect();
        Pool {
            slots,
            free_tx,
            free_rx: Mutex::new(free_rx),
            timeouts,
        }
    }

    pub fn size(&self) -> usize {
        self.slots.len()
    }

    /// How long a job may take before its worker is killed.
    pub fn deadline(&self, job: &Job) -> Duration {
        let t = &self.timeouts;
        let timed =
            job.timing
                .as_ref()
                .map_or(0, |_| job.shapes.iter().filter(|s| s.timed).count()) as f64;
        let timing_budget = job
            .timing
            .as_ref()
            .map_or(0.0, |p| (p.budget_ms + p.warmup_ms) / 1e3);
        let secs = t.job_base_s
            + t.per_shape_s * job.shapes.len() as f64
            + timed * (t.per_timed_shape_s + timing_budget);
        Duration::from_secs_f64(secs)
    }

    /// Per worker: its GPU and the time it spent running jobs so far (divide by the wall
    /// time for the GPU's busy fraction).
    pub async fn busy(&self) -> Vec<(u32, Duration)> {
        let mut v = Vec::new();
        for s in &self.slots {
            let s = s.lock().await;
            v.push((s.gpu, s.busy));
        }
        v
    }

    /// Processes started so far on each slot (restarts included).
    pub async fn starts(&self) -> Vec<u32> {
        let mut v = Vec::new();
        for s in &self.slots {
            v.push(s.lock().await.starts);
        }
        v
    }

    /// The device each started worker reported.
    pub async fn devices(&self) -> Vec<Option<DeviceInfo>> {
        let mut v = Vec::new();
        for s in &self.slots {
            v.push(s.lock().await.device.clone());
        }
        v
    }

    /// The index of the next free worker, waiting for one; give it back with `free_tx`.
    async fn next_free(&self) -> usize {
        self.free_rx
            .lock()
            .await
            .recv()
            .await
            .expect("pool owns a sender")
    }

    /// Evaluates one job on the next free worker.
    pub async fn evaluate(&self, job: Job) -> JobResult {
        let index = self.next_free().await;
        let deadline = self.deadline(&job);
        let result = {
            let mut slot = self.slots[index].lock().await;
            let startup = Duration::from_secs_f64(self.timeouts.startup_s);
            let began = std::time::Instant::now();
            let r = slot.run(job, deadline, startup).await;
            slot.busy += began.elapsed();
            r
        };
        let _ = self.free_tx.send(index);
        // Where a variant's evaluation time goes (a slow gate shows up here first).
        let slowest = result
            .shapes
            .iter()
            .max_by(|a, b| a.check_ms.total_cmp(&b.check_ms));
        tracing::info!(
            job = result.id,
            status = ?result.status,
            elapsed_ms = result.elapsed_ms.round(),
            check_ms = result.check_ms.round(),
            timing_ms = result.timing_ms.round(),
            slowest_check_ms = slowest.map_or(0.0, |s| s.check_ms.round()),
            slowest_check_shape = %slowest.map(|s| evo_core::Genome::from_vars(s.vars.clone()).canonical()).unwrap_or_default(),
            stages_ms = %result
                .stages_ms
                .iter()
                .map(|(k, v)| format!("{k}={v:.0}"))
                .collect::<Vec<_>>()
                .join(" "),
            "evaluated"
        );
        result
    }

    /// Runs `work` (blocking, on a thread of its own) with the GPU of the next free worker
    /// and that worker's program, the worker kept idle meanwhile: a tool that launches
    /// kernels in its own process (compute-sanitizer) never shares a GPU with a timing.
    pub async fn with_idle_gpu<T: Send + 'static>(
        &self,
        work: impl FnOnce(u32, PathBuf) -> T + Send + 'static,
    ) -> T {
        let index = self.next_free().await;
        let result = {
            let mut slot = self.slots[index].lock().await;
            let (gpu, program) = (slot.gpu, slot.command.program.clone());
            let began = std::time::Instant::now();
            let r = tokio::task::spawn_blocking(move || work(gpu, program))
                .await
                .expect("tool thread");
            slot.busy += began.elapsed();
            r
        };
        let _ = self.free_tx.send(index);
        result
    }

    /// Asks every worker to stop, then kills those that do not.
    pub async fn shutdown(&self) {
        for s in &self.slots {
            let mut slot = s.lock().await;
            if let Some(mut p) = slot.proc.take() {
                let line = serde_json::to_string(&Request::Shutdown).expect("serializes") + "\n";
                let _ = p.stdin.write_all(line.as_bytes()).await;
                let _ = p.stdin.flush().await;
                if tokio::time::timeout(Duration::from_secs(5), p.child.wait())
                    .await
                    .is_err()
                {
                    p.kill().await;
                }
            }
        }
    }
}

impl Slot {
    async fn start(&mut self, startup: Duration) -> Result<(), String> {
        let mut child = Command::new(&self.command.program)
            .args(&self.command.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group: a Ctrl-C in the terminal (or `timeout -s INT`)
            // signals the foreground group, and must stop the orchestrator gracefully,
            // not kill the worker mid-evaluation (which would read as `crashed`).
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.command.program.display()))?;
        self.starts += 1;
        let stdin = child.stdin.take().expect("piped");
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let stderr_pipe = child.stderr.take().expect("piped");
        let stderr = Arc::new(StdMutex::new(VecDeque::new()));
        let tail = stderr.clone();
        let gpu = self.gpu;
        tokio::spawn(async move {
            let mut err_lines = BufReader::new(stderr_pipe).lines();
            while let Ok(Some(line)) = err_lines.next_line().await {
                tracing::debug!(gpu, "worker: {line}");
                let mut t = tail.lock().expect("stderr lock");
                if t.len() == STDERR_TAIL {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
        let ready = tokio::time::timeout(startup, lines.next_line()).await;
        let mut proc = Proc {
            child,
            stdin,
            lines,
            stderr,
        };
        match ready {
            Ok(Ok(Some(line))) => match serde_json::from_str::<Response>(&line) {
                Ok(Response::Ready { device, .. }) => {
                    self.device = device;
                    self.proc = Some(proc);
                    Ok(())
                }
                _ => {
                    let tail = proc.kill().await;
                    Err(format!(
                        "worker said {line:?} instead of ready; stderr:\n{tail}"
                    ))
                }
            },
            Ok(_) => {
                let status = proc
                    .child
                    .wait()
                    .await
                    .map(|s| s.to_string())
                    .unwrap_or_default();
                tokio::time::sleep(Duration::from_millis(50)).await;
                Err(format!(
                    "worker exited ({status}) before it was ready; stderr:\n{}",
                    proc.stderr_tail()
                ))
            }
            Err(_) => {
                let tail = proc.kill().await;
                Err(format!(
                    "worker not ready within {startup:?}; stderr:\n{tail}"
                ))
            }
        }
    }

    async fn run(&mut self, job: Job, deadline: Duration, startup: Duration) -> JobResult {
        let id = job.id;
        if self.proc.is_none() {
            if let Err(why) = self.start(startup).await {
                return JobResult::failed(
                    id,
                    Status::Crashed,
                    None,
                    format!("GPU {} worker did not start: {why}", self.gpu),
                );
            }
        }
        let mut proc = self.proc.take().expect("started above");
        let line =
            serde_json::to_string(&Request::Evaluate(Box::new(job))).expect("serializes") + "\n";
        if let Err(e) = async {
            proc.stdin.write_all(line.as_bytes()).await?;
            proc.stdin.flush().await
        }
        .await
        {
            let tail = proc.kill().await;
            return JobResult::failed(
                id,
                Status::Crashed,
                None,
                format!("cannot send the job to the worker: {e}; stderr:\n{tail}"),
            );
        }
        match tokio::time::timeout(deadline, proc.lines.next_line()).await {
            Ok(Ok(Some(answer))) => match serde_json::from_str::<Response>(&answer) {
                Ok(Response::Result(r)) if r.id == id => {
                    if r.status == Status::Crashed {
                        // The worker exits after a sticky error; reap it.
                        proc.kill().await;
                    } else {
                        self.proc = Some(proc);
                    }
                    *r
                }
                _ => {
                    let tail = proc.kill().await;
                    JobResult::failed(
                        id,
                        Status::Crashed,
                        None,
                        format!("worker answered {answer:?}; stderr:\n{tail}"),
                    )
                }
            },
            Ok(_) => {
                let status = proc
                    .child
                    .wait()
                    .await
                    .map(|s| s.to_string())
                    .unwrap_or_default();
                tokio::time::sleep(Duration::from_millis(50)).await;
                JobResult::failed(
                    id,
                    Status::Crashed,
                    None,
                    format!(
                        "worker died ({status}) during the evaluation; stderr:\n{}",
                        proc.stderr_tail()
                    ),
                )
            }
            Err(_) => {
                proc.kill().await;
                JobResult::failed(
                    id,
                    Status::TimedOut,
                    None,
                    format!(
                        "no answer within {:.1} s; the worker was killed",
                        deadline.as_secs_f64()
                    ),
                )
            }
        }
    }
}
