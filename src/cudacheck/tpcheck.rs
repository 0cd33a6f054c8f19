//! `cuda-check`'s tensor-parallel section: a Llama-3.1-8B-sized MLP block (gate and up
//! column-parallel, down row-parallel, then the NCCL all-reduce) on 1 GPU and on `world`
//! GPUs, one thread per rank: the outputs must agree, and the time per block says what
//! tensor parallelism buys on this machine's links. `tp_model_check` runs the engine's
//! model code and rank threads over the GPUs against one GPU on a small checkpoint.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use super::modelcheck::{logits_of, rel_err, spec_for, Verdict};
use crate::backend::cuda::compile::CompiledModule;
use crate::backend::cuda::tp::{open_group, open_group_with};
use crate::backend::cuda::CudaBackend;
use crate::backend::{Backend, BackendError, KvDtype, Shard};
use crate::engine::lifecycle::Engine;
use crate::engine::ranks::{RankGroup, Serve};
use crate::engine::request::{Cancel, GenerateRequest, LaunchOutcome, PreflightFn};
use crate::event::EventSink;
use crate::model::checkpoint::TensorView;
use crate::spec::{Algorithm, LaunchSpec};

const HIDDEN: usize = 4096;
const INTER: usize = 14336;
const ROWS: usize = 1;
const ITERS: usize = 50;

fn bf16_noise(n: usize, seed: u64) -> Vec<u8> {
    (0..n)
        .flat_map(|i| {
            let z = (i as u64).wrapping_mul(0x9e3779b97f4a7c15) ^ seed;
            let u = ((z >> 33) % 2001) as f32 / 1000.0 - 1.0;
            half::bf16::from_f32(u * 0.02).to_le_bytes()
        })
        .collect()
}

struct Block {
    gate: <CudaBackend as Backend>::Weight,
    up: <CudaBackend as Backend>::Weight,
    down: <CudaBackend as Backend>::Weight,
    x: <CudaBackend as Backend>::Tensor,
    g: <CudaBackend as Backend>::Tensor,
    u: <CudaBackend as Backend>::Tensor,
    a: <CudaBackend as Backend>::Tensor,
    out: <CudaBackend as Backend>::Tensor,
}

fn block(b: &CudaBackend, world: usize, weights: &[Vec<u8>; 3], x: &[f32]) -> Result<Block, BackendError> {
    let view = |i: usize, shape: &'static [usize]| TensorView {
        name: ["mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"][i],
        file: std::path::Path::new("(generated)"),
        dtype: safetensors::tensor::Dtype::BF16,
        shape,
        data: &weights[i],
    };
    let local = INTER / world;
    Ok(Block {
        gate: b.load_weight(&view(0, &[INTER, HIDDEN]), Shard::Column)?,
        up: b.load_weight(&view(1, &[INTER, HIDDEN]), Shard::Column)?,
        down: b.load_weight(&view(2, &[HIDDEN, INTER]), Shard::Row)?,
        x: b.tensor_from(HIDDEN, x)?,
        g: b.tensor(ROWS, local)?,
        u: b.tensor(ROWS, local)?,
        a: b.tensor(ROWS, local)?,
        out: b.tensor(ROWS, HIDDEN)?,
    })
}

fn run_block(b: &CudaBackend, k: &mut Block) {
    b.matmul(&k.x, &k.gate, None, ROWS, &mut k.g);
    b.matmul(&k.x, &k.up, None, ROWS, &mut k.u);
    b.silu_mul(&k.g, &k.u, ROWS, &mut k.a);
    b.matmul(&k.a, &k.down, None, ROWS, &mut k.out);
    run_reduce(b, k);
}

/// The block's all-reduce alone (timed on its own as well).
fn run_reduce(b: &CudaBackend, k: &mut Block) {
    b.all_reduce(&mut k.out, ROWS);
}

