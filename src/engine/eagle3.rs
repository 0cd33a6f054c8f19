//! The EAGLE-3 drafter, exactly as eagle3_spec.md §2: `fc` over three concatenated target
//! hidden states, one decoder layer whose attention input is `[norm(embed); hidden_norm(h)]`
//! (2×hidden wide), a final norm, an lm_head over the draft vocabulary, and `d2t` offsets
//! from draft ids to target ids. Embeddings (and, without `draft_vocab_size`, the lm_head)
//! come from the target when the checkpoint has none. RoPE follows the drafter's own config
//! (`rope_theta` 10000 when absent), never the target's.

use std::sync::Arc;

use serde_json::Value;

use crate::backend::{AttnGeometry, AttnWindow, Backend, BackendError, Mask, PagedBatch, PagedScratch, RopeTable, Shard};
use crate::engine::drafter::{
    self, check_kv, draft_step_key, graph_or_eager, no_pool, step_as, AuxRows, Candidate, Chain, ChainForwards, ChainSeq, ChainTokens,
    Drafter, ExtendBatch, LevelBatch, PoolSize, TargetHead, TopK,
};
use crate::engine::kv::KvCache;
use crate::engine::llama::{
    check_tensor_size, head_dim, layer_bytes, required, rope_from_config, Attend, AttnInput, Capacity, Layer, LayerScratch, LayerShape,
    LayerStep, StepInputs,
};
use crate::engine::weights::Loader;
use crate::engine::EngineError;
use crate::model::config::{ConfigError, ModelConfig};

const AUX_IDS_POINTER: &str = "/eagle_config/eagle_aux_hidden_state_layer_ids";

#[derive(Clone, Debug, PartialEq)]
pub struct Eagle3Config {
    pub file: String,
    pub hidden: usize,
    pub target_hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub vocab: usize,
    /// `None`: the drafter predicts over the target vocabulary with the target's lm_head.
    pub draft_vocab: Option<usize>,
    pub eps: f32,
    pub rope: crate::backend::rope::RopeParams,
    pub fc_bias: bool,
    pub qkv_bias: bool,
    pub aux_layer_ids: Option<Vec<i64>>,
}

fn unsupported(cfg: &ModelConfig, pointer: &str, expected: &'static str) -> ConfigError {
    let value = cfg.at(pointer).cloned().unwrap_or(Value::Null);
    cfg.wrong_type(pointer, &value, expected)
}

impl Eagle3Config {
    pub fn from_config(cfg: &ModelConfig) -> Result<Eagle3Config, ConfigError> {
        if cfg.num_hidden_layers()?.is_some_and(|f| f.value != 1) {
            return Err(unsupported(cfg, "/num_hidden_layers", "1 (a single fused EAGLE-3 layer)"));
        }
        for key in ["/fc_norm", "/norm_before_residual"] {
            if cfg.at(key).and_then(Value::as_bool) == Some(true) {
                return Err(unsupported(cfg, key, "false (EAGLE3.1 / speculators variants are not supported)"));
            }
        }
        let hidden = required(cfg, "hidden_size")?;
        let heads = required(cfg, "num_attention_heads")?;
        let kv_heads = cfg.num_key_value_heads()?.map(|f| f.value as usize).unwrap_or(heads);
        if kv_heads == 0 || heads % kv_heads != 0 {
            return Err(unsupported(cfg, "/num_key_value_heads", "a divisor of num_attention_heads"));
        }
        let head_dim = head_dim(cfg, hidden, heads)?;
        let target_hidden = match cfg.positive_u64("target_hidden_size")? {
            Some(_) => required(cfg, "target_hidden_size")?,
            None => hidden,
        };
        let (intermediate, vocab) = (required(cfg, "intermediate_size")?, required(cfg, "vocab_size")?);
        let draft_vocab = match cfg.positive_u64("draft_vocab_size")? {
            Some(_) => Some(required(cfg, "draft_vocab_size")?),
            None => None,
        };
        // The fused layer reads 2 × hidden; fc reads 3 target hidden states.
        check_tensor_size(
            cfg,
            &[("num_attention_heads", heads), ("head_dim", head_dim), ("hidden_size", hidden), ("2 (the fused input)", 2)],
        )?;
        check_tensor_size(cfg, &[("intermediate_size", intermediate), ("hidden_size", hidden)])?;
        check_tensor_size(cfg, &[("vocab_size", vocab), ("hidden_size", hidden)])?;
        check_tensor_size(cfg, &[("target_hidden_size", target_hidden), ("hidden_size", hidden), ("3 (captured layers)", 3)])?;
        Ok(Eagle3Config {
            file: cfg.file_name(),
            hidden,
            target_hidden,
            heads,
            kv_heads,
            head_dim,
            intermediate,
            vocab,
            draft_vocab,
            eps: cfg.rms_norm_eps()? as f32,
            rope: rope_from_config(cfg, head_dim)?,
            fc_bias: cfg.bool("bias").map(|f| f.value).unwrap_or(false),
            qkv_bias: cfg.bool("attention_bias").map(|f| f.value).unwrap_or(false),
            aux_layer_ids: cfg.eagle_aux_layer_ids()?.map(|f| f.value),
        })
    }

