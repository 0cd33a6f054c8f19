//! One GPU as the backend drives it: its context and stream, the loaded kernels, cuBLAS,
//! an account of the device memory it holds, and the first asynchronous error (ops only
//! enqueue work; errors surface at the next call that returns a `Result`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::cublas::CudaBlas;
use cudarc::driver::sys::{self, CUdevice_attribute, CUevent_flags, CUfunction_attribute};
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, ValidAsZeroBits};
use cudarc::nvrtc::Ptx;

use super::compile::CompiledModule;
use crate::backend::BackendError;
use crate::knobs::Knobs;

/// Bytes of device memory held through this backend, by what holds them.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    live: AtomicU64,
    peak: AtomicU64,
}

impl MemoryLedger {
    fn add(&self, bytes: u64) {
        let now = self.live.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    fn sub(&self, bytes: u64) {
        self.live.fetch_sub(bytes, Ordering::Relaxed);
    }

    pub fn live_bytes(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }

    pub fn peak_bytes(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

/// A device allocation counted in its GPU's ledger until dropped.
#[derive(Debug)]
pub struct DeviceBuf<T> {
    pub(crate) slice: CudaSlice<T>,
    ledger: Arc<MemoryLedger>,
}

impl<T> DeviceBuf<T> {
    /// The raw device address of element `offset`.
    pub fn ptr_at(&self, offset: usize) -> u64 {
        debug_assert!(offset <= self.slice.len());
        let (base, _sync) = self.slice.device_ptr(self.slice.stream());
        base + (offset * std::mem::size_of::<T>()) as u64
    }

    pub fn ptr(&self) -> u64 {
        self.ptr_at(0)
    }

    pub fn len(&self) -> usize {
        self.slice.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slice.len() == 0
    }
}

impl<T> Drop for DeviceBuf<T> {
    fn drop(&mut self) {
        self.ledger.sub(self.slice.num_bytes() as u64);
    }
}

/// A kernel argument. Device pointers travel as raw addresses: one stream per GPU and
/// event tracking off, so ordering is the stream's.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    Ptr(u64),
    I32(i32),
    I64(i64),
    F32(f32),
}

/// A null device pointer, for the optional pointer arguments of the kernels.
pub const NULL: Arg = Arg::Ptr(0);

/// The most arguments a kernel takes (the rope-fused skinny matmuls of kernels/gemv.cu
/// take 24).
const MAX_ARGS: usize = 32;

/// A loaded kernel, and whether `SPECDECK_SKIP_KERNELS` leaves its launches out (decided
/// once at load, not at every launch). Skipping is a profiling knob only, since the
/// outputs are then wrong: without Nsight Systems on the GPU machine, what a kernel family
/// costs inside a captured step is the step time it saves (`scripts/gpu/ablate.sh`).
struct Kernel {
    func: CudaFunction,
    skipped: bool,
    /// Whether the kernel may take the most dynamic shared memory the GPU allows a block
    /// (set at its first launch past the default 48 KiB).
    opted_in: AtomicBool,
}

/// Dynamic shared memory a launch may take without its kernel's own allowance.
const DEFAULT_DYNAMIC_SHARED: u32 = 48 << 10;

/// cuBLAS's workspace. Owned by us and set once, so cuBLAS never allocates while a CUDA
/// graph is being captured (32 MiB is what cuBLAS asks for on Hopper).
const CUBLAS_WORKSPACE_BYTES: usize = 32 << 20;

pub struct Gpu {
    pub ordinal: usize,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub blas: CudaBlas,
    kernels: OnceLock<HashMap<&'static str, Kernel>>,
    pub ledger: Arc<MemoryLedger>,
    /// Streaming multiprocessors, for grids sized to the whole GPU.
    pub sm_count: u32,
    /// The NVRTC target of this GPU (`sm_90`).
    pub arch: String,
    /// Kernels launch with programmatic dependent launch allowed (Hopper and later, unless
    /// `SPECDECK_PDL=0`): each may be scheduled while the one before drains, and waits for
    /// its writes itself (`pdl_wait` in kernels/common.cuh).
    pub pdl: bool,
    error: Mutex<Option<String>>,
    // Declared after `blas`, so the handle that points at it is destroyed first.
    _blas_workspace: DeviceBuf<u8>,
}

impl Gpu {
    /// Open GPU `ordinal` with the compiled kernels loaded.
    pub fn open(ordinal: usize, modules: &[CompiledModule]) -> Result<Gpu, BackendError> {
        let gpu = Gpu::open_bare(ordinal)?;
        gpu.load(modules)?;
        Ok(gpu)
    }

    /// Open GPU `ordinal`: context, a non-default stream (graph capture needs one), cuBLAS
    /// on that stream with its own workspace; kernels come later (`load`).
    pub fn open_bare(ordinal: usize) -> Result<Gpu, BackendError> {
        let dev = |e: cudarc::driver::DriverError| BackendError::Device(format!("GPU {ordinal}: {e}"));
        let ctx = CudaContext::new(ordinal).map_err(dev)?;
        // One stream per GPU orders everything; cudarc's per-allocation events would only add
        // work, and they break CUDA graph capture. Must precede every allocation.
        // SAFETY: all work of this context goes through the single stream created below.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(dev)?;
        let sm_count = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(dev)?.max(1) as u32;
        let major = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).map_err(dev)?;
        let minor = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).map_err(dev)?;
        let blas = CudaBlas::new(stream.clone()).map_err(|e| BackendError::Device(format!("GPU {ordinal}: cuBLAS: {e:?}")))?;
        let ledger: Arc<MemoryLedger> = Arc::default();
        let workspace = alloc_in(&stream, &ledger, ordinal, CUBLAS_WORKSPACE_BYTES, "cuBLAS workspace")?;
        // SAFETY: the workspace outlives the handle (field order) and is used by this
        // handle's stream only.
        let status =
            unsafe { cudarc::cublas::sys::cublasSetWorkspace_v2(*blas.handle(), workspace.ptr() as *mut _, CUBLAS_WORKSPACE_BYTES) };
        if status != cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(BackendError::Device(format!("GPU {ordinal}: cublasSetWorkspace: {status:?}")));
        }
        Ok(Gpu {
            ordinal,
            ctx,
            stream,
            blas,
            kernels: OnceLock::new(),
            ledger,
            sm_count,
            arch: format!("sm_{major}{minor}"),
            pdl: major >= 9 && Knobs::get().pdl,
            error: Mutex::new(None),
            _blas_workspace: workspace,
        })
    }

    /// Load the compiled kernels (the driver turns their PTX into machine code). Once per
    /// GPU; a later call changes nothing.
    pub fn load(&self, modules: &[CompiledModule]) -> Result<(), BackendError> {
        if self.kernels.get().is_some() {
            return Ok(());
        }
        let ordinal = self.ordinal;
        let skipped = &Knobs::get().skip_kernels;
        let mut kernels = HashMap::new();
        for m in modules {
            let module = self
                .ctx
                .load_module(Ptx::from_src(m.ptx.clone()))
                .map_err(|e| BackendError::Device(format!("GPU {ordinal}: loading {}: {e}", m.source.file)))?;
            for f in m.source.functions {
                let func = module
                    .load_function(f)
                    .map_err(|e| BackendError::Device(format!("GPU {ordinal}: kernel {f} in {}: {e}", m.source.file)))?;
                let skipped = skipped.iter().any(|prefix| f.starts_with(prefix.as_str()));
                kernels.insert(*f, Kernel { func, skipped, opted_in: AtomicBool::new(false) });
            }
        }
        let _ = self.kernels.set(kernels);
        Ok(())
    }

    /// Let `func` take as much dynamic shared memory as a block may have on this GPU.
    fn allow_shared(&self, func: &CudaFunction) -> Result<(), cudarc::driver::DriverError> {
        let most = self.ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
        let fixed = func.get_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?;
        func.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, most - fixed)
    }

    pub fn kernels_loaded(&self) -> bool {
        self.kernels.get().is_some()
    }

    /// A loaded kernel, for occupancy queries.
    pub fn function(&self, name: &str) -> Option<&CudaFunction> {
        self.kernels.get()?.get(name).map(|k| &k.func)
    }

    /// An event that records time. cudarc's default events are created with timing
    /// disabled, and `cuEventElapsedTime` on them fails with CUDA_ERROR_INVALID_HANDLE.
    pub fn timing_event(&self) -> Result<CudaEvent, BackendError> {
        self.ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| BackendError::Device(format!("GPU {}: timing event: {e}", self.ordinal)))
    }

    /// Median milliseconds of `reps` runs of `f` on this GPU's stream, after one warm-up
    /// run, timed with events around each run. Fails with any error the runs recorded.
    pub fn time_ms(&self, reps: usize, mut f: impl FnMut() -> Result<(), BackendError>) -> Result<f64, BackendError> {
        let mut failed = None;
        let ms = self.elapsed_ms(reps, || {
            if let Err(e) = f() {
                failed.get_or_insert(e);
            }
        })?;
        failed.map_or(Ok(()), Err)?;
        self.take_error()?;
        Ok(ms)
    }

    /// Milliseconds per run of `f` over `reps` runs issued back to back between two events
    /// (after one warm-up run): the host prepares a run while the GPU does the previous
    /// one, so this is the GPU's time per run once the host keeps up. Fails with any error
    /// the runs recorded.
    pub fn throughput_ms(&self, reps: usize, mut f: impl FnMut() -> Result<(), BackendError>) -> Result<f64, BackendError> {
        let dev = |e: cudarc::driver::DriverError| BackendError::Device(format!("GPU {}: timing: {e}", self.ordinal));
        f()?;
        let (start, end) = (self.timing_event()?, self.timing_event()?);
        start.record(&self.stream).map_err(dev)?;
        for _ in 0..reps.max(1) {
            f()?;
        }
        end.record(&self.stream).map_err(dev)?;
        let ms = start.elapsed_ms(&end).map_err(dev)? as f64 / reps.max(1) as f64;
        self.take_error()?;
        Ok(ms)
    }

    /// `time_ms` without looking at recorded errors (they stay for the next sync): for
    /// timing done in passing, such as choosing a kernel configuration.
    pub fn elapsed_ms(&self, reps: usize, mut f: impl FnMut()) -> Result<f64, BackendError> {
        let dev = |e: cudarc::driver::DriverError| BackendError::Device(format!("GPU {}: timing: {e}", self.ordinal));
        f();
        let (start, end) = (self.timing_event()?, self.timing_event()?);
        let mut samples = Vec::with_capacity(reps);
        for _ in 0..reps.max(1) {
            start.record(&self.stream).map_err(dev)?;
            f();
            end.record(&self.stream).map_err(dev)?;
            samples.push(start.elapsed_ms(&end).map_err(dev)? as f64);
        }
        samples.sort_by(f64::total_cmp);
        Ok(samples[samples.len() / 2])
    }

    /// Keep the first asynchronous error; later ones are usually its consequences.
    pub fn record(&self, what: impl FnOnce() -> String) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(what());
        }
    }

    /// The recorded error, if any (cleared), else the context's own deferred error.
    pub fn take_error(&self) -> Result<(), BackendError> {
        if let Some(e) = self.error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(BackendError::Device(format!("GPU {}: {e}", self.ordinal)));
        }
        self.ctx.check_err().map_err(|e| BackendError::Device(format!("GPU {}: {e}", self.ordinal)))
    }

    pub fn sync(&self) -> Result<(), BackendError> {
        if let Err(e) = self.stream.synchronize() {
            self.record(|| format!("synchronize: {e}"));
        }
        self.take_error()
    }

    /// (free, total) device memory, as the driver reports it.
    pub fn mem_info(&self) -> (u64, u64) {
        self.ctx.mem_get_info().map(|(f, t)| (f as u64, t as u64)).unwrap_or((0, 0))
    }

    /// A zeroed allocation, counted in the ledger; running out of memory names `what` and
    /// the free and total memory.
    pub fn alloc<T: DeviceRepr + ValidAsZeroBits>(&self, len: usize, what: &str) -> Result<DeviceBuf<T>, BackendError> {
        alloc_in(&self.stream, &self.ledger, self.ordinal, len, what)
    }

    /// A new buffer holding a copy of `src` (stream-ordered, like `upload`).
    pub fn alloc_from<T: DeviceRepr + ValidAsZeroBits>(&self, src: &[T], what: &str) -> Result<DeviceBuf<T>, BackendError> {
        let buf = self.alloc::<T>(src.len(), what)?;
        self.upload(src, buf.ptr());
        Ok(buf)
    }

    /// Make this GPU's context current on the calling thread (raw driver calls need it; a
    /// backend may be driven from a thread other than the one that opened it).
    pub fn bind(&self) {
        if let Err(e) = self.ctx.bind_to_thread() {
            self.record(|| format!("binding the context: {e}"));
        }
    }

    /// Copy host data to device address `dst` (stream-ordered; pageable sources are
    /// staged by the driver before this returns, so `src` may go away at once).
    pub fn upload<T>(&self, src: &[T], dst: u64) {
        if src.is_empty() {
            return;
        }
        self.bind();
        // SAFETY: callers pass the address of a live buffer with room for `src`.
        if let Err(e) = unsafe { cudarc::driver::result::memcpy_htod_async(dst, src, self.stream.cu_stream()) } {
            self.record(|| format!("upload of {} bytes: {e}", std::mem::size_of_val(src)));
        }
    }

    /// Read `len` elements starting at `offset`, waiting for the stream.
    pub fn download<T: Default + Clone>(&self, src: &DeviceBuf<T>, offset: usize, len: usize) -> Result<Vec<T>, BackendError> {
        assert!(offset + len <= src.len(), "download of [{offset}, {}) from {} elements", offset + len, src.len());
        let mut out = vec![T::default(); len];
        self.bind();
        if len > 0 {
            // SAFETY: the range was checked against the buffer above; `out` outlives the
            // copy because the stream is synchronised before returning.
            if let Err(e) = unsafe { cudarc::driver::result::memcpy_dtoh_async(&mut out, src.ptr_at(offset), self.stream.cu_stream()) } {
                self.record(|| format!("download of {len} elements: {e}"));
            }
        }
        self.sync()?;
        Ok(out)
    }

    /// Launch kernel `name`; a failure is recorded for the next sync (and `false` returned).
    pub fn launch(&self, name: &'static str, grid: (u32, u32), block: u32, shared_mem: u32, args: &[Arg]) -> bool {
        let Some(kernel) = self.kernels.get().and_then(|k| k.get(name)) else {
            self.record(|| format!("kernel {name} is not loaded"));
            return false;
        };
        if kernel.skipped {
            return true;
        }
        if shared_mem > DEFAULT_DYNAMIC_SHARED && !kernel.opted_in.load(Ordering::Relaxed) {
            // The tensor-core step attention keeps three K/V tiles in shared memory.
            if let Err(e) = self.allow_shared(&kernel.func) {
                self.record(|| format!("launch of {name}: shared memory past 48 KiB: {e}"));
                return false;
            }
            kernel.opted_in.store(true, Ordering::Relaxed);
        }
        if args.len() > MAX_ARGS {
            self.record(|| format!("launch of {name}: {} arguments exceed {MAX_ARGS}", args.len()));
            return false;
        }
        // Every argument sits in an 8-byte slot; the driver copies each parameter's own
        // size from the front of its slot (little-endian, as on every CUDA host). The slots
        // live on the stack: a step launches hundreds of kernels.
        let mut slots = [0u64; MAX_ARGS];
        for (slot, a) in slots.iter_mut().zip(args) {
            *slot = match *a {
                Arg::Ptr(p) => p,
                Arg::I32(v) => v as u32 as u64,
                Arg::I64(v) => v as u64,
                Arg::F32(v) => v.to_bits() as u64,
            };
        }
        let mut params = [std::ptr::null_mut::<std::ffi::c_void>(); MAX_ARGS];
        for (param, slot) in params.iter_mut().zip(slots.iter_mut()) {
            *param = slot as *mut u64 as *mut std::ffi::c_void;
        }
        // SAFETY: a zeroed launch attribute is a valid "no attribute" value; the union field
        // written is the one its id names.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: grid.0.max(1),
            gridDimY: grid.1.max(1),
            gridDimZ: 1,
            blockDimX: block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: shared_mem,
            hStream: self.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: u32::from(self.pdl),
        };
        self.bind();
        // SAFETY: every kernel's argument list is built by the op wrappers from live buffers
        // whose sizes the model code checked when it sized them, in the kernel's parameter
        // order and types (the sources' tests pin the names; the GPU checks pin the rest).
        let status = unsafe { sys::cuLaunchKernelEx(&config, kernel.func.cu_function(), params.as_mut_ptr(), std::ptr::null_mut()) };
        match status.result() {
            Ok(()) => true,
            Err(e) => {
                self.record(|| format!("launch of {name}: {e}"));
                false
            }
        }
    }
}

