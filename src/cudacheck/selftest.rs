//! `specdeck cuda-check`: the CUDA backend's checks and timings on the GPU machine, each
//! section independent (a failure is recorded and the next section runs). Results go to
//! `<out>/cuda-check.json`; a short table is printed last.
//!
//! Sections: probe; kernel-compile (cold and cached); conformance (every seam op against
//! the CPU reference); graphs (a decode step replayed from a CUDA graph equals the eager
//! step, and its time per step); bandwidth (device-to-device copy); gemm (skinny kernel
//! and cuBLAS on Llama-3.1-8B shapes, after `skinnycheck`'s bit-for-bit promises); model-logits and speculative-greedy (the engine's
//! model code on CUDA against the CPU reference and against itself, `modelcheck`);
//! deepseek-logits and deepseek-logits-deterministic (with `--deepseek-models`: the
//! DeepSeek-V3 family's forward against the host reference, `deepseekcheck`, by default and
//! with every matmul through the skinny kernels);
//! large-model-steps and large-model-engine (with `--large-model`: decode tokens/s against
//! the HBM floor, graphs, verify/decode step cost, cold start and relaunch);
//! tensor-parallel (2+ GPUs, `tpcheck`); teardown (NVML memory back at its baseline once
//! everything is dropped).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{json, Value};

use super::deepseekcheck::deepseek_check;
use super::modelcheck::{large_model_engine, large_model_steps, logits_check, spec_equality, write_small_models, Verdict};
use super::skinnycheck::skinny_bits;
use super::step::{Dims, ToyStep};
use super::tpcheck::{tp_check, tp_model_check};
use crate::backend::conformance::compare_backends;
use crate::backend::cpu::CpuBackend;
use crate::backend::cuda::compile::{compile_then, default_include_paths, nvrtc_version, CompileTarget, CompiledModule, PtxCache};
use crate::backend::cuda::gemm::{GemvJob, Input, MatmulPath, Segment, GEMV_CONFIGS};
use crate::backend::cuda::gpu::{release_pool_memory, Gpu};
use crate::backend::cuda::peer::MAX_VALUES;
use crate::backend::cuda::probe::{probe, CudaInventory};
use crate::backend::cuda::shard::RankInfo;
use crate::backend::cuda::sources::SOURCES;
use crate::backend::cuda::tp::open_group;
use crate::backend::cuda::CudaBackend;
use crate::backend::nvml::Inventory;
use crate::backend::{Backend, BackendError};
use crate::model::checkpoint::Checkpoint;

/// One line of the closing table.
struct Row {
    name: String,
    value: String,
    verdict: &'static str,
}

struct Report {
    sections: serde_json::Map<String, Value>,
    rows: Vec<Row>,
    /// Sections to run (all when `None`); probe, kernel-compile and teardown always run.
    only: Option<Vec<String>>,
}

impl Report {
    fn row(&mut self, name: impl Into<String>, value: impl Into<String>, ok: Option<bool>) {
        let verdict = match ok {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "-",
        };
        self.rows.push(Row { name: name.into(), value: value.into(), verdict });
    }

