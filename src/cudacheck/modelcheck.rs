//! `cuda-check`'s model-level sections, run through the engine's own model code and
//! decoding loop on the CUDA backend:
//!
//! - logits of a small real checkpoint (written by `testkit`, bf16 on disk) against the
//!   CPU reference, after a prefill (cuBLAS path) and after a decode step (skinny path);
//! - speculative greedy output against target-only greedy output, EAGLE-3 and STANDALONE,
//!   chain and tree, with the target kept resident across the relaunches;
//! - on a large checkpoint (the 8B-shaped one the GPU script writes): cold start per
//!   phase, load rate, relaunch/cold ratio, engine decode tokens/s, decode tokens/s with
//!   CUDA graphs, and the cost of a verify step with 4 draft tokens over a decode step.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use crate::backend::cpu::CpuBackend;
use crate::backend::cuda::compile::CompiledModule;
use crate::backend::cuda::shard::RankInfo;
use crate::backend::cuda::CudaBackend;
use crate::backend::{AttnWindow, Backend, BackendError, KvDtype, Mask};
use crate::engine::kv::KvCache;
use crate::engine::lifecycle::Engine;
use crate::engine::llama::{Capacity, Family, LlamaConfig, LlamaModel, Logits};
use crate::engine::request::LaunchOutcome;
use crate::engine::spec_decode::Generation;
use crate::engine::weights::Loader;
use crate::event::{EventReceiver, EventSink, PhaseTimer};
use crate::model::checkpoint::Checkpoint;
use crate::model::config::ModelConfig;
use crate::phase::PhaseId;
use crate::spec::{Algorithm, Device, LaunchSpec};
use crate::testkit::{DiskDtype, TinyEagle3, TinyLlama, TinyStandalone};

/// Write the small target (8 layers, head_dim 64, GQA, bf16) and its two drafters under `dir`.
pub fn write_small_models(dir: &Path) -> anyhow::Result<()> {
    let target = TinyLlama {
        vocab: 2048,
        hidden: 256,
        layers: 8,
        heads: 4,
        kv_heads: 2,
        intermediate: 768,
        dtype: DiskDtype::BF16,
        ..TinyLlama::new(Family::Llama, 21)
    };
    let weights = target.write(&dir.join("target"))?;
    TinyEagle3 { head_dim: 64, intermediate: 256, ..TinyEagle3::new(22) }.write(&dir.join("eagle3"), &target, &weights)?;
    TinyStandalone::new(23).write(&dir.join("standalone"), &target, &weights)?;
    Ok(())
}

fn load_model<B: Backend>(b: Arc<B>, dir: &Path, cap: Capacity) -> anyhow::Result<LlamaModel<B>> {
    let config = LlamaConfig::from_config(&ModelConfig::load_dir(dir)?)?;
    let ck = Checkpoint::open(dir).map_err(BackendError::from)?;
    let mut progress = |_| {};
    let mut ld = Loader::new(&*b, &ck, &mut progress);
    let model = LlamaModel::load(b.clone(), config, &mut ld, cap)?;
    ld.finish();
    Ok(model)
}

/// Prefill `prompt` and decode one token greedily with the KV cache in `kv_dtype`; the
/// logits of every prefill row and of the decode step.
pub(crate) fn logits_of<B: Backend>(b: Arc<B>, dir: &Path, prompt: &[u32], kv_dtype: KvDtype) -> anyhow::Result<(Vec<f32>, Vec<f32>)> {
    let n = prompt.len();
    let mut model = load_model(b.clone(), dir, Capacity { rows: 32, logit_rows: 32, positions: 128 })?;
    model.set_kv_dtype(kv_dtype);
    let mut kv = model.new_kv(64)?;
    model.inputs.set(&*b, prompt, &(0..n).collect::<Vec<_>>());
    model.forward(&mut kv, AttnWindow { prefix: 0, region: n, queries: n }, Mask::Causal, Logits::All);
    let prefill = b.read_rows(&model.logits, 0, n)?;
    let vocab = prefill.len() / n;
    let last = &prefill[(n - 1) * vocab..];
    let next = (0..vocab).fold(0, |best, i| if last[i] > last[best] { i } else { best }) as u32;
    model.inputs.set(&*b, &[next], &[n]);
    model.forward(&mut kv, AttnWindow { prefix: n, region: 1, queries: 1 }, Mask::Causal, Logits::Last);
    Ok((prefill, b.read_rows(&model.logits, 0, 1)?))
}

