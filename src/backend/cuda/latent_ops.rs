//! `CudaBackend`'s DeepSeek-V3-family ops (`backend::latent`), launched from kernels/latent.cu.

use super::backend::{CudaBackend, CudaIds, CudaTensor, CudaWeight};
use safetensors::tensor::Dtype;

use super::gpu::Arg;
use super::stored::{
    fp8_block_threads, fp8_kernel_takes, fp8_shared_bytes, fp8_slices, Fp8Rows, FP8_EXPERT_ENTRIES, FP8_FEATURES_PER_BLOCK,
    FP8_ROWS_PER_BLOCK,
};
use crate::backend::latent::{Experts, MlaGeometry, MoeScratch, Routing, SlotTable, StoredFormat};
use crate::knobs::Knobs;

/// Warps per block of the latent kernels (kernels/latent.cu's LATENT_WARPS), and the output
/// rows each warp of an expert block takes (MOE_ROWS_PER_WARP).
const LATENT_WARPS: u32 = 8;
const MOE_ROWS_PER_WARP: usize = 4;
/// kernels/latent.cu's MLA_LORA_PER · 32, MLA_ROPE_PER · 32, ROUTE_MAX_EXPERTS and
/// ROUTE_MAX_GROUPS: the largest shapes its kernels take.
const MAX_LORA: usize = 512;
const MAX_ROPE: usize = 64;
const MAX_EXPERTS: usize = 1024;
const MAX_GROUPS: usize = 64;
/// INT4 weights a lane of kernels/latent.cu's INT4 expert kernels reads at once (Int4Experts::CHUNK).
const INT4_CHUNK: usize = 16;
/// Threads of a `moe_combine_f32` block, one output column each.
const COMBINE_THREADS: usize = 256;

