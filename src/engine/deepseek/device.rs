//! The DeepSeek-V3 forward on the backend's ops, so it runs where the backend runs: on the
//! GPU through kernels/latent.cu, and in CI on the CPU backend, where it is checked against
//! the host reference (`mla`, `moe`) and transformers (tests/deepseek_reference.rs).
//!
//! Each layer is read as the host reference reads it (this rank's share, quantized tensors
//! dequantized), then laid out for the ops and put on the backend before the next layer is
//! read, so the host never holds more than one layer:
//! - q's and `kv_a_proj_with_mqa`'s rows split into their no-rope and rope parts, so the
//!   rope parts are whole tensors that `Backend::rope` rotates as heads;
//! - `kv_b_proj` split into its key half, transposed per head (the query's absorption,
//!   `Backend::head_matmul`), and its value half (the output's);
//! - each layer's routed experts stacked into one gate-and-up and one down weight
//!   (`backend::latent::Experts`), one expert at a time: as the checkpoint's FP8 or packed
//!   INT4 bytes and their scales when it stores them so and the backend reads them so
//!   (`Backend::keeps_quantized`), else dequantized and staged in the backend's weight dtype.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use crate::backend::latent::{ExpertScales, Experts, MlaGeometry, MoeScratch, Routing, SlotTable, StoredFormat};
use crate::backend::{Backend, BackendError, Projection, RopeTable, Shard};
use crate::engine::deepseek::host::{Linear, Split, Staged};
use crate::engine::deepseek::mla::MlaShape;
use crate::engine::deepseek::moe::{routing, Mlp, MoeShare};
use crate::engine::deepseek::rows::Rows;
use crate::engine::llama::{Capture, StepInputs};
use crate::engine::weights::Loader;
use crate::model::checkpoint::TensorView;
use crate::model::deepseek::DeepseekConfig;
use crate::model::quantized::{Fp8Linear, Int4Linear, WeightFormats};

/// `values` as one weight of shape `[rows, cols]`.
fn weight<B: Backend>(b: &B, values: &[f32], cols: usize, name: &str) -> Result<B::Weight, BackendError> {
    Staged::new(b, cols).push(values).upload(b, name)
}

/// A norm's weights: one row.
fn vector<B: Backend>(b: &B, values: &[f32], name: &str) -> Result<B::Weight, BackendError> {
    weight(b, values, values.len(), name)
}

/// The bytes a token reads of `weights` as `b` keeps them.
fn kept<B: Backend>(b: &B, weights: &[&B::Weight]) -> usize {
    weights.iter().map(|w| b.weight_bytes(w) as usize).sum()
}

struct Attention<B: Backend> {
    /// `q_a_proj` and `q_a_layernorm` under a q LoRA.
    q_lora: Option<(B::Weight, B::Weight)>,
    q_nope: B::Weight,
    q_pe: B::Weight,
    kv_c: B::Weight,
    kv_pe: B::Weight,
    kv_norm: B::Weight,
    /// Per head, `kv_b_proj`'s key rows transposed: `[heads · kv_lora, nope]`.
    w_uk: B::Weight,
    /// Per head, `kv_b_proj`'s value rows: `[heads · v, kv_lora]`.
    w_uv: B::Weight,
    o: B::Weight,
    /// Weight elements held (as `Mla::elements` counts them).
    elements: usize,
}

