//! NVRTC compilation of `kernels/*.cu` for the GPU's architecture at start-up (the
//! `kernel-compile` phase), with an on-disk PTX cache keyed by everything that decides
//! the output: the program text, the architecture, the options and the NVRTC version.
//! A compile error names the kernel file and line.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rayon::prelude::*;
use sha2::{Digest, Sha256};

use super::sources::KernelSource;
use crate::backend::kernels::{CompileError, CompileProgress, CompileSummary, KernelCompileError};
use crate::knobs::Knobs;

/// What NVRTC is asked to produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileTarget {
    /// `sm_90` for an H100/H200.
    pub arch: String,
    pub include_paths: Vec<String>,
    /// (major, minor) of the NVRTC library doing the work.
    pub nvrtc_version: (i32, i32),
}

impl CompileTarget {
    /// The NVRTC options for this target.
    pub fn options(&self) -> Vec<String> {
        let mut opts = vec![format!("--gpu-architecture={}", self.arch), "--std=c++17".to_string()];
        opts.extend(self.include_paths.iter().map(|p| format!("--include-path={p}")));
        opts
    }
}

/// Where `cuda_bf16.h` may live: `$SPECDECK_CUDA_INCLUDE` (colon-separated),
/// `$CUDA_HOME/include`, `/usr/local/cuda/include`; only folders that exist.
pub fn default_include_paths() -> Vec<String> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    candidates.extend(Knobs::get().cuda_include.iter().cloned());
    if let Ok(home) = std::env::var("CUDA_HOME") {
        candidates.push(Path::new(&home).join("include"));
    }
    candidates.push(PathBuf::from("/usr/local/cuda/include"));
    let mut out: Vec<String> = Vec::new();
    for c in candidates {
        let s = c.to_string_lossy().into_owned();
        if c.is_dir() && !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// The loaded NVRTC's version. Call only after the probe found libnvrtc.
pub fn nvrtc_version() -> Result<(i32, i32), String> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters; the library is known to load.
    let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    match status {
        cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS => Ok((major, minor)),
        other => Err(format!("nvrtcVersion failed: {other:?}")),
    }
}

/// PTX files on disk, one per (module, key).
#[derive(Clone, Debug)]
pub struct PtxCache {
    dir: PathBuf,
}

impl PtxCache {
    pub fn new(dir: impl Into<PathBuf>) -> PtxCache {
        PtxCache { dir: dir.into() }
    }

    /// `$SPECDECK_PTX_CACHE`, else `$XDG_CACHE_HOME/specdeck/ptx`, else
    /// `~/.cache/specdeck/ptx`, else a folder under the system temp dir.
    pub fn default_location() -> PathBuf {
        if let Some(d) = &Knobs::get().ptx_cache {
            return d.clone();
        }
        if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
            return Path::new(&d).join("specdeck").join("ptx");
        }
        if let Some(d) = std::env::var_os("HOME") {
            return Path::new(&d).join(".cache").join("specdeck").join("ptx");
        }
        std::env::temp_dir().join("specdeck-ptx")
    }

    /// The cache key: a SHA-256 over the format version, the target and the program text.
    pub fn key(program_text: &str, target: &CompileTarget) -> String {
        let mut h = Sha256::new();
        h.update(b"specdeck-ptx-v1\0");
        h.update(format!("nvrtc {}.{}\0", target.nvrtc_version.0, target.nvrtc_version.1).as_bytes());
        for opt in target.options() {
            h.update(opt.as_bytes());
            h.update(b"\0");
        }
        h.update(program_text.as_bytes());
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    fn path(&self, module: &str, key: &str) -> PathBuf {
        self.dir.join(format!("{module}-{key}.ptx"))
    }

    /// A cached PTX text, if a complete one is there.
    pub fn get(&self, module: &str, key: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.path(module, key)).ok()?;
        // A PTX file always starts with comments and `.version`; anything else is a torn
        // or foreign file and is compiled afresh.
        text.contains(".version").then_some(text)
    }

    /// Store atomically (write a temporary file, then rename), so a crash or a parallel
    /// start never leaves a half-written PTX under the final name. The temporary name is
    /// unique per writer: tensor-parallel ranks compile on their own threads at once.
    pub fn put(&self, module: &str, key: &str, ptx: &str) -> std::io::Result<()> {
        static WRITER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        std::fs::create_dir_all(&self.dir)?;
        let writer = WRITER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = self.dir.join(format!(".{module}-{key}.{}-{writer}.tmp", std::process::id()));
        std::fs::write(&tmp, ptx)?;
        std::fs::rename(&tmp, self.path(module, key))
    }
}

