//! llama.cpp's Q/K row permutation, undone.
//!
//! `convert_hf_to_gguf.py` stores a llama model's `q_proj`/`k_proj` rows so that each head's
//! two rotary halves are interleaved (ggml's rope pairs dims 2i and 2i+1), where HF's
//! rotate-half pairs dim i with i + head_dim/2. Per head, GGUF row `2j + s` holds HF row
//! `s * head_dim/2 + j`. qwen2 GGUFs are not permuted (ggml uses NEOX rope for them).

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{rows} rows cannot be split into {heads} heads of an even size")]
pub struct PermuteError {
    pub rows: usize,
    pub heads: usize,
}

/// Reorder the rows of a row-major `[rows, row_len]` matrix (or a bias, `row_len` 1) from
/// GGUF's interleaved order back to HF's half-split order.
pub fn unpermute_rows(data: &[f32], row_len: usize, heads: usize) -> Result<Vec<f32>, PermuteError> {
    let rows = data.len().checked_div(row_len).unwrap_or(0);
    if heads == 0 || rows % heads != 0 || (rows / heads) % 2 != 0 || rows * row_len != data.len() {
        return Err(PermuteError { rows, heads });
    }
    let head_dim = rows / heads;
    let half = head_dim / 2;
    let mut out = vec![0.0; data.len()];
    for (hf_row, dst) in out.chunks_exact_mut(row_len.max(1)).enumerate() {
        let (head, within) = (hf_row / head_dim, hf_row % head_dim);
        let (s, j) = (within / half, within % half);
        let gguf_row = head * head_dim + 2 * j + s;
        dst.copy_from_slice(&data[gguf_row * row_len..(gguf_row + 1) * row_len]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undoes_the_llama_permutation() {
        // 2 heads of head_dim 4, two columns; each row is labelled by its HF index r as
        // [r, 100 + r]. In GGUF order each head interleaves its halves: rows 0,2,1,3.
        let gguf = [0.0, 100.0, 2.0, 102.0, 1.0, 101.0, 3.0, 103.0, 4.0, 104.0, 6.0, 106.0, 5.0, 105.0, 7.0, 107.0];
        let hf: Vec<f32> = (0..8).flat_map(|r| [r as f32, 100.0 + r as f32]).collect();
        assert_eq!(unpermute_rows(&gguf, 2, 2).unwrap(), hf);
        // A bias is a matrix of one column.
        assert_eq!(unpermute_rows(&[0.0, 2.0, 1.0, 3.0], 1, 1).unwrap(), [0.0, 1.0, 2.0, 3.0]);
    }

    #[test]
    fn odd_head_dim_is_an_error() {
        let e = unpermute_rows(&[0.0; 6], 1, 2).unwrap_err();
        assert_eq!(e.to_string(), "6 rows cannot be split into 2 heads of an even size");
    }
}
