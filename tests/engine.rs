//! The speculative engine on tiny real checkpoints written by `specdeck::testkit`: lossless
//! greedy speculation (chain and tree, EAGLE-3 and STANDALONE, three target families),
//! distribution-preserving sampling (chi-square, with a negative control), bad files,
//! hidden-state capture, and the launch lifecycle.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use specdeck::backend::cpu::CpuBackend;
use specdeck::backend::{AttnWindow, Backend, Mask};
use specdeck::engine::context;
use specdeck::engine::lifecycle::Engine;
use specdeck::engine::llama::{Capacity, Family, LlamaConfig, LlamaModel, Logits};
use specdeck::engine::request::LaunchOutcome;
use specdeck::engine::spec_decode::{Generation, Sampling};
use specdeck::engine::verify::{lossless, AcceptRule};
use specdeck::engine::weights::Loader;
use specdeck::event::{Event, EventReceiver, EventSink, PhaseState};
use specdeck::finding::{Evidence, Finding, Severity, Side, UNREADABLE_INPUT};
use specdeck::model::checkpoint::Checkpoint;
use specdeck::model::config::ModelConfig;
use specdeck::phase::PhaseId;
use specdeck::spec::{Algorithm, Device, LaunchSpec};
use specdeck::testkit::{TensorData, TinyEagle3, TinyLlama, TinyStandalone};

fn no_preflight(_: &LaunchSpec) -> Vec<Finding> {
    Vec::new()
}

#[derive(Clone, Copy, Debug)]
struct Shape {
    steps: u32,
    topk: u32,
    draft_tokens: u32,
}

const CHAIN: Shape = Shape { steps: 3, topk: 1, draft_tokens: 4 };
const TREE: Shape = Shape { steps: 3, topk: 2, draft_tokens: 6 };
const WIDE_TREE: Shape = Shape { steps: 4, topk: 4, draft_tokens: 10 };

fn spec(target: &Path, draft: Option<(&Path, Algorithm, Shape)>) -> LaunchSpec {
    let mut s = LaunchSpec { model_path: Some(target.display().to_string()), device: Device::Cpu, ..LaunchSpec::default() };
    match draft {
        Some((d, a, shape)) => {
            s.draft_model_path = Some(d.display().to_string());
            s.speculative_algorithm = Some(a);
            s.speculative_num_steps = Some(shape.steps);
            s.speculative_eagle_topk = Some(shape.topk);
            s.speculative_num_draft_tokens = Some(shape.draft_tokens);
        }
        None => s.speculative_algorithm = Some(Algorithm::None),
    }
    s
}

fn engine() -> (Engine<CpuBackend>, EventReceiver) {
    let (sink, rx) = EventSink::channel();
    (Engine::new(CpuBackend, sink), rx)
}

fn launched(engine: &mut Engine<CpuBackend>, s: &LaunchSpec) {
    if let LaunchOutcome::Failed(f) = engine.launch(s, &no_preflight) {
        panic!("launch failed: {f:?}");
    }
}

/// Generate without stop tokens, so every run has the same length.
fn run(engine: &mut Engine<CpuBackend>, prompt: &[u32], n: usize, sampling: Option<Sampling>) -> Generation {
    let mut d = engine.decoding(n, sampling);
    d.stop.clear();
    engine.generate_ids(prompt, &d).unwrap()
}

struct Folders {
    _dir: tempfile::TempDir,
    target: PathBuf,
    eagle: PathBuf,
    standalone: PathBuf,
}

fn folders(target: &TinyLlama, eagle: &TinyEagle3) -> Folders {
    let dir = tempfile::tempdir().unwrap();
    let (t, e, s) = (dir.path().join("target"), dir.path().join("eagle"), dir.path().join("standalone"));
    let w = target.write(&t).unwrap();
    eagle.write(&e, target, &w).unwrap();
    TinyStandalone::new(target.seed + 100).write(&s, target, &w).unwrap();
    Folders { _dir: dir, target: t, eagle: e, standalone: s }
}