/// One compiled module.
#[derive(Clone, Debug)]
pub struct CompiledModule {
    pub source: &'static KernelSource,
    pub ptx: String,
    pub from_cache: bool,
}

/// The first error of an NVRTC log, as (file, line, message). NVRTC writes
/// `kernels/rope.cu(12): error: identifier "x" is undefined`.
pub fn first_error(log: &str) -> Option<(String, u32, String)> {
    let re = regex::Regex::new(r"(?m)^(?P<file>[^\s()][^()]*)\((?P<line>\d+)\): (?:catastrophic )?error[^:]*: (?P<msg>.*)$")
        .expect("static regex");
    let c = re.captures(log)?;
    Some((c["file"].to_string(), c["line"].parse().ok()?, c["msg"].trim().to_string()))
}

/// Compile one source with NVRTC (no cache).
pub fn compile_one(source: &KernelSource, target: &CompileTarget) -> Result<String, CompileError> {
    let opts = cudarc::nvrtc::CompileOptions { name: Some(source.file.to_string()), options: target.options(), ..Default::default() };
    match cudarc::nvrtc::compile_ptx_with_opts(source.program_text()?, opts) {
        Ok(ptx) => Ok(ptx.to_src()),
        Err(cudarc::nvrtc::CompileError::CompileError { nvrtc, log, .. }) => {
            let log = log.to_string_lossy().into_owned();
            Err(match first_error(&log) {
                Some((file, line, message)) => CompileError::Source { file, line, message, log },
                None => CompileError::Nvrtc { file: source.file.to_string(), message: format!("{nvrtc:?}: {log}") },
            })
        }
        Err(other) => Err(CompileError::Nvrtc { file: source.file.to_string(), message: format!("{other:?}") }),
    }
}

/// Compile every source (in parallel), using and filling the cache. `on_done` is called
/// once per module as it finishes, from the worker threads.
pub fn compile_sources(
    sources: &'static [KernelSource],
    target: &CompileTarget,
    cache: Option<&PtxCache>,
    on_done: &(dyn Fn(&CompiledModule) + Sync),
) -> Result<Vec<CompiledModule>, CompileError> {
    sources
        .par_iter()
        .map(|source| {
            let key = PtxCache::key(&source.program_text()?, target);
            let cached = cache.and_then(|c| c.get(source.module_name(), &key));
            let module = match cached {
                Some(ptx) => CompiledModule { source, ptx, from_cache: true },
                None => {
                    let ptx = compile_one(source, target)?;
                    if let Some(c) = cache {
                        // A read-only cache folder costs a recompile next time, nothing more.
                        let _ = c.put(source.module_name(), &key, &ptx);
                    }
                    CompiledModule { source, ptx, from_cache: false }
                }
            };
            on_done(&module);
            Ok(module)
        })
        .collect()
}

