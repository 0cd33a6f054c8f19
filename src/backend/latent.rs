//! The arguments of the ops a DeepSeek-V3-family target adds to the seam: absorbed MLA over a
//! paged latent pool (`Backend::mla_attention`), per-head products (`Backend::head_matmul`)
//! and the routed experts (`Backend::moe_route`, `Backend::moe_experts`).
//!
//! The latent pool is two buffers, as a KV cache is: per slot the normed latent `c`
//! (`kv_lora_rank` wide) and the rotated rope key (`qk_rope_head_dim` wide), which every
//! head reads. A step's queries arrive absorbed: each head's `q_nope · W_uk` (latent wide)
//! and its rotated `q_pe`; the output is each head's attention-weighted latent, which
//! `kv_b_proj`'s value half then maps to the head's values.

use super::{AttnWindow, Backend};
use crate::model::quantized::{e4m3_to_f32, Int4Linear};

/// The shape of one absorbed MLA layer on this rank.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MlaGeometry {
    pub heads: usize,
    pub kv_lora: usize,
    pub rope: usize,
    /// `qk_head_dim^-0.5`, with YaRN's mscale.
    pub scale: f32,
}

/// One sequence of a forward as `SlotTable` reads it: its rows `[row, row + window.queries)`,
/// the pool slots of the positions its queries may see in position order (the new tokens'
/// `window.queries` slots are `window.first_new_slot()` onwards), and the region mask,
/// row-major `[queries, region]` of 0/1 (`None`: causal).
pub struct SeqSlots<'a> {
    pub row: usize,
    pub slots: &'a [usize],
    pub window: AttnWindow,
    pub mask: Option<&'a [i32]>,
}

/// Header entries per row of a `SlotTable`.
pub const SLOT_TABLE_HEADER: usize = 3;

/// For each row `r` of a forward: `table[3r]` keys it sees, `table[3r + 1]` where in `table`
/// their pool slots start (position order), `table[3r + 2]` the slot its own latent goes to.
/// Causal rows of one sequence share its slot list; a masked row (a verify or draft tree)
/// has a list of its own.
pub struct SlotTable {
    /// Unique in the process, so a backend uploads a forward's table once for all layers.
    pub id: u64,
    pub rows: usize,
    pub table: Vec<i32>,
    /// The most keys any row sees.
    pub max_visible: usize,
}

impl SlotTable {
    /// The table of `seqs`, whose rows cover `[0, rows)`.
    pub fn new(seqs: &[SeqSlots<'_>], rows: usize) -> SlotTable {
        let mut table = vec![0i32; SLOT_TABLE_HEADER * rows];
        let mut max_visible = 0;
        for s in seqs {
            let w = s.window;
            let prefix = &s.slots[..w.prefix];
            let region = &s.slots[w.prefix..w.prefix + w.region];
            let shared = table.len();
            if s.mask.is_none() {
                table.extend(prefix.iter().chain(region).map(|&slot| slot as i32));
            }
            for i in 0..w.queries {
                let start = match s.mask {
                    None => shared,
                    Some(m) => {
                        let start = table.len();
                        let seen = region.iter().enumerate().filter(|(j, _)| m[i * w.region + j] != 0);
                        table.extend(prefix.iter().chain(seen.map(|(_, slot)| slot)).map(|&slot| slot as i32));
                        start
                    }
                };
                let visible = match s.mask {
                    None => w.prefix + w.region - w.queries + i + 1,
                    Some(_) => table.len() - start,
                };
                let header = SLOT_TABLE_HEADER * (s.row + i);
                table[header] = visible as i32;
                table[header + 1] = start as i32;
                table[header + 2] = region[w.region - w.queries + i] as i32;
                max_visible = max_visible.max(visible);
            }
        }
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        SlotTable { id, rows, table, max_visible }
    }

    /// Row `r`'s visible slots and its own.
    pub fn row(&self, r: usize) -> (&[i32], usize) {
        let h = &self.table[SLOT_TABLE_HEADER * r..][..SLOT_TABLE_HEADER];
        (&self.table[h[1] as usize..][..h[0] as usize], h[2] as usize)
    }
}

/// DeepSeek-V3's `noaux_tc` routing, as `Backend::moe_route` applies it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Routing {
    pub experts: usize,
    pub per_token: usize,
    pub groups: usize,
    pub topk_groups: usize,
    pub norm_topk_prob: bool,
    pub routed_scaling_factor: f32,
}

