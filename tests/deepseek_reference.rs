//! The DeepSeek-V3-family CPU reference against transformers 5.17's own
//! `DeepseekV3ForCausalLM` (testdata/deepseek/reference.json, written on the H200 by
//! scripts/gpu/deepseek_reference.py in float32 on the bf16 weights): on every prompt of every
//! case (with and without q LoRA, the Kimi-K2.5 wrapper), the greedy tokens are transformers'
//! and the logits of transformers' top 5 at every position agree within `TOLERANCE`, whether a
//! step attends through the decompressed keys and values or the absorbed `kv_b_proj`, one
//! token per decode step or a verify step of many query tokens.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use specdeck::backend::cpu::CpuBackend;
use specdeck::backend::{AttnWindow, Backend, Mask};
use specdeck::engine::deepseek::{Attend, DeepseekModel, DeepseekTargetConfig};
use specdeck::engine::kv::KvCache;
use specdeck::engine::lifecycle::Engine;
use specdeck::engine::llama::{Capacity, Family, Logits};
use specdeck::engine::request::LaunchOutcome;
use specdeck::engine::scheduler::SchedulerConfig;
use specdeck::engine::weights::Loader;
use specdeck::event::{Event, EventSink};
use specdeck::model::checkpoint::Checkpoint;
use specdeck::model::config::ModelConfig;
use specdeck::spec::{Algorithm, Device, LaunchSpec};
use specdeck::testkit::{write_tokenizer, TinyLlama};

/// Absolute, on logits of magnitude up to about 3 that reference.json rounds to 5 decimals:
/// f32 on the CPU against f32 on the GPU measured within 8.4e-6.
const TOLERANCE: f32 = 5e-5;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/deepseek")
}

fn load(case: &str) -> DeepseekModel<CpuBackend> {
    let dir = root().join(case);
    let config = DeepseekTargetConfig::from_config(&ModelConfig::load_dir(&dir).unwrap()).unwrap();
    let ck = Checkpoint::open(&dir).unwrap();
    let mut progress = |_| {};
    let mut ld = Loader::new(&CpuBackend, &ck, &mut progress);
    DeepseekModel::load(Arc::new(CpuBackend), &config, &mut ld, Capacity { rows: 64, logit_rows: 64, positions: 64 }).unwrap()
}

struct Case {
    prompt: Vec<u32>,
    greedy: Vec<u32>,
    top5_ids: Vec<Vec<usize>>,
    top5_logits: Vec<Vec<f32>>,
}

fn cases(name: &str) -> Vec<Case> {
    let text = std::fs::read_to_string(root().join("reference.json")).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["transformers"], "5.17.0");
    let ints = |v: &Value| v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect::<Vec<_>>();
    json["cases"][name]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Case {
            prompt: ints(&p["prompt"]).into_iter().map(|t| t as u32).collect(),
            greedy: ints(&p["greedy"]).into_iter().map(|t| t as u32).collect(),
            top5_ids: p["top5_ids"].as_array().unwrap().iter().map(|r| ints(r).into_iter().map(|t| t as usize).collect()).collect(),
            top5_logits: p["top5_logits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
                .collect(),
        })
        .collect()
}

/// Run `tokens` at positions `start..` as one forward and return every row's logits.
fn step(model: &mut DeepseekModel<CpuBackend>, kv: &mut KvCache<CpuBackend>, tokens: &[u32], start: usize) -> Vec<Vec<f32>> {
    let n = tokens.len();
    model.inputs.set(&CpuBackend, tokens, &(start..start + n).collect::<Vec<_>>());
    model.forward(kv, AttnWindow { prefix: start, region: n, queries: n }, Mask::Causal, Logits::All).unwrap();
    let vocab = model.config.vocab;
    CpuBackend.read_rows(&model.logits, 0, n).unwrap().chunks(vocab).map(<[f32]>::to_vec).collect()
}

fn argmax(row: &[f32]) -> u32 {
    (0..row.len()).max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a))).unwrap() as u32
}

/// Greedy decoding as the engine runs it: the prompt in one forward, then one token a step.
fn decode(model: &mut DeepseekModel<CpuBackend>, c: &Case) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut kv = model.new_kv(64).unwrap();
    let mut rows = step(model, &mut kv, &c.prompt, 0);
    let mut tokens = vec![argmax(rows.last().unwrap())];
    while tokens.len() < c.greedy.len() {
        let last = *tokens.last().unwrap();
        let row = step(model, &mut kv, &[last], c.prompt.len() + tokens.len() - 1).remove(0);
        tokens.push(argmax(&row));
        rows.push(row);
    }
    (tokens, rows)
}

/// The prompt, then transformers' greedy tokens (but the last) as one verify step.
fn verify(model: &mut DeepseekModel<CpuBackend>, c: &Case) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut kv = model.new_kv(64).unwrap();
    let mut rows = step(model, &mut kv, &c.prompt, 0);
    rows.extend(step(model, &mut kv, &c.greedy[..c.greedy.len() - 1], c.prompt.len()));
    (rows[c.prompt.len() - 1..].iter().map(|r| argmax(r)).collect(), rows)
}

