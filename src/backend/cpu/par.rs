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

/// `f(i, a_i, b_i)` over matching `chunk`-sized pieces of two buffers.
pub fn chunks2<F>(a: &mut [f32], b: &mut [f32], chunk: usize, f: F)
where
    F: Fn(usize, &mut [f32], &mut [f32]) + Sync + Send,
{
    if a.len() < PARALLEL_MIN {
        a.chunks_mut(chunk).zip(b.chunks_mut(chunk)).enumerate().for_each(|(i, (x, y))| f(i, x, y));
    } else {
        a.par_chunks_mut(chunk).zip(b.par_chunks_mut(chunk)).enumerate().for_each(|(i, (x, y))| f(i, x, y));
    }
}