/// One rank's routed experts of a layer, stacked: `gate_up` `[count · 2 · inner, hidden]`
/// (each expert's gate rows, then its up rows) and `down` `[count · hidden, inner]`; they
/// are experts `first .. first + count` of the router's numbering.
pub struct Experts<'a, B: Backend + ?Sized> {
    pub gate_up: &'a B::Weight,
    pub down: &'a B::Weight,
    pub first: usize,
    pub count: usize,
    pub inner: usize,
    /// Set when the two weights hold the checkpoint's quantized bytes
    /// (`Backend::keeps_quantized`): their scales and format.
    pub quantized: Option<ExpertScales<'a, B>>,
}

/// How a weight kept as the checkpoint stores it holds its values: stacked routed experts
/// (`Experts::quantized`) and dense linears (`Backend::load_stored`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredFormat {
    /// FP8 e4m3, one f32 scale per `block` (the widths are multiples of the block).
    Fp8 { block: [usize; 2] },
    /// compressed-tensors pack-quantized INT4 (`model::quantized::Int4Linear`): two values a
    /// byte, one scale per `group` of a row, each value rounded to `scale_dtype`.
    Int4 { group: usize, scale_dtype: safetensors::tensor::Dtype },
}

impl StoredFormat {
    /// The dtype the bytes go to a backend's `load_weight` as.
    pub fn dtype(&self) -> safetensors::tensor::Dtype {
        match self {
            StoredFormat::Fp8 { .. } => safetensors::tensor::Dtype::F8_E4M3,
            StoredFormat::Int4 { .. } => safetensors::tensor::Dtype::U8,
        }
    }

    /// Bytes of a row of `cols` values.
    pub fn row_bytes(&self, cols: usize) -> usize {
        match self {
            StoredFormat::Fp8 { .. } => cols,
            StoredFormat::Int4 { .. } => cols.div_ceil(2),
        }
    }

    /// Scales along a row of `cols` values (the widths are whole blocks or groups).
    pub fn row_scales(&self, cols: usize) -> usize {
        match self {
            StoredFormat::Fp8 { block: [_, bc] } => cols / bc,
            StoredFormat::Int4 { group, .. } => cols / group,
        }
    }

    /// The `[rows, cols]` values of `bytes` under `scales` (one per block or group, the grid
    /// row-major), in f32 as the checkpoint readers of `model::quantized` give them.
    pub fn dequantize(&self, bytes: &[u8], scales: &[f32], [rows, cols]: [usize; 2]) -> Vec<f32> {
        match *self {
            StoredFormat::Fp8 { block: [br, bc] } => {
                let grid_cols = cols.div_ceil(bc);
                let mut out = Vec::with_capacity(rows * cols);
                for (r, row) in bytes.chunks_exact(cols).take(rows).enumerate() {
                    let row_scales = &scales[(r / br) * grid_cols..][..grid_cols];
                    out.extend(row.iter().enumerate().map(|(c, &b)| e4m3_to_f32(b).unwrap_or(f32::NAN) * row_scales[c / bc]));
                }
                out
            }
            StoredFormat::Int4 { group, scale_dtype } => {
                Int4Linear { packed: bytes, scales: scales.to_vec(), group, scale_dtype, shape: [rows, cols] }.dequantized()
            }
        }
    }
}

/// An FP8 weight's block scales spread to one grid row per weight row (blocks of `[1, bc]`),
/// so that its rows can be picked and re-laid freely, each keeping its scales.
pub fn fp8_row_scales(scales: &[f32], rows: usize, [br, bc]: [usize; 2], cols: usize) -> Vec<f32> {
    let grid_cols = cols.div_ceil(bc);
    (0..rows).flat_map(|r| scales[(r / br) * grid_cols..][..grid_cols].iter().copied()).collect()
}

