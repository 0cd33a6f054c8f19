//! Which step sizes get CUDA graphs: `--cuda-graph-max-bs` and SGLang's list of batch
//! sizes below it.

/// `--cuda-graph-max-bs` when the launch does not set it.
pub const DEFAULT_MAX_BS: u32 = 8;

/// The batch sizes captured for `--cuda-graph-max-bs max`: 1, 2, 4, 8, then steps of 8
/// (SGLang's list, cut at max).
pub fn capture_sizes(max: u32) -> Vec<u32> {
    let mut v: Vec<u32> = [1, 2, 4].into_iter().filter(|&b| b <= max).collect();
    v.extend((1..).map(|i| 8 * i).take_while(|&b| b <= max));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_sizes_follow_sglang_and_stop_at_max() {
        assert_eq!(capture_sizes(1), vec![1]);
        assert_eq!(capture_sizes(8), vec![1, 2, 4, 8]);
        assert_eq!(capture_sizes(20), vec![1, 2, 4, 8, 16]);
        assert_eq!(capture_sizes(24), vec![1, 2, 4, 8, 16, 24]);
    }
}