/// One target per family, each with a different rope / drafter variant.
fn family_setups(seed: u64) -> Vec<(TinyLlama, TinyEagle3)> {
    let mut llama = TinyLlama::new(Family::Llama, seed);
    llama.rope_scaling = Some(json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64}));
    let mut llama_draft = TinyEagle3::new(seed + 1);
    llama_draft.draft_vocab = Some(48);
    llama_draft.aux_layer_ids = Some(vec![1, 4, 5]);
    let mut qwen2 = TinyLlama::new(Family::Qwen2, seed);
    qwen2.rope_theta = 1e6;
    qwen2.rope_scaling = Some(json!({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}));
    let mut qwen2_draft = TinyEagle3::new(seed + 2);
    qwen2_draft.rope_theta = Some(1e6);
    let qwen3 = TinyLlama::new(Family::Qwen3, seed);
    let qwen3_draft = TinyEagle3::new(seed + 3);
    let mut setups = vec![(llama, llama_draft), (qwen2, qwen2_draft), (qwen3, qwen3_draft)];
    // Room for a prompt longer than a prefill chunk, and the output after it.
    for (target, draft) in &mut setups {
        target.max_positions = 1024;
        draft.max_positions = 1024;
    }
    setups
}

/// A prompt of `len` seeded word ids (never the special ids 0..3).
fn prompt(len: usize, seed: u64, vocab: u32) -> Vec<u32> {
    (0..len as u64).map(|i| 3 + ((i * 7919 + seed * 104729) % (vocab as u64 - 3)) as u32).collect()
}

#[test]
fn greedy_speculation_equals_target_only_greedy() {
    let mut totals = Vec::new();
    for seed in [11, 23] {
        for (target, eagle) in family_setups(seed) {
            let f = folders(&target, &eagle);
            let (mut eng, _rx) = engine();
            // The second prompt is longer than a prefill chunk (512), so prefill and the
            // drafter's extend run in two chunks.
            let prompts = [prompt(5, seed, 64), prompt(600, seed + 1, 64)];
            launched(&mut eng, &spec(&f.target, None));
            let baseline: Vec<Generation> = prompts.iter().map(|p| run(&mut eng, p, 48, None)).collect();
            assert!(baseline.iter().all(|g| g.accept_lengths.iter().all(|&a| a == 1)));
            for (dir, algo) in [(&f.eagle, Algorithm::Eagle3), (&f.standalone, Algorithm::Standalone)] {
                for shape in [CHAIN, TREE, WIDE_TREE] {
                    launched(&mut eng, &spec(&f.target, Some((dir, algo, shape))));
                    let what = format!("{:?} seed {seed} {algo:?} {shape:?}", target.family);
                    let full = shape.steps as usize + 1;
                    let (mut drafted, mut rejections) = (0, 0);
                    for (p, base) in prompts.iter().zip(&baseline) {
                        let g = run(&mut eng, p, 48, None);
                        assert_eq!(g.tokens, base.tokens, "{what}, prompt of {}", p.len());
                        assert!(g.accept_lengths.iter().all(|&a| (1..=full).contains(&a)), "{what}");
                        drafted += g.drafted;
                        rejections += g.accept_lengths.iter().filter(|&&a| a < full).count();
                        totals.push(g.mean_accept_length());
                    }
                    // Not vacuous: drafts were accepted, and rejected (the KV rolled back).
                    assert!(drafted > 0 && rejections > 0, "{what}: {drafted} accepted, {rejections} rejections");
                }
            }
        }
    }
    // The imitation drafters predict the target well on average (a wiring error gives ~1).
    let mean = totals.iter().sum::<f64>() / totals.len() as f64;
    assert!(mean > 1.5, "mean accept length {mean}");
}

/// `--kv-cache-dtype bf16` on the CPU keeps K and V rounded as a GPU's bf16 cache holds them:
/// the same memory budget holds twice the tokens, and speculation over it is still lossless.
#[test]
fn a_bf16_kv_cache_holds_twice_the_tokens_and_speculation_stays_lossless() {
    let (target, eagle) = family_setups(31).remove(0);
    let f = folders(&target, &eagle);
    let (mut eng, mut rx) = engine();
    let kv_tokens = |events: &[Event]| -> usize {
        let detail = phases(events).into_iter().find(|(p, s, _)| *p == PhaseId::KvAlloc && *s == PhaseState::Done).unwrap().2.unwrap();
        detail.strip_prefix("KV cache: ").unwrap().split(' ').next().unwrap().parse().unwrap()
    };
    launched(&mut eng, &spec(&f.target, None));
    let f32_tokens = kv_tokens(&drain(&mut rx));
    let bf16 = |s: LaunchSpec| LaunchSpec { kv_cache_dtype: Some("bf16".into()), ..s };
    launched(&mut eng, &bf16(spec(&f.target, None)));
    let bf16_tokens = kv_tokens(&drain(&mut rx));
    assert!(bf16_tokens.abs_diff(2 * f32_tokens) <= 16, "{bf16_tokens} bf16 tokens, {f32_tokens} f32");
    let p = prompt(40, 31, 64);
    let baseline = run(&mut eng, &p, 40, None);
    for (dir, algo, shape) in
        [(&f.eagle, Algorithm::Eagle3, CHAIN), (&f.eagle, Algorithm::Eagle3, TREE), (&f.standalone, Algorithm::Standalone, CHAIN)]
    {
        launched(&mut eng, &bf16(spec(&f.target, Some((dir, algo, shape)))));
        let g = run(&mut eng, &p, 40, None);
        assert_eq!(g.tokens, baseline.tokens, "{algo:?} {shape:?}");
        assert!(g.drafted > 0, "{algo:?} {shape:?}: nothing accepted");
    }
}