impl<B: Backend> Attention<B> {
    /// The attention under `prefix`, this rank's `heads`, read as `Mla::load` reads it, with
    /// its linears as the checkpoint stores them where `stored` (`Rows::read`); `kv_b_proj`'s
    /// key half transposed per head (`Rows::heads_transposed`).
    fn load<'a>(
        ld: &mut Loader<'a, B>,
        b: &B,
        c: &DeepseekConfig,
        (s, heads): (&MlaShape, Range<usize>),
        prefix: &str,
        stored: bool,
    ) -> Result<Self, BackendError> {
        let name = |t: &str| format!("{prefix}{t}");
        let (h, qk, per_head, f) = (c.hidden, s.nope + s.rope, s.nope + s.v, &c.weights);
        let of_heads = |width: usize| heads.start * width..heads.end * width;
        let read = |ld: &mut Loader<'a, B>, t: &str, shape: [usize; 2]| Rows::read(ld, f, &name(t), shape, stored);
        let (q_lora, q, q_a_elements) = match c.q_lora_rank {
            None => (None, read(ld, "q_proj.weight", [c.heads * qk, h])?, 0),
            Some(r) => {
                let a = read(ld, "q_a_proj.weight", [r, h])?;
                let norm = ld.host_f32(&name("q_a_layernorm.weight"), &[r])?;
                let q_b = read(ld, "q_b_proj.weight", [c.heads * qk, r])?;
                let uploaded = (a.upload(b, &name("q_a_proj"))?, vector(b, &norm, &name("q_a_layernorm"))?);
                (Some(uploaded), q_b, a.elements() + r)
            }
        };
        let q = q.outputs_in(of_heads(qk));
        let kv_a = read(ld, "kv_a_proj_with_mqa.weight", [c.latent_width(), h])?;
        let kv_norm = ld.host_f32(&name("kv_a_layernorm.weight"), &[s.kv_lora])?;
        let kv_b = read(ld, "kv_b_proj.weight", [c.heads * per_head, s.kv_lora])?.outputs_in(of_heads(per_head));
        let o = read(ld, "o_proj.weight", [h, c.heads * s.v])?.inputs_in(of_heads(s.v));
        let elements = q_a_elements + q.elements() + kv_a.elements() + s.kv_lora + kv_b.elements() + o.elements();
        let w_uk = kv_b.heads_transposed(s.heads, per_head, 0..s.nope);
        let w_uv = kv_b.pick((0..s.heads).flat_map(|hd| hd * per_head + s.nope..(hd + 1) * per_head));
        let part = |w: &Rows<'a>, rows: Range<usize>| w.pick((0..s.heads).flat_map(move |hd| hd * qk + rows.start..hd * qk + rows.end));
        Ok(Attention {
            q_lora,
            q_nope: part(&q, 0..s.nope).upload(b, &name("q_proj (no rope)"))?,
            q_pe: part(&q, s.nope..qk).upload(b, &name("q_proj (rope)"))?,
            kv_c: kv_a.pick(0..s.kv_lora).upload(b, &name("kv_a_proj_with_mqa (latent)"))?,
            kv_pe: kv_a.pick(s.kv_lora..s.kv_lora + s.rope).upload(b, &name("kv_a_proj_with_mqa (rope)"))?,
            kv_norm: vector(b, &kv_norm, &name("kv_a_layernorm"))?,
            w_uk: w_uk.upload(b, &name("kv_b_proj (keys)"))?,
            w_uv: w_uv.upload(b, &name("kv_b_proj (values)"))?,
            o: o.upload(b, &name("o_proj"))?,
            elements,
        })
    }

    /// Bytes of weights a token reads, as kept.
    fn bytes(&self, b: &B) -> usize {
        let q = self.q_lora.as_ref().map_or(0, |(a, norm)| kept(b, &[a, norm]));
        q + kept(b, &[&self.q_nope, &self.q_pe, &self.kv_c, &self.kv_pe, &self.kv_norm, &self.w_uk, &self.w_uv, &self.o])
    }
}

struct DenseMlp<B: Backend> {
    gate: B::Weight,
    up: B::Weight,
    down: B::Weight,
}

impl<B: Backend> DenseMlp<B> {
    /// The MLP under `prefix`, the `width` part of its `inner` units, read as `Mlp::load`
    /// reads it, as stored where `stored` (`Rows::read`).
    fn load(
        ld: &mut Loader<'_, B>,
        b: &B,
        f: &WeightFormats,
        prefix: &str,
        ([hidden, inner], width): ([usize; 2], Range<usize>),
        stored: bool,
    ) -> Result<Self, BackendError> {
        let name = |t: &str| format!("{prefix}{t}_proj");
        let mut read = |t: &str, shape| Rows::read(ld, f, &format!("{}.weight", name(t)), shape, stored);
        let gate = read("gate", [inner, hidden])?.outputs_in(width.clone());
        let up = read("up", [inner, hidden])?.outputs_in(width.clone());
        let down = read("down", [hidden, inner])?.inputs_in(width);
        Ok(DenseMlp { gate: gate.upload(b, &name("gate"))?, up: up.upload(b, &name("up"))?, down: down.upload(b, &name("down"))? })
    }

    fn bytes(&self, b: &B) -> usize {
        kept(b, &[&self.gate, &self.up, &self.down])
    }
}

struct RoutedExperts<B: Backend> {
    router: B::Weight,
    bias: B::Tensor,
    gate_up: B::Weight,
    down: B::Weight,
    /// The scales of quantized `gate_up` and `down`, and their format (`Experts::quantized`).
    quantized: Option<(B::Tensor, B::Tensor, StoredFormat)>,
    first: usize,
    count: usize,
    inner: usize,
    shared: Option<DenseMlp<B>>,
}

