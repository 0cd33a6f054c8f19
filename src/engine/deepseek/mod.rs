//! DeepSeek-V3-family targets (DeepSeek-V3/R1, Kimi-K2, Moonlight, the Kimi-K2.5 text model):
//! MLA (`mla`) and the sigmoid grouped-top-k MoE (`router`, `moe`), written out plainly on the
//! host in f32 as the reference a GPU path is checked against, and checked itself against
//! transformers' `DeepseekV3ForCausalLM` (testdata/deepseek/, tests/deepseek_reference.rs).
//!
//! The model speaks the target's side of the backend seam as `LlamaModel` does (token ids
//! and positions in `inputs`, logits in `logits`, the KV cache a `KvCache`, here the latent
//! one), so the engine's decoding loop drives either.
//!
//! Over a backend's tensor-parallel group (`Backend::tp_world`) each rank holds its share:
//! its attention heads, its part of the dense and shared MLP widths, its part of the routed
//! experts (`--ep-size` groups of ranks, each holding a run of experts, split by width over
//! the group's ranks); the embeddings, norms, router and latent projection whole. After
//! attention and after the feed-forward the ranks' partial sums meet in the backend's
//! all-reduce. Every rank computes the same latent for its heads: the latent cache is whole
//! on each rank.

pub(crate) mod device;
pub(crate) mod host;
pub(crate) mod mla;
pub(crate) mod moe;
pub(crate) mod rows;

use std::sync::Arc;

use crate::backend::latent::{SeqSlots, SlotTable};
use crate::backend::rope::{yarn_mscale, RopeParams};
use crate::backend::{AttnWindow, Backend, BackendError, BatchSeq, Mask, PagedBatch, RopeStyle};
use crate::engine::deepseek::device::DeviceStack;
use crate::engine::deepseek::host::{add, rms_norm, Linear, Split};
use crate::engine::deepseek::mla::{Mla, MlaShape, RopeRows, Visibility};
use crate::engine::deepseek::moe::FeedForward;
use crate::engine::drafter::TargetHead;
use crate::engine::kv::KvCache;
use crate::engine::llama::{rope_from_config, Capacity, Capture, Logits, StepInputs};
use crate::engine::weights::Loader;
use crate::model::config::{ConfigError, ModelConfig};
use crate::model::deepseek::DeepseekConfig;

pub use mla::Attend;

/// What the engine derives from the config beside the text model's sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct DeepseekTargetConfig {
    pub text: DeepseekConfig,
    /// RoPE over `qk_rope_head_dim`, YaRN's mscale in its cos and sin.
    pub rope: RopeParams,
    pub softmax_scale: f32,
    /// `--ep-size`: the routed experts split into this many groups of the tensor-parallel
    /// ranks, each expert's width over the ranks of a group (SGLang's `moe_tp_size`).
    pub ep_size: usize,
    pub compute: Compute,
}

/// Where a DeepSeek-V3 target's forward computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compute {
    /// The host reference on the CPU backends (and their emulated ranks), the backend's ops
    /// on any other.
    Auto,
    /// The host reference (`mla`, `moe`): f32, written out plainly.
    Host,
    /// The backend's ops (`device`).
    Backend,
}

impl DeepseekTargetConfig {
    pub fn from_config(cfg: &ModelConfig) -> Result<DeepseekTargetConfig, ConfigError> {
        let text = DeepseekConfig::from_config(cfg)?;
        let rope = RopeParams { style: RopeStyle::Interleaved, ..rope_from_config(cfg, text.qk_rope_head_dim)? };
        Ok(DeepseekTargetConfig { softmax_scale: softmax_scale(cfg, text.qk_head_dim()), rope, text, ep_size: 1, compute: Compute::Auto })
    }
}

/// `qk_head_dim^-0.5`, times `mscale(factor, mscale_all_dim)²` under a scaled rope, as
/// transformers' `DeepseekV3Attention` sets `self.scaling`.
fn softmax_scale(cfg: &ModelConfig, qk_head_dim: usize) -> f32 {
    let base = (qk_head_dim as f64).powf(-0.5);
    let all_dim = cfg.rope_scaling().filter(|s| s.kind != "default").and_then(|s| {
        let m = s.raw.get("mscale_all_dim").and_then(serde_json::Value::as_f64).filter(|m| *m != 0.0)?;
        Some(yarn_mscale(s.factor, m))
    });
    (base * all_dim.map_or(1.0, |m| m * m)) as f32
}