    /// SGLang's capture layers for an `layers`-deep target: each configured id + 1 (ids are
    /// output-of-layer indices), else `[2, L/2, L-3]`; ascending, which is the order the
    /// captured states are concatenated in whatever the config's order.
    pub fn capture_layers(&self, layers: usize) -> Result<Vec<usize>, EngineError> {
        let l = layers as i64;
        let (mut capture, source) = match &self.aux_layer_ids {
            Some(ids) => (ids.iter().map(|id| id + 1).collect::<Vec<i64>>(), format!("{ids:?} + 1")),
            None => (vec![2, l / 2, l - 3], format!("the default [2, L/2, L-3] for L = {layers}")),
        };
        capture.sort_unstable();
        let distinct = capture.windows(2).all(|w| w[0] != w[1]);
        let valid = distinct && capture.len() == 3 && capture.iter().all(|&c| (1..l).contains(&c));
        if !valid {
            return Err(EngineError::Invalid {
                file: self.file.clone(),
                key: AUX_IDS_POINTER.into(),
                message: format!("capture layers {capture:?} ({source}) must be 3 distinct inputs of target layers 1..={}", l - 1),
            });
        }
        Ok(capture.into_iter().map(|c| c as usize).collect())
    }

    fn layer_shape(&self) -> LayerShape {
        LayerShape {
            hidden: self.hidden,
            attn_in: 2 * self.hidden,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            intermediate: self.intermediate,
            qkv_bias: self.qkv_bias,
            qk_norm: false,
        }
    }
}

/// Map draft-vocabulary ids to target ids: `target = i + d2t[i]`, checked to be strictly
/// increasing and inside the target vocabulary (SpecForge builds it from sorted ids).
pub fn hot_tokens(d2t: &[i64], target_vocab: usize, file: &str) -> Result<Vec<u32>, EngineError> {
    let mut out = Vec::with_capacity(d2t.len());
    let mut prev: i64 = -1;
    for (i, off) in d2t.iter().enumerate() {
        let t = i as i64 + off;
        if t <= prev || t >= target_vocab as i64 {
            return Err(EngineError::Invalid {
                file: file.to_string(),
                key: "d2t".into(),
                message: format!(
                    "entry {i}: {i} + {off} = {t} is not a target id above the previous one ({prev}) and below {target_vocab}"
                ),
            });
        }
        out.push(t as u32);
        prev = t;
    }
    Ok(out)
}

/// What attention a forward runs over.
enum Over<'a, B: Backend> {
    /// The one sequence's cache: a window, causal or under a draft-tree mask `[queries, region]`.
    Window(AttnWindow, Option<&'a [i32]>),
    /// The pool of a batch's sequences (`Drafter::set_pool`).
    Pool(&'a PagedBatch<'a, B>),
}

/// The rows of a forward whose hidden states the next level continues and whose logits are taken.
enum Keep<'a> {
    Last,
    All,
    Rows(&'a [usize]),
}

struct Buffers<B: Backend> {
    /// Embeddings, then their norm.
    e: B::Tensor,
    en: B::Tensor,
    /// Concatenated target hiddens `[rows, 3·Ht]`.
    g: B::Tensor,
    /// The residual stream (fc output or the previous step's hidden), `[rows, H]`.
    x: B::Tensor,
    xn: B::Tensor,
    /// `[norm(embed); hidden_norm(x)]`, `[rows, 2H]`.
    u: B::Tensor,
    /// Pre-norm outputs of the last forward: the hidden each next draft step continues.
    prev: B::Tensor,
    logits: B::Tensor,
}