/// A routed expert's weight as the checkpoint stores it, for a backend that reads it so.
struct StoredLinear<'a> {
    bytes: &'a [u8],
    scales: Vec<f32>,
    format: StoredFormat,
}

impl<'a> From<Fp8Linear<'a>> for StoredLinear<'a> {
    fn from(w: Fp8Linear<'a>) -> Self {
        StoredLinear { bytes: w.bytes, scales: w.scales, format: StoredFormat::Fp8 { block: w.block } }
    }
}

impl<'a> From<Int4Linear<'a>> for StoredLinear<'a> {
    fn from(w: Int4Linear<'a>) -> Self {
        StoredLinear { bytes: w.packed, scales: w.scales, format: StoredFormat::Int4 { group: w.group, scale_dtype: w.scale_dtype } }
    }
}

/// The formats whose `[inner, hidden]` experts the backend's kernels take as stored: whole
/// FP8 blocks; INT4 widths of whole groups, each a power of two of whole 16-value chunks
/// (one scale a chunk).
fn stored_formats(f: &WeightFormats, dims: [usize; 2]) -> (bool, bool) {
    let ([br, bc], group) = (f.fp8_block, f.int4_group);
    let fp8 = dims.iter().all(|d| d % br == 0 && d % bc == 0);
    let int4 = group.is_power_of_two() && group % 16 == 0 && dims.iter().all(|d| d % group == 0);
    (fp8, int4)
}

/// A layer's routed experts gathered as the backend will read them: dequantized, or as the
/// checkpoint stores them (FP8, packed INT4).
enum ExpertStacks {
    Plain { gate_up: Staged, down: Staged },
    Stored { gate_up: Vec<u8>, down: Vec<u8>, scales: [Vec<f32>; 2], format: StoredFormat },
}