    fn section(&mut self, name: &str, f: impl FnOnce(&mut Report) -> anyhow::Result<Value>) {
        let always = ["probe", "kernel-compile", "context-baseline", "teardown"].contains(&name);
        if !always && self.only.as_ref().is_some_and(|only| !only.iter().any(|s| s == name)) {
            return;
        }
        *CURRENT_SECTION.lock().unwrap_or_else(|p| p.into_inner()) = name.to_string();
        let started = Instant::now();
        // A panic in one section (an engine assertion, say) is that section's failure; the
        // next sections still run.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self)))
            .unwrap_or_else(|p| Err(anyhow::anyhow!("panicked: {}", panic_text(&p))));
        let value = match outcome {
            Ok(v) => v,
            Err(e) => {
                self.row(name, format!("error: {e:#}"), Some(false));
                json!({ "error": format!("{e:#}") })
            }
        };
        eprintln!("cuda-check: {name} done in {:.1} s", started.elapsed().as_secs_f64());
        self.sections.insert(name.to_string(), json!({ "seconds": started.elapsed().as_secs_f64(), "result": value }));
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_else(|| "(no message)".into())
}

/// NVML's used-memory figure per GPU (empty when NVML is absent).
pub fn nvml_used() -> Vec<u64> {
    let Ok(nvml) = Inventory::open() else { return Vec::new() };
    (0..nvml.count().unwrap_or(0)).filter_map(|i| nvml.reading(i).ok().map(|g| g.memory_used_bytes)).collect()
}

/// What to check beyond the always-run sections.
pub struct Options {
    /// Folder for cuda-check.json.
    pub out: Option<PathBuf>,
    /// A large checkpoint (the GPU script writes an 8B-shaped one) for the decode, start-up
    /// and step-cost figures.
    pub large_model: Option<PathBuf>,
    /// A folder of DeepSeek-V3-family checkpoints (testdata/deepseek) to run on CUDA
    /// against the CPU reference.
    pub deepseek_models: Option<PathBuf>,
    pub new_tokens: usize,
    /// Run only these sections (besides probe, kernel-compile and teardown).
    pub sections: Option<Vec<String>>,
}

/// The section under way, named when the check is interrupted.
static CURRENT_SECTION: Mutex<String> = Mutex::new(String::new());

/// Exit status of a check ended by SIGINT or SIGTERM (128 + SIGINT, as shells report it).
pub const INTERRUPTED: i32 = 130;

/// Ctrl-C (SIGINT) or SIGTERM ends the check at once with status 130 and a line naming
/// the section it interrupted. Installing a handler also overrides an inherited "ignore"
/// disposition: a non-interactive shell starts `cmd &` with SIGINT ignored, and the check
/// would otherwise run to its end. The exit skips atexit handlers (`_exit`): another
/// thread may be inside the CUDA driver (a weight upload), and the driver's own exit
/// handlers must not run under it; the kernel closes the device and the driver frees
/// every allocation of the process, which the GPU script checks with nvidia-smi.
fn exit_on_interrupt() -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new().name("cuda-check-signals".into()).spawn(move || {
        if let Some(sig) = signals.forever().next() {
            let section = CURRENT_SECTION.lock().map(|s| s.clone()).unwrap_or_default();
            let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
            eprintln!("cuda-check: interrupted by {name} during section {section}; exiting with status {INTERRUPTED}");
            // SAFETY: `_exit` ends the process without running any handler (see above).
            unsafe { libc::_exit(INTERRUPTED) };
        }
    })?;
    Ok(())
}

/// The `cuda-check` subcommand.
pub fn command(opts: &Options) -> anyhow::Result<i32> {
    exit_on_interrupt()?;
    run(opts)
}