impl<B: Backend> Buffers<B> {
    fn new(b: &B, c: &Eagle3Config, rows: usize, logit_rows: usize, draft_vocab: usize) -> Result<Self, BackendError> {
        Ok(Buffers {
            e: b.tensor(rows, c.hidden)?,
            en: b.tensor(rows, c.hidden)?,
            g: b.tensor(rows, 3 * c.target_hidden)?,
            x: b.tensor(rows, c.hidden)?,
            xn: b.tensor(rows, c.hidden)?,
            u: b.tensor(rows, 2 * c.hidden)?,
            prev: b.tensor(rows, c.hidden)?,
            logits: b.tensor(logit_rows, draft_vocab)?,
        })
    }
}

pub struct Eagle3Drafter<B: Backend> {
    pub config: Eagle3Config,
    backend: Arc<B>,
    embed: Arc<B::Weight>,
    lm_head: Arc<B::Weight>,
    fc: B::Weight,
    fc_bias: Option<B::Weight>,
    hidden_norm: B::Weight,
    layer: Layer<B>,
    norm: B::Weight,
    /// Draft id → target id (identity when the draft vocabulary is the target's).
    hot: Vec<u32>,
    /// The same map on the device, for chain levels picked there.
    hot_ids: B::Ids,
    rope: RopeTable<B>,
    inputs: StepInputs<B>,
    scratch: LayerScratch<B>,
    buf: Buffers<B>,
    /// The draft-tree mask of the current step, `[queries, region]`.
    mask: B::Ids,
    kv: KvCache<B>,
    /// Slots of the one sequence's cache (`extend`, `step`), which a pool replaces.
    own_slots: usize,
    /// The batch's pool, while the drafter keeps one (`set_pool`).
    pool: Option<PoolSize>,
    /// The chains drafted over the pool.
    chain: Option<ChainTokens<B>>,
    top: TopK<B>,
    topk: usize,
    capacity: Capacity,
    /// Positions `[0, len)` have draft KV (pairs `(h_p, x_{p+1})`).
    len: usize,
    /// Draft steps of up to this many rows run as CUDA-graph steps.
    graph_rows: usize,
    weight_bytes: u64,
    /// This rank's heads (all of them at tp = 1).
    geometry: AttnGeometry,
}