/// The dequantization scales of stacked quantized experts, the grids stacked as the rows are.
pub struct ExpertScales<'a, B: Backend + ?Sized> {
    pub gate_up: &'a B::Tensor,
    pub down: &'a B::Tensor,
    pub format: StoredFormat,
}

/// `Backend::moe_experts`' scratch for `rows · per_token` (token, expert) pairs: each pair's
/// activation (`[pairs, inner]`) and output (`[pairs, hidden]`), and room for a backend's
/// grouping of the pairs by expert.
pub struct MoeScratch<B: Backend + ?Sized> {
    pub act: B::Tensor,
    pub out: B::Tensor,
    pub plan: B::Ids,
}

impl<B: Backend + ?Sized> MoeScratch<B> {
    pub fn new(b: &B, pairs: usize, inner: usize, hidden: usize, experts: usize) -> Result<Self, super::BackendError> {
        Ok(MoeScratch { act: b.tensor(pairs, inner)?, out: b.tensor(pairs, hidden)?, plan: b.ids(moe_plan_len(pairs, experts))? })
    }
}

/// Ids a grouping of `pairs` pairs over `experts` experts takes: the active experts'
/// count, each active expert and its run's start and length, then the pairs in expert order.
pub fn moe_plan_len(pairs: usize, experts: usize) -> usize {
    1 + 3 * experts.min(pairs) + pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_rows_share_a_list_and_masked_rows_have_their_own() {
        // A prefill of 2 at slots [7, 3] after nothing, then a tree of 3 over prefix [7, 3]
        // at slots [9, 4, 5] where node 2 sees node 0 but not node 1.
        let prefill = SeqSlots { row: 0, slots: &[7, 3], window: AttnWindow { prefix: 0, region: 2, queries: 2 }, mask: None };
        let mask = [1, 0, 0, 1, 1, 0, 1, 0, 1];
        let tree = SeqSlots { row: 2, slots: &[7, 3, 9, 4, 5], window: AttnWindow { prefix: 2, region: 3, queries: 3 }, mask: Some(&mask) };
        let t = SlotTable::new(&[prefill, tree], 5);
        assert_eq!(t.row(0), (&[7][..], 7));
        assert_eq!(t.row(1), (&[7, 3][..], 3));
        assert_eq!(t.row(2), (&[7, 3, 9][..], 9));
        assert_eq!(t.row(3), (&[7, 3, 9, 4][..], 4));
        assert_eq!(t.row(4), (&[7, 3, 9, 5][..], 5));
        assert_eq!(t.max_visible, 4);
    }

    #[test]
    fn a_draft_level_sees_the_levels_before_it() {
        // Region of 3 (two earlier draft tokens and this level's one), causal.
        let s = SeqSlots { row: 0, slots: &[0, 1, 2, 3], window: AttnWindow { prefix: 1, region: 3, queries: 1 }, mask: None };
        let t = SlotTable::new(&[s], 1);
        assert_eq!(t.row(0), (&[0, 1, 2, 3][..], 3));
    }

    /// A row of DeepSeek-V3's hidden width as each format stores it: FP8 a byte a value and a
    /// scale a 128-wide block, INT4 two values a byte and a scale a group of 32.
    #[test]
    fn stored_rows_count_their_bytes_and_scales() {
        let fp8 = StoredFormat::Fp8 { block: [128, 128] };
        let int4 = StoredFormat::Int4 { group: 32, scale_dtype: safetensors::tensor::Dtype::BF16 };
        assert_eq!((fp8.row_bytes(7168), fp8.row_scales(7168), fp8.dtype()), (7168, 56, safetensors::tensor::Dtype::F8_E4M3));
        assert_eq!((int4.row_bytes(7168), int4.row_scales(7168), int4.dtype()), (3584, 224, safetensors::tensor::Dtype::U8));
    }
}
