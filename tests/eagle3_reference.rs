//! The EAGLE-3 drafter's forward pass against a plain f64 transcription of eagle3_spec.md §2,
//! on a drafter whose weights are all random (nothing cancels out): the extend over prefill
//! pairs `(h_p, x_{p+1})` at positions `p`, then one draft-tree level at position
//! `committed + 1` (SGLang's convention) continuing the extend's last pre-norm hidden state.

use std::path::Path;
use std::sync::Arc;

use specdeck::backend::cpu::CpuBackend;
use specdeck::backend::{AttnWindow, Backend, Mask};
use specdeck::engine::drafter::{AuxRows, Candidate, Drafter};
use specdeck::engine::eagle3::{Eagle3Config, Eagle3Drafter};
use specdeck::engine::llama::{Capacity, Family, LlamaConfig, LlamaModel, Logits};
use specdeck::engine::target_model::TargetModel;
use specdeck::engine::weights::Loader;
use specdeck::model::checkpoint::Checkpoint;
use specdeck::model::config::ModelConfig;
use specdeck::testkit::{TinyEagle3, TinyLlama};

const EPS: f64 = 1e-6;

struct W(Checkpoint);

impl W {
    fn get(&self, name: &str) -> Vec<f32> {
        self.0.f32(name, None).unwrap()
    }
}

fn rms(x: &[f64], w: &[f32]) -> Vec<f64> {
    let s = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64 + EPS).sqrt();
    x.iter().zip(w).map(|(v, w)| v * s * *w as f64).collect()
}

/// `w · x` with `w` `[out, in]`.
fn linear(w: &[f32], x: &[f64]) -> Vec<f64> {
    w.chunks(x.len()).map(|row| row.iter().zip(x).map(|(a, b)| *a as f64 * b).sum()).collect()
}

/// NeoX rotation of every `hd`-wide head at `pos`, theta 10000 (the drafter's default).
fn rope(v: &mut [f64], pos: usize, hd: usize) {
    for head in v.chunks_mut(hd) {
        for i in 0..hd / 2 {
            let angle = pos as f64 * 10000f64.powf(-((2 * i) as f64) / hd as f64);
            let (a, b) = (head[i], head[i + hd / 2]);
            head[i] = a * angle.cos() - b * angle.sin();
            head[i + hd / 2] = b * angle.cos() + a * angle.sin();
        }
    }
}

struct Row {
    k: Vec<f64>,
    v: Vec<f64>,
}

struct Reference {
    w: W,
    h: usize,
    hd: usize,
    hot: Vec<u32>,
    embed: Vec<f32>,
}

impl Reference {
    /// One token: `x` is the residual input (fc output or the previous hidden state).
    /// Returns its K/V row, the pre-norm output and the draft probabilities.
    fn token(&self, tok: u32, x: &[f64], pos: usize, visible: &[&Row]) -> (Row, Vec<f64>, Vec<f64>) {
        let (h, hd) = (self.h, self.hd);
        let e: Vec<f64> = self.embed[tok as usize * h..][..h].iter().map(|v| *v as f64).collect();
        let mut u = rms(&e, &self.w.get("midlayer.input_layernorm.weight"));
        u.extend(rms(x, &self.w.get("midlayer.hidden_norm.weight")));
        let mut q = linear(&self.w.get("midlayer.self_attn.q_proj.weight"), &u);
        let mut k = linear(&self.w.get("midlayer.self_attn.k_proj.weight"), &u);
        let v = linear(&self.w.get("midlayer.self_attn.v_proj.weight"), &u);
        rope(&mut q, pos, hd);
        rope(&mut k, pos, hd);
        let me = Row { k, v };
        let rows: Vec<&Row> = visible.iter().copied().chain([&me]).collect();
        let mut attn = vec![0.0; h];
        for head in 0..h / hd {
            let sl = head * hd..(head + 1) * hd;
            let scores: Vec<f64> = rows
                .iter()
                .map(|r| q[sl.clone()].iter().zip(&r.k[sl.clone()]).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt())
                .collect();
            let max = scores.iter().cloned().fold(f64::MIN, f64::max);
            let ex: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = ex.iter().sum();
            for (r, p) in rows.iter().zip(&ex) {
                for i in sl.clone() {
                    attn[i] += p / total * r.v[i];
                }
            }
        }
        let o = linear(&self.w.get("midlayer.self_attn.o_proj.weight"), &attn);
        let s: Vec<f64> = x.iter().zip(&o).map(|(a, b)| a + b).collect();
        let y = rms(&s, &self.w.get("midlayer.post_attention_layernorm.weight"));
        let g = linear(&self.w.get("midlayer.mlp.gate_proj.weight"), &y);
        let up = linear(&self.w.get("midlayer.mlp.up_proj.weight"), &y);
        let act: Vec<f64> = g.iter().zip(&up).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
        let m = linear(&self.w.get("midlayer.mlp.down_proj.weight"), &act);
        let out: Vec<f64> = s.iter().zip(&m).map(|(a, b)| a + b).collect();
        let logits = linear(&self.w.get("lm_head.weight"), &rms(&out, &self.w.get("norm.weight")));
        let max = logits.iter().cloned().fold(f64::MIN, f64::max);
        let total: f64 = logits.iter().map(|l| (l - max).exp()).sum();
        let probs = logits.iter().map(|l| (l - max).exp() / total).collect();
        (me, out, probs)
    }