// ---- sampling ------------------------------------------------------------------------------

/// ln Γ(x) (Lanczos, g = 7).
fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let x = x - 1.0;
    let t = x + 7.5;
    let s: f64 = C[0] + (1..9).map(|i| C[i] / (x + i as f64)).sum::<f64>();
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + s.ln()
}

/// The chi-square survival function: P(X ≥ x) for `df` degrees of freedom, via the
/// regularised upper incomplete gamma Q(df/2, x/2) (series below a+1, continued fraction above).
fn chi_square_p(x: f64, df: usize) -> f64 {
    let (a, x) = (df as f64 / 2.0, x / 2.0);
    let front = (-x + a * x.ln() - ln_gamma(a)).exp();
    if x < a + 1.0 {
        let (mut term, mut sum, mut n) = (1.0 / a, 1.0 / a, a);
        while term.abs() > sum.abs() * 1e-15 {
            n += 1.0;
            term *= x / n;
            sum += term;
        }
        1.0 - front * sum
    } else {
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let (mut c, mut d) = (1.0 / tiny, 1.0 / b);
        let mut h = d;
        for i in 1..1000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            d = if d.abs() < tiny { tiny } else { d };
            c = b + an / c;
            c = if c.abs() < tiny { tiny } else { c };
            d = 1.0 / d;
            let delta = d * c;
            h *= delta;
            if (delta - 1.0).abs() < 1e-15 {
                break;
            }
        }
        front * h
    }
}

#[test]
fn chi_square_p_values_match_tables() {
    // Table values: P(χ²₁ ≥ 3.841) = 0.05, P(χ²₁₀ ≥ 23.209) = 0.01, P(χ²₅ ≥ 4.351) = 0.5.
    for (x, df, p) in [(3.841, 1, 0.05), (23.209, 10, 0.01), (4.351, 5, 0.5), (1.0, 2, (-0.5f64).exp())] {
        let got = chi_square_p(x, df);
        assert!((got - p).abs() < 2e-4, "χ²({x}, {df}) = {got}, want {p}");
    }
}

/// The target's next-token distribution after `prompt`, from its own forward.
fn target_distribution(dir: &Path, prompt: &[u32], temperature: f32) -> Vec<f64> {
    let backend = Arc::new(CpuBackend);
    let cfg = LlamaConfig::from_config(&ModelConfig::load_dir(dir).unwrap()).unwrap();
    let ck = Checkpoint::open(dir).unwrap();
    let mut progress = |_| {};
    let mut ld = Loader::new(&*backend, &ck, &mut progress);
    let cap = Capacity { rows: 64, logit_rows: 1, positions: 128 };
    let mut model = LlamaModel::load(backend.clone(), cfg, &mut ld, cap).unwrap();
    let mut kv = model.new_kv(64).unwrap();
    let positions: Vec<usize> = (0..prompt.len()).collect();
    model.inputs.set(&*backend, prompt, &positions);
    let n = prompt.len();
    model.forward(&mut kv, AttnWindow { prefix: 0, region: n, queries: n }, Mask::Causal, Logits::Last);
    backend.softmax(&mut model.logits, 1, temperature);
    backend.read_rows(&model.logits, 0, 1).unwrap().into_iter().map(f64::from).collect()
}

/// Chi-square p-value of `counts` against `probs` (cells with expectation < 5 pooled).
fn goodness_of_fit(counts: &[u64], probs: &[f64]) -> f64 {
    let total: u64 = counts.iter().sum();
    let (mut stat, mut cells) = (0.0, 0);
    let (mut pooled_obs, mut pooled_exp) = (0.0, 0.0);
    for (&c, &p) in counts.iter().zip(probs) {
        let e = p * total as f64;
        if e < 5.0 {
            pooled_obs += c as f64;
            pooled_exp += e;
        } else {
            stat += (c as f64 - e).powi(2) / e;
            cells += 1;
        }
    }
    if pooled_exp > 0.0 {
        stat += (pooled_obs - pooled_exp).powi(2) / pooled_exp.max(1e-9);
        cells += 1;
    }
    chi_square_p(stat, cells - 1)
}