/// The largest difference from transformers' top-5 logits, over every position.
fn check(what: &str, c: &Case, tokens: &[u32], rows: &[Vec<f32>]) -> f32 {
    assert_eq!(tokens, c.greedy, "{what}: greedy tokens");
    assert_eq!(rows.len(), c.top5_ids.len(), "{what}: positions");
    let mut worst = 0.0f32;
    for (pos, (row, (ids, want))) in rows.iter().zip(c.top5_ids.iter().zip(&c.top5_logits)).enumerate() {
        for (&id, &w) in ids.iter().zip(want) {
            let diff = (row[id] - w).abs();
            assert!(diff <= TOLERANCE, "{what}: position {pos}, token {id}: {} vs transformers' {w}", row[id]);
            worst = worst.max(diff);
        }
    }
    worst
}

fn matches_transformers(case: &str, reference: &str) {
    let mut model = load(case);
    let mut worst = 0.0f32;
    for (i, c) in cases(reference).iter().enumerate() {
        for attend in [None, Some(Attend::Absorbed), Some(Attend::Decompressed)] {
            model.attend = attend;
            let (tokens, rows) = decode(&mut model, c);
            worst = worst.max(check(&format!("{case} prompt {i} decode {attend:?}"), c, &tokens, &rows));
            let (tokens, rows) = verify(&mut model, c);
            worst = worst.max(check(&format!("{case} prompt {i} verify {attend:?}"), c, &tokens, &rows));
        }
    }
    eprintln!("{case}: largest top-5 logit difference from transformers {worst:.2e}");
}

#[test]
fn dsv3_with_q_lora_matches_transformers() {
    matches_transformers("dsv3-qlora", "dsv3-qlora");
}

#[test]
fn dsv3_without_q_lora_matches_transformers() {
    matches_transformers("dsv3-noqlora", "dsv3-noqlora");
}

/// transformers has no class for the wrapper: its reference is the text model's, whose
/// weights the wrapper holds under `language_model.` beside a vision tower.
#[test]
fn the_kimi_k25_wrapper_matches_its_text_model() {
    let json: Value = serde_json::from_str(&std::fs::read_to_string(root().join("reference.json")).unwrap()).unwrap();
    assert_eq!(json["cases"]["kimi-k25"]["same_as"], "dsv3-qlora");
    matches_transformers("kimi-k25", "dsv3-qlora");
}

/// The phases a target-only launch of the folder runs, with the full preflight, and the
/// engine left ready.
fn launch(dir: &Path) -> (Engine<CpuBackend>, Vec<String>) {
    let (sink, mut rx) = EventSink::channel();
    let mut engine = Engine::new(CpuBackend, sink);
    let spec = LaunchSpec {
        model_path: Some(dir.display().to_string()),
        device: Device::Cpu,
        speculative_algorithm: Some(Algorithm::None),
        ..LaunchSpec::default()
    };
    let outcome = engine.launch(&spec, &specdeck::preflight::check_spec);
    assert!(matches!(outcome, LaunchOutcome::Ready { reused_target: false, .. }), "{outcome:?}");
    let phases = std::iter::from_fn(|| rx.try_recv().ok().map(|e| e.event))
        .filter_map(|e| match e {
            Event::Phase { phase, state, .. } => Some(format!("{phase}:{}", serde_json::to_value(state).unwrap().as_str().unwrap())),
            _ => None,
        })
        .collect();
    (engine, phases)
}

/// The Kimi-K2.5 checkpoint (with a word-level tokenizer beside it) launches through the
/// phases a Llama target does, and the engine's target-only greedy decoding gives
/// transformers' tokens on every prompt.
#[test]
fn the_engine_launches_the_kimi_k25_target_and_decodes_transformers_greedy() {
    let dir = tempfile::tempdir().unwrap();
    let (kimi, llama) = (dir.path().join("kimi"), dir.path().join("llama"));
    std::fs::create_dir(&kimi).unwrap();
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(root().join("kimi-k25").join(file), kimi.join(file)).unwrap();
    }
    write_tokenizer(&kimi, 320).unwrap();
    TinyLlama::new(Family::Llama, 3).write(&llama).unwrap();
    let (mut engine, phases) = launch(&kimi);
    assert_eq!(phases, launch(&llama).1);
    assert_eq!(phases.first().map(String::as_str), Some("preflight:started"));
    assert_eq!(phases.last().map(String::as_str), Some("ready:done"));
    let greedy_equals_transformers = |engine: &mut Engine<CpuBackend>| {
        for c in cases("dsv3-qlora") {
            // No stop tokens: transformers' 16 tokens were taken past any end-of-sequence id.
            let mut decoding = engine.decoding(c.greedy.len(), None);
            decoding.stop.clear();
            assert_eq!(engine.generate_ids(&c.prompt, &decoding).unwrap().tokens, c.greedy, "prompt {:?}", c.prompt);
        }
    };
    greedy_equals_transformers(&mut engine);
    // The scheduler cannot batch this family yet: it says why, and the engine keeps its target.
    let refused = engine.serve_batch(SchedulerConfig { max_running: 8, chunk: 512 }, &mut |_| panic!("served batched"));
    let why = refused.unwrap_err().to_string();
    assert!(why.contains("the DeepSeek-V3 family's CPU reference runs batch 1 only"), "{why}");
    greedy_equals_transformers(&mut engine);
}