pub(crate) fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den.max(1e-30)).sqrt()
}

pub struct Verdict {
    pub name: String,
    pub value: String,
    pub ok: Option<bool>,
}

/// Logits of `test` against the CPU reference on the checkpoint in `dir`, the reference's
/// KV cache rounded as the test backend's is.
pub fn logits_check<B: Backend>(test: Arc<B>, dir: &Path) -> anyhow::Result<(Vec<Verdict>, Value)> {
    let prompt: Vec<u32> = (0..12).map(|i| (i * 97 + 5) % 2048).collect();
    let kv_dtype = test.kv_dtype();
    let (gp, gd) = logits_of(test, dir, &prompt, kv_dtype)?;
    let (cp, cd) = logits_of(Arc::new(CpuBackend), dir, &prompt, kv_dtype)?;
    let (ep, ed) = (rel_err(&gp, &cp), rel_err(&gd, &cd));
    let v = vec![
        Verdict { name: "logits vs CPU, prefill of 12 (rel. error)".into(), value: format!("{ep:.2e}"), ok: Some(ep < 1e-2) },
        Verdict { name: "logits vs CPU, decode step (rel. error)".into(), value: format!("{ed:.2e}"), ok: Some(ed < 1e-2) },
    ];
    Ok((v, json!({ "prefill_rel_err": ep, "decode_rel_err": ed })))
}

/// The KV pool of a check's launch, in tokens.
const CHECK_KV_TOKENS: u64 = 132 * 1024;

/// A launch of `target`, target-only or with a drafter `(dir, algorithm, steps, topk, draft
/// tokens)`, on whatever backend the caller's engine was made with.
pub(crate) fn spec_for(target: &Path, draft: Option<(&Path, Algorithm, u32, u32, u32)>) -> LaunchSpec {
    // A pool sized from free memory would take most of the GPU, and the checks keep two
    // engines (CUDA and the CPU reference, or two launches) at once: one full context each
    // (the 8B shape's 131072 tokens and its verify slots) is all a check needs.
    let max_total_tokens = Some(CHECK_KV_TOKENS);
    let mut s = LaunchSpec { model_path: Some(target.display().to_string()), max_total_tokens, ..Default::default() };
    // The backend is chosen by the caller here, not from the spec's device.
    s.device = Device::Cpu;
    match draft {
        Some((d, algo, steps, topk, n)) => {
            s.draft_model_path = Some(d.display().to_string());
            s.speculative_algorithm = Some(algo);
            s.speculative_num_steps = Some(steps);
            s.speculative_eagle_topk = Some(topk);
            s.speculative_num_draft_tokens = Some(n);
        }
        None => s.speculative_algorithm = Some(Algorithm::None),
    }
    s
}

fn no_preflight(_: &LaunchSpec) -> Vec<crate::finding::Finding> {
    Vec::new()
}

fn launch<B: Backend>(engine: &mut Engine<B>, spec: &LaunchSpec) -> anyhow::Result<(f64, bool)> {
    match engine.launch(spec, &no_preflight) {
        LaunchOutcome::Ready { elapsed_s, reused_target } => Ok((elapsed_s, reused_target)),
        LaunchOutcome::Failed(f) => Err(anyhow::anyhow!("launch failed: [{}] {}", f.id, f.message)),
    }
}

fn greedy<B: Backend>(engine: &mut Engine<B>, prompt: &[u32], n: usize) -> anyhow::Result<Generation> {
    let mut d = engine.decoding(n, None);
    d.stop.clear();
    Ok(engine.generate_ids(prompt, &d)?)
}