struct Draws {
    counts: Vec<u64>,
    /// Draws whose first token was an accepted draft token.
    accepted: usize,
}

/// The first generated token over `n` seeds; it is produced by a verify step.
fn first_token_draws(eng: &mut Engine<CpuBackend>, prompt: &[u32], vocab: usize, n: u64, rule: AcceptRule) -> Draws {
    let mut counts = vec![0u64; vocab];
    let mut accepted = 0;
    for seed in 0..n {
        let g = run(eng, prompt, 1, Some(Sampling { temperature: 1.0, seed, rule }));
        counts[g.tokens[0] as usize] += 1;
        accepted += g.drafted;
    }
    Draws { counts, accepted }
}

fn over_accepting(coin: f32, prob_acc: f32) -> bool {
    coin < (prob_acc * 1.6).min(1.0)
}

#[test]
fn sampling_under_speculation_keeps_the_target_distribution() {
    let mut target = TinyLlama::new(Family::Llama, 5);
    target.vocab = 16;
    target.logit_scale = 2.0;
    let f = folders(&target, &TinyEagle3::new(6));
    let p = [4u32, 9, 13, 7];
    let probs = target_distribution(&f.target, &p, 1.0);
    let (mut eng, _rx) = engine();
    const N: u64 = 3000;
    for (dir, algo, shape) in [(&f.eagle, Algorithm::Eagle3, TREE), (&f.standalone, Algorithm::Standalone, CHAIN)] {
        launched(&mut eng, &spec(&f.target, Some((dir, algo, shape))));
        let good = first_token_draws(&mut eng, &p, 16, N, lossless);
        let p_good = goodness_of_fit(&good.counts, &probs);
        // Not vacuous: the first token was a draft token in a good share of the draws, and
        // the target's own (residual) sample in the rest.
        let share = good.accepted as f64 / N as f64;
        assert!((0.05..0.95).contains(&share), "{algo:?}: accepted share {share}");
        assert!(p_good > 0.01, "{algo:?}: lossless rule rejected by chi-square, p = {p_good}, counts {:?}", good.counts);
        // Negative control: a rule that accepts drafts too often must fail the same test.
        let bad = first_token_draws(&mut eng, &p, 16, N, over_accepting);
        let p_bad = goodness_of_fit(&bad.counts, &probs);
        assert!(p_bad < 0.01, "{algo:?}: broken rule passed chi-square, p = {p_bad}");
    }
}

// ---- bad files -----------------------------------------------------------------------------

fn launch_failure(s: &LaunchSpec) -> (Finding, Vec<Event>) {
    let (mut eng, mut rx) = engine();
    let outcome = eng.launch(s, &no_preflight);
    let events = drain(&mut rx);
    match outcome {
        LaunchOutcome::Failed(f) => (f, events),
        LaunchOutcome::Ready { .. } => panic!("launch succeeded"),
    }
}

fn drain(rx: &mut EventReceiver) -> Vec<Event> {
    std::iter::from_fn(|| rx.try_recv().ok().map(|e| e.event)).collect()
}

fn failed_phase(events: &[Event]) -> Option<PhaseId> {
    events.iter().find_map(|e| match e {
        Event::Phase { phase, state: PhaseState::Failed, .. } => Some(*phase),
        _ => None,
    })
}

