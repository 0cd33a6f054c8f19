//! The CPU backend's buffers: activations, weights and ids, all plain host vectors.

/// A row-major `[rows, cols]` f32 buffer. A bf16 KV cache (`KvDtype::Bf16`) is one too,
/// with every value written into it rounded to bf16 (`bf16` set): it then holds exactly
/// what a GPU's bf16 cache holds, widened.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuTensor {
    pub data: Vec<f32>,
    pub cols: usize,
    pub bf16: bool,
}

impl CpuTensor {
    pub fn rows(&self) -> usize {
        self.data.len().checked_div(self.cols).unwrap_or(0)
    }

    pub(super) fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..][..self.cols]
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct CpuWeight {
    pub data: Vec<f32>,
    pub shape: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CpuIds {
    pub data: Vec<i32>,
}