struct DecoderLayer {
    input_ln: Vec<f32>,
    attn: Mla,
    post_ln: Vec<f32>,
    ffn: FeedForward,
}

/// The weights, where the forward computes with them.
// One per engine: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
enum Stack<B: Backend> {
    Host(HostStack),
    Device(DeviceStack<B>),
}

struct HostStack {
    /// `[vocab, hidden]`: gathered by token, and the lm_head when tied.
    embed: Linear,
    layers: Vec<DecoderLayer>,
    norm: Vec<f32>,
    /// None: tied to the embeddings.
    lm_head: Option<Linear>,
}

pub struct DeepseekModel<B: Backend> {
    pub config: DeepseekConfig,
    pub capacity: Capacity,
    backend: Arc<B>,
    stack: Stack<B>,
    /// This rank's heads.
    shape: MlaShape,
    split: Split,
    /// What `rope` was computed from, to extend it to a longer context.
    rope_params: RopeParams,
    rope: RopeRows,
    pub inputs: StepInputs<B>,
    pub logits: B::Tensor,
    pub capture: Option<Capture<B>>,
    /// One way of attending for every forward (tests compare them); `None`: decompress where
    /// the forward's own tokens are at least half the slots it reads (a prefill), else absorb.
    pub attend: Option<Attend>,
    /// The next forward's slot table, handed to the backend ahead of it.
    prepared: Option<Prepared>,
}

impl<B: Backend> DeepseekModel<B> {
    /// Load the text model's tensors; the MTP layer (index `num_hidden_layers`) and a
    /// wrapper's vision parts stay unread.
    pub fn load(backend: Arc<B>, config: &DeepseekTargetConfig, ld: &mut Loader<'_, B>, cap: Capacity) -> Result<Self, BackendError> {
        let c = &config.text;
        let p = c.prefix();
        ld.check_layers(&format!("{p}model.layers."), "num_hidden_layers", c.layers)?;
        let split = Split::of(&*backend);
        let heads = split.part(c.heads, "num_attention_heads")?;
        let shape = MlaShape::new(c, heads.len(), config.softmax_scale);
        let on_backend = match config.compute {
            Compute::Auto => !backend.name().starts_with("cpu"),
            Compute::Host => false,
            Compute::Backend => true,
        };
        let embed = Linear::load(ld, &c.weights, &format!("{p}model.embed_tokens.weight"), c.vocab, c.hidden)?;
        let host_layers = if on_backend {
            None
        } else {
            let mut layers = Vec::with_capacity(c.layers);
            for i in 0..c.layers {
                let l = format!("{p}model.layers.{i}.");
                layers.push(DecoderLayer {
                    input_ln: ld.host_f32(&format!("{l}input_layernorm.weight"), &[c.hidden])?,
                    attn: Mla::load(ld, &format!("{l}self_attn."), c, heads.clone())?,
                    post_ln: ld.host_f32(&format!("{l}post_attention_layernorm.weight"), &[c.hidden])?,
                    ffn: FeedForward::load(ld, &format!("{l}mlp."), c, i, split, config.ep_size)?,
                });
            }
            Some(layers)
        };
        let norm = ld.host_f32(&format!("{p}model.norm.weight"), &[c.hidden])?;
        let head = format!("{p}lm_head.weight");
        let lm_head = if c.tie_embeddings && !ld.has(&head) { None } else { Some(Linear::load(ld, &c.weights, &head, c.vocab, c.hidden)?) };
        let b = &*backend;
        let stack = match host_layers {
            Some(layers) => Stack::Host(HostStack { embed, layers, norm, lm_head }),
            None => Stack::Device(DeviceStack::load(
                b,
                ld,
                c,
                (shape, heads, split, config.ep_size),
                (&embed, lm_head.as_ref(), &norm),
                config.rope.table(b, cap.positions)?,
                (cap.rows, cap.logit_rows),
            )?),
        };
        let (cos, sin) = config.rope.cos_sin(cap.positions);
        Ok(DeepseekModel {
            inputs: StepInputs::new(b, cap.rows)?,
            logits: b.tensor(cap.logit_rows, c.vocab)?,
            shape,
            split,
            rope_params: config.rope.clone(),
            rope: RopeRows { cos, sin, half: c.qk_rope_head_dim / 2 },
            capture: None,
            attend: None,
            prepared: None,
            config: c.clone(),
            capacity: cap,
            stack,
            backend,
        })
    }

    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// Weight elements as loaded: the text model's, all experts counted.
    pub fn parameters(&self) -> u64 {
        self.elements().0
    }