pub fn run(opts: &Options) -> anyhow::Result<i32> {
    let mut r = Report { sections: serde_json::Map::new(), rows: Vec::new(), only: opts.sections.clone() };
    let baseline = nvml_used();
    let inventory = match probe() {
        Ok(inv) => inv,
        Err(e) => {
            eprintln!("specdeck cuda-check: CUDA is not usable here: {e}");
            return Ok(2);
        }
    };
    r.section("probe", |r| {
        let g = &inventory.gpus[0];
        r.row("gpu", format!("{} x{} ({})", g.name, inventory.gpus.len(), g.arch()), None);
        Ok(json!({ "gpus": inventory.gpus.iter().map(|g| json!({"name": g.name, "arch": g.arch(), "memory": g.total_memory_bytes})).collect::<Vec<_>>(), "nvml_used_baseline": baseline }))
    });
    let mut modules: Vec<CompiledModule> = Vec::new();
    let mut compile_s = 0.0;
    r.section("kernel-compile", |r| {
        let (m, cold) = compile_twice(r, &inventory)?;
        modules = m;
        compile_s = cold;
        Ok(json!({ "modules": modules.len(), "cold_s": cold }))
    });
    if modules.is_empty() {
        return finish(r, opts.out.as_deref());
    }
    let gpus = if inventory.gpus.len() >= 2 && inventory.nccl_present { inventory.gpus.len() } else { 1 };
    let (mut contexts_only, mut context_baseline) = (Vec::new(), Vec::new());
    r.section("context-baseline", |_| {
        (contexts_only, context_baseline) = warm_contexts(&modules, gpus)?;
        Ok(json!({ "nvml_used": context_baseline, "nvml_used_before_the_group": contexts_only }))
    });
    match CudaBackend::open(0, &modules, RankInfo::single(), None) {
        Err(e) => r.row("open GPU 0", format!("error: {e}"), Some(false)),
        Ok(backend) => gpu_sections(&mut r, Arc::new(backend), &modules, opts),
    }
    if let Some(dir) = opts.large_model.as_deref() {
        r.section("large-model-engine", |r| verdicts(r, large_model_engine(&modules, dir, compile_s, opts.new_tokens)?));
    }
    if gpus >= 2 {
        r.section("tensor-parallel", |r| verdicts(r, tp_check(&modules, gpus)?));
        // The small model's 4 heads / 2 KV heads split over 2 ranks.
        r.section("tensor-parallel-model", |r| {
            let small = std::env::temp_dir().join(format!("specdeck-tp-small-{}", std::process::id()));
            write_small_models(&small)?;
            let result = tp_model_check(&modules, &small, 2);
            let _ = std::fs::remove_dir_all(&small);
            verdicts(r, result?)
        });
    }
    drop(modules);
    r.section("teardown", |r| {
        for ordinal in 0..gpus {
            release_pool_memory(ordinal)?;
        }
        let after = nvml_used();
        let ok = teardown_ok(&after, &context_baseline);
        r.row(
            "NVML used after drop vs open contexts (MiB)",
            format!(
                "{:?} vs {:?} (contexts before a TP group {:?}; process start {:?})",
                mib(&after),
                mib(&context_baseline),
                mib(&contexts_only),
                mib(&baseline)
            ),
            Some(ok),
        );
        Ok(json!({ "process_baseline": baseline, "context_baseline": context_baseline, "after": after,
                   "contexts_before_the_group": contexts_only,
                   "compared_with": "context_baseline: NVML once every GPU's CUDA context, and with 2+ GPUs one tensor-parallel group, was opened and closed" }))
    });
    finish(r, opts.out.as_deref())
}

/// Slack for NVML comparisons: kernels that cuBLAS loads lazily on first use stay in the
/// context, and NVML counts in 2 MiB pages.
const NVML_SLACK_BYTES: u64 = 64 << 20;

/// Everything dropped: each GPU uses no more than it did with only its context alive
/// (less is fine: the context itself may be gone).
fn teardown_ok(after: &[u64], context_baseline: &[u64]) -> bool {
    !after.is_empty()
        && after.len() == context_baseline.len()
        && after.iter().zip(context_baseline).all(|(a, c)| *a <= c + NVML_SLACK_BYTES)
}