impl ExpertStacks {
    /// Expert number `k` of the stack, as stored; `None` when the stack so far is not stored
    /// so, or in another format.
    fn push_stored(&mut self, k: usize, [gate, up, down]: [StoredLinear<'_>; 3]) -> Option<()> {
        if k == 0 {
            *self = ExpertStacks::Stored { gate_up: Vec::new(), down: Vec::new(), scales: [Vec::new(), Vec::new()], format: gate.format };
        }
        let ExpertStacks::Stored { gate_up, down: stacked_down, scales, format } = self else { return None };
        if [&gate, &up, &down].iter().any(|w| w.format != *format) {
            return None;
        }
        for part in [gate, up] {
            gate_up.extend_from_slice(part.bytes);
            scales[0].extend_from_slice(&part.scales);
        }
        stacked_down.extend_from_slice(down.bytes);
        scales[1].extend_from_slice(&down.scales);
        Some(())
    }

    /// On the backend: `gate_up` (`[count · 2 · inner, hidden]`), `down` (`[count · hidden,
    /// inner]`), and the scales and format when stored quantized.
    #[allow(clippy::type_complexity)]
    fn upload<B: Backend>(
        self,
        b: &B,
        prefix: &str,
        [count, inner, hidden]: [usize; 3],
    ) -> Result<(B::Weight, B::Weight, Option<(B::Tensor, B::Tensor, StoredFormat)>), BackendError> {
        let (gate_name, down_name) = (format!("{prefix}experts (gate and up)"), format!("{prefix}experts (down)"));
        match self {
            ExpertStacks::Plain { gate_up, down } => Ok((gate_up.upload(b, &gate_name)?, down.upload(b, &down_name)?, None)),
            ExpertStacks::Stored { gate_up, down, scales: [s_gate_up, s_down], format } => {
                let stored = |name: &str, data: &[u8], [rows, cols]: [usize; 2]| {
                    let shape = [rows, format.row_bytes(cols)];
                    let view = TensorView { name, file: Path::new("(the target's weights)"), dtype: format.dtype(), shape: &shape, data };
                    b.load_weight(&view, Shard::Replicated)
                };
                Ok((
                    stored(&gate_name, &gate_up, [count * 2 * inner, hidden])?,
                    stored(&down_name, &down, [count * hidden, inner])?,
                    Some((
                        b.tensor_from(format.row_scales(hidden), &s_gate_up)?,
                        b.tensor_from(format.row_scales(inner), &s_down)?,
                        format,
                    )),
                ))
            }
        }
    }
}

/// A layer whose routed experts are not all stored alike.
fn mixed(expert: &str) -> BackendError {
    BackendError::Device(format!("{expert}: stored unlike the layer's other routed experts (quantized and not, or in another format)"))
}

enum FeedForward<B: Backend> {
    Dense(DenseMlp<B>),
    Moe(RoutedExperts<B>),
}

impl<B: Backend> FeedForward<B> {
    /// Layer `i`'s feed-forward under `prefix`, this rank's share; the routed experts one
    /// at a time onto the stacked weights.
    fn load<'a>(
        ld: &mut Loader<'a, B>,
        b: &B,
        prefix: &str,
        c: &DeepseekConfig,
        i: usize,
        split: Split,
        ep: usize,
    ) -> Result<Self, BackendError> {
        let (h, f) = (c.hidden, &c.weights);
        if !c.is_moe_layer(i) {
            let width = split.part(c.intermediate, "intermediate_size")?;
            return Ok(FeedForward::Dense(DenseMlp::load(ld, b, f, prefix, ([h, c.intermediate], width), split.world == 1)?));
        }
        let share = MoeShare::of(c, split, ep)?;
        let inner = c.moe.intermediate;
        // Quantized experts stay as stored where the backend reads them so: whole (no width
        // split) and of widths its kernels take.
        let whole = b.keeps_quantized() && share.width == (0..inner);
        let (fp8, int4) = stored_formats(f, [inner, h]);
        let mut stacks = ExpertStacks::Plain { gate_up: Staged::new(b, h), down: Staged::new(b, share.width.len()) };
        for (k, e) in share.own.clone().enumerate() {
            let p = format!("{prefix}experts.{e}.");
            // Only the formats the kernels take: a weight read here is counted as read.
            let read = |ld: &mut Loader<'a, B>, t: &str, shape: [usize; 2]| -> Result<Option<StoredLinear<'a>>, BackendError> {
                let name = format!("{p}{t}.weight");
                if let Some(w) = if fp8 { ld.host_fp8(&name, shape, f)? } else { None } {
                    return Ok(Some(w.into()));
                }
                Ok(if int4 { ld.host_int4(&name, shape, f)?.map(Into::into) } else { None })
            };
            if whole {
                if let Some(gate) = read(ld, "gate_proj", [inner, h])? {
                    let (up, down) = (read(ld, "up_proj", [inner, h])?, read(ld, "down_proj", [h, inner])?);
                    let (Some(up), Some(down)) = (up, down) else { return Err(mixed(&p)) };
                    stacks.push_stored(k, [gate, up, down]).ok_or_else(|| mixed(&p))?;
                    continue;
                }
            }
            let mlp = Mlp::load(ld, f, &p, [h, inner], share.width.clone())?;
            let ExpertStacks::Plain { gate_up, down } = &mut stacks else { return Err(mixed(&p)) };
            gate_up.push(&mlp.gate.w).push(&mlp.up.w);
            down.push(&mlp.down.w);
        }
        let (gate_up, down, quantized) = stacks.upload(b, prefix, [share.own.len(), share.width.len(), h])?;
        let router = Linear::load(ld, f, &format!("{prefix}gate.weight"), c.moe.experts, h)?;
        let bias = ld.host_f32(&format!("{prefix}gate.e_score_correction_bias"), &[c.moe.experts])?;
        let shared_inner = c.moe.shared_experts * inner;
        let shared = share
            .shared_width
            .clone()
            .map(|width| DenseMlp::load(ld, b, f, &format!("{prefix}shared_experts."), ([h, shared_inner], width), split.world == 1));
        Ok(FeedForward::Moe(RoutedExperts {
            router: weight(b, &router.w, h, &format!("{prefix}gate.weight"))?,
            bias: b.tensor_from(c.moe.experts, &bias)?,
            gate_up,
            down,
            quantized,
            first: share.own.start,
            count: share.own.len(),
            inner: share.width.len(),
            shared: shared.transpose()?,
        }))
    }
}

impl<B: Backend> FeedForward<B> {
    /// Bytes a token reads as kept, but for the routed experts: the MLP, or the router, its
    /// bias and the shared experts.
    fn fixed_bytes(&self, b: &B) -> usize {
        match self {
            FeedForward::Dense(mlp) => mlp.bytes(b),
            FeedForward::Moe(moe) => {
                kept(b, &[&moe.router]) + 4 * b.weight_shape(&moe.router)[0] + moe.shared.as_ref().map_or(0, |m| m.bytes(b))
            }
        }
    }
}

