//! Every `SPECDECK_*` environment knob, read here once per process and nowhere else. The
//! knobs are for the GPU machine's A/B runs and profiling (`scripts/gpu/README.md` lists
//! how the scripts use them); a launch records the ones that were set in its event log
//! (`engine::device`), so a recording says what it ran under.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The knobs' values, each as the code that uses it wants it.
#[derive(Clone, Debug, PartialEq)]
pub struct Knobs {
    /// `SPECDECK_CUDA_INCLUDE` (colon-separated folders): where NVRTC looks for
    /// `cuda_bf16.h` first, before `$CUDA_HOME/include` and `/usr/local/cuda/include`.
    pub cuda_include: Vec<PathBuf>,
    /// `SPECDECK_PTX_CACHE`: the folder of the compiled-PTX cache, instead of
    /// `$XDG_CACHE_HOME/specdeck/ptx` or `~/.cache/specdeck/ptx`.
    pub ptx_cache: Option<PathBuf>,
    /// `SPECDECK_KERNEL_DIR`: a folder whose `common.cuh` and `*.cu` files replace the
    /// embedded ones of the same name, so a kernel variant is timed on the GPU machine
    /// without a rebuild (its entry points and arguments must be the embedded file's).
    pub kernel_dir: Option<PathBuf>,
    /// `SPECDECK_PDL=0` turns this off: kernels launch with programmatic dependent launch
    /// allowed (on Hopper and later).
    pub pdl: bool,
    /// `SPECDECK_SKIP_KERNELS=rmsnorm,attention` (prefixes of kernel names): those kernels
    /// are never launched. A profiling knob only: their outputs are then wrong.
    pub skip_kernels: Vec<String>,
    /// `SPECDECK_GEMV=t1_u2` (say): every skinny matmul uses that configuration instead of
    /// the fastest one timed alone.
    pub gemv: Option<String>,
    /// `SPECDECK_PEER_ALLREDUCE=0` turns this off: small tensor-parallel all-reduces go
    /// through peer memory rather than NCCL.
    pub peer_allreduce: bool,
    /// `SPECDECK_FUSED_RESIDUAL=0` turns this off: the residual add rides inside the
    /// row-parallel matmul at tp = 1 rather than being a launch of its own.
    pub fused_residual: bool,
    /// `SPECDECK_GROUPED_ATTENTION=0` turns this off: a step-attention block of a batch or
    /// a long context takes two query heads of its KV head, rather than one (the same bits).
    pub grouped_attention: bool,
    /// `SPECDECK_STEP_MMA=1` (or `0`): every paged step outside deterministic mode takes the
    /// tensor-core attention (or none does), rather than steps of at least 16 sequences.
    pub step_mma: Option<bool>,
    /// `SPECDECK_STORED_EXPERTS=0` turns this off: the GPU reads FP8 and INT4 routed experts
    /// as the checkpoint stores them, rather than dequantized at load.
    pub stored_experts: bool,
    /// `SPECDECK_EXPERT_MMA=0` turns this off: FP8 routed experts kept as stored go through
    /// the tensor cores (kernels/gemv.cu), rather than the CUDA cores (kernels/latent.cu).
    pub expert_mma: bool,
    /// `SPECDECK_NVML=off` turns this off: preflight judges against this machine's GPUs
    /// as NVML lists them.
    pub nvml: bool,
    /// The knobs that were set, as `NAME=value`, in the order above.
    set: Vec<String>,
}

