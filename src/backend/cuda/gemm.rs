//! `out = x · Wᵀ (+ bias)` with f32 activations and bf16 weights in the `[out, in]` layout.
//!
//! Two ways to do it: the skinny `gemv_f32` kernel for up to 8 rows (decode and verify
//! steps, where the cost is reading W once) and cuBLAS `cublasGemmEx` (bf16 inputs, f32
//! accumulation and output, after converting x to bf16) for more. The choice depends only
//! on the row count, and the skinny kernel computes each row the same way whatever the
//! count, so a verify step's rows equal the decode steps they stand for, bit for bit
//! (speculative greedy output then equals target-only output). `cuda-check` times both
//! paths on the 8B shapes.

use std::sync::Mutex;

use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType_t};
use half::bf16;

use super::gpu::{stride_grid, Arg, DeviceBuf, Gpu, NULL};

/// Rows up to which the skinny kernel is a candidate.
pub const GEMV_MAX_ROWS: usize = 8;
const GEMV_WARPS: u32 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulPath {
    Gemv,
    Cublas,
}

/// One matmul's operands, as raw device addresses.
#[derive(Clone, Copy, Debug)]
pub struct MatmulArgs {
    pub x: u64,
    pub w: u64,
    pub bias: Option<u64>,
    pub out: u64,
    pub rows: usize,
    pub n_out: usize,
    pub k_in: usize,
}

impl MatmulArgs {
    fn gemv_ok(&self) -> bool {
        self.rows <= GEMV_MAX_ROWS && self.k_in % 8 == 0 && self.x % 16 == 0 && self.w % 16 == 0
    }
}

#[derive(Default)]
pub struct Matmuls {
    /// The bf16 copy of x that cuBLAS reads; grown on demand.
    scratch: Mutex<Option<DeviceBuf<bf16>>>,
}

impl Matmuls {
    pub fn run(&self, gpu: &Gpu, a: MatmulArgs) {
        if a.rows == 0 {
            return;
        }
        let path = if a.gemv_ok() { MatmulPath::Gemv } else { MatmulPath::Cublas };
        self.run_path(gpu, a, path);
    }

    /// Run one path regardless of the rule (the self-test times both).
    pub fn run_path(&self, gpu: &Gpu, a: MatmulArgs, path: MatmulPath) {
        match path {
            MatmulPath::Gemv => gemv(gpu, a),
            MatmulPath::Cublas => self.cublas(gpu, a),
        }
    }

    fn cublas(&self, gpu: &Gpu, a: MatmulArgs) {
        let len = a.rows * a.k_in;
        let mut scratch = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        if scratch.as_ref().is_none_or(|s| s.len() < len) {
            *scratch = None; // free the old one first
            match gpu.alloc::<bf16>(len.next_power_of_two(), "matmul input (bf16)") {
                Ok(b) => *scratch = Some(b),
                Err(e) => return gpu.record(|| e.to_string()),
            }
        }
        let xb = scratch.as_ref().expect("allocated above").ptr();
        gpu.bind();
        gpu.launch("f32_to_bf16", stride_grid(len), 256, 0, &[Arg::Ptr(a.x), Arg::Ptr(xb), Arg::I64(len as i64)]);
        let (alpha, beta) = (1.0f32, 0.0f32);
        // Row-major out[rows, N] = x[rows, K] · W[N, K]ᵀ is, in cuBLAS's column-major terms,
        // out'[N, rows] = W'ᵀ · x' with W' = [K, N] (ld K) and x' = [K, rows] (ld K).
        // SAFETY: the addresses are live buffers of at least these extents.
        let status = unsafe {
            cudarc::cublas::result::gemm_ex(
                *gpu.blas.handle(),
                cublasOperation_t::CUBLAS_OP_T,
                cublasOperation_t::CUBLAS_OP_N,
                a.n_out as i32,
                a.rows as i32,
                a.k_in as i32,
                (&alpha) as *const f32 as *const _,
                a.w as *const _,
                cudaDataType_t::CUDA_R_16BF,
                a.k_in as i32,
                xb as *const _,
                cudaDataType_t::CUDA_R_16BF,
                a.k_in as i32,
                (&beta) as *const f32 as *const _,
                a.out as *mut _,
                cudaDataType_t::CUDA_R_32F,
                a.n_out as i32,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        if let Err(e) = status {
            gpu.record(|| format!("cublasGemmEx [{}x{}]·[{}x{}]ᵀ: {e:?}", a.rows, a.k_in, a.n_out, a.k_in));
        }
        if let Some(bias) = a.bias {
            let len = a.rows * a.n_out;
            gpu.launch(
                "add_bias_f32",
                stride_grid(len),
                256,
                0,
                &[Arg::Ptr(a.out), Arg::Ptr(bias), Arg::I32(a.n_out as i32), Arg::I64(len as i64)],
            );
        }
    }
}

/// Output rows from which each warp takes four rows of W (enough warps remain to keep the
/// memory system busy: 4096 rows give 1024 warps).
const WIDE_N: usize = 4096;

fn gemv(gpu: &Gpu, a: MatmulArgs) {
    let (kernel, rows_per_warp) = if a.n_out >= WIDE_N { ("gemv4_f32", 4) } else { ("gemv_f32", 1) };
    let blocks = a.n_out.div_ceil(GEMV_WARPS as usize * rows_per_warp) as u32;
    gpu.launch(
        kernel,
        (blocks, 1),
        GEMV_WARPS * 32,
        0,
        &[
            Arg::I32(a.rows as i32),
            Arg::Ptr(a.x),
            Arg::Ptr(a.w),
            Arg::I32(a.n_out as i32),
            Arg::I32(a.k_in as i32),
            a.bias.map_or(NULL, Arg::Ptr),
            Arg::Ptr(a.out),
        ],
    );
}
