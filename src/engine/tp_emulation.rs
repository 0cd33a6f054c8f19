//! Tensor parallelism on the CPU, for tests: `RankCpu` is the CPU reference for one rank of a
//! group. It keeps only its shard of every weight (the production sharding, `shard_values`)
//! and sums `all_reduce` over the group's threads in rank order, so the engine's rank
//! threads (`ranks::RankGroup`), its per-rank shapes (`tp`) and the model code's column/row
//! plan run for real without GPUs; only NCCL and the CUDA kernels are left to the GPU run.

use std::sync::{Arc, Barrier, Mutex};

use crate::backend::cpu::{CpuBackend, CpuIds, CpuTensor, CpuWeight};
use crate::backend::cuda::shard::{shard_values, RankInfo};
use crate::backend::latent::{Experts, MlaGeometry, MoeScratch, Routing, SlotTable};
use crate::backend::{AttnGeometry, AttnWindow, Backend, BackendError, KvDtype, Mask, RopeTable, Shard};
use crate::model::checkpoint::TensorView;

/// The group's meeting point for `all_reduce`.
pub struct CpuReducer {
    parts: Mutex<Vec<Vec<f32>>>,
    barrier: Barrier,
}

impl CpuReducer {
    pub fn new(world: usize) -> Arc<CpuReducer> {
        Arc::new(CpuReducer { parts: Mutex::new(vec![Vec::new(); world]), barrier: Barrier::new(world) })
    }
}

pub struct RankCpu {
    pub rank: RankInfo,
    reducer: Arc<CpuReducer>,
    /// Every weight's shard, in load order: the plan the model code asked for.
    pub loaded: Mutex<Vec<(String, Shard, Vec<usize>)>>,
}

/// One backend per rank of a `world`-sized group.
pub fn group(world: usize) -> Vec<RankCpu> {
    let reducer = CpuReducer::new(world);
    (0..world).map(|rank| RankCpu { rank: RankInfo { rank, world }, reducer: reducer.clone(), loaded: Mutex::new(Vec::new()) }).collect()
}