/// NVML used memory with a CUDA context open on GPUs `0 .. gpus` and nothing of ours
/// allocated: the reference for the teardown check. Each GPU is opened as the backend
/// opens it, runs a kernel and a cuBLAS matmul, and is closed again; with 2+ GPUs a
/// tensor-parallel group is then opened, all-reduces once through peer memory and once
/// through NCCL, and is dropped. What stays is what the libraries keep in a context until
/// the process exits, once: the CUDA runtime that cuBLAS carries retains the device's
/// primary context (about 0.5 GiB), and NCCL's first communicator leaves more in it (about
/// 0.37 GiB on each H200 of a pair). Comparing with the process-start figure would only measure those; comparing with
/// this, every later group, engine and relaunch must leave nothing. Returns NVML before the
/// group and after it (the reference).
fn warm_contexts(modules: &[CompiledModule], gpus: usize) -> anyhow::Result<(Vec<u64>, Vec<u64>)> {
    for ordinal in 0..gpus {
        let b = CudaBackend::open(ordinal, modules, RankInfo::single(), None)?;
        let x = b.tensor(16, 64)?;
        let mut y = b.tensor(16, 64)?;
        let w = super::step::random_weight(&b, &[64, 64], 1, 0.1)?;
        b.matmul(&x, &w, None, 16, &mut y);
        b.sync()?;
    }
    for ordinal in 0..gpus {
        release_pool_memory(ordinal)?;
    }
    let contexts_only = nvml_used();
    if gpus >= 2 {
        let group = open_group(Some(modules), gpus)?;
        let reduced: Vec<Result<(), BackendError>> = std::thread::scope(|s| {
            let handles: Vec<_> = group
                .iter()
                .map(|b| {
                    s.spawn(move || {
                        // One vector the peer path carries, one only NCCL does.
                        for len in [1024, MAX_VALUES + 1] {
                            let mut v = b.tensor(1, len)?;
                            b.all_reduce(&mut v, 1);
                        }
                        b.sync()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(BackendError::Device("a rank's thread panicked".into())))).collect()
        });
        reduced.into_iter().collect::<Result<Vec<()>, _>>()?;
    }
    for ordinal in 0..gpus {
        release_pool_memory(ordinal)?;
    }
    Ok((contexts_only, nvml_used()))
}

/// Bytes of weights a decode step must read: the checkpoint less the embedding table (one
/// row of it is gathered), unless that table is also the lm_head.
fn decode_read_bytes(dir: &Path) -> anyhow::Result<u64> {
    let ck = Checkpoint::open(dir).map_err(BackendError::from)?;
    let embed = match (ck.meta("model.embed_tokens.weight"), ck.contains("lm_head.weight")) {
        (Some(m), true) => (m.end - m.start) as u64,
        _ => 0,
    };
    Ok(ck.total_bytes() - embed)
}

/// The sections that share one backend on GPU 0.
fn gpu_sections(r: &mut Report, backend: Arc<CudaBackend>, modules: &[CompiledModule], opts: &Options) {
    let mut gbps = 0.0;
    r.section("conformance", |r| conformance(r, &backend));
    r.section("graphs", |r| graphs(r, &backend));
    r.section("bandwidth", |r| {
        let (v, g) = bandwidth(r, backend.gpu())?;
        gbps = g;
        Ok(v)
    });
    r.section("gemm", |r| gemm(r, &backend));
    let small = std::env::temp_dir().join(format!("specdeck-small-models-{}", std::process::id()));
    let write_small = || -> anyhow::Result<()> {
        if !small.join("target").is_dir() {
            write_small_models(&small)?;
        }
        Ok(())
    };
    r.section("model-logits", |r| {
        write_small()?;
        verdicts(r, logits_check(backend.clone(), &small.join("target"))?)
    });
    r.section("speculative-greedy", |r| {
        write_small()?;
        let engine_backend = CudaBackend::open(0, modules, RankInfo::single(), None)?;
        verdicts(r, spec_equality(engine_backend, &small, 48)?)
    });
    let _ = std::fs::remove_dir_all(&small);
    if let Some(root) = opts.deepseek_models.as_deref() {
        // By default, then with every matmul through the skinny kernels, whose products are
        // x's f32 values to about 2^-22 at any row count: the prompt's activations are not
        // rounded to bf16 for cuBLAS, which moves a random checkpoint's near-tied routes.
        for (section, deterministic, mode) in [("deepseek-logits", false, ""), ("deepseek-logits-deterministic", true, " (deterministic)")]
        {
            r.section(section, |r| {
                let dirs = deepseek_dirs(root)?;
                let dirs: Vec<&Path> = dirs.iter().map(|d| d.as_path()).collect();
                backend.set_deterministic(deterministic);
                let checked = deepseek_check(backend.clone(), &dirs, mode);
                backend.set_deterministic(false);
                verdicts(r, checked?)
            });
        }
    }
    if let Some(dir) = opts.large_model.as_deref() {
        let floor_gbps = gbps;
        r.section("large-model-steps", |r| {
            anyhow::ensure!(floor_gbps > 0.0, "the HBM floor needs the bandwidth section in the same run");
            let bytes = decode_read_bytes(dir)? as f64;
            verdicts(r, large_model_steps(backend.clone(), dir, floor_gbps * 1e9 / bytes.max(1.0), opts.new_tokens)?)
        });
    }
}

/// The checkpoint folders under `root`, in name order.
fn deepseek_dirs(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut dirs: Vec<PathBuf> =
        std::fs::read_dir(root)?.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.join("config.json").is_file()).collect();
    dirs.sort();
    Ok(dirs)
}

fn verdicts(r: &mut Report, (list, value): (Vec<Verdict>, Value)) -> anyhow::Result<Value> {
    for v in list {
        r.row(v.name, v.value, v.ok);
    }
    Ok(value)
}

fn mib(v: &[u64]) -> Vec<u64> {
    v.iter().map(|b| b >> 20).collect()
}

fn finish(mut r: Report, out: Option<&Path>) -> anyhow::Result<i32> {
    let failed = r.rows.iter().filter(|row| row.verdict == "FAIL").count();
    let table: Vec<Value> = r.rows.iter().map(|row| json!({ "check": row.name, "verdict": row.verdict, "value": row.value })).collect();
    r.sections.insert("table".into(), Value::Array(table));
    if let Some(dir) = out {
        std::fs::create_dir_all(dir)?;
        let path: PathBuf = dir.join("cuda-check.json");
        std::fs::write(&path, serde_json::to_string_pretty(&Value::Object(r.sections.clone()))?)?;
        eprintln!("cuda-check: wrote {}", path.display());
    }
    let w = r.rows.iter().map(|row| row.name.len()).max().unwrap_or(10);
    for row in &r.rows {
        println!("{:<w$}  {:<4}  {}", row.name, row.verdict, row.value);
    }
    println!("cuda-check: {} checks, {failed} failed", r.rows.iter().filter(|row| row.verdict != "-").count());
    Ok(if failed == 0 { 0 } else { 1 })
}

/// The modules, and the cold compile's seconds.
fn compile_twice(r: &mut Report, inventory: &CudaInventory) -> anyhow::Result<(Vec<CompiledModule>, f64)> {
    let target = CompileTarget {
        arch: inventory.gpus[0].arch(),
        include_paths: default_include_paths(),
        nvrtc_version: nvrtc_version().map_err(anyhow::Error::msg)?,
    };
    // A fresh cache folder, so the first compile is really cold.
    let dir = std::env::temp_dir().join(format!("specdeck-cuda-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = PtxCache::new(&dir);
    let compile = || compile_then(SOURCES, &target, Some(&cache), &|_| {}, |_| Ok(())).map_err(|e| anyhow::anyhow!(e.to_string()));
    let t0 = Instant::now();
    compile()?;
    let cold = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let (modules, _) = compile()?;
    let warm = t1.elapsed().as_secs_f64();
    let all_cached = modules.iter().all(|m| m.from_cache);
    let _ = std::fs::remove_dir_all(&dir);
    r.row("kernel-compile cold / cached (s)", format!("{cold:.3} / {warm:.3}"), Some(all_cached));
    Ok((modules, cold))
}

fn conformance(r: &mut Report, backend: &CudaBackend) -> anyhow::Result<Value> {
    let checks = compare_backends(&CpuBackend, backend, 11)?;
    let failed: Vec<String> = checks.iter().filter(|c| !c.ok).map(|c| format!("{} ({:.2e})", c.op, c.rel_err)).collect();
    let worst = checks.iter().map(|c| c.rel_err).fold(0.0, f64::max);
    r.row(
        format!("ops vs CPU reference ({} checks)", checks.len()),
        if failed.is_empty() { format!("worst rel. error {worst:.2e}") } else { failed.join(", ") },
        Some(failed.is_empty()),
    );
    Ok(serde_json::to_value(&checks)?)
}

fn graphs(r: &mut Report, backend: &CudaBackend) -> anyhow::Result<Value> {
    let dims = || Dims { hidden: 2048, heads: 16, kv_heads: 4, head_dim: 128, intermediate: 5632, vocab: 32000, slots: 256 };
    let steps = 64;
    // A first pass chooses the skinny-kernel configurations (timed on first use), so the
    // timed passes below compare like with like.
    ToyStep::new(backend, dims())?.decode(backend, 7, 2, false)?;
    let mut eager = ToyStep::new(backend, dims())?;
    let t = Instant::now();
    let (tokens_eager, a_eager) = eager.decode(backend, 7, steps, false)?;
    let eager_ms = t.elapsed().as_secs_f64() * 1e3 / steps as f64;
    let mut graphed = ToyStep::new(backend, dims())?;
    let t = Instant::now();
    let (tokens_graph, a_graph) = graphed.decode(backend, 7, steps, true)?;
    let graph_ms = t.elapsed().as_secs_f64() * 1e3 / steps as f64;
    let same = tokens_eager == tokens_graph && a_eager == a_graph;
    let captured = backend.graphs.captured();
    // The graph points into `graphed`'s buffers, which go away with this section.
    backend.graph_reset();
    let verdict = format!("{} ({captured} graph captured)", if same { "identical" } else { "DIFFERENT" });
    r.row("graph replay == eager (64 toy decode steps)", verdict, Some(same && captured == 1));
    r.row("toy decode step eager / graph (ms)", format!("{eager_ms:.3} / {graph_ms:.3}"), None);
    let cpu = ToyStep::new(&CpuBackend, dims())?.decode(&CpuBackend, 7, steps, false)?;
    let agree = cpu.0.iter().zip(&tokens_eager).take_while(|(a, b)| a == b).count();
    r.row("toy greedy tokens agreeing with CPU", format!("{agree} of {}", steps + 1), None);
    Ok(
        json!({ "tokens_eager": tokens_eager, "tokens_graph": tokens_graph, "tokens_cpu": cpu.0, "eager_ms": eager_ms, "graph_ms": graph_ms, "captured": captured }),
    )
}

/// Device-to-device copy bandwidth, counting bytes read plus bytes written (GB/s).
fn bandwidth(r: &mut Report, gpu: &Gpu) -> anyhow::Result<(Value, f64)> {
    let bytes = 2usize << 30;
    let src = gpu.alloc::<u8>(bytes, "bandwidth source")?;
    let dst = gpu.alloc::<u8>(bytes, "bandwidth destination")?;
    gpu.bind();
    let ms = gpu.time_ms(10, || {
        // SAFETY: both buffers hold `bytes` bytes.
        unsafe { cudarc::driver::result::memcpy_dtod_async(dst.ptr(), src.ptr(), bytes, gpu.stream.cu_stream()) }
            .map_err(|e| BackendError::Device(format!("copy: {e}")))
    })?;
    let gbps = 2.0 * bytes as f64 / (ms * 1e-3) / 1e9;
    r.row("device copy bandwidth (GB/s, read+write)", format!("{gbps:.0}"), None);
    Ok((json!({ "bytes": bytes, "ms": ms, "gb_per_s": gbps }), gbps))
}

/// The matmul widths of one model: hidden, the k and v width, intermediate, vocabulary.
struct Widths {
    model: &'static str,
    hidden: usize,
    kv: usize,
    inter: usize,
    vocab: usize,
}

/// Llama-3.1-8B (issue 6's decode target) and Qwen2.5-1.5B (its real-weights target, where
/// every matmul is small enough for the chain of dependent loads to show).
const GEMM_MODELS: [Widths; 2] = [
    Widths { model: "8B", hidden: 4096, kv: 1024, inter: 14336, vocab: 128256 },
    Widths { model: "Qwen 1.5B", hidden: 1536, kv: 256, inter: 8960, vocab: 151936 },
];

/// The matmul shapes of [`GEMM_MODELS`] at decode (1 row) and verify (5 rows), through each
/// skinny-kernel configuration and cuBLAS: time per path, the configuration the backend's
/// first-use timing picks, and the weight-read rate of the fastest. The weights are zeros
/// (the rate of reading memory does not depend on its contents).
fn gemm(r: &mut Report, backend: &CudaBackend) -> anyhow::Result<Value> {
    let gpu = backend.gpu();
    let check = skinny_bits(backend)?;
    let same = |ok: bool| if ok { "identical" } else { "DIFFERENT" };
    r.row(
        "skinny matmul bits, rows 1-8 x configurations (plain, gate-up, rope)",
        same(check.rows_and_configs_equal),
        Some(check.rows_and_configs_equal),
    );
    r.row("skinny matmul bits, 2-way K split summed vs whole K", same(check.split_sum_equal), Some(check.split_sum_equal));
    r.row(
        "skinny matmul bits, adding into the output vs the product added on the host",
        same(check.accumulate_equal),
        Some(check.accumulate_equal),
    );
    r.row(
        format!("skinny matmul vs f64 reference, K {} (rel. error)", super::skinnycheck::K),
        format!("{:.2e}", check.rel_err),
        Some(check.rel_err < 1e-3),
    );
    let mut out = vec![check.detail];
    for widths in &GEMM_MODELS {
        out.extend(gemm_shapes(r, backend, widths)?);
    }
    gpu.take_error()?;
    Ok(Value::Array(out))
}

/// Row counts the gemm section times: decode and verify steps, and batches of 16 and 64 rows
/// that the skinny kernels take in groups of 8 under `--enable-deterministic-inference`.
const TIMED_ROWS: [usize; 4] = [1, 5, 16, 64];

fn gemm_shapes(r: &mut Report, backend: &CudaBackend, widths: &Widths) -> anyhow::Result<Vec<Value>> {
    let gpu = backend.gpu();
    let Widths { model, hidden, kv, inter, vocab } = *widths;
    let w = gpu.alloc::<half::bf16>(vocab * hidden, "gemm weights")?;
    let most = *TIMED_ROWS.iter().max().expect("row counts");
    let x = gpu.alloc::<f32>(most * inter, "gemm input")?;
    let y = gpu.alloc::<f32>(most * vocab, "gemm output")?;
    let seg =
        |w_at: usize, y_at: usize, n_out: usize| Segment { w: w.ptr_at(w_at), bias: None, out: y.ptr_at(y_at), n_out, accumulate: false };
    let qkv = [seg(0, 0, hidden), seg(hidden * hidden, most * hidden, kv), seg((hidden + kv) * hidden, most * (hidden + kv), kv)];
    let o = [seg(0, 0, hidden)];
    let lm_head = [seg(0, 0, vocab)];
    let gate_up = GemvJob::GateUp { gate: w.ptr(), up: w.ptr_at(inter * hidden), act: y.ptr(), n_out: inter };
    let shapes: [(&str, GemvJob<'_>, usize, usize); 5] = [
        ("q,k,v", GemvJob::Segments(&qkv), hidden, (hidden + 2 * kv) * hidden),
        ("o", GemvJob::Segments(&o), hidden, hidden * hidden),
        ("gate+up+silu", gate_up, hidden, 2 * inter * hidden),
        ("down", GemvJob::Segments(&o), inter, hidden * inter),
        ("lm_head", GemvJob::Segments(&lm_head), hidden, vocab * hidden),
    ];
    let mut out = Vec::new();
    for rows in TIMED_ROWS {
        for (name, job, k_in, elems) in shapes {
            let input = Input { x: x.ptr(), rows, k_in, k_full: k_in };
            let path_ms = |path| {
                gpu.time_ms(10, || {
                    backend.matmuls.run_path(gpu, input, job, path);
                    Ok(())
                })
            };
            let mut timed: Vec<(String, f64)> = Vec::new();
            for config in GEMV_CONFIGS {
                timed.push((config.plain.trim_start_matches("gemv_").to_string(), path_ms(MatmulPath::Gemv(config))?));
            }
            if matches!(job, GemvJob::Segments(_)) {
                timed.push(("cublas".into(), path_ms(MatmulPath::Cublas)?));
            }
            let picked = backend.matmuls.config_for(gpu, input, job, true).plain.trim_start_matches("gemv_");
            let (best, best_ms) = timed.iter().min_by(|a, b| a.1.total_cmp(&b.1)).cloned().expect("at least two paths");
            let gbps = (elems * 2) as f64 / (best_ms * 1e-3) / 1e9;
            let all = timed.iter().map(|(p, ms)| format!("{p} {:.1}", ms * 1e3)).collect::<Vec<_>>().join(", ");
            r.row(
                format!("matmul {model} {name}, {rows} row(s): best us, weight GB/s"),
                format!("{best} {:.1} us, {gbps:.0} GB/s (picked {picked}; {all})", best_ms * 1e3),
                None,
            );
            out.push(json!({ "model": model, "rows": rows, "shape": name, "k": k_in, "weight_bytes": elems * 2, "us": timed.iter().map(|(p, ms)| json!({ p.as_str(): ms * 1e3 })).collect::<Vec<_>>(),
                             "best": best, "picked": picked, "weight_gb_per_s": gbps }));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run 1 read 528 MiB after every buffer was dropped, with the context alive: that
    /// passes against a 530 MiB context baseline, a leaked 2 GiB does not, and so does a
    /// context that went away entirely; a missing NVML reading is a failure.
    #[test]
    fn teardown_compares_with_the_open_contexts_one_sided() {
        let mib = |m: u64| m << 20;
        assert!(teardown_ok(&[mib(528)], &[mib(530)]));
        assert!(teardown_ok(&[0], &[mib(530)]));
        assert!(teardown_ok(&[mib(590)], &[mib(530)]));
        assert!(!teardown_ok(&[mib(530 + 2048)], &[mib(530)]));
        assert!(!teardown_ok(&[mib(528), mib(3000)], &[mib(530), mib(530)]));
        assert!(!teardown_ok(&[], &[]));
        assert!(!teardown_ok(&[mib(528)], &[mib(530), mib(530)]));
    }

    /// Sections are independent: an error or a panic becomes a FAIL row and the next
    /// section runs; `--sections` skips the others; the JSON carries the closing table.
    #[test]
    fn sections_fail_alone_and_the_table_lands_in_the_json() {
        let mut r = Report { sections: serde_json::Map::new(), rows: Vec::new(), only: Some(vec!["a".into(), "b".into(), "c".into()]) };
        r.section("a", |r| {
            r.row("first", "1", Some(true));
            Ok(json!(1))
        });
        r.section("b", |_| Err(anyhow::anyhow!("no GPU memory")));
        r.section("c", |_| panic!("index out of bounds"));
        r.section("d", |r| {
            r.row("never", "", Some(true));
            Ok(json!(0))
        });
        r.section("teardown", |r| {
            r.row("last", "2", Some(true));
            Ok(json!(2))
        });
        let names: Vec<(&str, &str, &str)> = r.rows.iter().map(|x| (x.name.as_str(), x.verdict, x.value.as_str())).collect();
        assert_eq!(
            names,
            vec![
                ("first", "PASS", "1"),
                ("b", "FAIL", "error: no GPU memory"),
                ("c", "FAIL", "error: panicked: index out of bounds"),
                ("last", "PASS", "2"),
            ]
        );
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(finish(r, Some(dir.path())).unwrap(), 1);
        let json: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("cuda-check.json")).unwrap()).unwrap();
        assert_eq!(json["table"][1]["verdict"], "FAIL");
        assert_eq!(json["b"]["result"]["error"], "no GPU memory");
        assert!(json.get("d").is_none());
    }
}