impl Knobs {
    /// This process's knobs, read from the environment on first use.
    pub fn get() -> &'static Knobs {
        static KNOBS: OnceLock<Knobs> = OnceLock::new();
        KNOBS.get_or_init(|| Knobs::from_lookup(|name| std::env::var_os(name)))
    }

    /// The knobs as `lookup` (an environment) gives them.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> Knobs {
        let mut env = Reader { lookup, set: Vec::new() };
        let cuda_include = env.text("SPECDECK_CUDA_INCLUDE").map_or(Vec::new(), |list| std::env::split_paths(&list).collect());
        let ptx_cache = env.os("SPECDECK_PTX_CACHE").map(PathBuf::from);
        let kernel_dir = env.os("SPECDECK_KERNEL_DIR").map(PathBuf::from);
        let pdl = env.text("SPECDECK_PDL").is_none_or(|v| v != "0");
        let skip_kernels =
            env.text("SPECDECK_SKIP_KERNELS").map_or(Vec::new(), |v| v.split(',').filter(|p| !p.is_empty()).map(str::to_string).collect());
        let gemv = env.text("SPECDECK_GEMV");
        let peer_allreduce = env.text("SPECDECK_PEER_ALLREDUCE").is_none_or(|v| v != "0");
        let fused_residual = env.text("SPECDECK_FUSED_RESIDUAL").is_none_or(|v| v != "0");
        let grouped_attention = env.text("SPECDECK_GROUPED_ATTENTION").is_none_or(|v| v != "0");
        let step_mma = env.text("SPECDECK_STEP_MMA").map(|v| v != "0");
        let stored_experts = env.text("SPECDECK_STORED_EXPERTS").is_none_or(|v| v != "0");
        let expert_mma = env.text("SPECDECK_EXPERT_MMA").is_none_or(|v| v != "0");
        let nvml = !env.text("SPECDECK_NVML").is_some_and(|v| v.eq_ignore_ascii_case("off"));
        Knobs {
            cuda_include,
            ptx_cache,
            kernel_dir,
            pdl,
            skip_kernels,
            gemv,
            peer_allreduce,
            fused_residual,
            grouped_attention,
            step_mma,
            stored_experts,
            expert_mma,
            nvml,
            set: env.set,
        }
    }

    /// The knobs that were set, `NAME=value` each, for the event log; `None` when none was.
    pub fn describe_set(&self) -> Option<String> {
        (!self.set.is_empty()).then(|| self.set.join(" "))
    }
}

/// Reads knobs and notes the ones that are set.
struct Reader<F> {
    lookup: F,
    set: Vec<String>,
}

impl<F: Fn(&str) -> Option<OsString>> Reader<F> {
    fn os(&mut self, name: &str) -> Option<OsString> {
        let value = (self.lookup)(name)?;
        self.set.push(format!("{name}={}", value.to_string_lossy()));
        Some(value)
    }

    /// A knob read as text: a value that is not UTF-8 counts as unset, as `std::env::var`
    /// has it.
    fn text(&mut self, name: &str) -> Option<String> {
        self.os(name)?.into_string().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knobs(vars: &[(&str, &str)]) -> Knobs {
        Knobs::from_lookup(|name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| OsString::from(v)))
    }

    #[test]
    fn unset_knobs_keep_the_defaults_and_record_nothing() {
        let k = knobs(&[]);
        assert!(k.pdl && k.peer_allreduce && k.fused_residual && k.grouped_attention && k.stored_experts && k.expert_mma && k.nvml);
        assert_eq!(k.step_mma, None);
        assert_eq!((k.cuda_include.len(), k.skip_kernels.len(), k.ptx_cache.clone(), k.gemv.clone()), (0, 0, None, None));
        assert_eq!(k.kernel_dir, None);
        assert_eq!(k.describe_set(), None);
    }

    #[test]
    fn set_knobs_are_parsed_and_recorded_in_table_order() {
        let k = knobs(&[
            ("SPECDECK_SKIP_KERNELS", "rmsnorm,,attention"),
            ("SPECDECK_PDL", "0"),
            ("SPECDECK_NVML", "OFF"),
            ("SPECDECK_CUDA_INCLUDE", "/a:/b"),
            ("SPECDECK_KERNEL_DIR", "/k"),
            ("SPECDECK_FUSED_RESIDUAL", "1"),
            ("SPECDECK_GROUPED_ATTENTION", "0"),
            ("SPECDECK_STEP_MMA", "1"),
            ("SPECDECK_STORED_EXPERTS", "0"),
            ("SPECDECK_EXPERT_MMA", "0"),
        ]);
        assert_eq!(k.skip_kernels, ["rmsnorm", "attention"]);
        assert_eq!(k.cuda_include, [PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(k.kernel_dir, Some(PathBuf::from("/k")));
        assert!(!k.pdl && !k.nvml && k.fused_residual && k.peer_allreduce && !k.grouped_attention && !k.stored_experts && !k.expert_mma);
        assert_eq!(k.step_mma, Some(true));
        assert_eq!(
            k.describe_set().as_deref(),
            Some("SPECDECK_CUDA_INCLUDE=/a:/b SPECDECK_KERNEL_DIR=/k SPECDECK_PDL=0 SPECDECK_SKIP_KERNELS=rmsnorm,,attention SPECDECK_FUSED_RESIDUAL=1 SPECDECK_GROUPED_ATTENTION=0 SPECDECK_STEP_MMA=1 SPECDECK_STORED_EXPERTS=0 SPECDECK_EXPERT_MMA=0 SPECDECK_NVML=OFF")
        );
    }
}
