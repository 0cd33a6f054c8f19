//! The DeepSeek-V3-family CPU reference against transformers 5.17's own
//! `DeepseekV3ForCausalLM` (testdata/deepseek/reference.json, written on the H200 by
//! scripts/gpu/deepseek_reference.py in float32 on the bf16 weights): on every prompt of every
//! case (with and without q LoRA, the Kimi-K2.5 wrapper), the greedy tokens are transformers'
//! and the logits of transformers' top 5 at every position agree within `TOLERANCE`, whether a
//! step attends through the decompressed keys and values or the absorbed `kv_b_proj`, one
//! token per decode step or a verify step of many query tokens.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use specdeck::backend::cpu::CpuBackend;
use specdeck::backend::{AttnWindow, Backend, BatchSeq, Mask, PagedBatch, PagedSeq};
use specdeck::engine::deepseek::{Attend, Compute, DeepseekModel, DeepseekTargetConfig};
use specdeck::engine::eagle3::Eagle3Config;
use specdeck::engine::kv::KvCache;
use specdeck::engine::lifecycle::Engine;
use specdeck::engine::llama::{Capacity, Family, Logits};
use specdeck::engine::request::LaunchOutcome;
use specdeck::engine::sampling::SamplingParams;
use specdeck::engine::scheduler::{SchedulerConfig, SeqRequest};
use specdeck::engine::spec_decode::Generation;
use specdeck::engine::target_model::TargetConfig;
use specdeck::engine::weights::Loader;
use specdeck::event::{Event, EventSink};
use specdeck::model::checkpoint::Checkpoint;
use specdeck::model::config::ModelConfig;
use specdeck::phase::PhaseId;
use specdeck::spec::{Algorithm, Device, LaunchSpec};
use specdeck::testkit::{write_tokenizer, TinyEagle3, TinyLlama};

/// Absolute, on logits of magnitude up to about 3 that reference.json rounds to 5 decimals:
/// f32 on the CPU against f32 on the GPU measured within 8.4e-6.
const TOLERANCE: f32 = 5e-5;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/deepseek")
}

fn load(case: &str, compute: Compute) -> DeepseekModel<CpuBackend> {
    let dir = root().join(case);
    let config = DeepseekTargetConfig { compute, ..DeepseekTargetConfig::from_config(&ModelConfig::load_dir(&dir).unwrap()).unwrap() };
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
    cases_in("reference.json", name)
}

/// The prompts of case `name` in one of testdata/deepseek's reference files.
fn cases_in(file: &str, name: &str) -> Vec<Case> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
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
    step_ahead(model, kv, tokens, start, |_| None)
}