/// Compile every source (`compile_sources`) and load the modules with `load` (the driver
/// turning them into machine code for a GPU is part of compiling): `Started`, then one
/// `Module` per module as it finishes, reported to `progress` from the worker threads.
pub fn compile_then(
    sources: &'static [KernelSource],
    target: &CompileTarget,
    cache: Option<&PtxCache>,
    progress: &(dyn Fn(CompileProgress<'_>) + Sync),
    load: impl FnOnce(&[CompiledModule]) -> Result<(), String>,
) -> Result<(Vec<CompiledModule>, CompileSummary), KernelCompileError> {
    progress(CompileProgress::Started);
    let started = Instant::now();
    let done = AtomicU64::new(0);
    let total = sources.len() as u64;
    let modules = compile_sources(sources, target, cache, &|m: &CompiledModule| {
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        progress(CompileProgress::Module { file: m.source.file, done: n, total });
    })
    .map_err(|error| KernelCompileError::Source { error, arch: target.arch.clone() })?;
    let compile_s = started.elapsed().as_secs_f64();
    load(&modules).map_err(|message| KernelCompileError::Load { message, arch: target.arch.clone() })?;
    let summary = CompileSummary {
        modules: modules.len(),
        arch: target.arch.clone(),
        compile_s,
        from_cache: modules.iter().filter(|m| m.from_cache).count(),
        load_s: started.elapsed().as_secs_f64() - compile_s,
    };
    Ok((modules, summary))
}

#[cfg(test)]
mod tests {
    use super::super::sources::{source_of, SOURCES};
    use super::*;

    fn target(arch: &str) -> CompileTarget {
        CompileTarget { arch: arch.into(), include_paths: vec!["/usr/local/cuda/include".into()], nvrtc_version: (13, 0) }
    }

    #[test]
    fn cache_key_changes_with_text_arch_and_nvrtc_version() {
        let text = source_of("rope_f32").unwrap().program_text_from(None).unwrap();
        let k = PtxCache::key(&text, &target("sm_90"));
        assert_eq!(k.len(), 64);
        assert_eq!(k, PtxCache::key(&text, &target("sm_90")));
        assert_ne!(k, PtxCache::key(&text, &target("sm_80")));
        assert_ne!(k, PtxCache::key(&format!("{text} "), &target("sm_90")));
        let mut newer = target("sm_90");
        newer.nvrtc_version = (13, 1);
        assert_ne!(k, PtxCache::key(&text, &newer));
    }

    #[test]
    fn cache_round_trips_and_ignores_torn_files() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PtxCache::new(dir.path().join("ptx"));
        assert_eq!(cache.get("rope", "abc"), None);
        let ptx = "//\n// Generated by NVIDIA NVVM Compiler\n.version 9.0\n.target sm_90\n";
        cache.put("rope", "abc", ptx).unwrap();
        assert_eq!(cache.get("rope", "abc").as_deref(), Some(ptx));
        assert_eq!(cache.get("rope", "abd"), None);
        std::fs::write(dir.path().join("ptx").join("rope-abc.ptx"), "").unwrap();
        assert_eq!(cache.get("rope", "abc"), None);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("ptx"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn nvrtc_log_errors_name_file_and_line() {
        let log = "kernels/common.cuh(3): warning #177-D: variable \"x\" was declared but never referenced\n\
                   kernels/rope.cu(17): error: identifier \"half2x\" is undefined\n\n1 error detected in the compilation of \"kernels/rope.cu\".\n";
        assert_eq!(first_error(log), Some(("kernels/rope.cu".to_string(), 17, "identifier \"half2x\" is undefined".to_string())));
        assert_eq!(first_error("all good\n"), None);
    }

    /// Needs libnvrtc (13.x) on the loader path; `scripts/nvrtc-check.sh` fetches the
    /// NVRTC wheel into a scratch folder and runs these.
    fn nvrtc_target() -> CompileTarget {
        assert!(
            super::super::probe::CudaLibrary::Nvrtc.is_present(),
            "libnvrtc not found: run scripts/nvrtc-check.sh (it sets LD_LIBRARY_PATH)"
        );
        CompileTarget { arch: "sm_90".into(), include_paths: default_include_paths(), nvrtc_version: nvrtc_version().unwrap() }
    }

    #[test]
    #[ignore = "needs libnvrtc: run scripts/nvrtc-check.sh"]
    fn every_kernel_compiles_for_sm_90_and_is_cached() {
        let target = nvrtc_target();
        let dir = tempfile::tempdir().unwrap();
        let cache = PtxCache::new(dir.path());
        let progress = AtomicU64::new(0);
        let count = |p: CompileProgress<'_>| {
            if let CompileProgress::Module { .. } = p {
                progress.fetch_add(1, Ordering::Relaxed);
            }
        };
        let (modules, cold) = compile_then(SOURCES, &target, Some(&cache), &count, |_| Ok(())).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(modules.len(), SOURCES.len());
        for m in &modules {
            assert!(!m.from_cache);
            assert!(m.ptx.contains(".target sm_90"), "{}", m.source.file);
            for f in m.source.functions {
                assert!(m.ptx.contains(&format!(".entry {f}(")), "{} lacks {f}", m.source.file);
            }
        }
        let (again, cached) = compile_then(SOURCES, &target, Some(&cache), &count, |_| Ok(())).unwrap();
        assert!(again.iter().all(|m| m.from_cache));
        // The compile times, for BENCHMARKS.md.
        eprintln!("kernel-compile: {cold}\nkernel-compile: {cached}");
        let progress = progress.into_inner() as usize;
        assert_eq!(progress, 2 * SOURCES.len());
    }

    #[test]
    #[ignore = "needs libnvrtc: run scripts/nvrtc-check.sh"]
    fn a_broken_kernel_reports_its_file_and_line() {
        let target = nvrtc_target();
        static BROKEN: KernelSource = KernelSource {
            file: "kernels/broken.cu",
            text: "extern \"C\" __global__ void broken(float* x) {\n    x[0] = undefined_name;\n}\n",
            functions: &["broken"],
        };
        match compile_one(&BROKEN, &target) {
            Err(CompileError::Source { file, line, message, .. }) => {
                assert_eq!((file.as_str(), line), ("kernels/broken.cu", 2));
                assert!(message.contains("undefined_name"), "{message}");
            }
            other => panic!("expected a placed error, got {other:?}"),
        }
    }
}