fn alloc_in<T: DeviceRepr + ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    ledger: &Arc<MemoryLedger>,
    ordinal: usize,
    len: usize,
    what: &str,
) -> Result<DeviceBuf<T>, BackendError> {
    let bytes = (len.max(1) * std::mem::size_of::<T>()) as u64;
    match stream.alloc_zeros::<T>(len.max(1)) {
        Ok(slice) => {
            ledger.add(slice.num_bytes() as u64);
            Ok(DeviceBuf { slice, ledger: ledger.clone() })
        }
        Err(e) => {
            let (free, total) = stream.context().mem_get_info().map(|(f, t)| (f as u64, t as u64)).unwrap_or((0, 0));
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            Err(if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                BackendError::OutOfMemory {
                    bytes,
                    what: format!(
                        "{what} on GPU {ordinal} ({:.2} GiB free of {:.2} GiB; {:.2} GiB held by specdeck)",
                        gib(free),
                        gib(total),
                        gib(ledger.live_bytes())
                    ),
                }
            } else {
                BackendError::Device(format!("GPU {ordinal}: allocating {bytes} bytes for {what}: {e}"))
            })
        }
    }
}

/// Threads for a one-block-per-row kernel over `cols` elements (8 per thread), a power of
/// two between 32 and 1024.
pub fn row_block(cols: usize) -> u32 {
    (cols.div_ceil(8)).next_power_of_two().clamp(32, 1024) as u32
}