#[test]
fn bad_checkpoints_are_findings_that_name_file_and_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let target = TinyLlama::new(Family::Qwen2, 3);

    let missing = dir.path().join("missing");
    target.write_edited(&missing, |t| drop(t.remove("model.layers.3.mlp.up_proj.weight"))).unwrap();
    let (f, events) = launch_failure(&spec(&missing, None));
    assert_eq!((f.id.as_str(), f.phase, f.severity), (UNREADABLE_INPUT, PhaseId::TargetLoad, Severity::Error));
    assert!(f.message.ends_with("no tensor named model.layers.3.mlp.up_proj.weight"), "{}", f.message);
    assert_eq!(f.evidence[0].key, "model.layers.3.mlp.up_proj.weight");
    assert_eq!(failed_phase(&events), Some(PhaseId::TargetLoad));

    let shaped = dir.path().join("shaped");
    target
        .write_edited(&shaped, |t| {
            t.insert("model.layers.1.self_attn.k_proj.weight".into(), (vec![8, 32], TensorData::F32(vec![0.0; 256])));
        })
        .unwrap();
    let (f, _) = launch_failure(&spec(&shaped, None));
    let file = shaped.join("model.safetensors").display().to_string();
    assert_eq!(f.message, format!("{file}: tensor model.layers.1.self_attn.k_proj.weight has shape [8, 32], expected [16, 32]"));
    assert_eq!((f.evidence[0].side, f.evidence[0].file.as_str()), (Side::Target, file.as_str()));

    let truncated = dir.path().join("truncated");
    target.write(&truncated).unwrap();
    let st = truncated.join("model.safetensors");
    let bytes = std::fs::read(&st).unwrap();
    std::fs::write(&st, &bytes[..bytes.len() / 2]).unwrap();
    let (f, _) = launch_failure(&spec(&truncated, None));
    assert!(f.message.starts_with(&format!("{}: invalid safetensors header", st.display())), "{}", f.message);
    assert!(f.message.contains("truncated"), "{}", f.message);

    // A drafter whose d2t is missing fails in drafter-load, on the draft side, after the
    // target loaded.
    let good = dir.path().join("good");
    let w = target.write(&good).unwrap();
    let draft = dir.path().join("draft");
    let mut eagle = TinyEagle3::new(4);
    eagle.draft_vocab = Some(40);
    eagle.write_edited(&draft, &target, &w, |t| drop(t.remove("d2t"))).unwrap();
    let (f, events) = launch_failure(&spec(&good, Some((&draft, Algorithm::Eagle3, CHAIN))));
    assert_eq!((f.phase, f.evidence[0].side, f.evidence[0].key.as_str()), (PhaseId::DrafterLoad, Side::Draft, "d2t"));
    assert!(events.iter().any(|e| matches!(e, Event::Phase { phase: PhaseId::TargetLoad, state: PhaseState::Done, .. })));

    // A d2t that maps outside the target vocabulary names the entry.
    let bad_map = dir.path().join("bad_map");
    eagle
        .write_edited(&bad_map, &target, &w, |t| {
            t.insert("d2t".into(), (vec![40], TensorData::I64((0..40).map(|i| if i == 39 { 100 } else { 0 }).collect())));
        })
        .unwrap();
    let (f, _) = launch_failure(&spec(&good, Some((&bad_map, Algorithm::Eagle3, CHAIN))));
    assert!(
        f.message.ends_with("d2t: entry 39: 39 + 100 = 139 is not a target id above the previous one (38) and below 64"),
        "{}",
        f.message
    );
}

// ---- hidden-state capture ----------------------------------------------------------------

fn load(dir: &Path) -> LlamaModel<CpuBackend> {
    let backend = Arc::new(CpuBackend);
    let cfg = LlamaConfig::from_config(&ModelConfig::load_dir(dir).unwrap()).unwrap();
    let ck = Checkpoint::open(dir).unwrap();
    let mut progress = |_| {};
    let mut ld = Loader::new(&*backend, &ck, &mut progress);
    LlamaModel::load(backend.clone(), cfg, &mut ld, Capacity { rows: 16, logit_rows: 1, positions: 64 }).unwrap()
}

#[test]
fn captured_hidden_states_are_the_inputs_of_the_chosen_layers() {
    let dir = tempfile::tempdir().unwrap();
    let full = TinyLlama::new(Family::Qwen3, 9);
    full.write(&dir.path().join("full")).unwrap();
    let mut model = load(&dir.path().join("full"));
    model.set_capture(Some(vec![2, 5, 6])).unwrap();
    let ids = [3u32, 17, 40, 8, 21];
    let positions: Vec<usize> = (0..ids.len()).collect();
    let window = AttnWindow { prefix: 0, region: ids.len(), queries: ids.len() };
    let b = CpuBackend;
    let mut kv = model.new_kv(16).unwrap();
    model.inputs.set(&b, &ids, &positions);
    model.forward(&mut kv, window, Mask::Causal, Logits::None);
    let aux = b.read_rows(&model.capture.as_ref().unwrap().aux, 0, ids.len()).unwrap();
    let h = full.hidden;
    for (slot, layers) in [2usize, 5, 6].into_iter().enumerate() {
        // The same seed writes the same first layers: a `layers`-deep copy's final pre-norm
        // hidden state is the input of layer `layers` of the full model.
        let cut = TinyLlama { layers, ..full.clone() };
        let sub = dir.path().join(format!("cut{layers}"));
        cut.write(&sub).unwrap();
        let mut short = load(&sub);
        let mut kv = short.new_kv(16).unwrap();
        short.inputs.set(&b, &ids, &positions);
        short.forward(&mut kv, window, Mask::Causal, Logits::None);
        let want = b.read_rows(short.final_hidden(), 0, ids.len()).unwrap();
        for r in 0..ids.len() {
            let got = &aux[r * 3 * h + slot * h..][..h];
            assert_eq!(got, &want[r * h..][..h], "layer {layers}, row {r}");
        }
    }
}