/// Speculative greedy against target-only greedy on the models `write_small_models` wrote,
/// with an engine on `backend`.
pub fn spec_equality<B: Backend>(backend: B, dir: &Path, n: usize) -> anyhow::Result<(Vec<Verdict>, Value)> {
    let (sink, _rx) = EventSink::channel();
    let mut engine = Engine::new(backend, sink);
    let target = dir.join("target");
    let prompt: Vec<u32> = vec![5, 9, 17, 33, 4, 250, 1000, 7];
    launch(&mut engine, &spec_for(&target, None))?;
    let base = greedy(&mut engine, &prompt, n)?;
    let mut verdicts = Vec::new();
    let mut runs = Vec::new();
    let cases = [
        ("EAGLE-3 chain", "eagle3", Algorithm::Eagle3, 3, 1, 4),
        ("EAGLE-3 tree", "eagle3", Algorithm::Eagle3, 3, 2, 6),
        ("STANDALONE chain", "standalone", Algorithm::Standalone, 3, 1, 4),
        ("STANDALONE tree", "standalone", Algorithm::Standalone, 3, 2, 6),
    ];
    for (name, sub, algo, steps, topk, nd) in cases {
        let drafter = dir.join(sub);
        let (_, reused) = launch(&mut engine, &spec_for(&target, Some((&drafter, algo, steps, topk, nd))))?;
        let g = greedy(&mut engine, &prompt, n)?;
        let same = g.tokens == base.tokens;
        verdicts.push(Verdict {
            name: format!("greedy {name} == target-only ({n} tokens)"),
            value: format!(
                "{} ; mean accept {:.2}; target kept: {reused}",
                if same { "identical" } else { "DIFFERENT" },
                g.mean_accept_length()
            ),
            ok: Some(same),
        });
        runs.push(json!({ "case": name, "identical": same, "tokens": g.tokens, "mean_accept_length": g.mean_accept_length(), "reused_target": reused }));
    }
    let cpu_tokens = {
        let (sink, _rx) = EventSink::channel();
        let mut cpu = Engine::new(CpuBackend, sink);
        launch(&mut cpu, &spec_for(&target, None))?;
        greedy(&mut cpu, &prompt, n)?.tokens
    };
    let agree = cpu_tokens.iter().zip(&base.tokens).take_while(|(a, b)| a == b).count();
    verdicts.push(Verdict { name: "greedy tokens agreeing with the CPU reference".into(), value: format!("{agree} of {n}"), ok: None });
    Ok((verdicts, json!({ "target_only": base.tokens, "cpu": cpu_tokens, "runs": runs })))
}

/// Seconds per phase from a launch's events.
fn phase_times(rx: &mut EventReceiver) -> Vec<(PhaseId, f64)> {
    let mut timer = PhaseTimer::default();
    while let Ok(ev) = rx.try_recv() {
        timer.observe(&ev);
    }
    timer.ended
}