/// `step`, with a slot table prepared first for the window `ahead` names (as a graph step's
/// caller prepares one), if any.
fn step_ahead(
    model: &mut DeepseekModel<CpuBackend>,
    kv: &mut KvCache<CpuBackend>,
    tokens: &[u32],
    start: usize,
    ahead: impl Fn(AttnWindow) -> Option<AttnWindow>,
) -> Vec<Vec<f32>> {
    let n = tokens.len();
    let window = AttnWindow { prefix: start, region: n, queries: n };
    if let Some(w) = ahead(window) {
        model.prepare_forward(w, None);
    }
    model.inputs.set(&CpuBackend, tokens, &(start..start + n).collect::<Vec<_>>());
    model.forward(kv, window, Mask::Causal, Logits::All).unwrap();
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

/// Greedy decoding as `decode`, each forward after `ahead`'s preparation.
fn decode_ahead(model: &mut DeepseekModel<CpuBackend>, c: &Case, ahead: impl Fn(AttnWindow) -> Option<AttnWindow>) -> Vec<Vec<f32>> {
    let mut kv = model.new_kv(64).unwrap();
    let mut rows = step_ahead(model, &mut kv, &c.prompt, 0, &ahead);
    while rows.len() < c.prompt.len() + c.greedy.len() - 1 {
        let last = argmax(rows.last().unwrap());
        let start = rows.len();
        rows.extend(step_ahead(model, &mut kv, &[last], start, &ahead));
    }
    rows
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
    matches_transformers_in("reference.json", case, reference)
}

/// The host reference by each way of attending, then the forward on the backend's ops (the
/// one a GPU runs, here on the CPU backend's reference ops), against transformers.
fn matches_transformers_in(file: &str, case: &str, reference: &str) {
    let cases = cases_in(file, reference);
    let mut host = load(case, Compute::Host);
    let mut on_backend = load(case, Compute::Backend);
    let mut worst = [0.0f32; 2];
    for (i, c) in cases.iter().enumerate() {
        for attend in [None, Some(Attend::Absorbed), Some(Attend::Decompressed)] {
            host.attend = attend;
            let (tokens, rows) = decode(&mut host, c);
            worst[0] = worst[0].max(check(&format!("{case} prompt {i} decode {attend:?}"), c, &tokens, &rows));
            let (tokens, rows) = verify(&mut host, c);
            worst[0] = worst[0].max(check(&format!("{case} prompt {i} verify {attend:?}"), c, &tokens, &rows));
        }
        let (tokens, rows) = decode(&mut on_backend, c);
        worst[1] = worst[1].max(check(&format!("{case} prompt {i} decode on the backend's ops"), c, &tokens, &rows));
        let (tokens, rows) = verify(&mut on_backend, c);
        worst[1] = worst[1].max(check(&format!("{case} prompt {i} verify on the backend's ops"), c, &tokens, &rows));
    }
    eprintln!("{case}: largest top-5 logit difference from transformers {:.2e} (host), {:.2e} (backend ops)", worst[0], worst[1]);
}

/// A slot table prepared ahead of a forward (what lets a CUDA graph step copy nothing from
/// the host) serves the forward it was made for, with the bits of one built in the forward;
/// one made for another window (here the step before's, one key fewer) serves no forward.
#[test]
fn a_slot_table_prepared_ahead_serves_only_the_forward_it_was_made_for() {
    let c = &cases("dsv3-qlora")[0];
    let mut model = load("dsv3-qlora", Compute::Backend);
    let built = decode_ahead(&mut model, c, |_| None);
    assert_eq!(built.iter().skip(c.prompt.len() - 1).map(|r| argmax(r)).collect::<Vec<_>>(), c.greedy);
    let first_difference = |rows: Vec<Vec<f32>>| rows.iter().zip(&built).position(|(a, b)| a != b);
    assert_eq!(first_difference(decode_ahead(&mut model, c, Some)), None, "prepared for each forward's own window");
    let stale = |w: AttnWindow| Some(AttnWindow { prefix: w.prefix.saturating_sub(1), ..w });
    assert_eq!(first_difference(decode_ahead(&mut model, c, stale)), None, "prepared for the window before");
}

/// The last row's logits of `tokens` as a prompt at pool `slots`, as a batch of one sequence:
/// its tables prepared first (as a graph step's caller prepares them) for this batch, for
/// `other` (a batch of the first `other` tokens at the slots after these), or not at all; the
/// forward run `runs` times.
fn batch_logits(
    model: &mut DeepseekModel<CpuBackend>,
    tokens: &[u32],
    slots: &[usize],
    other: Option<usize>,
    runs: usize,
) -> Vec<Vec<f32>> {
    let mut kv = model.new_kv(128).unwrap();
    let n = tokens.len();
    let seq = [BatchSeq { seq: PagedSeq { row: 0, queries: n, slots }, mask: Mask::Causal }];
    let batch = PagedBatch::new(&seq, n);
    let after: Vec<usize> = (slots[n - 1] + 1..).take(other.unwrap_or(0)).collect();
    let other_seq = [BatchSeq { seq: PagedSeq { row: 0, queries: after.len(), slots: &after }, mask: Mask::Causal }];
    match other {
        Some(m) => model.prepare_batch(&PagedBatch::new(&other_seq, m)).unwrap(),
        None => model.prepare_batch(&batch).unwrap(),
    }
    model.inputs.set(&CpuBackend, tokens, &(0..n).collect::<Vec<_>>());
    (0..runs)
        .map(|_| {
            model.forward_batch(&mut kv, &batch, &[n - 1]).unwrap();
            CpuBackend.read_rows(&model.logits, 0, 1).unwrap()
        })
        .collect()
}

/// A batch's slot table prepared ahead (once, for a graph step's record and capture runs)
/// gives each forward of that batch the bits of a table built in the forward; one prepared
/// for another batch is not taken.
#[test]
fn a_slot_table_prepared_for_one_batch_gives_its_forwards_the_built_bits_and_no_other_batch_takes_it() {
    let c = &cases("dsv3-qlora")[0];
    let mut model = load("dsv3-qlora", Compute::Backend);
    let slots: Vec<usize> = (40..40 + c.prompt.len()).collect();
    let mut kv = model.new_kv(128).unwrap();
    let built = step(&mut model, &mut kv, &c.prompt, 0).pop().unwrap();
    assert_eq!(argmax(&built), c.greedy[0]);
    assert_eq!(batch_logits(&mut model, &c.prompt, &slots, None, 2), vec![built.clone(), built.clone()], "prepared for this batch");
    assert_eq!(batch_logits(&mut model, &c.prompt, &slots, Some(3), 1), vec![built], "prepared for a batch of 3 other tokens");
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

/// DeepSeek-V3's FP8 layout (float8_e4m3fn weights, 128x128 `weight_scale_inv` blocks, one
/// block partial) as transformers' own fine-grained FP8 quantizer wrote it
/// (scripts/gpu/deepseek_quantized.py): dequantized at load, the engine gives transformers'
/// tokens and logits on the dequantized weights.
#[test]
fn fp8_block_scaled_weights_match_transformers_on_their_dequantized_weights() {
    matches_transformers_in("quantized.json", "dsv3-fp8", "dsv3-fp8");
}

/// Kimi-K2.5's routed experts in compressed-tensors pack-quantized INT4 (group 32), packed by
/// compressed-tensors' own compressor, the rest bf16, inside the Kimi-K2.5 wrapper.
#[test]
fn kimi_k25_int4_experts_match_transformers_on_their_dequantized_weights() {
    matches_transformers_in("quantized.json", "kimi-int4", "kimi-int4");
}

/// Quantized tensors that contradict the config stop the launch in target-load with a
/// finding that names the file and the tensor; the model files stay as they were.
#[test]
fn quantized_tensors_that_contradict_the_config_are_findings_that_name_file_and_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let edit = |case: &str, pointer: &str, value: Value| {
        let folder = launchable(dir.path(), case);
        let path = folder.join("config.json");
        let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        *config.pointer_mut(pointer).unwrap() = value;
        std::fs::write(&path, config.to_string()).unwrap();
        folder
    };
    let failure = |folder: &Path| {
        let (sink, _rx) = EventSink::channel();
        let spec = LaunchSpec {
            model_path: Some(folder.display().to_string()),
            device: Device::Cpu,
            speculative_algorithm: Some(Algorithm::None),
            ..LaunchSpec::default()
        };
        match Engine::new(CpuBackend, sink).launch(&spec, &specdeck::preflight::check_spec) {
            LaunchOutcome::Failed(f) => f,
            other => panic!("launched: {other:?}"),
        }
    };
    let fp8 = edit("dsv3-fp8", "/quantization_config/weight_block_size", serde_json::json!([64, 64]));
    let f = failure(&fp8);
    let file = fp8.join("model.safetensors").display().to_string();
    let tensor = "model.layers.0.self_attn.q_a_proj.weight_scale_inv";
    assert_eq!(f.message, format!("{file}: tensor {tensor} has shape [2, 2], expected [4, 4]"));
    assert_eq!((f.phase, f.evidence[0].file.as_str(), f.evidence[0].key.as_str()), (PhaseId::TargetLoad, file.as_str(), tensor));

    let int4 = edit("kimi-int4", "/text_config/moe_intermediate_size", serde_json::json!(64));
    let f = failure(&int4);
    let file = int4.join("model.safetensors").display().to_string();
    let tensor = "language_model.model.layers.1.mlp.experts.0.gate_proj.weight_shape";
    assert_eq!(f.message, format!("{file}: tensor {tensor} holds [128, 256], but the config makes the weight [64, 256]"));
    assert_eq!((f.evidence[0].file.as_str(), f.evidence[0].key.as_str()), (file.as_str(), tensor));
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

/// A copy of testdata's `case` under `dir` with a word-level tokenizer beside it (a launch
/// needs one; the fixtures ship weights only).
fn launchable(dir: &Path, case: &str) -> PathBuf {
    let folder = dir.join(case);
    std::fs::create_dir(&folder).unwrap();
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(root().join(case).join(file), folder.join(file)).unwrap();
    }
    write_tokenizer(&folder, 320).unwrap();
    folder
}

/// Generate without stop tokens: transformers' 16 tokens were taken past any end-of-sequence id.
fn greedy(engine: &mut Engine<CpuBackend>, c: &Case) -> Generation {
    let mut decoding = engine.decoding(c.greedy.len(), None);
    decoding.stop.clear();
    engine.generate_ids(&c.prompt, &decoding).unwrap()
}

/// The Kimi-K2.5 checkpoint (with a word-level tokenizer beside it) launches through the
/// phases a Llama target does, and the engine's target-only greedy decoding gives
/// transformers' tokens on every prompt.
#[test]
fn the_engine_launches_the_kimi_k25_target_and_decodes_transformers_greedy() {
    let dir = tempfile::tempdir().unwrap();
    let (kimi, llama) = (launchable(dir.path(), "kimi-k25"), dir.path().join("llama"));
    TinyLlama::new(Family::Llama, 3).write(&llama).unwrap();
    let (mut engine, phases) = launch(&kimi);
    assert_eq!(phases, launch(&llama).1);
    assert_eq!(phases.first().map(String::as_str), Some("preflight:started"));
    assert_eq!(phases.last().map(String::as_str), Some("ready:done"));
    let greedy_equals_transformers = |engine: &mut Engine<CpuBackend>| {
        for c in cases("dsv3-qlora") {
            assert_eq!(greedy(engine, &c).tokens, c.greedy, "prompt {:?}", c.prompt);
        }
    };
    greedy_equals_transformers(&mut engine);
    // The continuous-batching scheduler runs every prompt at once (prefill chunks and decode
    // steps of several sequences in one forward over the paged latent pool): transformers'
    // tokens again, and the engine keeps its target for the batch-1 path afterwards.
    assert_eq!(scheduled(&mut engine, &cases("dsv3-qlora")), cases("dsv3-qlora").iter().map(|c| c.greedy.clone()).collect::<Vec<_>>());
    greedy_equals_transformers(&mut engine);
}

/// Every case's greedy tokens through the scheduler, all submitted at once.
fn scheduled(engine: &mut Engine<CpuBackend>, cases: &[Case]) -> Vec<Vec<u32>> {
    let mut out = BTreeMap::<u64, Vec<u32>>::new();
    let served = engine.serve_batch(SchedulerConfig { max_running: 8, chunk: 512, graph_max_bs: 8 }, &mut |batch| {
        for c in cases {
            let req =
                SeqRequest { prompt: c.prompt.clone(), max_tokens: c.greedy.len(), sampling: SamplingParams::default(), ignore_eos: true };
            out.insert(batch.submit(req).unwrap(), Vec::new());
        }
        while !batch.is_idle() {
            for u in batch.step().unwrap() {
                out.get_mut(&u.id).unwrap().extend(u.tokens);
            }
        }
    });
    served.unwrap();
    out.into_values().collect()
}

/// `--speculative-num-steps`, `--speculative-eagle-topk`, `--speculative-num-draft-tokens`.
const CHAIN: (u32, u32, u32) = (3, 1, 4);
const TREE: (u32, u32, u32) = (3, 2, 6);

/// Launch `target` with `drafter` under `algorithm` in each shape; every prompt's greedy
/// output, alone and served batched, must be transformers' target-only greedy. Returns the
/// accepted draft tokens per shape (of the batch-1 runs).
fn speculative_greedy_is_transformers(target: &Path, reference: &str, drafter: &Path, algorithm: Algorithm) -> [usize; 2] {
    let (sink, _rx) = EventSink::channel();
    let mut engine = Engine::new(CpuBackend, sink);
    let mut accepted = [0; 2];
    for (shape, (steps, topk, tokens)) in [CHAIN, TREE].into_iter().enumerate() {
        let spec = LaunchSpec {
            model_path: Some(target.display().to_string()),
            draft_model_path: Some(drafter.display().to_string()),
            device: Device::Cpu,
            speculative_algorithm: Some(algorithm),
            speculative_num_steps: Some(steps),
            speculative_eagle_topk: Some(topk),
            speculative_num_draft_tokens: Some(tokens),
            // Every drafter here was trained (written) for 2048 positions.
            context_length: Some(2048),
            ..LaunchSpec::default()
        };
        let outcome = engine.launch(&spec, &specdeck::preflight::check_spec);
        assert!(matches!(outcome, LaunchOutcome::Ready { .. }), "{algorithm:?} {drafter:?}: {outcome:?}");
        for c in cases(reference) {
            let g = greedy(&mut engine, &c);
            assert_eq!(g.tokens, c.greedy, "{algorithm:?} {drafter:?} topk {topk}, prompt {:?}", c.prompt);
            assert!(g.accept_lengths.iter().all(|&a| (1..=steps as usize + 1).contains(&a)));
            accepted[shape] += g.drafted;
        }
        // Served by the scheduler, every prompt at once (a tree runs one sequence at a time).
        let want: Vec<Vec<u32>> = cases(reference).iter().map(|c| c.greedy.clone()).collect();
        assert_eq!(scheduled(&mut engine, &cases(reference)), want, "{algorithm:?} {drafter:?} topk {topk}, scheduled");
    }
    accepted
}

/// EAGLE-3 (chain and tree) beside a DeepSeek-V3 target: the drafter reads the inputs of the
/// target's layers SGLang's convention names and shares its embeddings; greedy output stays
/// transformers' target-only greedy.
#[test]
fn eagle3_speculation_on_a_deepseek_target_is_lossless() {
    let dir = tempfile::tempdir().unwrap();
    let target = launchable(dir.path(), "dsv3-noqlora");
    let ck = Checkpoint::open(&target).unwrap();
    let (norm, head) = (ck.f32("model.norm.weight", None).unwrap(), ck.f32("lm_head.weight", None).unwrap());
    let mut eagle = TinyEagle3::new(9);
    eagle.max_positions = 2048;
    // Captures the inputs of layers 1, 2 and 3 of the four.
    eagle.aux_layer_ids = Some(vec![0, 1, 2]);
    let drafter = dir.path().join("eagle3");
    eagle.write_for(&drafter, 64, &norm, &head).unwrap();
    let accepted = speculative_greedy_is_transformers(&target, "dsv3-noqlora", &drafter, Algorithm::Eagle3);
    // A random drafter: few drafts accepted, but some, so both the accepted and the rejected
    // paths ran.
    assert!(accepted.iter().sum::<usize>() > 0, "no EAGLE-3 draft accepted: {accepted:?}");
    eprintln!("EAGLE-3 beside dsv3-noqlora: {accepted:?} draft tokens accepted (chain, tree)");
}

/// STANDALONE drafters of the target's own family beside the Kimi-K2.5 target: its own text
/// model (every draft accepted, so the accepted path is what runs) and another DeepSeek-V3
/// checkpoint with other weights (drafts mostly rejected, so the rollback is what runs).
#[test]
fn standalone_speculation_on_the_kimi_k25_target_is_lossless() {
    let dir = tempfile::tempdir().unwrap();
    let target = launchable(dir.path(), "kimi-k25");
    let same = launchable(dir.path(), "dsv3-qlora");
    let other = launchable(dir.path(), "dsv3-noqlora");
    let prompts = cases("dsv3-qlora").len();
    // The chain accepts all three drafts of every step: of the 15 tokens after each prompt's
    // first, 12 are drafts (4 steps of 3 drafts + the target's own, the last one cut short).
    let [chain, tree] = speculative_greedy_is_transformers(&target, "dsv3-qlora", &same, Algorithm::Standalone);
    assert_eq!(chain, 12 * prompts);
    assert!(tree >= 10 * prompts, "{tree} drafts of the tree accepted");
    let [chain, tree] = speculative_greedy_is_transformers(&target, "dsv3-qlora", &other, Algorithm::Standalone);
    assert!(chain + tree < 6 * prompts, "{chain} + {tree} drafts accepted from unrelated weights");
}

/// The EAGLE-3 drafters real DeepSeek-V3 and Kimi checkpoints ship (testdata/check/pairs):
/// Llama-architecture with their target's hidden size (7168) and 32000 draft ids. The engine
/// reads each beside its target's config and captures the layers SGLang's convention names.
#[test]
fn the_real_deepseek_and_kimi_drafters_read_beside_their_targets() {
    let pairs = [
        ("deepseek-v3__eagle3", [2, 30, 58]),
        ("kimi-k2-instruct__aq-medai-eagle3", [3, 31, 59]),
        ("kimi-k2.5__aq-medai-eagle3", [3, 31, 59]),
    ];
    for (pair, capture) in pairs {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/check/pairs").join(pair);
        let target = TargetConfig::from_config(&ModelConfig::load_dir(&dir.join("target")).unwrap()).unwrap();
        let TargetConfig::Deepseek(t) = &target else { panic!("{pair}: not read as the DeepSeek-V3 family") };
        let draft = Eagle3Config::from_config(&ModelConfig::load_dir(&dir.join("draft")).unwrap()).unwrap();
        assert_eq!((draft.hidden, draft.target_hidden, draft.draft_vocab), (7168, t.text.hidden, Some(32000)), "{pair}");
        assert_eq!(draft.capture_layers(t.text.layers).unwrap(), capture, "{pair}");
    }
}