    /// Bytes of weights one decode step reads: one embedding row, the lm_head, and of each
    /// MoE layer its router, shared experts and `num_experts_per_tok` routed experts, in the
    /// dtype they are kept in (f32 on the host; on a device the backend's weight dtype, or as
    /// stored with their scales where the backend keeps them so).
    pub fn weight_bytes(&self) -> u64 {
        match &self.stack {
            Stack::Host(_) => 4 * self.elements().1,
            Stack::Device(d) => d.read_bytes,
        }
    }

    /// Weight elements held, and read by one token.
    fn elements(&self) -> (u64, u64) {
        let host = match &self.stack {
            Stack::Host(host) => host,
            Stack::Device(d) => return d.elements,
        };
        let k = self.config.moe.per_token;
        let layers = |routed: Option<usize>| -> usize {
            host.layers.iter().map(|l| l.input_ln.len() + l.attn.elements() + l.post_ln.len() + l.ffn.elements(routed)).sum()
        };
        let (embed, norm, head) = (host.embed.elements(), host.norm.len(), host.lm_head.as_ref().map(Linear::elements));
        // A token reads one embedding row, and the whole lm_head (the table, when tied).
        let (held, read) = (embed + norm + head.unwrap_or(0), self.config.hidden + norm + head.unwrap_or(embed));
        ((held + layers(None)) as u64, (read + layers(Some(k))) as u64)
    }

    /// The group's sum of every rank's partial `[n, hidden]` output (itself at one rank).
    fn summed(&self, part: Vec<f32>, n: usize) -> Result<Vec<f32>, BackendError> {
        if self.split.world == 1 {
            return Ok(part);
        }
        let b = &*self.backend;
        let mut t = b.tensor_from(self.config.hidden, &part)?;
        b.all_reduce(&mut t, n);
        b.read_rows(&t, 0, n)
    }

    /// What an EAGLE-3 drafter shares: the embeddings and the lm_head (the embeddings again
    /// when tied), put on the backend when it asks for them.
    pub fn head(&self) -> Result<TargetHead<B>, BackendError> {
        let b = &*self.backend;
        let (embed, lm_head) = match &self.stack {
            Stack::Device(d) => (d.embed.clone(), d.lm_head.clone()),
            Stack::Host(host) => {
                let embed = Arc::new(host.embed.to_backend(b, "model.embed_tokens.weight")?);
                let lm_head = match &host.lm_head {
                    Some(head) => Arc::new(head.to_backend(b, "lm_head.weight")?),
                    None => embed.clone(),
                };
                (embed, lm_head)
            }
        };
        Ok(TargetHead { backend: self.backend.clone(), vocab: self.config.vocab, hidden: self.config.hidden, embed, lm_head })
    }

    /// f32 bytes of one token's latent over all layers.
    pub fn kv_bytes_per_token(&self) -> u64 {
        (self.config.layers * self.shape.width()) as u64 * 4
    }

    /// Cover positions `0 .. positions` with cos and sin; a table that covers them stays.
    pub fn ensure_positions(&mut self, positions: usize) -> Result<(), BackendError> {
        if positions > self.capacity.positions {
            let (cos, sin) = self.rope_params.cos_sin(positions);
            if let Stack::Device(d) = &mut self.stack {
                d.set_rope(self.rope_params.table(&*self.backend, positions)?);
            }
            self.rope.cos = cos;
            self.rope.sin = sin;
            self.capacity.positions = positions;
        }
        Ok(())
    }

    /// The latent cache: `kv_lora_rank + qk_rope_head_dim` values per token per layer, in
    /// one buffer per layer for the host reference and two for the backend's ops.
    pub fn new_kv(&self, slots: usize) -> Result<KvCache<B>, BackendError> {
        let (b, layers) = (&*self.backend, self.config.layers);
        match &self.stack {
            Stack::Host(_) => KvCache::latent(b, layers, slots, self.shape.width()),
            Stack::Device(_) => KvCache::latent_split(b, layers, slots, (self.shape.kv_lora, self.shape.rope)),
        }
    }

