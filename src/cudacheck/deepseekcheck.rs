//! `cuda-check`'s DeepSeek-V3-family section: the forward on the backend's ops run on CUDA
//! (kernels/latent.cu, bf16 weights) against the host reference on the CPU (f32), on the
//! checkpoints of testdata/deepseek (with and without q LoRA, FP8 blocks, INT4 experts,
//! the Kimi-K2.5 wrapper) or any folder of the family.

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use super::modelcheck::{rel_err, Verdict};
use crate::backend::cpu::CpuBackend;
use crate::backend::{AttnWindow, Backend, BackendError, Mask};
use crate::engine::deepseek::{Compute, DeepseekModel, DeepseekTargetConfig};
use crate::engine::llama::{Capacity, Logits};
use crate::engine::weights::Loader;
use crate::model::checkpoint::Checkpoint;
use crate::model::config::ModelConfig;

/// Greedy steps after the prompt.
const STEPS: usize = 16;

fn load<B: Backend>(b: Arc<B>, dir: &Path, compute: Compute) -> anyhow::Result<DeepseekModel<B>> {
    let config = DeepseekTargetConfig { compute, ..DeepseekTargetConfig::from_config(&ModelConfig::load_dir(dir)?)? };
    let ck = Checkpoint::open(dir).map_err(BackendError::from)?;
    let mut progress = |_| {};
    let mut ld = Loader::new(&*b, &ck, &mut progress);
    let model = DeepseekModel::load(b.clone(), &config, &mut ld, Capacity { rows: 32, logit_rows: 32, positions: 128 })?;
    ld.finish();
    Ok(model)
}

/// What one backend computed: the prompt's logits (every row), then the greedy tokens and
/// each step's logits.
struct Run {
    prefill: Vec<f32>,
    tokens: Vec<u32>,
    steps: Vec<Vec<f32>>,
}

/// The prompt, then `STEPS` greedy tokens; each step a graph step where `graphs` (recorded,
/// captured, then replayed: its slot table goes up ahead, so one graph serves every length).
fn run<B: Backend>(b: Arc<B>, dir: &Path, compute: Compute, prompt: &[u32], graphs: bool) -> anyhow::Result<Run> {
    let mut model = load(b.clone(), dir, compute)?;
    let mut kv = model.new_kv(64)?;
    let n = prompt.len();
    model.inputs.set(&*b, prompt, &(0..n).collect::<Vec<_>>());
    model.forward(&mut kv, AttnWindow { prefix: 0, region: n, queries: n }, Mask::Causal, Logits::All)?;
    let prefill = b.read_rows(&model.logits, 0, n)?;
    let vocab = prefill.len() / n;
    let argmax = |row: &[f32]| (0..row.len()).fold(0, |best, i| if row[i] > row[best] { i } else { best }) as u32;
    let mut tokens = vec![argmax(&prefill[(n - 1) * vocab..])];
    let mut steps = Vec::new();
    b.graph_reset();
    for pos in n..n + STEPS {
        model.inputs.set(&*b, &[*tokens.last().unwrap()], &[pos]);
        let window = AttnWindow { prefix: pos, region: 1, queries: 1 };
        // Bracketed by hand, not by `graph_step`, so that a step that fails to capture or
        // replay is an error here rather than a quiet eager rerun.
        if graphs {
            model.prepare_forward(window, None);
            b.graph_begin("deepseek-check/decode")?;
        }
        let forward = model.forward(&mut kv, window, Mask::Causal, Logits::Last);
        if graphs {
            b.graph_end()?;
        }
        forward?;
        let row = b.read_rows(&model.logits, 0, 1)?;
        tokens.push(argmax(&row));
        steps.push(row);
    }
    Ok(Run { prefill, tokens, steps })
}

/// CUDA (`test`) against the CPU reference on each checkpoint folder of `dirs`, its rows
/// named after each folder and `mode` (how `test` is set up, when it is not the default).
pub fn deepseek_check<B: Backend>(test: Arc<B>, dirs: &[&Path], mode: &str) -> anyhow::Result<(Vec<Verdict>, Value)> {
    let mut verdicts = Vec::new();
    let mut runs = Vec::new();
    for dir in dirs {
        let folder = dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());
        let name = format!("{folder}{mode}");
        let vocab = DeepseekTargetConfig::from_config(&ModelConfig::load_dir(dir)?)?.text.vocab as u32;
        let prompt: Vec<u32> = (0..12).map(|i| (i * 37 + 5) % vocab).collect();
        let Run { prefill: gp, tokens: gt, steps: gs } = run(test.clone(), dir, Compute::Backend, &prompt, false)?;
        let Run { prefill: cp, tokens: ct, steps: cs } = run(Arc::new(CpuBackend), dir, Compute::Host, &prompt, false)?;
        let prefill = rel_err(&gp, &cp);
        let agree = gt.iter().zip(&ct).take_while(|(a, b)| a == b).count();
        // Steps compared while the two decode the same tokens (after a split they read different inputs).
        let decode = gs.iter().zip(&cs).take(agree.saturating_sub(1)).map(|(g, c)| rel_err(g, c)).fold(0.0, f64::max);
        verdicts.push(Verdict {
            name: format!("{name}: prefill logits vs CPU (rel. error)"),
            value: format!("{prefill:.2e}"),
            ok: Some(prefill < 1e-2),
        });
        verdicts.push(Verdict {
            name: format!("{name}: decode logits vs CPU, worst step (rel. error)"),
            value: format!("{decode:.2e}"),
            ok: Some(decode < 1e-2),
        });
        verdicts.push(Verdict {
            name: format!("{name}: greedy tokens equal to the CPU's"),
            value: format!("{agree} of {}", gt.len()),
            ok: Some(agree == gt.len()),
        });
        // The same decode as graph steps must compute the same bits as eagerly.
        let graphed = match test.uses_graphs() {
            true => Some(run(test.clone(), dir, Compute::Backend, &prompt, true)?),
            false => None,
        };
        if let Some(g) = &graphed {
            let same = g.tokens == gt && g.steps == gs;
            verdicts.push(Verdict {
                name: format!("{name}: decode as CUDA graph steps equals eager (tokens and logits, bitwise)"),
                value: if same { "equal".into() } else { format!("tokens {:?} vs eager {gt:?}", g.tokens) },
                ok: Some(same),
            });
        }
        let graph_tokens = graphed.map(|g| g.tokens);
        runs.push(json!({ "checkpoint": name, "prefill_rel_err": prefill, "decode_rel_err": decode, "cuda": gt, "cuda_graphs": graph_tokens, "cpu": ct }));
    }
    Ok((verdicts, json!({ "runs": runs })))
}