struct Layer<B: Backend> {
    input_ln: B::Weight,
    attn: Attention<B>,
    post_ln: B::Weight,
    ffn: FeedForward<B>,
}

/// Weight elements of one layer on this rank: `(held, read by a token, of those the routed
/// experts')`.
fn layer_elements(attention: usize, c: &DeepseekConfig, i: usize, split: Split, ep: usize) -> Result<(usize, usize, usize), BackendError> {
    let base = 2 * c.hidden + attention;
    if !c.is_moe_layer(i) {
        let mlp = 3 * c.hidden * split.part(c.intermediate, "intermediate_size")?.len();
        return Ok((base + mlp, base + mlp, 0));
    }
    let share = MoeShare::of(c, split, ep)?;
    let per_expert = 3 * c.hidden * share.width.len();
    let shared = (c.moe.shared_experts * c.moe.intermediate).checked_div(split.world).unwrap_or(0) * 3 * c.hidden;
    let fixed = base + c.moe.experts * (c.hidden + 1) + shared;
    let read = c.moe.per_token * share.own.len() / c.moe.experts;
    Ok((fixed + share.own.len() * per_expert, fixed + read * per_expert, read * per_expert))
}

/// Bytes of `elements` routed-expert weights as a layer keeps them: as stored with their f32
/// scales, or in the backend's weight dtype.
fn routed_bytes<B: Backend>(b: &B, ffn: &FeedForward<B>, elements: usize) -> usize {
    let format = match ffn {
        FeedForward::Moe(RoutedExperts { quantized: Some((_, _, format)), .. }) => Some(*format),
        _ => None,
    };
    kept_bytes(elements, format, dtype_bytes(b))
}

/// Bytes of `elements` weights: FP8's one each and an f32 scale a block, INT4's one a pair
/// and an f32 scale a group, or `dtype_bytes`.
fn kept_bytes(elements: usize, format: Option<StoredFormat>, dtype_bytes: usize) -> usize {
    match format {
        Some(StoredFormat::Fp8 { block: [br, bc] }) => elements + elements.div_ceil(br * bc) * 4,
        Some(StoredFormat::Int4 { group, .. }) => elements.div_ceil(2) + elements.div_ceil(group) * 4,
        None => elements * dtype_bytes,
    }
}

fn dtype_bytes<B: Backend>(b: &B) -> usize {
    b.weight_dtype().bitsize() / 8
}

/// The activations of a forward of up to `rows` rows.
struct Buffers<B: Backend> {
    rows: usize,
    logit_rows: usize,
    h: B::Tensor,
    x: B::Tensor,
    delta: B::Tensor,
    q_a: Option<[B::Tensor; 2]>,
    q_nope: B::Tensor,
    q_pe: B::Tensor,
    c: B::Tensor,
    c_normed: B::Tensor,
    pe: B::Tensor,
    q_lat: B::Tensor,
    o_lat: B::Tensor,
    o: B::Tensor,
    /// gate, up and their product, for the dense MLP and for the shared experts.
    dense: Option<[B::Tensor; 3]>,
    shared: Option<[B::Tensor; 3]>,
    router: B::Tensor,
    chosen: B::Ids,
    route_weights: B::Tensor,
    moe_out: B::Tensor,
    moe: MoeScratch<B>,
    last: [B::Tensor; 2],
}

/// The sizes buffers are cut to.
#[derive(Clone, Copy)]
struct Widths {
    hidden: usize,
    q_lora: Option<usize>,
    heads: usize,
    nope: usize,
    v: usize,
    geometry: MlaGeometry,
    dense: Option<usize>,
    shared: Option<usize>,
    routing: Routing,
    expert_inner: usize,
    experts_held: usize,
}

