//! Parallel loops that stay on the calling thread when the work is too small to pay for
//! rayon's dispatch (tiny models and single-token steps are dominated by it otherwise).

use rayon::prelude::*;

/// Below this many values a loop runs on one thread.
pub const PARALLEL_MIN: usize = 1 << 14;

/// `f(i, chunk_i)` over `chunk`-sized pieces of `data`.
pub fn chunks<F>(data: &mut [f32], chunk: usize, work: usize, f: F)
where
    F: Fn(usize, &mut [f32]) + Sync + Send,
{
    if work < PARALLEL_MIN {
        data.chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c));
    } else {
        data.par_chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c));
    }
}