impl<B: Backend> Eagle3Drafter<B> {
    /// Load the drafter, sharing the target's embeddings (and lm_head when the drafter has no
    /// vocabulary of its own). `kv_slots` covers the committed sequence plus the draft tree.
    pub fn load(
        config: Eagle3Config,
        ld: &mut Loader<'_, B>,
        target: &TargetHead<B>,
        cap: Capacity,
        kv_slots: usize,
        topk: usize,
    ) -> Result<Self, EngineError> {
        let backend = target.backend.clone();
        let b = &*backend;
        let c = &config;
        let invalid = |key: &str, message: String| EngineError::Invalid { file: c.file.clone(), key: key.into(), message };
        if c.vocab != target.vocab {
            return Err(invalid("/vocab_size", format!("{} differs from the target's {}", c.vocab, target.vocab)));
        }
        if c.target_hidden != target.hidden {
            return Err(invalid(
                "/target_hidden_size",
                format!("{} differs from the target's hidden size {}", c.target_hidden, target.hidden),
            ));
        }
        let embed = match ["embed_tokens.weight", "model.embed_tokens.weight"].into_iter().find(|n| ld.has(n)) {
            Some(name) => Arc::new(ld.weight(name, &[c.vocab, c.hidden], Shard::Replicated)?),
            None if c.hidden == target.hidden => target.embed.clone(),
            None => {
                return Err(invalid(
                    "embed_tokens.weight",
                    format!("absent, and the target's embeddings are {} wide, not {}", target.hidden, c.hidden),
                ))
            }
        };
        let prefix = ["midlayer.", "model.midlayer.", "layers.0."]
            .into_iter()
            .find(|p| ld.has(&format!("{p}self_attn.q_proj.weight")))
            .unwrap_or("midlayer.");
        let fc = ld.weight("fc.weight", &[c.hidden, 3 * c.target_hidden], Shard::Replicated)?;
        let fc_bias = if c.fc_bias { Some(ld.weight("fc.bias", &[c.hidden], Shard::Replicated)?) } else { None };
        let hidden_norm = ld.weight(&format!("{prefix}hidden_norm.weight"), &[c.hidden], Shard::Replicated)?;
        let layer = Layer::load(ld, prefix, &c.layer_shape())?;
        let norm = ld.weight("norm.weight", &[c.hidden], Shard::Replicated)?;
        let (lm_head, hot) = match c.draft_vocab {
            Some(vd) => {
                let head = Arc::new(ld.weight("lm_head.weight", &[vd, c.hidden], Shard::Replicated)?);
                let hot = if ld.has("d2t") || vd != c.vocab {
                    hot_tokens(&ld.host_i64("d2t", vd)?, c.vocab, &ld.file_of("d2t"))?
                } else {
                    (0..vd as u32).collect()
                };
                (head, hot)
            }
            None if c.hidden == target.hidden => (target.lm_head.clone(), (0..c.vocab as u32).collect()),
            None => return Err(invalid("/draft_vocab_size", "absent, and the target's lm_head has another width".into())),
        };
        let vd = hot.len();
        let own = [&fc, &hidden_norm, &norm].into_iter().chain(fc_bias.as_ref()).map(|w| b.weight_bytes(w)).sum::<u64>();
        let weight_bytes = own + layer_bytes(b, &layer) + b.weight_bytes(&lm_head);
        let shape = c.layer_shape().for_rank(b.tp_world())?;
        let buf = Buffers::new(b, c, cap.rows, cap.logit_rows, vd)?;
        let mut hot_ids = b.ids(vd)?;
        b.write_ids(&mut hot_ids, &hot.iter().map(|&t| t as i32).collect::<Vec<_>>());
        Ok(Eagle3Drafter {
            rope: c.rope.table(b, cap.positions)?,
            inputs: StepInputs::new(b, cap.rows)?,
            scratch: LayerScratch::new(b, cap.rows, &shape)?,
            kv: KvCache::new(b, 1, kv_slots, shape.kv_heads * c.head_dim, b.kv_dtype())?,
            geometry: AttnGeometry {
                heads: shape.heads,
                kv_heads: shape.kv_heads,
                head_dim: c.head_dim,
                scale: 1.0 / (c.head_dim as f32).sqrt(),
            },
            embed,
            lm_head,
            fc,
            fc_bias,
            hidden_norm,
            layer,
            norm,
            hot,
            hot_ids,
            buf,
            mask: b.ids(cap.logit_rows * cap.rows)?,
            top: TopK::new(b, cap.logit_rows, topk)?,
            topk,
            own_slots: kv_slots,
            pool: None,
            chain: None,
            capacity: cap,
            len: 0,
            graph_rows: 0,
            weight_bytes,
            config,
            backend,
        })
    }

    /// RoPE for positions `0 .. positions` (a longer context than the one loaded for).
    fn ensure_positions(&mut self, positions: usize) -> Result<(), BackendError> {
        if positions > self.capacity.positions {
            self.rope = self.config.rope.table(&*self.backend, positions)?;
            self.capacity.positions = positions;
        }
        Ok(())
    }

    /// This rank's K (and V) width per token.
    fn kv_width(&self) -> usize {
        self.geometry.kv_heads * self.config.head_dim
    }

    /// Buffers for forwards of `rows` rows and top-k of `logit_rows`; larger ones stay.
    fn ensure_capacity(&mut self, rows: usize, logit_rows: usize) -> Result<(), EngineError> {
        let b = self.backend.clone();
        let logit_rows = logit_rows.max(self.capacity.logit_rows);
        if rows > self.capacity.rows {
            let shape = self.config.layer_shape().for_rank(b.tp_world())?;
            self.buf = Buffers::new(&*b, &self.config, rows, logit_rows, self.hot.len())?;
            self.inputs = StepInputs::new(&*b, rows)?;
            self.scratch = LayerScratch::new(&*b, rows, &shape)?;
            (self.capacity.rows, self.capacity.logit_rows) = (rows, logit_rows);
        } else if logit_rows > self.capacity.logit_rows {
            self.buf.logits = b.tensor(logit_rows, self.hot.len())?;
            self.capacity.logit_rows = logit_rows;
        }
        self.top = TopK::new(&*b, logit_rows, self.topk)?;
        Ok(())
    }