/// Cold start, relaunch and engine decode on a large checkpoint. `compile_s` is the cold
/// kernel-compile time measured before (part of a cold start).
pub fn large_model_engine(
    modules: &[CompiledModule],
    dir: &Path,
    compile_s: f64,
    new_tokens: usize,
) -> anyhow::Result<(Vec<Verdict>, Value)> {
    let backend = CudaBackend::open(0, modules, RankInfo::single(), None)?;
    let (sink, mut rx) = EventSink::channel();
    let mut engine = Engine::new(backend, sink);
    let spec = spec_for(dir, None);
    let (cold, _) = launch(&mut engine, &spec)?;
    let phases = phase_times(&mut rx);
    let (target_bytes, _) = engine.weight_bytes();
    let load_s = phases.iter().find(|(p, _)| *p == PhaseId::TargetLoad).map_or(0.0, |(_, s)| *s);
    let prompt: Vec<u32> = (0..32).map(|i| 1000 + i * 37).collect();
    let g = greedy(&mut engine, &prompt, new_tokens)?;
    let decode_tps = g.tokens.len() as f64 / (g.seconds - g.prefill_seconds).max(1e-9);
    // A drafter-only remedy: the spec changes, the target stays resident.
    let mut again = spec.clone();
    again.speculative_num_steps = Some(5);
    let (relaunch, reused) = launch(&mut engine, &again)?;
    let cold_total = cold + compile_s;
    let ratio = relaunch / cold_total;
    let verdicts = vec![
        Verdict {
            name: "cold start: compile + launch (s)".into(),
            value: format!(
                "{cold_total:.2} ({})",
                std::iter::once(format!("kernel-compile {compile_s:.2}"))
                    .chain(phases.iter().map(|(p, s)| format!("{p} {s:.2}")))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            ok: None,
        },
        Verdict { name: "weight load rate (GB/s)".into(), value: format!("{:.2}", target_bytes as f64 / load_s.max(1e-9) / 1e9), ok: None },
        Verdict {
            name: "relaunch / cold start (target kept)".into(),
            value: format!("{ratio:.3} (kept: {reused})"),
            ok: Some(reused && ratio <= 0.1),
        },
        Verdict { name: "engine decode tokens/s (eager, batch 1)".into(), value: format!("{decode_tps:.1}"), ok: None },
    ];
    Ok((
        verdicts,
        json!({ "cold_s": cold_total, "phases": phases, "compile_s": compile_s, "target_bytes": target_bytes, "relaunch_s": relaunch,
                "relaunch_ratio": ratio, "reused_target": reused, "engine_decode_tokens_per_s": decode_tps, "tokens": g.tokens }),
    ))
}

/// Decode with and without CUDA graphs through the model code directly, and the cost of
/// one step replayed from its graph: decode (1 query) and verify (root + 4 chain drafts,
/// explicit mask), on a large checkpoint.
pub fn large_model_steps(cuda: Arc<CudaBackend>, dir: &Path, floor_tps: f64, new_tokens: usize) -> anyhow::Result<(Vec<Verdict>, Value)> {
    let b = &*cuda;
    let mut model = load_model(cuda.clone(), dir, Capacity { rows: 64, logit_rows: 8, positions: 1024 })?;
    let mut kv: KvCache<CudaBackend> = model.new_kv(1024)?;
    let prompt: Vec<u32> = (0..32).map(|i| 1000 + i * 37).collect();
    let mut argmax = b.ids(1)?;
    let mut decode =
        |model: &mut LlamaModel<CudaBackend>, kv: &mut KvCache<CudaBackend>, graphs: bool| -> anyhow::Result<(Vec<u32>, f64)> {
            let n = prompt.len();
            model.inputs.set(b, &prompt, &(0..n).collect::<Vec<_>>());
            model.forward(kv, AttnWindow { prefix: 0, region: n, queries: n }, Mask::Causal, Logits::Last);
            b.argmax(&model.logits, 1, &mut argmax);
            let mut tokens = vec![b.read_ids(&argmax, 1)?[0] as u32];
            let t = Instant::now();
            for i in 0..new_tokens {
                if graphs {
                    b.graph_begin("decode/1")?;
                }
                model.inputs.set(b, &tokens[i..i + 1], &[n + i]);
                model.forward(kv, AttnWindow { prefix: n + i, region: 1, queries: 1 }, Mask::Causal, Logits::Last);
                b.argmax(&model.logits, 1, &mut argmax);
                if graphs {
                    b.graph_end()?;
                }
                tokens.push(b.read_ids(&argmax, 1)?[0] as u32);
            }
            Ok((tokens, new_tokens as f64 / t.elapsed().as_secs_f64()))
        };
    let (eager_tokens, eager_tps) = decode(&mut model, &mut kv, false)?;
    let graphed = decode(&mut model, &mut kv, true);
    b.graph_reset();
    // Step costs at a 64-token prefix, steps issued back to back: one query vs five.
    let chain: Vec<i32> = (0..5).flat_map(|i| (0..5).map(move |j| (j <= i) as i32)).collect();
    let mut mask = b.ids(25)?;
    b.write_ids(&mut mask, &chain);
    model.inputs.set(b, &[11, 12, 13, 14, 15], &[64, 65, 66, 67, 68]);
    let gpu = cuda.gpu();
    let mut step_ms = |key: &str, window: AttnWindow, mask: Mask<'_, CudaBackend>, logits: Logits| -> Result<(f64, f64), BackendError> {
        let mut step = |graph: bool| -> Result<(), BackendError> {
            if graph {
                b.graph_begin(key)?;
            }
            model.forward(&mut kv, window, mask, logits);
            if graph {
                b.graph_end()?;
            }
            Ok(())
        };
        let eager = gpu.throughput_ms(10, || step(false))?;
        // Record and capture first, so only replays are timed.
        step(true)?;
        step(true)?;
        let graph = gpu.throughput_ms(20, || step(true))?;
        Ok((eager, graph))
    };
    let decode_step = step_ms("decode/1@64", AttnWindow { prefix: 64, region: 1, queries: 1 }, Mask::Causal, Logits::Last);
    let verify_step = step_ms("verify/5@64", AttnWindow { prefix: 64, region: 5, queries: 5 }, Mask::Explicit(&mask), Logits::All);
    b.graph_reset();
    let mut verdicts = Vec::new();
    let mut value = json!({ "eager_tokens_per_s": eager_tps, "floor_tokens_per_s": floor_tps, "tokens": eager_tokens, "weight_bytes": model.weight_bytes() });
    let best = match &graphed {
        Ok((graph_tokens, graph_tps)) => {
            let same = *graph_tokens == eager_tokens;
            verdicts.push(Verdict {
                name: "decode tokens/s eager / CUDA graphs (batch 1)".into(),
                value: format!("{eager_tps:.1} / {graph_tps:.1}"),
                ok: None,
            });
            verdicts.push(Verdict { name: "graph decode tokens == eager tokens".into(), value: format!("{same}"), ok: Some(same) });
            value["graph_tokens_per_s"] = json!(graph_tps);
            value["graph_tokens"] = json!(graph_tokens);
            eager_tps.max(*graph_tps)
        }
        Err(e) => {
            verdicts.push(Verdict { name: "decode with CUDA graphs".into(), value: format!("error: {e:#}"), ok: Some(false) });
            eager_tps
        }
    };
    verdicts.push(Verdict {
        name: "decode vs HBM floor (target >= 85%)".into(),
        value: format!("{best:.1} of {floor_tps:.1} tok/s = {:.1}%", 100.0 * best / floor_tps),
        ok: Some(best >= 0.85 * floor_tps),
    });
    match (decode_step, verify_step) {
        (Ok((decode_eager, decode_graph)), Ok((verify_eager, verify_graph))) => {
            let ratio = verify_graph / decode_graph;
            verdicts.push(Verdict {
                name: "step ms, eager / graph: decode, verify(4 drafts)".into(),
                value: format!("{decode_eager:.3} / {decode_graph:.3}, {verify_eager:.3} / {verify_graph:.3}"),
                ok: None,
            });
            verdicts.push(Verdict {
                name: "verify(4 drafts) / decode step, graphs (target <= 1.15)".into(),
                value: format!("{verify_graph:.3} / {decode_graph:.3} ms = {ratio:.3}"),
                ok: Some(ratio <= 1.15),
            });
            value["decode_ms"] = json!({ "eager": decode_eager, "graph": decode_graph });
            value["verify_ms"] = json!({ "eager": verify_eager, "graph": verify_graph });
            value["verify_over_decode"] = json!(ratio);
        }
        (d, v) => {
            let e = d.err().or(v.err()).expect("one of the two failed");
            verdicts.push(Verdict { name: "verify / decode step cost".into(), value: format!("error: {e}"), ok: Some(false) });
        }
    }
    Ok((verdicts, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The small models load in the engine and every speculative case reproduces the
    /// target-only output on the CPU reference, so on the GPU only the backend is on trial.
    #[test]
    fn small_models_pass_every_check_on_the_cpu_reference() {
        let dir = tempfile::tempdir().unwrap();
        write_small_models(dir.path()).unwrap();
        let (logits, _) = logits_check(Arc::new(CpuBackend), &dir.path().join("target")).unwrap();
        assert!(
            logits.iter().all(|v| v.ok == Some(true) && v.value == "0.00e0"),
            "{:?}",
            logits.iter().map(|v| &v.value).collect::<Vec<_>>()
        );
        let (spec, value) = spec_equality(CpuBackend, dir.path(), 16).unwrap();
        for v in spec.iter().filter(|v| v.ok.is_some()) {
            assert_eq!(v.ok, Some(true), "{}: {}", v.name, v.value);
        }
        assert_eq!(spec.last().unwrap().value, "16 of 16");
        // The drafters must actually be accepted sometimes, or the check proves little.
        let accepted = value["runs"].as_array().unwrap().iter().map(|r| r["mean_accept_length"].as_f64().unwrap()).fold(0.0, f64::max);
        assert!(accepted > 1.5, "best mean accept length {accepted}");
    }
}