/// Blocks of 256 threads for a grid-stride loop over `len` elements.
pub fn stride_grid(len: usize) -> (u32, u32) {
    (len.div_ceil(256).clamp(1, 8192) as u32, 1)
}

/// Hand the memory of freed buffers back to the driver on GPU `ordinal`, so NVML no longer
/// counts it. Buffers are freed stream-ordered into the device's default memory pool,
/// which keeps freed memory until a synchronisation: synchronise, then trim the pool.
pub fn release_pool_memory(ordinal: usize) -> Result<(), BackendError> {
    use cudarc::driver::sys;
    let fail = |what: &str, e: String| BackendError::Device(format!("GPU {ordinal}: {what}: {e}"));
    let ctx = CudaContext::new(ordinal).map_err(|e| fail("context", e.to_string()))?;
    ctx.synchronize().map_err(|e| fail("synchronize", e.to_string()))?;
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: plain out-parameter; the device handle comes from the live context.
    let status = unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) };
    if status != sys::CUresult::CUDA_SUCCESS {
        // Devices without memory pools free buffers synchronously: nothing is held back.
        return Ok(());
    }
    // SAFETY: `pool` is the device's default pool, valid while the context lives.
    let status = unsafe { sys::cuMemPoolTrimTo(pool, 0) };
    if status != sys::CUresult::CUDA_SUCCESS {
        return Err(fail("trimming the memory pool", format!("{status:?}")));
    }
    Ok(())
}