    /// Capture the inputs of `layers` (ascending) from now on; `None` stops capturing.
    pub fn set_capture(&mut self, layers: Option<Vec<usize>>) -> Result<(), BackendError> {
        self.capture = match layers {
            Some(layers) => Some(Capture { aux: self.backend.tensor(self.capacity.rows, layers.len() * self.config.hidden)?, layers }),
            None => None,
        };
        Ok(())
    }

    /// Run `window.queries` tokens (ids and positions already in `self.inputs`).
    pub fn forward(&mut self, kv: &mut KvCache<B>, window: AttnWindow, mask: Mask<'_, B>, logits: Logits) -> Result<(), BackendError> {
        let n = window.queries;
        let slots = window.prefix + window.region;
        assert!(slots <= kv.slots, "KV cache of {} slots is too small", kv.slots);
        let logit_rows: Vec<usize> = match logits {
            Logits::None => Vec::new(),
            Logits::Last => vec![n - 1],
            Logits::All => (0..n).collect(),
        };
        if let Some(ran) = self.run_prepared(Ahead::Single(window), kv, n, &logit_rows) {
            return ran;
        }
        let mask = match mask {
            Mask::Causal => None,
            Mask::Explicit(m) => Some(self.backend.read_ids(m, n * window.region)?),
        };
        self.run(kv, &[single_seq(window, mask)], n, &logit_rows)
    }

    /// Run a batch of sequences over the paged pool `kv` (`LlamaModel::forward_batch`'s
    /// contract): the ids and positions of all `batch.rows` rows are in `self.inputs`, and
    /// the logits of the rows `logit_rows` land in rows `0..` of `self.logits`, in that order.
    pub fn forward_batch(&mut self, kv: &mut KvCache<B>, batch: &PagedBatch<'_, B>, logit_rows: &[usize]) -> Result<(), BackendError> {
        if let Some(ran) = self.run_prepared(Ahead::Batch(batch.id), kv, batch.rows, logit_rows) {
            return ran;
        }
        let seqs = self.seq_rows(batch.seqs)?;
        self.run(kv, &seqs, batch.rows, logit_rows)
    }

    /// Build the slot table of the single-sequence forward of `window` (`mask`: its tree's,
    /// row-major `[queries, region]`) and hand it to the backend now, so that the forward,
    /// if it is a graph step, only enqueues work (a capture copies nothing from the host).
    /// The next forward of that window takes it; any other forward builds its own.
    pub fn prepare_forward(&mut self, window: AttnWindow, mask: Option<&[i32]>) {
        if self.on_backend() {
            let seq = single_seq(window, mask.map(<[i32]>::to_vec));
            self.prepare(Ahead::Single(window), &[seq], window.queries);
        }
    }

    /// `prepare_forward` for the batched forward of `batch` (its tree masks read here).
    pub fn prepare_batch(&mut self, batch: &PagedBatch<'_, B>) -> Result<(), BackendError> {
        if self.on_backend() {
            let seqs = self.seq_rows(batch.seqs)?;
            self.prepare(Ahead::Batch(batch.id), &seqs, batch.rows);
        }
        Ok(())
    }

    /// Whether the forward runs on the backend's ops (which only enqueue work, so a step
    /// can be a CUDA graph), rather than on the host reference.
    pub fn on_backend(&self) -> bool {
        matches!(self.stack, Stack::Device(_))
    }

    fn prepare(&mut self, made_for: Ahead, seqs: &[SeqRows], n: usize) {
        let table = slot_table(seqs, n);
        self.backend.prepare_slot_table(&table);
        self.prepared = Some(Prepared { made_for, table });
    }

    /// The forward on the table prepared for it, if there is one. A batch's table serves every
    /// forward of that batch (a graph step is recorded, then captured, from one batch; its id
    /// is unique, so no other batch can take it); a single sequence's serves the next forward
    /// of its window only. A table made for another forward serves none.
    fn run_prepared(&mut self, made_for: Ahead, kv: &mut KvCache<B>, n: usize, logit_rows: &[usize]) -> Option<Result<(), BackendError>> {
        let p = self.prepared.take().filter(|p| p.made_for == made_for)?;
        let ran = self.run_on_backend(kv, &p.table, n, logit_rows);
        if matches!(made_for, Ahead::Batch(_)) {
            self.prepared = Some(p);
        }
        Some(ran)
    }