    /// The top-k of the last forward's first `rows` kept rows, as target ids.
    fn candidates(&self, rows: usize) -> Result<Vec<Vec<Candidate>>, EngineError> {
        let hot = &self.hot;
        Ok(self.top.read(&*self.backend, rows, |d| hot[d])?)
    }

    /// One forward whose residual input is already in `buf.x`, up to the top-k of the kept
    /// rows (a graph step can end there); returns how many rows' candidates it leaves to read.
    fn forward_ops(&mut self, over: Over<'_, B>, keep: Keep<'_>) -> usize {
        let b = &*self.backend;
        let c = &self.config;
        let (n, attend) = match over {
            Over::Window(window, mask) => {
                let mask = match mask {
                    Some(m) => {
                        b.write_ids(&mut self.mask, m);
                        Mask::Explicit(&self.mask)
                    }
                    None => Mask::Causal,
                };
                (window.queries, Attend::Window { window, mask })
            }
            Over::Pool(batch) => (batch.rows, Attend::Paged(batch)),
        };
        let buf = &mut self.buf;
        b.embed(&self.embed, &self.inputs.ids, n, &mut buf.e);
        b.rms_norm(&buf.e, &self.layer.input_ln, c.eps, n, &mut buf.en);
        b.rms_norm(&buf.x, &self.hidden_norm, c.eps, n, &mut buf.xn);
        b.copy_cols(&buf.en, n, &mut buf.u, 0);
        b.copy_cols(&buf.xn, n, &mut buf.u, c.hidden);
        let step = LayerStep { geometry: self.geometry, eps: c.eps, rope: &self.rope, positions: &self.inputs.positions, attend };
        // The layer's attention reads `u` and its residual is `x` (the fc output).
        self.layer.forward(b, &step, (&mut self.kv.k[0], &mut self.kv.v[0]), AttnInput::Rows(&buf.u), &mut buf.x, &mut self.scratch);
        // `prev` keeps the final hiddens that the next draft level continues from.
        let rows = match keep {
            Keep::Last => {
                b.copy_rows(&buf.x, n - 1, &mut buf.prev, 0, 1);
                1
            }
            Keep::All => {
                b.copy_rows(&buf.x, 0, &mut buf.prev, 0, n);
                n
            }
            Keep::Rows(rows) => {
                b.gather_rows(&buf.x, rows, &mut buf.prev);
                rows.len()
            }
        };
        b.rms_norm(&buf.prev, &self.norm, c.eps, rows, &mut self.scratch.normed);
        b.matmul(&self.scratch.normed, &self.lm_head, None, rows, &mut buf.logits);
        self.top.enqueue(b, &mut buf.logits, rows);
        rows
    }
}

/// EAGLE-3 pairs position `p`'s target hidden state with token `p + 1`: it reads up to
/// `committed`, and a chain level's KV goes to the slot of its position minus one.
impl<B: Backend> ChainForwards<B> for Eagle3Drafter<B> {
    const AHEAD: usize = 0;

    fn read(&mut self, ext: &ExtendBatch<'_, B>, aux: Option<&B::Tensor>) -> Result<(), EngineError> {
        let aux = aux.ok_or_else(|| EngineError::Request("the EAGLE-3 drafter needs the target's hidden states".into()))?;
        let n = ext.rows();
        if ext.aux_rows.len() != n {
            return Err(EngineError::Request(format!("{n} positions for the drafter to read with {} hidden rows", ext.aux_rows.len())));
        }
        let b = self.backend.clone();
        self.inputs.set(&*b, &ext.ids, &ext.positions);
        let batch = PagedBatch::new(&ext.seqs, n);
        b.prepare_paged_batch(&batch);
        step_as(&*b, ext.graph_key("eagle3").as_deref(), &mut || {
            b.gather_rows(aux, &ext.aux_rows, &mut self.buf.g);
            b.matmul(&self.buf.g, &self.fc, self.fc_bias.as_ref(), n, &mut self.buf.x);
            self.forward_ops(Over::Pool(&batch), Keep::Rows(&ext.last_rows));
        });
        Ok(())
    }