impl<B: Backend> Buffers<B> {
    fn new(b: &B, w: &Widths, rows: usize, logit_rows: usize) -> Result<Self, BackendError> {
        let t = |cols: usize| b.tensor(rows, cols);
        let three = |cols: Option<usize>| cols.map(|c| Ok::<_, BackendError>([t(c)?, t(c)?, t(c)?])).transpose();
        let g = &w.geometry;
        let k = w.routing.per_token;
        // Sized before any graph is captured over the matmuls' scratch (`Backend::
        // reserve_matmuls`); the inputs twice over, since the router reads x in two bf16
        // parts (`Backend::matmul_f32_inputs`).
        let (dense, shared) = (w.dense.unwrap_or(0), w.shared.unwrap_or(0));
        let widest_in = [w.hidden, w.q_lora.unwrap_or(0), w.heads * w.v, dense, shared].into_iter().max().unwrap_or(0);
        let widest_products = [w.heads * (w.nope + g.rope), g.kv_lora + g.rope, 2 * dense, 2 * shared].into_iter().max().unwrap_or(0);
        b.reserve_matmuls(rows, 2 * widest_in, widest_products)?;
        Ok(Buffers {
            rows,
            logit_rows,
            h: t(w.hidden)?,
            x: t(w.hidden)?,
            delta: t(w.hidden)?,
            q_a: w.q_lora.map(|r| Ok::<_, BackendError>([t(r)?, t(r)?])).transpose()?,
            q_nope: t(w.heads * w.nope)?,
            q_pe: t(w.heads * g.rope)?,
            c: t(g.kv_lora)?,
            c_normed: t(g.kv_lora)?,
            pe: t(g.rope)?,
            q_lat: t(w.heads * g.kv_lora)?,
            o_lat: t(w.heads * g.kv_lora)?,
            o: t(w.heads * w.v)?,
            dense: three(w.dense)?,
            shared: three(w.shared)?,
            router: t(w.routing.experts.max(1))?,
            chosen: b.ids(rows * k.max(1))?,
            route_weights: t(k.max(1))?,
            moe_out: t(w.hidden)?,
            moe: MoeScratch::new(b, rows * k.max(1), w.expert_inner.max(1), w.hidden, w.experts_held.max(1))?,
            last: [b.tensor(logit_rows, w.hidden)?, b.tensor(logit_rows, w.hidden)?],
        })
    }
}

/// A DeepSeek-V3 target's weights on the backend and the buffers its forwards run in.
pub(crate) struct DeviceStack<B: Backend> {
    pub embed: Arc<B::Weight>,
    pub lm_head: Arc<B::Weight>,
    layers: Vec<Layer<B>>,
    norm: B::Weight,
    rope: RopeTable<B>,
    eps: f32,
    widths: Widths,
    buffers: Buffers<B>,
    /// Weight elements held, and read by one token.
    pub elements: (u64, u64),
    /// Bytes of weights one token reads, each in the dtype it is kept in.
    pub read_bytes: u64,
}