// ---- lifecycle -----------------------------------------------------------------------------

fn phases(events: &[Event]) -> Vec<(PhaseId, PhaseState, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Phase { phase, state, detail } => Some((*phase, *state, detail.clone())),
            _ => None,
        })
        .collect()
}

fn states(events: &[Event]) -> Vec<String> {
    phases(events).into_iter().map(|(p, s, _)| format!("{p}:{}", serde_json::to_value(s).unwrap().as_str().unwrap())).collect()
}

#[test]
fn launch_runs_the_phases_in_order_and_a_relaunch_keeps_the_target() {
    // Tied embeddings: the EAGLE-3 drafter (no draft vocabulary) predicts through the
    // target's lm_head, which is its embedding table.
    let target = TinyLlama { tie_embeddings: true, ..TinyLlama::new(Family::Llama, 2) };
    let f = folders(&target, &TinyEagle3::new(3));
    let (mut eng, mut rx) = engine();
    launched(&mut eng, &spec(&f.target, Some((&f.eagle, Algorithm::Eagle3, CHAIN))));
    let first = drain(&mut rx);
    assert!(matches!(first[0], Event::Launch { attempt: 1, .. }));
    let after_the_target = [
        "drafter-load:started",
        "drafter-load:done",
        "drafter-init:started",
        "drafter-init:done",
        "draft-graph-capture:skipped",
        "warmup:started",
        "warmup:done",
        "ready:done",
    ];
    assert_eq!(states(&first), [&UP_TO_THE_DRAFTER[..], &after_the_target].concat());
    // Byte progress per file ends at the file's size.
    let size = std::fs::metadata(f.target.join("model.safetensors")).unwrap().len();
    let last = first.iter().rev().find_map(|e| match e {
        Event::Progress { phase: PhaseId::TargetLoad, label, done, total, .. } => Some((label.clone(), *done, *total)),
        _ => None,
    });
    assert_eq!(last, Some(("model.safetensors".to_string(), size, size)));
    assert!(matches!(first.last(), Some(Event::Ready { reused_target: false, .. })));

    // Only the drafter changes: the target stays resident.
    let outcome = eng.launch(&spec(&f.target, Some((&f.standalone, Algorithm::Standalone, TREE))), &no_preflight);
    assert!(matches!(outcome, LaunchOutcome::Ready { reused_target: true, .. }));
    let second = drain(&mut rx);
    assert!(matches!(second[0], Event::Launch { attempt: 2, .. }));
    let kept = phases(&second).into_iter().find(|(p, _, _)| *p == PhaseId::TargetLoad);
    assert_eq!(kept, Some((PhaseId::TargetLoad, PhaseState::Skipped, Some("kept resident".into()))));
    assert!(!second.iter().any(|e| matches!(e, Event::Progress { phase: PhaseId::TargetLoad, .. })));
    assert!(second.iter().any(|e| matches!(e, Event::Progress { phase: PhaseId::DrafterLoad, .. })), "a new drafter loads");

    // A relaunch that leaves the drafter valid (a chain instead of the tree) keeps it too,
    // with caches sized for the new shape; its greedy output is the target's, as before.
    let prompt = [3, 1, 4, 1, 5];
    let before = run(&mut eng, &prompt, 12, None).tokens;
    let outcome = eng.launch(&spec(&f.target, Some((&f.standalone, Algorithm::Standalone, CHAIN))), &no_preflight);
    assert!(matches!(outcome, LaunchOutcome::Ready { reused_target: true, .. }));
    let third = drain(&mut rx);
    let kept = phases(&third).into_iter().find(|(p, _, _)| *p == PhaseId::DrafterLoad);
    assert_eq!(kept, Some((PhaseId::DrafterLoad, PhaseState::Skipped, Some("kept resident".into()))));
    assert!(!third.iter().any(|e| matches!(e, Event::Progress { .. })), "no weights move");
    let after = run(&mut eng, &prompt, 12, None);
    assert_eq!(after.tokens, before);
    assert!(after.accept_lengths.iter().all(|&n| n <= CHAIN.steps as usize + 1), "{:?}", after.accept_lengths);
}