    fn level(&mut self, level: &LevelBatch<'_, B>) -> Result<(), EngineError> {
        let b = self.backend.clone();
        let rows = level.rows();
        self.inputs.set_positions(&*b, &level.positions);
        let batch = PagedBatch::new(&level.seqs, rows);
        b.prepare_paged_batch(&batch);
        step_as(&*b, level.graph_key("eagle3").as_deref(), &mut || {
            b.copy_rows(&self.buf.prev, 0, &mut self.buf.x, 0, rows);
            self.forward_ops(Over::Pool(&batch), Keep::All);
        });
        Ok(())
    }

    fn pick(&mut self, rows: usize, level: usize) -> Result<(), EngineError> {
        let chain = self.chain.as_mut().ok_or_else(no_pool)?;
        chain.pick(&*self.backend, &self.top, Some(&self.hot_ids), rows, level, &mut self.inputs.ids)
    }
}

impl<B: Backend> Drafter<B> for Eagle3Drafter<B> {
    fn reset(&mut self) {
        self.len = 0;
    }

    fn resize(&mut self, kv_slots: usize, topk: usize) -> Result<(), EngineError> {
        let (b, width) = (self.backend.clone(), self.kv_width());
        if self.kv.slots != kv_slots {
            self.kv.replace(|| KvCache::new(&*b, 1, kv_slots, width, b.kv_dtype()))?;
        }
        self.ensure_positions(kv_slots)?;
        (self.own_slots, self.topk, self.pool) = (kv_slots, topk, None);
        self.top = TopK::new(&*b, self.capacity.logit_rows, topk)?;
        self.len = 0;
        Ok(())
    }

    fn set_pool(&mut self, size: Option<PoolSize>) -> Result<(), EngineError> {
        let (b, width) = (self.backend.clone(), self.kv_width());
        let slots = size.as_ref().map_or(self.own_slots, |p| p.slots);
        if self.kv.slots < slots {
            self.kv.replace(|| KvCache::new(&*b, 1, slots, width, b.kv_dtype()))?;
        }
        self.len = 0;
        self.scratch.paged = None;
        self.chain = size.as_ref().map(|p| ChainTokens::for_layout(&*b, &p.layout)).transpose()?;
        if let Some(p) = &size {
            self.ensure_capacity(p.layout.forward_rows(), p.layout.step_seqs())?;
            self.ensure_positions(p.positions)?;
            self.scratch.paged = Some(PagedScratch::new(&*b, p.layout.seq_rows(), p.positions, &self.geometry, b.kv_dtype())?);
        }
        self.pool = size;
        Ok(())
    }