    /// The batch's sequences as the forward reads them, their tree masks read back.
    fn seq_rows(&self, seqs: &[BatchSeq<'_, B>]) -> Result<Vec<SeqRows>, BackendError> {
        seqs.iter()
            .map(|s| {
                let q = s.seq.queries;
                let mask = match s.mask {
                    Mask::Causal => None,
                    Mask::Explicit(m) => Some(self.backend.read_ids(m, q * q)?),
                };
                Ok(SeqRows { row: s.seq.row, slots: s.seq.slots.to_vec(), window: s.seq.window(), mask })
            })
            .collect()
    }

    /// The forward of `seqs` (`n` rows), on the host or on the backend, with the logits of
    /// `logit_rows` into `self.logits`.
    fn run(&mut self, kv: &mut KvCache<B>, seqs: &[SeqRows], n: usize, logit_rows: &[usize]) -> Result<(), BackendError> {
        assert!(n > 0 && n <= self.capacity.rows, "forward of {n} rows (capacity {})", self.capacity.rows);
        if self.on_backend() {
            return self.run_on_backend(kv, &slot_table(seqs, n), n, logit_rows);
        }
        let b = self.backend.clone();
        let (h, aux) = self.run_layers(kv, seqs, n)?;
        if let Some(cap) = self.capture.as_mut() {
            cap.aux = b.tensor_from(cap.layers.len() * self.config.hidden, &aux)?;
        }
        if logit_rows.is_empty() {
            return Ok(());
        }
        let hd = self.config.hidden;
        let picked: Vec<f32> = logit_rows.iter().flat_map(|&r| &h[r * hd..][..hd]).copied().collect();
        self.logits = self.host_logits(&picked)?;
        Ok(())
    }

    /// The forward of the `n` rows `table` lays out, on the backend's ops.
    fn run_on_backend(&mut self, kv: &mut KvCache<B>, table: &SlotTable, n: usize, logit_rows: &[usize]) -> Result<(), BackendError> {
        assert!(n > 0 && n <= self.capacity.rows, "forward of {n} rows (capacity {})", self.capacity.rows);
        let Stack::Device(d) = &mut self.stack else { unreachable!("a backend forward of the host reference") };
        d.forward(&*self.backend, &self.inputs, (&mut kv.k, &mut kv.v), table, n, self.capture.as_mut(), logit_rows, &mut self.logits);
        Ok(())
    }

    /// Size the inputs for batched forwards of `rows` rows with logits for `logit_rows` of
    /// them, over `positions` positions (`LlamaModel::set_batch_capacity`; the host reads
    /// each sequence's slots as it goes, so `seq_rows` sizes nothing here).
    pub fn set_batch_capacity(&mut self, rows: usize, logit_rows: usize, positions: usize) -> Result<(), BackendError> {
        if rows > self.capacity.rows {
            self.inputs = StepInputs::new(&*self.backend, rows)?;
            self.capacity.rows = rows;
            let layers = self.capture.as_ref().map(|c| c.layers.clone());
            self.set_capture(layers)?;
        }
        if logit_rows > self.capacity.logit_rows {
            self.logits = self.backend.tensor(logit_rows, self.config.vocab)?;
            self.capacity.logit_rows = logit_rows;
        }
        if let Stack::Device(d) = &mut self.stack {
            d.ensure_rows(&*self.backend, self.capacity.rows, self.capacity.logit_rows)?;
        }
        self.ensure_positions(positions)
    }

    /// The host reference: embed the `n` input rows and run every layer, each sequence's
    /// attention over its own slots of `kv`; returns the final pre-norm hidden states,
    /// `[n, hidden]`, and the captured layer inputs, `[n, captured · hidden]`.
    fn run_layers(&self, kv: &mut KvCache<B>, seqs: &[SeqRows], n: usize) -> Result<(Vec<f32>, Vec<f32>), BackendError> {
        let Stack::Host(host) = &self.stack else { unreachable!("the host forward of a model loaded onto the backend") };
        let b = &*self.backend;
        let (c, hd, width) = (&self.config, self.config.hidden, self.shape.width());
        let ids = b.read_ids(&self.inputs.ids, n)?;
        let positions: Vec<usize> = b.read_ids(&self.inputs.positions, n)?.into_iter().map(|p| p as usize).collect();
        let mut h: Vec<f32> = ids.iter().flat_map(|&t| host.embed.row(t as usize)).copied().collect();
        let captured = self.capture.as_ref().map_or(0, |cap| cap.layers.len());
        let mut aux = vec![0.0; n * captured * hd];
        for (i, layer) in host.layers.iter().enumerate() {
            if let Some(k) = self.capture.as_ref().and_then(|cap| cap.layers.iter().position(|&l| l == i)) {
                for (row, out) in h.chunks_exact(hd).zip(aux.chunks_exact_mut(captured * hd)) {
                    out[k * hd..][..hd].copy_from_slice(row);
                }
            }
            let x = rms_norm(&h, &layer.input_ln, c.eps);
            let mut attn = vec![0.0; n * hd];
            for seq in seqs {
                let (q, seen) = (seq.window.queries, seq.slots.len());
                let rows = seq.row..seq.row + q;
                let mut gathered = b.tensor(seen, width)?;
                b.gather_rows(&kv.k[i], &seq.slots, &mut gathered);
                let mut cache = b.read_rows(&gathered, 0, seen)?;
                let vis = Visibility { window: seq.window, mask: seq.mask.as_deref() };
                let attend = self.attend.unwrap_or(if 2 * q >= seen { Attend::Decompressed } else { Attend::Absorbed });
                let out = layer.attn.forward(
                    &self.shape,
                    &self.rope,
                    &x[rows.start * hd..rows.end * hd],
                    &positions[rows.clone()],
                    &mut cache,
                    &vis,
                    attend,
                );
                attn[rows.start * hd..rows.end * hd].copy_from_slice(&out);
                let first = seq.window.first_new_slot();
                let written = b.tensor_from(width, &cache[first * width..(first + q) * width])?;
                for (j, &slot) in seq.slots[first..first + q].iter().enumerate() {
                    b.copy_rows(&written, j, &mut kv.k[i], slot, 1);
                }
            }
            add(&mut h, &self.summed(attn, n)?);
            let x = rms_norm(&h, &layer.post_ln, c.eps);
            add(&mut h, &self.summed(layer.ffn.forward(&c.moe, &x, n), n)?);
        }
        Ok((h, aux))
    }

    /// The host reference's logits of the final hidden `rows` (`[rows, hidden]`).
    fn host_logits(&self, rows: &[f32]) -> Result<B::Tensor, BackendError> {
        let Stack::Host(host) = &self.stack else { unreachable!("the host logits of a model loaded onto the backend") };
        let normed = rms_norm(rows, &host.norm, self.config.eps);
        let out = host.lm_head.as_ref().unwrap_or(&host.embed).apply(&normed, rows.len() / self.config.hidden);
        self.backend.tensor_from(self.config.vocab, &out)
    }
}

/// The forward a prepared slot table was made for (`DeepseekModel::prepare_forward`,
/// `prepare_batch`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ahead {
    Single(AttnWindow),
    Batch(u64),
}

struct Prepared {
    made_for: Ahead,
    table: SlotTable,
}

/// The slot table of `seqs`, whose rows cover `[0, n)`.
fn slot_table(seqs: &[SeqRows], n: usize) -> SlotTable {
    let views: Vec<SeqSlots<'_>> =
        seqs.iter().map(|s| SeqSlots { row: s.row, slots: &s.slots, window: s.window, mask: s.mask.as_deref() }).collect();
    SlotTable::new(&views, n)
}

/// The one sequence of a single-sequence forward: rows from 0, slots from 0.
fn single_seq(window: AttnWindow, mask: Option<Vec<i32>>) -> SeqRows {
    SeqRows { row: 0, slots: (0..window.prefix + window.region).collect(), window, mask }
}

/// One sequence of a forward as the host computes it: its rows of the forward, the cache
/// slots its queries see in position order (the new tokens' last), and which of them each
/// query sees.
struct SeqRows {
    row: usize,
    slots: Vec<usize>,
    window: AttnWindow,
    mask: Option<Vec<i32>>,
}