/// Edit a folder's config.json in place.
fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> String {
    let file = dir.join("config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    edit(config.as_object_mut().unwrap());
    std::fs::write(&file, config.to_string()).unwrap();
    file.display().to_string()
}

/// The phases a launch runs before its drafter (the CPU reference has no graphs to capture).
const UP_TO_THE_DRAFTER: [&str; 8] = [
    "preflight:started",
    "preflight:done",
    "kernel-compile:skipped",
    "target-load:started",
    "target-load:done",
    "kv-alloc:started",
    "kv-alloc:done",
    "target-graph-capture:skipped",
];

/// Each value of the launch that cannot be used is reported by the phase that uses it,
/// after the phases before it ran, with the file and key it comes from.
#[test]
fn a_launch_reports_what_it_cannot_use_in_the_phase_that_uses_it() {
    let target = TinyLlama::new(Family::Llama, 6);
    let unusable = |file: &str, key: &str, message: String, phase: PhaseId, side: Side| {
        Finding::new(UNREADABLE_INPUT, Severity::Error, phase, message).with_evidence(Evidence::new(side, file, key, Value::Null))
    };
    let then = |tail: &[&str]| UP_TO_THE_DRAFTER.iter().chain(tail).map(|s| s.to_string()).collect::<Vec<_>>();

    // No target folder: preflight fails.
    let f = folders(&target, &TinyEagle3::new(7));
    let (finding, events) = launch_failure(&LaunchSpec { model_path: None, ..spec(&f.target, None) });
    assert_eq!(
        (finding.id.as_str(), finding.phase, finding.evidence[0].key.as_str()),
        (UNREADABLE_INPUT, PhaseId::Preflight, "--model-path")
    );
    assert_eq!(states(&events), ["preflight:started", "preflight:failed"]);

    // A target config the engine cannot build the model from: target-load fails.
    let broken = folders(&target, &TinyEagle3::new(7));
    let file = edit_config(&broken.target, |c| drop(c.remove("num_hidden_layers")));
    let (finding, events) = launch_failure(&spec(&broken.target, None));
    let message = format!("{file}: /num_hidden_layers is missing");
    assert_eq!(finding, unusable(&file, "/num_hidden_layers", message, PhaseId::TargetLoad, Side::Target));
    assert_eq!(
        states(&events),
        ["preflight:started", "preflight:done", "kernel-compile:skipped", "target-load:started", "target-load:failed"]
    );

    // A KV dtype the engine cannot keep: preflight fails before any weights move, naming the flag.
    let (finding, events) = launch_failure(&LaunchSpec { kv_cache_dtype: Some("fp8_e4m3".into()), ..spec(&f.target, None) });
    assert_eq!(
        (finding.id.as_str(), finding.phase, finding.evidence[0].key.as_str(), &finding.evidence[0].value),
        (UNREADABLE_INPUT, PhaseId::Preflight, "--kv-cache-dtype", &json!("fp8_e4m3"))
    );
    assert_eq!(states(&events), ["preflight:started", "preflight:failed"]);

    // A context key of the wrong type: the target loads, kv-alloc fails.
    let file = edit_config(&broken.target, |c| {
        c.insert("num_hidden_layers".into(), json!(target.layers));
        c.insert("max_sequence_length".into(), json!("long"));
    });
    let (finding, events) = launch_failure(&spec(&broken.target, None));
    let message = format!("{file}: /max_sequence_length = \"long\" is not a non-negative integer");
    let mut want = unusable(&file, "/max_sequence_length", message, PhaseId::KvAlloc, Side::Target);
    // The evidence cites the value as the file has it.
    want.evidence[0].value = json!("long");
    assert_eq!(finding, want);
    assert_eq!(states(&events), [&UP_TO_THE_DRAFTER[..6], &["kv-alloc:failed"]].concat());

    // EAGLE (1/2) is refused, and so is a drafting launch without a drafter, both before
    // drafter-load starts.
    let (finding, events) = launch_failure(&spec(&f.target, Some((&f.eagle, Algorithm::Eagle, CHAIN))));
    assert_eq!((finding.id.as_str(), finding.phase), ("unsupported-algorithm", PhaseId::DrafterLoad));
    assert_eq!(states(&events), then(&["drafter-load:failed"]));
    let (finding, events) =
        launch_failure(&LaunchSpec { draft_model_path: None, ..spec(&f.target, Some((&f.eagle, Algorithm::Eagle3, CHAIN))) });
    let key = finding.evidence[0].key.as_str();
    assert_eq!((finding.id.as_str(), finding.phase, key), (UNREADABLE_INPUT, PhaseId::Preflight, "--speculative-draft-model-path"));
    assert_eq!(states(&events), then(&["drafter-load:failed"]));

    // A drafter config without a size it needs: drafter-load fails, on the draft side.
    let file = edit_config(&broken.eagle, |c| drop(c.remove("hidden_size")));
    let (finding, events) = launch_failure(&spec(&f.target, Some((&broken.eagle, Algorithm::Eagle3, CHAIN))));
    assert_eq!(finding, unusable(&file, "/hidden_size", format!("{file}: /hidden_size is missing"), PhaseId::DrafterLoad, Side::Draft));
    assert_eq!(states(&events), then(&["drafter-load:started", "drafter-load:failed"]));

    // Capture layers past the target's last layer: the drafter loads, drafter-init fails.
    let aux = TinyEagle3 { aux_layer_ids: Some(vec![1, 4, 7]), ..TinyEagle3::new(7) };
    let dir = tempfile::tempdir().unwrap();
    let w = target.write(&dir.path().join("target")).unwrap();
    aux.write(&dir.path().join("eagle"), &target, &w).unwrap();
    let file = dir.path().join("eagle").join("config.json").display().to_string();
    let (finding, events) = launch_failure(&spec(&dir.path().join("target"), Some((&dir.path().join("eagle"), Algorithm::Eagle3, CHAIN))));
    let message = format!(
        "{file}: /eagle_config/eagle_aux_hidden_state_layer_ids: capture layers [2, 5, 8] ([1, 4, 7] + 1) must be 3 distinct inputs of target layers 1..=7"
    );
    let key = "/eagle_config/eagle_aux_hidden_state_layer_ids";
    assert_eq!(finding, unusable(&file, key, message, PhaseId::DrafterInit, Side::Draft));
    assert_eq!(states(&events), then(&["drafter-load:started", "drafter-load:done", "drafter-init:started", "drafter-init:failed"]));
}

fn short_drafter_pair() -> (Folders, LaunchSpec) {
    let target = TinyLlama::new(Family::Llama, 4);
    let mut eagle = TinyEagle3::new(5);
    eagle.max_positions = 256;
    let f = folders(&target, &eagle);
    let s = spec(&f.target, Some((&f.eagle, Algorithm::Eagle3, CHAIN)));
    (f, s)
}

#[test]
fn drafter_init_mirrors_sglangs_context_check() {
    let (_f, s) = short_drafter_pair();
    // Without preflight the target loads, then drafter-init fails as SGLang's draft worker does.
    let (f, events) = launch_failure(&s);
    assert_eq!((f.id.as_str(), f.phase), (context::ID, PhaseId::DrafterInit));
    assert_eq!((f.evidence[0].value.clone(), f.evidence[1].value.clone()), (json!(512), json!(256)));
    assert_eq!(failed_phase(&events), Some(PhaseId::DrafterInit));
    assert!(events.iter().any(|e| matches!(e, Event::Phase { phase: PhaseId::TargetLoad, state: PhaseState::Done, .. })));
    assert!(!events.iter().any(|e| matches!(e, Event::Ready { .. })));

    // The allow remedy: the same finding as a warning, positions extended, ready.
    let mut allowed = s.clone();
    allowed.apply_remedy(context::ALLOW, &f.remedy(context::ALLOW).unwrap().changes).unwrap();
    let (mut eng, mut rx) = engine();
    assert!(matches!(eng.launch(&allowed, &no_preflight), LaunchOutcome::Ready { .. }));
    let events = drain(&mut rx);
    let warning = events.iter().find_map(|e| match e {
        Event::Finding(f) => Some(f.clone()),
        _ => None,
    });
    assert_eq!(warning.map(|w| (w.id, w.severity, w.phase)), Some((context::ID.to_string(), Severity::Warning, PhaseId::DrafterInit)));
    assert!(events.iter().any(|e| matches!(e, Event::Log { line, .. } if line.contains("positions extended"))));

    // The clamp remedy relaunches with the target resident.
    let mut clamped = s.clone();
    clamped.apply_remedy(context::CLAMP, &f.remedy(context::CLAMP).unwrap().changes).unwrap();
    assert!(matches!(eng.launch(&clamped, &no_preflight), LaunchOutcome::Ready { reused_target: true, .. }));
}

#[test]
fn a_preflight_error_stops_before_any_weights_move() {
    let (_f, s) = short_drafter_pair();
    let (mut eng, mut rx) = engine();
    let outcome = eng.launch(&s, &specdeck::preflight::check_spec);
    let events = drain(&mut rx);
    assert!(matches!(outcome, LaunchOutcome::Failed(ref f) if f.id == context::ID));
    assert_eq!(states(&events), ["preflight:started", "preflight:failed"]);
    assert!(!events.iter().any(|e| matches!(e, Event::Progress { .. })));
}