impl<B: Backend> DeviceStack<B> {
    /// Every layer of the text model onto `b`, one at a time; `embed` and `lm_head` are
    /// the host's (the lm_head `None` when tied), put on the backend here.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn load(
        b: &B,
        ld: &mut Loader<'_, B>,
        c: &DeepseekConfig,
        (shape, heads, split, ep): (MlaShape, Range<usize>, Split, usize),
        (embed, lm_head, norm): (&Linear, Option<&Linear>, &[f32]),
        rope: RopeTable<B>,
        (rows, logit_rows): (usize, usize),
    ) -> Result<Self, BackendError> {
        let p = c.prefix();
        // The routers' near-tied scores need x to f32 precision in every product (run 27).
        b.set_precise_inputs(true);
        let mut layers = Vec::with_capacity(c.layers);
        let mut elements = (embed.elements() + norm.len() + lm_head.map_or(0, Linear::elements), 0);
        // A token reads one row of the embedding table, and the whole lm_head (the table
        // again when they are tied).
        elements.1 = c.hidden + norm.len() + lm_head.map_or(embed.elements(), Linear::elements);
        let mut read_bytes = elements.1 * dtype_bytes(b);
        for i in 0..c.layers {
            let l = format!("{p}model.layers.{i}.");
            let attn = Attention::load(ld, b, c, (&shape, heads.clone()), &format!("{l}self_attn."), split.world == 1)?;
            let (held, read, routed) = layer_elements(attn.elements, c, i, split, ep)?;
            elements = (elements.0 + held, elements.1 + read);
            let ffn = FeedForward::load(ld, b, &format!("{l}mlp."), c, i, split, ep)?;
            read_bytes += 2 * c.hidden * dtype_bytes(b) + attn.bytes(b) + ffn.fixed_bytes(b) + routed_bytes(b, &ffn, routed);
            layers.push(Layer {
                input_ln: vector(b, &ld.host_f32(&format!("{l}input_layernorm.weight"), &[c.hidden])?, &format!("{l}input_layernorm"))?,
                attn,
                post_ln: vector(
                    b,
                    &ld.host_f32(&format!("{l}post_attention_layernorm.weight"), &[c.hidden])?,
                    &format!("{l}post_attention_layernorm"),
                )?,
                ffn,
            });
        }
        let embed_w = Arc::new(weight(b, &embed.w, c.hidden, "model.embed_tokens.weight")?);
        let lm_head = match lm_head {
            Some(head) => Arc::new(weight(b, &head.w, c.hidden, "lm_head.weight")?),
            None => embed_w.clone(),
        };
        let dense = (0..c.layers)
            .any(|i| !c.is_moe_layer(i))
            .then(|| split.part(c.intermediate, "intermediate_size"))
            .transpose()?
            .map(|r| r.len());
        let moe_layer = (0..c.layers).find(|&i| c.is_moe_layer(i));
        let share = moe_layer.map(|_| MoeShare::of(c, split, ep)).transpose()?;
        let shared = match (moe_layer, c.moe.shared_experts * c.moe.intermediate) {
            (Some(_), inner) if inner > 0 => Some(split.part(inner, "n_shared_experts × moe_intermediate_size")?.len()),
            _ => None,
        };
        let widths = Widths {
            hidden: c.hidden,
            q_lora: c.q_lora_rank,
            heads: shape.heads,
            nope: shape.nope,
            v: shape.v,
            geometry: MlaGeometry { heads: shape.heads, kv_lora: shape.kv_lora, rope: shape.rope, scale: shape.scale },
            dense,
            shared,
            routing: if moe_layer.is_some() { routing(&c.moe) } else { Routing { experts: 0, per_token: 0, ..routing(&c.moe) } },
            expert_inner: share.as_ref().map_or(0, |s| s.width.len()),
            experts_held: share.as_ref().map_or(0, |s| s.own.len()),
        };
        Ok(DeviceStack {
            buffers: Buffers::new(b, &widths, rows, logit_rows)?,
            embed: embed_w,
            lm_head,
            layers,
            norm: vector(b, norm, "model.norm.weight")?,
            rope,
            eps: c.eps,
            widths,
            elements: (elements.0 as u64, elements.1 as u64),
            read_bytes: read_bytes as u64,
        })
    }

    /// Grow the buffers to `rows` rows and `logit_rows` logit rows.
    pub(crate) fn ensure_rows(&mut self, b: &B, rows: usize, logit_rows: usize) -> Result<(), BackendError> {
        let f = &self.buffers;
        if rows > f.rows || logit_rows > f.logit_rows {
            self.buffers = Buffers::new(b, &self.widths, rows.max(f.rows), logit_rows.max(f.logit_rows))?;
        }
        Ok(())
    }

    pub(crate) fn set_rope(&mut self, rope: RopeTable<B>) {
        self.rope = rope;
    }

    /// One forward of `n` rows (ids and positions in `inputs`) over the latent pool `kv`
    /// as `table` says, capturing layer inputs where asked; the final hidden states of
    /// `logit_rows` (in that order) through the norm and lm_head into `logits`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward(
        &mut self,
        b: &B,
        inputs: &StepInputs<B>,
        kv: (&mut [B::Tensor], &mut [B::Tensor]),
        table: &SlotTable,
        n: usize,
        mut capture: Option<&mut Capture<B>>,
        logit_rows: &[usize],
        logits: &mut B::Tensor,
    ) {
        let (w, f) = (&self.widths, &mut self.buffers);
        let eps = self.eps;
        b.embed(&self.embed, &inputs.ids, n, &mut f.h);
        for (i, l) in self.layers.iter().enumerate() {
            if let Some(cap) = capture.as_deref_mut() {
                if let Some(k) = cap.layers.iter().position(|&c| c == i) {
                    b.copy_cols(&f.h, n, &mut cap.aux, k * w.hidden);
                }
            }
            b.rms_norm(&f.h, &l.input_ln, eps, n, &mut f.x);
            let a = &l.attn;
            let q_in = match (&a.q_lora, &mut f.q_a) {
                (Some((q_a, q_norm)), Some([raw, normed])) => {
                    b.matmul(&f.x, q_a, None, n, raw);
                    b.rms_norm(raw, q_norm, eps, n, normed);
                    &*normed
                }
                _ => &f.x,
            };
            b.matmul_many(
                q_in,
                n,
                &mut [Projection { w: &a.q_nope, bias: None, out: &mut f.q_nope }, Projection { w: &a.q_pe, bias: None, out: &mut f.q_pe }],
            );
            b.matmul_many(
                &f.x,
                n,
                &mut [Projection { w: &a.kv_c, bias: None, out: &mut f.c }, Projection { w: &a.kv_pe, bias: None, out: &mut f.pe }],
            );
            b.rms_norm(&f.c, &a.kv_norm, eps, n, &mut f.c_normed);
            b.rope(&mut f.q_pe, &self.rope, &inputs.positions, n);
            b.rope(&mut f.pe, &self.rope, &inputs.positions, n);
            b.head_matmul(&f.q_nope, &a.w_uk, w.heads, n, &mut f.q_lat);
            b.mla_attention(&f.q_lat, &f.q_pe, (&f.c_normed, &f.pe), (&mut kv.0[i], &mut kv.1[i]), &w.geometry, table, &mut f.o_lat);
            b.head_matmul(&f.o_lat, &a.w_uv, w.heads, n, &mut f.o);
            b.matmul_residual(&f.o, &a.o, n, &mut f.delta, &mut f.h);
            b.rms_norm(&f.h, &l.post_ln, eps, n, &mut f.x);
            match &l.ffn {
                FeedForward::Dense(mlp) => {
                    let [gate, up, act] = f.dense.as_mut().expect("dense buffers sized at load");
                    b.gate_up_silu(&f.x, &mlp.gate, &mlp.up, n, gate, up, act);
                    b.matmul_residual(act, &mlp.down, n, &mut f.delta, &mut f.h);
                }
                FeedForward::Moe(moe) => {
                    b.matmul_f32_inputs(&f.x, &moe.router, n, &mut f.router);
                    b.moe_route(&f.router, &moe.bias, &w.routing, n, &mut f.chosen, &mut f.route_weights);
                    let quantized = moe.quantized.as_ref().map(|(gate_up, down, format)| ExpertScales { gate_up, down, format: *format });
                    let experts =
                        Experts { gate_up: &moe.gate_up, down: &moe.down, first: moe.first, count: moe.count, inner: moe.inner, quantized };
                    b.moe_experts(&f.x, &f.chosen, &f.route_weights, w.routing.per_token, &experts, n, &mut f.moe, &mut f.moe_out);
                    if let (Some(mlp), Some([gate, up, act])) = (&moe.shared, f.shared.as_mut()) {
                        b.gate_up_silu(&f.x, &mlp.gate, &mlp.up, n, gate, up, act);
                        b.matmul(act, &mlp.down, None, n, &mut f.delta);
                        b.add(&mut f.moe_out, &f.delta, n);
                    }
                    b.all_reduce(&mut f.moe_out, n);
                    b.add(&mut f.h, &f.moe_out, n);
                }
            }
        }
        if logit_rows.is_empty() {
            return;
        }
        let [picked, normed] = &mut f.last;
        b.gather_rows(&f.h, logit_rows, picked);
        b.rms_norm(picked, &self.norm, eps, logit_rows.len(), normed);
        b.matmul(normed, &self.lm_head, None, logit_rows.len(), logits);
    }
}

