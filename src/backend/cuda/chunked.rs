//! How argmax, softmax and top-k cut a long row (a vocabulary) into chunks: one block per
//! chunk reads it, then the chunks' results are merged in order (kernels/sampling.cu). One
//! block reading a 150K-entry row took about 20 µs per pass; a draft step ran three.

/// Entries a chunk should hold at least: below this, a chunk's block is mostly start-up.
const MIN_CHUNK: usize = 2048;
/// The most chunks a row is cut into.
pub const MAX_CHUNKS: usize = 64;
/// Top-k of more than this many keeps the row in one chunk (one block finds all k).
const MAX_CHUNKED_K: usize = 16;
/// Candidates a row's chunks hand to the merge at most: `MAX_CHUNKS * MAX_CHUNKED_K`, or
/// the `k` of a one-chunk top-k.
pub const MAX_CANDIDATES: usize = MAX_CHUNKS * MAX_CHUNKED_K;
/// Rows per pair of launches (the scratch holds this many rows' candidates).
pub const ROW_GROUP: usize = 64;

/// Chunks for a row of `cols` entries when each chunk keeps its best `k`.
pub fn chunk_count(cols: usize, k: usize) -> usize {
    if k > MAX_CHUNKED_K {
        return 1;
    }
    (cols / MIN_CHUNK).clamp(1, MAX_CHUNKS)
}

/// Row groups `[start, start + rows)` covering `n` rows.
pub fn row_groups(n: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n).step_by(ROW_GROUP).map(move |start| (start, ROW_GROUP.min(n - start)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_rows_take_every_chunk_and_short_rows_one() {
        assert_eq!(chunk_count(151_936, 1), 64);
        assert_eq!(chunk_count(151_936, 16), 64);
        assert_eq!(chunk_count(50_000, 8), 24);
        assert_eq!(chunk_count(4_095, 1), 1);
        assert_eq!(chunk_count(151_936, 17), 1);
        // The candidates of any chunked top-k fit the merge's scratch.
        assert!(chunk_count(usize::MAX, MAX_CHUNKED_K) * MAX_CHUNKED_K <= MAX_CANDIDATES);
    }

    #[test]
    fn row_groups_cover_every_row_once() {
        assert_eq!(row_groups(0).count(), 0);
        assert_eq!(row_groups(5).collect::<Vec<_>>(), vec![(0, 5)]);
        assert_eq!(row_groups(130).collect::<Vec<_>>(), vec![(0, 64), (64, 64), (128, 2)]);
    }
}
