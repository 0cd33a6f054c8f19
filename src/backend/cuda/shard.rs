//! Tensor-parallel sharding at load: which part of a checkpoint tensor a rank keeps.
//! Column-parallel weights (`[out, in]` split by rows: q/k/v, gate, up, lm_head) keep a
//! contiguous block of rows; row-parallel weights (split by columns: o_proj, down_proj)
//! keep a block of every row, and the model all-reduces their outputs.

use half::bf16;

use crate::backend::{BackendError, Shard};
use crate::model::checkpoint::TensorView;

/// This rank's place in its tensor-parallel group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankInfo {
    pub rank: usize,
    pub world: usize,
}

impl RankInfo {
    pub fn single() -> RankInfo {
        RankInfo { rank: 0, world: 1 }
    }
}

/// When this rank's part of a bf16 tensor is one contiguous run of the file's bytes (no
/// split, a column split, a vector), that byte range and the shape kept: the upload can
/// then read the memory-mapped file directly, with no host copy.
pub fn contiguous_bf16(view: &TensorView<'_>, shard: Shard, rank: RankInfo) -> Option<(std::ops::Range<usize>, Vec<usize>)> {
    if view.dtype != safetensors::tensor::Dtype::BF16 || view.data.len() != view.numel() * 2 {
        return None;
    }
    let whole = (0..view.data.len(), view.shape.to_vec());
    match (shard, view.shape) {
        _ if rank.world == 1 => Some(whole),
        (Shard::Replicated, _) | (Shard::Row, [_]) => Some(whole),
        (Shard::Column, [rows, cols @ ..]) if rows % rank.world == 0 => {
            let part = rows / rank.world;
            let row_bytes = cols.iter().product::<usize>() * 2;
            let mut shape = view.shape.to_vec();
            shape[0] = part;
            Some((rank.rank * part * row_bytes..(rank.rank + 1) * part * row_bytes, shape))
        }
        _ => None,
    }
}

/// The bf16 values and shape this rank keeps of `view`.
pub fn shard_weight(view: &TensorView<'_>, shard: Shard, rank: RankInfo) -> Result<(Vec<bf16>, Vec<usize>), BackendError> {
    shard_values(view.to_bf16()?, view, shard, rank)
}

/// The part of `data` (all of `view`'s values, row-major, in any element type) that this
/// rank keeps, and its shape.
pub fn shard_values<T: Copy>(
    data: Vec<T>,
    view: &TensorView<'_>,
    shard: Shard,
    rank: RankInfo,
) -> Result<(Vec<T>, Vec<usize>), BackendError> {
    let shape = view.shape.to_vec();
    if rank.world == 1 || shard == Shard::Replicated {
        return Ok((data, shape));
    }
    let split = |dim: usize, what: &str| -> Result<usize, BackendError> {
        if dim % rank.world != 0 {
            return Err(BackendError::Device(format!(
                "{} in {}: {dim} {what} do not split evenly over --tp-size {}",
                view.name,
                view.file.display(),
                rank.world
            )));
        }
        Ok(dim / rank.world)
    };
    match (shard, shape.as_slice()) {
        (Shard::Column, [len]) => {
            let part = split(*len, "entries")?;
            Ok((data[rank.rank * part..][..part].to_vec(), vec![part]))
        }
        (Shard::Column, [rows, cols]) => {
            let part = split(*rows, "output rows")?;
            Ok((data[rank.rank * part * cols..][..part * cols].to_vec(), vec![part, *cols]))
        }
        // A 1-D weight of a row-parallel layer (a bias) is added once, after the reduce.
        (Shard::Row, [_]) => Ok((data, shape)),
        (Shard::Row, [rows, cols]) => {
            let part = split(*cols, "input columns")?;
            let kept = data.chunks_exact(*cols).flat_map(|row| row[rank.rank * part..][..part].iter().copied()).collect();
            Ok((kept, vec![*rows, part]))
        }
        (_, other) => {
            Err(BackendError::Device(format!("{} in {}: cannot shard a tensor of shape {other:?}", view.name, view.file.display())))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use safetensors::tensor::Dtype;

    fn bf16_bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| bf16::from_f32(*v).to_le_bytes()).collect()
    }

    fn view<'a>(shape: &'a [usize], data: &'a [u8]) -> TensorView<'a> {
        TensorView { name: "model.layers.0.w", file: Path::new("model.safetensors"), dtype: Dtype::BF16, shape, data }
    }

    fn values(v: &[bf16]) -> Vec<f32> {
        v.iter().map(|x| x.to_f32()).collect()
    }

    #[test]
    fn column_and_row_shards_partition_a_matrix() {
        // [4, 6]: element (r, c) = 10 r + c.
        let m: Vec<f32> = (0..4).flat_map(|r| (0..6).map(move |c| (10 * r + c) as f32)).collect();
        let bytes = bf16_bytes(&m);
        let v = view(&[4, 6], &bytes);
        let r1 = RankInfo { rank: 1, world: 2 };
        let (col, shape) = shard_weight(&v, Shard::Column, r1).unwrap();
        assert_eq!(shape, vec![2, 6]);
        assert_eq!(values(&col), (20..26).chain(30..36).map(|x| x as f32).collect::<Vec<_>>());
        let (row, shape) = shard_weight(&v, Shard::Row, r1).unwrap();
        assert_eq!(shape, vec![4, 3]);
        assert_eq!(values(&row), vec![3., 4., 5., 13., 14., 15., 23., 24., 25., 33., 34., 35.]);
        let (all, shape) = shard_weight(&v, Shard::Replicated, r1).unwrap();
        assert_eq!((values(&all), shape), (m, vec![4, 6]));
    }

    #[test]
    fn contiguous_parts_are_byte_ranges_of_the_file() {
        let m: Vec<f32> = (0..24).map(|x| x as f32).collect();
        let bytes = bf16_bytes(&m);
        let v = view(&[4, 6], &bytes);
        let r1 = RankInfo { rank: 1, world: 2 };
        let (range, shape) = contiguous_bf16(&v, Shard::Column, r1).unwrap();
        assert_eq!((range.clone(), shape), (24..48, vec![2, 6]));
        // The same values the copying path keeps.
        let direct: Vec<bf16> = bytes[range].chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]])).collect();
        assert_eq!(direct, shard_weight(&v, Shard::Column, r1).unwrap().0);
        assert_eq!(contiguous_bf16(&v, Shard::Row, r1), None);
        assert_eq!(contiguous_bf16(&v, Shard::Row, RankInfo::single()), Some((0..48, vec![4, 6])));
    }

    #[test]
    fn vectors_split_by_column_and_stay_whole_by_row() {
        let bytes = bf16_bytes(&[1., 2., 3., 4.]);
        let v = view(&[4], &bytes);
        let r0 = RankInfo { rank: 0, world: 2 };
        assert_eq!(values(&shard_weight(&v, Shard::Column, r0).unwrap().0), vec![1., 2.]);
        assert_eq!(values(&shard_weight(&v, Shard::Row, r0).unwrap().0), vec![1., 2., 3., 4.]);
    }

    #[test]
    fn an_uneven_split_names_the_tensor_and_the_tp_size() {
        let bytes = bf16_bytes(&[0.; 6]);
        let v = view(&[3, 2], &bytes);
        let err = shard_weight(&v, Shard::Column, RankInfo { rank: 0, world: 2 }).unwrap_err().to_string();
        assert_eq!(err, "device error: model.layers.0.w in model.safetensors: 3 output rows do not split evenly over --tp-size 2");
    }
}