#[cfg(test)]
mod tests {
    use super::{kept_bytes, StoredFormat};
    use safetensors::tensor::Dtype;

    /// A DeepSeek-V3 token's 8 routed experts of 3 × 7168 × 2048: FP8 is a byte an element
    /// and an f32 per 128 × 128 block, half of bf16's bytes and a little more.
    #[test]
    fn fp8_experts_count_a_byte_an_element_and_their_block_scales() {
        let elements = 8 * 3 * 7168 * 2048;
        let fp8 = Some(StoredFormat::Fp8 { block: [128, 128] });
        assert_eq!(kept_bytes(elements, fp8, 2), elements + elements / 16384 * 4);
        assert_eq!(kept_bytes(elements, None, 2), 2 * elements);
        assert_eq!(kept_bytes(100, fp8, 2), 104);
    }

    /// Kimi-K2.5's INT4 experts: half a byte an element and an f32 per group of 32, a quarter
    /// of bf16's bytes and an eighth more.
    #[test]
    fn int4_experts_count_half_a_byte_an_element_and_their_group_scales() {
        let elements = 8 * 3 * 7168 * 2048;
        let int4 = Some(StoredFormat::Int4 { group: 32, scale_dtype: Dtype::BF16 });
        assert_eq!(kept_bytes(elements, int4, 2), elements / 2 + elements / 32 * 4);
        assert_eq!(kept_bytes(100, int4, 2), 50 + 4 * 4);
    }
}