/// Run `step` on every rank of a group (one thread each); rank 0's output and the
/// seconds per step.
fn time_group(
    group: &[CudaBackend],
    weights: &[Vec<u8>; 3],
    x: &[f32],
    step: fn(&CudaBackend, &mut Block),
) -> anyhow::Result<(Vec<f32>, f64)> {
    let world = group.len();
    let results: Vec<anyhow::Result<(Vec<f32>, f64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = group
            .iter()
            .map(|b| {
                s.spawn(move || -> anyhow::Result<(Vec<f32>, f64)> {
                    let mut k = block(b, world, weights, x)?;
                    step(b, &mut k);
                    b.sync()?;
                    let t = Instant::now();
                    for _ in 0..ITERS {
                        step(b, &mut k);
                    }
                    b.sync()?;
                    let per = t.elapsed().as_secs_f64() / ITERS as f64;
                    Ok((b.read_rows(&k.out, 0, ROWS)?, per))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a rank thread panicked")))).collect()
    });
    let mut out = None;
    let mut slowest: f64 = 0.0;
    for r in results {
        let (y, per) = r?;
        slowest = slowest.max(per);
        out.get_or_insert(y);
    }
    Ok((out.unwrap_or_default(), slowest))
}

pub fn tp_check(modules: &[CompiledModule], world: usize) -> anyhow::Result<(Vec<Verdict>, Value)> {
    let weights = [bf16_noise(INTER * HIDDEN, 1), bf16_noise(INTER * HIDDEN, 2), bf16_noise(HIDDEN * INTER, 3)];
    let x: Vec<f32> = (0..ROWS * HIDDEN).map(|i| ((i * 7919) % 200) as f32 / 100.0 - 1.0).collect();
    let (y1, t1) = time_group(&open_group(Some(modules), 1)?, &weights, &x, run_block)?;
    let nccl = open_group_with(Some(modules), world, false)?;
    let (y_nccl, t_nccl) = time_group(&nccl, &weights, &x, run_block)?;
    let (_, reduce_nccl) = time_group(&nccl, &weights, &x, run_reduce)?;
    drop(nccl);
    let peer = open_group_with(Some(modules), world, true)?;
    let connected = peer.iter().all(|b| b.peer_status().is_ok());
    let (yn, tn) = time_group(&peer, &weights, &x, run_block)?;
    let (_, reduce_peer) = time_group(&peer, &weights, &x, run_reduce)?;
    let num: f64 = y1.iter().zip(&yn).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
    let den: f64 = y1.iter().map(|a| (*a as f64).powi(2)).sum();
    let err = (num / den.max(1e-30)).sqrt();
    let same_as_nccl = yn == y_nccl;
    let speedup = t1 / tn;
    let us = |s: f64| s * 1e6;
    let verdicts = vec![
        Verdict { name: format!("TP{world} MLP block == TP1 (rel. error)"), value: format!("{err:.2e}"), ok: Some(err < 1e-4) },
        Verdict {
            name: format!("TP{world} MLP block, peer all-reduce == NCCL (bits)"),
            value: format!("{same_as_nccl}"),
            ok: Some(same_as_nccl),
        },
        Verdict {
            name: format!("TP{world} vs TP1 MLP block time (us)"),
            value: format!("{:.1} vs {:.1} = {speedup:.2}x (NCCL all-reduce: {:.1})", us(tn), us(t1), us(t_nccl)),
            ok: None,
        },
        Verdict {
            name: format!("all-reduce of {} f32 over {world} GPUs, peer (connected: {connected}) vs NCCL (us)", ROWS * HIDDEN),
            value: format!("{:.1} vs {:.1}", us(reduce_peer), us(reduce_nccl)),
            ok: None,
        },
    ];
    Ok((
        verdicts,
        json!({
            "world": world, "rel_err": err, "tp1_us": us(t1), "tpn_us": us(tn), "tpn_nccl_us": us(t_nccl), "speedup": speedup,
            "peer_connected": connected, "peer_equals_nccl": same_as_nccl, "all_reduce_peer_us": us(reduce_peer), "all_reduce_nccl_us": us(reduce_nccl),
        }),
    ))
}

/// The engine's model code over `world` GPUs against one GPU, on the small checkpoint
/// (`modelcheck::write_small_models`, its heads split evenly over 2): logits of a prefill
/// and a decode step (each rank on its own thread), and greedy tokens through the engine's
/// rank threads, target-only, EAGLE-3 chain and STANDALONE tree.
pub fn tp_model_check(modules: &[CompiledModule], small: &Path, world: usize) -> anyhow::Result<(Vec<Verdict>, Value)> {
    let prompt: Vec<u32> = (0..12).map(|i| (i * 97 + 5) % 2048).collect();
    let one = open_group(Some(modules), 1)?.remove(0);
    let (p1, d1) = logits_of(Arc::new(one), &small.join("target"), &prompt, KvDtype::Bf16)?;
    let ranks = open_group(Some(modules), world)?;
    let per_rank: Vec<anyhow::Result<(Vec<f32>, Vec<f32>)>> = std::thread::scope(|s| {
        let handles: Vec<_> =
            ranks.into_iter().map(|b| s.spawn(|| logits_of(Arc::new(b), &small.join("target"), &prompt, KvDtype::Bf16))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a rank thread panicked")))).collect()
    });
    let mut per_rank = per_rank.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    let same_on_ranks = per_rank.windows(2).all(|w| w[0] == w[1]);
    let (pn, dn) = per_rank.swap_remove(0);
    let (ep, ed) = (rel_err(&pn, &p1), rel_err(&dn, &d1));
    let mut verdicts = vec![
        Verdict {
            name: format!("TP{world} logits vs TP1, prefill of 12 / decode (rel. error)"),
            value: format!("{ep:.2e} / {ed:.2e}"),
            ok: Some(ep < 1e-2 && ed < 1e-2),
        },
        Verdict {
            name: format!("TP{world} logits bit-identical on every rank"),
            value: format!("{same_on_ranks}"),
            ok: Some(same_on_ranks),
        },
    ];
    let cases: [(&str, Option<Draft<'_>>); 3] = [
        ("target-only", None),
        ("EAGLE-3 chain", Some(("eagle3", Algorithm::Eagle3, 3, 1, 4))),
        ("STANDALONE tree", Some(("standalone", Algorithm::Standalone, 3, 2, 6))),
    ];
    let (sink, _rx) = EventSink::channel();
    let mut tp1: Box<dyn Serve> = Box::new(Engine::new(open_group(Some(modules), 1)?.remove(0), sink.clone()));
    let mut tpn: Box<dyn Serve> = Box::new(RankGroup::start(open_group(Some(modules), world)?, sink, &Cancel::default()));
    let mut runs = Vec::new();
    for (name, draft) in cases {
        let spec = small_spec(small, draft);
        let a = greedy_text(&mut *tp1, &spec)?;
        let b = greedy_text(&mut *tpn, &spec)?;
        let same = a == b;
        verdicts.push(Verdict {
            name: format!("TP{world} greedy == TP1, {name} (48 tokens)"),
            value: if same { "identical".into() } else { "DIFFERENT".into() },
            ok: Some(same),
        });
        runs.push(json!({ "case": name, "tp1": a, "tpn": b, "identical": same }));
    }
    Ok((verdicts, json!({ "world": world, "prefill_rel_err": ep, "decode_rel_err": ed, "ranks_identical": same_on_ranks, "runs": runs })))
}

/// A drafter of the small checkpoint: its subfolder, algorithm, steps, topk and draft tokens.
type Draft<'a> = (&'a str, Algorithm, u32, u32, u32);

/// The launch of the small target, target-only or with a drafter.
fn small_spec(small: &Path, draft: Option<Draft<'_>>) -> LaunchSpec {
    let drafter = draft.map(|(sub, ..)| small.join(sub));
    spec_for(&small.join("target"), draft.zip(drafter.as_deref()).map(|((_, algo, steps, topk, n), dir)| (dir, algo, steps, topk, n)))
}

fn greedy_text(engine: &mut dyn Serve, spec: &LaunchSpec) -> anyhow::Result<Vec<u32>> {
    let preflight: PreflightFn = Arc::new(|_: &LaunchSpec| Vec::new());
    if let LaunchOutcome::Failed(f) = engine.launch(spec, &preflight) {
        anyhow::bail!("launch failed: [{}] {}", f.id, f.message);
    }
    let req =
        GenerateRequest { prompt: "w5 w9 w17 w33 w4 w250 w1000 w7".into(), max_new_tokens: 48, chat: false, temperature: 0.0, seed: 0 };
    Ok(engine.generate_with(&req, true)?.tokens)
}