    fn draft_chains(&mut self, seqs: &[ChainSeq<'_>], aux: Option<&B::Tensor>, length: usize) -> Result<Vec<Chain>, EngineError> {
        check_kv(&self.kv)?;
        let pool = self.pool.take().ok_or_else(no_pool)?;
        let graphs = self.graph_rows > 0;
        let drafted = drafter::draft_chains(self, &pool, graphs, seqs, aux, length);
        self.pool = Some(pool);
        drafted
    }

    fn chain_tokens(&self) -> Option<&ChainTokens<B>> {
        self.chain.as_ref()
    }

    fn wants_aux(&self) -> bool {
        true
    }

    fn set_graph_rows(&mut self, rows: usize) {
        self.graph_rows = rows;
    }

    fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    fn region_base(&self) -> usize {
        self.len
    }

    fn extend(&mut self, seq: &[u32], committed: usize, aux: Option<AuxRows<'_, B>>) -> Result<Option<Vec<Candidate>>, EngineError> {
        // Pairs (h_p, x_{p+1}) for the new positions p, at position p.
        let n = committed.saturating_sub(self.len);
        if n == 0 {
            return Ok(None);
        }
        check_kv(&self.kv)?;
        let aux = aux.ok_or_else(|| EngineError::Request("the EAGLE-3 drafter needs the target's hidden states".into()))?;
        if aux.rows.len() != n {
            return Err(EngineError::Request(format!("{n} positions for the drafter to read with {} hidden rows", aux.rows.len())));
        }
        // A target whose forwards hold more rows than the drafter's (the scheduler's, once
        // it has served) is read in pieces.
        let b = self.backend.clone();
        for rows in aux.rows.chunks(self.capacity.rows) {
            let m = rows.len();
            let positions: Vec<usize> = (self.len..self.len + m).collect();
            self.inputs.set(&*b, &seq[self.len + 1..=self.len + m], &positions);
            b.gather_rows(aux.tensor, rows, &mut self.buf.g);
            b.matmul(&self.buf.g, &self.fc, self.fc_bias.as_ref(), m, &mut self.buf.x);
            self.forward_ops(Over::Window(AttnWindow { prefix: self.len, region: m, queries: m }, None), Keep::Last);
            self.len += m;
        }
        Ok(self.candidates(1)?.into_iter().next())
    }

    fn step(
        &mut self,
        tokens: &[u32],
        parents: &[usize],
        position: usize,
        region: usize,
        mask: &[i32],
    ) -> Result<Vec<Vec<Candidate>>, EngineError> {
        let n = tokens.len();
        let positions = vec![position; n];
        let window = AttnWindow { prefix: self.len, region, queries: n };
        let b = self.backend.clone();
        let mut rows = 0;
        let graph_rows = self.graph_rows;
        graph_or_eager(&*b, graph_rows, &draft_step_key("eagle3", n, region), n, &mut || {
            self.inputs.set(&*b, tokens, &positions);
            b.gather_rows(&self.buf.prev, parents, &mut self.buf.x);
            rows = self.forward_ops(Over::Window(window, Some(mask)), Keep::All);
        });
        self.candidates(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(extra: Value) -> Eagle3Config {
        let mut v = json!({"hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 64});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        Eagle3Config::from_config(&ModelConfig::from_value("d/config.json", v)).unwrap()
    }

    #[test]
    fn capture_layers_follow_sglang() {
        // eagle3_spec §2.1 worked examples (ids + 1, ascending; default [2, L/2, L-3]).
        let ids = |v: Vec<i64>| config(json!({"eagle_config": {"eagle_aux_hidden_state_layer_ids": v}}));
        assert_eq!(ids(vec![2, 30, 58]).capture_layers(61).unwrap(), [3, 31, 59]);
        assert_eq!(ids(vec![1, 17, 33]).capture_layers(36).unwrap(), [2, 18, 34]);
        assert_eq!(ids(vec![5, 1, 4]).capture_layers(8).unwrap(), [2, 5, 6]);
        assert_eq!(config(json!({})).capture_layers(32).unwrap(), [2, 16, 29]);
        assert_eq!(config(json!({})).capture_layers(80).unwrap(), [2, 40, 77]);
        // The last layer's output is no layer's input; duplicates would leave fc short.
        let e = ids(vec![1, 4, 7]).capture_layers(8).unwrap_err().to_string();
        assert_eq!(
            e,
            "d/config.json: /eagle_config/eagle_aux_hidden_state_layer_ids: capture layers [2, 5, 8] ([1, 4, 7] + 1) \
             must be 3 distinct inputs of target layers 1..=7"
        );
        assert!(config(json!({})).capture_layers(6).is_err(), "[2, 3, 3] for L = 6");
    }

    #[test]
    fn drafter_rope_defaults_to_theta_10000_not_the_targets() {
        let c = config(json!({}));
        assert_eq!(c.rope.theta, 10000.0);
        assert_eq!(c.head_dim, 8);
        assert!(Eagle3Config::from_config(&ModelConfig::from_value(
            "d/config.json",
            json!({"hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 64, "num_hidden_layers": 2})
        ))
        .is_err());
    }

    #[test]
    fn d2t_offsets_map_to_increasing_target_ids() {
        assert_eq!(hot_tokens(&[0, 0, 3, 5], 10, "d").unwrap(), [0, 1, 5, 8]);
        let e = hot_tokens(&[0, 2, 0], 10, "d/model.safetensors").unwrap_err().to_string();
        assert_eq!(e, "d/model.safetensors: d2t: entry 2: 2 + 0 = 2 is not a target id above the previous one (3) and below 10");
    }
}