fn mask(m: Mask<'_, RankCpu>) -> Mask<'_, CpuBackend> {
    match m {
        Mask::Causal => Mask::Causal,
        Mask::Explicit(ids) => Mask::Explicit(ids),
    }
}

impl Backend for RankCpu {
    type Tensor = CpuTensor;
    type Weight = CpuWeight;
    type Ids = CpuIds;

    fn name(&self) -> &'static str {
        "cpu-rank"
    }

    fn tp_world(&self) -> usize {
        self.rank.world
    }

    fn tp_rank(&self) -> usize {
        self.rank.rank
    }

    fn tensor(&self, rows: usize, cols: usize) -> Result<CpuTensor, BackendError> {
        CpuBackend.tensor(rows, cols)
    }
    fn tensor_from(&self, cols: usize, data: &[f32]) -> Result<CpuTensor, BackendError> {
        CpuBackend.tensor_from(cols, data)
    }
    fn kv_tensor(&self, rows: usize, cols: usize, dtype: KvDtype) -> Result<CpuTensor, BackendError> {
        CpuBackend.kv_tensor(rows, cols, dtype)
    }
    fn ids(&self, len: usize) -> Result<CpuIds, BackendError> {
        CpuBackend.ids(len)
    }
    fn load_weight(&self, view: &TensorView<'_>, shard: Shard) -> Result<CpuWeight, BackendError> {
        let (data, shape) = shard_values(view.to_f32()?, view, shard, self.rank)?;
        self.loaded.lock().unwrap().push((view.name.to_string(), shard, shape.clone()));
        Ok(CpuWeight { data, shape })
    }
    fn weight_shape<'w>(&self, w: &'w CpuWeight) -> &'w [usize] {
        &w.shape
    }
    fn weight_bytes(&self, w: &CpuWeight) -> u64 {
        CpuBackend.weight_bytes(w)
    }
    fn write_ids(&self, dst: &mut CpuIds, src: &[i32]) {
        CpuBackend.write_ids(dst, src)
    }
    fn read_ids(&self, src: &CpuIds, len: usize) -> Result<Vec<i32>, BackendError> {
        CpuBackend.read_ids(src, len)
    }
    fn read_rows(&self, src: &CpuTensor, start: usize, n: usize) -> Result<Vec<f32>, BackendError> {
        CpuBackend.read_rows(src, start, n)
    }
    fn read_elements(&self, src: &CpuTensor, coords: &[(usize, usize)]) -> Result<Vec<f32>, BackendError> {
        CpuBackend.read_elements(src, coords)
    }
    fn sync(&self) -> Result<(), BackendError> {
        Ok(())
    }
    fn embed(&self, table: &CpuWeight, ids: &CpuIds, n: usize, out: &mut CpuTensor) {
        CpuBackend.embed(table, ids, n, out)
    }
    fn matmul(&self, x: &CpuTensor, w: &CpuWeight, bias: Option<&CpuWeight>, n: usize, out: &mut CpuTensor) {
        CpuBackend.matmul(x, w, bias, n, out)
    }
    fn rms_norm(&self, x: &CpuTensor, w: &CpuWeight, eps: f32, n: usize, out: &mut CpuTensor) {
        CpuBackend.rms_norm(x, w, eps, n, out)
    }
    fn head_rms_norm(&self, x: &mut CpuTensor, w: &CpuWeight, eps: f32, n: usize) {
        CpuBackend.head_rms_norm(x, w, eps, n)
    }
    fn rope(&self, x: &mut CpuTensor, table: &RopeTable<Self>, positions: &CpuIds, n: usize) {
        // The table's type names its backend; the CPU's is the same data.
        let t = RopeTable::<CpuBackend> {
            cos: table.cos.clone(),
            sin: table.sin.clone(),
            head_dim: table.head_dim,
            style: table.style,
            max_positions: table.max_positions,
        };
        CpuBackend.rope(x, &t, positions, n)
    }
    fn attention(
        &self,
        q: &CpuTensor,
        k: &CpuTensor,
        v: &CpuTensor,
        g: &AttnGeometry,
        w: AttnWindow,
        m: Mask<'_, Self>,
        out: &mut CpuTensor,
    ) {
        CpuBackend.attention(q, k, v, g, w, mask(m), out)
    }
    fn silu_mul(&self, gate: &CpuTensor, up: &CpuTensor, n: usize, out: &mut CpuTensor) {
        CpuBackend.silu_mul(gate, up, n, out)
    }
    fn add(&self, dst: &mut CpuTensor, src: &CpuTensor, n: usize) {
        CpuBackend.add(dst, src, n)
    }
    fn all_reduce(&self, x: &mut CpuTensor, n: usize) {
        let len = n * x.cols;
        let r = &self.reducer;
        r.parts.lock().unwrap()[self.rank.rank] = x.data[..len].to_vec();
        r.barrier.wait();
        {
            let parts = r.parts.lock().unwrap();
            for (i, v) in x.data[..len].iter_mut().enumerate() {
                *v = parts.iter().map(|p| p[i]).sum();
            }
        }
        // Nobody writes the next round's part before every rank has read this one.
        r.barrier.wait();
    }
    fn head_matmul(&self, x: &CpuTensor, w: &CpuWeight, heads: usize, n: usize, out: &mut CpuTensor) {
        CpuBackend.head_matmul(x, w, heads, n, out)
    }
    fn mla_attention(
        &self,
        q_lat: &CpuTensor,
        q_pe: &CpuTensor,
        new: (&CpuTensor, &CpuTensor),
        cache: (&mut CpuTensor, &mut CpuTensor),
        geometry: &MlaGeometry,
        table: &SlotTable,
        out: &mut CpuTensor,
    ) {
        CpuBackend.mla_attention(q_lat, q_pe, new, cache, geometry, table, out)
    }
    fn moe_route(&self, logits: &CpuTensor, bias: &CpuTensor, routing: &Routing, n: usize, experts: &mut CpuIds, weights: &mut CpuTensor) {
        CpuBackend.moe_route(logits, bias, routing, n, experts, weights)
    }
    fn moe_experts(
        &self,
        x: &CpuTensor,
        experts: &CpuIds,
        weights: &CpuTensor,
        per_token: usize,
        w: &Experts<'_, Self>,
        n: usize,
        _scratch: &mut MoeScratch<Self>,
        out: &mut CpuTensor,
    ) {
        crate::backend::cpu::latent::moe_experts(x, (experts, weights, per_token), w, n, out)
    }
    fn copy_rows(&self, src: &CpuTensor, src_start: usize, dst: &mut CpuTensor, dst_start: usize, n: usize) {
        CpuBackend.copy_rows(src, src_start, dst, dst_start, n)
    }
    fn copy_cols(&self, src: &CpuTensor, n: usize, dst: &mut CpuTensor, dst_col: usize) {
        CpuBackend.copy_cols(src, n, dst, dst_col)
    }
    fn gather_rows(&self, src: &CpuTensor, rows: &[usize], dst: &mut CpuTensor) {
        CpuBackend.gather_rows(src, rows, dst)
    }
    fn move_rows(&self, t: &mut CpuTensor, src_rows: &[usize], dst_start: usize) {
        CpuBackend.move_rows(t, src_rows, dst_start)
    }
    fn argmax(&self, x: &CpuTensor, n: usize, out: &mut CpuIds) {
        CpuBackend.argmax(x, n, out)
    }
    fn softmax(&self, x: &mut CpuTensor, n: usize, temperature: f32) {
        CpuBackend.softmax(x, n, temperature)
    }
    fn topk(&self, x: &CpuTensor, n: usize, k: usize, values: &mut CpuTensor, indices: &mut CpuIds) {
        CpuBackend.topk(x, n, k, values, indices)
    }
    fn pick_ids(&self, src: &CpuIds, stride: usize, map: Option<&CpuIds>, n: usize, dst: &mut CpuIds, at: usize) {
        CpuBackend.pick_ids(src, stride, map, n, dst, at)
    }
    fn gather_ids(&self, src: &CpuIds, from: &[i32], dst: &mut CpuIds) {
        CpuBackend.gather_ids(src, from, dst)
    }
    fn sample(&self, probs: &CpuTensor, row: usize, excluded: &[u32], coin: f32) -> Result<u32, BackendError> {
        CpuBackend.sample(probs, row, excluded, coin)
    }
}