impl CudaBackend {
    pub(super) fn launch_head_matmul(&self, x: &CudaTensor, w: &CudaWeight, heads: usize, n: usize, out: &mut CudaTensor) {
        let (b, a) = (w.shape[0] / heads, w.shape[1]);
        let (x_ptr, out_ptr) = (x.buf.ptr(), out.buf.ptr());
        let grid = (heads as u32, b.div_ceil(LATENT_WARPS as usize) as u32);
        let (x, w_ptr, out) = (Arg::Ptr(x_ptr), Arg::Ptr(w.buf.ptr()), Arg::Ptr(out_ptr));
        let sizes = [Arg::I32(a as i32), Arg::I32(b as i32), Arg::I32(n as i32)];
        match w.stored.as_ref().map(|s| (s, s.format)) {
            None => {
                let mut args = [x, w_ptr, out, sizes[0], sizes[1], sizes[2]];
                self.kernel("head_matmul_bf16", grid, LATENT_WARPS * 32, 0, &mut args, None);
            }
            Some((s, StoredFormat::Fp8 { block: [_, bc] })) if fp8_kernel_takes(bc, a) => {
                let rows = Fp8Rows { x: x_ptr, n, k_in: a, n_out: b, heads, out: out_ptr, accumulate: false };
                self.launch_fp8_rows(&rows, w.buf.ptr(), s);
            }
            Some((s, StoredFormat::Fp8 { block: [br, bc] })) if bc % 16 == 0 && a % bc == 0 => {
                let mut args =
                    [x, w_ptr, Arg::Ptr(s.buf.ptr()), Arg::I32(br as i32), Arg::I32(bc as i32), out, sizes[0], sizes[1], sizes[2]];
                self.kernel("head_matmul_fp8", grid, LATENT_WARPS * 32, 0, &mut args, None);
            }
            Some((_, format)) => self.gpu.record(|| format!("per-head products of {a}-wide rows stored as {format:?}: not a kernel's")),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn launch_mla_attention(
        &self,
        q_lat: &CudaTensor,
        q_pe: &CudaTensor,
        new: (&CudaTensor, &CudaTensor),
        cache: (&mut CudaTensor, &mut CudaTensor),
        g: &MlaGeometry,
        table: &SlotTable,
        out: &mut CudaTensor,
    ) {
        if g.kv_lora > MAX_LORA || g.rope > MAX_ROPE {
            self.gpu
                .record(|| format!("MLA of kv_lora_rank {} and qk_rope_head_dim {} exceeds {MAX_LORA} and {MAX_ROPE}", g.kv_lora, g.rope));
            return;
        }
        let Some(t) = self.slot_table_for(table) else { return };
        let (lora, rope) = (Arg::I32(g.kv_lora as i32), Arg::I32(g.rope as i32));
        let rows = table.rows as u32;
        let mut store = [
            Arg::Ptr(new.0.buf.ptr()),
            Arg::Ptr(new.1.buf.ptr()),
            Arg::Ptr(cache.0.buf.ptr()),
            Arg::Ptr(cache.1.buf.ptr()),
            lora,
            rope,
            Arg::Ptr(t),
        ];
        self.kernel("mla_store_f32", (rows, 1), 128, 0, &mut store, None);
        let mut attend = [
            Arg::Ptr(q_lat.buf.ptr()),
            Arg::Ptr(q_pe.buf.ptr()),
            Arg::Ptr(cache.0.buf.ptr()),
            Arg::Ptr(cache.1.buf.ptr()),
            Arg::Ptr(out.buf.ptr()),
            lora,
            rope,
            Arg::F32(g.scale),
            Arg::Ptr(t),
        ];
        self.kernel("mla_attention_f32", (g.heads as u32, rows), LATENT_WARPS * 32, 0, &mut attend, None);
    }

    pub(super) fn launch_moe_route(
        &self,
        logits: &CudaTensor,
        bias: &CudaTensor,
        m: &Routing,
        n: usize,
        experts: &mut CudaIds,
        weights: &mut CudaTensor,
    ) {
        if m.experts > MAX_EXPERTS || m.groups > MAX_GROUPS || m.groups == 0 || m.experts % m.groups != 0 {
            self.gpu.record(|| {
                format!("routing {} experts in {} groups exceeds {MAX_EXPERTS} experts in {MAX_GROUPS} groups", m.experts, m.groups)
            });
            return;
        }
        let mut args = [
            Arg::Ptr(logits.buf.ptr()),
            Arg::I32(logits.cols as i32),
            Arg::Ptr(bias.buf.ptr()),
            Arg::I32(m.experts as i32),
            Arg::I32(m.groups as i32),
            Arg::I32(m.topk_groups as i32),
            Arg::I32(m.per_token as i32),
            Arg::I32(i32::from(m.norm_topk_prob)),
            Arg::F32(m.routed_scaling_factor),
            Arg::Ptr(experts.buf.ptr()),
            Arg::Ptr(weights.buf.ptr()),
            Arg::I32(weights.cols as i32),
        ];
        if n > 0 {
            self.kernel("moe_route_f32", (n as u32, 1), 32, 0, &mut args, None);
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn launch_moe_experts(
        &self,
        x: &CudaTensor,
        experts: &CudaIds,
        weights: &CudaTensor,
        per_token: usize,
        w: &Experts<'_, Self>,
        n: usize,
        scratch: &mut MoeScratch<Self>,
        out: &mut CudaTensor,
    ) {
        let (hidden, inner, pairs) = (x.cols, w.inner, n * per_token);
        if hidden % 8 != 0 || inner % 8 != 0 {
            self.gpu.record(|| format!("routed experts of hidden {hidden} and width {inner}: both must be multiples of 8"));
            return;
        }
        if w.count > MAX_EXPERTS {
            self.gpu.record(|| format!("{} routed experts on one rank exceed {MAX_EXPERTS}", w.count));
            return;
        }
        if pairs == 0 {
            return;
        }
        let blocks = w.count.min(pairs) as u32;
        let list = Arg::I32((1 + 3 * w.count.min(pairs)) as i32);
        let plan = Arg::Ptr(scratch.plan.buf.ptr());
        let mut plan_args = [Arg::Ptr(experts.buf.ptr()), Arg::I32(pairs as i32), Arg::I32(w.first as i32), Arg::I32(w.count as i32), plan];
        self.kernel("moe_plan_i32", (1, 1), w.count.next_multiple_of(32).min(MAX_EXPERTS) as u32, 0, &mut plan_args, None);
        let rows_per_block = LATENT_WARPS as usize * MOE_ROWS_PER_WARP;
        let (hidden_arg, inner_arg) = (Arg::I32(hidden as i32), Arg::I32(inner as i32));
        let grids = ((blocks, inner.div_ceil(rows_per_block) as u32), (blocks, hidden.div_ceil(rows_per_block) as u32));
        let (act, y) = (Arg::Ptr(scratch.act.buf.ptr()), Arg::Ptr(scratch.out.buf.ptr()));
        let (x_arg, gate_up, down) = (Arg::Ptr(x.buf.ptr()), Arg::Ptr(w.gate_up.buf.ptr()), Arg::Ptr(w.down.buf.ptr()));
        let tokens = Arg::I32(per_token as i32);
        match w.quantized.as_ref().map(|q| (q, q.format)) {
            None => {
                let mut first = [x_arg, gate_up, plan, tokens, hidden_arg, inner_arg, list, act];
                self.kernel("moe_gate_up_bf16", grids.0, LATENT_WARPS * 32, 0, &mut first, None);
                let mut second = [act, down, plan, hidden_arg, inner_arg, list, y];
                self.kernel("moe_down_bf16", grids.1, LATENT_WARPS * 32, 0, &mut second, None);
            }
            Some((f, StoredFormat::Fp8 { block: [br, bc] })) => {
                if bc % 16 != 0 || inner % br != 0 || inner % bc != 0 || hidden % br != 0 || hidden % bc != 0 {
                    self.gpu.record(|| format!("FP8 experts of hidden {hidden} and width {inner} over {br}x{bc} blocks: the widths must be whole blocks of a multiple of 16 columns"));
                    return;
                }
                if Knobs::get().expert_mma && fp8_kernel_takes(bc, hidden) && fp8_kernel_takes(bc, inner) {
                    let (br, bc) = (Arg::I32(br as i32), Arg::I32(bc as i32));
                    let parts = Arg::I32(self.matmuls.x_parts());
                    let launch = |name, grid, x, w, scales, k_in: usize, n_out: usize, y| {
                        let slices = fp8_slices(k_in);
                        let (cols, count) = (Arg::I32((k_in / slices) as i32), Arg::I32(slices as i32));
                        let (k_in, n_out) = (Arg::I32(k_in as i32), Arg::I32(n_out as i32));
                        let mut args = [x, w, scales, br, bc, cols, count, parts, plan, tokens, k_in, n_out, list, y];
                        self.kernel(name, grid, fp8_block_threads(slices), fp8_shared_bytes(slices, 1), &mut args, None);
                    };
                    let gate_up_grid = (blocks, inner.div_ceil(FP8_FEATURES_PER_BLOCK) as u32);
                    launch(FP8_EXPERT_ENTRIES[0], gate_up_grid, x_arg, gate_up, Arg::Ptr(f.gate_up.buf.ptr()), hidden, inner, act);
                    let down_grid = (blocks, hidden.div_ceil(FP8_ROWS_PER_BLOCK) as u32);
                    launch(FP8_EXPERT_ENTRIES[1], down_grid, act, down, Arg::Ptr(f.down.buf.ptr()), inner, hidden, y);
                } else {
                    let (br, bc) = (Arg::I32(br as i32), Arg::I32(bc as i32));
                    let mut first = [x_arg, gate_up, Arg::Ptr(f.gate_up.buf.ptr()), br, bc, plan, tokens, hidden_arg, inner_arg, list, act];
                    self.kernel("moe_gate_up_fp8", grids.0, LATENT_WARPS * 32, 0, &mut first, None);
                    let mut second = [act, down, Arg::Ptr(f.down.buf.ptr()), br, bc, plan, hidden_arg, inner_arg, list, y];
                    self.kernel("moe_down_fp8", grids.1, LATENT_WARPS * 32, 0, &mut second, None);
                }
            }
            Some((f, StoredFormat::Int4 { group, scale_dtype })) => {
                if !group.is_power_of_two() || group % INT4_CHUNK != 0 || [hidden, inner].iter().any(|d| d % group != 0) {
                    self.gpu.record(|| format!("INT4 experts of hidden {hidden} and width {inner} in groups of {group}: the group must be a power of two of at least {INT4_CHUNK}, and the widths whole groups"));
                    return;
                }
                let rounding = Arg::I32(match scale_dtype {
                    Dtype::BF16 => 1,
                    Dtype::F16 => 2,
                    _ => 0,
                });
                let group = Arg::I32(group.trailing_zeros() as i32);
                let mut first =
                    [x_arg, gate_up, Arg::Ptr(f.gate_up.buf.ptr()), group, rounding, plan, tokens, hidden_arg, inner_arg, list, act];
                self.kernel("moe_gate_up_int4", grids.0, LATENT_WARPS * 32, 0, &mut first, None);
                let mut second = [act, down, Arg::Ptr(f.down.buf.ptr()), group, rounding, plan, hidden_arg, inner_arg, list, y];
                self.kernel("moe_down_int4", grids.1, LATENT_WARPS * 32, 0, &mut second, None);
            }
        }
        let mut combine = [
            y,
            Arg::Ptr(experts.buf.ptr()),
            Arg::Ptr(weights.buf.ptr()),
            Arg::I32(weights.cols as i32),
            Arg::I32(per_token as i32),
            Arg::I32(w.first as i32),
            Arg::I32(w.count as i32),
            hidden_arg,
            Arg::Ptr(out.buf.ptr()),
        ];
        self.kernel("moe_combine_f32", (n as u32, hidden.div_ceil(COMBINE_THREADS) as u32), COMBINE_THREADS as u32, 0, &mut combine, None);
    }
}
