//! What a backend's kernel compilation reports (`Backend::kernel_compile`): progress as it
//! goes, a summary when done, a typed error when not. The engine turns them into the
//! launch's `kernel-compile` phase events and findings (`engine::compile`).

/// Progress of a compilation, as it happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompileProgress<'a> {
    /// Compiling begins.
    Started,
    /// One module is compiled (or found in the cache): `done` of `total`.
    Module { file: &'a str, done: u64, total: u64 },
}

/// How the kernels came to be ready.
#[derive(Clone, Debug, PartialEq)]
pub enum KernelsReady {
    /// Nothing was compiled, and why (no kernels on this backend, or loaded before).
    Skipped(String),
    Compiled(CompileSummary),
}

/// What a compilation did, for the log.
#[derive(Clone, Debug, PartialEq)]
pub struct CompileSummary {
    pub modules: usize,
    /// The compiler's target (`sm_90`).
    pub arch: String,
    pub compile_s: f64,
    /// Modules taken from the on-disk cache.
    pub from_cache: usize,
    /// Seconds the device took to load the compiled modules.
    pub load_s: f64,
}

impl std::fmt::Display for CompileSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} modules for {} in {:.3} s ({} from the PTX cache), loaded in {:.3} s",
            self.modules, self.arch, self.compile_s, self.from_cache, self.load_s
        )
    }
}

/// A kernel source the compiler rejected, or a compiler failure it could not place.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CompileError {
    /// The compiler rejected the source; `file`/`line` come from its log.
    #[error("{file}:{line}: {message}")]
    Source { file: String, line: u32, message: String, log: String },
    /// NVRTC failed without a diagnostic we could place.
    #[error("NVRTC failed on {file}: {message}")]
    Nvrtc { file: String, message: String },
}

/// Why a backend's kernels are not ready.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum KernelCompileError {
    /// The compiler cannot be used (its version could not be read).
    #[error("{0}")]
    Compiler(String),
    /// A source did not compile for `arch`.
    #[error("{error}")]
    Source { error: CompileError, arch: String },
    /// The compiled modules did not load on the device.
    #[error("the compiled kernels did not load: {message}")]
    Load { message: String, arch: String },
}