    /// The top `k` (target id, probability), mapped through `d2t`.
    fn top(&self, probs: &[f64], k: usize) -> Vec<(u32, f64)> {
        let mut idx: Vec<usize> = (0..probs.len()).collect();
        idx.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
        idx.into_iter().take(k).map(|i| (self.hot[i], probs[i])).collect()
    }
}

fn assert_matches(got: &[Candidate], want: &[(u32, f64)], what: &str) {
    let ids: Vec<u32> = got.iter().map(|c| c.token).collect();
    let want_ids: Vec<u32> = want.iter().map(|w| w.0).collect();
    assert_eq!(ids, want_ids, "{what}");
    for (c, (_, p)) in got.iter().zip(want) {
        assert!((c.prob as f64 - p).abs() < 1e-4, "{what}: {} vs {p}", c.prob);
    }
}

fn load_target(dir: &Path, backend: &Arc<CpuBackend>) -> LlamaModel<CpuBackend> {
    let cfg = LlamaConfig::from_config(&ModelConfig::load_dir(dir).unwrap()).unwrap();
    let ck = Checkpoint::open(dir).unwrap();
    let mut progress = |_| {};
    let mut ld = Loader::new(&**backend, &ck, &mut progress);
    LlamaModel::load(backend.clone(), cfg, &mut ld, Capacity { rows: 16, logit_rows: 4, positions: 64 }).unwrap()
}

#[test]
fn eagle3_forward_matches_the_spec_transcription() {
    let dir = tempfile::tempdir().unwrap();
    let (tdir, ddir) = (dir.path().join("t"), dir.path().join("d"));
    let target = TinyLlama::new(Family::Llama, 41);
    let weights = target.write(&tdir).unwrap();
    let mut eagle = TinyEagle3::new(42);
    eagle.imitate = false;
    eagle.draft_vocab = Some(40);
    eagle.aux_layer_ids = Some(vec![4, 1, 3]);
    eagle.write(&ddir, &target, &weights).unwrap();

    let b = Arc::new(CpuBackend);
    let mut model = TargetModel::from(load_target(&tdir, &b));
    let cfg = Eagle3Config::from_config(&ModelConfig::load_dir(&ddir).unwrap()).unwrap();
    let capture = cfg.capture_layers(target.layers).unwrap();
    assert_eq!(capture, [2, 4, 5]);
    model.set_capture(Some(capture)).unwrap();
    let seq = [7u32, 19, 3, 44, 28, 51];
    let committed = 5;
    let mut kv = model.new_kv(32).unwrap();
    model.inputs().set(&*b, &seq[..committed], &(0..committed).collect::<Vec<_>>());
    model.forward(&mut kv, AttnWindow { prefix: 0, region: committed, queries: committed }, Mask::Causal, Logits::None).unwrap();
    let aux_tensor = model.aux().unwrap();
    let aux = b.read_rows(aux_tensor, 0, committed).unwrap();

    let ck = Checkpoint::open(&ddir).unwrap();
    let mut progress = |_| {};
    let mut ld = Loader::new(&*b, &ck, &mut progress);
    let cap = Capacity { rows: 16, logit_rows: 4, positions: 64 };
    let mut drafter = Eagle3Drafter::load(cfg, &mut ld, &model.head().unwrap(), cap, 32, 3).unwrap();
    let rows: Vec<usize> = (0..committed).collect();
    let head = drafter.extend(&seq, committed, Some(AuxRows { tensor: aux_tensor, rows: &rows })).unwrap().unwrap();

    let h = target.hidden;
    let reference = Reference {
        w: W(Checkpoint::open(&ddir).unwrap()),
        h,
        hd: eagle.head_dim,
        hot: eagle.hot_ids(target.vocab),
        embed: Checkpoint::open(&tdir).unwrap().f32("model.embed_tokens.weight", None).unwrap(),
    };
    let fc = reference.w.get("fc.weight");
    // Extend: pair p = (hidden of position p, token p + 1) at position p, causal.
    let mut kv_rows: Vec<Row> = Vec::new();
    let mut last = (Vec::new(), Vec::new());
    for p in 0..committed {
        let g: Vec<f64> = aux[p * 3 * h..][..3 * h].iter().map(|v| *v as f64).collect();
        let x = linear(&fc, &g);
        let visible: Vec<&Row> = kv_rows.iter().collect();
        let (row, out, probs) = reference.token(seq[p + 1], &x, p, &visible);
        kv_rows.push(row);
        last = (out, probs);
    }
    assert_matches(&head, &reference.top(&last.1, 3), "extend head");

    // One tree level: the two best candidates at position committed + 1, each continuing the
    // extend's last hidden state, seeing the committed pairs and itself.
    let tokens = [head[0].token, head[1].token];
    let level = drafter.step(&tokens, &[0, 0], committed + 1, 2, &[1, 0, 0, 1]).unwrap();
    for (i, &tok) in tokens.iter().enumerate() {
        let visible: Vec<&Row> = kv_rows.iter().collect();
        let (_, _, probs) = reference.token(tok, &last.0, committed + 1, &visible);
        assert_matches(&level[i], &reference.top(&probs, 3), &format!("level 1, branch {i}"));
    }
}
